//! What happens to a replicated topic's target: created, grown, or ready; and which topic
//! configs travel with it (MM2's config sync). Which topics are replicated at all is
//! `worker::topic_filter`. Pure.

use regex::Regex;

use crate::api::validate::full_match_regex;
use crate::api::MirrorFlowSpec;
use crate::kafka::topic_config::ConfigChange;
use crate::kafka::topics::ConfigEntry;
use crate::worker::error::Error;

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

/// Topic configs never copied to, set on or deleted from target topics: broker- or
/// cluster-specific ones, MirrorMaker 2's `DefaultConfigPropertyFilter` default
/// (`config.properties.exclude`), as full-match regexes. `message.timestamp.*` widens MM2's
/// `message.timestamp.type` and `message.timestamp.difference.max.ms` to the
/// `before.max.ms`/`after.max.ms` pair newer brokers split the difference into: copied, they
/// would make the target refuse (or restamp) the old records a mirror writes.
pub const EXCLUDED_TOPIC_CONFIGS: &[&str] = &[
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\..*",
    r"unclean\.leader\.election\.enable",
    r"min\.insync\.replicas",
];

/// The compiled config exclusions of a flow: [`EXCLUDED_TOPIC_CONFIGS`] plus
/// `spec.topicConfigs.exclude`.
#[derive(Debug, Clone)]
pub struct ConfigExclusions(Vec<Regex>);

impl Default for ConfigExclusions {
    fn default() -> Self {
        Self(
            EXCLUDED_TOPIC_CONFIGS
                .iter()
                .map(|p| full_match_regex(p).expect("built-in pattern"))
                .collect(),
        )
    }
}

impl ConfigExclusions {
    /// The defaults plus the spec's patterns; the error names the field and pattern (specs
    /// that passed `validate_flow` always compile).
    pub fn new(spec: &MirrorFlowSpec) -> Result<Self, Error> {
        let mut out = Self::default();
        for (i, p) in spec.topic_configs.exclude.iter().enumerate() {
            out.0.push(
                full_match_regex(p).map_err(|e| {
                    Error::Spec(format!("spec.topicConfigs.exclude[{i}] {p:?}: {e}"))
                })?,
            );
        }
        Ok(out)
    }

    /// Whether config `name` is left alone.
    pub fn excludes(&self, name: &str) -> bool {
        self.0.iter().any(|r| r.is_match(name))
    }
}

/// Whether a source topic config entry is copied to the target topic: only values set on
/// the topic (MM2 also copies the source *brokers'* settings, as its `isDefault` is only
/// Kafka's built-in default; a broker setting describes that cluster, not the topic), never
/// sensitive ones, never excluded ones.
pub fn should_sync_config(e: &ConfigEntry, exclusions: &ConfigExclusions) -> bool {
    e.set_on_topic() && !e.is_sensitive && e.value.is_some() && !exclusions.excludes(&e.name)
}

/// The syncable `(name, value)` configs of a source topic, sorted.
pub fn syncable_configs(
    source: &[ConfigEntry],
    exclusions: &ConfigExclusions,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = source
        .iter()
        .filter(|e| should_sync_config(e, exclusions))
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    out.sort();
    out
}

/// What makes a target topic's configs match its source topic's (MM2's config sync with
/// `use.defaults.from=target`): every syncable source value set on the target topic where
/// the target differs or only inherits it; every value set on the target topic that the
/// source topic no longer sets deleted. Excluded and sensitive configs are never touched.
/// Sorted; empty when they match.
pub fn config_changes(
    source: &[ConfigEntry],
    target: &[ConfigEntry],
    exclusions: &ConfigExclusions,
) -> Vec<ConfigChange> {
    let wanted = syncable_configs(source, exclusions);
    let mut out = Vec::new();
    for (name, value) in &wanted {
        let same = target
            .iter()
            .any(|t| &t.name == name && t.set_on_topic() && t.value.as_ref() == Some(value));
        if !same {
            out.push(ConfigChange::Set(name.clone(), value.clone()));
        }
    }
    for t in target {
        let ours = t.set_on_topic() && !t.is_sensitive && !exclusions.excludes(&t.name);
        if ours && !wanted.iter().any(|(n, _)| n == &t.name) {
            out.push(ConfigChange::Delete(t.name.clone()));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::topics::ConfigOrigin;

    fn spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:1"},
            "target": {"alias": "dc2", "bootstrapServers": "b:1"},
        }))
        .unwrap()
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

    fn entry(name: &str, value: &str, origin: ConfigOrigin) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: Some(value.into()),
            origin,
            is_default: origin == ConfigOrigin::Default,
            is_sensitive: false,
        }
    }

    #[test]
    fn config_sync_table() {
        use ConfigOrigin::*;
        let d = ConfigExclusions::default();
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
            // Full match: a longer name is not excluded by a shorter pattern.
            ("min.insync.replicas.x", TopicOverride, false, false, true),
            ("max.message.bytes", TopicOverride, false, false, true),
            ("some.password", TopicOverride, false, true, false),
        ];
        for (name, origin, is_default, is_sensitive, want) in cases {
            let e = ConfigEntry {
                is_default,
                is_sensitive,
                ..entry(name, "v", origin)
            };
            assert_eq!(should_sync_config(&e, &d), want, "{name} {origin:?}");
        }
    }

    #[test]
    fn spec_exclusions_add_to_the_defaults() {
        let mut s = spec();
        s.topic_configs.exclude = vec![r"retention\..*".into()];
        let x = ConfigExclusions::new(&s).unwrap();
        assert!(x.excludes("retention.ms") && x.excludes("retention.bytes"));
        assert!(x.excludes("min.insync.replicas"), "defaults stay");
        assert!(!x.excludes("cleanup.policy"));
        s.topic_configs.exclude = vec!["ok".into(), "(".into()];
        let err = ConfigExclusions::new(&s).unwrap_err();
        assert_eq!(err.reason(), "InvalidSpec");
        assert!(
            err.to_string().contains("spec.topicConfigs.exclude[1]"),
            "{err}"
        );
    }

    #[test]
    fn config_changes_table() {
        use ConfigChange::*;
        use ConfigOrigin::*;
        let mut s = spec();
        s.topic_configs.exclude = vec!["segment\\.bytes".into()];
        let x = ConfigExclusions::new(&s).unwrap();
        let set = |n: &str, v: &str| Set(n.into(), v.into());
        let del = |n: &str| Delete(n.into());
        let o = |n: &str, v: &str| entry(n, v, TopicOverride);
        let dflt = |n: &str, v: &str| entry(n, v, Default);
        type Case = (
            &'static str,
            Vec<ConfigEntry>,
            Vec<ConfigEntry>,
            Vec<ConfigChange>,
        );
        let cases: Vec<Case> = vec![
            (
                "in sync",
                vec![o("retention.ms", "1")],
                vec![o("retention.ms", "1")],
                vec![],
            ),
            (
                "changed on the source",
                vec![o("retention.ms", "2")],
                vec![o("retention.ms", "1")],
                vec![set("retention.ms", "2")],
            ),
            (
                "new on the source; the target only inherits the same value",
                vec![o("cleanup.policy", "delete")],
                vec![dflt("cleanup.policy", "delete")],
                vec![set("cleanup.policy", "delete")],
            ),
            (
                "no longer set on the source: the target's default applies",
                vec![dflt("retention.ms", "604800000")],
                vec![o("retention.ms", "1")],
                vec![del("retention.ms")],
            ),
            (
                "source broker defaults never travel",
                vec![dflt("max.message.bytes", "1048588")],
                vec![dflt("max.message.bytes", "2000000")],
                vec![],
            ),
            (
                "MM2's exclusions: neither set nor deleted",
                vec![
                    o("min.insync.replicas", "2"),
                    o("message.timestamp.type", "LogAppendTime"),
                ],
                vec![o("unclean.leader.election.enable", "true")],
                vec![],
            ),
            (
                "the spec's exclusions: neither set nor deleted",
                vec![o("segment.bytes", "1000")],
                vec![o("segment.bytes", "5000")],
                vec![],
            ),
            (
                "sensitive values are left alone on both sides",
                vec![ConfigEntry {
                    value: None,
                    is_sensitive: true,
                    ..o("x.password", "")
                }],
                vec![ConfigEntry {
                    value: None,
                    is_sensitive: true,
                    ..o("y.password", "")
                }],
                vec![],
            ),
            (
                "several at once, sorted",
                vec![o("retention.ms", "5"), o("cleanup.policy", "compact")],
                vec![o("retention.ms", "1"), o("max.message.bytes", "9")],
                vec![
                    set("cleanup.policy", "compact"),
                    set("retention.ms", "5"),
                    del("max.message.bytes"),
                ],
            ),
        ];
        for (what, source, target, want) in cases {
            assert_eq!(config_changes(&source, &target, &x), want, "{what}");
        }
    }
}
