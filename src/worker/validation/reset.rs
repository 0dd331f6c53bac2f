//! Recovery planning: turn a `spec.reset` request into per-partition seek actions, or refuse it.
//!
//! Pure: the engine passes the request, the partitions currently failed and the id of the
//! request it handled last, and gets back what to do. It resolves the real offsets
//! ([`SeekTarget`]) against the source itself, then records the outcome with
//! [`ResetDecision::status`] (or [`failed_status`] when the seek itself failed).
//!
//! Rules:
//! - **At most once.** A request whose id equals the last handled id is a [`ResetDecision::NoOp`].
//!   A request that was Applied or Refused consumes its id: otherwise a refused request would
//!   sit in the spec and apply by surprise later, when the partitions it names happen to fail.
//!   The engine persists the id so this holds across restarts. A Failed one (the source could
//!   not be asked where to seek) does not: the engine tries it again.
//! - **Scope.** Named partitions must all be failed; naming a healthy one refuses the request
//!   and the message names the healthy ones. No partitions named means every failed partition.
//!   Nothing failed at all → refused ("nothing to reset").
//!   `failed` must hold every failed partition the request may name: a partition missing from
//!   it counts as healthy. With several workers, plan against the flow-wide list (or filter the
//!   request to the worker's own partitions before calling).
//! - **Strategy per failure type** ([`allowed_strategies`]):
//!   - DataLoss: `ResumeFromLogStart` (accept the gap) or `SkipToLatest`.
//!     `RestartFromEarliest` is refused: on the same topic "earliest" is the log start, so it
//!     would accept the gap under a name that does not say so. Accepting lost records must be
//!     an explicit decision.
//!   - TopicReset: `RestartFromEarliest` or `SkipToLatest`. `ResumeFromLogStart` is refused:
//!     the recreated topic's records land after the old topic's records already on the target,
//!     and the operator must choose that knowingly (`RestartFromEarliest`) rather than "resume"
//!     a topic that no longer exists.
//!   - `SkipToLatest` works for both.
//! - **What applies is applied.** Partitions that are healthy or incompatible with the strategy
//!   are left alone and named in the outcome ([`ResetDecision::ApplySome`]), so a follow-up
//!   request (new id, other strategy) can target exactly them; only a request of which nothing
//!   applies is refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{
    AppliedReset, FailureType, PartitionFailure, ResetOutcome, ResetRequest, ResetStrategy,
    TopicPartitionRef,
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

/// The strategies that may clear a failure of this type.
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
    }
}

/// Where a partition with this failure resumes under this strategy, or `None` if the strategy
/// is not allowed for the failure (see the module docs).
pub fn seek_target(failure: FailureType, strategy: ResetStrategy) -> Option<SeekTarget> {
    match (failure, strategy) {
        (_, ResetStrategy::SkipToLatest) => Some(SeekTarget::End),
        (FailureType::DataLoss, ResetStrategy::ResumeFromLogStart) => Some(SeekTarget::LogStart),
        (FailureType::TopicReset, ResetStrategy::RestartFromEarliest) => Some(SeekTarget::LogStart),
        (FailureType::ProgressMissing, ResetStrategy::RestartFromEarliest) => {
            Some(SeekTarget::LogStart)
        }
        (FailureType::ProgressMissing, ResetStrategy::ResumeFromTarget) => {
            Some(SeekTarget::AfterTarget)
        }
        (FailureType::DataLoss, ResetStrategy::RestartFromEarliest)
        | (FailureType::TopicReset, ResetStrategy::ResumeFromLogStart)
        | (FailureType::ProgressMissing, ResetStrategy::ResumeFromLogStart)
        | (FailureType::DataLoss | FailureType::TopicReset, ResetStrategy::ResumeFromTarget) => {
            None
        }
    }
}

/// The spelling used in the CRD (`spec.reset.strategy`).
pub fn strategy_name(strategy: ResetStrategy) -> &'static str {
    match strategy {
        ResetStrategy::ResumeFromLogStart => "ResumeFromLogStart",
        ResetStrategy::RestartFromEarliest => "RestartFromEarliest",
        ResetStrategy::SkipToLatest => "SkipToLatest",
        ResetStrategy::ResumeFromTarget => "ResumeFromTarget",
    }
}

/// The spelling used in the CRD (`status.failures[].type`).
pub fn failure_type_name(failure: FailureType) -> &'static str {
    match failure {
        FailureType::DataLoss => "DataLoss",
        FailureType::TopicReset => "TopicReset",
        FailureType::ProgressMissing => "ProgressMissing",
    }
}

/// Human form of a partition: `topic "orders" partition 3`.
pub fn describe_tp(tp: &TopicPartitionRef) -> String {
    format!("topic \"{}\" partition {}", tp.topic, tp.partition)
}

/// Decide what a reset request does. See the module docs for the rules.
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
    let types: Vec<FailureType> = by_tp.values().map(|f| f.type_).collect();
    if types.contains(&FailureType::DataLoss) && types.contains(&FailureType::TopicReset) {
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
    // Only called for pairs `seek_target` refused, so the type alone says which pair it is.
    let why = match (f.type_, strategy) {
        (FailureType::DataLoss | FailureType::TopicReset, ResetStrategy::ResumeFromTarget) => {
            "ResumeFromTarget is for ProgressMissing (a partition without progress whose target \
             topic already holds records)."
        }
        (FailureType::ProgressMissing, _) => {
            "ResumeFromLogStart is for DataLoss. No progress is recorded: use ResumeFromTarget to \
             resume after the records already on the target, RestartFromEarliest to replicate \
             the partition again from its log start, or SkipToLatest."
        }
        (FailureType::TopicReset, _) => {
            "ResumeFromLogStart is for DataLoss. The topic was recreated: use RestartFromEarliest \
             to replicate the new topic from its beginning (its records are appended on the \
             target after the records already mirrored from the old topic), or SkipToLatest to \
             replicate only records written from now on."
        }
        (FailureType::DataLoss, _) => {
            "RestartFromEarliest is for TopicReset; here it would skip the deleted records \
             without saying so. Use ResumeFromLogStart to accept the gap and resume at the log \
             start, or SkipToLatest to replicate only records written from now on."
        }
    };
    format!(
        "Incompatible: {} is {} ({what}), which {} cannot clear: {why}",
        describe_tp(&tp),
        failure_type_name(f.type_),
        strategy_name(strategy)
    )
}

/// `requested offset 120, log start 500, 380 records lost`.
fn failure_summary(f: &PartitionFailure) -> String {
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
                        let to = match a.target {
                            SeekTarget::LogStart => "resumes at the log start",
                            SeekTarget::End => "resumes at the end",
                            SeekTarget::AfterTarget => {
                                "resumes after the records already on the target"
                            }
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
    }
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

    use FailureType::{DataLoss, TopicReset};
    use ResetStrategy::{RestartFromEarliest, ResumeFromLogStart, SkipToLatest};

    #[test]
    fn strategy_table() {
        // Every (type, strategy) pair.
        let rows = [
            (DataLoss, ResumeFromLogStart, Some(SeekTarget::LogStart)),
            (DataLoss, RestartFromEarliest, None),
            (DataLoss, SkipToLatest, Some(SeekTarget::End)),
            (TopicReset, ResumeFromLogStart, None),
            (TopicReset, RestartFromEarliest, Some(SeekTarget::LogStart)),
            (TopicReset, SkipToLatest, Some(SeekTarget::End)),
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
        let rows: Vec<Row> = vec![
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
