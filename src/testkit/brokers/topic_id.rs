//! Topic ids through librdkafka's DescribeTopics admin call.
//!
//! rdkafka 0.39 exposes neither topic ids in `Metadata` nor a `describe_topics` wrapper, but
//! librdkafka 2.12 has `rd_kafka_DescribeTopics`, whose result carries the topic id (from a
//! Metadata v10+ response). This is the only `unsafe` in the testkit; every handle is owned
//! by a guard that destroys it.

use std::ffi::{c_char, c_int, CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::DefaultClientContext;
use rdkafka::ClientConfig;

/// Destroys a librdkafka handle on drop.
struct Owned<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the matching librdkafka constructor and is destroyed once.
            unsafe { (self.destroy)(self.ptr) }
        }
    }
}

/// Blocking: the base64 topic id of `topic`, `None` when the broker reports the all-zero id
/// (no id support). Errors are strings naming the topic.
pub(super) fn describe_topic_id(
    bootstrap: &str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<String>, String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("admin client for {bootstrap}: {e}"))?;
    let rk = admin.inner().native_ptr();
    let name = CString::new(topic).map_err(|e| format!("topic name {topic:?}: {e}"))?;
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);

    // SAFETY: all handles are created from the live client `rk`, destroyed by guards in
    // reverse order, and result pointers are only read while `event` is alive.
    unsafe {
        let queue = Owned {
            ptr: rd::rd_kafka_queue_new(rk),
            destroy: rd::rd_kafka_queue_destroy,
        };
        let options = Owned {
            ptr: rd::rd_kafka_AdminOptions_new(
                rk,
                rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
            ),
            destroy: rd::rd_kafka_AdminOptions_destroy,
        };
        let mut errbuf = [0 as c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr,
            timeout_ms,
            errbuf.as_mut_ptr(),
            errbuf.len(),
        );
        let mut names = [name.as_ptr()];
        let topics = Owned {
            ptr: rd::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), names.len()),
            destroy: rd::rd_kafka_TopicCollection_destroy,
        };
        rd::rd_kafka_DescribeTopics(rk, topics.ptr, options.ptr, queue.ptr);
        // A little slack over the request timeout so the request's own timeout reports first.
        let event = Owned {
            ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(1000)),
            destroy: rd::rd_kafka_event_destroy,
        };
        if event.ptr.is_null() {
            return Err(format!(
                "describe topic {topic}: no answer within {timeout:?}"
            ));
        }
        if rd::rd_kafka_event_error(event.ptr)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            let msg = CStr::from_ptr(rd::rd_kafka_event_error_string(event.ptr));
            return Err(format!("describe topic {topic}: {}", msg.to_string_lossy()));
        }
        let result = rd::rd_kafka_event_DescribeTopics_result(event.ptr);
        if result.is_null() {
            return Err(format!("describe topic {topic}: unexpected event type"));
        }
        let mut count = 0usize;
        let descs = rd::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        let descs: &[*const rd::rd_kafka_TopicDescription_t] = if descs.is_null() || count == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(descs, count)
        };
        let desc = descs
            .iter()
            .copied()
            .find(|d| {
                CStr::from_ptr(rd::rd_kafka_TopicDescription_name(*d)).to_bytes()
                    == topic.as_bytes()
            })
            .ok_or_else(|| format!("describe topic {topic}: topic missing from the answer"))?;
        let err = rd::rd_kafka_TopicDescription_error(desc);
        if !err.is_null()
            && rd::rd_kafka_error_code(err) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            let msg = CStr::from_ptr(rd::rd_kafka_error_string(err));
            return Err(format!("describe topic {topic}: {}", msg.to_string_lossy()));
        }
        let id = rd::rd_kafka_TopicDescription_topic_id(desc);
        if id.is_null()
            || (rd::rd_kafka_Uuid_most_significant_bits(id) == 0
                && rd::rd_kafka_Uuid_least_significant_bits(id) == 0)
        {
            return Ok(None);
        }
        let text = rd::rd_kafka_Uuid_base64str(id);
        if text.is_null() {
            return Ok(None);
        }
        Ok(Some(CStr::from_ptr(text).to_string_lossy().into_owned()))
    }
}
