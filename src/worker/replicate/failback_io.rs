//! Failing back's I/O, before the flow writes anything: the failover's report from its store
//! on this flow's source (the new primary), the old primary's ends, the diverged records
//! counted (and copied to `<topic>.diverged` on request), and the outcome kept on this flow's
//! target in `mirrorflow-failback.<namespace>.<flow>.internal` (key `<flow>/<id>`), so a
//! restart neither measures again (its own writes would count as diverged) nor copies again.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use tracing::info;

use super::failback::{self, diverged_ranges, points, FailbackWait, Measured, Point, Tp};
use super::store::{
    blocking, failover_store, range_reader, read_range, read_store, write_store, StoreError,
    IO_TIMEOUT,
};
use crate::api::{AfterFailoverStart, FailbackReport, FailoverReport};
use crate::kafka::admin::GroupAdmin;
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// Why failing back could not be prepared (the worker retries, saying why).
#[derive(Debug, thiserror::Error)]
pub enum FailbackError {
    #[error(transparent)]
    Io(#[from] StoreError),
    #[error("flow {0:?} is not NAMESPACE/NAME")]
    FlowRef(String),
    #[error("copying the diverged records to {topic}: {why}")]
    Copy { topic: String, why: String },
}

impl From<KafkaError> for FailbackError {
    fn from(e: KafkaError) -> Self {
        Self::Io(e.into())
    }
}

/// The store of a flow's failbacks (on its target).
pub fn failback_store(namespace: &str, flow: &str) -> String {
    format!("mirrorflow-failback.{namespace}.{flow}.internal")
}

/// One flow failing back.
pub struct FailbackIo {
    /// This flow's source: the new primary.
    pub source: ClientConfig,
    pub source_alias: String,
    /// This flow's target: the old primary.
    pub target: ClientConfig,
    pub namespace: String,
    pub flow: String,
    pub start: AfterFailoverStart,
    /// This flow's topic selection: the failover's other partitions are not this flow's.
    pub filter: TopicFilter,
    /// Of the store topic (`spec.internalTopics`).
    pub store_replication_factor: Option<i32>,
    /// Of the `.diverged` topics (`spec.target`).
    pub replication_factor: Option<i32>,
    pub worker_index: u32,
}

/// Where failing back stands.
#[derive(Debug)]
pub enum Prepared {
    /// Measured (now or before): start the partitions it lists where it says.
    Ready(FailbackReport),
    /// Not yet, and why.
    Wait(FailbackWait),
}

impl FailbackIo {
    /// The stored outcome, else (worker 0) the failover's report measured against the old
    /// primary now. `replicated`: source partitions this flow holds progress for.
    pub async fn prepare(&self, replicated: HashSet<Tp>) -> Result<Prepared, FailbackError> {
        let key = failback::store_key(&self.start.flow, &self.start.id);
        let store = failback_store(&self.namespace, &self.flow);
        let mut stored: std::collections::BTreeMap<String, FailbackReport> =
            read_store(self.target.clone(), store.clone(), "target cluster").await?;
        if let Some(r) = stored.remove(&key) {
            return Ok(Prepared::Ready(r));
        }
        if self.worker_index != 0 {
            return Ok(Prepared::Wait(FailbackWait::Worker0 { store }));
        }
        let Some((ns, name)) = self.start.flow_ref() else {
            return Err(FailbackError::FlowRef(self.start.flow.clone()));
        };
        let failover_topic = failover_store(ns, name);
        let mut reports: std::collections::BTreeMap<String, FailoverReport> = read_store(
            self.source.clone(),
            failover_topic.clone(),
            "source cluster",
        )
        .await?;
        let Some(failover) = reports.remove(&self.start.id) else {
            return Ok(Prepared::Wait(FailbackWait::Unknown {
                flow: self.start.flow.clone(),
                id: self.start.id.clone(),
                store: failover_topic,
                cluster: self.source_alias.clone(),
            }));
        };
        let selected = |t: &str| self.filter.decide(t) == TopicDecision::Replicate;
        let points = match points(&self.start.flow, &failover, selected) {
            Ok(p) => p,
            Err(w) => return Ok(Prepared::Wait(w)),
        };
        let old_ends = self.old_ends(&points).await?;
        let ranges = diverged_ranges(&points, &old_ends, &replicated);
        if self.start.copy_diverged {
            self.ensure_diverged_topics(&ranges).await?;
        }
        let (measured, copied) = self.measure(ranges).await?;
        let report = failback::report(
            &self.start.flow,
            &self.start.id,
            &points,
            &measured,
            self.start.copy_diverged.then_some(copied),
        );
        info!(flow = %self.start.flow, id = %self.start.id, partitions = points.len(), diverged = report.diverged_records, copied, "failing back: divergence measured");
        write_store(
            self.target.clone(),
            store,
            self.store_replication_factor,
            key,
            &report,
        )
        .await?;
        Ok(Prepared::Ready(report))
    }

    /// The old primary's end offsets of the reported partitions, now.
    async fn old_ends(&self, points: &[Point]) -> Result<BTreeMap<Tp, i64>, StoreError> {
        let (config, wanted) = (self.target.clone(), points.iter().map(|p| p.old.clone()));
        let wanted: Vec<Tp> = wanted.collect();
        blocking(move || {
            let admin = GroupAdmin::new(&config, "target cluster", IO_TIMEOUT)?;
            Ok(admin.end_offsets(&wanted)?.into_iter().collect())
        })
        .await
    }

    /// Creates `<topic>.diverged` on the old primary for each topic with a range, with the
    /// topic's partition count.
    async fn ensure_diverged_topics(&self, ranges: &[(Tp, i64, i64)]) -> Result<(), FailbackError> {
        let topics: BTreeSet<String> = ranges.iter().map(|(tp, _, _)| tp.0.clone()).collect();
        if topics.is_empty() {
            return Ok(());
        }
        let config = self.target.clone();
        let counts: BTreeMap<String, i32> = blocking(move || {
            let consumer: BaseConsumer = config.create()?;
            let md = consumer.fetch_metadata(None, IO_TIMEOUT)?;
            Ok(md
                .topics()
                .iter()
                .filter(|t| topics.contains(t.name()))
                .map(|t| (t.name().to_owned(), t.partitions().len() as i32))
                .collect())
        })
        .await?;
        let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
            self.target.create()?;
        let rf = self.replication_factor.unwrap_or(-1);
        let options = rdkafka::admin::AdminOptions::new().operation_timeout(Some(IO_TIMEOUT));
        for (topic, partitions) in counts {
            let name = failback::diverged_topic(&topic);
            let new = rdkafka::admin::NewTopic::new(
                &name,
                partitions,
                rdkafka::admin::TopicReplication::Fixed(rf),
            );
            for r in admin.create_topics([&new], &options).await? {
                match r {
                    Ok(_) => {
                        info!(topic = %name, partitions, "created the diverged records' topic")
                    }
                    Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((_, code)) => {
                        let e = crate::kafka::Error::code(code, code.to_string())
                            .context(format!("create topic {name} on the target cluster"));
                        return Err(StoreError::Kafka(e).into());
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads each range read_committed: per partition (first offset, last offset, records),
    /// copying each record to `<topic>.diverged` when asked; returns them and the records
    /// copied.
    async fn measure(
        &self,
        ranges: Vec<(Tp, i64, i64)>,
    ) -> Result<(BTreeMap<Tp, Measured>, i64), FailbackError> {
        let reader = range_reader(&self.target, "mirrorflow-failback-diverged");
        let copy = self.start.copy_diverged.then(|| {
            let mut c = self.target.clone();
            c.set("acks", "all").set("enable.idempotence", "true");
            c
        });
        let (measured, copied, failed) = blocking(move || {
            let consumer: BaseConsumer = reader.create()?;
            let producer: Option<BaseProducer<Deliveries>> = copy
                .map(|c| c.create_with_context(Deliveries::default()))
                .transpose()?;
            let mut out = BTreeMap::new();
            for ((topic, partition), from, to) in ranges {
                let dest = failback::diverged_topic(&topic);
                let mut first_last: Option<(i64, i64)> = None;
                let mut sent: Result<(), KafkaError> = Ok(());
                let n = read_range(&consumer, &topic, partition, (from, to), |m| {
                    let (first, _) = *first_last.get_or_insert((m.offset(), m.offset()));
                    first_last = Some((first, m.offset()));
                    if let (Some(p), Ok(())) = (&producer, &sent) {
                        sent = send_copy(p, &dest, partition, m);
                    }
                })?;
                sent?;
                let (first, last) = first_last.unwrap_or((from, from));
                out.insert((topic, partition), (first, last, n));
            }
            let (copied, failed) = match &producer {
                Some(p) => {
                    crate::kafka::producer::flush(p, IO_TIMEOUT)?;
                    let ctx = p.context();
                    let failed = ctx.failed.lock().ok().and_then(|f| f.clone());
                    (ctx.delivered.load(Ordering::Relaxed), failed)
                }
                None => (0, None),
            };
            Ok((out, copied, failed))
        })
        .await?;
        match failed {
            Some((topic, why)) => Err(FailbackError::Copy { topic, why }),
            None => Ok((measured, copied)),
        }
    }
}

/// Sends a copy of `m` (key, value, headers, timestamp) to `topic`/`partition`, waiting while
/// the producer's queue is full.
fn send_copy(
    producer: &BaseProducer<Deliveries>,
    topic: &str,
    partition: i32,
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Result<(), KafkaError> {
    let headers = m.headers().map(|h| h.detach());
    loop {
        let mut record = BaseRecord::<'_, [u8], [u8]>::to(topic).partition(partition);
        if let Some(k) = m.key() {
            record = record.key(k);
        }
        if let Some(v) = m.payload() {
            record = record.payload(v);
        }
        if let Some(ts) = m.timestamp().to_millis() {
            record = record.timestamp(ts);
        }
        if let Some(h) = &headers {
            record = record.headers(h.clone());
        }
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Counts delivered copies and keeps the first failure.
#[derive(Default)]
struct Deliveries {
    delivered: AtomicI64,
    /// The first failure: `(topic, why)`.
    failed: std::sync::Mutex<Option<(String, String)>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        match r {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                if let Ok(mut f) = self.failed.lock() {
                    f.get_or_insert_with(|| (m.topic().to_owned(), e.to_string()));
                }
            }
        }
    }
}
