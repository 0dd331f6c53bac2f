//! The MirrorFlow status fold: worker health, resets, failures, conditions.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use super::*;
use crate::api::{
    AppliedReset, ConnectionProblem, ConnectionProblemReason, FailureType, MirrorFlow,
    MirrorFlowStatus, PartitionFailure, ReplicationLag, ReplicationLatency, ResetOutcome,
    ResetRequest, SkippedRecord, TopicPartitionRef, ValidationErrors, WorkerState, WorkerStatus,
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
    let workers: Vec<(String, Option<&WorkerStatus>)> = (0..desired.unsigned_abs())
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
            .or_insert_with(|| complete_failure(f, &prev.failures));
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
    let replication_latency = fold_latency(workers.iter().filter_map(|(_, e)| *e));

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
    // Only fresh entries: a stale worker's last words may be long fixed.
    let connection_problems: Vec<(String, &ConnectionProblem)> = workers
        .iter()
        .zip(&health)
        .filter(|(_, (_, h))| matches!(h, WorkerHealth::Fresh(_)))
        .filter_map(|((id, e), _)| e.map(|e| (id, e)))
        .flat_map(|(id, e)| e.connection_problems.iter().map(move |p| (id.clone(), p)))
        .collect();
    let connection_reason = connection_problems
        .iter()
        .map(|(_, p)| p.reason)
        .min()
        .map(ConnectionProblemReason::as_str);
    let connection_message = {
        let mut seen = BTreeSet::new();
        let lines: Vec<String> = connection_problems
            .iter()
            .filter(|(_, p)| seen.insert(p.message.clone()))
            .map(|(id, p)| format!("{id}: {}", p.message))
            .collect();
        list_some(&lines)
    };

    let pc = &prev.conditions;
    let (ready, reason, message) = if let Some(errs) = obs.invalid {
        (false, "InvalidSpec", errs.to_string())
    } else if let Some(p) = obs.children {
        (false, p.reason, p.message.clone())
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
    } else if let Some(reason) = connection_reason {
        (false, reason, connection_message.clone())
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
        failure_condition(pc, &all_failures, FailureType::ProgressMissing, gen, now),
        failure_condition(pc, &all_failures, FailureType::RecordRejected, gen, now),
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

    // ConnectionFailed and InsecureTls appear when they first turn True and stay (False)
    // after: a flow that never had either keeps its `kubectl describe` to one screen.
    let had = |t: &str| pc.iter().any(|c| c.type_ == t);
    let mut conditions = conditions;
    match connection_reason {
        Some(reason) => conditions.push(condition(
            pc,
            CONNECTION_FAILED,
            "True",
            reason,
            connection_message,
            gen,
            now,
        )),
        None if had(CONNECTION_FAILED) => conditions.push(condition(
            pc,
            CONNECTION_FAILED,
            "False",
            "Connected",
            String::new(),
            gen,
            now,
        )),
        None => {}
    }
    if let Some(c) = insecure_tls_condition(pc, flow, gen, now)
        .filter(|c| c.status == "True" || had(INSECURE_TLS))
    {
        conditions.push(c);
    }
    // Like ConnectionFailed: shown once it was True. Only fresh entries count.
    let unwritable: BTreeSet<&String> = workers
        .iter()
        .zip(&health)
        .filter(|(_, (_, h))| matches!(h, WorkerHealth::Fresh(_)))
        .filter_map(|((_, e), _)| *e)
        .flat_map(|e| e.unwritable_topics.iter())
        .collect();
    if !unwritable.is_empty() {
        let lines: Vec<String> = unwritable.into_iter().cloned().collect();
        conditions.push(condition(
            pc,
            TOPIC_UNWRITABLE,
            "True",
            "TargetTopicsUnwritable",
            list_some(&lines),
            gen,
            now,
        ));
    } else if had(TOPIC_UNWRITABLE) {
        conditions.push(condition(
            pc,
            TOPIC_UNWRITABLE,
            "False",
            "TopicsWritable",
            String::new(),
            gen,
            now,
        ));
    }
    // Worker 0 runs the ACL sync; its entry reports it.
    let topic_acls = workers
        .first()
        .and_then(|(_, e)| e.and_then(|e| e.topic_acls.clone()));
    MirrorFlowStatus {
        observed_generation: gen,
        conditions,
        workers: prev.workers,
        workers_summary: Some(format!("{ready_workers}/{desired}")),
        failed_partitions,
        failures,
        last_applied_reset,
        replication_lag,
        topic_acls,
        replication_latency,
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
fn insecure_tls_condition(
    pc: &[Condition],
    flow: &MirrorFlow,
    gen: Option<i64>,
    now: Timestamp,
) -> Option<Condition> {
    let insecure: Vec<String> = [("source", &flow.spec.source), ("target", &flow.spec.target)]
        .into_iter()
        .filter(|(_, c)| c.tls.as_ref().is_some_and(|t| t.insecure_skip_verify))
        .map(|(side, c)| format!("spec.{side}.tls.insecureSkipVerify (cluster {})", c.alias))
        .collect();
    Some(if insecure.is_empty() {
        condition(
            pc,
            INSECURE_TLS,
            "False",
            "CertificatesVerified",
            String::new(),
            gen,
            now,
        )
    } else {
        let msg = format!(
            "{} is true: the brokers' certificates and host names are not verified, so anyone on the network path can impersonate them and read credentials and records; for test clusters only",
            insecure.join(" and ")
        );
        condition(
            pc,
            INSECURE_TLS,
            "True",
            "InsecureSkipVerify",
            msg,
            gen,
            now,
        )
    })
}
