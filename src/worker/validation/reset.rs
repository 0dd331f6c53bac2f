//! Recovery planning: turn a `spec.reset` request into per-partition seek actions, or refuse it.
//!
//! Pure: the engine passes the request, the partitions currently failed and the id of the
//! request it handled last, and gets back what to do. It resolves the real offsets
//! ([`SeekTarget`]) against the source itself, then records the outcome with
//! [`ResetDecision::status`] (or [`failed_status`] when the seek itself failed).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    AppliedReset, FailureType, PartitionFailure, ResetOutcome, ResetRequest, ResetStrategy,
    SkippedRecord, TopicPartitionRef,
};

/// Where a reset partition resumes; the engine resolves the actual offset on the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeekTarget {
    /// The partition's current log start offset (the earliest offset still stored).
    LogStart,
    /// The partition's current high watermark: only records written from now on.
    End,
    /// After the records already on the target: the source offset following the last offset
    /// sync on the target (ProgressMissing).
    AfterTarget,
    /// The offset after the rejected record (the failure's `requested_offset` + 1): that one
    /// record is skipped (RecordRejected).
    AfterRecord,
    /// The rejected record itself (the failure's `requested_offset`): it is sent again
    /// (RecordRejected).
    AtRecord,
}

/// One partition to move and why it was stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionResetAction {
    /// The source partition.
    pub tp: TopicPartitionRef,
    /// Where it resumes.
    pub target: SeekTarget,
    /// The failure this action clears.
    pub previous_failure: PartitionFailure,
}

/// What to do with a reset request.
#[derive(Clone, Debug, PartialEq)]
pub enum ResetDecision {
    /// The request id was already handled; do nothing and keep the existing status record.
    NoOp,
    /// Nothing is reset; the message says why and how to fix the request.
    Refused(String),
    /// Seek every listed partition, then clear its failure. Sorted by topic and partition.
    Apply(Vec<PartitionResetAction>),
    /// Apply `actions`; the other partitions the request names are not failed or not
    /// compatible with its strategy, as `skipped` says.
    ApplySome {
        actions: Vec<PartitionResetAction>,
        skipped: String,
    },
}

impl ResetDecision {
    /// The partitions to move, if any.
    pub fn actions(&self) -> &[PartitionResetAction] {
        match self {
            ResetDecision::Apply(a) | ResetDecision::ApplySome { actions: a, .. } => a,
            ResetDecision::NoOp | ResetDecision::Refused(_) => &[],
        }
    }
}

/// The strategies that may clear a failure of this type (the reasons: [`plan_reset`]).
pub fn allowed_strategies(failure: FailureType) -> &'static [ResetStrategy] {
    match failure {
        FailureType::DataLoss => &[
            ResetStrategy::ResumeFromLogStart,
            ResetStrategy::SkipToLatest,
        ],
        FailureType::TopicReset => &[
            ResetStrategy::RestartFromEarliest,
            ResetStrategy::SkipToLatest,
        ],
        FailureType::ProgressMissing => &[
            ResetStrategy::ResumeFromTarget,
            ResetStrategy::RestartFromEarliest,
            ResetStrategy::SkipToLatest,
        ],
        FailureType::RecordRejected => &[
            ResetStrategy::SkipRecord,
            ResetStrategy::RetryRecord,
            ResetStrategy::SkipToLatest,
        ],
    }
}

/// Where a partition with this failure resumes under this strategy, or `None` if the strategy
/// is not allowed for the failure (see [`plan_reset`]).
pub fn seek_target(failure: FailureType, strategy: ResetStrategy) -> Option<SeekTarget> {
    use FailureType as F;
    use ResetStrategy as S;
    // Spelled out pair by pair: a new type or strategy must be decided here, not defaulted.
    match (failure, strategy) {
        (_, S::SkipToLatest) => Some(SeekTarget::End),
        (F::DataLoss, S::ResumeFromLogStart) => Some(SeekTarget::LogStart),
        (F::TopicReset, S::RestartFromEarliest) => Some(SeekTarget::LogStart),
        (F::ProgressMissing, S::RestartFromEarliest) => Some(SeekTarget::LogStart),
        (F::ProgressMissing, S::ResumeFromTarget) => Some(SeekTarget::AfterTarget),
        (F::RecordRejected, S::SkipRecord) => Some(SeekTarget::AfterRecord),
        (F::RecordRejected, S::RetryRecord) => Some(SeekTarget::AtRecord),
        (F::DataLoss, S::RestartFromEarliest)
        | (F::TopicReset | F::ProgressMissing | F::RecordRejected, S::ResumeFromLogStart)
        | (F::RecordRejected, S::RestartFromEarliest)
        | (F::DataLoss | F::TopicReset | F::RecordRejected, S::ResumeFromTarget)
        | (F::DataLoss | F::TopicReset | F::ProgressMissing, S::SkipRecord | S::RetryRecord) => {
            None
        }
    }
}

/// Where a RecordRejected partition resumes (`AfterRecord`: skip it; `AtRecord`: send it
/// again), given the failure's offset and the partition's position now. The two must agree
/// (the position stops at the rejected record); otherwise nothing moves: skipping from
/// another position would skip, or replay, records nobody chose.
pub fn record_seek(
    target: SeekTarget,
    rejected_offset: i64,
    position: Option<i64>,
) -> Result<i64, SeekError> {
    if position != Some(rejected_offset) {
        return Err(SeekError::PositionMoved {
            position,
            rejected: rejected_offset,
        });
    }
    match target {
        SeekTarget::AfterRecord => Ok(rejected_offset + 1),
        SeekTarget::AtRecord => Ok(rejected_offset),
        other => Err(SeekError::NotARecordSeek(other)),
    }
}

/// Why [`record_seek`] moves nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeekError {
    /// The partition is no longer at the rejected record.
    #[error(
        "the partition's position is {}, not the rejected record's offset {rejected}; \
         nothing was moved",
        position.map_or_else(|| "unknown".to_string(), |p| p.to_string())
    )]
    PositionMoved {
        /// Where the partition is (`None`: unknown).
        position: Option<i64>,
        /// The rejected record's offset.
        rejected: i64,
    },
    /// Asked of a seek that is not to a record (a caller's mistake).
    #[error("{0:?} is not a record seek")]
    NotARecordSeek(SeekTarget),
}

/// The spelling used in the CRD (`spec.reset.strategy`).
pub fn strategy_name(strategy: ResetStrategy) -> &'static str {
    match strategy {
        ResetStrategy::ResumeFromLogStart => "ResumeFromLogStart",
        ResetStrategy::RestartFromEarliest => "RestartFromEarliest",
        ResetStrategy::SkipToLatest => "SkipToLatest",
        ResetStrategy::ResumeFromTarget => "ResumeFromTarget",
        ResetStrategy::SkipRecord => "SkipRecord",
        ResetStrategy::RetryRecord => "RetryRecord",
    }
}

/// The spelling used in the CRD (`status.failures[].type`).
pub fn failure_type_name(failure: FailureType) -> &'static str {
    match failure {
        FailureType::DataLoss => "DataLoss",
        FailureType::TopicReset => "TopicReset",
        FailureType::ProgressMissing => "ProgressMissing",
        FailureType::RecordRejected => "RecordRejected",
    }
}

/// Human form of a partition: `topic "orders" partition 3`.
pub fn describe_tp(tp: &TopicPartitionRef) -> String {
    format!("topic \"{}\" partition {}", tp.topic, tp.partition)
}

/// Decide what a reset request does.
///
/// Rules:
/// - **At most once.** A request whose id equals the last handled id is a [`ResetDecision::NoOp`].
///   A request that was Applied or Refused consumes its id: otherwise a refused request would
///   sit in the spec and apply by surprise later, when the partitions it names happen to fail.
///   The engine persists the id so this holds across restarts. A Failed one (the source could
///   not be asked where to seek) does not: the engine tries it again.
/// - **Scope.** Named partitions must all be failed; naming a healthy one refuses the request
///   and the message names the healthy ones. No partitions named means every failed partition.
///   Nothing failed at all → refused ("nothing to reset").
///   `failed` must hold every failed partition the request may name: a partition missing from
///   it counts as healthy. With several workers, plan against the flow-wide list (or filter the
///   request to the worker's own partitions before calling).
/// - **Strategy per failure type** ([`allowed_strategies`]):
///   - DataLoss: `ResumeFromLogStart` (accept the gap) or `SkipToLatest`.
///     `RestartFromEarliest` is refused: on the same topic "earliest" is the log start, so it
///     would accept the gap under a name that does not say so. Accepting lost records must be
///     an explicit decision.
///   - TopicReset: `RestartFromEarliest` or `SkipToLatest`. `ResumeFromLogStart` is refused:
///     the recreated topic's records land after the old topic's records already on the target,
///     and the operator must choose that knowingly (`RestartFromEarliest`) rather than "resume"
///     a topic that no longer exists.
///   - ProgressMissing: `ResumeFromTarget`, `RestartFromEarliest` or `SkipToLatest`.
///   - RecordRejected (the target refused one record for good; everything before it is
///     replicated, nothing after it written): `SkipRecord` (skip exactly that offset, resume
///     at offset + 1; the status names the skipped record), `RetryRecord` (send it again once
///     the target accepts it) or `SkipToLatest`. `ResumeFromLogStart` and
///     `RestartFromEarliest` are refused: nothing was lost or recreated, and both would send
///     again every record already replicated before the rejected one. `ResumeFromTarget` is
///     refused: the position is known.
///   - `SkipRecord` and `RetryRecord` clear nothing else: their offset comes from the
///     rejected record, which only a RecordRejected failure has.
///   - `SkipToLatest` works for every type.
/// - **What applies is applied.** Partitions that are healthy or incompatible with the strategy
///   are left alone and named in the outcome ([`ResetDecision::ApplySome`]), so a follow-up
///   request (new id, other strategy) can target exactly them; only a request of which nothing
///   applies is refused.
pub fn plan_reset(
    req: &ResetRequest,
    failed: &[PartitionFailure],
    last_applied_id: Option<&str>,
) -> ResetDecision {
    if last_applied_id == Some(req.id.as_str()) {
        return ResetDecision::NoOp;
    }
    let strategy = strategy_name(req.strategy);

    // One entry per partition; if a partition is reported twice with different types (e.g. by
    // two workers during a handover), DataLoss wins, as in classification.
    let mut by_tp: BTreeMap<TopicPartitionRef, &PartitionFailure> = BTreeMap::new();
    for f in failed {
        let tp = TopicPartitionRef {
            topic: f.topic.clone(),
            partition: f.partition,
        };
        match by_tp.get(&tp) {
            Some(prev) if prev.type_ == FailureType::DataLoss => {}
            _ => {
                by_tp.insert(tp, f);
            }
        }
    }

    let mut named: Vec<TopicPartitionRef> = req.partitions.clone();
    named.sort();
    named.dedup();

    if by_tp.is_empty() {
        let mut msg = format!(
            "Reset request \"{}\" ({strategy}) refused: nothing to reset, no partition is failed.",
            req.id
        );
        if !named.is_empty() {
            let _ = write!(msg, " Named but healthy: {}.", list_tps(&named));
        }
        return ResetDecision::Refused(msg);
    }

    let (selected, healthy): (Vec<TopicPartitionRef>, Vec<TopicPartitionRef>) = if named.is_empty()
    {
        (by_tp.keys().cloned().collect(), Vec::new())
    } else {
        named.into_iter().partition(|tp| by_tp.contains_key(tp))
    };

    let mut actions = Vec::new();
    let mut incompatible = Vec::new();
    for tp in selected {
        let failure = by_tp[&tp];
        match seek_target(failure.type_, req.strategy) {
            Some(target) => actions.push(PartitionResetAction {
                tp,
                target,
                previous_failure: failure.clone(),
            }),
            None => incompatible.push(failure),
        }
    }

    if healthy.is_empty() && incompatible.is_empty() {
        return ResetDecision::Apply(actions);
    }

    let mut msg = String::new();
    if !healthy.is_empty() {
        let _ = write!(
            msg,
            " Not failed: {}. Name only failed partitions, or leave `partitions` empty to reset \
             every failed partition.",
            list_tps(&healthy)
        );
    }
    for f in &incompatible {
        let _ = write!(msg, " {}", incompatibility(f, req.strategy));
    }
    let first = by_tp.values().map(|f| f.type_).next();
    if by_tp.values().any(|f| Some(f.type_) != first) {
        let _ = write!(
            msg,
            " Failed partitions have different types: send one request per strategy, listing \
             its partitions in `partitions`, or use SkipToLatest for all."
        );
    }
    if !actions.is_empty() {
        // What applies is applied; the rest is named, so a follow-up request can target it.
        return ResetDecision::ApplySome {
            actions,
            skipped: format!(" Not reset:{msg}"),
        };
    }
    ResetDecision::Refused(format!(
        "Reset request \"{}\" ({strategy}) refused; nothing was reset.{msg} Patch spec.reset \
         again with a new id.",
        req.id
    ))
}

/// Why `strategy` cannot clear `f`, and what can.
fn incompatibility(f: &PartitionFailure, strategy: ResetStrategy) -> String {
    let tp = TopicPartitionRef {
        topic: f.topic.clone(),
        partition: f.partition,
    };
    let what = failure_summary(f);
    // Only called for pairs `seek_target` refused.
    let purpose = match strategy {
        ResetStrategy::ResumeFromLogStart => "ResumeFromLogStart is for DataLoss",
        ResetStrategy::RestartFromEarliest => {
            "RestartFromEarliest is for TopicReset and ProgressMissing"
        }
        ResetStrategy::ResumeFromTarget => {
            "ResumeFromTarget is for ProgressMissing (a partition without progress whose target \
             topic already holds records)"
        }
        ResetStrategy::SkipRecord | ResetStrategy::RetryRecord => {
            "SkipRecord and RetryRecord are for RecordRejected (a record the target refused for \
             good), the only failure that names one record"
        }
        ResetStrategy::SkipToLatest => "SkipToLatest clears every failure",
    };
    let consequence = match (f.type_, strategy) {
        (FailureType::DataLoss, ResetStrategy::RestartFromEarliest) => {
            "; here it would skip the deleted records without saying so"
        }
        (FailureType::RecordRejected, ResetStrategy::ResumeFromLogStart)
        | (FailureType::RecordRejected, ResetStrategy::RestartFromEarliest) => {
            "; here nothing was lost or recreated, and it would send again every record \
             already replicated before the rejected one"
        }
        _ => "",
    };
    let remedy = match f.type_ {
        FailureType::DataLoss => {
            "Use ResumeFromLogStart to accept the gap and resume at the log start, or \
             SkipToLatest to replicate only records written from now on."
        }
        FailureType::TopicReset => {
            "The topic was recreated: use RestartFromEarliest to replicate the new topic from \
             its beginning (its records are appended on the target after the records already \
             mirrored from the old topic), or SkipToLatest to replicate only records written \
             from now on."
        }
        FailureType::ProgressMissing => {
            "No progress is recorded: use ResumeFromTarget to resume after the records already \
             on the target, RestartFromEarliest to replicate the partition again from its log \
             start, or SkipToLatest."
        }
        FailureType::RecordRejected => {
            "Use SkipRecord to skip exactly the rejected record, RetryRecord to send it again \
             once the target accepts it (e.g. after raising the target topic's \
             max.message.bytes), or SkipToLatest."
        }
    };
    format!(
        "Incompatible: {} is {} ({what}), which {} cannot clear: {purpose}{consequence}. {remedy}",
        describe_tp(&tp),
        failure_type_name(f.type_),
        strategy_name(strategy)
    )
}

/// `requested offset 120, log start 500, 380 records lost`.
fn failure_summary(f: &PartitionFailure) -> String {
    if f.type_ == FailureType::RecordRejected {
        return format!(
            "record at offset {} rejected by the target: {}",
            f.requested_offset,
            f.reason.as_deref().unwrap_or("reason unknown")
        );
    }
    let mut s = format!("requested offset {}", f.requested_offset);
    match f.log_start_offset {
        Some(ls) => {
            let _ = write!(s, ", log start {ls}");
        }
        None => s.push_str(", log start unknown"),
    }
    if let Some(n) = f.records_lost {
        let _ = write!(s, ", {n} records lost");
    }
    s
}

fn list_tps(tps: &[TopicPartitionRef]) -> String {
    tps.iter().map(describe_tp).collect::<Vec<_>>().join(", ")
}

impl ResetDecision {
    /// The status record for this decision (`status.lastAppliedReset`), or `None` for `NoOp`
    /// (keep the existing record). Call it for `Apply` once the seeks succeeded; if they did
    /// not, use [`failed_status`].
    pub fn status(&self, req: &ResetRequest, time: Time) -> Option<AppliedReset> {
        match self {
            ResetDecision::NoOp => None,
            ResetDecision::Refused(reason) => Some(AppliedReset {
                id: req.id.clone(),
                time,
                outcome: ResetOutcome::Refused,
                message: Some(reason.clone()),
                partitions: Vec::new(),
                skipped_records: Vec::new(),
            }),
            ResetDecision::Apply(_) | ResetDecision::ApplySome { .. } => {
                let actions = self.actions();
                let mut msg = format!(
                    "Reset request \"{}\" ({}) applied to {} partition(s):",
                    req.id,
                    strategy_name(req.strategy),
                    actions.len()
                );
                let parts: Vec<String> = actions
                    .iter()
                    .map(|a| {
                        let to: String = match a.target {
                            SeekTarget::LogStart => "resumes at the log start".into(),
                            SeekTarget::End => "resumes at the end".into(),
                            SeekTarget::AfterTarget => {
                                "resumes after the records already on the target".into()
                            }
                            SeekTarget::AfterRecord => format!(
                                "skips the record at offset {} and resumes at offset {}",
                                a.previous_failure.requested_offset,
                                a.previous_failure.requested_offset + 1
                            ),
                            SeekTarget::AtRecord => format!(
                                "resumes at offset {}, sending the rejected record again",
                                a.previous_failure.requested_offset
                            ),
                        };
                        format!(
                            " {} ({}, {}) {to}",
                            describe_tp(&a.tp),
                            failure_type_name(a.previous_failure.type_),
                            failure_summary(&a.previous_failure)
                        )
                    })
                    .collect();
                msg.push_str(&parts.join(";"));
                msg.push('.');
                if let ResetDecision::ApplySome { skipped, .. } = self {
                    msg.push_str(skipped);
                }
                Some(AppliedReset {
                    id: req.id.clone(),
                    time,
                    outcome: ResetOutcome::Applied,
                    message: Some(msg),
                    partitions: actions.iter().map(|a| a.tp.clone()).collect(),
                    skipped_records: skipped_records(actions),
                })
            }
        }
    }
}

/// The status record when an `Apply` decision could not be carried out (e.g. the log start
/// lookup failed). The id is still consumed: the operator retries with a new id.
pub fn failed_status(
    req: &ResetRequest,
    actions: &[PartitionResetAction],
    error: &str,
    time: Time,
) -> AppliedReset {
    let tps: Vec<TopicPartitionRef> = actions.iter().map(|a| a.tp.clone()).collect();
    AppliedReset {
        id: req.id.clone(),
        time,
        outcome: ResetOutcome::Failed,
        message: Some(format!(
            "Reset request \"{}\" ({}) failed for {}: {error}. The partitions stay failed; the \
             worker tries again at its next topic refresh (patch spec.reset with a new id to \
             change the request).",
            req.id,
            strategy_name(req.strategy),
            list_tps(&tps)
        )),
        partitions: Vec::new(),
        skipped_records: Vec::new(),
    }
}

/// The records `SkipRecord` actions skip (for `status.lastAppliedReset.skippedRecords`).
pub fn skipped_records(actions: &[PartitionResetAction]) -> Vec<SkippedRecord> {
    actions
        .iter()
        .filter(|a| a.target == SeekTarget::AfterRecord)
        .map(|a| SkippedRecord {
            topic: a.tp.topic.clone(),
            partition: a.tp.partition,
            offset: a.previous_failure.requested_offset,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn t0() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
    }

    fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
        TopicPartitionRef::new(topic, partition)
    }

    fn dataloss(topic: &str, partition: i32) -> PartitionFailure {
        PartitionFailure {
            type_: FailureType::DataLoss,
            topic: topic.into(),
            partition,
            requested_offset: 120,
            log_start_offset: Some(500),
            records_lost: Some(380),
            detected_at: t0(),
            reason: None,
            message: None,
        }
    }

    fn topicreset(topic: &str, partition: i32) -> PartitionFailure {
        PartitionFailure {
            type_: FailureType::TopicReset,
            topic: topic.into(),
            partition,
            requested_offset: 120,
            log_start_offset: Some(0),
            records_lost: None,
            detected_at: t0(),
            reason: None,
            message: None,
        }
    }

    fn rejected(topic: &str, partition: i32) -> PartitionFailure {
        PartitionFailure {
            type_: FailureType::RecordRejected,
            topic: topic.into(),
            partition,
            requested_offset: 42,
            log_start_offset: None,
            records_lost: None,
            detected_at: t0(),
            reason: Some("Broker: Message size too large (MessageSizeTooLarge)".into()),
            message: None,
        }
    }

    fn req(id: &str, strategy: ResetStrategy, partitions: Vec<TopicPartitionRef>) -> ResetRequest {
        ResetRequest {
            id: id.into(),
            strategy,
            partitions,
        }
    }

    use FailureType::{DataLoss, ProgressMissing, RecordRejected, TopicReset};
    use ResetStrategy::{
        RestartFromEarliest, ResumeFromLogStart, ResumeFromTarget, RetryRecord, SkipRecord,
        SkipToLatest,
    };

    #[test]
    fn strategy_table() {
        use SeekTarget::{AfterRecord, AfterTarget, AtRecord, End, LogStart};
        // Every (type, strategy) pair: 4 types x 6 strategies.
        let rows = [
            (DataLoss, ResumeFromLogStart, Some(LogStart)),
            (DataLoss, RestartFromEarliest, None),
            (DataLoss, SkipToLatest, Some(End)),
            (DataLoss, ResumeFromTarget, None),
            (DataLoss, SkipRecord, None),
            (DataLoss, RetryRecord, None),
            (TopicReset, ResumeFromLogStart, None),
            (TopicReset, RestartFromEarliest, Some(LogStart)),
            (TopicReset, SkipToLatest, Some(End)),
            (TopicReset, ResumeFromTarget, None),
            (TopicReset, SkipRecord, None),
            (TopicReset, RetryRecord, None),
            (ProgressMissing, ResumeFromLogStart, None),
            (ProgressMissing, RestartFromEarliest, Some(LogStart)),
            (ProgressMissing, SkipToLatest, Some(End)),
            (ProgressMissing, ResumeFromTarget, Some(AfterTarget)),
            (ProgressMissing, SkipRecord, None),
            (ProgressMissing, RetryRecord, None),
            // A rejected record: nothing was lost or recreated, so the log start means
            // re-sending what is replicated; the position is known, so no ResumeFromTarget.
            (RecordRejected, ResumeFromLogStart, None),
            (RecordRejected, RestartFromEarliest, None),
            (RecordRejected, SkipToLatest, Some(End)),
            (RecordRejected, ResumeFromTarget, None),
            (RecordRejected, SkipRecord, Some(AfterRecord)),
            (RecordRejected, RetryRecord, Some(AtRecord)),
        ];
        for (t, s, want) in rows {
            assert_eq!(seek_target(t, s), want, "{t:?} {s:?}");
            assert_eq!(
                allowed_strategies(t).contains(&s),
                want.is_some(),
                "{t:?} {s:?}"
            );
        }
    }

    #[test]
    fn single_partition_rows() {
        // (failure, strategy, applied target or refusal fragments)
        type Row = (
            PartitionFailure,
            ResetStrategy,
            Result<SeekTarget, &'static [&'static str]>,
        );
        let rows: Vec<Row> =
            vec![
            (
                dataloss("orders", 3),
                ResumeFromLogStart,
                Ok(SeekTarget::LogStart),
            ),
            (dataloss("orders", 3), SkipToLatest, Ok(SeekTarget::End)),
            (
                dataloss("orders", 3),
                RestartFromEarliest,
                Err(&[
                    "topic \"orders\" partition 3 is DataLoss",
                    "requested offset 120, log start 500, 380 records lost",
                    "Use ResumeFromLogStart",
                    "SkipToLatest",
                    "new id",
                ]),
            ),
            (
                topicreset("orders", 3),
                RestartFromEarliest,
                Ok(SeekTarget::LogStart),
            ),
            (topicreset("orders", 3), SkipToLatest, Ok(SeekTarget::End)),
            (
                topicreset("orders", 3),
                ResumeFromLogStart,
                Err(&[
                    "topic \"orders\" partition 3 is TopicReset",
                    "requested offset 120, log start 0",
                    "use RestartFromEarliest",
                    "appended on the target after the records already mirrored",
                    "SkipToLatest",
                    "new id",
                ]),
            ),
            (rejected("orders", 3), SkipRecord, Ok(SeekTarget::AfterRecord)),
            (rejected("orders", 3), RetryRecord, Ok(SeekTarget::AtRecord)),
            (rejected("orders", 3), SkipToLatest, Ok(SeekTarget::End)),
            (
                rejected("orders", 3),
                ResumeFromLogStart,
                Err(&[
                    "topic \"orders\" partition 3 is RecordRejected",
                    "record at offset 42 rejected by the target: Broker: Message size too large",
                    "would send again every record already replicated",
                    "Use SkipRecord to skip exactly the rejected record",
                    "RetryRecord",
                    "new id",
                ]),
            ),
            (
                rejected("orders", 3),
                RestartFromEarliest,
                Err(&[
                    "is RecordRejected",
                    "would send again every record already replicated",
                    "Use SkipRecord",
                ]),
            ),
            (
                rejected("orders", 3),
                ResumeFromTarget,
                Err(&["is RecordRejected", "ResumeFromTarget is for ProgressMissing"]),
            ),
            // SkipRecord is refused, clearly, for every failure that is not a rejected record.
            (
                dataloss("orders", 3),
                SkipRecord,
                Err(&[
                    "topic \"orders\" partition 3 is DataLoss",
                    "which SkipRecord cannot clear",
                    "SkipRecord and RetryRecord are for RecordRejected",
                    "Use ResumeFromLogStart",
                ]),
            ),
            (
                topicreset("orders", 3),
                SkipRecord,
                Err(&[
                    "is TopicReset",
                    "which SkipRecord cannot clear",
                    "use RestartFromEarliest",
                ]),
            ),
            (
                topicreset("orders", 3),
                RetryRecord,
                Err(&["is TopicReset", "which RetryRecord cannot clear"]),
            ),
        ];
        for (failure, strategy, want) in rows {
            for named in [vec![], vec![tp("orders", 3)]] {
                let r = req("r1", strategy, named.clone());
                let got = plan_reset(&r, std::slice::from_ref(&failure), None);
                match (&want, got) {
                    (Ok(target), ResetDecision::Apply(actions)) => assert_eq!(
                        actions,
                        vec![PartitionResetAction {
                            tp: tp("orders", 3),
                            target: *target,
                            previous_failure: failure.clone(),
                        }]
                    ),
                    (Err(fragments), ResetDecision::Refused(msg)) => {
                        assert!(msg.contains("\"r1\""), "{msg}");
                        for f in *fragments {
                            assert!(msg.contains(f), "missing {f:?} in {msg}");
                        }
                    }
                    (want, got) => {
                        panic!("{failure:?} {strategy:?} {named:?}: want {want:?}, got {got:?}")
                    }
                }
            }
        }
    }

    #[test]
    fn skip_record_status_names_exactly_the_skipped_record() {
        let failed = [
            rejected("orders", 3),
            rejected("orders", 5),
            dataloss("pay", 0),
        ];
        // Every failed partition: the rejected ones apply, the DataLoss one is named.
        let r = req("skip-1", SkipRecord, vec![]);
        let d = plan_reset(&r, &failed, None);
        let ResetDecision::ApplySome { actions, skipped } = &d else {
            panic!("{d:?}")
        };
        assert_eq!(actions.len(), 2);
        assert!(
            skipped.contains("topic \"pay\" partition 0 is DataLoss"),
            "{skipped}"
        );
        assert!(skipped.contains("one request per strategy"), "{skipped}");
        let rec = d.status(&r, t0()).unwrap();
        assert_eq!(rec.outcome, ResetOutcome::Applied);
        assert_eq!(rec.partitions, vec![tp("orders", 3), tp("orders", 5)]);
        assert_eq!(
            rec.skipped_records,
            vec![
                SkippedRecord {
                    topic: "orders".into(),
                    partition: 3,
                    offset: 42
                },
                SkippedRecord {
                    topic: "orders".into(),
                    partition: 5,
                    offset: 42
                },
            ]
        );
        let msg = rec.message.unwrap();
        assert!(
            msg.contains("topic \"orders\" partition 3 (RecordRejected, record at offset 42 rejected by the target: Broker: Message size too large (MessageSizeTooLarge)) skips the record at offset 42 and resumes at offset 43"),
            "{msg}"
        );
        // RetryRecord and SkipToLatest skip no single record: nothing listed.
        for s in [RetryRecord, SkipToLatest] {
            let r = req("r", s, vec![tp("orders", 3)]);
            let rec = plan_reset(&r, &failed, None).status(&r, t0()).unwrap();
            assert_eq!(rec.outcome, ResetOutcome::Applied, "{s:?}");
            assert!(rec.skipped_records.is_empty(), "{s:?}");
        }
        let r = req("r", RetryRecord, vec![tp("orders", 3)]);
        let msg = plan_reset(&r, &failed, None)
            .status(&r, t0())
            .unwrap()
            .message
            .unwrap();
        assert!(
            msg.contains("resumes at offset 42, sending the rejected record again"),
            "{msg}"
        );
        // Named on a partition that is not a rejected record: refused, nothing skipped.
        let r = req("r", SkipRecord, vec![tp("pay", 0)]);
        let d = plan_reset(&r, &failed, None);
        let rec = d.status(&r, t0()).unwrap();
        assert_eq!(rec.outcome, ResetOutcome::Refused);
        assert!(rec.skipped_records.is_empty());
        assert!(
            rec.message
                .unwrap()
                .contains("which SkipRecord cannot clear"),
            "refused with the reason"
        );
    }

    #[test]
    fn record_seek_table() {
        use SeekTarget::{AfterRecord, AtRecord, End};
        type Row = (SeekTarget, i64, Option<i64>, Result<i64, &'static str>);
        let rows: [Row; 6] = [
            // Exactly one offset skipped: everything before it is replicated.
            (AfterRecord, 42, Some(42), Ok(43)),
            (AtRecord, 42, Some(42), Ok(42)),
            (AfterRecord, 0, Some(0), Ok(1)),
            // The position moved (should not happen): never skip from elsewhere.
            (
                AfterRecord,
                42,
                Some(40),
                Err("position is 40, not the rejected record's offset 42"),
            ),
            (AtRecord, 42, None, Err("position is unknown")),
            (End, 42, Some(42), Err("not a record seek")),
        ];
        for (target, offset, position, want) in rows {
            let got = record_seek(target, offset, position);
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(*g, w, "{target:?} {offset} {position:?}"),
                (Err(w), Err(g)) => assert!(g.to_string().contains(w), "{g}"),
                _ => panic!("{target:?} {offset} {position:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn idempotent_id() {
        let failed = [topicreset("orders", 0)];
        let r = req("r1", SkipToLatest, vec![]);
        assert_eq!(plan_reset(&r, &failed, Some("r1")), ResetDecision::NoOp);
        // Even a request that would be refused is a no-op once its id was handled.
        assert_eq!(plan_reset(&r, &[], Some("r1")), ResetDecision::NoOp);
        // A different id is a new request.
        assert!(matches!(
            plan_reset(&r, &failed, Some("r0")),
            ResetDecision::Apply(_)
        ));
        assert!(matches!(
            plan_reset(&r, &failed, None),
            ResetDecision::Apply(_)
        ));
        assert_eq!(ResetDecision::NoOp.status(&r, t0()), None);
    }

    #[test]
    fn nothing_to_reset() {
        let r = req("r1", SkipToLatest, vec![]);
        let ResetDecision::Refused(msg) = plan_reset(&r, &[], None) else {
            panic!()
        };
        assert!(msg.contains("nothing to reset"), "{msg}");

        let r = req("r2", SkipToLatest, vec![tp("orders", 1)]);
        let ResetDecision::Refused(msg) = plan_reset(&r, &[], None) else {
            panic!()
        };
        assert!(msg.contains("nothing to reset"), "{msg}");
        assert!(msg.contains("topic \"orders\" partition 1"), "{msg}");
    }

    #[test]
    fn healthy_partitions_are_named_not_blocking() {
        let failed = [dataloss("orders", 0), dataloss("orders", 1)];
        let r = req(
            "r1",
            ResumeFromLogStart,
            vec![tp("orders", 0), tp("orders", 7), tp("pay", 2)],
        );
        let ResetDecision::ApplySome { actions, skipped } = plan_reset(&r, &failed, None) else {
            panic!()
        };
        assert_eq!(actions.len(), 1, "what applies is applied");
        assert_eq!(actions[0].tp, tp("orders", 0));
        assert!(
            skipped.contains("Not failed: topic \"orders\" partition 7"),
            "{skipped}"
        );
        let rec = ResetDecision::ApplySome { actions, skipped }
            .status(&r, t0())
            .unwrap();
        assert_eq!(rec.outcome, ResetOutcome::Applied);
        assert_eq!(rec.partitions, vec![tp("orders", 0)]);
        assert!(rec.message.unwrap().contains("Not reset:"));
        // Only healthy partitions named: nothing applies, refused.
        let r = req(
            "r1",
            ResumeFromLogStart,
            vec![tp("orders", 7), tp("pay", 2)],
        );
        let ResetDecision::Refused(msg) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        assert!(
            msg.contains("Not failed: topic \"orders\" partition 7, topic \"pay\" partition 2"),
            "{msg}"
        );
        assert!(
            !msg.contains("partition 0"),
            "failed partition named as healthy: {msg}"
        );
        assert!(msg.contains("leave `partitions` empty"), "{msg}");
        assert!(msg.contains("nothing was reset"), "{msg}");
    }

    #[test]
    fn mixed_batches() {
        let failed = [
            topicreset("orders", 1),
            dataloss("orders", 0),
            topicreset("pay", 0),
        ];
        // SkipToLatest clears everything, sorted by partition.
        let r = req("r1", SkipToLatest, vec![]);
        let ResetDecision::Apply(actions) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        let got: Vec<_> = actions
            .iter()
            .map(|a| (a.tp.clone(), a.target, a.previous_failure.type_))
            .collect();
        assert_eq!(
            got,
            vec![
                (tp("orders", 0), SeekTarget::End, DataLoss),
                (tp("orders", 1), SeekTarget::End, TopicReset),
                (tp("pay", 0), SeekTarget::End, TopicReset),
            ]
        );

        // RestartFromEarliest for all: the TopicReset partitions; the DataLoss one is named.
        let r = req("r2", RestartFromEarliest, vec![]);
        let ResetDecision::ApplySome {
            actions,
            skipped: msg,
        } = plan_reset(&r, &failed, None)
        else {
            panic!()
        };
        assert_eq!(actions.len(), 2);
        assert!(
            msg.contains("topic \"orders\" partition 0 is DataLoss"),
            "{msg}"
        );
        assert!(!msg.contains("partition 1 is"), "{msg}");
        assert!(msg.contains("one request per strategy"), "{msg}");

        // ResumeFromLogStart for all: the DataLoss partition; both TopicReset ones named.
        let r = req("r3", ResumeFromLogStart, vec![]);
        let ResetDecision::ApplySome {
            actions,
            skipped: msg,
        } = plan_reset(&r, &failed, None)
        else {
            panic!()
        };
        assert_eq!(actions[0].tp, tp("orders", 0));
        assert!(
            msg.contains("topic \"orders\" partition 1 is TopicReset"),
            "{msg}"
        );
        assert!(
            msg.contains("topic \"pay\" partition 0 is TopicReset"),
            "{msg}"
        );
        assert!(msg.contains("use RestartFromEarliest"), "{msg}");

        // Split by strategy: each request applies to its own partitions.
        let r = req(
            "r4",
            RestartFromEarliest,
            vec![tp("pay", 0), tp("orders", 1), tp("pay", 0)],
        );
        let ResetDecision::Apply(actions) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        let got: Vec<_> = actions.iter().map(|a| (a.tp.clone(), a.target)).collect();
        assert_eq!(
            got,
            vec![
                (tp("orders", 1), SeekTarget::LogStart),
                (tp("pay", 0), SeekTarget::LogStart)
            ]
        );
        let r = req("r5", ResumeFromLogStart, vec![tp("orders", 0)]);
        let ResetDecision::Apply(actions) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        assert_eq!(actions.len(), 1);
        assert_eq!(actions[0].target, SeekTarget::LogStart);

        // Healthy and incompatible together, nothing applies: refused, both reported.
        let r = req(
            "r6",
            ResumeFromLogStart,
            vec![tp("orders", 1), tp("orders", 9)],
        );
        let ResetDecision::Refused(msg) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        assert!(
            msg.contains("Not failed: topic \"orders\" partition 9"),
            "{msg}"
        );
        assert!(
            msg.contains("topic \"orders\" partition 1 is TopicReset"),
            "{msg}"
        );
    }

    #[test]
    fn duplicate_failure_reports_dataloss_wins() {
        for failed in [
            [topicreset("orders", 0), dataloss("orders", 0)],
            [dataloss("orders", 0), topicreset("orders", 0)],
        ] {
            let r = req("r1", SkipToLatest, vec![]);
            let ResetDecision::Apply(actions) = plan_reset(&r, &failed, None) else {
                panic!()
            };
            assert_eq!(actions.len(), 1);
            assert_eq!(actions[0].previous_failure.type_, DataLoss);
        }
    }

    #[test]
    fn status_records() {
        let failed = [dataloss("orders", 0), topicreset("pay", 1)];
        let r = req("r1", SkipToLatest, vec![]);
        let d = plan_reset(&r, &failed, None);
        let rec = d.status(&r, t0()).unwrap();
        assert_eq!(rec.id, "r1");
        assert_eq!(rec.time, t0());
        assert_eq!(rec.outcome, ResetOutcome::Applied);
        assert_eq!(rec.partitions, vec![tp("orders", 0), tp("pay", 1)]);
        let msg = rec.message.unwrap();
        assert!(msg.contains("topic \"orders\" partition 0 (DataLoss, requested offset 120, log start 500, 380 records lost) resumes at the end"), "{msg}");
        assert!(
            msg.contains(
                "topic \"pay\" partition 1 (TopicReset, requested offset 120, log start 0)"
            ),
            "{msg}"
        );

        let r = req("r2", ResumeFromLogStart, vec![]);
        let d = plan_reset(&r, &failed, None);
        let rec = d.status(&r, t0()).unwrap();
        assert_eq!(rec.outcome, ResetOutcome::Applied, "orders/0 applies");
        assert_eq!(rec.partitions, vec![tp("orders", 0)]);
        assert!(rec
            .message
            .unwrap()
            .contains("topic \"pay\" partition 1 is TopicReset"));

        let r = req("r3", SkipToLatest, vec![tp("orders", 0)]);
        let ResetDecision::Apply(actions) = plan_reset(&r, &failed, None) else {
            panic!()
        };
        let rec = failed_status(&r, &actions, "ListOffsets timed out", t0());
        assert_eq!(rec.outcome, ResetOutcome::Failed);
        assert!(rec.partitions.is_empty());
        let msg = rec.message.unwrap();
        assert!(
            msg.contains("topic \"orders\" partition 0: ListOffsets timed out"),
            "{msg}"
        );
        assert!(msg.contains("tries again"), "{msg}");
    }
}
