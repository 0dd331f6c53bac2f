//! The audit's cluster reads: a partition's records in a range (reduced to
//! [`Rec`](super::compare::Rec)s), the offset syncs, whether topics are compacted. Blocking
//! librdkafka calls run on tokio's blocking pool; every wait is bounded.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Headers;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::compare::{hash_headers, Anchor, Rec};
use crate::kafka::context::LogContext;
use crate::kafka::tail::TopicTail;
use crate::kafka::topics::{describe_topic_configs, Admin};
use crate::kafka::wire::OffsetSync;

/// Why a range could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The start of the range is no longer held (retention or compaction moved the log
    /// start after the plan): the range is skipped, not compared.
    Gone(String),
    /// The cluster could not be read.
    Failed(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Gone(m) | ReadError::Failed(m) => f.write_str(m),
        }
    }
}

/// A reader of record ranges on one cluster (one consumer, reassigned per range).
pub struct RangeReader {
    consumer: BaseConsumer<LogContext>,
    what: String,
}

impl RangeReader {
    /// A reader with the cluster's client config; `what` names the cluster in errors.
    pub fn new(config: &ClientConfig, what: &str) -> Result<Self, String> {
        let mut config = config.clone();
        config
            .set("group.id", "mirrorflow-audit")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            // Never repaired silently: a range the log no longer holds is reported as gone.
            .set("auto.offset.reset", "error")
            .set("allow.auto.create.topics", "false")
            .set("fetch.wait.max.ms", "100")
            // Bounded read-ahead: the audit reads beside replication.
            .set("queued.max.messages.kbytes", "4096")
            .set("fetch.max.bytes", "1048576");
        let consumer = config
            .create_with_context(LogContext::new(what))
            .map_err(|e| format!("{what}: audit consumer: {e}"))?;
        Ok(Self {
            consumer,
            what: what.to_string(),
        })
    }

    /// Blocking: the records of `topic`/`partition` in `[from, to)` (read_committed), up to
    /// the partition's end if that comes first.
    pub fn read(
        &self,
        topic: &str,
        partition: i32,
        (from, to): (i64, i64),
        timeout: Duration,
    ) -> Result<Vec<Rec>, ReadError> {
        let what = &self.what;
        let failed = |e: String| ReadError::Failed(format!("{what}: {topic}/{partition}: {e}"));
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(from))
            .map_err(|e| failed(e.to_string()))?;
        self.consumer
            .assign(&tpl)
            .map_err(|e| failed(format!("assign: {e}")))?;
        let deadline = Instant::now() + timeout;
        let result = loop {
            if Instant::now() > deadline {
                break Err(failed(format!(
                    "offsets [{from}, {to}) not read within {timeout:?} ({} read)",
                    out.len()
                )));
            }
            match self.consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Ok(m)) => {
                    if m.offset() >= to {
                        break Ok(());
                    }
                    if m.offset() >= from {
                        out.push(rec_of(&m));
                    }
                    if m.offset() + 1 >= to {
                        break Ok(());
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break Ok(()),
                Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)))
                | Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OffsetOutOfRange))) => {
                    break Err(ReadError::Gone(format!(
                        "{what}: {topic}/{partition} no longer holds offset {from}"
                    )))
                }
                Some(Err(e)) if is_transient(&e) => {}
                Some(Err(e)) => break Err(failed(e.to_string())),
            }
        };
        let _ = self.consumer.unassign();
        result.map(|()| out)
    }
}

fn is_transient(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::RequestTimedOut
        )
    )
}

/// A consumed record as the audit compares it.
pub fn rec_of<M: Message>(m: &M) -> Rec {
    let headers = m.headers().map_or_else(
        || hash_headers(std::iter::empty()),
        |h| hash_headers(h.iter().map(|h| (h.key, h.value))),
    );
    Rec::new(
        m.offset(),
        m.partition(),
        m.timestamp().to_millis(),
        m.key(),
        m.payload(),
        headers,
    )
}

/// Every offset sync in `topic` (on the target), per source `(topic, partition)`, sorted.
pub async fn offset_syncs(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Vec<Anchor>>, String> {
    let config = config.clone();
    let topic = topic.to_string();
    crate::kafka::blocking(move || {
        let mut tail = TopicTail::new(&config, &topic, "target cluster")?;
        let mut out: HashMap<(String, i32), Vec<Anchor>> = HashMap::new();
        tail.catch_up(timeout, |m| {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                if let Ok(s) = OffsetSync::decode(k, v) {
                    out.entry((s.topic, s.partition)).or_default().push(Anchor {
                        upstream: s.upstream_offset,
                        downstream: s.downstream_offset,
                    });
                }
            }
        })?;
        for v in out.values_mut() {
            v.sort();
            v.dedup();
        }
        Ok(out)
    })
    .await?
}

/// Whether each of `topics` is compacted (`cleanup.policy` holds `compact`); a topic the
/// answer leaves out or fails for counts as compacted, so its holes are never a mismatch.
pub async fn compacted(
    admin: &Admin,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, bool>, String> {
    let all = describe_topic_configs(admin, topics, timeout).await?;
    Ok(topics
        .iter()
        .map(|t| {
            let compact = all
                .get(t)
                .and_then(|r| r.as_ref().ok())
                .is_none_or(|entries| {
                    entries
                        .iter()
                        .find(|e| e.name == "cleanup.policy")
                        .and_then(|e| e.value.as_deref())
                        .is_some_and(|v| v.contains("compact"))
                });
            (t.clone(), compact)
        })
        .collect())
}
