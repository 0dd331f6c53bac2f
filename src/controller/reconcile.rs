//! The thin API edge: read what exists, call the pure builders and folds, server-side apply
//! the results, publish events.
//!
//! Deletion: children carry controller owner references, so the garbage collector deletes
//! them with the flow and no finalizer is needed. A flow that is being deleted is left
//! alone: no child is created or updated and no status is written.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    validate_checkpoint, validate_flow, MirrorFlow, MirrorFlowStatus, OffsetCheckpoint,
    OffsetCheckpointStatus, ValidationErrors, GROUP, VERSION,
};

use super::build::{
    build_children, check_flow_name, checkpoints_of, observe_workers, plan_scale, selector_string,
    worker_name, BuildSettings, FIELD_MANAGER,
};
use super::error::{Error, ErrorCategory};
use super::metrics::{Metrics, CHECKPOINT, FLOW};
use super::status::{
    checkpoint_events, flow_events, fold_checkpoint_status, fold_flow_status,
    CheckpointObservation, CheckpointReports, EventSeverity, FlowObservation, FlowRefState,
    StatefulSetView, StatusEvent, DEFAULT_STALE_AFTER, INVALID_SPEC,
};

/// Requeue of a healthy flow: as often as a worker may go stale, since a dead worker stops
/// triggering reconciles.
pub const REQUEUE_STEADY: Duration = Duration::from_secs(30);
/// Requeue while old workers drain before a resize.
pub const REQUEUE_DRAINING: Duration = Duration::from_secs(5);
/// Requeue of an invalid spec: a fix is a spec change, which triggers a reconcile anyway.
pub const REQUEUE_INVALID: Duration = Duration::from_secs(300);
/// Requeue of an OffsetCheckpoint (missing flow included; a new flow also triggers it).
pub const REQUEUE_CHECKPOINT: Duration = Duration::from_secs(60);
/// Requeue after an error.
pub const REQUEUE_ERROR: Duration = Duration::from_secs(15);

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub settings: BuildSettings,
    /// Worker entries older than this are not ready.
    pub stale_after: SignedDuration,
}

impl Context {
    /// A context publishing events as `reporter`.
    pub fn new(
        client: Client,
        settings: BuildSettings,
        metrics: Metrics,
        reporter: Reporter,
    ) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics,
            settings,
            stale_after: DEFAULT_STALE_AFTER,
        }
    }
}

/// The reporter for events: the controller name and, when set, the pod name.
pub fn reporter() -> Reporter {
    Reporter {
        controller: FIELD_MANAGER.into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

fn kube_err<'a>(
    action: &'static str,
    kind: &'static str,
    ns: &'a str,
    name: &'a str,
) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Kube {
        action,
        kind,
        namespace: ns.into(),
        name: name.into(),
        source: Box::new(source),
    }
}

fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

async fn apply<K>(client: &Client, ns: &str, kind: &'static str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    Api::<K>::namespaced(client.clone(), ns)
        .patch(&name, &ssa(), &Patch::Apply(obj))
        .await
        .map_err(kube_err("apply", kind, ns, &name))
}

/// The status as an apply patch: only the fields the controller owns (the workers' entries
/// belong to the workers' field managers).
fn status_patch(kind: &str, status: &impl Serialize) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(status).map_err(|source| Error::Serialize {
        what: "status",
        source,
    })?;
    if let Some(o) = v.as_object_mut() {
        o.remove("workers");
    }
    Ok(serde_json::json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": kind,
        "status": v,
    }))
}

async fn publish(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    events: Vec<StatusEvent>,
) {
    for ev in events {
        let e = Event {
            type_: match ev.severity {
                EventSeverity::Normal => EventType::Normal,
                EventSeverity::Warning => EventType::Warning,
            },
            reason: ev.reason.as_str().into(),
            note: Some(truncate(&ev.note, 1000)),
            action: "Reconcile".into(),
            secondary: None,
        };
        // An event that cannot be published must not fail the reconcile.
        if let Err(err) = ctx.recorder.publish(&e, reference).await {
            tracing::warn!(reason = ev.reason.as_str(), error = %err, "could not publish event");
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

async fn write_flow_status(
    ctx: &Context,
    flow: &MirrorFlow,
    ns: &str,
    next: MirrorFlowStatus,
) -> Result<(), Error> {
    let name = flow.name_any();
    ctx.metrics.set_flow_conditions(ns, &name, &next.conditions);
    if flow.status.as_ref() == Some(&next) {
        return Ok(()); // nothing changed: no write, no event, no new watch event
    }
    let patch = status_patch("MirrorFlow", &next)?;
    Api::<MirrorFlow>::namespaced(ctx.client.clone(), ns)
        .patch_status(&name, &ssa(), &Patch::Apply(&patch))
        .await
        .map_err(kube_err("patch status of", "MirrorFlow", ns, &name))?;
    publish(
        ctx,
        &flow.object_ref(&()),
        flow_events(flow.status.as_ref(), &next),
    )
    .await;
    Ok(())
}

/// Reconcile one MirrorFlow: validate, build and apply its children, fold its status.
pub async fn reconcile_flow(flow: Arc<MirrorFlow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(FLOW);
    if flow.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = flow.name_any();
    let ns = flow.namespace().ok_or_else(|| Error::MissingMetadata {
        kind: "MirrorFlow",
        name: name.clone(),
        field: "metadata.namespace",
    })?;
    let now = Timestamp::now();

    let mut errs = validate_flow(&flow.spec).err().unwrap_or_default();
    if let Err(e) = check_flow_name(&name) {
        errs.0.insert(0, e);
    }
    if !errs.0.is_empty() {
        // Leave the children as they are: the workers keep running the last valid spec.
        ctx.metrics.error(FLOW, ErrorCategory::InvalidSpec);
        tracing::info!(flow = %name, namespace = %ns, errors = %errs, "invalid MirrorFlow spec");
        let next = fold_flow_status(&FlowObservation {
            flow: &flow,
            invalid: Some(&errs),
            statefulset: None,
            draining: None,
            now,
            stale_after: ctx.stale_after,
        });
        write_flow_status(&ctx, &flow, &ns, next).await?;
        return Ok(Action::requeue(REQUEUE_INVALID));
    }

    let client = &ctx.client;
    let all_checkpoints = Api::<OffsetCheckpoint>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map_err(kube_err("list", "OffsetCheckpoint", &ns, "*"))?
        .items;
    // Invalid checkpoints stay out of the rendered config (the worker would refuse the file);
    // their own status says why.
    let checkpoints: Vec<&OffsetCheckpoint> = checkpoints_of(&flow, &all_checkpoints)
        .into_iter()
        .filter(|cp| validate_checkpoint(&cp.spec).is_ok())
        .collect();

    let sts_name = worker_name(&name);
    let existing = Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .get_opt(&sts_name)
        .await
        .map_err(kube_err("get", "StatefulSet", &ns, &sts_name))?;
    let observed = match &existing {
        None => None,
        Some(sts) => {
            let pods = Api::<Pod>::namespaced(client.clone(), &ns)
                .list_metadata(&ListParams::default().labels(&selector_string(&name)))
                .await
                .map_err(kube_err("list", "Pod", &ns, &sts_name))?
                .items
                .len();
            Some(observe_workers(sts, pods))
        }
    };
    let plan = plan_scale(flow.spec.workers.replicas, observed);
    if let Some((from, to)) = plan.draining {
        tracing::info!(flow = %name, namespace = %ns, from, to, "resizing: draining the old workers first");
    }

    let children = build_children(&flow, &checkpoints, &ctx.settings, plan).ok_or_else(|| {
        Error::MissingMetadata {
            kind: "MirrorFlow",
            name: name.clone(),
            field: "metadata.uid",
        }
    })?;
    // Config and RBAC before the pods that use them.
    apply::<ConfigMap>(client, &ns, "ConfigMap", &children.config_map).await?;
    apply::<ServiceAccount>(client, &ns, "ServiceAccount", &children.service_account).await?;
    apply::<Role>(client, &ns, "Role", &children.role).await?;
    apply::<RoleBinding>(client, &ns, "RoleBinding", &children.role_binding).await?;
    apply::<Service>(client, &ns, "Service", &children.service).await?;
    let sts = apply::<StatefulSet>(client, &ns, "StatefulSet", &children.stateful_set).await?;

    let view = StatefulSetView::of(&sts);
    let next = fold_flow_status(&FlowObservation {
        flow: &flow,
        invalid: None,
        statefulset: Some(&view),
        draining: plan.draining,
        now,
        stale_after: ctx.stale_after,
    });
    write_flow_status(&ctx, &flow, &ns, next).await?;
    Ok(Action::requeue(if plan.draining.is_some() {
        REQUEUE_DRAINING
    } else {
        REQUEUE_STEADY
    }))
}

/// Reconcile one OffsetCheckpoint: check its flowRef and spec, fold its status. Its settings
/// reach the workers through the flow's rendered ConfigMap (the flow reconcile).
pub async fn reconcile_checkpoint(
    cp: Arc<OffsetCheckpoint>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(CHECKPOINT);
    if cp.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = cp.name_any();
    let ns = cp.namespace().ok_or_else(|| Error::MissingMetadata {
        kind: "OffsetCheckpoint",
        name: name.clone(),
        field: "metadata.namespace",
    })?;
    let invalid: Option<ValidationErrors> = validate_checkpoint(&cp.spec).err();
    let mut reports: Option<CheckpointReports> = None;
    let flow_state = if invalid.is_some() {
        // The flowRef itself may be what is invalid; do not look it up.
        FlowRefState::Found { invalid: false }
    } else {
        let flow_name = &cp.spec.flow_ref.name;
        match Api::<MirrorFlow>::namespaced(ctx.client.clone(), &ns)
            .get_opt(flow_name)
            .await
            .map_err(kube_err("get", "MirrorFlow", &ns, flow_name))?
        {
            None => FlowRefState::NotFound,
            Some(f) => {
                reports = checkpoint_reports(&f, &name);
                FlowRefState::Found {
                    invalid: f
                        .status
                        .iter()
                        .flat_map(|s| &s.conditions)
                        .any(|c| c.type_ == INVALID_SPEC && c.status == "True"),
                }
            }
        }
    };
    if invalid.is_some() {
        ctx.metrics.error(CHECKPOINT, ErrorCategory::InvalidSpec);
    } else if flow_state == FlowRefState::NotFound {
        ctx.metrics.error(CHECKPOINT, ErrorCategory::FlowNotFound);
    }
    let next: OffsetCheckpointStatus = fold_checkpoint_status(&CheckpointObservation {
        checkpoint: &cp,
        flow: flow_state,
        invalid: invalid.as_ref(),
        reports: reports.as_ref(),
        now: Timestamp::now(),
    });
    if cp.status.as_ref() != Some(&next) {
        let patch = status_patch("OffsetCheckpoint", &next)?;
        Api::<OffsetCheckpoint>::namespaced(ctx.client.clone(), &ns)
            .patch_status(&name, &ssa(), &Patch::Apply(&patch))
            .await
            .map_err(kube_err("patch status of", "OffsetCheckpoint", &ns, &name))?;
        publish(
            &ctx,
            &cp.object_ref(&()),
            checkpoint_events(cp.status.as_ref(), &next),
        )
        .await;
    }
    Ok(Action::requeue(if invalid.is_some() {
        REQUEUE_INVALID
    } else {
        REQUEUE_CHECKPOINT
    }))
}

/// Error policy of both controllers: count by category, log, retry later.
pub fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    err: &Error,
    ctx: Arc<Context>,
) -> Action {
    let resource = if K::kind(&()) == "OffsetCheckpoint" {
        CHECKPOINT
    } else {
        FLOW
    };
    ctx.metrics.error(resource, err.category());
    tracing::warn!(
        kind = %K::kind(&()),
        name = %obj.meta().name.as_deref().unwrap_or_default(),
        category = err.category().as_str(),
        error = %err,
        "reconcile failed"
    );
    Action::requeue(REQUEUE_ERROR)
}

/// Gather what the flow's workers reported about one OffsetCheckpoint (`None`: nobody did).
fn checkpoint_reports(flow: &MirrorFlow, checkpoint: &str) -> Option<CheckpointReports> {
    let mut out: Option<CheckpointReports> = None;
    for w in flow.status.iter().flat_map(|s| &s.workers) {
        for r in w.checkpoints.iter().filter(|r| r.name == checkpoint) {
            let acc = out.get_or_insert_with(|| CheckpointReports {
                groups: vec![],
                failures: vec![],
            });
            acc.groups.extend(r.groups.iter().cloned());
            acc.failures.extend(r.failures.iter().cloned());
        }
    }
    out
}
