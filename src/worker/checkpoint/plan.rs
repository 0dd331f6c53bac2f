//! One group's checkpoint cycle as pure decisions: which checkpoint records to write, which
//! checkpoint is in force per partition afterwards, and what to commit to the target group.
//!
//! Per partition the group committed on the source (replicated topics only):
//! 1. translate the committed offset `o` with the partition's sync history, then clamp it to
//!    the target partition's end offset (never negative lag);
//! 2. [`decide_checkpoint`] against the checkpoint in force: emit when first, when the group
//!    rewound, or when the target offset advanced. A checkpoint in force that now lies past
//!    the target's end (target truncated or recreated) is replaced even if that lowers it;
//! 3. the checkpoint *in force* after the cycle is the emitted one, or the previous one when
//!    the new translation is not higher (it was safe for an offset `≤ o`, so it still is).
//!
//! No sync at or below `o` → nothing is written; a previous checkpoint stays in force when its
//! upstream offset is `≤ o` (still safe), and the partition is reported (`NoOffsetSync`).

use crate::api::status::list_some;
use crate::api::GroupFailureReason;
use crate::kafka::wire;
use crate::kafka::Code;

use super::failback::Translate;
use super::translate::{
    clamp_to_target_end, decide_checkpoint, decide_group_sync, CheckpointDecision,
    CheckpointKeyRef, CheckpointState, GroupSyncDecision, InForce, NoSyncReason, PartitionMap,
    PartitionRef, TargetGroupState, Translation,
};
use crate::kafka::admin::GroupOffset;

/// Why a partition has no usable checkpoint this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionProblem {
    /// No offset sync at or below the group's offset.
    NoSync(NoSyncReason),
    /// The target partition's end offset is unknown (topic missing on the target, or the
    /// lookup failed), so no translation can be clamped.
    TargetEndUnknown,
    /// No sync covers the offset and the checkpoint in force is ahead of the group (the
    /// group rewound) or past the target's end; it is not replaced, and not committed.
    PreviousUnsafe,
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOutcome {
    /// Source topic.
    pub source_topic: String,
    /// Target topic.
    pub target_topic: String,
    /// Partition.
    pub partition: i32,
    /// The group's committed source offset.
    pub group_offset: i64,
    /// The group's commit metadata on the source (copied into checkpoints and commits).
    pub metadata: String,
    /// Translation after clamping (`None` when the target end was unknown).
    pub translation: Option<Translation>,
    /// The monotonicity decision, when there was a translation.
    pub decision: Option<CheckpointDecision>,
    /// Checkpoint in force after this cycle, if any.
    pub effective: Option<CheckpointState>,
    /// Target end offset used for clamping.
    pub target_end: Option<i64>,
    /// Why there is no fresh checkpoint, if so.
    pub problem: Option<PartitionProblem>,
}

/// One group's cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    /// Group id.
    pub group: String,
    /// Per replicated partition, in input order.
    pub partitions: Vec<PartitionOutcome>,
    /// Checkpoint records to write.
    pub emit: Vec<wire::Checkpoint>,
}

impl GroupPlan {
    /// Partitions with a checkpoint in force.
    pub fn checkpointed(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.effective.is_some())
            .count()
    }

    /// Whether this cycle brought the group's checkpoints up to date: at least one partition
    /// has a checkpoint in force and no partition failed for a reason other than a missing
    /// sync (those are reported, but do not make checkpointing "behind").
    pub fn is_current(&self) -> bool {
        self.checkpointed() > 0
            && self
                .partitions
                .iter()
                .all(|p| !matches!(p.problem, Some(PartitionProblem::TargetEndUnknown)))
    }

    /// Records the target group would still read from its checkpoints, summed over the
    /// partitions with a checkpoint in force (never negative).
    pub fn target_lag(&self) -> Option<i64> {
        let lags: Vec<i64> = self
            .partitions
            .iter()
            .filter_map(|p| Some((p.target_end? - p.effective?.downstream).max(0)))
            .collect();
        (!lags.is_empty()).then(|| lags.iter().sum())
    }

    /// The `NoOffsetSync` failure of this cycle, if any partition has no usable checkpoint.
    pub fn failure(&self) -> Option<(GroupFailureReason, String)> {
        let bad: Vec<String> = self
            .partitions
            .iter()
            .filter_map(|p| {
                let why = match p.problem? {
                    PartitionProblem::NoSync(NoSyncReason::Empty) => "no offset sync yet",
                    PartitionProblem::NoSync(NoSyncReason::BeforeOldest) => {
                        "offset below the oldest offset sync"
                    }
                    PartitionProblem::NoSync(NoSyncReason::ReReplicating) => {
                        "offset range being re-replicated"
                    }
                    PartitionProblem::TargetEndUnknown => "target end offset unknown",
                    PartitionProblem::PreviousUnsafe => {
                        "no offset sync, and the previous checkpoint is ahead of the group"
                    }
                };
                Some(format!(
                    "{}/{} at {} ({why})",
                    p.source_topic, p.partition, p.group_offset
                ))
            })
            .collect();
        if bad.is_empty() {
            return None;
        }
        Some((
            GroupFailureReason::NoOffsetSync,
            format!("no safe translation for {}", list_some(&bad)),
        ))
    }
}

/// Plans one group's cycle (module docs). `offsets` are the group's committed source
/// offsets; `target_topic` maps a source topic to its target name, `None` for topics the
/// flow does not replicate (skipped); `ends` holds target end offsets by (target topic,
/// partition); `in_force` the checkpoints in force (reloaded at start, updated after
/// every successful write). Nothing is allocated per partition beyond the plan itself.
pub fn plan_group<T: AsRef<str>>(
    group: &str,
    offsets: &[GroupOffset],
    target_topic: impl Fn(&str) -> Option<T>,
    syncs: &impl Translate,
    ends: &PartitionMap<i64>,
    in_force: &InForce,
) -> GroupPlan {
    let mut partitions = Vec::with_capacity(offsets.len());
    let mut emit = Vec::new();
    for o in offsets {
        let Some(target) = target_topic(&o.topic) else {
            continue;
        };
        let target = target.as_ref();
        let end = ends.get(&PartitionRef(target, o.partition)).copied();
        let prev = in_force
            .get(&CheckpointKeyRef {
                group,
                topic: target,
                partition: o.partition,
            })
            .copied();
        let mut out = PartitionOutcome {
            source_topic: o.topic.clone(),
            target_topic: target.to_string(),
            partition: o.partition,
            group_offset: o.offset,
            metadata: o.metadata.clone(),
            translation: None,
            decision: None,
            effective: None,
            target_end: end,
            problem: None,
        };
        let Some(end) = end else {
            out.problem = Some(PartitionProblem::TargetEndUnknown);
            partitions.push(out);
            continue;
        };
        // A checkpoint past the target's end protects nothing: let it be replaced.
        let prev = prev.filter(|p| p.downstream <= end.max(0));
        let t = clamp_to_target_end(syncs.translate(&o.topic, o.partition, o.offset), end);
        out.translation = Some(t);
        match t.downstream() {
            Some(d) => {
                let decision = decide_checkpoint(prev.as_ref(), (o.offset, d));
                out.decision = Some(decision);
                match decision {
                    CheckpointDecision::Emit(_) => {
                        emit.push(wire::Checkpoint {
                            group: group.to_string(),
                            topic: target.to_string(),
                            partition: o.partition,
                            upstream_offset: o.offset,
                            downstream_offset: d,
                            metadata: o.metadata.clone(),
                        });
                        out.effective = Some(CheckpointState {
                            upstream: o.offset,
                            downstream: d,
                        });
                    }
                    // Not higher than the checkpoint in force, which stays (still safe).
                    CheckpointDecision::Skip(_) => out.effective = prev,
                }
            }
            None => {
                let reason = match t {
                    Translation::NoSync { reason } => reason,
                    _ => NoSyncReason::Empty,
                };
                match prev {
                    // Nothing moved since it was written: it is exactly as good as before.
                    Some(p) if p.upstream == o.offset => out.effective = Some(p),
                    Some(p) if p.upstream < o.offset => {
                        out.effective = Some(p);
                        out.problem = Some(PartitionProblem::NoSync(reason));
                    }
                    Some(_) => out.problem = Some(PartitionProblem::PreviousUnsafe),
                    None => out.problem = Some(PartitionProblem::NoSync(reason)),
                }
            }
        }
        partitions.push(out);
    }
    GroupPlan {
        group: group.to_string(),
        partitions,
        emit,
    }
}

/// What to do with the target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncPlan {
    /// Commit these offsets (target topic names).
    Commit(Vec<GroupOffset>),
    /// The target group is already at or past every checkpoint in force.
    UpToDate,
    /// The target group has active members: left alone, reported, retried next interval.
    Refused {
        /// Members seen.
        members: u32,
    },
    /// No checkpoint in force: nothing to commit.
    Nothing,
}

/// Group offset sync for one group: `members` is `None` when the group does not exist on
/// the target; `committed` its committed offsets by (target topic, partition).
pub fn plan_group_sync(
    plan: &GroupPlan,
    members: Option<u32>,
    committed: &PartitionMap<i64>,
) -> SyncPlan {
    let mut commits = Vec::new();
    let mut any = false;
    for p in &plan.partitions {
        let Some(eff) = p.effective else { continue };
        any = true;
        let state = TargetGroupState {
            exists: members.is_some(),
            active_members: members.unwrap_or(0),
            committed: committed
                .get(&PartitionRef(&p.target_topic, p.partition))
                .copied(),
        };
        match decide_group_sync(&state, eff.downstream) {
            GroupSyncDecision::SkipActiveMembers => {
                return SyncPlan::Refused {
                    members: members.unwrap_or(0),
                }
            }
            GroupSyncDecision::SkipNotAhead => {}
            GroupSyncDecision::Commit(offset) => commits.push(GroupOffset {
                topic: p.target_topic.clone(),
                partition: p.partition,
                offset,
                metadata: p.metadata.clone(),
            }),
        }
    }
    match (any, commits.is_empty()) {
        (false, _) => SyncPlan::Nothing,
        (true, true) => SyncPlan::UpToDate,
        (true, false) => SyncPlan::Commit(commits),
    }
}

/// A refused commit caused by members that joined after the group was described is an
/// `ActiveOnTarget` refusal, not a failure: the broker answers UNKNOWN_MEMBER_ID,
/// ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS or NON_EMPTY_GROUP to commits from outside an
/// active group. Decided on the error code, never on the text.
pub fn classify_commit_error(error: &crate::kafka::Error) -> GroupFailureReason {
    if error.error_code().is_some_and(Code::is_active_group) {
        GroupFailureReason::ActiveOnTarget
    } else {
        GroupFailureReason::CommitFailed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::wire::{OffsetSync, SyncSequence};
    use crate::worker::checkpoint::store::SyncStore;
    use crate::worker::checkpoint::translate::{CheckpointKey, EmitReason, SkipReason};
    use hashbrown::HashMap;
    use pretty_assertions::assert_eq;

    fn store(syncs: &[(&str, i32, i64, i64)]) -> SyncStore {
        let mut s = SyncStore::new();
        let mut seqs: HashMap<(String, i32), i64> = HashMap::new();
        for (t, p, u, d) in syncs {
            let n = seqs.entry((t.to_string(), *p)).or_default();
            let sync = OffsetSync {
                topic: t.to_string(),
                partition: *p,
                upstream_offset: *u,
                downstream_offset: *d,
            };
            s.insert(
                &sync,
                Some(SyncSequence {
                    writer_epoch: 1,
                    seq: *n,
                }),
            );
            *n += 1;
        }
        s
    }

    fn off(topic: &str, partition: i32, offset: i64) -> GroupOffset {
        GroupOffset {
            topic: topic.into(),
            partition,
            offset,
            metadata: "meta".into(),
        }
    }

    fn key(topic: &str, partition: i32) -> CheckpointKey {
        CheckpointKey {
            group: "g".into(),
            topic: topic.into(),
            partition,
        }
    }

    fn cp(u: i64, d: i64) -> CheckpointState {
        CheckpointState {
            upstream: u,
            downstream: d,
        }
    }

    fn prefix(topic: &str) -> Option<String> {
        (topic != "not-replicated").then(|| format!("src.{topic}"))
    }

    /// (name, syncs, group offset of t/0, target end of src.t/0 (None = unknown),
    ///  checkpoint in force, want: emitted (u, d), effective, decision, problem)
    #[allow(clippy::type_complexity)]
    #[test]
    fn partition_table() {
        let linear = [("t", 0, 0, 0), ("t", 0, 100, 100)];
        let cases: Vec<(
            &str,
            Vec<(&str, i32, i64, i64)>,
            i64,
            Option<i64>,
            Option<CheckpointState>,
            Option<(i64, i64)>,
            Option<CheckpointState>,
            Option<CheckpointDecision>,
            Option<PartitionProblem>,
        )> = vec![
            (
                "first checkpoint, exact interpolation",
                linear.to_vec(),
                37,
                Some(101),
                None,
                Some((37, 37)),
                Some(cp(37, 37)),
                Some(CheckpointDecision::Emit(EmitReason::First)),
                None,
            ),
            (
                "caught up: o = newest + 1 → end, re-reads nothing",
                linear.to_vec(),
                101,
                Some(101),
                None,
                Some((101, 101)),
                Some(cp(101, 101)),
                Some(CheckpointDecision::Emit(EmitReason::First)),
                None,
            ),
            (
                "lagging replication is clamped to the target end",
                vec![("t", 0, 0, 0), ("t", 0, 100, 100)],
                300,
                Some(60),
                None,
                Some((300, 60)),
                Some(cp(300, 60)),
                Some(CheckpointDecision::Emit(EmitReason::First)),
                None,
            ),
            (
                "unchanged translation keeps the checkpoint in force",
                linear.to_vec(),
                37,
                Some(101),
                Some(cp(37, 37)),
                None,
                Some(cp(37, 37)),
                Some(CheckpointDecision::Skip(SkipReason::NotAdvanced)),
                None,
            ),
            (
                "coarser translation never lowers (restart with compacted syncs)",
                vec![("t", 0, 0, 0)],
                37,
                Some(101),
                Some(cp(37, 37)),
                None,
                Some(cp(37, 37)),
                Some(CheckpointDecision::Skip(SkipReason::WouldLowerDownstream)),
                None,
            ),
            (
                "group rewound: lower checkpoint allowed",
                linear.to_vec(),
                10,
                Some(101),
                Some(cp(37, 37)),
                Some((10, 10)),
                Some(cp(10, 10)),
                Some(CheckpointDecision::Emit(EmitReason::UpstreamRewound)),
                None,
            ),
            (
                "checkpoint in force past a truncated target is replaced",
                linear.to_vec(),
                101,
                Some(50),
                Some(cp(101, 101)),
                Some((101, 50)),
                Some(cp(101, 50)),
                Some(CheckpointDecision::Emit(EmitReason::First)),
                None,
            ),
            (
                "no sync: nothing written",
                vec![],
                5,
                Some(10),
                None,
                None,
                None,
                None,
                Some(PartitionProblem::NoSync(NoSyncReason::Empty)),
            ),
            (
                "below the oldest sync: nothing written",
                vec![("t", 0, 50, 0)],
                5,
                Some(10),
                None,
                None,
                None,
                None,
                Some(PartitionProblem::NoSync(NoSyncReason::BeforeOldest)),
            ),
            (
                "no sync, same offset as the checkpoint in force: still current",
                vec![("t", 0, 50, 0)],
                5,
                Some(10),
                Some(cp(5, 3)),
                None,
                Some(cp(5, 3)),
                None,
                None,
            ),
            (
                "no sync, group moved on: old checkpoint stays in force, reported",
                vec![("t", 0, 50, 0)],
                7,
                Some(10),
                Some(cp(5, 3)),
                None,
                Some(cp(5, 3)),
                None,
                Some(PartitionProblem::NoSync(NoSyncReason::BeforeOldest)),
            ),
            (
                "no sync, group rewound below the checkpoint in force",
                vec![("t", 0, 50, 0)],
                2,
                Some(10),
                Some(cp(5, 3)),
                None,
                None,
                None,
                Some(PartitionProblem::PreviousUnsafe),
            ),
            (
                "target end unknown: nothing translated",
                linear.to_vec(),
                37,
                None,
                Some(cp(30, 30)),
                None,
                None,
                None,
                Some(PartitionProblem::TargetEndUnknown),
            ),
        ];
        for (name, syncs, offset, end, prev, emitted, effective, decision, problem) in cases {
            let mut ends = HashMap::new();
            if let Some(e) = end {
                ends.insert(("src.t".to_string(), 0), e);
            }
            let mut in_force = HashMap::new();
            if let Some(p) = prev {
                in_force.insert(key("src.t", 0), p);
            }
            let plan = plan_group(
                "g",
                &[off("t", 0, offset)],
                prefix,
                &store(&syncs),
                &ends,
                &in_force,
            );
            let got_emit: Option<(i64, i64)> = plan
                .emit
                .first()
                .map(|c| (c.upstream_offset, c.downstream_offset));
            let p = &plan.partitions[0];
            assert_eq!(
                (got_emit, p.effective, p.decision, p.problem),
                (emitted, effective, decision, problem),
                "{name}"
            );
            if let Some(c) = plan.emit.first() {
                assert_eq!(
                    (
                        c.group.as_str(),
                        c.topic.as_str(),
                        c.partition,
                        c.metadata.as_str()
                    ),
                    ("g", "src.t", 0, "meta"),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn group_summary_table() {
        let syncs = store(&[
            ("t", 0, 0, 0),
            ("t", 0, 100, 100),
            ("t", 1, 0, 0),
            ("t", 1, 50, 50),
        ]);
        let mut ends = HashMap::new();
        ends.insert(("src.t".to_string(), 0), 101);
        ends.insert(("src.t".to_string(), 1), 51);
        let offsets = [
            off("t", 0, 90),
            off("t", 1, 51),
            off("not-replicated", 0, 5),
            off("u", 0, 3),
        ];
        let plan = plan_group("g", &offsets, prefix, &syncs, &ends, &HashMap::new());
        // not-replicated is skipped; u/0 has no sync and no end.
        assert_eq!(plan.partitions.len(), 3);
        assert_eq!(plan.emit.len(), 2);
        assert_eq!(plan.checkpointed(), 2);
        assert_eq!(plan.target_lag(), Some(11));
        assert!(!plan.is_current(), "u/0 has an unknown target end");
        let (reason, msg) = plan.failure().unwrap();
        assert_eq!(reason, GroupFailureReason::NoOffsetSync);
        assert!(
            msg.contains("u/0 at 3 (target end offset unknown)"),
            "{msg}"
        );

        ends.insert(("src.u".to_string(), 0), 0);
        let plan = plan_group("g", &offsets, prefix, &syncs, &ends, &HashMap::new());
        assert!(
            plan.is_current(),
            "a missing sync does not make the group behind"
        );
        assert!(plan
            .failure()
            .unwrap()
            .1
            .contains("u/0 at 3 (no offset sync yet)"));

        let plan = plan_group(
            "g",
            &[off("u", 0, 3)],
            prefix,
            &syncs,
            &ends,
            &HashMap::new(),
        );
        assert!(!plan.is_current());
        assert_eq!(plan.target_lag(), None);
    }

    #[test]
    fn sync_table() {
        let syncs = store(&[
            ("t", 0, 0, 0),
            ("t", 0, 100, 100),
            ("t", 1, 0, 0),
            ("t", 1, 100, 100),
        ]);
        let mut ends = HashMap::new();
        ends.insert(("src.t".to_string(), 0), 101);
        ends.insert(("src.t".to_string(), 1), 101);
        let plan = plan_group(
            "g",
            &[off("t", 0, 40), off("t", 1, 60)],
            prefix,
            &syncs,
            &ends,
            &HashMap::new(),
        );
        let committed = |pairs: &[(i32, i64)]| -> HashMap<(String, i32), i64> {
            pairs
                .iter()
                .map(|(p, o)| (("src.t".to_string(), *p), *o))
                .collect()
        };
        let c = |p: i32, o: i64| GroupOffset {
            topic: "src.t".into(),
            partition: p,
            offset: o,
            metadata: "meta".into(),
        };
        let cases = vec![
            (
                "absent group: commit all",
                None,
                committed(&[]),
                SyncPlan::Commit(vec![c(0, 40), c(1, 60)]),
            ),
            (
                "empty group behind: commit all",
                Some(0),
                committed(&[(0, 10), (1, 10)]),
                SyncPlan::Commit(vec![c(0, 40), c(1, 60)]),
            ),
            (
                "never backwards",
                Some(0),
                committed(&[(0, 50), (1, 10)]),
                SyncPlan::Commit(vec![c(1, 60)]),
            ),
            (
                "already there",
                Some(0),
                committed(&[(0, 40), (1, 70)]),
                SyncPlan::UpToDate,
            ),
            (
                "active members: refused",
                Some(2),
                committed(&[]),
                SyncPlan::Refused { members: 2 },
            ),
        ];
        for (name, members, committed, want) in cases {
            assert_eq!(plan_group_sync(&plan, members, &committed), want, "{name}");
        }
        let nothing = plan_group(
            "g",
            &[off("v", 0, 1)],
            prefix,
            &syncs,
            &ends,
            &HashMap::new(),
        );
        assert_eq!(
            plan_group_sync(&nothing, None, &HashMap::new()),
            SyncPlan::Nothing
        );
    }

    #[test]
    fn commit_error_table() {
        use crate::kafka::{Code, Error};
        // The broker's code decides, whatever the text around it says.
        let code = |c: i32, text: &str| Error::code(Code(c), text);
        let cases = [
            (
                code(25, "Broker: Unknown member")
                    .context("t/0")
                    .context("group \"g\"")
                    .context("commit consumer group offsets")
                    .context("target"),
                GroupFailureReason::ActiveOnTarget,
            ),
            (
                code(22, "Broker: Specified group generation id is not valid"),
                GroupFailureReason::ActiveOnTarget,
            ),
            (
                code(27, "Broker: Group rebalance in progress"),
                GroupFailureReason::ActiveOnTarget,
            ),
            (
                code(68, "NON_EMPTY_GROUP: the group is not empty"),
                GroupFailureReason::ActiveOnTarget,
            ),
            (
                code(-185, "Local: Timed out"),
                GroupFailureReason::CommitFailed,
            ),
            (
                code(30, "Broker: Not authorized to access group"),
                GroupFailureReason::CommitFailed,
            ),
            (
                Error::Client("unknown member of a rebalance".into()),
                GroupFailureReason::CommitFailed,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(classify_commit_error(&e), want, "{e}");
        }
    }
}
