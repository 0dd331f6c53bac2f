//! Owned librdkafka handles and the admin-request plumbing the admin calls share.

use std::ffi::{c_char, c_int, CStr};
use std::time::Duration;

use rdkafka::bindings as rd;

use crate::kafka::error::{Code, Error};

/// Owns a librdkafka handle and destroys it on drop.
pub(super) struct Handle<T> {
    ptr: *mut T,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Handle<T> {
    /// Takes ownership of `ptr` (null: nothing to destroy).
    ///
    /// # Safety
    /// `ptr` is null or a handle the caller owns, which `destroy` releases; nothing else
    /// releases it.
    pub(super) unsafe fn new(ptr: *mut T, destroy: unsafe extern "C" fn(*mut T)) -> Self {
        Self { ptr, destroy }
    }

    pub(super) fn ptr(&self) -> *mut T {
        self.ptr
    }

    pub(super) fn is_null(&self) -> bool {
        self.ptr.is_null()
    }
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: `new`'s contract: an owned handle, released only here, once.
            unsafe { (self.destroy)(self.ptr) }
        }
    }
}

/// Admin options for `op` on client `rk` with a request timeout of `timeout_ms`.
///
/// # Safety
/// `rk` must be a live client handle that outlives the options.
pub(super) unsafe fn admin_options(
    rk: *mut rd::rd_kafka_t,
    op: rd::rd_kafka_admin_op_t,
    timeout_ms: c_int,
) -> Handle<rd::rd_kafka_AdminOptions_t> {
    // SAFETY: a live client (the caller's contract); the options are ours to destroy.
    let options = unsafe {
        Handle::new(
            rd::rd_kafka_AdminOptions_new(rk, op),
            rd::rd_kafka_AdminOptions_destroy,
        )
    };
    let mut errbuf = [0 as c_char; 256];
    // SAFETY: live options and a writable buffer of the length given. Only fails for an
    // out-of-range timeout, which the callers' conversion rules out.
    unsafe {
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options.ptr(),
            timeout_ms,
            errbuf.as_mut_ptr(),
            errbuf.len(),
        )
    };
    options
}

/// A private event queue of client `rk`.
///
/// # Safety
/// `rk` must be a live client handle that outlives the queue.
pub(super) unsafe fn queue(rk: *mut rd::rd_kafka_t) -> Handle<rd::rd_kafka_queue_t> {
    // SAFETY: a live client (the caller's contract); the queue is ours to destroy.
    unsafe { Handle::new(rd::rd_kafka_queue_new(rk), rd::rd_kafka_queue_destroy) }
}

/// A request timeout in librdkafka's milliseconds (saturating).
pub(super) fn timeout_ms(timeout: Duration) -> c_int {
    c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX)
}

/// A librdkafka error object as an error (its code and text), `None` for a null pointer or
/// no error.
///
/// # Safety
/// `err` must be null or a live `rd_kafka_error_t`.
pub(super) unsafe fn error_of(err: *const rd::rd_kafka_error_t) -> Option<Error> {
    // SAFETY: a live error object (the caller's contract); its string lives with it and is
    // copied before return.
    unsafe {
        if err.is_null() {
            return None;
        }
        let code = rd::rd_kafka_error_code(err);
        if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        Some(Error::code(
            Code(code as i32),
            text(rd::rd_kafka_error_string(err)),
        ))
    }
}

/// A response error code as an error, with librdkafka's text.
pub(super) fn code_error(code: rd::rd_kafka_resp_err_t) -> Error {
    Error::code(Code(code as i32), code_text(code))
}

/// Text of a response error code.
pub(super) fn code_text(code: rd::rd_kafka_resp_err_t) -> String {
    // SAFETY: err2str returns a static NUL-terminated string for every code.
    unsafe { text(rd::rd_kafka_err2str(code)) }
}

/// An owned copy of a C string; empty for a null pointer.
///
/// # Safety
/// `p` is null or a NUL-terminated string valid for the call.
pub(super) unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Text of a librdkafka error-string buffer (the errstr buffers of the constructors).
pub(super) fn buf_text(buf: &[c_char]) -> String {
    let end = buf.iter().position(|c| *c == 0).unwrap_or(buf.len());
    let bytes: Vec<u8> = buf[..end].iter().map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The `count` elements at `ptr` (an array of a result librdkafka owns) as a slice; empty for
/// a null pointer.
///
/// # Safety
/// `ptr` is null or points to `count` initialized elements that outlive `'a`.
pub(super) unsafe fn array<'a, T>(ptr: *const T, count: usize) -> &'a [T] {
    if ptr.is_null() || count == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(ptr, count) }
    }
}

/// Runs one admin request on a private queue and returns its answer event (its error, if
/// the request failed as a whole, as `Err`).
///
/// # Safety
/// `rk` must be a live client handle for the whole call; `submit` must enqueue exactly one
/// request on the queue it is given, with the options it is given, passing only handles
/// that live across the call.
pub(super) unsafe fn request(
    rk: *mut rd::rd_kafka_t,
    op: rd::rd_kafka_admin_op_t,
    timeout: Duration,
    what: &str,
    submit: impl FnOnce(*mut rd::rd_kafka_AdminOptions_t, *mut rd::rd_kafka_queue_t),
) -> Result<Handle<rd::rd_kafka_event_t>, Error> {
    let timeout_ms = timeout_ms(timeout);
    // SAFETY: `rk` lives for the call (the caller's contract); queue and options are
    // destroyed by their guards after the answer was taken.
    let (queue, options) = unsafe { (queue(rk), admin_options(rk, op, timeout_ms)) };
    submit(options.ptr(), queue.ptr());
    // SAFETY: our live queue; a returned event is ours to destroy. The slack over the
    // request timeout lets the request's own timeout report first.
    let event = unsafe {
        Handle::new(
            rd::rd_kafka_queue_poll(queue.ptr(), timeout_ms.saturating_add(1000)),
            rd::rd_kafka_event_destroy,
        )
    };
    if event.is_null() {
        return Err(Error::Timeout(timeout).context(what));
    }
    // SAFETY: a live event; its error string lives with it and is copied.
    unsafe {
        let code = rd::rd_kafka_event_error(event.ptr());
        if code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            let msg = text(rd::rd_kafka_event_error_string(event.ptr()));
            return Err(Error::code(Code(code as i32), msg).context(what));
        }
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_buffers_read_up_to_their_nul() {
        let mut buf = [0 as c_char; 8];
        assert_eq!(buf_text(&buf), "");
        for (i, b) in b"bad\0x".iter().enumerate() {
            buf[i] = *b as c_char;
        }
        assert_eq!(buf_text(&buf), "bad");
        // Never past the end, even without a NUL.
        assert_eq!(buf_text(&[b'a' as c_char; 4]), "aaaa");
    }

    #[test]
    fn codes_have_librdkafkas_text() {
        assert_eq!(
            code_text(rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART),
            "Broker: Unknown topic or partition"
        );
    }
}
