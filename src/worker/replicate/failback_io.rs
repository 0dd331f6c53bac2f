//! Failing back's I/O, before the flow writes anything: the failover's report from its store
//! on this flow's source (the new primary), the old primary's ends, the diverged records
//! counted (and copied to `<topic>.diverged` on request), and the outcome kept on this flow's
//! target in `mirrorflow-failback.<namespace>.<flow>.internal` (key `<flow>/<id>`), so a
//! restart neither measures again (its own writes would count as diverged) nor copies again.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedHeaders};
use rdkafka::ClientConfig;
use tracing::info;

use super::failback::{self, diverged_ranges, points, FailbackWait, Measured, Point, Tp};
use super::store::{
    blocking, failover_store, range_reader, read_range, read_store, write_store, StoreError,
    IO_TIMEOUT,
};
use crate::api::{AfterFailoverStart, FailbackReport, FailoverReport};
use crate::kafka::admin::GroupAdmin;
use crate::kafka::context::LogContext;
use crate::kafka::producer::{EventProducer, Outgoing};
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// Why failing back could not be prepared (the worker retries, saying why).
#[derive(Debug, thiserror::Error)]
pub enum FailbackError {
    #[error(transparent)]
    Io(#[from] StoreError),
    #[error("flow {0:?} is not NAMESPACE/NAME")]
    FlowRef(String),
    #[error("copying the diverged records to {topic}: {why}")]
    Copy {
        topic: String,
        why: crate::kafka::Error,
    },
}

impl crate::telemetry::metrics::Categorized for FailbackError {
    fn reason(&self) -> &'static str {
        match self {
            Self::Io(StoreError::Kafka(e)) | Self::Copy { why: e, .. } => e.reason(),
            Self::Io(StoreError::Json { .. }) => "Record",
            Self::Io(StoreError::Join(_)) => "Internal",
            Self::FlowRef(_) => "InvalidSpec",
        }
    }
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
        let producer = if self.start.copy_diverged {
            let mut c = self.target.clone();
            c.set("acks", "all").set("enable.idempotence", "true");
            Some(EventProducer::create(&c, LogContext::new("target"))?)
        } else {
            None
        };
        // The reader hands the copies over in chunks while it reads on: memory stays bounded
        // by two chunks however many records diverged.
        let (chunks, mut to_copy) = tokio::sync::mpsc::channel::<CopyChunk>(1);
        let copying = producer.is_some();
        let read = blocking(move || {
            let consumer: BaseConsumer = reader.create()?;
            let mut out = BTreeMap::new();
            for ((topic, partition), from, to) in ranges {
                let dest = failback::diverged_topic(&topic);
                let mut first_last: Option<(i64, i64)> = None;
                let mut chunk = Vec::new();
                let n = read_range(&consumer, &topic, partition, (from, to), |m| {
                    let (first, _) = *first_last.get_or_insert((m.offset(), m.offset()));
                    first_last = Some((first, m.offset()));
                    if copying {
                        chunk.push(CopiedRecord::of(m));
                        if chunk.len() == COPY_CHUNK {
                            let full = std::mem::take(&mut chunk);
                            // Gone only when the copier stopped: it reports why.
                            let _ = chunks.blocking_send((dest.clone(), partition, full));
                        }
                    }
                })?;
                if !chunk.is_empty() {
                    let _ = chunks.blocking_send((dest, partition, chunk));
                }
                let (first, last) = first_last.unwrap_or((from, from));
                out.insert((topic, partition), (first, last, n));
            }
            Ok(out)
        });
        let copy = async {
            let (mut copied, mut failed) = (0, None);
            while let Some((topic, partition, records)) = to_copy.recv().await {
                let Some(p) = producer.as_ref().filter(|_| failed.is_none()) else {
                    continue; // drained, so the reader never waits on a stopped copier
                };
                let outgoing: Vec<Outgoing<'_>> = records
                    .iter()
                    .map(|r| r.outgoing(&topic, partition))
                    .collect();
                for report in p.send_all(&outgoing, IO_TIMEOUT).await {
                    match report {
                        Ok(_) => copied += 1,
                        Err(e) => {
                            failed.get_or_insert_with(|| {
                                (topic.clone(), crate::kafka::Error::from(e))
                            });
                        }
                    }
                }
            }
            (copied, failed)
        };
        let (measured, (copied, failed)) = tokio::join!(read, copy);
        let measured = measured?;
        match failed {
            Some((topic, why)) => Err(FailbackError::Copy { topic, why }),
            None => Ok((measured, copied)),
        }
    }
}

/// Records copied per [`EventProducer::send_all`].
const COPY_CHUNK: usize = 1000;

/// Records to copy to `.0`/`.1`.
type CopyChunk = (String, i32, Vec<CopiedRecord>);

/// A record read, to copy: key, value, timestamp and headers.
struct CopiedRecord {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: Option<OwnedHeaders>,
}

impl CopiedRecord {
    fn of(m: &rdkafka::message::BorrowedMessage<'_>) -> Self {
        Self {
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp: m.timestamp().to_millis(),
            headers: m.headers().map(|h| h.detach()),
        }
    }

    fn outgoing<'a>(&'a self, topic: &'a str, partition: i32) -> Outgoing<'a> {
        Outgoing {
            topic,
            partition: Some(partition),
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            timestamp: self.timestamp,
            headers: self.headers.as_ref(),
        }
    }
}
