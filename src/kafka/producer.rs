//! A producer without a polling thread: its events are served by the task that waits for
//! them ([`ProducerEvents`]), its delivery reports collected per group ([`Tracker`]). The
//! replication engine's writer, the heartbeats and the checkpoints use it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::kafka::consume::HeldEvent;
use crate::kafka::context::LogContext;
use crate::kafka::delivery::{DeliveryContext, DeliveryReport, GroupHandle, Tracker};
use crate::kafka::events::{DeliveryProducer, ProducerEvents};
use crate::kafka::produce::{TargetRecord, TopicId, Topics};

/// Sends what `producer` holds and serves its delivery reports until none is outstanding,
/// at most `timeout` (then `KafkaError::Flush(OperationTimedOut)`, as rdkafka's `flush`).
/// rdkafka's `flush` polls in steps of 100 ms and each step runs to its end, so flushing one
/// record took 100 ms; this steps by 10 ms, as librdkafka's own flush does.
pub fn flush<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> Result<(), KafkaError> {
    const STEP: Duration = Duration::from_millis(10);
    let deadline = Instant::now() + timeout;
    loop {
        // One non-blocking rd_kafka_flush: wakes the broker threads, says whether any
        // message is still outstanding (its report not served yet).
        match producer.flush(Duration::ZERO) {
            Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) => {}
            done => return done,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        producer.poll(left.min(STEP));
    }
}

/// A producer, its event signal and where its reports go.
pub struct EventProducer {
    // Before `producer`: dropped first, so librdkafka stops signalling before it goes.
    events: Arc<ProducerEvents>,
    // Before `producer` too: topic handles go before their client.
    topics: Topics,
    producer: Arc<DeliveryProducer>,
    tracker: Tracker,
}

/// One record for [`EventProducer::send_all`].
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp: Option<i64>,
    /// Copied per send (librdkafka takes ownership of a record's headers); `None` costs
    /// nothing.
    pub headers: Option<&'a OwnedHeaders>,
}

/// A record for [`EventProducer::send`].
pub enum ToSend<'a> {
    /// Its key and value are copied by librdkafka.
    Copied(TargetRecord<'a>),
    /// A consumed record sent without a copy: its event is held in the group of `at` (as
    /// its record `at.1`) until the record's report; to topic `name`.
    Held {
        name: &'a str,
        at: (&'a GroupHandle, usize),
        event: HeldEvent,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    },
}

/// What comes back of a record the producer refused.
pub enum Refused<'a> {
    Copied(TargetRecord<'a>),
    Held(HeldEvent),
}

impl EventProducer {
    /// Creates the producer from `config`.
    pub fn create(config: &ClientConfig, ctx: LogContext) -> Result<Self, KafkaError> {
        let tracker = Tracker::default();
        let producer: DeliveryProducer =
            config.create_with_context(DeliveryContext::new(ctx, tracker.clone()))?;
        let producer = Arc::new(producer);
        let events = Arc::new(ProducerEvents::new(&producer).map_err(|e| {
            KafkaError::ClientCreation(format!("the producer's event signal: {e}"))
        })?);
        tracker.serve_from(&events);
        Ok(Self {
            events,
            topics: Topics::new(&producer),
            producer,
            tracker,
        })
    }

    /// The producer (delivery opaque: a ticket of [`EventProducer::tracker`]).
    pub fn producer(&self) -> &Arc<DeliveryProducer> {
        &self.producer
    }

    /// The id of topic `name`, to send to it with [`EventProducer::send`].
    pub fn topic(&mut self, name: &str) -> TopicId {
        self.topics.id(name)
    }

    /// Hands a record to the producer, to `topic` (an id of [`EventProducer::topic`]): the
    /// one way records reach it (see [`Topics::send`] and [`Topics::send_held`]). On error
    /// the record (or the held event) comes back.
    #[allow(clippy::result_large_err)] // rdkafka's own signature: the record comes back
    pub fn send<'a>(
        &self,
        topic: TopicId,
        record: ToSend<'a>,
    ) -> Result<(), (KafkaError, Refused<'a>)> {
        match record {
            ToSend::Copied(r) => self
                .topics
                .send(topic, r)
                .map_err(|(e, r)| (e, Refused::Copied(r))),
            ToSend::Held {
                name,
                at,
                event,
                timestamp,
                headers,
            } => self
                .topics
                .send_held(topic, name, at, event, timestamp, headers)
                .map_err(|(e, ev)| (e, Refused::Held(ev))),
        }
    }

    /// Where the delivery reports go.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// The event signal.
    pub fn events(&self) -> &Arc<ProducerEvents> {
        &self.events
    }

    /// Runs a blocking producer call (a transactional one, a flush) on the blocking pool,
    /// serving the producer's events meanwhile (librdkafka waits for reports someone must
    /// serve).
    pub async fn blocking<T: Send + 'static>(
        &self,
        call: impl FnOnce(&DeliveryProducer) -> T + Send + 'static,
    ) -> Result<T, KafkaError> {
        let p = Arc::clone(&self.producer);
        let task = tokio::task::spawn_blocking(move || call(&p));
        self.tracker
            .serving(task)
            .await
            .map_err(|_| KafkaError::Canceled)
    }

    /// Sends `records` and waits for their reports, at most `timeout` (a record not
    /// acknowledged by then reports `MessageTimedOut`). A full queue waits for the records
    /// sent so far. Reports are in the order of `records`.
    pub async fn send_all(
        &self,
        records: &[Outgoing<'_>],
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let group = self.tracker.group(records.len());
        let mut refused: Vec<Option<KafkaError>> = vec![None; records.len()];
        let mut sent = 0;
        let waited = tokio::time::timeout(timeout, async {
            for (i, r) in records.iter().enumerate() {
                let mut br = BaseRecord::with_opaque_to(r.topic, group.ticket(i));
                br.partition = r.partition;
                br.key = r.key;
                br.payload = r.value;
                br.timestamp = r.timestamp;
                br.headers = r.headers.cloned();
                loop {
                    match self.producer.send(br) {
                        Ok(()) => sent += 1,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            group.expect(sent);
                            group.complete().await;
                            br = back;
                            continue;
                        }
                        Err((e, _)) => refused[i] = Some(e),
                    }
                    break;
                }
            }
            group.expect(sent);
            group.complete().await;
        })
        .await;
        let timed_out = waited.is_err();
        (0..records.len())
            .map(|i| match refused[i].take() {
                Some(e) => Err(e),
                None => group.take(i).unwrap_or_else(|| {
                    Err(KafkaError::MessageProduction(if timed_out {
                        RDKafkaErrorCode::MessageTimedOut
                    } else {
                        RDKafkaErrorCode::Fail
                    }))
                }),
            })
            .collect()
    }
}

#[cfg(test)]
impl EventProducer {
    /// [`EventProducer::send`] of a held record, the event back on error.
    pub fn send_held(
        &self,
        topic: TopicId,
        name: &str,
        at: (&GroupHandle, usize),
        event: HeldEvent,
        timestamp: Option<i64>,
        headers: Option<OwnedHeaders>,
    ) -> Result<(), (KafkaError, HeldEvent)> {
        let record = ToSend::Held {
            name,
            at,
            event,
            timestamp,
            headers,
        };
        match self.send(topic, record) {
            Ok(()) => Ok(()),
            Err((e, Refused::Held(event))) => Err((e, event)),
            Err((_, Refused::Copied(_))) => unreachable!("a held record comes back held"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::mocking::MockCluster;

    fn outgoing(partition: i32, value: &[u8]) -> Outgoing<'_> {
        Outgoing {
            topic: "t",
            partition: Some(partition),
            key: None,
            value: Some(value),
            timestamp: None,
            headers: None,
        }
    }

    /// Counts the delivery reports it is served, and their failures.
    #[derive(Default)]
    struct Counted {
        ok: std::sync::atomic::AtomicUsize,
        failed: std::sync::atomic::AtomicUsize,
    }

    impl rdkafka::ClientContext for Counted {}

    impl ProducerContext for Counted {
        type DeliveryOpaque = ();
        fn delivery(&self, r: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
            let n = if r.is_ok() { &self.ok } else { &self.failed };
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn flush_returns_with_every_report_served() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        let p: BaseProducer<Counted> = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("linger.ms", "50")
            .create_with_context(Counted::default())
            .expect("producer");
        for i in 0..100 {
            let v = format!("v{i}");
            p.send(BaseRecord::<(), str>::to("t").partition(i % 2).payload(&v))
                .map_err(|(e, _)| e)
                .expect("send");
        }
        flush(&p, Duration::from_secs(10)).expect("flush");
        assert_eq!(p.in_flight_count(), 0);
        let ctx = p.context();
        let ok = ctx.ok.load(std::sync::atomic::Ordering::Relaxed);
        let failed = ctx.failed.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((ok, failed), (100, 0));
        // Nothing outstanding: returns at once, still Ok.
        flush(&p, Duration::ZERO).expect("empty flush");
    }

    #[test]
    fn flush_times_out_as_rdkafka_does_when_nothing_is_delivered() {
        // A port nothing listens on: the record stays queued.
        let p: BaseProducer<Counted> = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "60000")
            .create_with_context(Counted::default())
            .expect("producer");
        p.send(BaseRecord::<(), str>::to("t").payload("v"))
            .map_err(|(e, _)| e)
            .expect("send");
        match flush(&p, Duration::from_millis(50)) {
            Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) => {}
            other => panic!("want Flush(OperationTimedOut), got {other:?}"),
        }
        // The queue length also counts events not served yet (a connection error under
        // load), so the record is shown by its report once purged.
        assert!(p.in_flight_count() >= 1, "the record is still queued");
        p.purge(rdkafka::producer::PurgeConfig::default().queue());
        let failed = || {
            p.context()
                .failed
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while failed() == 0 && std::time::Instant::now() < deadline {
            p.poll(Duration::from_millis(50));
        }
        assert_eq!(failed(), 1, "the purged record is reported, once");
    }

    // Nobody polls a BaseProducer here: the reports arrive only if the waiting task serves
    // them (else each record times out).
    #[tokio::test]
    async fn send_all_reports_each_record_in_order_served_by_the_waiting_task() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 2, 1).expect("topic");
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("message.max.bytes", "2000")
            // A queue of two records: the rest of the group waits for room.
            .set("queue.buffering.max.messages", "2");
        let p = EventProducer::create(&config, LogContext::new("test")).expect("producer");
        let big = vec![7u8; 5000];
        let records = [
            outgoing(0, b"a"),
            outgoing(1, &big),
            outgoing(0, b"b"),
            outgoing(1, b"c"),
            outgoing(0, b"d"),
            outgoing(0, b"e"),
        ];
        let reports = p.send_all(&records, Duration::from_secs(20)).await;
        let got: Vec<Result<i64, Option<RDKafkaErrorCode>>> = reports
            .into_iter()
            .map(|r| r.map_err(|e| e.rdkafka_error_code()))
            .collect();
        assert_eq!(
            got,
            vec![
                Ok(0),
                Err(Some(RDKafkaErrorCode::MessageSizeTooLarge)),
                Ok(1),
                Ok(0),
                Ok(2),
                Ok(3),
            ]
        );
        // A second group on the same producer starts where the first left off.
        let again = p
            .send_all(&[outgoing(1, b"f")], Duration::from_secs(20))
            .await;
        assert_eq!(
            again.into_iter().map(|r| r.ok()).collect::<Vec<_>>(),
            vec![Some(1)]
        );
    }

    #[tokio::test]
    async fn send_all_carries_the_headers_given() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::message::{Header, Headers, Message};
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let p = EventProducer::create(&config, LogContext::new("test")).expect("producer");
        let headers = OwnedHeaders::new().insert(Header {
            key: "h",
            value: Some(b"v".as_slice()),
        });
        let with = Outgoing {
            headers: Some(&headers),
            ..outgoing(0, b"with")
        };
        let reports = p
            .send_all(&[with, outgoing(0, b"without")], Duration::from_secs(20))
            .await;
        assert!(reports.iter().all(Result::is_ok), "{reports:?}");
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("group.id", "read")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer");
        consumer.subscribe(&["t"]).expect("subscribe");
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while got.len() < 2 && std::time::Instant::now() < deadline {
            if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                let m = m.expect("message");
                let hs: Vec<(String, Option<Vec<u8>>)> = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                got.push((m.payload().map(<[u8]>::to_vec), hs));
            }
        }
        assert_eq!(
            got,
            vec![
                (
                    Some(b"with".to_vec()),
                    vec![("h".into(), Some(b"v".to_vec()))]
                ),
                (Some(b"without".to_vec()), vec![]),
            ]
        );
    }

    #[tokio::test]
    async fn records_never_acknowledged_report_a_timeout() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", mock.bootstrap_servers());
        let p = EventProducer::create(&config, LogContext::new("test")).expect("producer");
        // The broker is down: nothing is acknowledged within the bound.
        mock.broker_down(1).expect("broker down");
        let reports = p
            .send_all(&[outgoing(0, b"a")], Duration::from_millis(300))
            .await;
        assert!(matches!(
            reports.as_slice(),
            [Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageTimedOut
            ))]
        ));
    }

    /// The most broker-thread wake-ups librdkafka's statistics reported for one broker.
    #[derive(Default)]
    struct Wakeups {
        broker: i32,
        most: std::sync::atomic::AtomicU64,
    }

    impl rdkafka::ClientContext for Wakeups {
        fn stats(&self, s: rdkafka::Statistics) {
            for b in s.brokers.values().filter(|b| b.nodeid == self.broker) {
                let n = b.wakeups.unwrap_or(0);
                self.most.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    impl ProducerContext for Wakeups {
        type DeliveryOpaque = ();
        fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
    }

    // The vendored librdkafka's patch (vendor/README.md): an idempotent partition at its
    // in-flight limit waits for a response instead of spinning on poll(0). Its
    // statistics count the broker thread's wake-ups: about 195 here with the patch, 1.1
    // million without (it spun while the slow broker held the requests).
    #[test]
    fn an_idempotent_partition_at_its_in_flight_limit_waits_for_responses_without_spinning() {
        let mock = MockCluster::new(1).expect("mock cluster");
        mock.create_topic("t", 1, 1).expect("topic");
        mock.broker_round_trip_time(1, Duration::from_millis(100))
            .expect("round trip");
        let p: BaseProducer<Wakeups> = ClientConfig::new()
            .set("bootstrap.servers", mock.bootstrap_servers())
            .set("enable.idempotence", "true")
            .set("linger.ms", "0")
            // Ten records a request: 10 requests, one in flight at a time (the idempotent
            // limit of 5 counts records).
            .set("batch.num.messages", "10")
            .set("statistics.interval.ms", "50")
            .create_with_context(Wakeups {
                broker: 1,
                ..Wakeups::default()
            })
            .expect("producer");
        for i in 0..100 {
            let v = format!("v{i}");
            p.send(BaseRecord::<(), str>::to("t").partition(0).payload(&v))
                .map_err(|(e, _)| e)
                .expect("send");
        }
        flush(&p, Duration::from_secs(20)).expect("flush");
        // Statistics of the time after the last response.
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            p.poll(Duration::from_millis(10));
        }
        let wakeups = p.context().most.load(std::sync::atomic::Ordering::Relaxed);
        assert!(wakeups > 0, "no statistics for broker 1");
        assert!(
            wakeups < 5_000,
            "broker thread wake-ups {wakeups}: it spun waiting for in-flight requests"
        );
    }
}
