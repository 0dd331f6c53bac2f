//! The source consumer's queued records, taken without rdkafka's per-message wrapper (a clock
//! read, an `Arc` and a waker slot per message). [`ReadyQueue::poll`] takes the next event of
//! the same queue with librdkafka's event API and serves it as rdkafka would for a consumer of
//! assigned partitions that commits nothing (the worker's): records, errors, statistics and
//! logs.

use std::any::Any;
use std::collections::HashMap;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::os::raw::c_char;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedHeaders, BorrowedMessage, OwnedHeaders};
use rdkafka::types::RDKafkaErrorCode;

use super::handle::text;

/// A consumed record, borrowed from librdkafka for `'a`.
#[derive(Clone, Copy)]
pub struct SourceMessage<'a> {
    ptr: NonNull<rd::rd_kafka_message_t>,
    _life: PhantomData<&'a rd::rd_kafka_message_t>,
}

/// Borrowed bytes, `None` for a null pointer.
///
/// # Safety
/// `ptr` must be null or point to `len` bytes valid for `'a`.
unsafe fn bytes<'a>(ptr: *const std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    if ptr.is_null() {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) })
    }
}

impl<'a> SourceMessage<'a> {
    /// The record rdkafka handed out.
    pub fn of(m: &'a BorrowedMessage<'_>) -> Self {
        Self {
            // SAFETY-relevant: rdkafka's message pointer is never null.
            ptr: NonNull::new(m.ptr()).expect("rdkafka messages are not null"),
            _life: PhantomData,
        }
    }

    fn raw(&self) -> &'a rd::rd_kafka_message_t {
        // SAFETY: valid for 'a (constructed from a live message or event).
        unsafe { self.ptr.as_ref() }
    }

    /// Its topic (Kafka topic names are ASCII).
    pub fn topic(&self) -> &'a str {
        // SAFETY: a consumed message has a topic handle whose name lives as long as it.
        let name = unsafe { CStr::from_ptr(rd::rd_kafka_topic_name(self.raw().rkt)) };
        name.to_str().expect("Kafka topic names are ASCII")
    }

    pub fn partition(&self) -> i32 {
        self.raw().partition
    }

    pub fn offset(&self) -> i64 {
        self.raw().offset
    }

    pub fn key(&self) -> Option<&'a [u8]> {
        let m = self.raw();
        // SAFETY: librdkafka's key pointer and length, valid while the message is.
        unsafe { bytes(m.key, m.key_len) }
    }

    pub fn payload(&self) -> Option<&'a [u8]> {
        let m = self.raw();
        // SAFETY: as for the key.
        unsafe { bytes(m.payload, m.len) }
    }

    /// Create or log-append time in ms, as rdkafka's `Timestamp::to_millis`.
    pub fn timestamp(&self) -> Option<i64> {
        let mut kind = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: valid message; `kind` is written.
        let ts = unsafe { rd::rd_kafka_message_timestamp(self.ptr.as_ptr(), &mut kind) };
        match kind {
            rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => None,
            _ if ts == -1 => None,
            _ => Some(ts),
        }
    }

    /// Its headers, `None` when it has none.
    pub fn headers(&self) -> Option<SourceHeaders<'a>> {
        let mut h = std::ptr::null_mut();
        // SAFETY: valid message; librdkafka parses the headers once and keeps them with it.
        let err = unsafe { rd::rd_kafka_message_headers(self.ptr.as_ptr(), &mut h) };
        let ptr = NonNull::new(h)
            .filter(|_| err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR)?;
        Some(SourceHeaders {
            ptr,
            _life: PhantomData,
        })
    }
}

/// A consumed record's headers, borrowed like the record.
#[derive(Clone, Copy)]
pub struct SourceHeaders<'a> {
    ptr: NonNull<rd::rd_kafka_headers_t>,
    _life: PhantomData<&'a rd::rd_kafka_headers_t>,
}

impl<'a> SourceHeaders<'a> {
    pub fn count(&self) -> usize {
        // SAFETY: valid headers.
        unsafe { rd::rd_kafka_header_cnt(self.ptr.as_ptr()) }
    }

    /// Header `index`: its name's bytes (Kafka does not require UTF-8; up to a NUL) and its
    /// value (`None`: null).
    pub fn get(&self, index: usize) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let mut name: *const c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: valid headers; the out pointers are written on success.
        let err = unsafe {
            rd::rd_kafka_header_get_all(self.ptr.as_ptr(), index, &mut name, &mut value, &mut size)
        };
        if err != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        // SAFETY: librdkafka's NUL-terminated name, valid with the headers (for 'a).
        let name = unsafe { CStr::from_ptr(name) }.to_bytes();
        // SAFETY: librdkafka's value and its size, valid with the headers (for 'a).
        let value = unsafe { bytes(value, size) };
        Some((name, value))
    }

    /// An owned copy for the producer, byte for byte (`rd_kafka_headers_copy`).
    pub fn detach(&self) -> OwnedHeaders {
        // SAFETY: rdkafka's `BorrowedHeaders` is an opaque stand-in for librdkafka's headers,
        // referenced by casting the native pointer exactly so (its `from_native_ptr`); the
        // headers live for 'a.
        let borrowed = unsafe { &*(self.ptr.as_ptr() as *const BorrowedHeaders) };
        borrowed.detach()
    }
}

/// What [`ReadyQueue::poll`] took: a record (in its event) or a consumer error.
pub enum Polled<'c> {
    Message(MessageEvent<'c>),
    Error(KafkaError),
}

/// A fetch event holding one record; destroyed (and the record freed) on drop, which must
/// happen while the consumer `'c` lives.
pub struct MessageEvent<'c> {
    event: NonNull<rd::rd_kafka_event_t>,
    message: NonNull<rd::rd_kafka_message_t>,
    /// The client it was taken from (compared, never dereferenced).
    client: *mut rd::rd_kafka_t,
    _consumer: PhantomData<&'c ()>,
}

impl MessageEvent<'_> {
    pub fn message(&self) -> SourceMessage<'_> {
        SourceMessage {
            ptr: self.message,
            _life: PhantomData,
        }
    }
}

impl Drop for MessageEvent<'_> {
    fn drop(&mut self) {
        // SAFETY: the event is ours, destroyed once.
        unsafe { rd::rd_kafka_event_destroy(self.event.as_ptr()) }
    }
}

extern "C" {
    /// The buffer a fetched record's bytes live in (an identity) and the bytes it keeps
    /// allocated; null and 0 for any other event. A mirrorflow patch of the vendored
    /// librdkafka (vendor/README.md).
    fn rd_kafka_event_fetch_buffer(
        rkev: *mut rd::rd_kafka_event_t,
        sizep: *mut usize,
    ) -> *const std::ffi::c_void;
}

impl MessageEvent<'_> {
    /// The event, kept beyond the drain with a reference to its consumer (librdkafka's
    /// consumer must outlive the records it handed out); the fetch buffer its record lives
    /// in is counted in `pins` until the last event held from it goes.
    ///
    /// # Panics
    /// If `consumer` is not the consumer this event was taken from.
    pub fn hold<C, T>(self, consumer: &Arc<T>, pins: &Pins) -> HeldEvent
    where
        C: ConsumerContext,
        T: Consumer<C> + Send + Sync + 'static,
    {
        assert!(
            std::ptr::eq(consumer.client().native_ptr(), self.client),
            "a fetch event held with a consumer it was not taken from"
        );
        let mut size = 0usize;
        // SAFETY: a live fetch event of ours; librdkafka writes the size and returns the
        // buffer's address, used only as an identity.
        let buffer = unsafe { rd_kafka_event_fetch_buffer(self.event.as_ptr(), &mut size) };
        let me = ManuallyDrop::new(self);
        HeldEvent {
            event: me.event,
            message: me.message,
            pin: Some(pins.pin(buffer as usize, size)),
            _consumer: consumer.clone(),
        }
    }
}

/// librdkafka's memory an event held beyond the drain keeps besides its record's bytes: the
/// fetch op (`rd_kafka_op_t` with the message, 304 bytes in librdkafka 2.12, a 320-byte
/// allocation), and its slot in the delivery group (`kafka::delivery`).
pub const HELD_EVENT_BYTES: usize = 320 + std::mem::size_of::<Option<HeldEvent>>();

/// The fetch buffers (responses, or decompressed batches) that held events keep allocated,
/// each counted once while any of its records is held: a record sent without a copy keeps
/// its whole buffer, not only its own bytes.
#[derive(Clone, Default)]
pub struct Pins(Arc<PinsInner>);

#[derive(Default)]
struct PinsInner {
    bytes: AtomicUsize,
    /// The buffers held now by address (their identity while held: a buffer is freed only
    /// after the last event holding it).
    held: Mutex<HashMap<usize, Weak<Pin>>>,
}

/// One buffer while events hold it.
struct Pin {
    pins: Arc<PinsInner>,
    /// Its address (0: none, not registered).
    buffer: usize,
    bytes: usize,
}

impl Pins {
    /// Bytes of the buffers held now.
    pub fn bytes(&self) -> usize {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// The pin of `buffer` (`size` bytes), found or new.
    fn pin(&self, buffer: usize, size: usize) -> Arc<Pin> {
        let inner = &self.0;
        if buffer == 0 {
            return Arc::new(Pin {
                pins: Arc::clone(inner),
                buffer,
                bytes: 0,
            });
        }
        let mut held = inner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(pin) = held.get(&buffer).and_then(Weak::upgrade) {
            return pin;
        }
        let pin = Arc::new(Pin {
            pins: Arc::clone(inner),
            buffer,
            bytes: size,
        });
        inner.bytes.fetch_add(size, Ordering::Relaxed);
        held.insert(buffer, Arc::downgrade(&pin));
        pin
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if self.buffer == 0 {
            return;
        }
        let mut held = self.pins.held.lock().unwrap_or_else(|p| p.into_inner());
        // A new pin may have taken the address already (the buffer is still alive when its
        // last pin goes, see `HeldEvent`'s `Drop`, so a record of it pins it again).
        if held
            .get(&self.buffer)
            .is_some_and(|w| w.strong_count() == 0)
        {
            held.remove(&self.buffer);
        }
        self.pins.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A fetch event holding one record, held beyond the drain (see [`MessageEvent::hold`]);
/// destroyed on drop, after its pin and before its consumer reference are released.
pub struct HeldEvent {
    event: NonNull<rd::rd_kafka_event_t>,
    message: NonNull<rd::rd_kafka_message_t>,
    /// Its buffer in [`Pins`]: `Option` only to be released first in `drop`.
    pin: Option<Arc<Pin>>,
    _consumer: Arc<dyn Any + Send + Sync>,
}

// SAFETY: librdkafka's fetch ops may be destroyed on any thread (their buffer and partition
// references are atomic reference counts), and a record's fields do not change after the
// fetch; the one lazy write, the headers' parse on first read, happens on whichever single
// thread owns the event: it is not `Sync`, so no two threads read it at once.
unsafe impl Send for HeldEvent {}

// `HeldEvent` must not be `Sync` (see above): this fails to compile if it is, the two impls
// then being equally applicable (the `static_assertions` crate's `assert_not_impl_any`).
const _: fn() = || {
    trait NotSync<A> {
        fn check() {}
    }
    impl<T: ?Sized> NotSync<()> for T {}
    impl<T: ?Sized + Sync> NotSync<u8> for T {}
    let _ = <HeldEvent as NotSync<_>>::check;
};

impl std::fmt::Debug for HeldEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = self.message();
        f.debug_struct("HeldEvent")
            .field("partition", &m.partition())
            .field("offset", &m.offset())
            .finish()
    }
}

impl HeldEvent {
    pub fn message(&self) -> SourceMessage<'_> {
        SourceMessage {
            ptr: self.message,
            _life: PhantomData,
        }
    }

    /// Its record's key and value bytes (in its fetch buffer).
    pub fn record_bytes(&self) -> usize {
        let m = self.message();
        m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len)
    }
}

impl Drop for HeldEvent {
    fn drop(&mut self) {
        // The pin goes while the buffer is still alive: its address cannot be a new
        // buffer's yet, so no record of another buffer finds this pin.
        drop(self.pin.take());
        // SAFETY: the event is ours, destroyed once, while `_consumer` (dropped after this)
        // keeps its client alive.
        unsafe { rd::rd_kafka_event_destroy(self.event.as_ptr()) }
    }
}

/// A consumer's queue (a reference librdkafka counts), for one drain.
pub struct ReadyQueue<'c, C: ConsumerContext> {
    queue: NonNull<rd::rd_kafka_queue_t>,
    client: *mut rd::rd_kafka_t,
    context: &'c C,
}

impl<'c, C: ConsumerContext> ReadyQueue<'c, C> {
    /// The queue rdkafka polls for `consumer`'s messages and events (`None` without a
    /// `group.id`: then rdkafka polls the main queue instead).
    pub fn of<T: Consumer<C>>(consumer: &'c T) -> Option<Self> {
        const {
            assert!(
                !C::ENABLE_REFRESH_OAUTH_TOKEN,
                "OAuth token refreshes are not served by this drain"
            )
        };
        let client = consumer.client();
        // SAFETY: a live client; the reference is released in `drop`.
        let queue = unsafe { rd::rd_kafka_queue_get_consumer(client.native_ptr()) };
        Some(Self {
            queue: NonNull::new(queue)?,
            client: client.native_ptr(),
            context: consumer.context().as_ref(),
        })
    }

    /// The next record or consumer error queued now, without waiting; statistics, logs and
    /// client errors met on the way go to the context (and a client error is returned too,
    /// as rdkafka's consumer does). `None` once the queue is empty.
    pub fn poll(&self) -> Option<Polled<'c>> {
        loop {
            // SAFETY: valid queue; a returned event is destroyed below or by `MessageEvent`.
            let event = NonNull::new(unsafe { rd::rd_kafka_queue_poll(self.queue.as_ptr(), 0) })?;
            let ev = event.as_ptr();
            // SAFETY: `ev` is a live event until destroyed at the end of this turn.
            let kind = unsafe { rd::rd_kafka_event_type(ev) };
            let out = match kind {
                rd::RD_KAFKA_EVENT_FETCH => {
                    // SAFETY: a fetch event holds one message, owned by the event.
                    let Some(message) =
                        NonNull::new(unsafe { rd::rd_kafka_event_message_next(ev) }.cast_mut())
                    else {
                        // SAFETY: not handed out; destroyed once.
                        unsafe { rd::rd_kafka_event_destroy(ev) };
                        continue;
                    };
                    // SAFETY: valid with the event.
                    let (err, partition) =
                        unsafe { (message.as_ref().err, message.as_ref().partition) };
                    // A message carrying an error is the error (as rdkafka's).
                    match err {
                        rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => {
                            return Some(Polled::Message(MessageEvent {
                                event,
                                message,
                                client: self.client,
                                _consumer: PhantomData,
                            }))
                        }
                        rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF => {
                            Some(KafkaError::PartitionEOF(partition))
                        }
                        e => Some(KafkaError::MessageConsumption(e.into())),
                    }
                }
                rd::RD_KAFKA_EVENT_ERROR => self.error(ev),
                rd::RD_KAFKA_EVENT_STATS => {
                    // SAFETY: a live stats event; its JSON is valid with the event.
                    let json = unsafe { rd::rd_kafka_event_stats(ev) };
                    if !json.is_null() {
                        // SAFETY: non-null, NUL-terminated, valid until the event goes below.
                        let json = unsafe { CStr::from_ptr(json) };
                        self.context.stats_raw(json.to_bytes());
                    }
                    None
                }
                rd::RD_KAFKA_EVENT_LOG => {
                    self.log(ev);
                    None
                }
                // Rebalances and commit results: none with the worker's consumer (assigned
                // partitions, no commits); OAuth refreshes: contexts that want them are refused
                // in `of`. Said, as rdkafka says it.
                _ => {
                    // SAFETY: a live event; its name is a static string.
                    let name = unsafe { text(rd::rd_kafka_event_name(ev)) };
                    tracing::warn!("ignored event '{name}' on consumer poll");
                    None
                }
            };
            // SAFETY: not handed out; destroyed once.
            unsafe { rd::rd_kafka_event_destroy(ev) };
            if let Some(e) = out {
                return Some(Polled::Error(e));
            }
        }
    }

    /// rdkafka's handling of an error event: the context sees it, and the consumer returns
    /// it (a partition end, a fatal or another consumption error).
    fn error(&self, ev: *mut rd::rd_kafka_event_t) -> Option<KafkaError> {
        // SAFETY: a live error event; its string is copied.
        let (code, reason, fatal) = unsafe {
            (
                rd::rd_kafka_event_error(ev),
                text(rd::rd_kafka_event_error_string(ev)),
                rd::rd_kafka_event_error_is_fatal(ev) != 0,
            )
        };
        let code_of = RDKafkaErrorCode::from(code);
        self.context
            .error(KafkaError::Global(code_of), reason.trim());
        if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        Some(
            if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF {
                // SAFETY: a live event; the partition it names (null if none) is a copy that
                // is ours.
                KafkaError::PartitionEOF(unsafe {
                    take_partition(rd::rd_kafka_event_topic_partition(ev))
                })
            } else if fatal {
                KafkaError::MessageConsumptionFatal(code_of)
            } else {
                KafkaError::MessageConsumption(code_of)
            },
        )
    }

    fn log(&self, ev: *mut rd::rd_kafka_event_t) {
        let mut fac: *const c_char = std::ptr::null();
        let mut message: *const c_char = std::ptr::null();
        let mut level = 0;
        // SAFETY: a live event; the out pointers are written when it is a log event.
        if unsafe { rd::rd_kafka_event_log(ev, &mut fac, &mut message, &mut level) } != 0 {
            return;
        }
        // SAFETY: the facility and message, NUL-terminated and valid with the event; copied.
        let (fac, message) = unsafe { (text(fac), text(message)) };
        self.context
            .log(log_level(level), fac.trim(), message.trim());
    }
}

impl<C: ConsumerContext> Drop for ReadyQueue<'_, C> {
    fn drop(&mut self) {
        // SAFETY: our reference, released once.
        unsafe { rd::rd_kafka_queue_destroy(self.queue.as_ptr()) }
    }
}

/// `(log start, high watermark)` from the last fetch response `client` received for
/// `topic`/`partition` (librdkafka's cache, updated before the response's error is handled,
/// so also after an out-of-range answer); `None` before any fetch response. A broker that
/// answered a fetch with an error may report `-1` as its high watermark.
pub fn cached_watermarks<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let name = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (0i64, 0i64);
    // SAFETY: `client` is alive for the call, `name` is NUL-terminated, and librdkafka writes
    // the two values (under its lock) into our locals.
    let err = unsafe {
        rd::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            name.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    let invalid = i64::from(rd::RD_KAFKA_OFFSET_INVALID);
    (err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high != invalid)
        .then_some((low, high))
}

/// The partition of a partition-end error event's copy of its partition, which is destroyed;
/// `-1` when the event names none (`rd_kafka_event_topic_partition` returns null for an event
/// without a partition).
///
/// # Safety
/// `tp` is null or a partition librdkafka allocated for the caller (nothing else frees it).
unsafe fn take_partition(tp: *mut rd::rd_kafka_topic_partition_t) -> i32 {
    if tp.is_null() {
        return -1;
    }
    // SAFETY: non-null and ours (the caller's contract): read, then destroyed once.
    unsafe {
        let p = (*tp).partition;
        rd::rd_kafka_topic_partition_destroy(tp);
        p
    }
}

/// A syslog level as rdkafka maps it.
fn log_level(level: i32) -> RDKafkaLogLevel {
    match level {
        0 => RDKafkaLogLevel::Emerg,
        1 => RDKafkaLogLevel::Alert,
        2 => RDKafkaLogLevel::Critical,
        3 => RDKafkaLogLevel::Error,
        4 => RDKafkaLogLevel::Warning,
        5 => RDKafkaLogLevel::Notice,
        6 => RDKafkaLogLevel::Info,
        _ => RDKafkaLogLevel::Debug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use rdkafka::client::ClientContext;
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::StreamConsumer;
    use rdkafka::message::{Header, Headers, Message};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::{Offset, TopicPartitionList};

    /// Counts what the drain hands to the context.
    #[derive(Default, Clone)]
    struct Seen(Arc<Mutex<(usize, Vec<String>)>>);

    impl ClientContext for Seen {
        fn stats_raw(&self, _: &[u8]) {
            self.0.lock().unwrap().0 += 1;
        }
        fn error(&self, error: KafkaError, reason: &str) {
            self.0.lock().unwrap().1.push(format!("{error}: {reason}"));
        }
    }
    impl ConsumerContext for Seen {}

    fn produce(mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>) {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .expect("producer");
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "trace",
                value: Some(&b"abc"[..]),
            })
            .insert(Header::<&[u8]> {
                key: "none",
                value: None,
            })
            .insert(Header {
                key: "trace",
                value: Some(&b""[..]),
            });
        let records: Vec<BaseRecord<'_, [u8], [u8]>> = vec![
            BaseRecord::to("t")
                .partition(0)
                .key(&b"k0"[..])
                .payload(&b"v0"[..])
                .timestamp(1_700_000_000_000)
                .headers(headers),
            BaseRecord::to("t").partition(0).payload(&b""[..]),
            BaseRecord::to("t").partition(0).key(&b"k2"[..]),
            BaseRecord::to("t")
                .partition(1)
                .key(&b"k3"[..])
                .payload(&b"v3"[..])
                .timestamp(5),
        ];
        for r in records {
            p.send(r).map_err(|(e, _)| e).expect("send");
        }
        p.flush(Duration::from_secs(10)).expect("flush");
    }

    fn consumer(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        extra: &[(&str, &str)],
    ) -> (StreamConsumer<Seen>, Seen) {
        let seen = Seen::default();
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "g")
            .set("enable.auto.commit", "false");
        for (k, v) in extra {
            config.set(*k, *v);
        }
        (
            config.create_with_context(seen.clone()).expect("consumer"),
            seen,
        )
    }

    /// Everything rdkafka's message says, read through `SourceMessage` and through rdkafka.
    type Fields = (
        String,
        i32,
        i64,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<i64>,
        Vec<(String, Option<Vec<u8>>)>,
    );

    fn fields(m: SourceMessage<'_>) -> Fields {
        let headers = m.headers().map_or(vec![], |h| {
            (0..h.count())
                .map(|i| h.get(i).unwrap())
                .map(|(k, v)| {
                    (
                        String::from_utf8(k.to_vec()).unwrap(),
                        v.map(<[u8]>::to_vec),
                    )
                })
                .collect()
        });
        // The detached copy holds the same, in order.
        let detached: Vec<(String, Option<Vec<u8>>)> = m.headers().map_or(vec![], |h| {
            h.detach()
                .iter()
                .map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec)))
                .collect()
        });
        assert_eq!(headers, detached);
        (
            m.topic().to_string(),
            m.partition(),
            m.offset(),
            m.key().map(<[u8]>::to_vec),
            m.payload().map(<[u8]>::to_vec),
            m.timestamp(),
            headers,
        )
    }

    fn rdkafka_fields(m: &BorrowedMessage<'_>) -> Fields {
        (
            m.topic().to_string(),
            m.partition(),
            m.offset(),
            m.key().map(<[u8]>::to_vec),
            m.payload().map(<[u8]>::to_vec),
            m.timestamp().to_millis(),
            m.headers().map_or(vec![], |h| {
                h.iter()
                    .map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec)))
                    .collect()
            }),
        )
    }

    fn assign(c: &StreamConsumer<Seen>, at: i64) {
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset("t", p, Offset::Offset(at))
                .unwrap();
        }
        c.assign(&tpl).expect("assign");
    }

    #[tokio::test]
    async fn records_read_through_the_queue_are_what_rdkafka_reads() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        produce(&mock);

        // rdkafka's reading, through the view and through rdkafka's own accessors
        let (c, _) = consumer(&mock, &[]);
        assign(&c, 0);
        let mut expected = Vec::new();
        while expected.len() < 4 {
            let m = tokio::time::timeout(Duration::from_secs(10), c.recv())
                .await
                .expect("a record within 10 s")
                .expect("no error");
            assert_eq!(fields(SourceMessage::of(&m)), rdkafka_fields(&m));
            expected.push(rdkafka_fields(&m));
        }
        expected.sort();
        assert_eq!(
            expected[0].6.len(),
            3,
            "the headers came along: {:?}",
            expected[0]
        );
        assert_eq!(expected[0].5, Some(1_700_000_000_000));
        assert_eq!(expected[1].3, None, "null key");
        assert_eq!(expected[1].4, Some(vec![]), "empty value");
        assert_eq!(expected[2].4, None, "null value");

        // the same records, drained from the queue
        let (c, _) = consumer(&mock, &[]);
        assign(&c, 0);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 4 && Instant::now() < deadline {
            match ReadyQueue::of(&c).expect("a group's queue").poll() {
                Some(Polled::Message(ev)) => got.push(fields(ev.message())),
                Some(Polled::Error(e)) => panic!("unexpected error {e}"),
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        got.sort();
        assert_eq!(got, expected);
    }

    /// The engine re-assigns the whole list whenever a partition stops or a batch is rewound,
    /// sometimes twice before librdkafka's fetchers have acknowledged the first change.
    /// librdkafka up to 2.15 then asked a fetcher to stop twice and aborted the process on the
    /// second reply (`rktp->rktp_started` assertion, confluentinc/librdkafka#5573); the
    /// vendored rdkafka-sys carries the fix (vendor/README.md). Here hundreds of back-to-back
    /// assignments, then the consumer still reads every record.
    #[tokio::test]
    async fn assignments_replaced_before_fetchers_stop_neither_abort_nor_lose_records() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        produce(&mock);
        let (c, _) = consumer(&mock, &[]);
        for _ in 0..300 {
            assign(&c, 0);
        }
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < 4 && Instant::now() < deadline {
            match ReadyQueue::of(&c).expect("a group's queue").poll() {
                Some(Polled::Message(ev)) => {
                    let m = ev.message();
                    got.push((m.partition(), m.offset()));
                }
                Some(Polled::Error(e)) => panic!("unexpected error {e}"),
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        got.sort();
        assert_eq!(got, vec![(0, 0), (0, 1), (0, 2), (1, 0)]);
    }

    #[tokio::test]
    async fn the_drain_serves_statistics_and_returns_consumer_errors() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        produce(&mock);
        let (c, seen) = consumer(
            &mock,
            &[
                ("statistics.interval.ms", "100"),
                ("auto.offset.reset", "error"),
            ],
        );
        // Past the end of both partitions: out of range, which `auto.offset.reset=error`
        // reports instead of resetting.
        assign(&c, 100);
        let mut errors = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while (errors.is_empty() || seen.0.lock().unwrap().0 < 2) && Instant::now() < deadline {
            match ReadyQueue::of(&c).expect("a group's queue").poll() {
                Some(Polled::Message(ev)) => {
                    panic!("no record expected at {}", ev.message().offset())
                }
                Some(Polled::Error(e)) => errors.push(e),
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        assert!(
            seen.0.lock().unwrap().0 >= 2,
            "statistics reach the context"
        );
        assert!(
            errors.iter().all(|e| matches!(
                e,
                KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)
            )),
            "{errors:?}"
        );
        assert!(!errors.is_empty(), "the out-of-range position is reported");
        let reported = seen.0.lock().unwrap().1.clone();
        assert!(!reported.is_empty(), "the context saw the error too");
    }

    // The consumer an event is held with is the one that must outlive it.
    #[tokio::test]
    #[should_panic(expected = "not taken from")]
    async fn an_event_is_held_only_with_its_own_consumer() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        produce(&mock);
        let (c, _) = consumer(&mock, &[]);
        assign(&c, 0);
        let (other, _) = consumer(&mock, &[]);
        let (c, other) = (Arc::new(c), Arc::new(other));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match ReadyQueue::of(c.as_ref()).expect("a group's queue").poll() {
                Some(Polled::Message(ev)) => {
                    let _ = ev.hold(&other, &Pins::default());
                    return;
                }
                Some(Polled::Error(e)) => panic!("unexpected error {e}"),
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        panic!("no record within 10 s");
    }

    // librdkafka answers null for an event without a partition; the EOF error then names
    // none (-1) instead of reading through the null pointer.
    #[test]
    fn a_partition_end_without_a_partition_names_none() {
        // SAFETY: null is allowed.
        assert_eq!(unsafe { take_partition(std::ptr::null_mut()) }, -1);
    }

    #[test]
    fn log_levels_map_as_rdkafka_maps_them() {
        let table = [
            (0, RDKafkaLogLevel::Emerg),
            (1, RDKafkaLogLevel::Alert),
            (2, RDKafkaLogLevel::Critical),
            (3, RDKafkaLogLevel::Error),
            (4, RDKafkaLogLevel::Warning),
            (5, RDKafkaLogLevel::Notice),
            (6, RDKafkaLogLevel::Info),
            (7, RDKafkaLogLevel::Debug),
            (9, RDKafkaLogLevel::Debug),
        ];
        for (n, want) in table {
            assert_eq!(log_level(n) as i32, want as i32, "{n}");
        }
    }
}
