//! Records handed to the producer through a topic handle.
//!
//! rdkafka's `BaseProducer::send` names the topic of every record: it allocates a C string,
//! and librdkafka looks the name up under the client's write lock, comparing it with each
//! topic the client knows (the target topic, offset syncs, progress). At 100 B records that
//! was about 3 % of the engine thread (perf, docs/PERFORMANCE.md). A topic handle looks
//! the topic up once; each record then costs librdkafka a reference count.
//! [`Topics`] keeps a producer's handles and sends through them.

use std::collections::HashMap;
use std::ffi::CString;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rdkafka::bindings as rd;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedHeaders;
use rdkafka::producer::{BaseRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

use crate::kafka::events::DeliveryProducer;

/// A record for [`Topics::send`] (delivery opaque: a ticket of the producer's tracker).
pub type TargetRecord<'a> = BaseRecord<'a, [u8], [u8], usize>;

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

// SAFETY: librdkafka topic handles are reference counted and thread safe; the handle only
// passes its pointer to librdkafka.
unsafe impl Send for TopicHandle {}
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
        fn bytes(b: Option<&[u8]>) -> (*mut std::ffi::c_void, usize) {
            b.map_or((ptr::null_mut(), 0), |b| (b.as_ptr() as *mut _, b.len()))
        }
        let (value, value_len) = bytes(record.payload);
        let (key, key_len) = bytes(record.key);
        // rdkafka's `BorrowedHeaders` stands for librdkafka's headers at the same address
        // (its `as_borrowed` is that cast): the only public way to their pointer.
        let headers = record.headers.as_ref().map_or(ptr::null_mut(), |h| {
            h.as_borrowed() as *const BorrowedHeaders as *mut rd::rd_kafka_headers_t
        });
        // SAFETY: the arguments rdkafka's `send` passes, with the topic handle instead of its
        // name: key and value are copied (F_COPY); librdkafka takes the headers on success.
        let err = unsafe {
            rd::rd_kafka_producev(
                producer.client().native_ptr(),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
                rkt.as_ptr(),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                record.partition.unwrap_or(-1),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rd::RD_KAFKA_MSG_F_COPY,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                value,
                value_len,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                key,
                key_len,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
                record.delivery_opaque.into_ptr(),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
                record.timestamp.unwrap_or(0),
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
                headers,
                rd::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            )
        };
        if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // librdkafka owns the headers now.
            std::mem::forget(record.headers);
            Ok(())
        } else {
            Err((
                KafkaError::MessageProduction(RDKafkaErrorCode::from(err)),
                record,
            ))
        }
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

    use crate::kafka::context::LogContext;
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

    /// Every record of `topic`, sorted (the timestamp only when the record set one).
    fn read(
        mock: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
        wait: Duration,
    ) -> Vec<Fields> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "g")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .unwrap();
        }
        c.assign(&tpl).expect("assign");
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
}
