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
use rdkafka::client::ClientContext;
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
        .set("fetch.wait.max.ms", "100");
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
