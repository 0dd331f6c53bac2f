//! Cluster I/O for the engine: metadata, watermarks, target topics, topic configs and the
//! progress topic. Blocking librdkafka calls run on tokio's blocking pool; every wait is
//! bounded.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::select::{
    syncable_configs, unwritable, ConfigChange, ConfigEntry, ConfigExclusions, ConfigOrigin,
};
use crate::kafka::config::{ClientProperties, FETCH_QUEUE_BACKOFF_MS};
use crate::kafka::context::LogContext;
use crate::kafka::wire::Progress;

/// A client used only for metadata and watermark queries.
pub type MetaClient = Arc<BaseConsumer<LogContext>>;

/// An admin client.
pub type Admin = AdminClient<LogContext>;

/// Creates a metadata client.
pub fn meta_client(props: &ClientProperties, ctx: LogContext) -> Result<MetaClient, KafkaError> {
    let mut config = props.to_client_config();
    // Never joins a group or fetches; the id only silences librdkafka's warnings.
    config.set("group.id", "mirrorflow-metadata");
    config.set("enable.auto.commit", "false");
    Ok(Arc::new(config.create_with_context(ctx)?))
}

/// Creates an admin client.
pub fn admin_client(props: &ClientProperties, ctx: LogContext) -> Result<Admin, KafkaError> {
    props.to_client_config().create_with_context(ctx)
}

fn admin_options(timeout: Duration) -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout))
}

/// A metadata client's call, its queued events served: nothing else polls this client. After
/// a failure they classify it (a refused password or an untrusted certificate would only
/// show as the call's transport failure, `kafka::health`); an answer clears what an earlier
/// failure recorded. Bounded: a poll that serves a log event also returns nothing.
fn served<T>(client: &BaseConsumer<LogContext>, call: KafkaResult<T>) -> KafkaResult<T> {
    for _ in 0..64 {
        let _ = client.poll(Duration::ZERO);
    }
    if let (Ok(_), Some(slot)) = (&call, client.context().slot()) {
        slot.on_answer();
    }
    call
}

/// A blocking librdkafka call that fails with a message, on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    crate::kafka::blocking(f).await?
}

/// Topic name → partition count, as metadata lists them (topics in error are left out).
pub async fn list_topics(
    client: &MetaClient,
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, String> {
    Ok(list_topics_with_replicas(client, timeout)
        .await?
        .into_iter()
        .map(|(t, (n, _))| (t, n))
        .collect())
}

/// Topic name → (partition count, replication factor: the fewest replicas any partition
/// lists), as metadata lists them (topics in error are left out).
pub async fn list_topics_with_replicas(
    client: &MetaClient,
    timeout: Duration,
) -> Result<BTreeMap<String, (i32, i32)>, String> {
    let client = client.clone();
    blocking(move || {
        let md = served(&client, client.fetch_metadata(None, timeout))
            .map_err(|e| format!("fetch metadata: {e}"))?;
        let n = |v: usize| i32::try_from(v).unwrap_or(i32::MAX);
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| {
                let rf = t.partitions().iter().map(|p| n(p.replicas().len())).min();
                (
                    t.name().to_string(),
                    (n(t.partitions().len()), rf.unwrap_or(0)),
                )
            })
            .collect())
    })
    .await
}

/// `(log start, high watermark)` of each partition: two ListOffsets rounds (earliest,
/// latest) asked for all `partitions` at once, so one request per partition leader and
/// round, never one per partition (librdkafka's `offsets_for_times` with the logical offsets
/// -2/-1, which Kafka's ListOffsets answers with the log start and the end). The outer error
/// means the lookup failed as a whole; per partition, the broker's error.
pub async fn watermarks(
    client: &MetaClient,
    partitions: Vec<(String, i32)>,
    timeout: Duration,
) -> Result<BTreeMap<(String, i32), Result<(i64, i64), String>>, String> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let list = |at: Offset| {
        let client = client.clone();
        let partitions = partitions.clone();
        blocking(move || {
            let mut tpl = TopicPartitionList::with_capacity(partitions.len());
            for (t, p) in &partitions {
                tpl.add_partition_offset(t, *p, at)
                    .map_err(|e| format!("list offsets of {t}/{p}: {e}"))?;
            }
            served(&client, client.offsets_for_times(tpl, timeout))
                .map_err(|e| format!("list offsets of {} partitions: {e}", partitions.len()))
        })
    };
    let (low, high) = futures::try_join!(list(Offset::Beginning), list(Offset::End))?;
    let offset = |e: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>| match (
        e.error(),
        e.offset(),
    ) {
        (Err(err), _) => Err(format!(
            "watermarks of {}/{}: {err}",
            e.topic(),
            e.partition()
        )),
        (Ok(()), Offset::Offset(o)) => Ok(o),
        (Ok(()), other) => Err(format!(
            "watermarks of {}/{}: no offset ({other:?})",
            e.topic(),
            e.partition()
        )),
    };
    let by_partition = |tpl: &TopicPartitionList| -> HashMap<(String, i32), Result<i64, String>> {
        tpl.elements()
            .iter()
            .map(|e| ((e.topic().to_string(), e.partition()), offset(e)))
            .collect()
    };
    let (low, high) = (by_partition(&low), by_partition(&high));
    Ok(partitions
        .into_iter()
        .map(|key| {
            let r = match (low.get(&key), high.get(&key)) {
                (Some(Ok(l)), Some(Ok(h))) => Ok((*l, *h)),
                (Some(Err(e)), _) | (_, Some(Err(e))) => Err(e.clone()),
                _ => Err(format!(
                    "watermarks of {}/{}: missing from the answer",
                    key.0, key.1
                )),
            };
            (key, r)
        })
        .collect())
}

pub use crate::kafka::consume::cached_watermarks;

/// The high watermark a Fetch reports for each `(topic, partition, position)`: a throw-away
/// consumer (no group, `auto.offset.reset=error`, read_committed) fetches every partition at
/// its position once. Offset validation uses it to confirm a ListOffsets answer before it
/// stops a partition. Partitions without an answer within `timeout` are left out.
pub async fn fetch_high_watermarks(
    props: &ClientProperties,
    ctx: LogContext,
    positions: Vec<(String, i32, i64)>,
    timeout: Duration,
) -> Result<HashMap<(String, i32), i64>, String> {
    let mut config = props.to_client_config();
    config
        .set("group.id", "mirrorflow-validation-probe")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "error")
        .set("fetch.wait.max.ms", "50")
        // One small answer per partition is enough.
        .set("max.partition.fetch.bytes", "1024");
    blocking(move || {
        let consumer: BaseConsumer<LogContext> = config
            .create_with_context(ctx)
            .map_err(|e| format!("fetch probe consumer: {e}"))?;
        let mut tpl = TopicPartitionList::new();
        for (t, p, pos) in &positions {
            tpl.add_partition_offset(t, *p, Offset::Offset(*pos))
                .map_err(|e| format!("fetch probe {t}/{p}: {e}"))?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| format!("fetch probe assign: {e}"))?;
        let mut out = HashMap::new();
        let begin = Instant::now();
        while out.len() < positions.len() && begin.elapsed() < timeout {
            // Records and errors are irrelevant: only the responses' watermarks count.
            let _ = consumer.poll(Duration::from_millis(50));
            for (t, p, _) in &positions {
                if out.contains_key(&(t.clone(), *p)) {
                    continue;
                }
                if let Some((_, high)) = cached_watermarks(consumer.client(), t, *p) {
                    out.insert((t.clone(), *p), high);
                }
            }
        }
        Ok(out)
    })
    .await
}

/// Topic ids of `topics` (DescribeTopics through `admin`, see [`crate::kafka::topic_id`]):
/// per topic the id, `None` (no id support) or the broker's error. The outer error means the
/// lookup failed as a whole.
pub async fn topic_ids(
    admin: &Arc<Admin>,
    topics: Vec<String>,
    timeout: Duration,
) -> Result<BTreeMap<String, crate::kafka::topic_id::TopicIdResult>, String> {
    let admin = admin.clone();
    blocking(move || crate::kafka::topic_id::describe_topic_ids(&admin, &topics, timeout)).await
}

/// The configs of `topics` (one DescribeConfigs request): per topic its entries or the
/// broker's error. The outer error means the request failed as a whole.
pub async fn describe_topic_configs(
    admin: &Admin,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, Result<Vec<ConfigEntry>, String>>, String> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let specs: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = admin
        .describe_configs(&specs, &admin_options(timeout))
        .await
        .map_err(|e| format!("describe configs of {} topic(s): {e}", topics.len()))?;
    let mut out = BTreeMap::new();
    for (topic, r) in topics.iter().zip(results) {
        let entries = r
            .map_err(|code| format!("describe configs of topic {topic}: {code}"))
            .map(|resource| {
                resource
                    .entries
                    .into_iter()
                    .map(|e| ConfigEntry {
                        origin: match e.source {
                            ConfigSource::DynamicTopic => ConfigOrigin::TopicOverride,
                            ConfigSource::Unknown => ConfigOrigin::Unknown,
                            _ => ConfigOrigin::Default,
                        },
                        name: e.name,
                        value: e.value,
                        is_default: e.is_default,
                        is_sensitive: e.is_sensitive,
                    })
                    .collect()
            });
        out.insert(topic.clone(), entries);
    }
    Ok(out)
}

/// The syncable configs of a source topic (see [`syncable_configs`]).
pub async fn syncable_topic_configs(
    admin: &Admin,
    topic: &str,
    exclusions: &ConfigExclusions,
    timeout: Duration,
) -> Result<Vec<(String, String)>, String> {
    let mut all = describe_topic_configs(admin, &[topic.to_string()], timeout).await?;
    let entries = all
        .remove(topic)
        .unwrap_or_else(|| Err(format!("describe configs of topic {topic}: no answer")))?;
    Ok(syncable_configs(&entries, exclusions))
}

/// Applies config changes to target topics (IncrementalAlterConfigs); one result per topic.
pub async fn alter_topic_configs(
    admin: &Arc<Admin>,
    changes: Vec<(String, Vec<ConfigChange>)>,
    timeout: Duration,
) -> Result<Vec<Result<(), String>>, String> {
    let admin = admin.clone();
    blocking(move || crate::kafka::topic_config::alter_topic_configs(&admin, &changes, timeout))
        .await
}

/// The replication factor to ask CreateTopics for: the spec's, or -1 (the brokers'
/// `default.replication.factor`).
pub fn replication(factor: Option<i32>) -> TopicReplication<'static> {
    TopicReplication::Fixed(factor.unwrap_or(-1))
}

/// Creates `topic` with `partitions` partitions, `replication_factor` (`None`: the broker's
/// default) and `configs`: `Ok(true)` if created, `Ok(false)` if it already existed (another
/// worker may have won, or the metadata that said it was missing was stale).
pub async fn create_topic(
    admin: &Admin,
    topic: &str,
    partitions: i32,
    replication_factor: Option<i32>,
    configs: &[(String, String)],
    timeout: Duration,
) -> Result<bool, String> {
    let mut new_topic = NewTopic::new(topic, partitions, replication(replication_factor));
    for (k, v) in configs {
        new_topic = new_topic.set(k, v);
    }
    let results = admin
        .create_topics([&new_topic], &admin_options(timeout))
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    let mut created = true;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => created = false,
            Err((name, code)) => {
                let rf = replication_factor
                    .map_or("the brokers' default".to_string(), |rf| rf.to_string());
                return Err(format!(
                    "create topic {name} ({partitions} partitions, replication factor {rf}, configs {configs:?}): {code}"
                ));
            }
        }
    }
    Ok(created)
}

/// Configs of mirrorflow's internal topics (progress, offset syncs): compacted, with segments
/// rolled hourly so compaction can run at all (the active segment is never compacted, and the
/// broker default rolls it only weekly or at 1 GiB).
pub fn internal_topic_configs() -> Vec<(String, String)> {
    vec![
        ("cleanup.policy".to_string(), "compact".to_string()),
        ("segment.ms".to_string(), "3600000".to_string()),
    ]
}

/// Creates the compacted one-partition `topics` missing on the cluster `alias` (internal
/// topics: progress, offset syncs on the target; heartbeats on either cluster) with
/// `replication_factor` (`spec.internalTopics`; `None`: the broker's default), and checks
/// that each can take writes (replicas against its `min.insync.replicas`, [`unwritable`]);
/// the error says which one and why.
pub async fn ensure_compacted(
    meta: &MetaClient,
    admin: &Admin,
    topics: &[String],
    alias: &str,
    replication_factor: Option<i32>,
    timeout: Duration,
) -> Result<(), String> {
    let existing = list_topics_with_replicas(meta, timeout)
        .await
        .map_err(|e| format!("cluster {alias}: {e}"))?;
    for topic in topics.iter().filter(|t| !existing.contains_key(*t)) {
        let configs = internal_topic_configs();
        let created = create_topic(admin, topic, 1, replication_factor, &configs, timeout)
            .await
            .map_err(|e| format!("cannot create internal topic {topic} on cluster {alias}: {e}"))?;
        if !created {
            // The metadata that said it was missing was stale (or another worker won): read
            // it again rather than take "missing" for "empty".
            return Err(format!(
                "internal topic {topic} on cluster {alias} exists although the cluster \
                 did not list it (stale metadata, or another worker created it)"
            ));
        }
        tracing::info!(topic, cluster = alias, "created internal topic");
    }
    // Every write to them is acks=all: a topic with fewer replicas than its
    // min.insync.replicas would fail each one (NOT_ENOUGH_REPLICAS) without saying why.
    let replicas = list_topics_with_replicas(meta, timeout)
        .await
        .map_err(|e| format!("target cluster {alias}: {e}"))?;
    // A broker that cannot describe configs (librdkafka's mock cluster) is not checked: the
    // check explains a failure, it is not needed to replicate.
    let configs = describe_topic_configs(admin, topics, timeout)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!("target cluster {alias}: not checking the internal topics' min.insync.replicas: {e}");
            BTreeMap::new()
        });
    for topic in topics {
        let Some(Ok(entries)) = configs.get(topic) else {
            continue;
        };
        let min_insync = min_insync_replicas(entries);
        if let Some((_, rf)) = replicas.get(topic) {
            if let Some(why) = unwritable(topic, *rf, min_insync) {
                return Err(format!(
                    "internal topic on target cluster {alias}: {why} (spec.internalTopics.replicationFactor sets it for new internal topics)"
                ));
            }
        }
    }
    Ok(())
}

/// The `min.insync.replicas` a DescribeConfigs answer shows (the topic's own or the
/// broker's), if any.
pub fn min_insync_replicas(entries: &[ConfigEntry]) -> Option<i32> {
    entries
        .iter()
        .find(|e| e.name == "min.insync.replicas")
        .and_then(|e| e.value.as_deref()?.parse().ok())
}

/// Grows `topic` to `partitions` partitions.
pub async fn add_partitions(
    admin: &Admin,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<(), String> {
    let count = usize::try_from(partitions).unwrap_or(0);
    let results = admin
        .create_partitions([&NewPartitions::new(topic, count)], &admin_options(timeout))
        .await
        .map_err(|e| format!("add partitions to topic {topic}: {e}"))?;
    for r in results {
        if let Err((name, code)) = r {
            return Err(format!(
                "grow topic {name} to {partitions} partitions: {code}"
            ));
        }
    }
    Ok(())
}

/// The newest offset sync `(upstream, downstream)` of each of `partitions` in the
/// offset-syncs `topic` on the target (read to its end, read_committed); partitions without
/// a sync are left out.
pub async fn newest_syncs(
    props: &ClientProperties,
    topic: &str,
    partitions: Vec<(String, i32)>,
    timeout: Duration,
) -> Result<HashMap<(String, i32), (i64, i64)>, String> {
    let config = props.to_client_config();
    let topic = topic.to_string();
    blocking(move || {
        let wanted: std::collections::HashSet<(String, i32)> = partitions.into_iter().collect();
        let mut tail =
            crate::worker::checkpoint::io::TopicTail::new(&config, &topic, "target cluster")?;
        let mut out = HashMap::new();
        tail.catch_up(timeout, |m| {
            let (Some(k), Some(v)) = (m.key(), m.payload()) else {
                return;
            };
            if let Ok(s) = crate::kafka::wire::OffsetSync::decode(k, v) {
                let key = (s.topic, s.partition);
                if wanted.contains(&key) {
                    out.insert(key, (s.upstream_offset, s.downstream_offset));
                }
            }
        })?;
        Ok(out)
    })
    .await
}

/// Why progress could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressError {
    /// The cluster could not be read (retry).
    Unavailable(String),
    /// A record does not decode (do not guess).
    Corrupt(String),
}

/// Reads the progress topic from the beginning to its end (read_committed: records of
/// aborted or open transactions never count) and returns the last progress per source
/// partition; a tombstone forgets the partition. `Ok(empty)` when the topic does not exist.
/// A record that does not decode is [`ProgressError::Corrupt`]: skipping it could restart a
/// partition from `startFrom` and lose records.
///
/// "Its end" is the high watermark when the read starts, not the last stable offset: a
/// transaction another worker has open (or left hanging) hides everything committed after
/// it began, and stopping there would resume from older positions (duplicates). The read
/// waits for such transactions to end (commit, abort, or the coordinator's timeout) and is
/// [`ProgressError::Unavailable`] if they outlast `timeout`.
pub async fn read_progress(
    props: &ClientProperties,
    ctx: LogContext,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Progress>, ProgressError> {
    use ProgressError::Unavailable;
    let mut config = props.to_client_config();
    config
        .set("group.id", "mirrorflow-progress-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        // Bounded read-ahead like the offset-syncs reader: an uncompacted progress topic of
        // a 1,000-partition flow holds millions of records, and librdkafka's default
        // prefetch (up to 64 MiB) would be the worker's peak memory at start.
        .set("queued.max.messages.kbytes", "2048")
        .set("fetch.max.bytes", "1048576")
        .set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    let topic = topic.to_string();
    let mut uncommitted_config = config.clone();
    uncommitted_config.set("isolation.level", "read_uncommitted");
    let task = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<LogContext> = config
            .create_with_context(ctx.clone())
            .map_err(|e| Unavailable(format!("progress reader for {topic}: {e}")))?;
        let uncommitted: BaseConsumer<LogContext> = uncommitted_config
            .create_with_context(ctx)
            .map_err(|e| Unavailable(format!("progress reader for {topic}: {e}")))?;
        let read = read_to_end(&consumer, &uncommitted, &topic, timeout);
        // Closing the clients joins their threads (0.1-0.2 s): not on the start's path.
        tokio::task::spawn_blocking(move || drop((consumer, uncommitted)));
        read
    });
    task.await
        .map_err(|e| Unavailable(format!("blocking task failed: {e}")))?
}

/// Reads the progress topic with `consumer` (read_committed) to the end `uncommitted` finds
/// at the start; see [`read_progress`].
fn read_to_end(
    consumer: &BaseConsumer<LogContext>,
    uncommitted: &BaseConsumer<LogContext>,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Progress>, ProgressError> {
    use ProgressError::{Corrupt, Unavailable};
    let md = consumer
        .fetch_metadata(None, timeout)
        .map_err(|e| Unavailable(format!("metadata for progress topic {topic}: {e}")))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        // Absent from a complete answer: a flow that never wrote progress. (A target that
        // still holds records of this flow stops those partitions: ProgressMissing.)
        return Ok(HashMap::new());
    };
    if let Some(e) = t.error() {
        return Err(Unavailable(format!(
            "progress topic {topic} is listed with an error ({e:?}); not reading it as empty"
        )));
    }
    let partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    // The end to reach: the high watermark now (read_uncommitted), so open transactions
    // cannot make an older end look final.
    let ends = ends_to_read(&uncommitted_watermarks(
        uncommitted,
        topic,
        &partitions,
        timeout,
    )?);
    let mut tpl = TopicPartitionList::new();
    for p in ends.keys() {
        tpl.add_partition_offset(topic, *p, Offset::Beginning)
            .map_err(|e| Unavailable(format!("progress topic {topic}/{p}: {e}")))?;
    }
    if !ends.is_empty() {
        consumer
            .assign(&tpl)
            .map_err(|e| Unavailable(format!("assign progress topic {topic}: {e}")))?;
    }
    let mut reader = EndReader::new(&ends);
    let mut out = HashMap::new();
    let begin = Instant::now();
    while !reader.done() {
        if begin.elapsed() > timeout {
            return Err(Unavailable(reader.late(topic, timeout)));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                // At the last stable offset: final only once it passed the start's end.
                let stable = consumer
                    .fetch_watermarks(topic, p, timeout)
                    .map(|(_, lso)| lso)
                    .map_err(|e| Unavailable(format!("progress topic {topic}/{p}: {e}")))?;
                if let EndStep::ReadAgainFrom(next) = reader.at_end(p, stable) {
                    // Read what the ended transactions committed, to the end again.
                    consumer
                        .seek(topic, p, Offset::Offset(next), timeout)
                        .map_err(|e| Unavailable(format!("progress topic {topic}/{p}: {e}")))?;
                }
            }
            Some(Err(e)) => return Err(Unavailable(format!("read progress topic {topic}: {e}"))),
            Some(Ok(m)) => {
                reader.consumed(m.partition(), m.offset());
                let at = format!(
                    "progress topic {topic}/{} offset {}",
                    m.partition(),
                    m.offset()
                );
                let key = m
                    .key()
                    .ok_or_else(|| Corrupt(format!("{at}: record without key")))?;
                match m.payload() {
                    None => {
                        let k =
                            Progress::decode_key(key).map_err(|e| Corrupt(format!("{at}: {e}")))?;
                        out.remove(&k);
                    }
                    Some(value) => {
                        let p = Progress::decode(key, value)
                            .map_err(|e| Corrupt(format!("{at}: {e}")))?;
                        out.insert((p.topic.clone(), p.partition), p);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Low and high watermarks of each partition (the client must read uncommitted).
fn uncommitted_watermarks(
    client: &BaseConsumer<LogContext>,
    topic: &str,
    partitions: &[i32],
    timeout: Duration,
) -> Result<BTreeMap<i32, (i64, i64)>, ProgressError> {
    partitions
        .iter()
        .map(|p| {
            client
                .fetch_watermarks(topic, *p, timeout)
                .map(|w| (*p, w))
                .map_err(|e| ProgressError::Unavailable(format!("progress topic {topic}/{p}: {e}")))
        })
        .collect()
}

/// The partitions a start-up read reads, with the end to reach (the high watermark): those
/// holding records at the start, committed or not (`low < high`). An empty one has nothing
/// to wait for, not even a fetch's end of partition (a fresh worker's topic is all empty,
/// and that fetch took 0.2-0.5 s of its start). Pure.
pub fn ends_to_read(watermarks: &BTreeMap<i32, (i64, i64)>) -> BTreeMap<i32, i64> {
    watermarks
        .iter()
        .filter(|(_, (low, high))| high > low)
        .map(|(p, (_, high))| (*p, *high))
        .collect()
}

/// What to do at the end of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndStep {
    /// Read to the end: done with it.
    Done,
    /// A transaction open at the start still hides records: wait for more.
    Wait,
    /// The transactions that hid records ended: read again from this offset to the end.
    ReadAgainFrom(i64),
}

/// When a read_committed read of the progress topic is complete: every partition read to an
/// end at or past its high watermark at the start. Pure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndReader {
    /// Per partition: the end to pass, the next offset to read, and whether the current
    /// pass started after the stable offset passed the end.
    parts: BTreeMap<i32, (i64, i64, bool)>,
    done: std::collections::BTreeSet<i32>,
}

impl EndReader {
    /// Partitions and their high watermarks at the start.
    pub fn new(ends: &BTreeMap<i32, i64>) -> Self {
        Self {
            parts: ends.iter().map(|(p, e)| (*p, (*e, 0, false))).collect(),
            done: std::collections::BTreeSet::new(),
        }
    }

    /// A record at `offset` of partition `p` was read.
    pub fn consumed(&mut self, p: i32, offset: i64) {
        if let Some(s) = self.parts.get_mut(&p) {
            s.1 = s.1.max(offset + 1);
        }
    }

    /// The read of `p` reached its end while the last stable offset is `stable`.
    pub fn at_end(&mut self, p: i32, stable: i64) -> EndStep {
        let Some((end, next, final_pass)) = self.parts.get_mut(&p) else {
            return EndStep::Done;
        };
        if *final_pass || (stable >= *end && *next >= *end) || *end == 0 {
            self.done.insert(p);
            return EndStep::Done;
        }
        if stable >= *end {
            // Everything before `end` is settled now; what ended after this pass began is
            // read by one more pass from where this one stopped.
            *final_pass = true;
            return EndStep::ReadAgainFrom(*next);
        }
        EndStep::Wait
    }

    /// Whether every partition is read.
    pub fn done(&self) -> bool {
        self.done.len() == self.parts.len()
    }

    /// The error when the read did not finish in time.
    pub fn late(&self, topic: &str, timeout: Duration) -> String {
        let waiting: Vec<String> = self
            .parts
            .iter()
            .filter(|(p, _)| !self.done.contains(p))
            .map(|(p, (end, next, _))| format!("{p} (read to {next} of {end})"))
            .collect();
        format!(
            "progress topic {topic} was not read to its end within {timeout:?}: partitions {} \
             wait for a transaction another worker has open (it ends with its commit, abort or \
             the coordinator's transaction timeout); resuming from older positions would \
             replicate records twice",
            waiting.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_to_read_table() {
        type Watermarks = Vec<(i32, (i64, i64))>;
        type Ends = Vec<(i32, i64)>;
        let cases: Vec<(&str, Watermarks, Ends)> = vec![
            ("never written", vec![(0, (0, 0))], vec![]),
            ("every record deleted", vec![(0, (7, 7))], vec![]),
            ("holds records", vec![(0, (3, 9))], vec![(0, 9)]),
            (
                "only the partitions with records",
                vec![(0, (0, 0)), (1, (0, 4)), (2, (5, 5)), (3, (2, 6))],
                vec![(1, 4), (3, 6)],
            ),
            ("no partition", vec![], vec![]),
        ];
        for (name, watermarks, want) in cases {
            let got = ends_to_read(&watermarks.into_iter().collect());
            assert_eq!(got, want.into_iter().collect(), "{name}");
        }
    }

    #[test]
    fn end_reader_waits_for_open_transactions() {
        let mut r = EndReader::new(&[(0, 10), (1, 0), (2, 5)].into());
        // Partition 1 is empty; partition 2 is read to its end with nothing open.
        for o in 0..5 {
            r.consumed(2, o);
        }
        assert_eq!(r.at_end(1, 0), EndStep::Done);
        assert_eq!(r.at_end(2, 5), EndStep::Done);
        // Partition 0: a transaction open from offset 4 hides 4..10.
        for o in 0..4 {
            r.consumed(0, o);
        }
        assert_eq!(
            r.at_end(0, 4),
            EndStep::Wait,
            "never final below the start's end"
        );
        assert!(!r.done());
        // It committed: one more pass from where the read stopped.
        assert_eq!(r.at_end(0, 12), EndStep::ReadAgainFrom(4));
        assert!(!r.done());
        r.consumed(0, 9);
        assert_eq!(r.at_end(0, 12), EndStep::Done);
        assert!(r.done());
        assert!(r.late("p", Duration::from_secs(1)).contains("partitions "));
    }

    #[test]
    fn end_reader_done_at_once_when_read_past_the_end() {
        let mut r = EndReader::new(&[(0, 3)].into());
        r.consumed(0, 2);
        assert_eq!(r.at_end(0, 3), EndStep::Done);
    }

    fn unreachable() -> ClientProperties {
        let mut p = ClientProperties::default();
        p.set("bootstrap.servers", "127.0.0.1:1");
        p
    }

    #[tokio::test]
    async fn fetch_probe_config_is_valid_and_bounded() {
        // librdkafka rejects inconsistent configs at creation: that must not happen here.
        let got = fetch_high_watermarks(
            &unreachable(),
            LogContext::new("dc1"),
            vec![("orders".into(), 0, 5)],
            Duration::from_millis(100),
        )
        .await;
        assert_eq!(got, Ok(HashMap::new()), "no answer within the bound");
    }

    #[test]
    fn no_cached_watermarks_before_a_fetch() {
        let consumer: BaseConsumer<LogContext> = unreachable()
            .to_client_config()
            .set("group.id", "g")
            .create_with_context(LogContext::new("dc1"))
            .unwrap();
        assert_eq!(cached_watermarks(consumer.client(), "orders", 0), None);
    }
}
