//! The MirrorFlow status fold: worker health, resets, failures, conditions.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;

use super::*;
use crate::api::{
    AppliedReset, ConnectionProblem, ConnectionProblemReason, FailureType, MirrorFlow,
    MirrorFlowSpec, MirrorFlowStatus, PartitionFailure, ReplicationLag, ReplicationLatency,
    ResetOutcome, ResetRequest, SkippedRecord, TopicPartitionRef, ValidationErrors, WorkerState,
    WorkerStatus,
};

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

/// A worker's report of a failure, with the explanation filled in from `status.failures`: a
/// worker sends the explanation (message, log start, records lost) until it sees it there,
/// then only the failure's identity, so `kubectl describe` shows the detail once.
pub fn complete_failure(f: &PartitionFailure, folded: &[PartitionFailure]) -> PartitionFailure {
    let mut out = f.clone();
    if out.message.is_none() {
        if let Some(known) = folded.iter().find(|k| same_failure(k, f)) {
            out.message = known.message.clone();
            out.log_start_offset = out.log_start_offset.or(known.log_start_offset);
            out.records_lost = out.records_lost.or(known.records_lost);
        }
    }
    out
}

/// The same detection: type, partition, offset and when it was detected (to the second: the
/// API server keeps times in seconds).
pub fn same_failure(a: &PartitionFailure, b: &PartitionFailure) -> bool {
    a.type_ == b.type_
        && a.topic == b.topic
        && a.partition == b.partition
        && a.detected_at.0.as_second() == b.detected_at.0.as_second()
        && a.requested_offset == b.requested_offset
}

/// A worker entry without what changes on every report (heartbeat, lag, checkpoint times and
/// lags): what differs is something the flow's status must show at once (state, failures,
/// resets, generation); the rest is folded on the next staleness check or heartbeat.
pub fn material(entry: &WorkerStatus) -> WorkerStatus {
    let mut e = entry.clone();
    e.last_heartbeat_time = None;
    e.replication_lag = None;
    e.replication_latency = None;
    e.audit = e.audit.map(|a| a.material());
    for cp in &mut e.checkpoints {
        for g in &mut cp.groups {
            g.last_checkpoint_time = None;
            g.target_lag = None;
        }
    }
    e
}

/// When the fold of `flow` changes by time alone after `now`: the first moment a desired
/// worker's fresh entry goes stale (`None`: nothing changes with time).
pub fn fold_changes_at(
    flow: &MirrorFlow,
    now: Timestamp,
    stale_after: SignedDuration,
) -> Option<Timestamp> {
    let name = flow.name_any();
    let desired: BTreeSet<String> = (0..flow.spec.workers.replicas.max(0).unsigned_abs())
        .map(|i| worker_id(&name, i))
        .collect();
    flow.status
        .iter()
        .flat_map(|s| &s.workers)
        .filter(|w| desired.contains(&w.id))
        .filter_map(|w| w.last_heartbeat_time.as_ref())
        .filter_map(|t| t.0.checked_add(stale_after).ok())
        .filter(|t| *t >= now)
        .min()
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
    /// A child the controller could not apply (it stops at the first).
    pub children: Option<&'a ChildProblem>,
    pub now: Timestamp,
    /// Worker entries older than this are not ready.
    pub stale_after: SignedDuration,
}

/// Why the controller could not apply one of the flow's children: Ready's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildProblem {
    /// [`CHILD_CONFLICT`], [`APPLY_FAILED`] or [`TARGET_OVERLAP`].
    pub reason: &'static str,
    pub message: String,
}

/// Ready reason: a child's name is taken by an object this flow does not control.
pub const CHILD_CONFLICT: &str = "ChildConflict";
/// Ready reason: the API server refused (or failed) an apply of a child.
pub const APPLY_FAILED: &str = "ApplyFailed";
/// Ready reason: an earlier flow writes a target topic this flow would write too
/// (`controller::overlap`); this flow's workers are scaled to zero.
pub const TARGET_OVERLAP: &str = "TargetOverlap";

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
/// stays done (a restarted or newly scaled worker does not turn it back into "in progress"),
/// unless it Failed: workers retry a failed id, and their later answer is folded again.
/// Workers that own nothing the request concerns (`NotOwned`) do not decide the outcome: it
/// is Failed if a worker failed (retried), Applied if any applied, Refused otherwise.
pub fn fold_reset(
    request: Option<&ResetRequest>,
    previous: Option<&AppliedReset>,
    workers: &[(String, Option<&WorkerStatus>)],
) -> ResetProgress {
    let Some(req) = request else {
        return ResetProgress::Idle(previous.cloned());
    };
    if previous.is_some_and(|p| p.id == req.id && p.outcome != ResetOutcome::Failed) {
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
    } else if has(ResetOutcome::Applied) {
        ResetOutcome::Applied
    } else {
        // Refused somewhere, or no worker owns what the request names.
        ResetOutcome::Refused
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
    // Each worker skipped records of its own partitions only: the union is the flow's.
    let skipped: BTreeSet<SkippedRecord> = reports
        .iter()
        .flat_map(|(_, r)| r.skipped_records.clone())
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
        skipped_records: skipped.into_iter().collect(),
    })
}

/// The failure types, in the order of their conditions.
const FAILURE_TYPES: [FailureType; 4] = [
    FailureType::DataLoss,
    FailureType::TopicReset,
    FailureType::ProgressMissing,
    FailureType::RecordRejected,
];

/// The condition a failure type sets, its reasons, and what the user does about it.
struct FailureTexts {
    condition: &'static str,
    true_reason: &'static str,
    false_reason: &'static str,
    hint: &'static str,
}

fn failure_texts(type_: FailureType) -> FailureTexts {
    let (condition, true_reason, false_reason, hint) = match type_ {
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
        FailureType::ProgressMissing => (
            PROGRESS_MISSING,
            "TargetHoldsRecords",
            "ProgressKnown",
            "no progress is recorded but the target topic already holds records; patch spec.reset (strategy ResumeFromTarget, RestartFromEarliest or SkipToLatest) to choose where to resume",
        ),
        FailureType::RecordRejected => (
            RECORD_REJECTED,
            "TargetRefusedRecord",
            "NoRecordRejected",
            "the target refused a record for good (too large, invalid, policy); fix the target topic and patch spec.reset (strategy RetryRecord), or skip exactly that record (strategy SkipRecord)",
        ),
    };
    FailureTexts {
        condition,
        true_reason,
        false_reason,
        hint,
    }
}

/// The condition of `type_`'s failures (`DataLoss`, `TopicReset`, ...): True while a
/// partition is stopped by one, naming the partitions and what to patch.
fn failure_verdict(failures: &[PartitionFailure], type_: FailureType) -> Verdict {
    let texts = failure_texts(type_);
    let hits: Vec<String> = failures
        .iter()
        .filter(|f| f.type_ == type_)
        .map(|f| match f.type_ {
            // The offset names the record to skip or retry.
            FailureType::RecordRejected => {
                format!(
                    "{}/{} at offset {}",
                    f.topic, f.partition, f.requested_offset
                )
            }
            _ => format!("{}/{}", f.topic, f.partition),
        })
        .collect();
    if hits.is_empty() {
        Verdict::no(texts.false_reason, "")
    } else {
        let msg = format!(
            "{} partition(s) stopped: {}; {}",
            hits.len(),
            list_some(&hits),
            texts.hint
        );
        Verdict::yes(texts.true_reason, msg)
    }
}

/// The desired workers' ids (`<flow>-worker-<i>`, `i < spec.workers.replicas`) with their
/// entries: entries left by workers that were scaled away are history.
fn desired_workers<'a>(
    flow: &MirrorFlow,
    entries: &'a [WorkerStatus],
) -> Vec<(String, Option<&'a WorkerStatus>)> {
    let name = flow.name_any();
    let by_id: BTreeMap<&str, &WorkerStatus> = entries.iter().map(|w| (w.id.as_str(), w)).collect();
    (0..flow.spec.workers.replicas.max(0).unsigned_abs())
        .map(|i| {
            let id = worker_id(&name, i);
            let e = by_id.get(id.as_str()).copied();
            (id, e)
        })
        .collect()
}

/// The entries of the workers whose health is fresh: only they speak for the present (a
/// stale worker's last words may be long fixed).
fn fresh_entries<'a>(
    workers: &'a [(String, Option<&'a WorkerStatus>)],
    health: &[WorkerHealth],
) -> Vec<(&'a str, &'a WorkerStatus)> {
    workers
        .iter()
        .zip(health)
        .filter(|(_, h)| matches!(h, WorkerHealth::Fresh(_)))
        .filter_map(|((id, e), _)| e.map(|e| (id.as_str(), e)))
        .collect()
}

/// The workers' failures, one per partition (the first worker's), with explanations filled
/// in from `known`; a partition an entry names in `stoppedPartitions` is the failure `known`
/// holds for it. Failures persist until reset, so a stale entry's failures still count.
/// Returns the failures and how many partitions are stopped (those `known` no longer explains
/// count too).
fn fold_failures(
    workers: &[(String, Option<&WorkerStatus>)],
    known: &[PartitionFailure],
) -> (Vec<PartitionFailure>, i32) {
    let mut by_partition: BTreeMap<(String, i32), Option<PartitionFailure>> = BTreeMap::new();
    for e in workers.iter().filter_map(|(_, e)| *e) {
        for f in &e.failures {
            by_partition
                .entry((f.topic.clone(), f.partition))
                .or_insert_with(|| Some(complete_failure(f, known)));
        }
        for (topic, partition) in e
            .stopped_partitions
            .iter()
            .filter_map(|r| parse_partition_ref(r))
        {
            let explained = known
                .iter()
                .find(|k| k.topic == topic && k.partition == partition)
                .cloned();
            by_partition.entry((topic, partition)).or_insert(explained);
        }
    }
    let stopped = i32::try_from(by_partition.len()).unwrap_or(i32::MAX);
    (by_partition.into_values().flatten().collect(), stopped)
}

/// `topic/partition`: how a worker entry names a failure `status.failures` explains.
pub fn partition_ref(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// The topic and partition of a [`partition_ref`] (topic names hold no `/`).
pub fn parse_partition_ref(r: &str) -> Option<(String, i32)> {
    let (topic, partition) = r.rsplit_once('/')?;
    let partition = partition.parse().ok()?;
    (!topic.is_empty()).then(|| (topic.to_string(), partition))
}

/// The flow's lag: the records behind summed over workers, the seconds behind of the worst.
fn sum_lag(workers: &[(String, Option<&WorkerStatus>)]) -> Option<ReplicationLag> {
    let lags: Vec<&ReplicationLag> = workers
        .iter()
        .filter_map(|(_, e)| e.and_then(|e| e.replication_lag.as_ref()))
        .collect();
    (!lags.is_empty()).then(|| ReplicationLag {
        records: lags.iter().map(|l| l.records).sum(),
        seconds: lags.iter().map(|l| l.seconds).max().unwrap_or(0),
    })
}

/// `status.lastAppliedReset`: a done reset's outcome; the previous one while a reset is in
/// progress.
fn last_applied_reset(
    reset: &ResetProgress,
    previous: Option<&AppliedReset>,
) -> Option<AppliedReset> {
    match reset {
        ResetProgress::Idle(r) => r.clone(),
        ResetProgress::InProgress { .. } => previous.cloned(),
        ResetProgress::Done(r) => Some(r.clone()),
    }
}

/// The desired workers as Ready, Replicating and `workersSummary` count them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkerRollup {
    desired: i32,
    /// Fresh and doing what the spec asks: replicating (Running, or Degraded: its other
    /// partitions go on), or Paused when paused.
    up: usize,
    /// Fresh, and Running or Degraded.
    replicating: usize,
    /// The spec asks for a pause.
    paused: bool,
    /// Each fresh Failed worker, with its message.
    failed: Vec<String>,
    /// Each fresh Degraded worker, with its message.
    degraded: Vec<String>,
    /// Each worker that is not up, and why.
    not_ready: Vec<String>,
    /// Every worker that is not up simply has not come up yet.
    only_starting: bool,
}

impl WorkerRollup {
    /// `up/desired`: `workersSummary`, and the count every message about the workers gives.
    fn summary(&self) -> String {
        format!("{}/{}", self.up, self.desired)
    }

    /// `2/2 workers replicating` (`paused` when paused): the phrase of Ready and Replicating.
    fn phrase(&self) -> String {
        let doing = if self.paused { "paused" } else { "replicating" };
        format!("{} workers {doing}", self.summary())
    }
}

fn roll_up_workers(
    workers: &[(String, Option<&WorkerStatus>)],
    health: &[WorkerHealth],
    paused: bool,
    stale_after: SignedDuration,
) -> WorkerRollup {
    let is_up = |s: WorkerState| match s {
        WorkerState::Running | WorkerState::Degraded => !paused,
        WorkerState::Paused => paused,
        _ => false,
    };
    let fresh = |h: &WorkerHealth| match h {
        WorkerHealth::Fresh(s) => Some(*s),
        _ => None,
    };
    let up = health
        .iter()
        .filter_map(fresh)
        .filter(|s| is_up(*s))
        .count();
    let replicating = health
        .iter()
        .filter_map(fresh)
        .filter(|s| matches!(s, WorkerState::Running | WorkerState::Degraded))
        .count();
    let with_message = |state: WorkerState| -> Vec<String> {
        workers
            .iter()
            .zip(health)
            .filter(|(_, h)| **h == WorkerHealth::Fresh(state))
            .map(|((id, e), _)| match e.and_then(|e| e.message.as_deref()) {
                Some(m) => format!("{id}: {m}"),
                None => id.clone(),
            })
            .collect()
    };
    let not_ready = workers
        .iter()
        .zip(health)
        .filter_map(|((id, _), h)| match h {
            WorkerHealth::Missing => Some(format!("{id}: no status yet")),
            WorkerHealth::Stale => Some(format!(
                "{id}: no heartbeat for more than {}s",
                stale_after.as_secs()
            )),
            WorkerHealth::Fresh(s) if !is_up(*s) => Some(format!("{id}: {s:?}")),
            WorkerHealth::Fresh(_) => None,
        })
        .collect();
    let only_starting = health.iter().all(|h| match h {
        WorkerHealth::Missing | WorkerHealth::Fresh(WorkerState::Starting) => true,
        WorkerHealth::Fresh(s) => is_up(*s),
        WorkerHealth::Stale => false,
    });
    WorkerRollup {
        desired: i32::try_from(workers.len()).unwrap_or(i32::MAX),
        up,
        replicating,
        paused,
        failed: with_message(WorkerState::Failed),
        degraded: with_message(WorkerState::Degraded),
        not_ready,
        only_starting,
    }
}

/// What fresh workers report of their connections: the most serious reason, and each
/// distinct message once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConnectionTrouble {
    reason: &'static str,
    message: String,
}

fn connection_trouble(fresh: &[(&str, &WorkerStatus)]) -> Option<ConnectionTrouble> {
    let problems: Vec<(&str, &ConnectionProblem)> = fresh
        .iter()
        .flat_map(|(id, e)| e.connection_problems.iter().map(move |p| (*id, p)))
        .collect();
    let reason = problems.iter().map(|(_, p)| p.reason).min()?;
    let mut seen = BTreeSet::new();
    let lines: Vec<String> = problems
        .iter()
        .filter(|(_, p)| seen.insert(p.message.clone()))
        .map(|(id, p)| format!("{id}: {}", p.message))
        .collect();
    Some(ConnectionTrouble {
        reason: ConnectionProblemReason::as_str(reason),
        message: list_some(&lines),
    })
}

/// What `Ready` is decided from.
#[derive(Debug, Clone, Copy)]
struct ReadyInputs<'a> {
    invalid: Option<&'a ValidationErrors>,
    children: Option<&'a ChildProblem>,
    reset: &'a ResetProgress,
    failed_partitions: i32,
    connection: Option<&'a ConnectionTrouble>,
    workers: &'a WorkerRollup,
    draining: Option<(i32, i32)>,
    statefulset: Option<&'a StatefulSetView>,
}

/// Ready reason while a reset request is applied (progress, not a stop).
const RESET_IN_PROGRESS: &str = "ResetInProgress";

/// `Ready` and the phase it implies: False for the first thing that stops the flow
/// (Stalled), else for the first thing it still waits for (Reconciling); True
/// (`AllWorkersRunning`, or `Paused`) otherwise.
fn ready_verdict(i: &ReadyInputs<'_>) -> (Verdict, Phase) {
    if let Some(v) = ready_blocked(i) {
        let phase = if v.reason == RESET_IN_PROGRESS {
            Phase::Reconciling
        } else {
            Phase::Stalled
        };
        return (v, phase);
    }
    if let Some(v) = ready_waiting(i) {
        return (v, Phase::Reconciling);
    }
    let phrase = i.workers.phrase();
    let v = if i.workers.paused {
        Verdict::yes("Paused", format!("{phrase}; paused by spec.paused"))
    } else {
        Verdict::yes("AllWorkersRunning", phrase)
    };
    (v, Phase::Current)
}

/// What stops the flow until someone (or a reset in flight) acts, in this order: the spec, a
/// child, a reset, stopped partitions, a connection, a failed worker, a degraded one.
fn ready_blocked(i: &ReadyInputs<'_>) -> Option<Verdict> {
    if let Some(errs) = i.invalid {
        return Some(Verdict::no("InvalidSpec", errs.to_string()));
    }
    if let Some(p) = i.children {
        return Some(Verdict::no(p.reason, p.message.clone()));
    }
    if let ResetProgress::InProgress {
        id,
        applied,
        desired,
    } = i.reset
    {
        return Some(Verdict::no(
            RESET_IN_PROGRESS,
            format!("reset {id:?}: {applied}/{desired} workers applied it"),
        ));
    }
    if i.failed_partitions > 0 {
        return Some(Verdict::no(
            "PartitionsFailed",
            format!(
                "{} partition(s) stopped; see status.failures and patch spec.reset to clear them",
                i.failed_partitions
            ),
        ));
    }
    if let Some(c) = i.connection {
        return Some(Verdict::no(c.reason, c.message.clone()));
    }
    if !i.workers.failed.is_empty() {
        return Some(Verdict::no("WorkerFailed", list_some(&i.workers.failed)));
    }
    if !i.workers.degraded.is_empty() && !i.workers.paused {
        return Some(Verdict::no(
            "WorkersDegraded",
            list_some(&i.workers.degraded),
        ));
    }
    None
}

/// What the flow still waits for, in this order: old workers to drain, pods to roll, workers
/// to report, pods to pass their probe, the StatefulSet to exist.
fn ready_waiting(i: &ReadyInputs<'_>) -> Option<Verdict> {
    let w = i.workers;
    if let Some((from, to)) = i.draining {
        return Some(Verdict::no(
            "Scaling",
            format!(
                "scaling from {from} to {to} workers: waiting until every old worker has stopped"
            ),
        ));
    }
    if let Some(s) = i.statefulset.filter(|s| s.rollout_in_progress()) {
        return Some(Verdict::no(
            "RollingUpdate",
            format!(
                "{}/{} worker pods updated to the current spec",
                s.updated_replicas, s.replicas
            ),
        ));
    }
    if !w.not_ready.is_empty() {
        let reason = if w.only_starting {
            "WorkersStarting"
        } else {
            "WorkersNotReady"
        };
        return Some(Verdict::no(
            reason,
            format!("{}; {}", w.phrase(), list_some(&w.not_ready)),
        ));
    }
    if let Some(s) = i.statefulset.filter(|s| s.ready_replicas < w.desired) {
        return Some(Verdict::no(
            "WorkersNotReady",
            format!(
                "{}/{} worker pods pass their readiness probe",
                s.ready_replicas, w.desired
            ),
        ));
    }
    if w.desired > 0 && i.statefulset.is_none() {
        return Some(Verdict::no(
            "WorkersStarting",
            "the worker StatefulSet does not exist yet",
        ));
    }
    None
}

/// `Replicating`: True while some worker replicates (`Pausing` when the spec asks to pause,
/// `PartiallyReplicating` unless all do and no partition is stopped).
fn replicating_verdict(w: &WorkerRollup, failed_partitions: i32) -> Verdict {
    let (replicating, desired) = (w.replicating, w.desired);
    if replicating == 0 {
        if w.paused {
            Verdict::no("Paused", "replication paused by spec.paused")
        } else {
            Verdict::no("NoWorkerReplicating", w.phrase())
        }
    } else if w.paused {
        Verdict::yes(
            "Pausing",
            format!("{replicating}/{desired} workers still replicating; pause requested"),
        )
    } else if replicating as i32 == desired && failed_partitions == 0 {
        Verdict::yes("Replicating", w.phrase())
    } else {
        let mut message = w.phrase();
        if failed_partitions > 0 {
            message.push_str(&format!("; {failed_partitions} partition(s) stopped"));
        }
        Verdict::yes("PartiallyReplicating", message)
    }
}

/// `Ready=False` reason `FailedOver` once a failover is done: the flow stopped on purpose
/// (not an error) and stays stopped while `spec.failover` names it.
fn failed_over_verdict(f: Option<&crate::api::FailoverReport>) -> Option<Verdict> {
    let f = f.filter(|f| f.phase == crate::api::FailoverPhase::Done)?;
    let moved = f.groups.iter().filter(|g| !g.committed.is_empty()).count();
    let skipped: Vec<String> = f
        .groups
        .iter()
        .filter(|g| g.skipped.is_some())
        .map(|g| g.group.clone())
        .collect();
    let mut msg = format!(
        "failover {:?} ({:?}) done: replication stopped, {moved} group(s) at their translated offsets on the target",
        f.id, f.mode
    );
    if !skipped.is_empty() {
        msg.push_str(&format!(", not touched: {}", list_some(&skipped)));
    }
    msg.push_str("; see status.failover (remove spec.failover to replicate again)");
    Some(Verdict::no("FailedOver", msg))
}

/// `InvalidSpec`: True with the validation errors.
fn invalid_spec_verdict(invalid: Option<&ValidationErrors>) -> Verdict {
    match invalid {
        Some(errs) => Verdict::yes("ValidationFailed", errs.to_string()),
        None => Verdict::no("Valid", ""),
    }
}

/// `ConnectionFailed`: True while a fresh worker cannot use a cluster.
fn connection_failed_verdict(trouble: Option<&ConnectionTrouble>) -> Verdict {
    match trouble {
        Some(c) => Verdict::yes(c.reason, c.message.clone()),
        None => Verdict::no("Connected", ""),
    }
}

/// The target topics fresh workers cannot write, sorted, each once.
fn unwritable_topics(fresh: &[(&str, &WorkerStatus)]) -> Vec<String> {
    let topics: BTreeSet<&String> = fresh
        .iter()
        .flat_map(|(_, e)| e.unwritable_topics.iter())
        .collect();
    topics.into_iter().cloned().collect()
}

/// `TopicUnwritable`: True while a fresh worker cannot write a target topic.
fn topic_unwritable_verdict(topics: &[String]) -> Verdict {
    if topics.is_empty() {
        Verdict::no("TopicsWritable", "")
    } else {
        Verdict::yes("TargetTopicsUnwritable", list_some(topics))
    }
}

/// The conditions of trouble (`DataLoss` and the other failure types, `InvalidSpec`,
/// `ConnectionFailed`, `InsecureTls`, `TopicUnwritable`) appear when they first turn True and
/// stay (False) after: a flow that never had one keeps its `kubectl describe` to one screen.
fn shown_once(v: Verdict, had: bool) -> Option<Verdict> {
    (v.status == "True" || had).then_some(v)
}

/// Fold a flow's status. The result keeps the workers' entries unchanged (the controller
/// never writes them), so `Some(result) == flow.status` means "nothing to write".
pub fn fold_flow_status(obs: &FlowObservation<'_>) -> MirrorFlowStatus {
    let flow = obs.flow;
    let prev = flow.status.clone().unwrap_or_default();
    let pc = &prev.conditions;
    let (gen, now) = (flow.metadata.generation, obs.now);
    let paused = flow.spec.paused;

    let workers = desired_workers(flow, &prev.workers);
    let health: Vec<WorkerHealth> = workers
        .iter()
        .map(|(_, e)| classify_worker(*e, now, obs.stale_after))
        .collect();
    let rollup = roll_up_workers(&workers, &health, paused, obs.stale_after);
    let fresh = fresh_entries(&workers, &health);
    let (mut failures, failed_partitions) = fold_failures(&workers, &prev.failures);
    let reset = fold_reset(
        flow.spec.reset.as_ref(),
        prev.last_applied_reset.as_ref(),
        &workers,
    );
    let connection = connection_trouble(&fresh);

    // Worker 0 runs the failover; its entry reports it (kept once the entry goes, e.g.
    // while the flow is stopped after it).
    let failover = workers
        .iter()
        .find_map(|(_, e)| e.and_then(|e| e.failover.clone()))
        .or(prev.failover.clone())
        .filter(|f| flow.spec.failover.as_ref().is_some_and(|r| r.id == f.id))
        .map(crate::api::FailoverReport::bounded);
    let (ready, phase) = ready_verdict(&ReadyInputs {
        invalid: obs.invalid,
        children: obs.children,
        reset: &reset,
        failed_partitions,
        connection: connection.as_ref(),
        workers: &rollup,
        draining: obs.draining,
        statefulset: obs.statefulset,
    });
    let (ready, phase) = match failed_over_verdict(failover.as_ref()) {
        Some(v) => (v, Phase::Current),
        None => (ready, phase),
    };
    let mut conditions = vec![ready.clone().stamp(pc, READY, gen, now)];
    conditions.extend(phase_stamps(&ready, phase, pc, gen, now));
    conditions.push(replicating_verdict(&rollup, failed_partitions).stamp(
        pc,
        REPLICATING,
        gen,
        now,
    ));
    let mut once: Vec<(&str, Verdict)> = FAILURE_TYPES
        .iter()
        .map(|t| (failure_texts(*t).condition, failure_verdict(&failures, *t)))
        .collect();
    once.extend([
        (INVALID_SPEC, invalid_spec_verdict(obs.invalid)),
        (
            CONNECTION_FAILED,
            connection_failed_verdict(connection.as_ref()),
        ),
        (INSECURE_TLS, insecure_tls_verdict(&flow.spec)),
        (
            TOPIC_UNWRITABLE,
            topic_unwritable_verdict(&unwritable_topics(&fresh)),
        ),
    ]);
    for (type_, v) in once {
        if let Some(v) = shown_once(v, pc.iter().any(|c| c.type_ == type_)) {
            conditions.push(v.stamp(pc, type_, gen, now));
        }
    }
    let audit = fold_audit(workers.iter().filter_map(|(_, e)| *e));
    if let Some(v) = super::audit::audited_verdict(&flow.spec.audit, audit.as_ref()) {
        conditions.push(v.stamp(pc, AUDITED, gen, now));
    }

    let last_applied_reset = last_applied_reset(&reset, prev.last_applied_reset.as_ref());
    let replication_lag = sum_lag(&workers);
    let replication_latency = fold_latency(workers.iter().filter_map(|(_, e)| *e));
    // Worker 0 runs the ACL sync; its entry reports it.
    let topic_acls = workers
        .first()
        .and_then(|(_, e)| e.and_then(|e| e.topic_acls.clone()));
    failures.truncate(MAX_FAILURES);
    MirrorFlowStatus {
        observed_generation: gen,
        conditions,
        workers_summary: Some(rollup.summary()),
        failed_partitions,
        failures,
        last_applied_reset,
        replication_lag,
        topic_acls,
        replication_latency,
        audit,
        failover,
        workers: prev.workers,
    }
}

/// The flow's heartbeat latency: the worst an entry reports (worker 0 measures; should
/// another entry report one, the higher latency is the one to show).
pub fn fold_latency<'a>(
    entries: impl Iterator<Item = &'a WorkerStatus>,
) -> Option<ReplicationLatency> {
    entries
        .filter_map(|e| e.replication_latency.as_ref())
        .max_by_key(|l| (l.last_millis.is_some(), l.last_millis, l.p99_millis))
        .cloned()
}

/// `InsecureTls`: True (a warning, Ready is not affected) while a cluster does not verify
/// its brokers' certificates.
fn insecure_tls_verdict(spec: &MirrorFlowSpec) -> Verdict {
    let insecure: Vec<String> = [("source", &spec.source), ("target", &spec.target)]
        .into_iter()
        .filter(|(_, c)| c.tls.as_ref().is_some_and(|t| t.insecure_skip_verify))
        .map(|(side, c)| format!("spec.{side}.tls.insecureSkipVerify (cluster {})", c.alias))
        .collect();
    if insecure.is_empty() {
        Verdict::no("CertificatesVerified", "")
    } else {
        let msg = format!(
            "{} is true: the brokers' certificates and host names are not verified, so anyone on the network path can impersonate them and read credentials and records; for test clusters only",
            insecure.join(" and ")
        );
        Verdict::yes("InsecureSkipVerify", msg)
    }
}

#[cfg(test)]
mod tests;
