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
use rdkafka::client::{Client, ClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};

use super::select::{should_sync_config, ConfigOrigin};
use crate::kafka::config::ClientProperties;
use crate::kafka::wire::Progress;

/// librdkafka logs and client errors as `tracing` events tagged with the cluster alias.
/// Client errors (broker down, ...) are warnings: librdkafka retries them itself, and the
/// engine reports what they cause.
#[derive(Clone, Debug)]
pub struct LogContext {
    cluster: Arc<str>,
}

impl LogContext {
    /// A context for clients of the cluster `alias`.
    pub fn new(alias: &str) -> Self {
        Self {
            cluster: Arc::from(alias),
        }
    }
}

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let cluster = &*self.cluster;
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let cluster = &*self.cluster;
        match error {
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF) => {}
            e => tracing::warn!(target: "librdkafka", cluster, "{e}: {reason}"),
        }
    }
}

impl ConsumerContext for LogContext {}

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

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task failed: {e}"))?
}

/// Topic name → partition count, as metadata lists them (topics in error are left out).
pub async fn list_topics(
    client: &MetaClient,
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, String> {
    let client = client.clone();
    blocking(move || {
        let md = client
            .fetch_metadata(None, timeout)
            .map_err(|e| format!("fetch metadata: {e}"))?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| {
                (
                    t.name().to_string(),
                    i32::try_from(t.partitions().len()).unwrap_or(i32::MAX),
                )
            })
            .collect())
    })
    .await
}

/// `(log start, high watermark)` of each partition; failures per partition as text.
pub async fn watermarks(
    client: &MetaClient,
    partitions: Vec<(String, i32)>,
    timeout: Duration,
) -> Result<Vec<((String, i32), Result<(i64, i64), String>)>, String> {
    let client = client.clone();
    blocking(move || {
        Ok(partitions
            .into_iter()
            .map(|(t, p)| {
                let r = client
                    .fetch_watermarks(&t, p, timeout)
                    .map_err(|e| format!("watermarks of {t}/{p}: {e}"));
                ((t, p), r)
            })
            .collect())
    })
    .await
}

/// `(log start, high watermark)` from the last fetch response `client` received for
/// `topic`/`partition` (librdkafka's cache, updated before the response's error is handled,
/// so also after an out-of-range answer); `None` before any fetch response. A broker that
/// answered a fetch with an error may report `-1` as its high watermark.
pub fn cached_watermarks<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
) -> Option<(i64, i64)> {
    let name = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (0i64, 0i64);
    // SAFETY: `client` is alive for the call; librdkafka copies the values under its lock.
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            client.native_ptr(),
            name.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    let invalid = i64::from(rdkafka::bindings::RD_KAFKA_OFFSET_INVALID);
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high != invalid)
        .then_some((low, high))
}

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

/// Non-default, syncable configs of a source topic (see [`should_sync_config`]).
pub async fn syncable_topic_configs(
    admin: &Admin,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<(String, String)>, String> {
    let results = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &admin_options(timeout))
        .await
        .map_err(|e| format!("describe configs of topic {topic}: {e}"))?;
    let mut out = Vec::new();
    for r in results {
        let resource = r.map_err(|code| format!("describe configs of topic {topic}: {code}"))?;
        for e in resource.entries {
            let origin = match e.source {
                ConfigSource::DynamicTopic => ConfigOrigin::TopicOverride,
                ConfigSource::Unknown => ConfigOrigin::Unknown,
                _ => ConfigOrigin::Default,
            };
            if let Some(value) = e.value {
                if should_sync_config(&e.name, origin, e.is_default, e.is_sensitive) {
                    out.push((e.name, value));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Creates `topic` with `partitions` partitions, the broker's default replication factor
/// and `configs`. An already existing topic is not an error (another worker may have won).
pub async fn create_topic(
    admin: &Admin,
    topic: &str,
    partitions: i32,
    configs: &[(String, String)],
    timeout: Duration,
) -> Result<(), String> {
    let mut new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    for (k, v) in configs {
        new_topic = new_topic.set(k, v);
    }
    let results = admin
        .create_topics([&new_topic], &admin_options(timeout))
        .await
        .map_err(|e| format!("create topic {topic}: {e}"))?;
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => {
                return Err(format!(
                    "create topic {name} ({partitions} partitions, configs {configs:?}): {code}"
                ))
            }
        }
    }
    Ok(())
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
pub async fn read_progress(
    props: &ClientProperties,
    ctx: LogContext,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<(String, i32), Progress>, ProgressError> {
    use ProgressError::{Corrupt, Unavailable};
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
        .set("fetch.max.bytes", "1048576");
    let topic = topic.to_string();
    let task = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<LogContext> = config
            .create_with_context(ctx)
            .map_err(|e| Unavailable(format!("progress reader for {topic}: {e}")))?;
        let md = consumer
            .fetch_metadata(None, timeout)
            .map_err(|e| Unavailable(format!("metadata for progress topic {topic}: {e}")))?;
        let Some(t) = md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
        else {
            return Ok(HashMap::new());
        };
        let partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
        let mut tpl = TopicPartitionList::new();
        for p in &partitions {
            tpl.add_partition_offset(&topic, *p, Offset::Beginning)
                .map_err(|e| Unavailable(format!("progress topic {topic}/{p}: {e}")))?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| Unavailable(format!("assign progress topic {topic}: {e}")))?;
        let mut remaining: std::collections::BTreeSet<i32> = partitions.into_iter().collect();
        let mut out = HashMap::new();
        let begin = Instant::now();
        while !remaining.is_empty() {
            if begin.elapsed() > timeout {
                return Err(Unavailable(format!(
                    "reading progress topic {topic} did not reach the end of partitions {remaining:?} within {timeout:?}"
                )));
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(p))) => {
                    remaining.remove(&p);
                }
                Some(Err(e)) => {
                    return Err(Unavailable(format!("read progress topic {topic}: {e}")))
                }
                Some(Ok(m)) => {
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
                            let k = Progress::decode_key(key)
                                .map_err(|e| Corrupt(format!("{at}: {e}")))?;
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
    });
    task.await
        .map_err(|e| Unavailable(format!("blocking task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

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
