//! Which source topics a flow replicates, and which topic configs travel with them. Pure.

use regex::Regex;

use crate::api::validate::full_match_regex;
use crate::api::{MirrorFlowSpec, ReplicationPolicy};
use crate::kafka::naming::{is_cycle, is_heartbeats_topic, is_internal_topic, target_topic};

/// Why a topic is or is not replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicDecision {
    /// Replicate it.
    Replicate,
    /// Matches no `topics.include` pattern.
    NotIncluded,
    /// Matches a `topics.exclude` pattern.
    Excluded,
    /// An internal topic (Kafka's, MM2's or mirrorflow's); never replicated.
    Internal,
    /// Came from the target cluster (Prefix policy); replicating it would loop.
    Cycle,
}

/// The compiled topic selection of a flow.
#[derive(Debug, Clone)]
pub struct TopicFilter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
    policy: ReplicationPolicy,
    source_alias: String,
    target_alias: String,
}

impl TopicFilter {
    /// Compiles the spec's patterns (full match). Errors name the field and pattern; specs
    /// that passed `validate_flow` always compile.
    pub fn new(spec: &MirrorFlowSpec) -> Result<Self, String> {
        let compile = |field: &str, patterns: &[String]| {
            patterns
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    full_match_regex(p).map_err(|e| format!("spec.topics.{field}[{i}] {p:?}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            include: compile("include", &spec.topics.include)?,
            exclude: compile("exclude", &spec.topics.exclude)?,
            policy: spec.replication_policy.clone(),
            source_alias: spec.source.alias.clone(),
            target_alias: spec.target.alias.clone(),
        })
    }

    /// Decides for one source topic. Internal topics and cycles win over the patterns;
    /// heartbeats topics are replicated whatever the patterns say (MM2).
    pub fn decide(&self, topic: &str) -> TopicDecision {
        if is_internal_topic(topic) {
            TopicDecision::Internal
        } else if is_cycle(&self.policy, &self.target_alias, topic) {
            TopicDecision::Cycle
        } else if is_heartbeats_topic(&self.policy, topic) {
            TopicDecision::Replicate
        } else if !self.include.iter().any(|r| r.is_match(topic)) {
            TopicDecision::NotIncluded
        } else if self.exclude.iter().any(|r| r.is_match(topic)) {
            TopicDecision::Excluded
        } else {
            TopicDecision::Replicate
        }
    }

    /// The target topic name of a source topic.
    pub fn target_topic(&self, topic: &str) -> String {
        target_topic(&self.policy, &self.source_alias, topic)
    }
}

/// What to do with a target topic, given the source topic's partition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetTopicAction {
    /// It exists with at least as many partitions: replicate.
    Ready,
    /// It does not exist: create it with the source's partition count.
    Create,
    /// It has fewer partitions than the source (the source grew): add partitions.
    Grow {
        /// Current count on the target.
        from: i32,
        /// Count to reach.
        to: i32,
    },
}

/// Decides for one target topic. A target with more partitions than the source is left as
/// is (partitions are never removed; records keep their partition number).
pub fn target_topic_action(
    source_partitions: i32,
    target_partitions: Option<i32>,
) -> TargetTopicAction {
    match target_partitions {
        None => TargetTopicAction::Create,
        Some(n) if n >= source_partitions => TargetTopicAction::Ready,
        Some(n) => TargetTopicAction::Grow {
            from: n,
            to: source_partitions,
        },
    }
}

/// Topic configs never copied to the target: broker- or cluster-specific ones, as MM2's
/// `DefaultConfigPropertyFilter` (`config.properties.exclude` default), widened to every
/// `message.timestamp.*` property (newer brokers split the difference into before/after).
pub const EXCLUDED_TOPIC_CONFIGS: &[&str] = &[
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "unclean.leader.election.enable",
    "min.insync.replicas",
];

/// Where a source topic config value comes from (a subset of Kafka's ConfigSource).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOrigin {
    /// Set on the topic itself.
    TopicOverride,
    /// A broker or built-in default.
    Default,
    /// The broker did not say (old brokers): trust `is_default`.
    Unknown,
}

/// Whether a source topic config entry is copied to the target topic: only values set on
/// the topic (the target keeps its own defaults, MM2's `use.defaults.from=target`), never
/// sensitive ones, never the excluded broker-specific ones.
pub fn should_sync_config(
    name: &str,
    origin: ConfigOrigin,
    is_default: bool,
    is_sensitive: bool,
) -> bool {
    let set_on_topic = match origin {
        ConfigOrigin::TopicOverride => true,
        ConfigOrigin::Default => false,
        ConfigOrigin::Unknown => !is_default,
    };
    set_on_topic
        && !is_sensitive
        && !EXCLUDED_TOPIC_CONFIGS.contains(&name)
        && !name.starts_with("message.timestamp.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ClusterSpec, ReplicationPolicyType, TopicSelector};

    fn spec(include: &[&str], exclude: &[&str], policy: ReplicationPolicyType) -> MirrorFlowSpec {
        let cluster = |alias: &str| ClusterSpec {
            alias: alias.into(),
            bootstrap_servers: "localhost:9092".into(),
            ..Default::default()
        };
        let mut spec: MirrorFlowSpec = serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1"},
            "target": {"alias": "dc2", "bootstrapServers": "b:1"},
        }))
        .unwrap();
        spec.source = cluster("dc1");
        spec.target = cluster("dc2");
        spec.topics = TopicSelector {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            ..TopicSelector::default()
        };
        spec.replication_policy.type_ = policy;
        spec
    }

    #[test]
    fn decision_table() {
        use ReplicationPolicyType::*;
        use TopicDecision::*;
        let defaults = crate::api::defaults::topic_excludes();
        let defaults: Vec<&str> = defaults.iter().map(String::as_str).collect();
        let cases = [
            (vec![".*"], defaults.clone(), Prefix, "orders", Replicate),
            (
                vec![".*"],
                defaults.clone(),
                Prefix,
                "__consumer_offsets",
                Internal,
            ),
            (vec![".*"], vec![], Prefix, "__consumer_offsets", Internal),
            (
                vec![".*"],
                vec![],
                Prefix,
                "mirrorflow-progress.f.internal",
                Internal,
            ),
            (
                vec![".*"],
                vec![],
                Prefix,
                "mm2-offset-syncs.dc1.internal",
                Internal,
            ),
            (
                vec![".*"],
                defaults.clone(),
                Prefix,
                "orders.replica",
                Excluded,
            ),
            (vec![".*"], defaults.clone(), Prefix, "dc2.orders", Cycle),
            (
                vec![".*"],
                defaults.clone(),
                Prefix,
                "dc3.dc2.orders",
                Cycle,
            ),
            (
                vec![".*"],
                defaults.clone(),
                Prefix,
                "dc3.orders",
                Replicate,
            ),
            (
                vec![".*"],
                defaults.clone(),
                Identity,
                "dc2.orders",
                Replicate,
            ),
            // Full match: "order" does not match "orders".
            (vec!["order"], vec![], Prefix, "orders", NotIncluded),
            (
                vec!["orders|payments"],
                vec![],
                Prefix,
                "payments",
                Replicate,
            ),
            (
                vec!["ord.*"],
                vec!["ord.*-tmp"],
                Prefix,
                "orders-tmp",
                Excluded,
            ),
            (vec!["ord.*"], vec!["tmp"], Prefix, "orders-tmp", Replicate),
            (vec![], vec![], Prefix, "orders", NotIncluded),
            // Heartbeats travel whatever the patterns say, never back where they came from.
            (vec!["orders"], vec![], Prefix, "heartbeats", Replicate),
            (
                vec!["orders"],
                vec!["heartbeats"],
                Prefix,
                "heartbeats",
                Replicate,
            ),
            (vec!["orders"], vec![], Prefix, "dc0.heartbeats", Replicate),
            (vec![".*"], vec![], Prefix, "dc2.heartbeats", Cycle),
            (vec!["orders"], vec![], Identity, "heartbeats", Replicate),
            (vec![".*"], vec![], Identity, "dc2.heartbeats", Cycle),
            (
                vec!["orders"],
                vec![],
                Prefix,
                "app-heartbeats",
                NotIncluded,
            ),
        ];
        for (include, exclude, policy, topic, want) in cases {
            let f = TopicFilter::new(&spec(&include, &exclude, policy)).unwrap();
            assert_eq!(
                f.decide(topic),
                want,
                "{include:?} {exclude:?} {policy:?} {topic}"
            );
        }
    }

    #[test]
    fn bad_pattern_names_the_field() {
        let err =
            TopicFilter::new(&spec(&["ok", "("], &[], ReplicationPolicyType::Prefix)).unwrap_err();
        assert!(err.contains("spec.topics.include[1]"), "{err}");
    }

    #[test]
    fn target_names() {
        let f = TopicFilter::new(&spec(&[".*"], &[], ReplicationPolicyType::Prefix)).unwrap();
        assert_eq!(f.target_topic("orders"), "dc1.orders");
        let f = TopicFilter::new(&spec(&[".*"], &[], ReplicationPolicyType::Identity)).unwrap();
        assert_eq!(f.target_topic("orders"), "orders");
    }

    #[test]
    fn target_topic_action_table() {
        use TargetTopicAction::*;
        let cases = [
            (3, None, Create),
            (3, Some(3), Ready),
            (3, Some(5), Ready),
            (5, Some(3), Grow { from: 3, to: 5 }),
            (1, Some(0), Grow { from: 0, to: 1 }),
        ];
        for (source, target, want) in cases {
            assert_eq!(
                target_topic_action(source, target),
                want,
                "{source} {target:?}"
            );
        }
    }

    #[test]
    fn config_sync_table() {
        use ConfigOrigin::*;
        let cases = [
            ("retention.ms", TopicOverride, false, false, true),
            ("cleanup.policy", TopicOverride, false, false, true),
            ("retention.ms", Default, true, false, false),
            ("retention.ms", Unknown, false, false, true),
            ("retention.ms", Unknown, true, false, false),
            ("min.insync.replicas", TopicOverride, false, false, false),
            (
                "unclean.leader.election.enable",
                TopicOverride,
                false,
                false,
                false,
            ),
            (
                "leader.replication.throttled.replicas",
                TopicOverride,
                false,
                false,
                false,
            ),
            (
                "follower.replication.throttled.replicas",
                TopicOverride,
                false,
                false,
                false,
            ),
            ("message.timestamp.type", TopicOverride, false, false, false),
            (
                "message.timestamp.difference.max.ms",
                TopicOverride,
                false,
                false,
                false,
            ),
            (
                "message.timestamp.after.max.ms",
                TopicOverride,
                false,
                false,
                false,
            ),
            ("max.message.bytes", TopicOverride, false, false, true),
            ("some.password", TopicOverride, false, true, false),
        ];
        for (name, origin, is_default, sensitive, want) in cases {
            assert_eq!(
                should_sync_config(name, origin, is_default, sensitive),
                want,
                "{name} {origin:?}"
            );
        }
    }
}
