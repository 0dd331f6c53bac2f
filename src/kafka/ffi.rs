//! The guard and helpers of the librdkafka calls that rust-rdkafka does not wrap
//! (`kafka::admin`, `kafka::topic_id`).

use std::ffi::CStr;

use rdkafka::bindings as rd;

/// Owns a librdkafka handle and destroys it on drop.
pub(crate) struct Handle<T> {
    pub(crate) ptr: *mut T,
    pub(crate) destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `ptr` came from the matching librdkafka constructor and is destroyed once.
            unsafe { (self.destroy)(self.ptr) }
        }
    }
}

/// Admin options for `op` on client `rk` with a request timeout of `timeout_ms`.
///
/// # Safety
/// `rk` must be a live client handle that outlives the options.
pub(crate) unsafe fn admin_options(
    rk: *mut rd::rd_kafka_t,
    op: rd::rd_kafka_admin_op_t,
    timeout_ms: std::ffi::c_int,
) -> Handle<rd::rd_kafka_AdminOptions_t> {
    let options = Handle {
        ptr: rd::rd_kafka_AdminOptions_new(rk, op),
        destroy: rd::rd_kafka_AdminOptions_destroy,
    };
    let mut errbuf = [0 as std::ffi::c_char; 256];
    // Only fails for an out-of-range timeout, which the callers' conversion rules out.
    rd::rd_kafka_AdminOptions_set_request_timeout(
        options.ptr,
        timeout_ms,
        errbuf.as_mut_ptr(),
        errbuf.len(),
    );
    options
}

/// A private event queue of client `rk`.
///
/// # Safety
/// `rk` must be a live client handle that outlives the queue.
pub(crate) unsafe fn queue(rk: *mut rd::rd_kafka_t) -> Handle<rd::rd_kafka_queue_t> {
    Handle {
        ptr: rd::rd_kafka_queue_new(rk),
        destroy: rd::rd_kafka_queue_destroy,
    }
}

/// Text of a librdkafka error object, `None` for a null pointer or no error.
///
/// # Safety
/// `err` must be null or a live `rd_kafka_error_t`.
pub(crate) unsafe fn error_text(err: *const rd::rd_kafka_error_t) -> Option<String> {
    if err.is_null()
        || rd::rd_kafka_error_code(err) == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    {
        return None;
    }
    Some(
        CStr::from_ptr(rd::rd_kafka_error_string(err))
            .to_string_lossy()
            .into_owned(),
    )
}

/// Text of a response error code.
pub(crate) fn code_text(code: rd::rd_kafka_resp_err_t) -> String {
    // SAFETY: err2str returns a static string for every code.
    unsafe {
        CStr::from_ptr(rd::rd_kafka_err2str(code))
            .to_string_lossy()
            .into_owned()
    }
}
