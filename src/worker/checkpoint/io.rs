//! Cluster I/O of the checkpoint side: tailing a topic to its end (offset syncs, checkpoint
//! reload), creating the checkpoints topic, writing checkpoint records. Blocking calls are
//! marked; run them on tokio's blocking pool.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::config::FETCH_QUEUE_BACKOFF_MS;
use crate::kafka::context::LogContext;
use crate::kafka::producer::{EventProducer, Outgoing};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::kafka::wire;
use crate::worker::replicate::io::replication;

/// How often a tail re-reads metadata to find new partitions of its topic.
const METADATA_REFRESH: Duration = Duration::from_secs(60);

/// A consumer that reads one topic from the beginning and, on each [`catch_up`], up to the
/// end offsets seen when the call started. No consumer group: partitions are assigned
/// directly and nothing is committed. Reads `read_committed`, so syncs of aborted
/// transactions (whose records were aborted too) are never used.
///
/// [`catch_up`]: TopicTail::catch_up
pub struct TopicTail {
    /// Logs through tracing; end-of-partition events (asked for) are not errors.
    consumer: BaseConsumer<LogContext>,
    topic: String,
    what: String,
    /// Next offset to read per assigned partition.
    next: BTreeMap<i32, i64>,
    metadata_at: Option<Instant>,
}

impl TopicTail {
    /// A tail of `topic` with the cluster's client config; `what` names it in errors.
    pub fn new(config: &ClientConfig, topic: &str, what: &str) -> Result<Self, String> {
        let mut config = config.clone();
        config
            // Required by librdkafka even for assign(); never joins or commits.
            .set("group.id", format!("mirrorflow-checkpoint-reader-{topic}"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed")
            .set("allow.auto.create.topics", "false")
            .set("fetch.wait.max.ms", "100")
            // Bounded read-ahead: reading a long offset-syncs topic at start must not grow
            // the worker's memory (librdkafka's default prefetch is up to 64 MiB). The
            // kbytes bound counts payload only; a sync is ~40 B against ~300 B of
            // librdkafka's own per-message structures, so what one fetch brings is the
            // peak: 1 MiB of syncs was ~10 MiB held at once, 256 KiB is ~3 (the broker still
            // returns a larger first batch whole). librdkafka wants `message.max.bytes`
            // (a request bound; this client sends no records) no larger than a fetch.
            .set("queued.max.messages.kbytes", "2048")
            .set("queued.min.messages", "2000")
            .set("fetch.max.bytes", "262144")
            .set("message.max.bytes", "262144")
            .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
        let consumer: BaseConsumer<LogContext> = config
            .create_with_context(LogContext::new(what))
            .map_err(|e| format!("{what}: create consumer for topic {topic}: {e}"))?;
        Ok(Self {
            consumer,
            topic: topic.to_string(),
            what: what.to_string(),
            next: BTreeMap::new(),
            metadata_at: None,
        })
    }

    /// Partitions of the topic, `None` if it does not exist. Asks for all topics: a named
    /// metadata request can auto-create the topic on some brokers.
    fn partitions(&self, timeout: Duration) -> Result<Option<i32>, String> {
        let md = self
            .consumer
            .fetch_metadata(None, timeout)
            .map_err(|e| format!("{}: metadata for topic {}: {e}", self.what, self.topic))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map(|t| i32::try_from(t.partitions().len()).unwrap_or(i32::MAX)))
    }

    /// Assigns partitions not assigned yet (from the beginning).
    fn refresh_assignment(&mut self, timeout: Duration) -> Result<(), String> {
        if self
            .metadata_at
            .is_some_and(|t| t.elapsed() < METADATA_REFRESH && !self.next.is_empty())
        {
            return Ok(());
        }
        self.metadata_at = Some(Instant::now());
        let Some(count) = self.partitions(timeout)? else {
            return Ok(());
        };
        if (0..count).all(|p| self.next.contains_key(&p)) {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for p in 0..count {
            let offset = match self.next.get(&p) {
                Some(o) => Offset::Offset(*o),
                None => Offset::Beginning,
            };
            tpl.add_partition_offset(&self.topic, p, offset)
                .map_err(|e| format!("{}: assign {}/{p}: {e}", self.what, self.topic))?;
        }
        self.consumer
            .assign(&tpl)
            .map_err(|e| format!("{}: assign topic {}: {e}", self.what, self.topic))?;
        for p in 0..count {
            self.next.entry(p).or_insert(0);
        }
        Ok(())
    }

    /// Blocking: reads every record up to the end offsets seen at the start of the call,
    /// passing each to `f`. Fails if that end is not reached within `timeout`. A missing
    /// topic reads as empty. Returns the number of records read.
    pub fn catch_up(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(&BorrowedMessage<'_>),
    ) -> Result<usize, String> {
        let deadline = Instant::now() + timeout;
        self.refresh_assignment(timeout)?;
        let mut pending: HashMap<i32, i64> = HashMap::new();
        for (&p, &next) in &self.next {
            let (low, high) = self
                .consumer
                .fetch_watermarks(&self.topic, p, timeout)
                .map_err(|e| format!("{}: end offset of {}/{p}: {e}", self.what, self.topic))?;
            if high > low && next < high {
                pending.insert(p, high);
            }
        }
        let mut read = 0usize;
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!(
                    "{}: topic {} not read to its end within {timeout:?} ({} partition(s) behind)",
                    self.what,
                    self.topic,
                    pending.len()
                ));
            }
            match self.consumer.poll(left.min(Duration::from_millis(200))) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    pending.remove(&p);
                }
                Some(Err(e)) => {
                    return Err(format!("{}: read topic {}: {e}", self.what, self.topic))
                }
                Some(Ok(msg)) => {
                    let p = msg.partition();
                    self.next.insert(p, msg.offset() + 1);
                    if pending.get(&p).is_some_and(|&end| msg.offset() + 1 >= end) {
                        pending.remove(&p);
                    }
                    f(&msg);
                    read += 1;
                }
            }
        }
        Ok(read)
    }
}

/// Value of header `name` of a message, if present.
pub fn header<'a>(msg: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a [u8]> {
    msg.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// Creates the checkpoints topic (1 partition, compacted) with `replication_factor`
/// (`spec.internalTopics.replicationFactor`; `None`: the broker's default) unless it exists.
/// Returns whether it was created.
pub async fn ensure_checkpoints_topic(
    config: &ClientConfig,
    topic: &str,
    replication_factor: Option<i32>,
    timeout: Duration,
) -> Result<bool, String> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| format!("target cluster: create admin client: {e}"))?;
    let new_topic =
        NewTopic::new(topic, 1, replication(replication_factor)).set("cleanup.policy", "compact");
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .map_err(|e| format!("target cluster: create topic {topic}: {e}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((name, code))) => {
            let rf = replication_factor.map_or("the brokers' default".into(), |rf| rf.to_string());
            Err(format!(
                "target cluster: create topic {name} (replication factor {rf}): {code}"
            ))
        }
        None => Err(format!("target cluster: create topic {topic}: no answer")),
    }
}

/// A producer for checkpoint records (idempotent, acks=all).
pub fn checkpoint_producer(config: &ClientConfig) -> Result<EventProducer, String> {
    let mut config = config.clone();
    config
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    EventProducer::create(&config, LogContext::new("target"))
        .map_err(|e| format!("target cluster: create checkpoint producer: {e}"))
}

/// Writes checkpoint records to partition 0 of `topic`, pipelined. Returns, per input
/// record, whether it was acknowledged (with the error text if not).
pub async fn write_checkpoints(
    producer: &EventProducer,
    topic: &str,
    records: &[wire::Checkpoint],
    timeout: Duration,
) -> Vec<Result<(), String>> {
    type KeyValue = (Vec<u8>, Vec<u8>);
    let encoded: Vec<Result<KeyValue, String>> = records
        .iter()
        .map(|c| {
            let key = c
                .encode_key()
                .map_err(|e| format!("group {:?}: {e}", c.group))?;
            let value = c
                .encode_value()
                .map_err(|e| format!("group {:?}: {e}", c.group))?;
            Ok((key, value))
        })
        .collect();
    let outgoing: Vec<Outgoing<'_>> = encoded
        .iter()
        .flatten()
        .map(|(key, value)| Outgoing {
            topic,
            partition: Some(0),
            key: Some(key),
            value: Some(value),
            timestamp: None,
        })
        .collect();
    let mut reports = producer.send_all(&outgoing, timeout).await.into_iter();
    encoded
        .iter()
        .map(|e| {
            e.as_ref().map_err(Clone::clone)?;
            match reports.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(format!("write checkpoint to {topic}: {e}")),
                None => Err(format!("write checkpoint to {topic}: no delivery report")),
            }
        })
        .collect()
}
