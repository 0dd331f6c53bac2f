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

/// Offset syncs per source `(topic, partition)`, sorted.
pub type Syncs = HashMap<(String, i32), Vec<Anchor>>;

/// Most offset syncs kept per partition between runs: older ones are thinned (every other
/// one dropped from the older half), so ranges can still be placed across the whole log at
/// a bounded memory (16 bytes a sync).
pub const MAX_SYNCS_KEPT: usize = 1_024;

/// The offset-syncs topic read incrementally: each [`SyncReader::catch_up`] reads what was
/// written since the last one, so a worker does not re-read the topic every run.
pub struct SyncReader {
    tail: TopicTail,
    syncs: Syncs,
    /// Keep only these source partitions (`None`: all).
    only: Option<std::collections::HashSet<(String, i32)>>,
}

impl SyncReader {
    /// A reader of `topic` on the target.
    pub fn new(config: &ClientConfig, topic: &str) -> Result<Self, String> {
        Ok(Self {
            tail: TopicTail::new(config, topic, "target cluster")?,
            syncs: HashMap::new(),
            only: None,
        })
    }

    /// Keeps only the syncs of `partitions` from now on (the ones a worker owns).
    pub fn keep_only(&mut self, partitions: impl IntoIterator<Item = (String, i32)>) {
        let only: std::collections::HashSet<(String, i32)> = partitions.into_iter().collect();
        self.syncs.retain(|k, _| only.contains(k));
        self.only = Some(only);
    }

    /// Whether it has kept every sync of `partitions` (a partition it dropped, or did not
    /// keep, needs a new reader from the topic's start).
    pub fn covers<'a>(&self, mut partitions: impl Iterator<Item = &'a (String, i32)>) -> bool {
        self.only
            .as_ref()
            .is_none_or(|o| partitions.all(|p| o.contains(p)))
    }

    /// Blocking: reads the topic to its current end.
    pub fn catch_up(&mut self, timeout: Duration) -> Result<(), String> {
        let (syncs, only) = (&mut self.syncs, &self.only);
        let mut touched = std::collections::HashSet::new();
        self.tail.catch_up(timeout, |m| {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                if let Ok(s) = OffsetSync::decode(k, v) {
                    let key = (s.topic, s.partition);
                    if only.as_ref().is_some_and(|o| !o.contains(&key)) {
                        return;
                    }
                    let list = syncs.entry(key.clone()).or_default();
                    list.push(Anchor {
                        upstream: s.upstream_offset,
                        downstream: s.downstream_offset,
                    });
                    if list.len() > 2 * MAX_SYNCS_KEPT {
                        list.sort();
                        list.dedup();
                        thin(list, MAX_SYNCS_KEPT);
                    }
                    touched.insert(key);
                }
            }
        })?;
        for key in touched {
            if let Some(v) = self.syncs.get_mut(&key) {
                v.sort();
                v.dedup();
                thin(v, MAX_SYNCS_KEPT);
            }
        }
        Ok(())
    }

    /// The syncs read so far.
    pub fn syncs(&self) -> &Syncs {
        &self.syncs
    }
}

/// Keeps at most `max` of the sorted `syncs`: the newer half whole, every other one of the
/// older part dropped until it fits. Pure.
pub fn thin(syncs: &mut Vec<Anchor>, max: usize) {
    while syncs.len() > max.max(2) {
        let newer = syncs.len() - max / 2;
        let mut i = 0;
        syncs.retain(|_| {
            i += 1;
            i > newer || i % 2 == 1
        });
    }
}

/// Every offset sync in `topic` (on the target), per source `(topic, partition)`, sorted
/// (older ones thinned past [`MAX_SYNCS_KEPT`] per partition).
pub async fn offset_syncs(
    config: &ClientConfig,
    topic: &str,
    timeout: Duration,
) -> Result<Syncs, String> {
    let config = config.clone();
    let topic = topic.to_string();
    crate::kafka::blocking(move || {
        let mut r = SyncReader::new(&config, &topic)?;
        r.catch_up(timeout)?;
        Ok(r.syncs)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinning_keeps_the_newest_half_and_spreads_the_rest() {
        let mut v: Vec<Anchor> = (0..100)
            .map(|i| Anchor {
                upstream: i,
                downstream: i,
            })
            .collect();
        thin(&mut v, 40);
        assert!(v.len() <= 40, "{}", v.len());
        assert_eq!(v.first().unwrap().upstream, 0, "the oldest stays");
        let newest: Vec<i64> = v.iter().rev().take(20).map(|a| a.upstream).collect();
        assert_eq!(newest, (80..100).rev().collect::<Vec<_>>());
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        let mut short = v[..3].to_vec();
        thin(&mut short, 40);
        assert_eq!(short.len(), 3);
    }
}
