//! Topics through the admin and metadata clients: list, create, grow, describe and alter
//! their configs, and the internal topics every worker side creates (compacted, one
//! partition, able to take acks=all writes). The engine, the checkpoint side, the heartbeats
//! and the ACL sync call these. Every wait is bounded; blocking calls run on tokio's
//! blocking pool.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{
    AdminClient, AdminOptions, ConfigSource, NewPartitions, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::config::ClientProperties;
use super::context::LogContext;
use super::error::{Context, Error};
use super::topic_config::ConfigChange;

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
pub fn served<T>(client: &BaseConsumer<LogContext>, call: KafkaResult<T>) -> KafkaResult<T> {
    for _ in 0..64 {
        let _ = client.poll(Duration::ZERO);
    }
    if let (Ok(_), Some(slot)) = (&call, client.context().slot()) {
        slot.on_answer();
    }
    call
}

/// A blocking librdkafka call that can fail, on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    super::run_blocking(f).await?
}

/// Topic name → partition count, as metadata lists them (topics in error are left out).
pub async fn list_topics(
    client: &MetaClient,
    timeout: Duration,
) -> Result<BTreeMap<String, i32>, Error> {
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
) -> Result<BTreeMap<String, (i32, i32)>, Error> {
    let client = client.clone();
    blocking(move || {
        let md = served(&client, client.fetch_metadata(None, timeout)).context("fetch metadata")?;
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

/// The configs of `topics` (one DescribeConfigs request): per topic its entries or the
/// broker's error. The outer error means the request failed as a whole.
pub async fn describe_topic_configs(
    admin: &Admin,
    topics: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, Result<Vec<ConfigEntry>, Error>>, Error> {
    if topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let specs: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = admin
        .describe_configs(&specs, &admin_options(timeout))
        .await
        .context_with(|| format!("describe configs of {} topic(s)", topics.len()))?;
    let mut out = BTreeMap::new();
    for (topic, r) in topics.iter().zip(results) {
        let entries = r
            .map_err(|code| {
                Error::code(code, code.to_string())
                    .context(format!("describe configs of topic {topic}"))
            })
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

/// Applies config changes to target topics (IncrementalAlterConfigs); one result per topic.
pub async fn alter_topic_configs(
    admin: &Arc<Admin>,
    changes: Vec<(String, Vec<ConfigChange>)>,
    timeout: Duration,
) -> Result<Vec<Result<(), Error>>, Error> {
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
) -> Result<bool, Error> {
    let mut new_topic = NewTopic::new(topic, partitions, replication(replication_factor));
    for (k, v) in configs {
        new_topic = new_topic.set(k, v);
    }
    let results = admin
        .create_topics([&new_topic], &admin_options(timeout))
        .await
        .context_with(|| format!("create topic {topic}"))?;
    let mut created = true;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => created = false,
            Err((name, code)) => {
                let rf = replication_factor
                    .map_or("the brokers' default".to_string(), |rf| rf.to_string());
                return Err(Error::code(code, code.to_string()).context(format!(
                    "create topic {name} ({partitions} partitions, replication factor {rf}, configs {configs:?})"
                )));
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
) -> Result<(), Error> {
    let existing = list_topics_with_replicas(meta, timeout)
        .await
        .context_with(|| format!("cluster {alias}"))?;
    for topic in topics.iter().filter(|t| !existing.contains_key(*t)) {
        let configs = internal_topic_configs();
        let created = create_topic(admin, topic, 1, replication_factor, &configs, timeout)
            .await
            .context_with(|| format!("cannot create internal topic {topic} on cluster {alias}"))?;
        if !created {
            // The metadata that said it was missing was stale (or another worker won): read
            // it again rather than take "missing" for "empty".
            return Err(Error::Cluster(format!(
                "internal topic {topic} on cluster {alias} exists although the cluster \
                 did not list it (stale metadata, or another worker created it)"
            )));
        }
        tracing::info!(topic, cluster = alias, "created internal topic");
    }
    // Every write to them is acks=all: a topic with fewer replicas than its
    // min.insync.replicas would fail each one (NOT_ENOUGH_REPLICAS) without saying why.
    let replicas = list_topics_with_replicas(meta, timeout)
        .await
        .context_with(|| format!("target cluster {alias}"))?;
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
                return Err(Error::Cluster(format!(
                    "internal topic on target cluster {alias}: {why} (spec.internalTopics.replicationFactor sets it for new internal topics)"
                )));
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
) -> Result<(), Error> {
    let count = usize::try_from(partitions).unwrap_or(0);
    let results = admin
        .create_partitions([&NewPartitions::new(topic, count)], &admin_options(timeout))
        .await
        .context_with(|| format!("add partitions to topic {topic}"))?;
    for r in results {
        if let Err((name, code)) = r {
            return Err(Error::code(code, code.to_string())
                .context(format!("grow topic {name} to {partitions} partitions")));
        }
    }
    Ok(())
}

/// Creates a store topic (1 partition, compacted: the checkpoints, the ACL sync's store) with
/// `replication_factor` (`spec.internalTopics.replicationFactor`; `None`: the broker's
/// default) unless it exists. Returns whether it was created.
pub async fn ensure_store_topic(
    config: &ClientConfig,
    topic: &str,
    replication_factor: Option<i32>,
    timeout: Duration,
) -> Result<bool, Error> {
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .context("target cluster: create admin client")?;
    let new_topic =
        NewTopic::new(topic, 1, replication(replication_factor)).set("cleanup.policy", "compact");
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    let results = admin
        .create_topics([&new_topic], &options)
        .await
        .context_with(|| format!("target cluster: create topic {topic}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => Ok(false),
        Some(Err((name, code))) => {
            let rf = replication_factor.map_or("the brokers' default".into(), |rf| rf.to_string());
            Err(Error::code(code, code.to_string()).context(format!(
                "target cluster: create topic {name} (replication factor {rf})"
            )))
        }
        None => Err(Error::Protocol("no answer".into())
            .context(format!("target cluster: create topic {topic}"))),
    }
}

/// Where a topic config value comes from (a subset of Kafka's ConfigSource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// Set on the topic itself.
    TopicOverride,
    /// A broker or built-in default.
    Default,
    /// The broker did not say (old brokers): trust `is_default`.
    Unknown,
}

/// One entry of a topic's DescribeConfigs answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for sensitive values.
    pub value: Option<String>,
    pub origin: ConfigOrigin,
    pub is_default: bool,
    pub is_sensitive: bool,
}

impl ConfigEntry {
    /// Set on the topic itself (not inherited from the broker or Kafka's defaults).
    pub fn set_on_topic(&self) -> bool {
        match self.origin {
            ConfigOrigin::TopicOverride => true,
            ConfigOrigin::Default => false,
            ConfigOrigin::Unknown => !self.is_default,
        }
    }
}

/// Why a target topic can never take a write from the mirror (which produces with
/// acks=all): fewer replicas than its `min.insync.replicas`. `None` when it can, or when
/// `min.insync.replicas` is unknown (a broker that does not report it).
pub fn unwritable(topic: &str, replicas: i32, min_insync: Option<i32>) -> Option<String> {
    let min = min_insync?;
    (replicas < min).then(|| {
        format!(
            "topic {topic} has replication factor {replicas} but min.insync.replicas={min}: \
             every acks=all write fails with NOT_ENOUGH_REPLICAS; raise its replication \
             factor (kafka-reassign-partitions) or lower its min.insync.replicas"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritable_table() {
        let cases = [
            (1, Some(2), true),
            (2, Some(2), false),
            (3, Some(2), false),
            (1, Some(1), false),
            (1, None, false),
        ];
        for (rf, min, want) in cases {
            let got = unwritable("dc1.orders", rf, min);
            assert_eq!(got.is_some(), want, "rf {rf} min {min:?}");
            if let Some(m) = got {
                assert!(
                    m.contains("dc1.orders")
                        && m.contains(&format!("replication factor {rf}"))
                        && m.contains(&format!("min.insync.replicas={}", min.unwrap())),
                    "{m}"
                );
            }
        }
    }
}
