//! Kafka helpers of the bench (blocking): producing the source topics and an offset-sync
//! history, and counting the records on a target topic.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use mirrorflow::kafka::wire::{offset_syncs_topic, OffsetSync};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// Hands `record` to `producer`, waiting `wait` (serving its events) while its queue is
/// full: the bench's producers and the bare loop push back the same way.
pub fn send_waiting<'a, C, Part, K, P>(
    producer: &BaseProducer<C, Part>,
    mut record: BaseRecord<'a, K, P, C::DeliveryOpaque>,
    wait: Duration,
) -> Result<(), KafkaError>
where
    C: rdkafka::producer::ProducerContext<Part>,
    Part: rdkafka::producer::Partitioner,
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(wait);
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// Key bytes of every record (`{i:012}`); the value fills the rest of the record size.
const KEY_BYTES: usize = 12;

/// Key of record `i`.
fn key_of(i: u64) -> String {
    format!("{i:012}")
}

/// A printable value (no tab, no newline: kcat's delimiters) of `len` bytes.
fn value_of(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| b'a' + ((i as usize + j) % 26) as u8)
        .collect()
}

/// A value that compresses like a typical JSON event (lz4 about 2:1): fixed field names around
/// pseudo-random printable content (no tab, no newline: kcat's delimiters).
fn event_value(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        out.extend_from_slice(b"{\"field\":\"");
        for _ in 0..24 {
            // xorshift64: deterministic, cheap, enough entropy to defeat lz4's matcher.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push(b'0' + (x % 75) as u8);
        }
        out.extend_from_slice(b"\"},");
    }
    out.truncate(len);
    out
}

/// Produces `n` records of `size` bytes (12 B key + value) round-robin over `partitions`,
/// with producer compression `compression` (`none` or `lz4`).
pub fn produce_source(
    bootstrap: &str,
    topic: &str,
    n: u64,
    partitions: i32,
    size: usize,
    compression: &str,
) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "10")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "500000")
        .set("compression.type", compression)
        .create()
        .context("creating the source producer")?;
    let value_len = size.saturating_sub(KEY_BYTES);
    // Uncompressed: a handful of distinct values is enough. Compressed: values that compress
    // like real events, more distinct ones than lz4's 64 KiB window holds.
    let values: Vec<Vec<u8>> = if compression == "none" {
        (0..26).map(|i| value_of(i, value_len)).collect()
    } else {
        (0..4096).map(|i| event_value(i, value_len)).collect()
    };
    for i in 0..n {
        let key = key_of(i);
        let record = BaseRecord::to(topic)
            .key(key.as_str())
            .payload(values[(i % values.len() as u64) as usize].as_slice())
            .partition((i % partitions as u64) as i32);
        if let Err(e) = send_waiting(&producer, record, Duration::from_millis(10)) {
            bail!("producing record {i} to {topic}: {e}");
        }
        if i.is_multiple_of(4096) {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .with_context(|| format!("flushing the records of {topic}"))?;
    Ok(())
}

/// Writes `n` offset syncs (MM2 format) for `partitions` partitions of `topic` to the
/// offset-syncs topic of source alias `alias` on `bootstrap`, as a worker would have written
/// them over time (into a topic without compaction: the whole history stays).
pub fn produce_sync_history(
    bootstrap: &str,
    alias: &str,
    topic: &str,
    partitions: i32,
    n: u64,
) -> anyhow::Result<()> {
    let syncs_topic = offset_syncs_topic(alias);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "10")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .context("creating the sync history producer")?;
    let partitions = partitions.max(1) as u64;
    for i in 0..n {
        let round = (i / partitions) as i64;
        let sync = OffsetSync {
            topic: topic.to_string(),
            partition: (i % partitions) as i32,
            upstream_offset: round * 100,
            downstream_offset: round * 100,
        };
        let (key, value) = (sync.encode_key()?, sync.encode_value()?);
        let mut record = BaseRecord::to(&syncs_topic)
            .partition(0)
            .key(key.as_slice())
            .payload(value.as_slice());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => bail!("producing sync {i} to {syncs_topic}: {e}"),
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .with_context(|| format!("flushing {syncs_topic}"))?;
    Ok(())
}

/// Reads high watermarks with one ListOffsets request (timestamp -1 = latest).
pub struct TargetCounter {
    bootstrap: String,
    consumer: BaseConsumer,
    created: Instant,
}

impl TargetCounter {
    pub fn new(bootstrap: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bootstrap: bootstrap.to_string(),
            consumer: Self::client(bootstrap)?,
            created: Instant::now(),
        })
    }

    fn client(bootstrap: &str) -> anyhow::Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "mirrorflow-bench-counter")
            .set("enable.auto.commit", "false")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create()
            .context("creating the target counter")
    }

    /// High watermark per partition of `topic` (partitions `0..partitions`), or `None` while
    /// the topic does not exist or the broker does not answer.
    pub fn ends(&mut self, topic: &str, partitions: i32) -> Option<Vec<i64>> {
        let ends = self.try_ends(topic, partitions);
        // librdkafka remembers a missing topic until its next metadata refresh; a new
        // client sees a topic created meanwhile (the worker creates its target topic).
        if ends.is_none() && self.created.elapsed() > Duration::from_millis(500) {
            if let Ok(c) = Self::client(&self.bootstrap) {
                self.consumer = c;
                self.created = Instant::now();
            }
        }
        ends
    }

    fn try_ends(&self, topic: &str, partitions: i32) -> Option<Vec<i64>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::End).ok()?;
        }
        let answer = self
            .consumer
            .offsets_for_times(tpl, Duration::from_secs(10))
            .ok()?;
        let mut ends = vec![0; partitions as usize];
        for e in answer.elements() {
            e.error().ok()?;
            match e.offset() {
                Offset::Offset(o) => *ends.get_mut(e.partition() as usize)? = o,
                _ => return None,
            }
        }
        Some(ends)
    }

    pub fn count(&mut self, topic: &str, partitions: i32) -> Option<u64> {
        self.ends(topic, partitions)
            .map(|e| e.iter().map(|o| (*o).max(0) as u64).sum())
    }
}
