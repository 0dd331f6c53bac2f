//! The thin API edge: read what exists (from the watch caches), call the pure builders and
//! folds, server-side apply what would change, publish events.
//!
//! What it costs at steady state: nothing. A flow is reconciled when its spec (generation)
//! or a worker's state changes (the watch's predicate ignores heartbeats and lag), when one
//! of its children changes, and once just after a worker entry would go stale; each child is
//! compared with its cached live copy and applied only when that would change it
//! ([`super::diff`]); the status is written only when it changes.
//!
//! Blast radius: a child whose name is taken by an object this flow does not control is
//! never taken over: Ready says so (ChildConflict) and an Event too. Any apply the API server
//! refuses is Ready=False (ApplyFailed) with its message, and an Event.
//!
//! Deletion: children carry controller owner references, so the garbage collector deletes
//! them with the flow and no finalizer is needed. A flow that is being deleted is left
//! alone: no child is created or updated and no status is written.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::{
    validate_checkpoint, validate_flow, MirrorFlow, MirrorFlowStatus, OffsetCheckpoint,
    OffsetCheckpointStatus, ValidationErrors, GROUP, VERSION,
};

use super::build::{
    build_children, check_flow_name, check_worker_image, checkpoints_of, observe_workers,
    plan_scale, selector_string, worker_name, BuildSettings, Children, ObservedWorkers,
    FIELD_MANAGER,
};
use super::diff::{applied_hash, unchanged, APPLIED_HASH_ANNOTATION};
use super::error::{Error, ErrorCategory};
use super::events::{checkpoint_events, flow_events, EventSeverity, StatusEvent};
use super::leader::Leadership;
use super::memo::Memo;
use super::metrics::{Metrics, CHECKPOINT, FLOW};
use super::overlap::{first_collision, FlowEntry};
use crate::api::status::{
    fold_changes_at, fold_checkpoint_status, fold_flow_status, material, CheckpointObservation,
    CheckpointReports, ChildProblem, FlowObservation, FlowRefState, StatefulSetView, APPLY_FAILED,
    CHILD_CONFLICT, DEFAULT_STALE_AFTER, INVALID_SPEC, TARGET_OVERLAP,
};

/// Longest wait before a steady flow is looked at again (a safety net: every change that
/// matters triggers a reconcile, and staleness has its own timer).
pub const REQUEUE_STEADY: Duration = Duration::from_secs(300);
/// Shortest staleness timer.
pub const REQUEUE_MIN: Duration = Duration::from_secs(2);
/// Requeue while old workers drain before a resize.
pub const REQUEUE_DRAINING: Duration = Duration::from_secs(5);
/// Requeue of an invalid spec: a fix is a spec change, which triggers a reconcile anyway.
pub const REQUEUE_INVALID: Duration = Duration::from_secs(300);
/// Requeue of an OffsetCheckpoint (missing flow included; a new flow also triggers it).
pub const REQUEUE_CHECKPOINT: Duration = Duration::from_secs(60);
/// Requeue after an error.
pub const REQUEUE_ERROR: Duration = Duration::from_secs(15);
/// Requeue of a flow refused for sharing a target topic with an earlier flow: a change of
/// the other flow (deleted, narrowed) triggers nothing on this one, so look again this often.
pub const REQUEUE_OVERLAP: Duration = Duration::from_secs(30);

/// The watch caches the reconcilers read instead of asking the API server. An empty store
/// (not synced yet, or in tests) falls back to a GET or LIST.
#[derive(Clone)]
pub struct Stores {
    pub flows: Store<MirrorFlow>,
    /// The flow caches of every watched scope (one per `--namespace`; empty: just `flows`),
    /// for the checks across flows ([`super::overlap`]).
    pub all_flows: Vec<Store<MirrorFlow>>,
    pub checkpoints: Store<OffsetCheckpoint>,
    pub config_maps: Store<ConfigMap>,
    pub service_accounts: Store<ServiceAccount>,
    pub roles: Store<Role>,
    pub role_bindings: Store<RoleBinding>,
    pub services: Store<Service>,
    pub stateful_sets: Store<StatefulSet>,
    pub disruption_budgets: Store<PodDisruptionBudget>,
}

impl Default for Stores {
    /// Empty stores that never fill: every read goes to the API.
    fn default() -> Self {
        Self {
            flows: reflector::store().0,
            all_flows: Vec::new(),
            checkpoints: reflector::store().0,
            config_maps: reflector::store().0,
            service_accounts: reflector::store().0,
            roles: reflector::store().0,
            role_bindings: reflector::store().0,
            services: reflector::store().0,
            stateful_sets: reflector::store().0,
            disruption_budgets: reflector::store().0,
        }
    }
}

impl Stores {
    /// Stores holding `objects` (JSON of any of the cached kinds), synced: for tests of the
    /// reconcilers without watches.
    pub fn with_objects(objects: &[serde_json::Value]) -> Self {
        fn fill<K>(objects: &[serde_json::Value]) -> Store<K>
        where
            K: Resource<DynamicType = ()> + DeserializeOwned + Clone + 'static,
        {
            let (store, mut writer) = reflector::store::<K>();
            writer.apply_watcher_event(&watcher::Event::Init);
            for o in objects
                .iter()
                .filter(|o| o["kind"] == K::kind(&()).as_ref())
            {
                let obj: K = serde_json::from_value(o.clone()).expect("a cached object");
                writer.apply_watcher_event(&watcher::Event::InitApply(obj));
            }
            writer.apply_watcher_event(&watcher::Event::InitDone);
            store
        }
        let flows = fill(objects);
        Self {
            all_flows: vec![flows.clone()],
            flows,
            checkpoints: fill(objects),
            config_maps: fill(objects),
            service_accounts: fill(objects),
            roles: fill(objects),
            role_bindings: fill(objects),
            services: fill(objects),
            stateful_sets: fill(objects),
            disruption_budgets: fill(objects),
        }
    }
}

/// Shared state of the reconcilers.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub metrics: Metrics,
    pub settings: BuildSettings,
    /// Worker entries older than this are not ready.
    pub stale_after: SignedDuration,
    pub stores: Stores,
    pub leadership: Leadership,
}

impl Context {
    /// A context publishing events as `reporter`, reading through to the API (empty stores),
    /// always the leader.
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
            stores: Stores::default(),
            leadership: Leadership::always(),
        }
    }

    /// The same, reading from `stores`.
    pub fn with_stores(mut self, stores: Stores) -> Self {
        self.stores = stores;
        self
    }

    /// The same, writing only while `leadership` holds.
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.leadership = leadership;
        self
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

/// Status is ours alone (the workers own only their entries), so force is safe.
fn ssa() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
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

/// Reconcile one MirrorFlow: validate, build and apply its children (those that would change),
/// fold its status.
pub async fn reconcile_flow(flow: Arc<MirrorFlow>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(FLOW);
    if !ctx.leadership.holds() {
        // The lease may already belong to another replica; this process is stepping down.
        return Ok(Action::requeue(REQUEUE_ERROR));
    }
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

    let errs = flow_errors(&flow.spec, &name, &ctx.settings);
    if !errs.0.is_empty() {
        return report_invalid(&ctx, &flow, &ns, errs, now).await;
    }
    let uid = flow.uid().ok_or_else(|| Error::MissingMetadata {
        kind: "MirrorFlow",
        name: name.clone(),
        field: "metadata.uid",
    })?;

    // What the children depend on; an API error here is reported like a refused apply.
    let (all_checkpoints, existing, observed) = match observe(&ctx, &flow, &ns, &uid).await {
        Ok(o) => o,
        Err(e) => {
            let problem = ChildProblem {
                reason: APPLY_FAILED,
                message: format!("cannot read what the children need: {e}"),
            };
            return report_problem(&ctx, &flow, &ns, problem, now).await;
        }
    };
    // Invalid checkpoints stay out of the rendered config (the worker would refuse the file);
    // their own status says why.
    let checkpoints: Vec<&OffsetCheckpoint> = checkpoints_of(&flow, &all_checkpoints)
        .into_iter()
        .filter(|cp| validate_checkpoint(&cp.spec).is_ok())
        .collect();
    // A flow that would write a target topic an earlier flow writes runs no worker.
    let overlap_started = std::time::Instant::now();
    let overlap = target_overlap(&ctx, &flow, &ns);
    tracing::debug!(flow = %name, overlap_ms = overlap_started.elapsed().as_millis() as u64, "overlap check");
    let replicas = if overlap.is_some() {
        0
    } else {
        flow.spec.workers.replicas
    };
    let plan = plan_scale(replicas, observed);
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

    let applied = apply_children(&ctx, &ns, &uid, &children, existing).await;
    let (sts, problem) = applied_outcome(applied, overlap);
    if !ctx.leadership.holds() {
        return Ok(Action::requeue(REQUEUE_ERROR));
    }
    if let Some(p) = problem.as_ref().filter(|p| p.reason != TARGET_OVERLAP) {
        ctx.metrics.error(FLOW, ErrorCategory::KubeApi);
        tracing::warn!(flow = %name, namespace = %ns, reason = p.reason, "{}", p.message);
    }
    let view = sts.as_ref().map(StatefulSetView::of);
    let next = fold_flow_status(&FlowObservation {
        flow: &flow,
        invalid: None,
        statefulset: view.as_ref(),
        draining: plan.draining,
        children: problem.as_ref(),
        now,
        stale_after: ctx.stale_after,
    });
    write_flow_status(&ctx, &flow, &ns, next).await?;
    Ok(Action::requeue(requeue_after(
        problem.as_ref(),
        plan.draining.is_some(),
        || next_check(&flow, now, ctx.stale_after),
    )))
}

/// Everything wrong with a flow before anything is built: its spec, its name (it names the
/// children) and its worker image (against the allowlist), the name first.
fn flow_errors(
    spec: &crate::api::MirrorFlowSpec,
    name: &str,
    settings: &BuildSettings,
) -> ValidationErrors {
    let mut errs = validate_flow(spec).err().unwrap_or_default();
    if let Err(e) = check_flow_name(name) {
        errs.0.insert(0, e);
    }
    if let Err(e) = check_worker_image(spec, settings) {
        errs.0.push(e);
    }
    errs
}

/// InvalidSpec with `errs`; the children stay as they are, so the workers keep running the
/// last valid spec.
async fn report_invalid(
    ctx: &Context,
    flow: &MirrorFlow,
    ns: &str,
    errs: ValidationErrors,
    now: Timestamp,
) -> Result<Action, Error> {
    ctx.metrics.error(FLOW, ErrorCategory::InvalidSpec);
    tracing::info!(flow = %flow.name_any(), namespace = %ns, errors = %errs, "invalid MirrorFlow spec");
    let next = fold_flow_status(&FlowObservation {
        flow,
        invalid: Some(&errs),
        statefulset: None,
        draining: None,
        children: None,
        now,
        stale_after: ctx.stale_after,
    });
    write_flow_status(ctx, flow, ns, next).await?;
    Ok(Action::requeue(REQUEUE_INVALID))
}

/// The live StatefulSet and what Ready reports of the children: the apply's problem, else
/// the overlap with an earlier flow (the children are applied, with no worker).
fn applied_outcome(
    applied: Result<StatefulSet, ChildProblem>,
    overlap: Option<String>,
) -> (Option<StatefulSet>, Option<ChildProblem>) {
    match applied {
        Ok(sts) => (
            Some(sts),
            overlap.map(|message| ChildProblem {
                reason: TARGET_OVERLAP,
                message,
            }),
        ),
        Err(p) => (None, Some(p)),
    }
}

/// When to reconcile the flow again: an overlap is looked at again soon (the other flow's
/// change triggers nothing here), an apply problem retried, a drain watched; a steady flow
/// at `steady()` ([`next_check`]).
fn requeue_after(
    problem: Option<&ChildProblem>,
    draining: bool,
    steady: impl FnOnce() -> Duration,
) -> Duration {
    match problem {
        Some(p) if p.reason == TARGET_OVERLAP => REQUEUE_OVERLAP,
        Some(_) => REQUEUE_ERROR,
        None if draining => REQUEUE_DRAINING,
        None => steady(),
    }
}

/// Whether a peer flow's spec is valid, kept by (uid, generation): every reconcile looks at
/// every flow, and compiling their topic patterns again was half the controller's CPU at 100
/// flows (perf); a spec changes only with its generation.
fn peer_valid(f: &MirrorFlow) -> bool {
    static VALID: Memo<(String, i64), bool> = Memo::new(10_000);
    match (&f.metadata.uid, f.metadata.generation) {
        (Some(uid), Some(generation)) => VALID.get_or_compute(&(uid.clone(), generation), || {
            validate_flow(&f.spec).is_ok()
        }),
        _ => validate_flow(&f.spec).is_ok(),
    }
}

/// Ready's message when `flow` would write a target topic that an earlier flow (any watched
/// namespace, from the watch caches) writes; see [`super::overlap`]. Flows being deleted or
/// with an invalid spec run no worker of their own and are not counted.
fn target_overlap(ctx: &Context, flow: &MirrorFlow, ns: &str) -> Option<String> {
    let stores = if ctx.stores.all_flows.is_empty() {
        std::slice::from_ref(&ctx.stores.flows)
    } else {
        ctx.stores.all_flows.as_slice()
    };
    let mut seen = std::collections::BTreeSet::new();
    let peers: Vec<Arc<MirrorFlow>> = stores
        .iter()
        .flat_map(|s| s.state())
        .filter(|f| f.metadata.deletion_timestamp.is_none())
        .filter(|f| seen.insert((f.namespace(), f.name_any())))
        .filter(|f| peer_valid(f))
        .collect();
    let entry = |f: &'_ MirrorFlow| -> Option<(String, String, Option<Timestamp>)> {
        Some((
            f.namespace()?,
            f.name_any(),
            f.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ))
    };
    let metas: Vec<_> = peers.iter().map(|f| entry(f)).collect();
    let others: Vec<FlowEntry<'_>> = peers
        .iter()
        .zip(&metas)
        .filter_map(|(f, m)| {
            let (namespace, name, created) = m.as_ref()?;
            Some(FlowEntry {
                namespace,
                name,
                created: *created,
                spec: &f.spec,
            })
        })
        .collect();
    let name = flow.name_any();
    first_collision(
        &FlowEntry {
            namespace: ns,
            name: &name,
            created: flow.metadata.creation_timestamp.as_ref().map(|t| t.0),
            spec: &flow.spec,
        },
        &others,
    )
}

/// The flow's checkpoints, its StatefulSet, and (while the worker count changes) its pods.
async fn observe(
    ctx: &Context,
    flow: &MirrorFlow,
    ns: &str,
    uid: &str,
) -> Result<
    (
        Vec<OffsetCheckpoint>,
        Option<StatefulSet>,
        Option<ObservedWorkers>,
    ),
    Error,
> {
    let name = flow.name_any();
    let checkpoints = checkpoints_in(ctx, ns).await?;
    let sts_name = worker_name(&name);
    let existing = lookup(ctx, &ctx.stores.stateful_sets, ns, &sts_name, "StatefulSet").await?;
    let observed = match &existing {
        Some(sts) if owns(sts.meta(), uid) => {
            let o = observe_workers(sts, 0);
            let current = o.worker_count.unwrap_or(o.statefulset_replicas);
            // Pods only matter while the worker count changes (drain to zero first).
            let pods = if current == flow.spec.workers.replicas {
                0
            } else {
                Api::<Pod>::namespaced(ctx.client.clone(), ns)
                    .list_metadata(&ListParams::default().labels(&selector_string(&name)))
                    .await
                    .map_err(kube_err("list", "Pod", ns, &sts_name))?
                    .items
                    .len()
            };
            Some(observe_workers(sts, pods))
        }
        _ => None,
    };
    Ok((checkpoints, existing, observed))
}

/// Ready=False with `problem` (and its Event, once), retried after [`REQUEUE_ERROR`].
async fn report_problem(
    ctx: &Context,
    flow: &MirrorFlow,
    ns: &str,
    problem: ChildProblem,
    now: Timestamp,
) -> Result<Action, Error> {
    ctx.metrics.error(FLOW, ErrorCategory::KubeApi);
    tracing::warn!(flow = %flow.name_any(), namespace = %ns, reason = problem.reason, "{}", problem.message);
    let next = fold_flow_status(&FlowObservation {
        flow,
        invalid: None,
        statefulset: None,
        draining: None,
        children: Some(&problem),
        now,
        stale_after: ctx.stale_after,
    });
    write_flow_status(ctx, flow, ns, next).await?;
    Ok(Action::requeue(REQUEUE_ERROR))
}

/// When to look at a steady flow again without a trigger: just after its first fresh worker
/// entry would go stale (a dead worker triggers nothing), within [`REQUEUE_MIN`] and
/// [`REQUEUE_STEADY`].
pub fn next_check(flow: &MirrorFlow, now: Timestamp, stale_after: SignedDuration) -> Duration {
    fold_changes_at(flow, now, stale_after)
        .and_then(|t| Duration::try_from(t.duration_since(now)).ok())
        .map(|d| d + Duration::from_secs(1))
        .unwrap_or(REQUEUE_STEADY)
        .clamp(REQUEUE_MIN, REQUEUE_STEADY)
}

/// The trigger predicate of the flow watch: what a reconcile reacts to. The spec (through
/// `metadata.generation`), deletion, and each worker entry without its heartbeat and lag
/// ([`material`]): a heartbeat alone is no reason to reconcile ([`next_check`] folds
/// staleness, and lag rides along with any reconcile).
pub fn flow_trigger(flow: &MirrorFlow) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let workers: Vec<_> = flow
        .status
        .iter()
        .flat_map(|s| &s.workers)
        .map(material)
        .collect();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    flow.metadata.generation.hash(&mut h);
    flow.metadata.deletion_timestamp.is_some().hash(&mut h);
    serde_json::to_string(&workers)
        .unwrap_or_default()
        .hash(&mut h);
    Some(h.finish())
}

/// Applies the children that would change, config and RBAC before the pods that use them;
/// none at all when one of their names is taken by an object this flow does not control.
/// Returns the live StatefulSet.
async fn apply_children(
    ctx: &Context,
    ns: &str,
    uid: &str,
    c: &Children,
    statefulset: Option<StatefulSet>,
) -> Result<StatefulSet, ChildProblem> {
    let s = &ctx.stores;
    let unreadable = |e: Error| ChildProblem {
        reason: APPLY_FAILED,
        message: e.to_string(),
    };
    macro_rules! live {
        ($store:expr, $desired:expr, $kind:expr) => {
            lookup(ctx, $store, ns, &$desired.name_any(), $kind)
                .await
                .map_err(unreadable)?
        };
    }
    let cm = live!(&s.config_maps, c.config_map, "ConfigMap");
    let sa = live!(&s.service_accounts, c.service_account, "ServiceAccount");
    let role = live!(&s.roles, c.role, "Role");
    let rb = live!(&s.role_bindings, c.role_binding, "RoleBinding");
    let svc = live!(&s.services, c.service, "Service");
    let pdb = live!(
        &s.disruption_budgets,
        c.disruption_budget,
        "PodDisruptionBudget"
    );
    let metas = [
        ("ConfigMap", cm.as_ref().map(|o| o.meta())),
        ("ServiceAccount", sa.as_ref().map(|o| o.meta())),
        ("Role", role.as_ref().map(|o| o.meta())),
        ("RoleBinding", rb.as_ref().map(|o| o.meta())),
        ("Service", svc.as_ref().map(|o| o.meta())),
        ("PodDisruptionBudget", pdb.as_ref().map(|o| o.meta())),
        ("StatefulSet", statefulset.as_ref().map(|o| o.meta())),
    ];
    for (kind, meta) in metas {
        if let Some(m) = meta.filter(|m| !owns(m, uid)) {
            return Err(ChildProblem {
                reason: CHILD_CONFLICT,
                message: foreign_message(kind, m),
            });
        }
    }
    ensure(ctx, ns, "ConfigMap", &c.config_map, cm).await?;
    ensure(ctx, ns, "ServiceAccount", &c.service_account, sa).await?;
    ensure(ctx, ns, "Role", &c.role, role).await?;
    ensure(ctx, ns, "RoleBinding", &c.role_binding, rb).await?;
    ensure(ctx, ns, "Service", &c.service, svc).await?;
    ensure(ctx, ns, "PodDisruptionBudget", &c.disruption_budget, pdb).await?;
    ensure(ctx, ns, "StatefulSet", &c.stateful_set, statefulset).await
}

/// A kind of child the controller applies.
pub trait Child:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Child for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// The live object: from the watch cache, else (not ours, or not cached yet) from the API.
async fn lookup<K: Child>(
    ctx: &Context,
    store: &Store<K>,
    ns: &str,
    name: &str,
    kind: &'static str,
) -> Result<Option<K>, Error> {
    if let Some(obj) = store.get(&ObjectRef::new(name).within(ns)) {
        return Ok(Some((*obj).clone()));
    }
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(kube_err("get", kind, ns, name))
}

/// Whether the object with `meta` is controlled by the flow with `uid`.
pub fn owns(meta: &ObjectMeta, uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Why an existing object is not ours to change.
pub fn foreign_message(kind: &str, meta: &ObjectMeta) -> String {
    let name = meta.name.clone().unwrap_or_default();
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| format!("controlled by {} {} (uid {})", o.kind, o.name, o.uid))
        .unwrap_or_else(|| "not controlled by this MirrorFlow".into());
    format!(
        "{kind} {name} already exists and is {controller}; mirrorflow does not take it over: delete or rename it, or rename the flow"
    )
}

/// Makes an owned (or missing) child look like `desired`: nothing when it already does, an
/// apply otherwise. Returns the live object.
async fn ensure<K: Child>(
    ctx: &Context,
    ns: &str,
    kind: &'static str,
    desired: &K,
    live: Option<K>,
) -> Result<K, ChildProblem> {
    let name = desired.name_any();
    if !ctx.leadership.holds() {
        return Err(ChildProblem {
            reason: APPLY_FAILED,
            message: "this controller is not the leader any more".into(),
        });
    }
    let mut want = serde_json::to_value(desired).map_err(|e| ChildProblem {
        reason: APPLY_FAILED,
        message: format!("{kind} {name}: cannot serialize: {e}"),
    })?;
    // apiVersion and kind, which the typed object leaves out.
    want["apiVersion"] = K::api_version(&()).into();
    want["kind"] = K::kind(&()).into();
    let hash = applied_hash(&want);
    want["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] = hash.into();
    let params = match &live {
        Some(l) => {
            let have = serde_json::to_value(l).unwrap_or_default();
            if unchanged(&want, &have) {
                return Ok(l.clone());
            }
            // Ours: our fields win over anyone who changed them.
            PatchParams::apply(FIELD_MANAGER).force()
        }
        // New: not forced, so an object someone creates meanwhile is not taken over.
        None => PatchParams::apply(FIELD_MANAGER),
    };
    tracing::debug!(kind, name = %name, namespace = ns, "applying");
    Api::<K>::namespaced(ctx.client.clone(), ns)
        .patch(&name, &params, &Patch::Apply(&want))
        .await
        .map_err(|e| ChildProblem {
            reason: APPLY_FAILED,
            message: format!("applying {kind} {name}: {}", api_message(&e)),
        })
}

/// The API server's own words for an error (the Status message names the field).
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// The OffsetCheckpoints of a namespace: from the watch cache once it is filled, else listed.
async fn checkpoints_in(ctx: &Context, ns: &str) -> Result<Vec<OffsetCheckpoint>, Error> {
    let store = &ctx.stores.checkpoints;
    if matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))) {
        return Ok(store
            .state()
            .into_iter()
            .filter(|cp| cp.namespace().as_deref() == Some(ns))
            .map(|cp| (*cp).clone())
            .collect());
    }
    Ok(Api::<OffsetCheckpoint>::namespaced(ctx.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(kube_err("list", "OffsetCheckpoint", ns, "*"))?
        .items)
}

/// Reconcile one OffsetCheckpoint: check its flowRef and spec, fold its status. Its settings
/// reach the workers through the flow's rendered ConfigMap (the flow reconcile).
pub async fn reconcile_checkpoint(
    cp: Arc<OffsetCheckpoint>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(CHECKPOINT);
    if !ctx.leadership.holds() {
        return Ok(Action::requeue(REQUEUE_ERROR));
    }
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
        let cached = ctx
            .stores
            .flows
            .get(&ObjectRef::new(flow_name).within(&ns))
            .map(|f| (*f).clone());
        let flow = match cached {
            Some(f) => Some(f),
            None => Api::<MirrorFlow>::namespaced(ctx.client.clone(), &ns)
                .get_opt(flow_name)
                .await
                .map_err(kube_err("get", "MirrorFlow", &ns, flow_name))?,
        };
        match flow {
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
            let acc = out.get_or_insert_with(CheckpointReports::default);
            acc.groups.extend(r.groups.iter().cloned());
            acc.failures.extend(r.failures.iter().cloned());
            if acc.error.is_none() {
                acc.error.clone_from(&r.error);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problem(reason: &'static str) -> ChildProblem {
        ChildProblem {
            reason,
            message: "m".into(),
        }
    }

    #[test]
    fn requeue_table() {
        let steady = || Duration::from_secs(42);
        let cases = [
            (Some(problem(TARGET_OVERLAP)), true, REQUEUE_OVERLAP),
            (Some(problem(APPLY_FAILED)), true, REQUEUE_ERROR),
            (Some(problem(CHILD_CONFLICT)), false, REQUEUE_ERROR),
            (None, true, REQUEUE_DRAINING),
            (None, false, Duration::from_secs(42)),
        ];
        for (p, draining, want) in cases {
            assert_eq!(
                requeue_after(p.as_ref(), draining, steady),
                want,
                "{p:?} {draining}"
            );
        }
    }

    #[test]
    fn applied_outcome_table() {
        let sts = StatefulSet::default();
        assert_eq!(
            applied_outcome(Ok(sts.clone()), None),
            (Some(sts.clone()), None)
        );
        assert_eq!(
            applied_outcome(Ok(sts.clone()), Some("flow a writes t".into())),
            (
                Some(sts),
                Some(ChildProblem {
                    reason: TARGET_OVERLAP,
                    message: "flow a writes t".into()
                })
            ),
            "applied, but the overlap is what Ready reports"
        );
        assert_eq!(
            applied_outcome(Err(problem(CHILD_CONFLICT)), Some("overlap".into())),
            (None, Some(problem(CHILD_CONFLICT))),
            "an apply problem comes before the overlap"
        );
    }

    #[test]
    fn flow_errors_name_first_then_spec_then_image() {
        let spec: crate::api::MirrorFlowSpec = serde_json::from_value(json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
            "workers": {"replicas": 0, "image": "evil/image:1"}
        }))
        .unwrap();
        let settings = BuildSettings {
            worker_image: "mf:1".into(),
            image_allowlist: vec!["mf:*".into()],
        };
        let fields: Vec<String> = flow_errors(&spec, "Bad_Name", &settings)
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.workers.replicas",
                "spec.workers.image"
            ]
        );
        let open = BuildSettings {
            image_allowlist: vec![],
            ..settings
        };
        let mut ok = spec;
        ok.workers.replicas = 1;
        assert!(flow_errors(&ok, "orders", &open).0.is_empty());
    }
}
