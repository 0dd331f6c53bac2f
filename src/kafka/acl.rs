//! Topic ACLs: the bindings, librdkafka's DescribeAcls / CreateAcls / DeleteAcls (rust-rdkafka
//! wraps none of them; called in `kafka::sys::acl`), and the pure plan of the ACL sync.
//!
//! The sync copies the source's ALLOW bindings on replicated topics to their target topics
//! (MirrorMaker 2's `sync.topic.acls`, stricter): literal and prefixed topic patterns renamed
//! by the replication policy; READ, DESCRIBE and DESCRIBE_CONFIGS copied as they are, ALL as
//! READ, so nobody but the mirror writes (or alters, or deletes) the target topics; WRITE,
//! every other operation and DENY never copied. A binding the flow created is removed when
//! its source binding goes; a binding that was on the target before is never touched. The
//! flow's bindings are remembered in a compacted topic on the target (see
//! `worker::acl_sync`): ACLs carry no owner.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

pub use super::sys::acl::{create_topic_acls, delete_topic_acls, describe_topic_acls};
use crate::api::{ReplicationPolicy, ReplicationPolicyType};

/// How a binding names topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PatternType {
    /// The topic named.
    Literal,
    /// Every topic whose name starts with the name.
    Prefixed,
}

/// ACL operations (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    Other(i32),
}

/// ALLOW or DENY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Permission {
    Allow,
    Deny,
    Other(i32),
}

/// One ACL binding on a topic resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicAcl {
    pub pattern: PatternType,
    /// Topic name (literal) or prefix.
    pub name: String,
    /// e.g. `User:alice`.
    pub principal: String,
    /// e.g. `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl std::fmt::Display for TopicAcl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} {:?} on {:?} topic {:?} for {} from {}",
            self.permission, self.operation, self.pattern, self.name, self.principal, self.host
        )
    }
}

/// Why a source binding is not copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// DENY bindings are never copied.
    Deny,
    /// WRITE and other operations that would let someone change the target topics.
    Operation,
    /// The topic is not replicated by this flow (or, prefixed, no replicated topic matches).
    NotReplicated,
    /// The literal `*` (every topic) or a prefixed pattern under the Identity policy: on
    /// the target it would also cover topics this flow does not mirror.
    TooBroad,
}

/// The target binding for `source`, or why there is none. Pure.
///
/// `replicated(topic)` says whether the flow replicates a source topic; `source_topics` are
/// the source topics the flow replicates now (for prefixed patterns).
pub fn target_acl(
    source: &TopicAcl,
    policy: &ReplicationPolicy,
    source_alias: &str,
    replicated: &dyn Fn(&str) -> bool,
    source_topics: &[String],
) -> Result<TopicAcl, Skip> {
    if source.permission != Permission::Allow {
        return Err(Skip::Deny);
    }
    let operation = match source.operation {
        Operation::Read | Operation::Describe | Operation::DescribeConfigs => source.operation,
        Operation::All => Operation::Read,
        _ => return Err(Skip::Operation),
    };
    match source.pattern {
        PatternType::Literal if source.name == "*" => return Err(Skip::TooBroad),
        PatternType::Literal if !replicated(&source.name) => return Err(Skip::NotReplicated),
        PatternType::Prefixed if policy.type_ == ReplicationPolicyType::Identity => {
            return Err(Skip::TooBroad)
        }
        PatternType::Prefixed if !source_topics.iter().any(|t| t.starts_with(&source.name)) => {
            return Err(Skip::NotReplicated)
        }
        _ => {}
    }
    Ok(TopicAcl {
        name: super::naming::target_topic(policy, source_alias, &source.name),
        operation,
        ..source.clone()
    })
}

/// What one sync does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AclPlan {
    /// Bindings to create on the target (record them as the flow's first).
    pub create: Vec<TopicAcl>,
    /// Bindings the flow created that no source binding asks for any more (delete, then
    /// forget).
    pub delete: Vec<TopicAcl>,
    /// Target bindings that mirror a source binding after the sync.
    pub synced: usize,
    /// Of those, the ones the flow created.
    pub created_by_flow: usize,
    /// Source bindings on topics not copied (DENY, operations), for the status.
    pub skipped: usize,
}

/// Plans a sync from the desired target bindings, what the target has, and what the flow
/// created earlier. Never deletes a binding the flow did not create. Pure.
pub fn plan(
    desired: &BTreeSet<TopicAcl>,
    skipped: usize,
    on_target: &BTreeSet<TopicAcl>,
    created: &BTreeSet<TopicAcl>,
) -> AclPlan {
    let create: Vec<TopicAcl> = desired.difference(on_target).cloned().collect();
    let delete: Vec<TopicAcl> = created.difference(desired).cloned().collect();
    let created_by_flow = desired
        .iter()
        .filter(|b| created.contains(*b) || !on_target.contains(*b))
        .count();
    AclPlan {
        create,
        delete,
        synced: desired.len(),
        created_by_flow,
        skipped,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rdkafka::admin::AdminClient;
    use std::time::Duration;
    use Operation::*;
    use PatternType::*;
    use Permission::*;

    /// A binding for `User:alice` from any host.
    pub(crate) fn acl(
        pattern: PatternType,
        name: &str,
        op: Operation,
        perm: Permission,
    ) -> TopicAcl {
        TopicAcl {
            pattern,
            name: name.into(),
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    #[test]
    fn target_acl_table() {
        let prefix = ReplicationPolicy::default();
        let identity = ReplicationPolicy {
            type_: ReplicationPolicyType::Identity,
            ..ReplicationPolicy::default()
        };
        let replicated = |t: &str| t.starts_with("orders") || t == "pay";
        let topics = vec![
            "orders".to_string(),
            "orders-eu".to_string(),
            "pay".to_string(),
        ];
        let cases: Vec<(&str, TopicAcl, &ReplicationPolicy, Result<TopicAcl, Skip>)> = vec![
            (
                "read copied, renamed",
                acl(Literal, "orders", Read, Allow),
                &prefix,
                Ok(acl(Literal, "dc1.orders", Read, Allow)),
            ),
            (
                "describe copied",
                acl(Literal, "pay", Describe, Allow),
                &prefix,
                Ok(acl(Literal, "dc1.pay", Describe, Allow)),
            ),
            (
                "describe configs copied",
                acl(Literal, "pay", DescribeConfigs, Allow),
                &prefix,
                Ok(acl(Literal, "dc1.pay", DescribeConfigs, Allow)),
            ),
            (
                "ALL downgraded to READ",
                acl(Literal, "orders", All, Allow),
                &prefix,
                Ok(acl(Literal, "dc1.orders", Read, Allow)),
            ),
            (
                "WRITE never",
                acl(Literal, "orders", Write, Allow),
                &prefix,
                Err(Skip::Operation),
            ),
            (
                "DELETE never",
                acl(Literal, "orders", Delete, Allow),
                &prefix,
                Err(Skip::Operation),
            ),
            (
                "ALTER_CONFIGS never",
                acl(Literal, "orders", AlterConfigs, Allow),
                &prefix,
                Err(Skip::Operation),
            ),
            (
                "DENY never",
                acl(Literal, "orders", Read, Deny),
                &prefix,
                Err(Skip::Deny),
            ),
            (
                "DENY ALL never",
                acl(Literal, "orders", All, Deny),
                &prefix,
                Err(Skip::Deny),
            ),
            (
                "topic not replicated",
                acl(Literal, "secret", Read, Allow),
                &prefix,
                Err(Skip::NotReplicated),
            ),
            (
                "wildcard too broad",
                acl(Literal, "*", Read, Allow),
                &prefix,
                Err(Skip::TooBroad),
            ),
            (
                "prefixed renamed",
                acl(Prefixed, "orders", Read, Allow),
                &prefix,
                Ok(acl(Prefixed, "dc1.orders", Read, Allow)),
            ),
            (
                "prefixed matching nothing replicated",
                acl(Prefixed, "hr-", Read, Allow),
                &prefix,
                Err(Skip::NotReplicated),
            ),
            (
                "prefixed under identity too broad",
                acl(Prefixed, "orders", Read, Allow),
                &identity,
                Err(Skip::TooBroad),
            ),
            (
                "identity literal keeps the name",
                acl(Literal, "orders", All, Allow),
                &identity,
                Ok(acl(Literal, "orders", Read, Allow)),
            ),
        ];
        for (what, src, policy, want) in cases {
            assert_eq!(
                target_acl(&src, policy, "dc1", &replicated, &topics),
                want,
                "{what}"
            );
        }
    }

    #[test]
    fn plan_table() {
        let a = acl(Literal, "dc1.a", Read, Allow);
        let b = acl(Literal, "dc1.b", Read, Allow);
        let c = acl(Literal, "dc1.c", Read, Allow);
        let set = |v: &[&TopicAcl]| v.iter().map(|x| (*x).clone()).collect::<BTreeSet<_>>();
        type Case<'a> = (
            &'a str,
            BTreeSet<TopicAcl>,
            BTreeSet<TopicAcl>,
            BTreeSet<TopicAcl>,
            Vec<TopicAcl>,
            Vec<TopicAcl>,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                "first sync creates",
                set(&[&a, &b]),
                set(&[]),
                set(&[]),
                vec![a.clone(), b.clone()],
                vec![],
                2,
            ),
            (
                "already there before: not ours",
                set(&[&a]),
                set(&[&a]),
                set(&[]),
                vec![],
                vec![],
                0,
            ),
            (
                "ours and present: nothing",
                set(&[&a]),
                set(&[&a]),
                set(&[&a]),
                vec![],
                vec![],
                1,
            ),
            (
                "ours, deleted by someone: created again",
                set(&[&a]),
                set(&[]),
                set(&[&a]),
                vec![a.clone()],
                vec![],
                1,
            ),
            (
                "source gone, ours: deleted",
                set(&[]),
                set(&[&a, &c]),
                set(&[&a]),
                vec![],
                vec![a.clone()],
                0,
            ),
            (
                "source gone, not ours: kept",
                set(&[]),
                set(&[&c]),
                set(&[]),
                vec![],
                vec![],
                0,
            ),
        ];
        for (what, desired, on_target, created, create, delete, by_flow) in cases {
            let p = plan(&desired, 3, &on_target, &created);
            assert_eq!((p.create, p.delete), (create, delete), "{what}");
            assert_eq!(p.created_by_flow, by_flow, "{what}");
            assert_eq!((p.synced, p.skipped), (desired.len(), 3), "{what}");
        }
    }

    #[test]
    fn unreachable_cluster_is_an_error() {
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", "127.0.0.1:1")
                .create()
                .unwrap();
        let e = describe_topic_acls(&admin, Duration::from_millis(200)).unwrap_err();
        assert!(e.to_string().starts_with("describe topic ACLs"), "{e}");
        assert_eq!(
            create_topic_acls(&admin, &[], Duration::from_millis(1)),
            Ok(vec![])
        );
        assert_eq!(
            delete_topic_acls(&admin, &[], Duration::from_millis(1)),
            Ok(vec![])
        );
    }
}
