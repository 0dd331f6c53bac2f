//! Events implied by status changes (one per change, not per reconcile).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::error::ErrorCategory;
use crate::api::status::{
    APPLY_FAILED, CHECKPOINT_FAILED, CHILD_CONFLICT, CONNECTION_FAILED, DATA_LOSS, INSECURE_TLS,
    INVALID_SPEC, PROGRESS_MISSING, READY, RECORD_REJECTED, TARGET_OVERLAP, TOPIC_RESET,
    TOPIC_UNWRITABLE,
};
use crate::api::{MirrorFlowStatus, OffsetCheckpointStatus, ResetOutcome};

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
    ProgressMissing,
    /// A partition stopped at a record the target refused for good.
    RecordRejected,
    ResetApplied,
    ResetRefused,
    ResetFailed,
    /// A child's name is taken by an object the flow does not control.
    ChildConflict,
    /// The API server refused an apply of a child.
    ApplyFailed,
    /// An earlier flow writes a target topic this one would write: its workers are stopped.
    TargetOverlap,
    /// `ConnectionFailed` turned True (or its message changed), by its reason.
    Connection(crate::api::ConnectionProblemReason),
    /// A cluster's TLS is not verified (`tls.insecureSkipVerify`).
    InsecureTls,
    /// `TopicUnwritable` turned True: a target topic cannot be created or take writes.
    TopicUnwritable,
    /// An OffsetCheckpoint's runner reports an error (its Ready turned `CheckpointFailed`).
    CheckpointFailed,
    /// The continuous audit found a new mismatch (`Audited` False).
    IntegrityMismatch,
    /// A failover reached `Done`: the flow stopped replicating on purpose.
    FailedOver,
    /// A planned failover's drain did not finish in time; nothing moved.
    FailoverTimedOut,
    /// A failover was refused (its preconditions failed); nothing moved.
    FailoverRefused,
}

impl EventReason {
    /// The PascalCase reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error(c) => c.as_str(),
            Self::DataLoss => "DataLoss",
            Self::TopicReset => "TopicReset",
            Self::ProgressMissing => "ProgressMissing",
            Self::RecordRejected => "RecordRejected",
            Self::ResetApplied => "ResetApplied",
            Self::ResetRefused => "ResetRefused",
            Self::ResetFailed => "ResetFailed",
            Self::ChildConflict => CHILD_CONFLICT,
            Self::ApplyFailed => APPLY_FAILED,
            Self::TargetOverlap => TARGET_OVERLAP,
            Self::Connection(r) => r.as_str(),
            Self::InsecureTls => "InsecureTls",
            Self::TopicUnwritable => "TopicUnwritable",
            Self::CheckpointFailed => CHECKPOINT_FAILED,
            Self::IntegrityMismatch => crate::api::status::INTEGRITY_MISMATCH,
            Self::FailedOver => "FailedOver",
            Self::FailoverTimedOut => "FailoverTimedOut",
            Self::FailoverRefused => "FailoverRefused",
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

/// Events implied by a flow status change: invalid spec, DataLoss / TopicReset /
/// ProgressMissing / RecordRejected detected, a reset's outcome.
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
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, PROGRESS_MISSING) {
        out.push(warn(EventReason::ProgressMissing, c));
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, RECORD_REJECTED) {
        out.push(warn(EventReason::RecordRejected, c));
    }
    // A child that cannot be applied: once per distinct problem.
    let ready_now = next.conditions.iter().find(|c| c.type_ == READY);
    if let Some(c) = ready_now.filter(|c| c.status == "False") {
        let reason = match c.reason.as_str() {
            CHILD_CONFLICT => Some(EventReason::ChildConflict),
            APPLY_FAILED => Some(EventReason::ApplyFailed),
            TARGET_OVERLAP => Some(EventReason::TargetOverlap),
            _ => None,
        };
        let repeated = prev
            .conditions
            .iter()
            .any(|p| p.type_ == READY && p.reason == c.reason && p.message == c.message);
        if let Some(reason) = reason.filter(|_| !repeated) {
            out.push(warn(reason, c));
        }
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, CONNECTION_FAILED) {
        let reason = match c.reason.as_str() {
            "AuthenticationFailed" => crate::api::ConnectionProblemReason::AuthenticationFailed,
            "TlsVerificationFailed" => crate::api::ConnectionProblemReason::TlsVerificationFailed,
            _ => crate::api::ConnectionProblemReason::TlsFailed,
        };
        out.push(warn(EventReason::Connection(reason), c));
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, INSECURE_TLS) {
        out.push(warn(EventReason::InsecureTls, c));
    }
    if let Some(c) = newly_true(&prev.conditions, &next.conditions, TOPIC_UNWRITABLE) {
        out.push(warn(EventReason::TopicUnwritable, c));
    }
    out.extend(new_mismatches(prev, next));
    out.extend(failover_outcome(prev, next));
    if let Some(r) = &next.last_applied_reset {
        // A new id, or a failed one that was retried to another outcome.
        if prev
            .last_applied_reset
            .as_ref()
            .map(|p| (&p.id, &p.outcome))
            != Some((&r.id, &r.outcome))
        {
            let (severity, reason) = match r.outcome {
                ResetOutcome::Applied => (EventSeverity::Normal, EventReason::ResetApplied),
                ResetOutcome::Refused => (EventSeverity::Warning, EventReason::ResetRefused),
                ResetOutcome::Failed => (EventSeverity::Warning, EventReason::ResetFailed),
                // Folded flow outcomes are never NotOwned (that is one worker's answer).
                ResetOutcome::NotOwned => (EventSeverity::Normal, EventReason::ResetRefused),
            };
            let mut note = format!(
                "reset {:?}: {:?}, {} partition(s)",
                r.id,
                r.outcome,
                r.partitions.len()
            );
            if !r.skipped_records.is_empty() {
                let skipped: Vec<String> = r
                    .skipped_records
                    .iter()
                    .map(|k| format!("{}/{} offset {}", k.topic, k.partition, k.offset))
                    .collect();
                note.push_str(&format!(", skipped record(s): {}", skipped.join(", ")));
            }
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

/// One event when a failover reaches a final phase (a new id, or a new final phase of the
/// same one).
fn failover_outcome(prev: &MirrorFlowStatus, next: &MirrorFlowStatus) -> Option<StatusEvent> {
    use crate::api::FailoverPhase;
    let r = next.failover.as_ref().filter(|r| r.phase.is_final())?;
    let key = |r: &crate::api::FailoverReport| (r.id.clone(), r.phase);
    if prev.failover.as_ref().map(key) == Some(key(r)) {
        return None;
    }
    let (severity, reason) = match r.phase {
        FailoverPhase::Done => (EventSeverity::Normal, EventReason::FailedOver),
        FailoverPhase::TimedOut => (EventSeverity::Warning, EventReason::FailoverTimedOut),
        _ => (EventSeverity::Warning, EventReason::FailoverRefused),
    };
    let mut note = format!("failover {:?} ({:?}): {:?}", r.id, r.mode, r.phase);
    if let Some(n) = r.not_replicated {
        note.push_str(&format!(", {n} record(s) not replicated"));
    }
    let moved = r.groups.iter().filter(|g| g.skipped.is_none()).count();
    note.push_str(&format!(", {moved} group(s) committed on the target"));
    if let Some(m) = &r.message {
        note.push_str(": ");
        note.push_str(m);
    }
    Some(StatusEvent {
        severity,
        reason,
        note,
    })
}

/// One Warning per audit mismatch `next` lists and `prev` did not.
fn new_mismatches(prev: &MirrorFlowStatus, next: &MirrorFlowStatus) -> Vec<StatusEvent> {
    let before: &[String] = prev.audit.as_ref().map_or(&[], |a| &a.mismatches);
    next.audit
        .iter()
        .flat_map(|a| &a.mismatches)
        .filter(|m| !before.contains(m))
        .map(|m| StatusEvent {
            severity: EventSeverity::Warning,
            reason: EventReason::IntegrityMismatch,
            note: m.clone(),
        })
        .collect()
}

/// Events implied by an OffsetCheckpoint status change: invalid spec, flow not found.
pub fn checkpoint_events(
    prev: Option<&OffsetCheckpointStatus>,
    next: &OffsetCheckpointStatus,
) -> Vec<StatusEvent> {
    let empty = OffsetCheckpointStatus::default();
    let prev = prev.unwrap_or(&empty);
    let was = |reason: &str, message: Option<&str>| {
        prev.conditions.iter().any(|c| {
            c.type_ == READY && c.reason == reason && message.is_none_or(|m| c.message == m)
        })
    };
    next.conditions
        .iter()
        .filter(|c| c.type_ == READY && c.status == "False")
        .filter_map(|c| {
            // A runner's error may read differently from one cycle to the next (a timeout,
            // then a refused connection): one event when it starts failing, not one per
            // wording.
            let (reason, message) = match c.reason.as_str() {
                "InvalidSpec" => (
                    EventReason::Error(ErrorCategory::InvalidSpec),
                    Some(&c.message),
                ),
                "FlowNotFound" => (
                    EventReason::Error(ErrorCategory::FlowNotFound),
                    Some(&c.message),
                ),
                CHECKPOINT_FAILED => (EventReason::CheckpointFailed, None),
                _ => return None,
            };
            (!was(&c.reason, message.map(String::as_str))).then(|| StatusEvent {
                severity: EventSeverity::Warning,
                reason,
                note: c.message.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::tests::{cases, fold, fold_cp, t};
    use crate::api::status::FlowRefState;
    use pretty_assertions::assert_eq;

    #[test]
    fn one_warning_per_new_audit_mismatch() {
        let status = |m: &[&str]| MirrorFlowStatus {
            audit: Some(crate::api::AuditReport {
                mismatches: m.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let notes = |ev: Vec<StatusEvent>| {
            ev.into_iter()
                .map(|e| (e.severity, e.reason.as_str(), e.note))
                .collect::<Vec<_>>()
        };
        let a = status(&["extra in t/0: target offset 3"]);
        let ab = status(&[
            "extra in t/0: target offset 3",
            "missing in t/1: source offset 9",
        ]);
        assert_eq!(
            notes(flow_events(None, &a)),
            vec![(
                EventSeverity::Warning,
                "IntegrityMismatch",
                "extra in t/0: target offset 3".to_string()
            )]
        );
        assert_eq!(notes(flow_events(Some(&a), &a)), vec![]);
        assert_eq!(notes(flow_events(Some(&a), &ab)).len(), 1);
        assert_eq!(notes(flow_events(Some(&ab), &a)), vec![]);
    }

    #[test]
    fn events_follow_changes_not_reconciles() {
        let by_name = |n: &str| cases().into_iter().find(|c| c.name == n).unwrap();
        let reasons = |ev: Vec<StatusEvent>| {
            ev.into_iter()
                .map(|e| (e.severity, e.reason.as_str()))
                .collect::<Vec<_>>()
        };

        let c = by_name("DataLoss on a partition");
        let st = fold(&c, t(100));
        assert_eq!(
            reasons(flow_events(None, &st)),
            vec![(EventSeverity::Warning, "DataLoss")]
        );
        assert_eq!(
            reasons(flow_events(Some(&st), &st)),
            vec![],
            "no repeat while nothing changes"
        );

        let c = by_name("TopicReset on a partition");
        let st = fold(&c, t(100));
        assert_eq!(
            reasons(flow_events(None, &st)),
            vec![(EventSeverity::Warning, "TopicReset")]
        );

        let c = by_name("invalid spec");
        let st = fold(&c, t(100));
        let ev = flow_events(None, &st);
        assert_eq!(
            reasons(ev.clone()),
            vec![(EventSeverity::Warning, "InvalidSpec")]
        );
        assert!(ev[0].note.contains("spec.topics.include[0]"));

        let prev = fold(&by_name("reset in progress"), t(100));
        let st = fold(&by_name("reset applied by every worker"), t(100));
        assert_eq!(
            reasons(flow_events(Some(&prev), &st)),
            vec![(EventSeverity::Normal, "ResetApplied")]
        );
        let st = fold(&by_name("reset refused"), t(100));
        let ev = flow_events(Some(&prev), &st);
        assert_eq!(
            reasons(ev.clone()),
            vec![(EventSeverity::Warning, "ResetRefused")]
        );
        assert!(
            ev[0].note.contains("orders/3 is not failed"),
            "{}",
            ev[0].note
        );

        let st = fold(&by_name("all running"), t(100));
        assert_eq!(reasons(flow_events(None, &st)), vec![]);
    }

    #[test]
    fn a_child_problem_is_one_event_per_distinct_problem() {
        use crate::api::status::{condition, CHILD_CONFLICT};
        let ready = |reason: &str, message: &str| MirrorFlowStatus {
            conditions: vec![condition(
                &[],
                READY,
                "False",
                reason,
                message.into(),
                Some(1),
                t(1),
            )],
            ..Default::default()
        };
        let conflict = ready(CHILD_CONFLICT, "StatefulSet orders-worker already exists");
        let ev = flow_events(None, &conflict);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].severity, ev[0].reason.as_str()),
            (EventSeverity::Warning, "ChildConflict")
        );
        assert_eq!(flow_events(Some(&conflict), &conflict), vec![], "no repeat");
        let other = ready(APPLY_FAILED, "applying StatefulSet orders-worker: invalid");
        assert_eq!(
            flow_events(Some(&conflict), &other)[0].reason.as_str(),
            "ApplyFailed"
        );
        let overlap = ready(TARGET_OVERLAP, "MirrorFlow a/b (created earlier) ...");
        assert_eq!(
            flow_events(Some(&other), &overlap)[0].reason.as_str(),
            "TargetOverlap"
        );
        assert_eq!(flow_events(Some(&overlap), &overlap), vec![], "no repeat");
        assert_eq!(flow_events(None, &ready("WorkersStarting", "")), vec![]);
    }

    #[test]
    fn flow_not_found_is_one_event_per_change() {
        let st = fold_cp(FlowRefState::NotFound, None, None);
        let ev = checkpoint_events(None, &st);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].reason.as_str(), "FlowNotFound");
        assert_eq!(
            checkpoint_events(Some(&st), &st),
            vec![],
            "no event per requeue"
        );
        let fine = fold_cp(FlowRefState::Found { invalid: false }, None, None);
        assert_eq!(checkpoint_events(Some(&st), &fine), vec![]);
    }

    #[test]
    fn a_failing_runner_is_one_event_until_it_recovers() {
        use crate::api::status::CheckpointReports;
        let found = FlowRefState::Found { invalid: false };
        let failing = |error: &str| {
            let reports = CheckpointReports {
                error: Some(error.into()),
                ..Default::default()
            };
            fold_cp(found, None, Some(&reports))
        };
        let timed_out = failing("target cluster dc2: list consumer groups: timed out");
        let ev = checkpoint_events(None, &timed_out);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].severity, ev[0].reason.as_str()),
            (EventSeverity::Warning, "CheckpointFailed")
        );
        assert_eq!(
            ev[0].note,
            "target cluster dc2: list consumer groups: timed out"
        );
        let refused = failing("target cluster dc2: connection refused");
        assert_eq!(
            checkpoint_events(Some(&timed_out), &refused),
            vec![],
            "another wording of the same failure"
        );
        let fine = fold_cp(found, None, Some(&CheckpointReports::default()));
        assert_eq!(checkpoint_events(Some(&refused), &fine), vec![]);
        assert_eq!(
            checkpoint_events(Some(&fine), &timed_out).len(),
            1,
            "failing again after a recovery"
        );
    }
}

#[cfg(test)]
mod connection_tests {
    use super::*;
    use crate::api::status::condition;
    use jiff::Timestamp;

    #[test]
    fn a_failover_outcome_is_one_event() {
        use crate::api::{FailoverMode, FailoverPhase, FailoverReport};
        let st = |id: &str, phase| MirrorFlowStatus {
            failover: Some(FailoverReport {
                not_replicated: Some(0),
                ..FailoverReport::new(id, FailoverMode::Planned, phase)
            }),
            ..Default::default()
        };
        let reason = |prev: Option<&MirrorFlowStatus>, next: &MirrorFlowStatus| {
            flow_events(prev, next)
                .iter()
                .map(|e| (e.severity, e.reason))
                .collect::<Vec<_>>()
        };
        let draining = st("m1", FailoverPhase::Draining);
        let done = st("m1", FailoverPhase::Done);
        let cases = [
            (None, &draining, vec![], "not final yet"),
            (
                Some(&draining),
                &done,
                vec![(EventSeverity::Normal, EventReason::FailedOver)],
                "done",
            ),
            (Some(&done), &done, vec![], "once, not per reconcile"),
            (
                Some(&draining),
                &st("m1", FailoverPhase::TimedOut),
                vec![(EventSeverity::Warning, EventReason::FailoverTimedOut)],
                "timed out",
            ),
            (
                Some(&done),
                &st("m2", FailoverPhase::Refused),
                vec![(EventSeverity::Warning, EventReason::FailoverRefused)],
                "a new id refused",
            ),
        ];
        for (prev, next, want, name) in cases {
            assert_eq!(reason(prev, next), want, "{name}");
        }
        assert_eq!(
            flow_events(Some(&draining), &done)[0].note,
            "failover \"m1\" (Planned): Done, 0 record(s) not replicated, 0 group(s) committed on the target"
        );
    }

    #[test]
    fn connection_and_insecure_tls_events() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let st = |conds: Vec<Condition>| MirrorFlowStatus {
            conditions: conds,
            ..Default::default()
        };
        let failed = st(vec![
            condition(
                &[],
                CONNECTION_FAILED,
                "True",
                "AuthenticationFailed",
                "target cluster dc2: authentication failed: x".into(),
                None,
                now,
            ),
            condition(
                &[],
                INSECURE_TLS,
                "True",
                "InsecureSkipVerify",
                "spec.source.tls.insecureSkipVerify".into(),
                None,
                now,
            ),
            condition(
                &[],
                TOPIC_UNWRITABLE,
                "True",
                "TargetTopicsUnwritable",
                "topic dc1.orders has replication factor 1 but min.insync.replicas=2".into(),
                None,
                now,
            ),
        ]);
        let ev: Vec<(EventSeverity, &str)> = flow_events(None, &failed)
            .iter()
            .map(|e| (e.severity, e.reason.as_str()))
            .collect();
        assert_eq!(
            ev,
            vec![
                (EventSeverity::Warning, "AuthenticationFailed"),
                (EventSeverity::Warning, "InsecureTls"),
                (EventSeverity::Warning, "TopicUnwritable")
            ]
        );
        assert!(flow_events(Some(&failed), &failed).is_empty(), "no repeat");
    }
}
