//! IncrementalAlterConfigs of topics (KIP-339) through librdkafka: rust-rdkafka 0.39 wraps
//! only the legacy AlterConfigs, which replaces a topic's whole config set (it would drop
//! what mirrorflow must leave alone, such as an excluded `min.insync.replicas`) and which
//! newer brokers no longer answer. The config sync's only caller.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::acl::request;
use super::ffi::{error_text, Handle};

/// One IncrementalAlterConfigs operation on a target topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigChange {
    /// SET `name` to `value` on the topic.
    Set(String, String),
    /// DELETE the topic's own value of `name` (the target's default applies again).
    Delete(String),
}

impl ConfigChange {
    /// The `op` label of `mirrorflow_worker_topic_config_changes_total`.
    pub fn op(&self) -> &'static str {
        match self {
            ConfigChange::Set(..) => "set",
            ConfigChange::Delete(_) => "delete",
        }
    }
}

/// Blocking: applies `changes` to each topic in one request (one resource per topic); one
/// result per topic, in order. The outer error means the request failed as a whole.
pub fn alter_topic_configs<C: ClientContext>(
    admin: &AdminClient<C>,
    changes: &[(String, Vec<ConfigChange>)],
    timeout: Duration,
) -> Result<Vec<Result<(), String>>, String> {
    if changes.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("alter configs of {} topic(s)", changes.len());
    let c = |s: &str| CString::new(s).map_err(|e| format!("{s:?}: {e}"));
    let rk = admin.inner().native_ptr();
    // SAFETY: every resource is created here and destroyed by its guard after the answer
    // was read; librdkafka copies the resources when the request is enqueued; result
    // pointers are read only while `event` is alive.
    unsafe {
        let mut resources: Vec<Handle<rd::rd_kafka_ConfigResource_t>> = Vec::new();
        for (topic, ops) in changes {
            let name = c(topic)?;
            let r = Handle {
                ptr: rd::rd_kafka_ConfigResource_new(
                    rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                    name.as_ptr(),
                ),
                destroy: rd::rd_kafka_ConfigResource_destroy,
            };
            for op in ops {
                let (key, value, kind) = match op {
                    ConfigChange::Set(k, v) => (
                        c(k)?,
                        Some(c(v)?),
                        rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET,
                    ),
                    ConfigChange::Delete(k) => (
                        c(k)?,
                        None,
                        rd::rd_kafka_AlterConfigOpType_t::RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE,
                    ),
                };
                let value_ptr = value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
                let err = Handle {
                    ptr: rd::rd_kafka_ConfigResource_add_incremental_config(
                        r.ptr,
                        key.as_ptr(),
                        kind,
                        value_ptr,
                    ),
                    destroy: rd::rd_kafka_error_destroy,
                };
                if let Some(e) = error_text(err.ptr) {
                    return Err(format!("topic {topic}: {op:?}: {e}"));
                }
            }
            resources.push(r);
        }
        let mut ptrs: Vec<*mut rd::rd_kafka_ConfigResource_t> =
            resources.iter().map(|r| r.ptr).collect();
        let event = request(
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
        )?;
        let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event.ptr);
        if result.is_null() {
            return Err(format!("{what}: unexpected event type"));
        }
        let mut count = 0usize;
        let res = rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut count);
        let res: &[*const rd::rd_kafka_ConfigResource_t] = if res.is_null() || count == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(res, count)
        };
        // Answers carry the topic name; match by it rather than by position.
        let answer = |topic: &str| -> Result<(), String> {
            let r = res
                .iter()
                .find(|r| {
                    CStr::from_ptr(rd::rd_kafka_ConfigResource_name(**r)).to_bytes()
                        == topic.as_bytes()
                })
                .ok_or_else(|| {
                    format!("alter configs of topic {topic}: missing from the answer")
                })?;
            if rd::rd_kafka_ConfigResource_error(*r)
                == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                return Ok(());
            }
            let msg = rd::rd_kafka_ConfigResource_error_string(*r);
            let msg = if msg.is_null() {
                super::ffi::code_text(rd::rd_kafka_ConfigResource_error(*r))
            } else {
                CStr::from_ptr(msg).to_string_lossy().into_owned()
            };
            Err(format!("alter configs of topic {topic}: {msg}"))
        };
        Ok(changes.iter().map(|(t, _)| answer(t)).collect())
    }
}
