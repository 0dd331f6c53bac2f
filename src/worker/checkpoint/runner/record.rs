//! What a cycle records in the runner's state: the groups selected, and per group its
//! checkpointed partitions, target lag, failures and last checkpoint.

use std::collections::BTreeSet;

use jiff::Timestamp;

use crate::api::GroupFailureReason;

use super::super::group_sync::{merge_owned_failures, sync_owned};
use super::super::plan::GroupPlan;
use super::super::status::{merge_failures, SpecState};

/// Keeps the state of the selected groups only, and adds those new to the selection.
pub(super) fn select_groups(st: &mut SpecState, groups: &[String], selected: &BTreeSet<&str>) {
    st.groups.retain(|g, _| selected.contains(g.as_str()));
    for g in groups {
        // Not `entry`: it would allocate the name of every group, every cycle.
        if !st.groups.contains_key(g) {
            st.groups.insert(g.clone(), Default::default());
        }
    }
}

/// Records each planned group's cycle in its state: checkpointed partitions, target lag,
/// this cycle's failures, and `now` as its last checkpoint when the cycle brought it up to
/// date and its records were written (`checkpointed` is told of each such group). With
/// `syncGroupOffsets`, `synced` and the sync's failures are the group sync's to report.
pub(super) fn record_plans(
    st: &mut SpecState,
    plans: &[GroupPlan],
    failed_groups: &BTreeSet<String>,
    sync_group_offsets: bool,
    now: Timestamp,
    mut checkpointed: impl FnMut(&str),
) {
    for plan in plans {
        let Some(g) = st.groups.get_mut(&plan.group) else {
            continue; // every plan's group is selected
        };
        let wrote = !failed_groups.contains(&plan.group);
        if wrote && plan.is_current() {
            g.last_checkpoint = Some(now);
            checkpointed(&plan.group);
        }
        g.partitions = i32::try_from(plan.checkpointed()).unwrap_or(i32::MAX);
        g.target_lag = plan.target_lag();
        let failures: Vec<(GroupFailureReason, String)> = plan.failure().into_iter().collect();
        if sync_group_offsets {
            g.failures = merge_owned_failures(&g.failures, failures, |r| !sync_owned(r), now);
        } else {
            g.synced = false;
            g.failures = merge_failures(&g.failures, failures, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::plan::{PartitionOutcome, PartitionProblem};
    use super::super::super::status::{FailureState, GroupState, SpecState};
    use super::super::super::translate::{CheckpointState, NoSyncReason};
    use super::super::tests::names;
    use super::*;

    fn outcome(
        partition: i32,
        effective: Option<i64>,
        problem: Option<PartitionProblem>,
    ) -> PartitionOutcome {
        PartitionOutcome {
            source_topic: "orders".into(),
            target_topic: "dc1.orders".into(),
            partition,
            group_offset: 10,
            metadata: String::new(),
            translation: None,
            decision: None,
            effective: effective.map(|d| CheckpointState {
                upstream: 10,
                downstream: d,
            }),
            target_end: Some(100),
            problem,
        }
    }

    fn plan(group: &str, partitions: Vec<PartitionOutcome>) -> GroupPlan {
        GroupPlan {
            group: group.into(),
            partitions,
            emit: vec![],
        }
    }

    #[test]
    fn select_groups_keeps_the_selected_only() {
        let mut st = SpecState::default();
        st.groups.insert(
            "old".into(),
            GroupState {
                partitions: 3,
                ..Default::default()
            },
        );
        st.groups.insert(
            "kept".into(),
            GroupState {
                partitions: 2,
                ..Default::default()
            },
        );
        let groups = names(&["kept", "new"]);
        let selected: BTreeSet<&str> = groups.iter().map(String::as_str).collect();
        select_groups(&mut st, &groups, &selected);
        let got: Vec<(&str, i32)> = st
            .groups
            .iter()
            .map(|(g, s)| (g.as_str(), s.partitions))
            .collect();
        assert_eq!(got, vec![("kept", 2), ("new", 0)]);
    }

    #[test]
    fn record_plans_table() {
        let before = Timestamp::from_second(1_700_000_000).unwrap();
        let now = Timestamp::from_second(1_700_000_060).unwrap();
        let old_failure = |reason| FailureState {
            reason,
            message: "old".into(),
            since: before,
        };
        let no_sync = Some(PartitionProblem::NoSync(NoSyncReason::Empty));
        let plans = vec![
            // Up to date: 2 partitions checkpointed, lag 100-50 + 100-60.
            plan(
                "current",
                vec![outcome(0, Some(50), None), outcome(1, Some(60), None)],
            ),
            // One partition without a sync: reported, still current.
            plan(
                "partly",
                vec![outcome(0, Some(50), None), outcome(1, None, no_sync)],
            ),
            // A target end unknown: not brought up to date.
            plan(
                "behind",
                vec![outcome(
                    0,
                    Some(90),
                    Some(PartitionProblem::TargetEndUnknown),
                )],
            ),
            // Its record was not written.
            plan("unwritten", vec![outcome(0, Some(50), None)]),
            // Not selected (cannot happen): skipped.
            plan("unknown", vec![outcome(0, Some(50), None)]),
        ];
        let failed: BTreeSet<String> = BTreeSet::from(["unwritten".to_string()]);
        let no_offset_sync = (
            GroupFailureReason::NoOffsetSync,
            "no safe translation for orders/1 at 10 (no offset sync yet)".to_string(),
        );
        for sync_group_offsets in [false, true] {
            let mut st = SpecState::default();
            for g in ["current", "partly", "behind", "unwritten"] {
                st.groups.insert(
                    g.into(),
                    GroupState {
                        synced: true,
                        failures: vec![
                            old_failure(GroupFailureReason::NoOffsetSync),
                            old_failure(GroupFailureReason::CommitFailed),
                        ],
                        ..Default::default()
                    },
                );
            }
            let mut told = Vec::new();
            record_plans(&mut st, &plans, &failed, sync_group_offsets, now, |g| {
                told.push(g.to_string())
            });
            assert_eq!(told, names(&["current", "partly"]), "{sync_group_offsets}");
            let row = |g: &str| {
                let s = &st.groups[g];
                let failures: Vec<(GroupFailureReason, String, Timestamp)> = s
                    .failures
                    .iter()
                    .map(|f| (f.reason, f.message.clone(), f.since))
                    .collect();
                (
                    s.last_checkpoint,
                    s.partitions,
                    s.target_lag,
                    s.synced,
                    failures,
                )
            };
            // The group sync owns `synced` and CommitFailed when it runs; else they go.
            let commit_failed: Vec<_> = if sync_group_offsets {
                vec![(GroupFailureReason::CommitFailed, "old".to_string(), before)]
            } else {
                vec![]
            };
            let synced = sync_group_offsets;
            let mut partly_failures = vec![(no_offset_sync.0, no_offset_sync.1.clone(), before)];
            partly_failures.extend(commit_failed.clone());
            assert_eq!(
                row("current"),
                (Some(now), 2, Some(90), synced, commit_failed.clone()),
                "current, sync={sync_group_offsets}"
            );
            assert_eq!(
                row("partly"),
                (Some(now), 1, Some(50), synced, partly_failures),
                "a NoOffsetSync that persists keeps its start, sync={sync_group_offsets}"
            );
            let mut behind_failures = vec![(
                GroupFailureReason::NoOffsetSync,
                "no safe translation for orders/0 at 10 (target end offset unknown)".to_string(),
                before,
            )];
            behind_failures.extend(commit_failed.clone());
            assert_eq!(
                row("behind"),
                (None, 1, Some(10), synced, behind_failures),
                "behind, sync={sync_group_offsets}"
            );
            assert_eq!(
                row("unwritten"),
                (None, 1, Some(50), synced, commit_failed),
                "unwritten, sync={sync_group_offsets}"
            );
            assert!(!st.groups.contains_key("unknown"));
        }
    }
}
