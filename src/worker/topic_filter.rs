//! Which source topics a flow replicates, and under which target name: the flow's topic
//! selection, shared by every worker side that acts per topic (the engine replicates these
//! topics, the checkpoint side translates offsets of their partitions, the ACL sync copies
//! their ACLs). Pure.

use crate::worker::error::Error;
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
    pub fn new(spec: &MirrorFlowSpec) -> Result<Self, Error> {
        let compile = |field: &str, patterns: &[String]| {
            patterns
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    full_match_regex(p)
                        .map_err(|e| Error::Spec(format!("spec.topics.{field}[{i}] {p:?}: {e}")))
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
        assert!(err.to_string().contains("spec.topics.include[1]"), "{err}");
    }

    #[test]
    fn target_names() {
        let f = TopicFilter::new(&spec(&[".*"], &[], ReplicationPolicyType::Prefix)).unwrap();
        assert_eq!(f.target_topic("orders"), "dc1.orders");
        let f = TopicFilter::new(&spec(&[".*"], &[], ReplicationPolicyType::Identity)).unwrap();
        assert_eq!(f.target_topic("orders"), "orders");
    }
}
