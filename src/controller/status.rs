//! Status folding, as pure functions of (resource, what the workers and the StatefulSet
//! report, now). The workers write their own `status.workers[]` entries; everything else in
//! the status is computed here and written by the controller.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::api::{
    AppliedReset, FailureType, GroupFailure, GroupSummary, MirrorFlow, MirrorFlowStatus,
    OffsetCheckpoint, OffsetCheckpointStatus, PartitionFailure, ReplicationLag, ResetOutcome,
    ResetRequest, TopicPartitionRef, ValidationErrors, WorkerState, WorkerStatus,
};

use super::build::worker_id;
use super::error::ErrorCategory;

/// How often a worker is expected to refresh its `lastHeartbeatTime`.
pub const HEARTBEAT_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
/// A worker entry older than this counts as not ready (3 missed heartbeats).
pub const DEFAULT_STALE_AFTER: SignedDuration = SignedDuration::from_secs(3 * 10);
/// Bound of `status.failures` (the CRD schema's maxItems).
pub const MAX_FAILURES: usize = 100;
/// Bound of `OffsetCheckpointStatus.groups` and `.failures`.
pub const MAX_GROUPS: usize = 50;
/// A checkpoint older than this many intervals is stale.
pub const STALE_INTERVALS: i64 = 3;
/// How many items a condition message lists before "and N more".
const LIST_IN_MESSAGE: usize = 5;

/// Condition types of a MirrorFlow.
pub const READY: &str = "Ready";
pub const REPLICATING: &str = "Replicating";
pub const DATA_LOSS: &str = "DataLoss";
pub const TOPIC_RESET: &str = "TopicReset";
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Extra condition type of an OffsetCheckpoint.
pub const STALE: &str = "Stale";

/// What the controller reads from the worker StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatefulSetView {
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `spec.replicas`.
    pub replicas: i32,
    pub ready_replicas: i32,
    pub updated_replicas: i32,
    pub current_revision: Option<String>,
    pub update_revision: Option<String>,
}

impl StatefulSetView {
    /// Extract the view from a StatefulSet.
    pub fn of(sts: &StatefulSet) -> Self {
        let st = sts.status.clone().unwrap_or_default();
        Self {
            generation: sts.metadata.generation,
            observed_generation: st.observed_generation,
            replicas: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            ready_replicas: st.ready_replicas.unwrap_or(0),
            updated_replicas: st.updated_replicas.unwrap_or(0),
            current_revision: st.current_revision,
            update_revision: st.update_revision,
        }
    }

    /// The StatefulSet has not yet brought every pod to its current template. A StatefulSet
    /// that never reported a revision is being created, not rolled.
    pub fn rollout_in_progress(&self) -> bool {
        if self.current_revision.is_none() {
            return false;
        }
        if self.observed_generation < self.generation {
            return true;
        }
        self.replicas > 0
            && (self.updated_replicas < self.replicas
                || self.current_revision != self.update_revision)
    }
}

/// How one desired worker looks from its status entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerHealth {
    /// No entry yet.
    Missing,
    /// The entry's heartbeat is absent or older than the staleness bound.
    Stale,
    /// A fresh entry in this state.
    Fresh(WorkerState),
}

/// Classify a worker entry: stale entries count as not ready whatever state they claim.
pub fn classify_worker(
    entry: Option<&WorkerStatus>,
    now: Timestamp,
    stale_after: SignedDuration,
) -> WorkerHealth {
    let Some(e) = entry else {
        return WorkerHealth::Missing;
    };
    match &e.last_heartbeat_time {
        Some(t) if now.duration_since(t.0) <= stale_after => WorkerHealth::Fresh(e.state),
        _ => WorkerHealth::Stale,
    }
}

/// Everything the flow status is folded from.
#[derive(Debug, Clone)]
pub struct FlowObservation<'a> {
    /// The flow, including its current status (worker entries and previous conditions).
    pub flow: &'a MirrorFlow,
    /// Validation errors of the spec (and name), if any.
    pub invalid: Option<&'a ValidationErrors>,
    /// The worker StatefulSet, if it exists.
    pub statefulset: Option<&'a StatefulSetView>,
    /// `(from, to)` while old workers drain before a resize.
    pub draining: Option<(i32, i32)>,
    pub now: Timestamp,
    /// Worker entries older than this are not ready.
    pub stale_after: SignedDuration,
}

/// Where a reset request stands.
#[derive(Debug, Clone, PartialEq)]
pub enum ResetProgress {
    /// No request, or the current one was already folded: the last outcome (if any).
    Idle(Option<AppliedReset>),
    /// Some desired workers have not reported the request's id yet.
    InProgress {
        id: String,
        applied: usize,
        desired: usize,
    },
    /// Every desired worker reported the id: the combined outcome.
    Done(AppliedReset),
}

/// Fold the workers' `lastAppliedReset` for the requested reset. Once an id was folded it
/// stays done (a restarted or newly scaled worker does not turn it back into "in progress").
pub fn fold_reset(
    request: Option<&ResetRequest>,
    previous: Option<&AppliedReset>,
    workers: &[(String, Option<&WorkerStatus>)],
) -> ResetProgress {
    let Some(req) = request else {
        return ResetProgress::Idle(previous.cloned());
    };
    if previous.is_some_and(|p| p.id == req.id) {
        return ResetProgress::Idle(previous.cloned());
    }
    let reports: Vec<(&str, &AppliedReset)> = workers
        .iter()
        .filter_map(|(id, e)| {
            e.and_then(|e| e.last_applied_reset.as_ref())
                .filter(|r| r.id == req.id)
                .map(|r| (id.as_str(), r))
        })
        .collect();
    if reports.is_empty() || reports.len() < workers.len() {
        return ResetProgress::InProgress {
            id: req.id.clone(),
            applied: reports.len(),
            desired: workers.len(),
        };
    }
    let has = |o: ResetOutcome| reports.iter().any(|(_, r)| r.outcome == o);
    let outcome = if has(ResetOutcome::Failed) {
        ResetOutcome::Failed
    } else if has(ResetOutcome::Refused) {
        ResetOutcome::Refused
    } else {
        ResetOutcome::Applied
    };
    let time = reports
        .iter()
        .map(|(_, r)| r.time.clone())
        .max()
        .expect("non-empty");
    let partitions: BTreeSet<TopicPartitionRef> = reports
        .iter()
        .flat_map(|(_, r)| r.partitions.clone())
        .collect();
    // The workers that decided the outcome explain it first.
    let mut notes: Vec<String> = reports
        .iter()
        .filter(|(_, r)| r.outcome == outcome)
        .chain(reports.iter().filter(|(_, r)| r.outcome != outcome))
        .filter_map(|(id, r)| r.message.as_ref().map(|m| format!("{id}: {m}")))
        .collect();
    let more = notes.len().saturating_sub(LIST_IN_MESSAGE);
    notes.truncate(LIST_IN_MESSAGE);
    if more > 0 {
        notes.push(format!("and {more} more"));
    }
    ResetProgress::Done(AppliedReset {
        id: req.id.clone(),
        time,
        outcome,
        message: (!notes.is_empty()).then(|| notes.join("; ")),
        partitions: partitions.into_iter().collect(),
    })
}

/// Build a condition, keeping the previous `lastTransitionTime` unless the status changed.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        // The API server stores seconds; keep what we compare with what we read back.
        .unwrap_or_else(|| Time(Timestamp::from_second(now.as_second()).expect("in range")));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

fn bool_str(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn list_some(items: &[String]) -> String {
    let mut out = items
        .iter()
        .take(LIST_IN_MESSAGE)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > LIST_IN_MESSAGE {
        out.push_str(&format!(" and {} more", items.len() - LIST_IN_MESSAGE));
    }
    out
}

fn failure_condition(
    prev: &[Condition],
    failures: &[PartitionFailure],
    type_: FailureType,
    gen: Option<i64>,
    now: Timestamp,
) -> Condition {
    let (ctype, true_reason, false_reason, hint) = match type_ {
        FailureType::DataLoss => (
            DATA_LOSS,
            "RecordsDeleted",
            "NoDataLoss",
            "records were deleted on the source before they were replicated; patch spec.reset (strategy ResumeFromLogStart) to accept the gap",
        ),
        FailureType::TopicReset => (
            TOPIC_RESET,
            "TopicRecreated",
            "NoTopicReset",
            "the source topic was deleted and recreated; patch spec.reset (strategy RestartFromEarliest or SkipToLatest) to resume",
        ),
    };
    let hits: Vec<String> = failures
        .iter()
        .filter(|f| f.type_ == type_)
        .map(|f| format!("{}/{}", f.topic, f.partition))
        .collect();
    if hits.is_empty() {
        condition(prev, ctype, "False", false_reason, String::new(), gen, now)
    } else {
        let msg = format!(
            "{} partition(s) stopped: {}; {hint}",
            hits.len(),
            list_some(&hits)
        );
        condition(prev, ctype, "True", true_reason, msg, gen, now)
    }
}

/// Fold a flow's status. The result keeps the workers' entries unchanged (the controller
/// never writes them), so `Some(result) == flow.status` means "nothing to write".
pub fn fold_flow_status(obs: &FlowObservation<'_>) -> MirrorFlowStatus {
    let flow = obs.flow;
    let prev = flow.status.clone().unwrap_or_default();
    let gen = flow.metadata.generation;
    let now = obs.now;
    let name = flow.name_any();
    let desired = flow.spec.workers.replicas.max(0);
    let paused = flow.spec.paused;
    let expected = if paused {
        WorkerState::Paused
    } else {
        WorkerState::Running
    };

    // Only the desired ids count: entries left by workers that were scaled away are history.
    let by_id: BTreeMap<&str, &WorkerStatus> =
        prev.workers.iter().map(|w| (w.id.as_str(), w)).collect();
    let workers: Vec<(String, Option<&WorkerStatus>)> = (0..desired)
        .map(|i| {
            let id = worker_id(&name, i);
            let e = by_id.get(id.as_str()).copied();
            (id, e)
        })
        .collect();
    let health: Vec<(&str, WorkerHealth)> = workers
        .iter()
        .map(|(id, e)| (id.as_str(), classify_worker(*e, now, obs.stale_after)))
        .collect();

    // Failures persist until reset, so a stale entry's failures still count.
    let mut by_partition: BTreeMap<(String, i32), PartitionFailure> = BTreeMap::new();
    for f in workers
        .iter()
        .filter_map(|(_, e)| *e)
        .flat_map(|e| e.failures.iter())
    {
        by_partition
            .entry((f.topic.clone(), f.partition))
            .or_insert_with(|| f.clone());
    }
    let failed_partitions = by_partition.len() as i32;
    let all_failures: Vec<PartitionFailure> = by_partition.into_values().collect();
    let failures: Vec<PartitionFailure> = all_failures.iter().take(MAX_FAILURES).cloned().collect();

    let lags: Vec<&ReplicationLag> = workers
        .iter()
        .filter_map(|(_, e)| e.and_then(|e| e.replication_lag.as_ref()))
        .collect();
    let replication_lag = (!lags.is_empty()).then(|| ReplicationLag {
        records: lags.iter().map(|l| l.records).sum(),
        seconds: lags.iter().map(|l| l.seconds).max().unwrap_or(0),
    });

    let reset = fold_reset(
        flow.spec.reset.as_ref(),
        prev.last_applied_reset.as_ref(),
        &workers,
    );
    let last_applied_reset = match &reset {
        ResetProgress::Idle(r) => r.clone(),
        ResetProgress::InProgress { .. } => prev.last_applied_reset.clone(),
        ResetProgress::Done(r) => Some(r.clone()),
    };

    let ready_workers = health
        .iter()
        .filter(|(_, h)| *h == WorkerHealth::Fresh(expected))
        .count();
    let replicating = health
        .iter()
        .filter(|(_, h)| {
            matches!(
                h,
                WorkerHealth::Fresh(WorkerState::Running | WorkerState::Degraded)
            )
        })
        .count();
    let failed_workers: Vec<String> = workers
        .iter()
        .zip(&health)
        .filter(|(_, (_, h))| *h == WorkerHealth::Fresh(WorkerState::Failed))
        .map(|((id, e), _)| match e.and_then(|e| e.message.as_deref()) {
            Some(m) => format!("{id}: {m}"),
            None => id.clone(),
        })
        .collect();
    let not_ready: Vec<String> = health
        .iter()
        .filter_map(|(id, h)| match h {
            WorkerHealth::Missing => Some(format!("{id}: no status yet")),
            WorkerHealth::Stale => Some(format!(
                "{id}: no heartbeat for more than {}s",
                obs.stale_after.as_secs()
            )),
            WorkerHealth::Fresh(s) if *s != expected => Some(format!("{id}: {s:?}")),
            WorkerHealth::Fresh(_) => None,
        })
        .collect();
    // "Starting" while every worker that is not ready simply has not come up yet.
    let only_starting = health.iter().all(|(_, h)| match h {
        WorkerHealth::Missing | WorkerHealth::Fresh(WorkerState::Starting) => true,
        WorkerHealth::Fresh(s) => *s == expected,
        WorkerHealth::Stale => false,
    });
    let summary = format!("{ready_workers}/{desired} workers ready");

    let pc = &prev.conditions;
    let (ready, reason, message) = if let Some(errs) = obs.invalid {
        (false, "InvalidSpec", errs.to_string())
    } else if let ResetProgress::InProgress {
        id,
        applied,
        desired,
    } = &reset
    {
        (
            false,
            "ResetInProgress",
            format!("reset {id:?}: {applied}/{desired} workers applied it"),
        )
    } else if failed_partitions > 0 {
        (
            false,
            "PartitionsFailed",
            format!("{failed_partitions} partition(s) stopped by DataLoss or TopicReset; see status.failures and patch spec.reset to clear them"),
        )
    } else if !failed_workers.is_empty() {
        (false, "WorkerFailed", list_some(&failed_workers))
    } else if let Some((from, to)) = obs.draining {
        (
            false,
            "Scaling",
            format!(
                "scaling from {from} to {to} workers: waiting until every old worker has stopped"
            ),
        )
    } else if obs
        .statefulset
        .is_some_and(StatefulSetView::rollout_in_progress)
    {
        let s = obs.statefulset.expect("checked");
        (
            false,
            "RollingUpdate",
            format!(
                "{}/{} worker pods updated to the current spec",
                s.updated_replicas, s.replicas
            ),
        )
    } else if !not_ready.is_empty() {
        let reason = if only_starting {
            "WorkersStarting"
        } else {
            "WorkersNotReady"
        };
        (
            false,
            reason,
            format!("{summary}; {}", list_some(&not_ready)),
        )
    } else if let Some(s) = obs.statefulset.filter(|s| s.ready_replicas < desired) {
        (
            false,
            "WorkersNotReady",
            format!(
                "{}/{desired} worker pods pass their readiness probe",
                s.ready_replicas
            ),
        )
    } else if desired > 0 && obs.statefulset.is_none() {
        (
            false,
            "WorkersStarting",
            "the worker StatefulSet does not exist yet".to_string(),
        )
    } else if paused {
        (
            true,
            "Paused",
            format!("{summary}; replication paused by spec.paused"),
        )
    } else {
        (true, "AllWorkersRunning", summary.clone())
    };

    let (rep_status, rep_reason, rep_message) = if replicating == 0 {
        if paused {
            (
                false,
                "Paused",
                "replication paused by spec.paused".to_string(),
            )
        } else {
            (
                false,
                "NoWorkerReplicating",
                format!("0/{desired} workers replicating"),
            )
        }
    } else if paused {
        (
            true,
            "Pausing",
            format!("{replicating}/{desired} workers still replicating; pause requested"),
        )
    } else if replicating as i32 == desired && failed_partitions == 0 {
        (
            true,
            "Replicating",
            format!("{replicating}/{desired} workers replicating"),
        )
    } else {
        (
            true,
            "PartiallyReplicating",
            format!("{replicating}/{desired} workers replicating; {failed_partitions} partition(s) stopped"),
        )
    };

    let conditions = vec![
        condition(pc, READY, bool_str(ready), reason, message, gen, now),
        condition(
            pc,
            REPLICATING,
            bool_str(rep_status),
            rep_reason,
            rep_message,
            gen,
            now,
        ),
        failure_condition(pc, &all_failures, FailureType::DataLoss, gen, now),
        failure_condition(pc, &all_failures, FailureType::TopicReset, gen, now),
        match obs.invalid {
            Some(errs) => condition(
                pc,
                INVALID_SPEC,
                "True",
                "ValidationFailed",
                errs.to_string(),
                gen,
                now,
            ),
            None => condition(pc, INVALID_SPEC, "False", "Valid", String::new(), gen, now),
        },
    ];

    MirrorFlowStatus {
        observed_generation: gen,
        conditions,
        workers: prev.workers,
        workers_summary: Some(format!("{ready_workers}/{desired}")),
        failed_partitions,
        failures,
        last_applied_reset,
        replication_lag,
    }
}

/// Checkpoint data the workers report for one OffsetCheckpoint. `WorkerStatus` carries no
/// such field yet; the reconciler passes `None` until it does, and the fold says so.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckpointReports {
    pub groups: Vec<GroupSummary>,
    pub failures: Vec<GroupFailure>,
}

/// What the controller knows about the flow an OffsetCheckpoint references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowRefState {
    /// The flow exists; `invalid` when its InvalidSpec condition is True.
    Found { invalid: bool },
    /// No MirrorFlow of that name in the namespace.
    NotFound,
}

/// Everything an OffsetCheckpoint status is folded from.
#[derive(Debug, Clone)]
pub struct CheckpointObservation<'a> {
    pub checkpoint: &'a OffsetCheckpoint,
    pub flow: FlowRefState,
    pub invalid: Option<&'a ValidationErrors>,
    /// `None`: no worker reported data for this checkpoint.
    pub reports: Option<&'a CheckpointReports>,
    pub now: Timestamp,
}

/// Fold an OffsetCheckpoint's status: `Ready`, `Stale` (a group's newest checkpoint is older
/// than [`STALE_INTERVALS`] × `intervalSeconds`) and the group summaries.
pub fn fold_checkpoint_status(obs: &CheckpointObservation<'_>) -> OffsetCheckpointStatus {
    let cp = obs.checkpoint;
    let prev = cp.status.clone().unwrap_or_default();
    let pc = &prev.conditions;
    let gen = cp.metadata.generation;
    let now = obs.now;
    let flow_name = &cp.spec.flow_ref.name;
    let stale_after =
        SignedDuration::from_secs(STALE_INTERVALS * i64::from(cp.spec.interval_seconds.max(1)));

    let blocked: Option<(&str, String)> = if let Some(errs) = obs.invalid {
        Some(("InvalidSpec", errs.to_string()))
    } else if obs.flow == FlowRefState::NotFound {
        Some((
            "FlowNotFound",
            format!(
                "MirrorFlow {flow_name:?} (spec.flowRef.name) not found in namespace {:?}",
                cp.namespace().unwrap_or_default()
            ),
        ))
    } else if obs.flow == (FlowRefState::Found { invalid: true }) {
        Some((
            "FlowInvalid",
            format!("MirrorFlow {flow_name:?} has an invalid spec (see its InvalidSpec condition)"),
        ))
    } else if obs.reports.is_none() {
        Some((
            "AwaitingCheckpoints",
            "no worker has reported checkpoints for this OffsetCheckpoint yet".into(),
        ))
    } else {
        None
    };
    if let Some((reason, message)) = blocked {
        return OffsetCheckpointStatus {
            observed_generation: gen,
            conditions: vec![
                condition(pc, READY, "False", reason, message, gen, now),
                condition(pc, STALE, "Unknown", reason, String::new(), gen, now),
            ],
            ..Default::default()
        };
    }
    let reports = obs.reports.expect("checked above");

    let times: Vec<Timestamp> = reports
        .groups
        .iter()
        .filter_map(|g| g.last_checkpoint_time.as_ref().map(|t| t.0))
        .collect();
    let oldest = times.iter().min().copied();
    let stale_groups: Vec<String> = reports
        .groups
        .iter()
        .filter(|g| {
            g.last_checkpoint_time
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0) > stale_after)
        })
        .map(|g| g.group.clone())
        .collect();
    let mut groups = reports.groups.clone();
    // Stalest first; never-checkpointed groups are the stalest of all.
    groups.sort_by(|a, b| {
        let ka = a.last_checkpoint_time.as_ref().map(|t| t.0);
        let kb = b.last_checkpoint_time.as_ref().map(|t| t.0);
        ka.cmp(&kb).then_with(|| a.group.cmp(&b.group))
    });
    groups.truncate(MAX_GROUPS);
    let mut failures = reports.failures.clone();
    failures.sort_by(|a, b| a.group.cmp(&b.group));
    failures.truncate(MAX_GROUPS);

    let threshold = format!(
        "{STALE_INTERVALS} × intervalSeconds ({}s)",
        stale_after.as_secs()
    );
    let stale = if stale_groups.is_empty() {
        condition(
            pc,
            STALE,
            "False",
            "Fresh",
            format!("every group checkpointed within {threshold}"),
            gen,
            now,
        )
    } else {
        condition(
            pc,
            STALE,
            "True",
            "CheckpointsStale",
            format!(
                "last checkpoint older than {threshold}: {}",
                list_some(&stale_groups)
            ),
            gen,
            now,
        )
    };
    let ready = if !stale_groups.is_empty() {
        condition(
            pc,
            READY,
            "False",
            "CheckpointsStale",
            format!("{} group(s) stale", stale_groups.len()),
            gen,
            now,
        )
    } else if reports.groups.is_empty() {
        condition(
            pc,
            READY,
            "True",
            "NoGroupsMatched",
            "no source consumer group matches spec.groups".into(),
            gen,
            now,
        )
    } else {
        condition(
            pc,
            READY,
            "True",
            "Checkpointing",
            format!("{} group(s) checkpointed", times.len()),
            gen,
            now,
        )
    };
    OffsetCheckpointStatus {
        observed_generation: gen,
        conditions: vec![ready, stale],
        groups_checkpointed: times.len() as i32,
        last_checkpoint_time: times.iter().max().map(|t| Time(*t)),
        oldest_checkpoint_age_seconds: oldest.map(|t| now.duration_since(t).as_secs().max(0)),
        groups,
        failures,
    }
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSeverity {
    Normal,
    Warning,
}

/// Why an event is published (the event's `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventReason {
    /// An error category (InvalidSpec, FlowNotFound, ...).
    Error(ErrorCategory),
    DataLoss,
    TopicReset,
    ResetApplied,
    ResetRefused,
    ResetFailed,
}

impl EventReason {
    /// The PascalCase reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error(c) => c.as_str(),
            Self::DataLoss => "DataLoss",
            Self::TopicReset => "TopicReset",
            Self::ResetApplied => "ResetApplied",
            Self::ResetRefused => "ResetRefused",
            Self::ResetFailed => "ResetFailed",
        }
    }
}

/// An event to publish about a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusEvent {
    pub severity: EventSeverity,
    pub reason: EventReason,
    pub note: String,
}

/// The condition of `type_` if it is True.
fn true_condition<'a>(conds: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conds
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// A condition that is True in `next` and was not True with the same message in `prev`:
/// something new happened (one event per change, not per reconcile).
fn newly_true<'a>(prev: &[Condition], next: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    let n = true_condition(next, type_)?;
    match true_condition(prev, type_) {
        Some(p) if p.message == n.message => None,
        _ => Some(n),
    }
}

/// Events implied by a flow status change: invalid spec, DataLoss / TopicReset detected, a
/// reset's outcome.
pub fn flow_events(prev: Option<&MirrorFlowStatus>, next: &MirrorFlowStatus) -> Vec<StatusEvent> {
    let empty = MirrorFlowStatus::default();
    let prev = prev.unwrap_or(&empty);
    let mut out = Vec::new();
    let warn = |reason, c: &Condition| StatusEvent {
        severity: EventSeverity::Warning,
        reason,
        note: c.message.clone(),
    };
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, INVALID_SPEC) {
        out.push(warn(EventReason::Error(ErrorCategory::InvalidSpec), c));
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, DATA_LOSS) {
        out.push(warn(EventReason::DataLoss, c));
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, TOPIC_RESET) {
        out.push(warn(EventReason::TopicReset, c));
    }
    if let Some(r) = &next.last_applied_reset {
        if prev.last_applied_reset.as_ref().map(|p| &p.id) != Some(&r.id) {
            let (severity, reason) = match r.outcome {
                ResetOutcome::Applied => (EventSeverity::Normal, EventReason::ResetApplied),
                ResetOutcome::Refused => (EventSeverity::Warning, EventReason::ResetRefused),
                ResetOutcome::Failed => (EventSeverity::Warning, EventReason::ResetFailed),
            };
            let mut note = format!(
                "reset {:?}: {:?}, {} partition(s)",
                r.id,
                r.outcome,
                r.partitions.len()
            );
            if let Some(m) = &r.message {
                note.push_str(": ");
                note.push_str(m);
            }
            out.push(StatusEvent {
                severity,
                reason,
                note,
            });
        }
    }
    out
}

/// Events implied by an OffsetCheckpoint status change: invalid spec, flow not found.
pub fn checkpoint_events(
    prev: Option<&OffsetCheckpointStatus>,
    next: &OffsetCheckpointStatus,
) -> Vec<StatusEvent> {
    let empty = OffsetCheckpointStatus::default();
    let prev = prev.unwrap_or(&empty);
    let was = |reason: &str, message: &str| {
        prev.conditions
            .iter()
            .any(|c| c.type_ == READY && c.reason == reason && c.message == message)
    };
    next.conditions
        .iter()
        .filter(|c| c.type_ == READY && c.status == "False")
        .filter_map(|c| {
            let cat = match c.reason.as_str() {
                "InvalidSpec" => ErrorCategory::InvalidSpec,
                "FlowNotFound" => ErrorCategory::FlowNotFound,
                _ => return None,
            };
            (!was(&c.reason, &c.message)).then(|| StatusEvent {
                severity: EventSeverity::Warning,
                reason: EventReason::Error(cat),
                note: c.message.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
