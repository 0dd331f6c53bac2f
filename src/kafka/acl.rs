//! Topic ACLs: librdkafka's DescribeAcls / CreateAcls / DeleteAcls (rust-rdkafka wraps none of
//! them; this is the only place that calls them), and the pure plan of the ACL sync.
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
use std::ffi::{c_char, c_int, CStr, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use serde::{Deserialize, Serialize};

use super::ffi::{admin_options, error_text, queue, Handle};
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

/// Text of a librdkafka error string (the errstr buffers of the constructors).
fn buf_text(buf: &[c_char]) -> String {
    // SAFETY: librdkafka NUL-terminates what it writes; the buffer starts zeroed.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn op_to_rd(op: Operation) -> rd::rd_kafka_AclOperation_t {
    use rd::rd_kafka_AclOperation_t::*;
    match op {
        Operation::All => RD_KAFKA_ACL_OPERATION_ALL,
        Operation::Read => RD_KAFKA_ACL_OPERATION_READ,
        Operation::Write => RD_KAFKA_ACL_OPERATION_WRITE,
        Operation::Create => RD_KAFKA_ACL_OPERATION_CREATE,
        Operation::Delete => RD_KAFKA_ACL_OPERATION_DELETE,
        Operation::Alter => RD_KAFKA_ACL_OPERATION_ALTER,
        Operation::Describe => RD_KAFKA_ACL_OPERATION_DESCRIBE,
        Operation::ClusterAction => RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION,
        Operation::DescribeConfigs => RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        Operation::AlterConfigs => RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS,
        Operation::IdempotentWrite => RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
        Operation::Other(_) => RD_KAFKA_ACL_OPERATION_UNKNOWN,
    }
}

fn op_from_rd(op: rd::rd_kafka_AclOperation_t) -> Operation {
    use rd::rd_kafka_AclOperation_t::*;
    match op {
        RD_KAFKA_ACL_OPERATION_ALL => Operation::All,
        RD_KAFKA_ACL_OPERATION_READ => Operation::Read,
        RD_KAFKA_ACL_OPERATION_WRITE => Operation::Write,
        RD_KAFKA_ACL_OPERATION_CREATE => Operation::Create,
        RD_KAFKA_ACL_OPERATION_DELETE => Operation::Delete,
        RD_KAFKA_ACL_OPERATION_ALTER => Operation::Alter,
        RD_KAFKA_ACL_OPERATION_DESCRIBE => Operation::Describe,
        RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION => Operation::ClusterAction,
        RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS => Operation::DescribeConfigs,
        RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS => Operation::AlterConfigs,
        RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE => Operation::IdempotentWrite,
        other => Operation::Other(other as i32),
    }
}

fn perm_to_rd(p: Permission) -> rd::rd_kafka_AclPermissionType_t {
    use rd::rd_kafka_AclPermissionType_t::*;
    match p {
        Permission::Allow => RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
        Permission::Deny => RD_KAFKA_ACL_PERMISSION_TYPE_DENY,
        Permission::Other(_) => RD_KAFKA_ACL_PERMISSION_TYPE_UNKNOWN,
    }
}

fn perm_from_rd(p: rd::rd_kafka_AclPermissionType_t) -> Permission {
    use rd::rd_kafka_AclPermissionType_t::*;
    match p {
        RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW => Permission::Allow,
        RD_KAFKA_ACL_PERMISSION_TYPE_DENY => Permission::Deny,
        other => Permission::Other(other as i32),
    }
}

fn pattern_to_rd(p: PatternType) -> rd::rd_kafka_ResourcePatternType_t {
    match p {
        PatternType::Literal => {
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL
        }
        PatternType::Prefixed => {
            rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED
        }
    }
}

fn cstring(what: &str, s: &str) -> Result<CString, String> {
    CString::new(s).map_err(|e| format!("{what} {s:?}: {e}"))
}

/// Runs one admin request on a private queue and returns its answer event (its error, if
/// the request failed as a whole, as `Err`).
///
/// # Safety
/// `rk` must be a live client handle; `submit` must enqueue exactly one request on the
/// queue it is given, with the options it is given.
pub(crate) unsafe fn request(
    rk: *mut rd::rd_kafka_t,
    op: rd::rd_kafka_admin_op_t,
    timeout: Duration,
    what: &str,
    submit: impl FnOnce(*mut rd::rd_kafka_AdminOptions_t, *mut rd::rd_kafka_queue_t),
) -> Result<Handle<rd::rd_kafka_event_t>, String> {
    let timeout_ms = c_int::try_from(timeout.as_millis()).unwrap_or(c_int::MAX);
    let queue = queue(rk);
    let options = admin_options(rk, op, timeout_ms);
    submit(options.ptr, queue.ptr);
    let event = Handle {
        ptr: rd::rd_kafka_queue_poll(queue.ptr, timeout_ms.saturating_add(1000)),
        destroy: rd::rd_kafka_event_destroy,
    };
    if event.ptr.is_null() {
        return Err(format!("{what}: no answer within {timeout:?}"));
    }
    if rd::rd_kafka_event_error(event.ptr) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        let msg = CStr::from_ptr(rd::rd_kafka_event_error_string(event.ptr));
        return Err(format!("{what}: {}", msg.to_string_lossy()));
    }
    Ok(event)
}

/// A binding (or, with `filter`, a binding filter) for `acl`. Destroyed by the caller.
///
/// # Safety
/// Plain constructor call; the strings are copied by librdkafka.
unsafe fn new_binding(acl: &TopicAcl) -> Result<Handle<rd::rd_kafka_AclBinding_t>, String> {
    let name = cstring("topic", &acl.name)?;
    let principal = cstring("principal", &acl.principal)?;
    let host = cstring("host", &acl.host)?;
    let mut errbuf = [0 as c_char; 256];
    let ptr = rd::rd_kafka_AclBinding_new(
        rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
        name.as_ptr(),
        pattern_to_rd(acl.pattern),
        principal.as_ptr(),
        host.as_ptr(),
        op_to_rd(acl.operation),
        perm_to_rd(acl.permission),
        errbuf.as_mut_ptr(),
        errbuf.len(),
    );
    if ptr.is_null() {
        return Err(format!("ACL {acl}: {}", buf_text(&errbuf)));
    }
    Ok(Handle {
        ptr,
        destroy: rd::rd_kafka_AclBinding_destroy,
    })
}

/// Blocking: every ACL binding on topic resources (literal and prefixed) of `admin`'s
/// cluster.
pub fn describe_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<Vec<TopicAcl>, String> {
    let what = "describe topic ACLs";
    let rk = admin.inner().native_ptr();
    // SAFETY: handles are made from the live client `rk` and destroyed by guards; result
    // pointers are read only while `event` lives.
    unsafe {
        let mut errbuf = [0 as c_char; 256];
        let filter = Handle {
            ptr: rd::rd_kafka_AclBindingFilter_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                std::ptr::null(),
                rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_ANY,
                std::ptr::null(),
                std::ptr::null(),
                rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY,
                rd::rd_kafka_AclPermissionType_t::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
                errbuf.as_mut_ptr(),
                errbuf.len(),
            ),
            destroy: rd::rd_kafka_AclBinding_destroy,
        };
        if filter.ptr.is_null() {
            return Err(format!("{what}: {}", buf_text(&errbuf)));
        }
        let event = request(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS,
            timeout,
            what,
            |options, queue| rd::rd_kafka_DescribeAcls(rk, filter.ptr, options, queue),
        )?;
        let result = rd::rd_kafka_event_DescribeAcls_result(event.ptr);
        if result.is_null() {
            return Err(format!("{what}: unexpected event type"));
        }
        let mut count = 0usize;
        let acls = rd::rd_kafka_DescribeAcls_result_acls(result, &mut count);
        let acls: &[*const rd::rd_kafka_AclBinding_t] = if acls.is_null() || count == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(acls, count)
        };
        let text = |p: *const c_char| {
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let mut out = Vec::with_capacity(acls.len());
        for a in acls.iter().copied() {
            let pattern = match rd::rd_kafka_AclBinding_resource_pattern_type(a) {
                rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_LITERAL => {
                    PatternType::Literal
                }
                rd::rd_kafka_ResourcePatternType_t::RD_KAFKA_RESOURCE_PATTERN_PREFIXED => {
                    PatternType::Prefixed
                }
                _ => continue,
            };
            out.push(TopicAcl {
                pattern,
                name: text(rd::rd_kafka_AclBinding_name(a)),
                principal: text(rd::rd_kafka_AclBinding_principal(a)),
                host: text(rd::rd_kafka_AclBinding_host(a)),
                operation: op_from_rd(rd::rd_kafka_AclBinding_operation(a)),
                permission: perm_from_rd(rd::rd_kafka_AclBinding_permission_type(a)),
            });
        }
        Ok(out)
    }
}

/// Blocking: creates `acls` on `admin`'s cluster; one result per binding, in order.
pub fn create_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    acls: &[TopicAcl],
    timeout: Duration,
) -> Result<Vec<Result<(), String>>, String> {
    if acls.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("create {} topic ACL(s)", acls.len());
    let rk = admin.inner().native_ptr();
    // SAFETY: as in `describe_topic_acls`; CreateAcls copies the bindings.
    unsafe {
        let bindings: Vec<Handle<rd::rd_kafka_AclBinding_t>> = acls
            .iter()
            .map(|a| new_binding(a))
            .collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*mut rd::rd_kafka_AclBinding_t> =
            bindings.iter().map(|b| b.ptr).collect();
        let event = request(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
            timeout,
            &what,
            |options, queue| {
                rd::rd_kafka_CreateAcls(rk, ptrs.as_mut_ptr(), ptrs.len(), options, queue)
            },
        )?;
        let result = rd::rd_kafka_event_CreateAcls_result(event.ptr);
        if result.is_null() {
            return Err(format!("{what}: unexpected event type"));
        }
        let mut count = 0usize;
        let res = rd::rd_kafka_CreateAcls_result_acls(result, &mut count);
        let res: &[*const rd::rd_kafka_acl_result_t] = if res.is_null() || count == 0 {
            &[]
        } else {
            std::slice::from_raw_parts(res, count)
        };
        Ok(acls
            .iter()
            .enumerate()
            .map(|(i, a)| match res.get(i) {
                Some(r) => match error_text(rd::rd_kafka_acl_result_error(*r)) {
                    None => Ok(()),
                    Some(e) => Err(format!("create ACL {a}: {e}")),
                },
                None => Err(format!("create ACL {a}: missing from the answer")),
            })
            .collect())
    }
}

/// Blocking: deletes exactly `acls` (each as a filter matching only itself); one result per
/// binding, in order.
pub fn delete_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    acls: &[TopicAcl],
    timeout: Duration,
) -> Result<Vec<Result<(), String>>, String> {
    if acls.is_empty() {
        return Ok(Vec::new());
    }
    let what = format!("delete {} topic ACL(s)", acls.len());
    let rk = admin.inner().native_ptr();
    // SAFETY: as in `describe_topic_acls`; a binding filter is the same type as a binding.
    unsafe {
        let filters: Vec<Handle<rd::rd_kafka_AclBinding_t>> = acls
            .iter()
            .map(|a| new_binding(a))
            .collect::<Result<_, _>>()?;
        let mut ptrs: Vec<*mut rd::rd_kafka_AclBinding_t> = filters.iter().map(|b| b.ptr).collect();
        let event = request(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS,
            timeout,
            &what,
            |options, queue| {
                rd::rd_kafka_DeleteAcls(rk, ptrs.as_mut_ptr(), ptrs.len(), options, queue)
            },
        )?;
        let result = rd::rd_kafka_event_DeleteAcls_result(event.ptr);
        if result.is_null() {
            return Err(format!("{what}: unexpected event type"));
        }
        let mut count = 0usize;
        let res = rd::rd_kafka_DeleteAcls_result_responses(result, &mut count);
        let res: &[*const rd::rd_kafka_DeleteAcls_result_response_t] =
            if res.is_null() || count == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(res, count)
            };
        Ok(acls
            .iter()
            .enumerate()
            .map(|(i, a)| match res.get(i) {
                Some(r) => match error_text(rd::rd_kafka_DeleteAcls_result_response_error(*r)) {
                    None => Ok(()),
                    Some(e) => Err(format!("delete ACL {a}: {e}")),
                },
                None => Err(format!("delete ACL {a}: missing from the answer")),
            })
            .collect())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
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
        assert!(e.starts_with("describe topic ACLs"), "{e}");
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
