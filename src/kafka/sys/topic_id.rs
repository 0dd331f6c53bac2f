//! Topic ids (KIP-516) through librdkafka's DescribeTopics admin call.
//!
//! rdkafka 0.39 exposes neither topic ids in `Metadata` nor a `describe_topics` wrapper, but
//! librdkafka 2.12 has `rd_kafka_DescribeTopics`, whose result carries the topic id (from a
//! Metadata v10+ response). Offset validation compares ids to tell a recreated topic from
//! the one it replicated; the testkit reads them to check that. This is the only place that
//! calls it; every librdkafka handle is owned by a guard that destroys it.

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::handle::{admin_options, array, error_of, queue, text, timeout_ms, Handle};
use crate::kafka::error::{Code, Error};

/// The id of one described topic: `Ok(Some(base64))`, `Ok(None)` when the broker reports the
/// all-zero id (no id support), or the broker's error for that topic (e.g. unknown topic).
/// Text, not [`Error`]: the test kit builds these answers too, and its callers report text.
pub type TopicIdResult = Result<Option<String>, String>;

/// Blocking: the topic ids of `topics`, described in one request through `admin`'s client
/// (its security settings apply). The outer error means the request as a whole failed (no
/// answer within `timeout`, not supported, not authorized); errors name the topics.
///
/// librdkafka sends DescribeTopics to the controller: on a cluster that reports none (the
/// librdkafka mock cluster) the call only ends with `timeout`, so keep it short.
pub fn describe_topic_ids<C: ClientContext>(
    admin: &AdminClient<C>,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, TopicIdResult>, Error> {
    let mut out = BTreeMap::new();
    if topics.is_empty() {
        return Ok(out);
    }
    let what = || {
        if topics.len() == 1 {
            format!("describe topic {}", topics[0])
        } else {
            format!("describe {} topics ({}, ...)", topics.len(), topics[0])
        }
    };
    let names: Vec<CString> = topics
        .iter()
        .map(|t| CString::new(t.as_str()).map_err(|e| Error::nul("topic name", t, e)))
        .collect::<Result<_, _>>()?;
    let mut name_ptrs: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let rk = admin.inner().native_ptr();
    let timeout_ms = timeout_ms(timeout);
    // SAFETY: the live client `rk` (borrowed from `admin` for the call); queue and options
    // are ours, destroyed by their guards after the answer was read.
    let (queue, options) = unsafe {
        (
            queue(rk),
            admin_options(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
                timeout_ms,
            ),
        )
    };
    // SAFETY: the names live across the call (librdkafka copies them into the collection,
    // and the request copies the collection); the collection and the answer event are ours.
    let event = unsafe {
        let collection = Handle::new(
            rd::rd_kafka_TopicCollection_of_topic_names(name_ptrs.as_mut_ptr(), name_ptrs.len()),
            rd::rd_kafka_TopicCollection_destroy,
        );
        rd::rd_kafka_DescribeTopics(rk, collection.ptr(), options.ptr(), queue.ptr());
        // A little slack over the request timeout so the request's own timeout reports first.
        Handle::new(
            rd::rd_kafka_queue_poll(queue.ptr(), timeout_ms.saturating_add(1000)),
            rd::rd_kafka_event_destroy,
        )
    };
    if event.is_null() {
        return Err(Error::Timeout(timeout).context(what()));
    }
    // SAFETY: the event's result, descriptions, names, ids and errors belong to `event`,
    // alive until the end of this block; everything is copied out.
    unsafe {
        let code = rd::rd_kafka_event_error(event.ptr());
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let msg = text(rd::rd_kafka_event_error_string(event.ptr()));
            return Err(Error::code(Code(code as i32), msg).context(what()));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event.ptr());
        if result.is_null() {
            return Err(Error::Protocol("unexpected event type".into()).context(what()));
        }
        let mut count = 0usize;
        let descs = array(
            rd::rd_kafka_DescribeTopics_result_topics(result, &mut count),
            count,
        );
        for desc in descs.iter().copied() {
            let name = text(rd::rd_kafka_TopicDescription_name(desc));
            let id = match error_of(rd::rd_kafka_TopicDescription_error(desc)) {
                Some(e) => Err(format!("describe topic {name}: {e}")),
                None => Ok(uuid_text(rd::rd_kafka_TopicDescription_topic_id(desc))),
            };
            out.insert(name, id);
        }
    }
    for t in topics {
        out.entry(t.clone())
            .or_insert_with(|| Err(format!("describe topic {t}: topic missing from the answer")));
    }
    Ok(out)
}

/// Base64 text of a topic id; `None` for a null pointer or the all-zero id.
///
/// # Safety
/// `id` is null or points to a live `rd_kafka_Uuid_t`.
unsafe fn uuid_text(id: *const rd::rd_kafka_Uuid_t) -> Option<String> {
    if id.is_null() {
        return None;
    }
    // SAFETY: a live id (the caller's contract); its base64 text is cached in it and copied.
    unsafe {
        if rd::rd_kafka_Uuid_most_significant_bits(id) == 0
            && rd::rd_kafka_Uuid_least_significant_bits(id) == 0
        {
            return None;
        }
        let text = rd::rd_kafka_Uuid_base64str(id);
        (!text.is_null()).then(|| CStr::from_ptr(text).to_string_lossy().into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::client::DefaultClientContext;
    use rdkafka::ClientConfig;

    #[test]
    fn empty_request_needs_no_broker() {
        // Nothing listens on this port; an empty request must not wait for it.
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .create()
            .unwrap();
        assert_eq!(
            describe_topic_ids(&admin, &[], Duration::from_millis(1)),
            Ok(BTreeMap::new())
        );
    }

    #[test]
    fn unreachable_cluster_is_an_error_naming_the_topics() {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .create()
            .unwrap();
        let one = describe_topic_ids(&admin, &["orders".into()], Duration::from_millis(200));
        let err = one.unwrap_err().to_string();
        assert!(err.contains("describe topic orders"), "{err}");
        let two = describe_topic_ids(
            &admin,
            &["orders".into(), "pay".into()],
            Duration::from_millis(200),
        );
        let err = two.unwrap_err().to_string();
        assert!(err.contains("describe 2 topics (orders, ...)"), "{err}");
        assert!(
            describe_topic_ids(&admin, &["bad\0name".into()], Duration::from_millis(1)).is_err()
        );
    }

    #[test]
    fn null_id_is_none() {
        // SAFETY: a null pointer is explicitly allowed.
        assert_eq!(unsafe { uuid_text(std::ptr::null()) }, None);
    }
}
