//! IncrementalAlterConfigs of topics (KIP-339) through librdkafka: rust-rdkafka 0.39 wraps
//! only the legacy AlterConfigs, which replaces a topic's whole config set (it would drop
//! what mirrorflow must leave alone, such as an excluded `min.insync.replicas`) and which
//! newer brokers no longer answer. The config sync's only caller; the call itself is
//! `kafka::sys::topic_config`.

use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::client::ClientContext;

/// One IncrementalAlterConfigs operation on a target topic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigChange {
    /// SET `name` to `value` on the topic.
    Set(String, String),
    /// DELETE the topic's own value of `name` (the target's default applies again).
    Delete(String),
}

impl ConfigChange {
    /// The `op` label of `mirrorflow_worker_topic_config_changes_total`.
    pub fn op(&self) -> &'static str {
        match self {
            ConfigChange::Set(..) => "set",
            ConfigChange::Delete(_) => "delete",
        }
    }
}

/// Blocking: applies `changes` to each topic in one request (one resource per topic); one
/// result per topic, in order. The outer error means the request failed as a whole.
pub fn alter_topic_configs<C: ClientContext>(
    admin: &AdminClient<C>,
    changes: &[(String, Vec<ConfigChange>)],
    timeout: Duration,
) -> Result<Vec<Result<(), super::Error>>, super::Error> {
    super::sys::topic_config::alter_topic_configs(
        admin,
        changes,
        |change| match change {
            ConfigChange::Set(k, v) => (k.as_str(), Some(v.as_str())),
            ConfigChange::Delete(k) => (k.as_str(), None),
        },
        timeout,
    )
}
