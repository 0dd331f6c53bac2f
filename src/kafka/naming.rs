//! Topic naming on the target and the rules that keep topics from being replicated.
//!
//! - `Prefix` policy (MirrorMaker 2's `DefaultReplicationPolicy`): `<sourceAlias><sep><topic>`.
//!   A topic is a *remote* topic when its name has a separator; the part before the first
//!   separator is the cluster it came from and the rest its upstream name (which may itself be
//!   remote, after several hops).
//! - `Identity` policy: the target topic has the source topic's name. Names then carry no
//!   origin, so cycles cannot be recognised; a flow pair A→B and B→A with Identity loops.
//!
//! A source topic is never replicated when it is internal ([`is_internal_topic`], as MM2's
//! `ReplicationPolicy.isInternalTopic`: Kafka's `__*` and `.*` topics, anything ending in
//! `.internal` or `-internal` — which covers mirrorflow's progress topic and MM2's offset
//! syncs and checkpoints) or when, under `Prefix`, it came from the target ([`is_cycle`]).

use crate::api::{ReplicationPolicy, ReplicationPolicyType};

/// The target topic name for `topic` replicated from the cluster `source_alias`.
pub fn target_topic(policy: &ReplicationPolicy, source_alias: &str, topic: &str) -> String {
    match policy.type_ {
        ReplicationPolicyType::Prefix => format!("{source_alias}{}{topic}", policy.separator),
        ReplicationPolicyType::Identity => topic.to_string(),
    }
}

/// `(source alias, upstream topic)` of a remote topic under `Prefix`, e.g. `dc1.orders` →
/// `("dc1", "orders")`; `None` for a topic without separator, an empty alias or upstream
/// name, and always under `Identity`.
pub fn split_remote<'a>(policy: &ReplicationPolicy, topic: &'a str) -> Option<(&'a str, &'a str)> {
    if policy.type_ != ReplicationPolicyType::Prefix || policy.separator.is_empty() {
        return None;
    }
    let (alias, upstream) = topic.split_once(policy.separator.as_str())?;
    (!alias.is_empty() && !upstream.is_empty()).then_some((alias, upstream))
}

/// Whether `topic` on the source came (directly or after several hops) from the cluster
/// `target_alias`, so replicating it would send records back where they came from. MM2's
/// `isCycle`: checks the source alias of every hop (`dc3.dc2.orders` → `dc3`, `dc2`).
/// Under `Identity` nothing can be recognised, so this is always false.
pub fn is_cycle(policy: &ReplicationPolicy, target_alias: &str, topic: &str) -> bool {
    let mut rest = topic;
    while let Some((alias, upstream)) = split_remote(policy, rest) {
        if alias == target_alias {
            return true;
        }
        rest = upstream;
    }
    false
}

/// Internal topics are never replicated (MM2's `isInternalTopic`).
pub fn is_internal_topic(topic: &str) -> bool {
    topic.starts_with("__")
        || topic.starts_with('.')
        || topic.ends_with(".internal")
        || topic.ends_with("-internal")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(sep: &str) -> ReplicationPolicy {
        ReplicationPolicy {
            type_: ReplicationPolicyType::Prefix,
            separator: sep.into(),
        }
    }

    fn identity() -> ReplicationPolicy {
        ReplicationPolicy {
            type_: ReplicationPolicyType::Identity,
            separator: ".".into(),
        }
    }

    #[test]
    fn target_topic_table() {
        let cases = [
            (prefix("."), "orders", "dc1.orders"),
            (prefix("_"), "orders", "dc1_orders"),
            (prefix("."), "dc0.orders", "dc1.dc0.orders"),
            (identity(), "orders", "orders"),
            (identity(), "dc0.orders", "dc0.orders"),
        ];
        for (policy, topic, want) in cases {
            assert_eq!(
                target_topic(&policy, "dc1", topic),
                want,
                "{policy:?} {topic}"
            );
        }
    }

    #[test]
    fn cycle_table() {
        // Replication dc1 → dc2: topics that came from dc2 must not go back.
        let cases = [
            (prefix("."), "orders", false),
            (prefix("."), "dc2.orders", true),
            (prefix("."), "dc3.orders", false),
            (prefix("."), "dc3.dc2.orders", true),
            (prefix("."), "dc3.dc4.orders", false),
            (prefix("."), "dc2", false),
            (prefix("."), "dc2.", false),
            (prefix("."), ".dc2.orders", false),
            (prefix("."), "dc22.orders", false),
            (prefix("_"), "dc2.orders", false),
            (prefix("_"), "dc2_orders", true),
            (prefix("--"), "dc2--orders", true),
            (identity(), "dc2.orders", false),
        ];
        for (policy, topic, want) in cases {
            assert_eq!(is_cycle(&policy, "dc2", topic), want, "{policy:?} {topic}");
        }
    }

    #[test]
    fn split_remote_table() {
        let p = prefix(".");
        assert_eq!(split_remote(&p, "dc1.a.b"), Some(("dc1", "a.b")));
        assert_eq!(split_remote(&p, "plain"), None);
        assert_eq!(split_remote(&identity(), "dc1.a"), None);
    }

    #[test]
    fn internal_topics_table() {
        let cases = [
            ("__consumer_offsets", true),
            ("__transaction_state", true),
            (".hidden", true),
            ("mm2-offset-syncs.dc2.internal", true),
            ("dc1.checkpoints.internal", true),
            ("mirrorflow-progress.f.internal", true),
            ("connect-offsets-internal", true),
            ("heartbeats", false),
            ("orders", false),
            ("_single_underscore", false),
            ("internal.orders", false),
        ];
        for (topic, want) in cases {
            assert_eq!(is_internal_topic(topic), want, "{topic}");
        }
    }
}
