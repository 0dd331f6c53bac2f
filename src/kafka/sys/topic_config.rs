//! IncrementalAlterConfigs of topics (KIP-339) through librdkafka; the caller is
//! `kafka::topic_config`.

use std::ffi::CString;
use std::fmt::Debug;
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::handle::{array, code_error, error_of, request, text, Handle};
use crate::kafka::error::{Code, Error};

/// Blocking: applies `changes` to each topic in one request (one resource per topic); one
/// result per topic, in order. `op(change)` is the key and the value to set, `None` to delete
/// the topic's own value. The outer error means the request failed as a whole.
pub fn alter_topic_configs<C: ClientContext, O: Debug>(
    admin: &AdminClient<C>,
    changes: &[(String, Vec<O>)],
    op: impl Fn(&O) -> (&str, Option<&str>),
    timeout: Duration,
) -> Result<Vec<Result<(), Error>>, Error> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("alter configs of {} topic(s)", changes.len());
    let c = |s: &str| CString::new(s).map_err(|e| Error::nul("", s, e));
    let rk = admin.inner().native_ptr();
    let mut resources: Vec<Handle<rd::rd_kafka_ConfigResource_t>> = Vec::new();
    for (topic, ops) in changes {
        let name = c(topic)?;
        // SAFETY: a NUL-terminated name librdkafka copies; the resource is ours to destroy,
        // after the answer was read.
        let r = unsafe {
            Handle::new(
                rd::rd_kafka_ConfigResource_new(
                    rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                    name.as_ptr(),
                ),
                rd::rd_kafka_ConfigResource_destroy,
            )
        };
        for change in ops {
            let (key, value) = op(change);
            let (key, value) = (c(key)?, value.map(c).transpose()?);
            let kind = match value {
                Some(_) => rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
                None => rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
            };
            let value_ptr = value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
            // SAFETY: a live resource; NUL-terminated strings librdkafka copies (a null value
            // for a delete); the returned error is ours to destroy and read before that.
            let e = unsafe {
                let err = Handle::new(
                    rd::rd_kafka_ConfigResource_add_incremental_config(
                        r.ptr(),
                        key.as_ptr(),
                        kind,
                        value_ptr,
                    ),
                    rd::rd_kafka_error_destroy,
                );
                error_of(err.ptr())
            };
            if let Some(e) = e {
                return Err(e.context(format!("topic {topic}: {change:?}")));
            }
        }
        resources.push(r);
    }
    let mut ptrs: Vec<*mut rd::rd_kafka_ConfigResource_t> =
        resources.iter().map(Handle::ptr).collect();
    // SAFETY: `rk` is borrowed from `admin` for the call; the resources live across it
    // (librdkafka copies them when the request is enqueued).
    let event = unsafe {
        request(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
            timeout,
            &what,
            |options, queue| {
                rd::rd_kafka_IncrementalAlterConfigs(
                    rk,
                    ptrs.as_mut_ptr(),
                    ptrs.len(),
                    options,
                    queue,
                )
            },
        )?
    };
    // SAFETY: the result and its resources belong to `event`, alive until the end of this
    // function; names and errors are copied out.
    let answers: Vec<(String, Result<(), Error>)> = unsafe {
        let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr());
        if result.is_null() {
            return Err(Error::Protocol("unexpected event type".into()).context(what));
        }
        let mut count = 0usize;
        array(
            rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut count),
            count,
        )
        .iter()
        .map(|r| {
            let name = text(rd::rd_kafka_ConfigResource_name(*r));
            let code = rd::rd_kafka_ConfigResource_error(*r);
            if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                return (name, Ok(()));
            }
            let msg = rd::rd_kafka_ConfigResource_error_string(*r);
            let err = if msg.is_null() {
                code_error(code)
            } else {
                Error::code(Code(code as i32), text(msg))
            };
            (name, Err(err))
        })
        .collect()
    };
    // Answers carry the topic name; match by it rather than by position.
    Ok(changes
        .iter()
        .map(
            |(topic, _)| match answers.iter().find(|(n, _)| n == topic) {
                Some((_, Ok(()))) => Ok(()),
                Some((_, Err(e))) => {
                    Err(e.clone().context(format!("alter configs of topic {topic}")))
                }
                None => Err(Error::Protocol("missing from the answer".into())
                    .context(format!("alter configs of topic {topic}"))),
            },
        )
        .collect())
}
