//! Client-side helpers for tests, benches and the demo: topics, records, watermarks, group
//! offsets.
//!
//! All take a bootstrap-servers string, so they work against any cluster, and all waits are
//! bounded. Blocking librdkafka calls run on tokio's blocking pool.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::testkit::local::BrokerError;

/// Bound for admin calls, metadata propagation waits and deliveries.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

/// A client config for `bootstrap`, with the security properties a secured local broker
/// registered for it (see `security`).
pub(crate) fn client_config(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    for (k, v) in super::security::client_properties_for(bootstrap) {
        config.set(k, v);
    }
    config
}

fn admin(bootstrap: &str) -> Result<AdminClient<DefaultClientContext>, BrokerError> {
    client_config(bootstrap)
        .create()
        .map_err(|source| BrokerError::Kafka {
            op: format!("create admin client for {bootstrap}"),
            source,
        })
}

fn admin_options() -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(OP_TIMEOUT))
        .operation_timeout(Some(OP_TIMEOUT))
}

async fn blocking<T: Send + 'static>(
    op: &str,
    f: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, BrokerError> {
    crate::kafka::blocking(f)
        .await
        .map_err(|detail| BrokerError::Failed {
            op: op.to_owned(),
            detail,
        })?
}

/// Partition count of `topic` as the metadata shows it: `None` if absent or in error, or
/// if some partition has no leader yet. Asks for all topics because a named metadata
/// request may auto-create the topic on some brokers.
fn partitions_blocking(consumer: &BaseConsumer, topic: &str) -> Result<Option<i32>, BrokerError> {
    let md = consumer
        .fetch_metadata(None, OP_TIMEOUT)
        .map_err(|source| BrokerError::Kafka {
            op: format!("fetch metadata for topic {topic}"),
            source,
        })?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    let ready = t.error().is_none()
        && t.partitions()
            .iter()
            .all(|p| p.error().is_none() && p.leader() >= 0);
    Ok(ready.then(|| i32::try_from(t.partitions().len()).unwrap_or(i32::MAX)))
}

fn consumer_blocking(bootstrap: &str, extra: &[(&str, &str)]) -> Result<BaseConsumer, BrokerError> {
    let mut config = client_config(bootstrap);
    for (k, v) in extra {
        config.set(*k, *v);
    }
    config.create().map_err(|source| BrokerError::Kafka {
        op: format!("create consumer for {bootstrap}"),
        source,
    })
}

/// Partition count of `topic`, or `None` if the topic does not exist (or is not ready).
pub async fn topic_partitions(bootstrap: &str, topic: &str) -> Result<Option<i32>, BrokerError> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    blocking("topic_partitions", move || {
        partitions_blocking(&consumer_blocking(&bootstrap, &[])?, &topic)
    })
    .await
}

/// Waits until `want(partition count)` holds for `topic` (bounded by the op timeout).
async fn wait_for_metadata(
    bootstrap: &str,
    topic: &str,
    what: &str,
    want: impl Fn(Option<i32>) -> bool + Send + 'static,
) -> Result<(), BrokerError> {
    let (bootstrap, topic, what) = (bootstrap.to_owned(), topic.to_owned(), what.to_owned());
    blocking("wait for topic metadata", move || {
        let consumer = consumer_blocking(&bootstrap, &[])?;
        let begin = Instant::now();
        loop {
            let seen = partitions_blocking(&consumer, &topic)?;
            if want(seen) {
                return Ok(());
            }
            if begin.elapsed() >= OP_TIMEOUT {
                return Err(BrokerError::Timeout {
                    op: format!("wait until topic {topic} {what}"),
                    waited: begin.elapsed(),
                    detail: format!("metadata shows {seen:?} ready partitions"),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
}

/// Waits until metadata shows `topic` with `partitions` partitions, all with a leader.
pub(super) async fn wait_for_partitions(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<(), BrokerError> {
    let what = format!("has {partitions} partitions with leaders");
    wait_for_metadata(bootstrap, topic, &what, move |n| n == Some(partitions)).await
}

/// Creates `topic` (replication factor 1) with topic `configs` through the admin API and
/// waits until its metadata shows every partition. Not for the mock: use
/// `LocalBroker::create_topic`, which knows the mock's own call.
pub async fn create_topic(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> Result<(), BrokerError> {
    create_topic_replicated(bootstrap, topic, partitions, 1, configs).await
}

/// [`create_topic`] with `replication` replicas; -1 takes the broker's
/// `default.replication.factor` (Apache Kafka; the stand-ins want an explicit count).
pub async fn create_topic_replicated(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replication: i32,
    configs: &[(&str, &str)],
) -> Result<(), BrokerError> {
    let op = format!("create topic {topic} ({partitions} partitions)");
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
    for (key, value) in configs {
        new_topic = new_topic.set(key, value);
    }
    let results = admin(bootstrap)?
        .create_topics([&new_topic], &admin_options())
        .await
        .map_err(|source| BrokerError::Kafka {
            op: op.clone(),
            source,
        })?;
    for result in results {
        if let Err((name, code)) = result {
            return Err(BrokerError::Failed {
                op: format!("create topic {name} ({partitions} partitions)"),
                detail: code.to_string(),
            });
        }
    }
    wait_for_partitions(bootstrap, topic, partitions).await
}

/// Deletes `topic` and waits until metadata no longer lists it, so recreating it right
/// after does not race with the deletion. The mock does not support it (times out after
/// 30 s waiting for a controller).
pub async fn delete_topic(bootstrap: &str, topic: &str) -> Result<(), BrokerError> {
    let op = format!("delete topic {topic}");
    let results = admin(bootstrap)?
        .delete_topics(&[topic], &admin_options())
        .await
        .map_err(|source| BrokerError::Kafka {
            op: op.clone(),
            source,
        })?;
    for result in results {
        if let Err((name, code)) = result {
            return Err(BrokerError::Failed {
                op: format!("delete topic {name}"),
                detail: code.to_string(),
            });
        }
    }
    wait_for_metadata(bootstrap, topic, "is gone", |n| n.is_none()).await
}

/// DeleteRecords: deletes the records of `topic`/`partition` below `offset` and returns
/// the partition's new log start offset (low watermark). Works on Apache Kafka: tansu drops
/// the connection (`BrokerTransportFailure`), the mock answers `UnsupportedFeature`.
/// `offset` must be ≥ 0 (librdkafka rejects -1) and ≤ the high watermark (Kafka answers
/// `OffsetOutOfRange` beyond it).
pub async fn delete_records_before(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<i64, BrokerError> {
    let op = format!("delete records of {topic}/{partition} before offset {offset}");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
        .map_err(|source| BrokerError::Kafka {
            op: op.clone(),
            source,
        })?;
    let result = admin(bootstrap)?
        .delete_records(&tpl, &admin_options())
        .await
        .map_err(|source| BrokerError::Kafka {
            op: op.clone(),
            source,
        })?;
    let elem = result
        .find_partition(topic, partition)
        .ok_or_else(|| BrokerError::Failed {
            op: op.clone(),
            detail: "partition missing from the answer".to_owned(),
        })?;
    elem.error().map_err(|source| BrokerError::Kafka {
        op: op.clone(),
        source,
    })?;
    match elem.offset() {
        Offset::Offset(low) => Ok(low),
        other => Err(BrokerError::Failed {
            op,
            detail: format!("answer carries no low watermark: {other:?}"),
        }),
    }
}

/// One record to produce. `None` partition lets the client partition by key; `None`
/// timestamp lets the client stamp it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProduceRecord {
    /// Target partition.
    pub partition: Option<i32>,
    /// Key bytes; `None` = null key.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` = null value (tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers in order; a `None` value is a null header value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Create time in ms since the epoch.
    pub timestamp_ms: Option<i64>,
}

impl ProduceRecord {
    /// A record with key and value, no headers, client timestamp.
    pub fn new(key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Self {
        ProduceRecord {
            key: Some(key.into()),
            value: Some(value.into()),
            ..Default::default()
        }
    }

    /// Sets the partition.
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Appends a header (`None` value = null).
    pub fn header(mut self, key: impl Into<String>, value: Option<&[u8]>) -> Self {
        self.headers.push((key.into(), value.map(<[u8]>::to_vec)));
        self
    }

    /// Sets the create timestamp (ms since the epoch).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp_ms = Some(ms);
        self
    }
}

/// Where a produced record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Delivered {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
}

/// Produces `records` to `topic` (acks=all, pipelined) and returns where each landed, in
/// input order. Fails on the first record the broker refuses.
pub async fn produce(
    bootstrap: &str,
    topic: &str,
    records: &[ProduceRecord],
) -> Result<Vec<Delivered>, BrokerError> {
    let producer: FutureProducer = client_config(bootstrap)
        .set("acks", "all")
        .create()
        .map_err(|source| BrokerError::Kafka {
            op: format!("create producer for {bootstrap}"),
            source,
        })?;
    // All sends are polled together so the client can batch; `join_all` polls them in
    // input order, which keeps per-partition order.
    let sends = records.iter().map(|r| {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic);
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        if let Some(k) = &r.key {
            record = record.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            record = record.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp_ms {
            record = record.timestamp(ts);
        }
        if !r.headers.is_empty() {
            let headers = r
                .headers
                .iter()
                .fold(OwnedHeaders::new(), |h, (key, value)| {
                    h.insert(Header {
                        key: key.as_str(),
                        value: value.as_deref(),
                    })
                });
            record = record.headers(headers);
        }
        producer.send(record, OP_TIMEOUT)
    });
    let results = futures::future::join_all(sends).await;
    results
        .into_iter()
        .enumerate()
        .map(|(i, result)| match result {
            Ok(d) => Ok(Delivered {
                partition: d.partition,
                offset: d.offset,
            }),
            Err((source, _)) => Err(BrokerError::Kafka {
                op: format!("produce record #{i} to topic {topic}"),
                source,
            }),
        })
        .collect()
}

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key bytes; `None` = null key.
    pub key: Option<Vec<u8>>,
    /// Value bytes; `None` = null value.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Record timestamp (create or log-append time), ms since the epoch.
    pub timestamp_ms: Option<i64>,
}

/// When [`consume_all`] stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumeUntil {
    /// Stop as soon as this many records arrived; fail if they do not arrive in time.
    pub expected: Option<usize>,
    /// Without `expected`: stop once no record arrived for this long.
    pub idle: Duration,
    /// Overall bound; running into it is an error.
    pub timeout: Duration,
}

impl ConsumeUntil {
    /// Exactly `n` records within 30 s.
    pub fn count(n: usize) -> Self {
        ConsumeUntil {
            expected: Some(n),
            idle: Duration::ZERO,
            timeout: OP_TIMEOUT,
        }
    }

    /// Whatever arrives until nothing came for `idle` (within 30 s). Idle-based rather than
    /// watermark-based because tansu reports wrong high watermarks.
    pub fn idle(idle: Duration) -> Self {
        ConsumeUntil {
            expected: None,
            idle,
            timeout: OP_TIMEOUT,
        }
    }

    /// Replaces the overall bound.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether to stop after `got` records with the last one `since_last` ago.
    fn done(&self, got: usize, since_last: Duration) -> bool {
        match self.expected {
            Some(n) => got >= n,
            None => since_last >= self.idle,
        }
    }
}

/// Reads `topic` from the beginning of every partition (assign, no consumer group, no
/// commits) until `until` says stop. Returns the records sorted by (partition, offset).
/// A consumer error (e.g. offset out of range) fails the call.
pub async fn consume_all(
    bootstrap: &str,
    topic: &str,
    until: ConsumeUntil,
) -> Result<Vec<ConsumedRecord>, BrokerError> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    blocking("consume_all", move || {
        let op = format!("consume topic {topic}");
        // librdkafka wants a group id even for assign(); no offsets are committed to it.
        // Short fetch waits: the mock answers an empty fetch only after the full wait.
        let consumer = consumer_blocking(
            &bootstrap,
            &[
                ("group.id", "mirrorflow-testkit-consume-all"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("fetch.wait.max.ms", "50"),
            ],
        )?;
        let partitions =
            partitions_blocking(&consumer, &topic)?.ok_or_else(|| BrokerError::Failed {
                op: op.clone(),
                detail: "topic does not exist".to_owned(),
            })?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .map_err(|source| BrokerError::Kafka {
                    op: op.clone(),
                    source,
                })?;
        }
        consumer.assign(&tpl).map_err(|source| BrokerError::Kafka {
            op: op.clone(),
            source,
        })?;
        let begin = Instant::now();
        let mut last = begin;
        let mut records = Vec::new();
        while !until.done(records.len(), last.elapsed()) {
            if begin.elapsed() >= until.timeout {
                return Err(BrokerError::Timeout {
                    op,
                    waited: begin.elapsed(),
                    detail: match until.expected {
                        Some(n) => format!("got {} of {n} records", records.len()),
                        None => format!("records still arriving ({} so far)", records.len()),
                    },
                });
            }
            match consumer.poll(Duration::from_millis(50)) {
                None => {}
                Some(Err(source)) => return Err(BrokerError::Kafka { op, source }),
                Some(Ok(msg)) => {
                    last = Instant::now();
                    records.push(ConsumedRecord {
                        partition: msg.partition(),
                        offset: msg.offset(),
                        key: msg.key().map(<[u8]>::to_vec),
                        value: msg.payload().map(<[u8]>::to_vec),
                        headers: msg
                            .headers()
                            .map(|hs| {
                                hs.iter()
                                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        timestamp_ms: msg.timestamp().to_millis(),
                    });
                }
            }
        }
        records.sort_by_key(|r| (r.partition, r.offset));
        Ok(records)
    })
    .await
}

/// `(low, high)` watermarks of `topic`/`partition`. On tansu the high one is wrong when the
/// producer batches: "last batch base + 1" (`tests/brokers_smoke.rs`).
pub async fn watermarks(
    bootstrap: &str,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64), BrokerError> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    blocking("watermarks", move || {
        consumer_blocking(&bootstrap, &[])?
            .fetch_watermarks(&topic, partition, OP_TIMEOUT)
            .map_err(|source| BrokerError::Kafka {
                op: format!("fetch watermarks of {topic}/{partition}"),
                source,
            })
    })
    .await
}

/// A consumer of group `group` that commits only when told.
fn group_consumer(bootstrap: &str, group: &str) -> Result<BaseConsumer, BrokerError> {
    consumer_blocking(
        bootstrap,
        &[("group.id", group), ("enable.auto.commit", "false")],
    )
}

/// Commits `at` (partition → offset) of `topic` for the consumer group `group`, as one of its
/// consumers would.
pub async fn commit_group(
    bootstrap: &str,
    group: &str,
    topic: &str,
    at: &BTreeMap<i32, i64>,
) -> Result<(), BrokerError> {
    let (bootstrap, group, topic, at) = (
        bootstrap.to_owned(),
        group.to_owned(),
        topic.to_owned(),
        at.clone(),
    );
    blocking("commit_group", move || {
        let kafka = |source| BrokerError::Kafka {
            op: format!("commit group {group} on {topic}"),
            source,
        };
        let mut tpl = TopicPartitionList::new();
        for (p, o) in &at {
            tpl.add_partition_offset(&topic, *p, Offset::Offset(*o))
                .map_err(kafka)?;
        }
        let consumer = group_consumer(&bootstrap, &group)?;
        coordinator_retry(|| consumer.commit(&tpl, CommitMode::Sync)).map_err(kafka)
    })
    .await
}

/// `call`, asked again for up to 30 s while the group's coordinator moves or loads (a
/// cluster just started, or busy beside other test binaries, answers NOT_COORDINATOR).
fn coordinator_retry<T>(
    mut call: impl FnMut() -> rdkafka::error::KafkaResult<T>,
) -> rdkafka::error::KafkaResult<T> {
    let begin = std::time::Instant::now();
    loop {
        match call() {
            Err(e)
                if begin.elapsed() < std::time::Duration::from_secs(30)
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(
                            RDKafkaErrorCode::NotCoordinator
                                | RDKafkaErrorCode::CoordinatorNotAvailable
                                | RDKafkaErrorCode::CoordinatorLoadInProgress
                        )
                    ) =>
            {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            r => return r,
        }
    }
}

/// The offsets the consumer group `group` committed on partitions `0..partitions` of `topic`
/// (partitions without one are left out).
pub async fn group_committed(
    bootstrap: &str,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Result<BTreeMap<i32, i64>, BrokerError> {
    let (bootstrap, group, topic) = (bootstrap.to_owned(), group.to_owned(), topic.to_owned());
    blocking("group_committed", move || {
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(&topic, p);
        }
        let consumer = group_consumer(&bootstrap, &group)?;
        let got =
            coordinator_retry(|| consumer.committed_offsets(tpl.clone(), Duration::from_secs(10)))
                .map_err(|source| BrokerError::Kafka {
                    op: format!("read the offsets of group {group} on {topic}"),
                    source,
                })?;
        Ok(got
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect())
    })
    .await
}

/// The topic id (base64, as Kafka tools print it) of `topic`, through librdkafka's
/// DescribeTopics (rdkafka 0.39 has no safe wrapper and no ids in `Metadata`). `None` when
/// the broker reports no id. Not on the mock (times out after 30 s waiting for a controller).
pub async fn topic_id(bootstrap: &str, topic: &str) -> Result<Option<String>, BrokerError> {
    let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
    blocking("topic_id", move || {
        super::topic_id::describe_topic_id(
            &client_config(&bootstrap),
            &bootstrap,
            &topic,
            OP_TIMEOUT,
        )
        .map_err(|detail| BrokerError::Failed {
            op: format!("read topic id of {topic}"),
            detail,
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consume_until_done_table() {
        let ms = Duration::from_millis;
        let cases = [
            (ConsumeUntil::count(3), 2, ms(10_000), false),
            (ConsumeUntil::count(3), 3, ms(0), true),
            (ConsumeUntil::count(0), 0, ms(0), true),
            (ConsumeUntil::idle(ms(500)), 0, ms(499), false),
            (ConsumeUntil::idle(ms(500)), 7, ms(500), true),
        ];
        for (until, got, since, want) in cases {
            assert_eq!(until.done(got, since), want, "{until:?} {got} {since:?}");
        }
    }

    #[test]
    fn produce_record_builder() {
        let r = ProduceRecord::new("k", "v")
            .partition(2)
            .header("h1", Some(b"x"))
            .header("h2", None)
            .timestamp(1_700_000_000_000);
        assert_eq!(
            r,
            ProduceRecord {
                partition: Some(2),
                key: Some(b"k".to_vec()),
                value: Some(b"v".to_vec()),
                headers: vec![
                    ("h1".to_owned(), Some(b"x".to_vec())),
                    ("h2".to_owned(), None)
                ],
                timestamp_ms: Some(1_700_000_000_000),
            }
        );
    }
}
