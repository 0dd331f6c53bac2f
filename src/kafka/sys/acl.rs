//! librdkafka's DescribeAcls / CreateAcls / DeleteAcls on topic resources (rust-rdkafka
//! wraps none of them). The bindings and the sync's plan are `kafka::acl`.

use std::ffi::{c_char, CString};
use std::time::Duration;

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;

use super::handle::{array, buf_text, error_of, request, text, Handle};
use crate::kafka::acl::{Operation, PatternType, Permission, TopicAcl};
use crate::kafka::error::Error;

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

fn cstring(what: &'static str, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|e| Error::nul(what, s, e))
}

/// A binding for `acl` (also usable as a filter matching only it: same type).
fn new_binding(acl: &TopicAcl) -> Result<Handle<rd::rd_kafka_AclBinding_t>, Error> {
    let name = cstring("topic", &acl.name)?;
    let principal = cstring("principal", &acl.principal)?;
    let host = cstring("host", &acl.host)?;
    let mut errbuf = [0 as c_char; 256];
    // SAFETY: NUL-terminated strings that librdkafka copies, and a writable error buffer of
    // the length given; the binding is ours to destroy.
    let binding = unsafe {
        Handle::new(
            rd::rd_kafka_AclBinding_new(
                rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC,
                name.as_ptr(),
                pattern_to_rd(acl.pattern),
                principal.as_ptr(),
                host.as_ptr(),
                op_to_rd(acl.operation),
                perm_to_rd(acl.permission),
                errbuf.as_mut_ptr(),
                errbuf.len(),
            ),
            rd::rd_kafka_AclBinding_destroy,
        )
    };
    if binding.is_null() {
        return Err(Error::Client(buf_text(&errbuf)).context(format!("ACL {acl}")));
    }
    Ok(binding)
}

/// Blocking: every ACL binding on topic resources (literal and prefixed) of `admin`'s
/// cluster.
pub fn describe_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    timeout: Duration,
) -> Result<Vec<TopicAcl>, Error> {
    let what = "describe topic ACLs";
    let rk = admin.inner().native_ptr();
    let mut errbuf = [0 as c_char; 256];
    // SAFETY: null strings mean "any" for a filter; a writable error buffer of the length
    // given; the filter is ours to destroy (a filter is a binding).
    let filter = unsafe {
        Handle::new(
            rd::rd_kafka_AclBindingFilter_new(
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
            rd::rd_kafka_AclBinding_destroy,
        )
    };
    if filter.is_null() {
        return Err(Error::Client(buf_text(&errbuf)).context(what));
    }
    // SAFETY: `rk` is borrowed from `admin` for the call; the filter lives across it.
    let event = unsafe {
        request(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS,
            timeout,
            what,
            |options, queue| rd::rd_kafka_DescribeAcls(rk, filter.ptr(), options, queue),
        )?
    };
    // SAFETY: the result and its bindings belong to `event`, alive until the end of this
    // function; everything is copied out.
    unsafe {
        let result = rd::rd_kafka_event_DescribeAcls_result(event.ptr());
        if result.is_null() {
            return Err(Error::Protocol("unexpected event type".into()).context(what));
        }
        let mut count = 0usize;
        let acls = array(
            rd::rd_kafka_DescribeAcls_result_acls(result, &mut count),
            count,
        );
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

/// How one ACL write (CreateAcls, DeleteAcls) is asked and answered: the bindings go in
/// (a binding filter is the same type as a binding) and the answer holds one error per
/// binding, in order.
struct AclWrite<E> {
    verb: &'static str,
    op: rd::rd_kafka_admin_op_t,
    submit: unsafe extern "C" fn(
        *mut rd::rd_kafka_t,
        *mut *mut rd::rd_kafka_AclBinding_t,
        usize,
        *const rd::rd_kafka_AdminOptions_t,
        *mut rd::rd_kafka_queue_t,
    ),
    result: unsafe extern "C" fn(*mut rd::rd_kafka_event_t) -> *const rd::rd_kafka_event_t,
    entries: unsafe extern "C" fn(*const rd::rd_kafka_event_t, *mut usize) -> *mut *const E,
    error: unsafe extern "C" fn(*const E) -> *const rd::rd_kafka_error_t,
}

/// Blocking: creates `acls` on `admin`'s cluster; one result per binding, in order.
pub fn create_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    acls: &[TopicAcl],
    timeout: Duration,
) -> Result<Vec<Result<(), Error>>, Error> {
    let write = AclWrite {
        verb: "create",
        op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS,
        submit: rd::rd_kafka_CreateAcls,
        result: rd::rd_kafka_event_CreateAcls_result,
        entries: rd::rd_kafka_CreateAcls_result_acls,
        error: rd::rd_kafka_acl_result_error,
    };
    write_topic_acls(admin, acls, timeout, &write)
}

/// Blocking: deletes exactly `acls` (each as a filter matching only itself); one result per
/// binding, in order.
pub fn delete_topic_acls<C: ClientContext>(
    admin: &AdminClient<C>,
    acls: &[TopicAcl],
    timeout: Duration,
) -> Result<Vec<Result<(), Error>>, Error> {
    let write = AclWrite {
        verb: "delete",
        op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS,
        submit: rd::rd_kafka_DeleteAcls,
        result: rd::rd_kafka_event_DeleteAcls_result,
        entries: rd::rd_kafka_DeleteAcls_result_responses,
        error: rd::rd_kafka_DeleteAcls_result_response_error,
    };
    write_topic_acls(admin, acls, timeout, &write)
}

fn write_topic_acls<C: ClientContext, E>(
    admin: &AdminClient<C>,
    acls: &[TopicAcl],
    timeout: Duration,
    write: &AclWrite<E>,
) -> Result<Vec<Result<(), Error>>, Error> {
    if acls.is_empty() {
        return Ok(Vec::new());
    }
    let verb = write.verb;
    let what = format!("{verb} {} topic ACL(s)", acls.len());
    let rk = admin.inner().native_ptr();
    let bindings: Vec<Handle<rd::rd_kafka_AclBinding_t>> =
        acls.iter().map(new_binding).collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*mut rd::rd_kafka_AclBinding_t> = bindings.iter().map(Handle::ptr).collect();
    // SAFETY: `rk` is borrowed from `admin` for the call; the bindings live across it
    // (CreateAcls and DeleteAcls copy them).
    let event = unsafe {
        request(rk, write.op, timeout, &what, |options, queue| {
            (write.submit)(rk, ptrs.as_mut_ptr(), ptrs.len(), options, queue)
        })?
    };
    // SAFETY: the result and its entries belong to `event`, alive until the end of this
    // function; the errors are copied out.
    unsafe {
        let result = (write.result)(event.ptr());
        if result.is_null() {
            return Err(Error::Protocol("unexpected event type".into()).context(what));
        }
        let mut count = 0usize;
        let res = array((write.entries)(result, &mut count), count);
        Ok(acls
            .iter()
            .enumerate()
            .map(|(i, a)| match res.get(i) {
                Some(r) => match error_of((write.error)(*r)) {
                    None => Ok(()),
                    Some(e) => Err(e.context(format!("{verb} ACL {a}"))),
                },
                None => Err(Error::Protocol("missing from the answer".into())
                    .context(format!("{verb} ACL {a}"))),
            })
            .collect())
    }
}
