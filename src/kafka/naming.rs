//! Topic naming on the target and the rules that keep topics from being replicated.
//!
//! - `Prefix` policy (MirrorMaker 2's `DefaultReplicationPolicy`): `<sourceAlias><sep><topic>`.
//!   A topic is a *remote* topic when its name has a separator; the part before the first
//!   separator is the cluster it came from and the rest its upstream name (which may itself be
//!   remote, after several hops).
//! - `Identity` policy: the target topic has the source topic's name. Names then carry no
//!   origin, so cycles cannot be recognised; a flow pair A→B and B→A with Identity loops.
//!
//! - Heartbeats topics (`heartbeats`, `dc1.heartbeats`, ...: [`is_heartbeats_topic`]) are
//!   named and traced back as under `Prefix` whatever the policy, with the policy's
//!   separator, as MM2's `IdentityReplicationPolicy` defers to the default policy for them.
//!   So the target's own `heartbeats` never mixes with the source's, upstream clusters stay
//!   visible in the names, and heartbeats never loop, even under `Identity`. (MM2 treats
//!   every topic whose name merely ends in `heartbeats` that way under Identity, renaming
//!   e.g. `app-heartbeats`; mirrorflow only heartbeats topics proper.)
//!
//! A source topic is never replicated when it is internal ([`is_internal_topic`], as MM2's
//! `ReplicationPolicy.isInternalTopic`: Kafka's `__*` and `.*` topics, anything ending in
//! `.internal` or `-internal` — which covers mirrorflow's progress topic and MM2's offset
//! syncs and checkpoints) or when, under `Prefix`, it came from the target ([`is_cycle`]).

use crate::api::{ReplicationPolicy, ReplicationPolicyType};
use crate::kafka::wire::HEARTBEATS_TOPIC;

/// The target topic name for `topic` replicated from the cluster `source_alias`.
pub fn target_topic(policy: &ReplicationPolicy, source_alias: &str, topic: &str) -> String {
    if prefixed(policy, topic) {
        format!("{source_alias}{}{topic}", policy.separator)
    } else {
        topic.to_string()
    }
}

/// Whether `topic` is named with the source alias: always under `Prefix`; under `Identity`
/// only heartbeats topics (see the module docs).
fn prefixed(policy: &ReplicationPolicy, topic: &str) -> bool {
    policy.type_ == ReplicationPolicyType::Prefix || is_heartbeats_topic(policy, topic)
}

/// `(source alias, upstream topic)` of a remote topic under `Prefix`, e.g. `dc1.orders` →
/// `("dc1", "orders")`; `None` for a topic without separator, an empty alias or upstream
/// name, and under `Identity` except for heartbeats topics.
pub fn split_remote<'a>(policy: &ReplicationPolicy, topic: &'a str) -> Option<(&'a str, &'a str)> {
    split_prefix(&policy.separator, topic).filter(|_| prefixed(policy, topic))
}

/// `topic` split at the first `separator`, whatever the policy.
fn split_prefix<'a>(separator: &str, topic: &'a str) -> Option<(&'a str, &'a str)> {
    if separator.is_empty() {
        return None;
    }
    let (alias, upstream) = topic.split_once(separator)?;
    (!alias.is_empty() && !upstream.is_empty()).then_some((alias, upstream))
}

/// Whether `topic` is a heartbeats topic: MM2's `heartbeats` or a replica of one after any
/// number of hops (`dc1.heartbeats`, `dc2.dc1.heartbeats`), MM2's
/// `ReplicationPolicy.isHeartbeatsTopic`. The policy's separator splits the hops under
/// both policies. Such topics are replicated whatever `topics` selects (unless internal or
/// a cycle), as MM2's `MirrorSourceConnector.shouldReplicateTopic`.
pub fn is_heartbeats_topic(policy: &ReplicationPolicy, topic: &str) -> bool {
    let mut original = topic;
    while let Some((_, upstream)) = split_prefix(&policy.separator, original) {
        original = upstream;
    }
    original == HEARTBEATS_TOPIC
}

/// Whether `topic` on the source came (directly or after several hops) from the cluster
/// `target_alias`, so replicating it would send records back where they came from. MM2's
/// `isCycle`: checks the source alias of every hop (`dc3.dc2.orders` → `dc3`, `dc2`).
/// Under `Identity` nothing can be recognised, so this is false except for heartbeats
/// topics (named as under `Prefix`).
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
    fn heartbeats_topic_table() {
        let cases = [
            (prefix("."), "heartbeats", true),
            (prefix("."), "dc1.heartbeats", true),
            (prefix("."), "dc2.dc1.heartbeats", true),
            (prefix("."), "heartbeats.dc1", false),
            (prefix("."), "app-heartbeats", false),
            (prefix("."), "dc1.app-heartbeats", false),
            (prefix("."), "xheartbeats", false),
            (prefix("."), "Heartbeats", false),
            (prefix("_"), "dc1_heartbeats", true),
            (prefix("_"), "dc1.heartbeats", false),
            (identity(), "heartbeats", true),
            (identity(), "dc1.heartbeats", true),
            (identity(), "app-heartbeats", false),
        ];
        for (policy, topic, want) in cases {
            assert_eq!(
                is_heartbeats_topic(&policy, topic),
                want,
                "{policy:?} {topic}"
            );
        }
    }

    #[test]
    fn heartbeats_are_prefixed_under_identity() {
        // MM2's IdentityReplicationPolicy defers to the default policy for heartbeats, so
        // the source's `heartbeats` never lands in the target's own `heartbeats`.
        let cases = [
            (identity(), "heartbeats", "dc1.heartbeats"),
            (identity(), "dc0.heartbeats", "dc1.dc0.heartbeats"),
            (identity(), "app-heartbeats", "app-heartbeats"),
            (identity(), "orders", "orders"),
            (prefix("."), "heartbeats", "dc1.heartbeats"),
            (prefix("_"), "heartbeats", "dc1_heartbeats"),
        ];
        for (policy, topic, want) in cases {
            assert_eq!(
                target_topic(&policy, "dc1", topic),
                want,
                "{policy:?} {topic}"
            );
        }
        // ...and heartbeats that came from the target are recognised, so they do not loop.
        let cycles = [
            (identity(), "dc2.heartbeats", true),
            (identity(), "dc3.dc2.heartbeats", true),
            (identity(), "dc3.heartbeats", false),
            (identity(), "heartbeats", false),
            (identity(), "dc2.orders", false),
            (prefix("."), "dc2.heartbeats", true),
        ];
        for (policy, topic, want) in cycles {
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
