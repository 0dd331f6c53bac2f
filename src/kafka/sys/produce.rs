//! Records handed to the producer through topic handles ([`Topics`]): the topic is looked up
//! once, not by name for every record as rdkafka's `BaseProducer::send` does.
//!
//! [`Topics::send_held`] sends a consumed record without `RD_KAFKA_MSG_F_COPY`: librdkafka
//! reads its bytes until the delivery report, so the record's fetch event is held in its
//! delivery group (`kafka::delivery`) until the report, or until the producer is destroyed;
//! the event keeps its consumer alive (librdkafka's consumer waits for every record it
//! handed out).

use std::collections::HashMap;
use std::ffi::CString;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdkafka::bindings as rd;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedHeaders, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

use crate::kafka::consume::HeldEvent;
use crate::kafka::delivery::GroupHandle;
use crate::kafka::events::DeliveryProducer;

/// A record for [`Topics::send`] (delivery opaque: a ticket of the producer's tracker).
pub type TargetRecord<'a> = BaseRecord<'a, [u8], [u8], usize>;

/// A record for the producer (delivery opaque: `ticket`).
pub fn target_record<'a>(
    target: &'a str,
    ticket: usize,
    partition: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    timestamp: Option<i64>,
    headers: Option<OwnedHeaders>,
) -> TargetRecord<'a> {
    let mut br = BaseRecord::with_opaque_to(target, ticket).partition(partition);
    if let Some(k) = key {
        br = br.key(k);
    }
    if let Some(v) = value {
        br = br.payload(v);
    }
    if let Some(ts) = timestamp {
        br = br.timestamp(ts);
    }
    if let Some(h) = headers {
        br = br.headers(h);
    }
    br
}

/// A topic of one producer's [`Topics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicId {
    /// Which [`Topics`] it belongs to: another's id is never used as an index there.
    owner: u64,
    index: usize,
}

/// The topics one producer sends to, each looked up once. Owned beside the producer (and
/// dropped with it): nothing keeps the producer alive once its owner lets it go, so a
/// dropped writer's queue is purged as before.
pub struct Topics {
    owner: u64,
    by_name: HashMap<String, usize>,
    handles: Vec<TopicHandle>,
    producer: Arc<DeliveryProducer>,
}

impl std::fmt::Debug for Topics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topics")
            .field("owner", &self.owner)
            .field("handles", &self.handles)
            .finish_non_exhaustive()
    }
}

impl Topics {
    pub fn new(producer: &Arc<DeliveryProducer>) -> Self {
        static OWNERS: AtomicU64 = AtomicU64::new(0);
        Self {
            owner: OWNERS.fetch_add(1, Ordering::Relaxed),
            by_name: HashMap::new(),
            handles: Vec::new(),
            producer: Arc::clone(producer),
        }
    }

    /// The id of topic `name` (looked up on first use).
    pub fn id(&mut self, name: &str) -> TopicId {
        let index = match self.by_name.get(name) {
            Some(&i) => i,
            None => {
                let i = self.handles.len();
                self.handles.push(TopicHandle::new(&self.producer, name));
                self.by_name.insert(name.to_string(), i);
                i
            }
        };
        TopicId {
            owner: self.owner,
            index,
        }
    }

    /// Hands `record` to the producer, to `topic` (`record.topic`'s id; an id of other
    /// `Topics`, or of another topic, sends by the record's name). Like rdkafka's `send`: on error the record comes
    /// back, its headers still owned.
    #[allow(clippy::result_large_err)] // rdkafka's own signature: the record comes back
    pub fn send<'a>(
        &self,
        topic: TopicId,
        record: TargetRecord<'a>,
    ) -> Result<(), (KafkaError, TargetRecord<'a>)> {
        match self
            .handles
            .get(topic.index)
            .filter(|_| topic.owner == self.owner)
        {
            Some(h) => h.send(&self.producer, record),
            None => self.producer.send(record),
        }
    }

    /// Hands the record of `event` to the producer, to `topic` (named `name`), without a copy
    /// of its key and value: librdkafka reads them from the consumer's fetch buffer until
    /// the record's delivery report, so the event is held in `group` (as record `index`)
    /// until then, or until the producer is destroyed. Without a handle for `name` the
    /// record goes by name, copied. A group of another producer's tracker is refused
    /// (`InvalidArgument`): its report would land in this producer's tracker. On error the
    /// event comes back.
    pub fn send_held(
        &self,
        topic: TopicId,
        name: &str,
        (group, index): (&GroupHandle, usize),
        event: HeldEvent,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    ) -> Result<(), (KafkaError, HeldEvent)> {
        let rkt = self
            .handles
            .get(topic.index)
            .filter(|h| topic.owner == self.owner && h.name == name)
            .and_then(|h| h.rkt);
        // The record's report goes to this producer's tracker, where another tracker's
        // ticket could name an unrelated open group of the same id: refused.
        if !group.tracker().is(self.producer.context().tracker()) {
            return Err((
                KafkaError::MessageProduction(RDKafkaErrorCode::InvalidArgument),
                event,
            ));
        }
        let Some(rkt) = rkt else {
            return self.send_copied(name, group.ticket(index), event, timestamp, headers);
        };
        let m = event.message();
        let partition = m.partition();
        let raw = |b: Option<&[u8]>| b.map(|b| (b.as_ptr(), b.len()));
        let (key, value) = (raw(m.key()), raw(m.payload()));
        if let Err(event) = group.hold(index, event) {
            // The group is closed: nothing would release the event at the report.
            return self.send_copied(name, group.ticket(index), event, timestamp, headers);
        }
        let bytes = |r: Option<(*const u8, usize)>| {
            r.map(|(p, n)| {
                // SAFETY: the bytes of the held event's record, in librdkafka's fetch buffer
                // (which does not move): valid until `group` releases the event at the
                // record's report or at the producer's destruction, or until it is given
                // back below.
                unsafe { std::slice::from_raw_parts(p, n) }
            })
        };
        let fields = Fields {
            partition,
            key: bytes(key),
            value: bytes(value),
            ticket: group.ticket(index),
            timestamp,
        };
        // SAFETY: this producer's handle; key and value stay valid as said above.
        match unsafe { produce(&self.producer, rkt, 0, fields, &headers) } {
            Ok(()) => {
                // librdkafka owns the headers now.
                std::mem::forget(headers);
                Ok(())
            }
            // A refused record has no report: the event is still in the group.
            Err(e) => match group.unhold(index) {
                Some(event) => Err((e, event)),
                None => unreachable!("the event held above was taken without a report"),
            },
        }
    }

    /// The record of `event` to topic `name`, by name and copied (rdkafka's `send`).
    fn send_copied(
        &self,
        name: &str,
        ticket: usize,
        event: HeldEvent,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    ) -> Result<(), (KafkaError, HeldEvent)> {
        let m = event.message();
        let record = target_record(
            name,
            ticket,
            m.partition(),
            m.key(),
            m.payload(),
            timestamp,
            headers,
        );
        match self.producer.send(record) {
            Ok(()) => Ok(()),
            Err((e, _)) => Err((e, event)),
        }
    }
}

impl Drop for Topics {
    fn drop(&mut self) {
        // The handles go first, while `producer` still holds the client.
        self.handles.clear();
    }
}

/// One topic of one producer, looked up once (released before the producer: see [`Topics`]).
struct TopicHandle {
    name: String,
    /// `None`: librdkafka refused the name; then each send goes through rdkafka's `send`,
    /// which reports why exactly as before.
    rkt: Option<NonNull<rd::rd_kafka_topic_t>>,
}

// SAFETY: librdkafka topic handles are reference counted and may be used and released on any
// thread; the handle only passes its pointer to librdkafka.
unsafe impl Send for TopicHandle {}
// SAFETY: as for `Send`: librdkafka locks what a topic handle changes, so calls through
// shared references from several threads are safe.
unsafe impl Sync for TopicHandle {}

impl std::fmt::Debug for TopicHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicHandle")
            .field("name", &self.name)
            .field("looked_up", &self.rkt.is_some())
            .finish()
    }
}

impl TopicHandle {
    /// `name` of `producer` (with the producer's default topic configuration, as a record
    /// naming the topic gets it).
    fn new(producer: &DeliveryProducer, name: &str) -> Self {
        let rkt = CString::new(name).ok().and_then(|c| {
            // SAFETY: a live client and a NUL-terminated name; a null configuration means the
            // client's default. Released in `drop`, before the client (see `Topics`).
            NonNull::new(unsafe {
                rd::rd_kafka_topic_new(producer.client().native_ptr(), c.as_ptr(), ptr::null_mut())
            })
        });
        Self {
            name: name.to_string(),
            rkt,
        }
    }

    /// `record` to this topic of `producer` (the handle's own).
    #[allow(clippy::result_large_err)]
    fn send<'a>(
        &self,
        producer: &DeliveryProducer,
        record: TargetRecord<'a>,
    ) -> Result<(), (KafkaError, TargetRecord<'a>)> {
        // A record for another topic (or a name librdkafka refused) goes by its name.
        let Some(rkt) = self.rkt.filter(|_| record.topic == self.name) else {
            return producer.send(record);
        };
        let fields = Fields {
            partition: record.partition.unwrap_or(-1),
            key: record.key,
            value: record.payload,
            ticket: record.delivery_opaque,
            timestamp: record.timestamp,
        };
        // SAFETY: key and value are copied (F_COPY), valid for the call.
        match unsafe {
            produce(
                producer,
                rkt,
                rd::RD_KAFKA_MSG_F_COPY,
                fields,
                &record.headers,
            )
        } {
            Ok(()) => {
                // librdkafka owns the headers now.
                std::mem::forget(record.headers);
                Ok(())
            }
            Err(e) => Err((e, record)),
        }
    }
}

/// What [`produce`] sends besides the headers.
struct Fields<'a> {
    partition: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    /// The delivery opaque.
    ticket: usize,
    timestamp: Option<i64>,
}

/// `rd_kafka_producev` with a topic handle: the arguments rdkafka's `send` passes, with the
/// handle instead of the topic's name and `flags` for the message. On success librdkafka
/// owns the headers (the caller forgets them).
///
/// # Safety
/// `rkt` is a live handle of `producer`'s client. Without `RD_KAFKA_MSG_F_COPY` in `flags`,
/// key and value must stay valid until the record's delivery report, or until the client
/// is destroyed.
unsafe fn produce(
    producer: &DeliveryProducer,
    rkt: NonNull<rd::rd_kafka_topic_t>,
    flags: i32,
    f: Fields<'_>,
    headers: &Option<OwnedHeaders>,
) -> Result<(), KafkaError> {
    fn bytes(b: Option<&[u8]>) -> (*mut std::ffi::c_void, usize) {
        b.map_or((ptr::null_mut(), 0), |b| (b.as_ptr() as *mut _, b.len()))
    }
    let (value, value_len) = bytes(f.value);
    let (key, key_len) = bytes(f.key);
    // rdkafka's `BorrowedHeaders` stands for librdkafka's headers at the same address (its
    // `as_borrowed` is that cast): the only public way to their pointer.
    let headers = headers.as_ref().map_or(ptr::null_mut(), |h| {
        h.as_borrowed() as *const BorrowedHeaders as *mut rd::rd_kafka_headers_t
    });
    // SAFETY: the caller's contract; the rest are plain values.
    let err = unsafe {
        rd::rd_kafka_producev(
            producer.client().native_ptr(),
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
            rkt.as_ptr(),
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
            f.partition,
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
            flags,
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
            value,
            value_len,
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
            key,
            key_len,
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
            f.ticket.into_ptr(),
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
            f.timestamp.unwrap_or(0),
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
            headers,
            rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
        )
    };
    if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::MessageProduction(RDKafkaErrorCode::from(err)))
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        if let Some(rkt) = self.rkt {
            // SAFETY: our reference from `rd_kafka_topic_new`, released once, while the
            // client lives (`Topics` drops its handles before its producer reference).
            unsafe { rd::rd_kafka_topic_destroy(rkt.as_ptr()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
    use rdkafka::mocking::MockCluster;
    use rdkafka::{Offset, TopicPartitionList};

    use rdkafka::consumer::StreamConsumer;

    use crate::kafka::consume::{Pins, Polled, ReadyQueue, HELD_EVENT_BYTES};
    use crate::kafka::context::LogContext;
    use crate::kafka::delivery::Tracker;
    use crate::kafka::producer::EventProducer;

    type Fields = (
        i32,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<i64>,
        Vec<(String, Option<Vec<u8>>)>,
    );

    fn headers() -> OwnedHeaders {
        OwnedHeaders::new()
            .insert(Header {
                key: "trace",
                value: Some(&b"abc"[..]),
            })
            .insert(Header::<&[u8]> {
                key: "none",
                value: None,
            })
    }

    /// The same four records (ticket `i` for record `i`), to `topic`.
    fn records(topic: &str) -> Vec<TargetRecord<'_>> {
        vec![
            BaseRecord::with_opaque_to(topic, 0)
                .partition(0)
                .key(&b"k0"[..])
                .payload(&b"v0"[..])
                .timestamp(1_700_000_000_000)
                .headers(headers()),
            BaseRecord::with_opaque_to(topic, 1)
                .partition(1)
                .payload(&b""[..]),
            BaseRecord::with_opaque_to(topic, 2)
                .partition(0)
                .key(&b"k2"[..]),
            BaseRecord::with_opaque_to(topic, 3)
                .partition(1)
                .key(&b"k3"[..])
                .payload(&b"v3"[..])
                .timestamp(5),
        ]
    }

    /// A consumer of `topic`'s 2 partitions from their start.
    fn reader(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
    ) -> BaseConsumer {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "g")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        c.assign(&from_start(topic)).expect("assign");
        c
    }

    /// `topic`'s 2 partitions from their start.
    fn from_start(topic: &str) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        tpl
    }

    /// Every record of `topic`, sorted (the timestamp only when the record set one).
    fn read(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
        wait: Duration,
    ) -> Vec<Fields> {
        let c = reader(mock, topic);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + wait;
        while got.len() < 4 && std::time::Instant::now() < deadline {
            let Some(m) = c.poll(Duration::from_millis(100)) else {
                continue;
            };
            let m = m.expect("no error");
            let ts = m
                .timestamp()
                .to_millis()
                .filter(|t| *t < 1_000_000 || *t == 1_700_000_000_000);
            got.push((
                m.partition(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                ts,
                m.headers().map_or(vec![], |h| {
                    h.iter()
                        .map(|x| (x.key.to_string(), x.value.map(<[u8]>::to_vec)))
                        .collect()
                }),
            ));
        }
        got.sort();
        got
    }

    fn producer(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        extra: &[(&str, &str)],
    ) -> EventProducer {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        for (k, v) in extra {
            config.set(*k, *v);
        }
        EventProducer::create(&config, LogContext::new("test")).expect("producer")
    }

    #[tokio::test]
    async fn records_sent_through_a_handle_are_those_rdkafka_sends() {
        let mock = MockCluster::new(1).expect("mock cluster");
        for t in ["by-name", "by-handle", "other"] {
            mock.create_topic(t, 2, 1).expect("topic");
        }
        let p = producer(&mock, &[]);
        let mut topics = Topics::new(p.producer());
        // Another topic known first, at index 0: an id must never pick the wrong one.
        assert_eq!(topics.id("other").index, 0);
        let id = topics.id("by-handle");
        assert_eq!(topics.id("by-handle"), id, "looked up once");
        assert!(topics.handles[id.index].rkt.is_some());
        // An id of other `Topics` (index 0 there too) sends by the record's name, as does the
        // id of another topic.
        let foreign = Topics::new(p.producer()).id("by-name");
        assert_eq!(foreign.index, 0);
        let group = p.tracker().group(8);
        for (i, r) in records("by-name").into_iter().enumerate() {
            // Half with another `Topics`' id, half with the id of another topic.
            let wrong = if i < 2 { foreign } else { id };
            topics
                .send(wrong, r)
                .map_err(|(e, _)| e)
                .expect("send by name");
        }
        for r in records("by-handle") {
            let r = BaseRecord {
                delivery_opaque: r.delivery_opaque + 4,
                ..r
            };
            topics
                .send(id, r)
                .map_err(|(e, _)| e)
                .expect("send by handle");
        }
        group.expect(8);
        tokio::time::timeout(Duration::from_secs(10), group.complete())
            .await
            .expect("reports within 10 s");
        for i in 0..8 {
            assert!(
                matches!(group.take(i), Some(Ok(o)) if o >= 0),
                "record {i} acknowledged with an offset"
            );
        }
        let by_name = read(&mock, "by-name", Duration::from_secs(10));
        assert_eq!(by_name.len(), 4);
        assert_eq!(read(&mock, "by-handle", Duration::from_secs(10)), by_name);
        assert!(read(&mock, "other", Duration::from_secs(1)).is_empty());
    }

    #[tokio::test]
    async fn a_name_librdkafka_refuses_fails_as_rdkafka_send_does() {
        let mock = MockCluster::new(1).expect("mock cluster");
        let p = producer(&mock, &[]);
        let mut topics = Topics::new(p.producer());
        for name in ["x".repeat(600), "nul\0byte".to_string()] {
            let id = topics.id(&name);
            assert!(
                topics.handles[id.index].rkt.is_none(),
                "{name:?} has no handle"
            );
            let by_handle = topics
                .send(id, BaseRecord::with_opaque_to(&name, 0).payload(&b"v"[..]))
                .map_err(|(e, _)| e.to_string());
            let by_name = p
                .producer()
                .send::<[u8], [u8]>(BaseRecord::with_opaque_to(&name, 0).payload(&b"v"[..]))
                .map_err(|(e, _)| e.to_string());
            assert!(by_handle.is_err());
            assert_eq!(by_handle, by_name);
        }
    }

    #[tokio::test]
    async fn a_full_queue_gives_the_record_back_with_its_headers() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        let p = producer(
            &mock,
            &[
                ("queue.buffering.max.messages", "1"),
                ("linger.ms", "10000"),
            ],
        );
        let mut topics = Topics::new(p.producer());
        let id = topics.id("t");
        let _group = p.tracker().group(2);
        topics
            .send(
                id,
                BaseRecord::with_opaque_to("t", 0).payload(&b"first"[..]),
            )
            .map_err(|(e, _)| e)
            .expect("room for one");
        let (e, back) = topics
            .send(
                id,
                BaseRecord::with_opaque_to("t", 1)
                    .payload(&b"second"[..])
                    .headers(headers()),
            )
            .expect_err("the queue is full");
        assert_eq!(
            e,
            KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
        );
        assert_eq!(back.delivery_opaque, 1);
        assert_eq!(back.payload, Some(&b"second"[..]));
        assert_eq!(back.headers.map(|h| h.count()), Some(2));
    }

    /// Records of `lens[i]` bytes (value `i` repeated, key `k{i}`) in topic `src` (2
    /// partitions) of `mock`, read with the drain, and the events of those of 512 bytes or
    /// more held in `pins` (the others dropped), with the key and value bytes of all.
    fn held_events(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        lens: &[usize],
        pins: &Pins,
    ) -> (Arc<StreamConsumer>, Vec<HeldEvent>, usize) {
        mock.create_topic("src", 2, 1).expect("topic");
        let p: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .create()
            .expect("producer");
        let n = lens.len();
        for (i, len) in lens.iter().enumerate() {
            let key = format!("k{i}");
            let value = vec![i as u8; *len];
            p.send(
                BaseRecord::<[u8], [u8]>::to("src")
                    .partition((i % 2) as i32)
                    .key(key.as_bytes())
                    .payload(&value),
            )
            .map_err(|(e, _)| e)
            .expect("send");
        }
        p.flush(Duration::from_secs(10)).expect("flush");
        let consumer: Arc<StreamConsumer> = Arc::new(
            ClientConfig::new()
                .set("bootstrap.servers", mock.bootstrap_servers())
                .set("group.id", "g")
                .set("enable.auto.commit", "false")
                .create()
                .expect("consumer"),
        );
        consumer.assign(&from_start("src")).expect("assign");
        let queue = ReadyQueue::of(consumer.as_ref()).expect("queue");
        let (mut held, mut read, mut bytes) = (Vec::new(), 0, 0);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while read < n && std::time::Instant::now() < deadline {
            match queue.poll() {
                Some(Polled::Message(ev)) => {
                    let m = ev.message();
                    let len = m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len);
                    (read, bytes) = (read + 1, bytes + len);
                    if len >= 512 {
                        held.push(ev.hold(&consumer, pins));
                    }
                }
                Some(Polled::Error(e)) => panic!("consumer error: {e}"),
                None => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        drop(queue);
        assert_eq!(read, n, "consumed");
        (consumer, held, bytes)
    }

    /// `(key, value)` of every record of `topic` (2 partitions), sorted.
    fn contents(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
        n: usize,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let c = reader(mock, topic);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while got.len() < n && std::time::Instant::now() < deadline {
            if let Some(m) = c.poll(Duration::from_millis(100)) {
                let m = m.expect("no error");
                got.push((
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().unwrap_or_default().to_vec(),
                ));
            }
        }
        got.sort();
        got
    }

    // The bytes librdkafka sends are the consumer's own, read until the report: each event
    // is held until then, and only then released (with its reference to the consumer).
    #[tokio::test]
    async fn records_sent_without_a_copy_arrive_whole_and_are_released_at_their_reports() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("dst", 2, 1).expect("topic");
        let pins = Pins::default();
        let (consumer, mut held, _) = held_events(&mock, &[2_000; 41], &pins);
        let last = held.pop().expect("41 records");
        let last_key = last.message().key().unwrap().to_vec();
        let mut expected: Vec<(Vec<u8>, Vec<u8>)> = held
            .iter()
            .chain([&last])
            .map(|e| {
                let m = e.message();
                (m.key().unwrap().to_vec(), m.payload().unwrap().to_vec())
            })
            .collect();
        expected.sort();
        // Reports wait while the records linger: the events are held meanwhile.
        let mut p = producer(&mock, &[("linger.ms", "300")]);
        let id = p.topic("dst");
        let group = p.tracker().group(40);
        for (i, e) in held.into_iter().enumerate() {
            p.send_held(id, "dst", (&group, i), e, None, None)
                .map_err(|(e, _)| e)
                .expect("send");
        }
        assert_eq!(p.tracker().held_count(), 40, "held until the reports");
        assert_eq!(Arc::strong_count(&consumer), 42);
        group.expect(40);
        tokio::time::timeout(Duration::from_secs(10), group.complete())
            .await
            .expect("reports within 10 s");
        for i in 0..40 {
            assert!(matches!(group.take(i), Some(Ok(o)) if o >= 0), "record {i}");
        }
        assert_eq!(p.tracker().held_count(), 0, "released at the reports");
        assert_eq!(
            Arc::strong_count(&consumer),
            2,
            "the last one is still ours"
        );
        // A group of another tracker is refused: its ticket (group 0, record 0, as `group`'s
        // first) would report into this producer's tracker, into `group`.
        let foreign = Tracker::default();
        let other = foreign.group(1);
        assert_eq!(other.ticket(0), group.ticket(0));
        let (e, last) = p
            .send_held(id, "dst", (&other, 0), last, None, None)
            .expect_err("a foreign group is refused");
        assert_eq!(
            e,
            KafkaError::MessageProduction(RDKafkaErrorCode::InvalidArgument)
        );
        assert_eq!(foreign.held_count(), 0);
        assert_eq!(p.tracker().held_count(), 0);
        crate::kafka::producer::flush(p.producer(), Duration::from_secs(10)).expect("flush");
        assert!(
            group.take(0).is_none(),
            "no report landed in an unrelated group"
        );
        assert!(pins.bytes() > 0, "the last one's buffer");
        drop(last);
        assert_eq!(Arc::strong_count(&consumer), 1, "given back and released");
        assert_eq!(pins.bytes(), 0, "no buffer held any more");
        expected.retain(|(k, _)| *k != last_key);
        assert_eq!(contents(&mock, "dst", 41), expected);
    }

    // A record held from a fetch of mostly small records keeps the whole fetch buffer, which
    // the window must see, not the record's own bytes: counted once however many of its
    // records are held, beyond what their groups count, until the last report.
    #[tokio::test]
    async fn a_held_record_keeps_and_counts_its_whole_fetch_buffer() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("dst", 2, 1).expect("topic");
        // Every 100th record of each partition is large (held), the others are 100 bytes
        // (copied, dropped).
        let lens: Vec<usize> = (0..2_000)
            .map(|i| if i % 200 < 2 { 2_000 } else { 100 })
            .collect();
        let pins = Pins::default();
        let (consumer, held, all) = held_events(&mock, &lens, &pins);
        assert_eq!(held.len(), 20);
        let held_bytes: usize = held.iter().map(HeldEvent::record_bytes).sum();
        assert!(held_bytes < all / 5, "{held_bytes} of {all} bytes held");
        assert!(
            pins.bytes() >= all,
            "the buffers of {all} bytes of records are held: {} counted",
            pins.bytes()
        );
        assert!(
            pins.bytes() < 2 * all,
            "each buffer counted once: {} for {all} bytes of records",
            pins.bytes()
        );
        let mut p = producer(&mock, &[("linger.ms", "300")]);
        let id = p.topic("dst");
        let tracker = p.tracker().clone();
        assert_eq!(
            tracker.held_beyond_groups(&pins),
            pins.bytes(),
            "no group yet"
        );
        let group = tracker.group(held.len());
        for (i, e) in held.into_iter().enumerate() {
            p.send_held(id, "dst", (&group, i), e, None, None)
                .map_err(|(e, _)| e)
                .expect("send");
        }
        // The batch counts the records' own bytes; the window adds the rest of the buffers.
        assert_eq!(tracker.held_beyond_groups(&pins), pins.bytes() - held_bytes);
        group.expect(20);
        tokio::time::timeout(Duration::from_secs(10), group.complete())
            .await
            .expect("reports within 10 s");
        assert_eq!(pins.bytes(), 0, "released at the reports");
        assert_eq!(tracker.held_beyond_groups(&pins), 0);
        assert_eq!(Arc::strong_count(&consumer), 1);
    }

    // Events whose group closed before their reports are counted whole until then: their
    // batch no longer counts them.
    #[tokio::test]
    async fn events_of_a_closed_group_count_whole_until_their_reports() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("dst", 2, 1).expect("topic");
        let pins = Pins::default();
        let (_consumer, held, _) = held_events(&mock, &[1_000; 10], &pins);
        let held_bytes: usize = held.iter().map(HeldEvent::record_bytes).sum();
        let mut p = producer(&mock, &[("linger.ms", "300")]);
        let id = p.topic("dst");
        let tracker = p.tracker().clone();
        let group = tracker.group(10);
        for (i, e) in held.into_iter().enumerate() {
            p.send_held(id, "dst", (&group, i), e, None, None)
                .map_err(|(e, _)| e)
                .expect("send");
        }
        let open = tracker.held_beyond_groups(&pins);
        assert_eq!(open, pins.bytes() - held_bytes);
        drop(group);
        assert_eq!(
            tracker.held_beyond_groups(&pins),
            pins.bytes() + 10 * HELD_EVENT_BYTES,
            "buffers and events of the dropped batch"
        );
        crate::kafka::producer::flush(p.producer(), Duration::from_secs(10)).expect("flush");
        assert_eq!(
            tracker.held_beyond_groups(&pins),
            0,
            "released at the reports"
        );
    }

    // A group closed before its reports leaves its events to them; a producer destroyed
    // with records still queued releases the rest once librdkafka is gone, and the consumer
    // can go then (librdkafka's consumer waits for every record it handed out).
    #[tokio::test]
    async fn events_outlive_their_group_until_the_report_or_the_producer() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("dst", 2, 1).expect("topic");
        let pins = Pins::default();
        let (consumer, mut held, _) = held_events(&mock, &[600; 20], &pins);
        let queued = held.split_off(10);
        // Delivered after their group was closed.
        let mut p = producer(&mock, &[("linger.ms", "300")]);
        let id = p.topic("dst");
        let group = p.tracker().group(10);
        for (i, e) in held.into_iter().enumerate() {
            p.send_held(id, "dst", (&group, i), e, None, None)
                .map_err(|(e, _)| e)
                .expect("send");
        }
        drop(group);
        assert_eq!(
            p.tracker().held_count(),
            10,
            "orphans wait for their reports"
        );
        assert_eq!(p.tracker().orphan_groups(), 1);
        crate::kafka::producer::flush(p.producer(), Duration::from_secs(10)).expect("flush");
        assert_eq!(p.tracker().held_count(), 0, "released at the reports");
        assert_eq!(p.tracker().orphan_groups(), 0, "and the group forgotten");
        assert_eq!(contents(&mock, "dst", 10).len(), 10);
        // Never delivered: no broker answers, the records wait in the queue.
        drop(p);
        let mut p = EventProducer::create(
            ClientConfig::new().set("bootstrap.servers", "127.0.0.1:9"),
            LogContext::new("test"),
        )
        .expect("producer");
        let id = p.topic("dst");
        let tracker = p.tracker().clone();
        let group = tracker.group(10);
        for (i, e) in queued.into_iter().enumerate() {
            p.send_held(id, "dst", (&group, i), e, None, None)
                .map_err(|(e, _)| e)
                .expect("queued");
        }
        assert_eq!(tracker.held_count(), 10);
        drop(p);
        assert_eq!(tracker.held_count(), 0, "released with the producer");
        assert_eq!(Arc::strong_count(&consumer), 1);
        assert_eq!(pins.bytes(), 0);
        // The consumer goes (it would wait forever for a record still held).
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(consumer);
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the consumer is destroyed");
        drop(group);
    }
}
