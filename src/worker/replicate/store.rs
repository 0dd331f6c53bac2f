//! Small JSON stores in compacted topics (the failover and failback reports) and read_committed
//! reads of offset ranges: shared by the failover (`worker::failover`) and failing back.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{ClientConfig, Message as _};

use crate::kafka::tail::TopicTail;

/// Bound of each cluster call.
pub const IO_TIMEOUT: Duration = Duration::from_secs(15);

/// The store topic of a flow's failovers (on its target).
pub fn failover_store(namespace: &str, flow: &str) -> String {
    format!("mirrorflow-failover.{namespace}.{flow}.internal")
}

/// Why a store or a range could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A Kafka call failed.
    #[error(transparent)]
    Kafka(#[from] crate::kafka::Error),
    /// A record does not decode, or a value does not encode.
    #[error("store {topic}: {what}")]
    Json { topic: String, what: String },
    /// A blocking task did not finish.
    #[error("blocking task failed: {0}")]
    Join(String),
}

impl From<rdkafka::error::KafkaError> for StoreError {
    fn from(e: rdkafka::error::KafkaError) -> Self {
        Self::Kafka(e.into())
    }
}

/// Applies one record of a keyed JSON store to `known`: the last record per key wins and a
/// record without a value forgets its key. A record that does not decode changes nothing and
/// is described (`offset N: why`): the caller fails the read, since guessing is worse.
pub fn apply_keyed<T: serde::de::DeserializeOwned>(
    known: &mut BTreeMap<String, T>,
    m: &impl rdkafka::Message,
) -> Option<String> {
    let key = String::from_utf8_lossy(m.key()?).into_owned();
    match m.payload().map(serde_json::from_slice::<T>) {
        Some(Ok(v)) => {
            known.insert(key, v);
        }
        None => {
            known.remove(&key);
        }
        Some(Err(e)) => return Some(format!("offset {}: {e}", m.offset())),
    }
    None
}

/// The JSON records of store `topic` on `cluster` (a config for it), by key: the last
/// record per key wins, a tombstone forgets it. A missing topic reads as empty.
pub async fn read_store<T: serde::de::DeserializeOwned + Send + 'static>(
    config: ClientConfig,
    topic: String,
    cluster: &'static str,
) -> Result<BTreeMap<String, T>, StoreError> {
    blocking(move || {
        let mut tail = TopicTail::new(&config, &topic, cluster)?;
        let mut out = BTreeMap::new();
        let mut bad = None;
        tail.catch_up(IO_TIMEOUT, |m| {
            if let Some(e) = apply_keyed(&mut out, m) {
                bad = Some(e);
            }
        })?;
        match bad {
            Some(what) => Err(StoreError::Json {
                topic,
                what: format!("a record does not decode: {what}"),
            }),
            None => Ok(out),
        }
    })
    .await
}

/// Writes `value` as JSON under `key` to store `topic` (created compacted if missing, with
/// replication factor `rf`) on the cluster `config` reaches.
pub async fn write_store<T: serde::Serialize>(
    config: ClientConfig,
    topic: String,
    rf: Option<i32>,
    key: String,
    value: &T,
) -> Result<(), StoreError> {
    crate::kafka::topics::ensure_store_topic(&config, &topic, rf, IO_TIMEOUT).await?;
    let payload = serde_json::to_vec(value).map_err(|e| StoreError::Json {
        topic: topic.clone(),
        what: e.to_string(),
    })?;
    blocking(move || {
        let mut c = config;
        c.set("acks", "all");
        let p: BaseProducer = c.create()?;
        p.send(
            BaseRecord::<'_, [u8], [u8]>::to(&topic)
                .key(key.as_bytes())
                .payload(&payload),
        )
        .map_err(|(e, _)| crate::kafka::Error::from(e))?;
        Ok(crate::kafka::producer::flush(&p, IO_TIMEOUT)?)
    })
    .await
}

/// Blocking: hands each record `consumer` (read_committed) gets from `topic`/`partition` in
/// `[from, to)` to `each`, reading to the range's end or the partition's (its last stable
/// offset); returns how many.
pub fn read_range(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    (from, to): (i64, i64),
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> Result<i64, StoreError> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(from))?;
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut n = 0;
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            // Left from the previous range's assignment.
            Some(Ok(m)) if m.topic() != topic || m.partition() != partition => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) if p != partition => {}
            Some(Ok(m)) if m.offset() >= to => return Ok(n),
            Some(Ok(m)) => {
                n += 1;
                each(&m);
                if m.offset() + 1 >= to {
                    return Ok(n);
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(n),
            Some(Err(e)) => return Err(e.into()),
        }
    }
    Err(crate::kafka::Error::Timeout(IO_TIMEOUT).into())
}

/// A read_committed reader of ranges for [`read_range`] (group `group`, nothing committed).
pub fn range_reader(config: &ClientConfig, group: &str) -> ClientConfig {
    let mut config = config.clone();
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", "100");
    config
}

/// Runs `f` on the blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Join(e.to_string()))?
}
