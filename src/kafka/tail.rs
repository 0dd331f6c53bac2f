//! Reading a topic to its end: a consumer without a group that, on each
//! [`TopicTail::catch_up`], reads up to the end offsets seen when the call started. The
//! checkpoint side reads the offset syncs and its own checkpoints with it, the ACL sync and
//! the engine's record of created topics read their stores, `mirrorflow translate` the syncs.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::config::FETCH_QUEUE_BACKOFF_MS;
use super::context::LogContext;
use super::error::{Context, Error};

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
    pub fn new(config: &ClientConfig, topic: &str, what: &str) -> Result<Self, Error> {
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
            .context_with(|| format!("{what}: create consumer for topic {topic}"))?;
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
    fn partitions(&self, timeout: Duration) -> Result<Option<i32>, Error> {
        let md = self
            .consumer
            .fetch_metadata(None, timeout)
            .context_with(|| format!("{}: metadata for topic {}", self.what, self.topic))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == self.topic && t.error().is_none())
            .map(|t| i32::try_from(t.partitions().len()).unwrap_or(i32::MAX)))
    }

    /// Assigns partitions not assigned yet (from the beginning).
    fn refresh_assignment(&mut self, timeout: Duration) -> Result<(), Error> {
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
                .context_with(|| format!("{}: assign {}/{p}", self.what, self.topic))?;
        }
        self.consumer
            .assign(&tpl)
            .context_with(|| format!("{}: assign topic {}", self.what, self.topic))?;
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
    ) -> Result<usize, Error> {
        let deadline = Instant::now() + timeout;
        self.refresh_assignment(timeout)?;
        let mut pending: HashMap<i32, i64> = HashMap::new();
        for (&p, &next) in &self.next {
            let (low, high) = self
                .consumer
                .fetch_watermarks(&self.topic, p, timeout)
                .context_with(|| format!("{}: end offset of {}/{p}", self.what, self.topic))?;
            if high > low && next < high {
                pending.insert(p, high);
            }
        }
        let mut read = 0usize;
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::NotAtEnd {
                    topic: self.topic.clone(),
                    within: timeout,
                    behind: pending.len(),
                }
                .context(&self.what));
            }
            match self.consumer.poll(left.min(Duration::from_millis(200))) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    pending.remove(&p);
                }
                Some(Err(e)) => {
                    return Err(
                        Error::from(e).context(format!("{}: read topic {}", self.what, self.topic))
                    )
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
