//! The runner's observable state and its folding into an `OffsetCheckpointStatus`. Pure.
//!
//! The runner keeps one [`SpecState`] per OffsetCheckpoint. [`checkpoint_status`] turns it
//! into the resource's status with the controller's own rules
//! ([`fold_checkpoint_status`]: `Ready`, `Stale` when a group's checkpoint is older than
//! 3 × `intervalSeconds`, groups stalest first, both lists bounded to 50), so the worker's
//! `/status`, its Kubernetes status writer and the controller agree. On top of that, a
//! failing cycle (a cluster unreachable, the checkpoints topic not writable) makes `Ready`
//! False at once with the error, instead of only once groups turn stale.
//!
//! A group's "last checkpoint time" is the last cycle that brought all its checkpoints up
//! to date (emitted, or confirmed unchanged), not the last record written: a group that does
//! not move needs no new record, and is not stale.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::status::{
    fold_checkpoint_status, CheckpointObservation, CheckpointReports, FlowRefState,
};
use crate::api::{
    GroupFailure, GroupFailureReason, GroupSummary, OffsetCheckpoint, OffsetCheckpointStatus,
    WorkerCheckpointReport,
};

/// A failure of one group that persists across cycles.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureState {
    /// Why.
    pub reason: GroupFailureReason,
    /// Details of the latest occurrence.
    pub message: String,
    /// First cycle it was seen in (kept while it persists).
    pub since: Timestamp,
}

/// One group as the runner last saw it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupState {
    /// Last cycle that brought all its checkpoints up to date.
    pub last_checkpoint: Option<Timestamp>,
    /// Partitions with a checkpoint in force.
    pub partitions: i32,
    /// The target group is at or past every checkpoint in force.
    pub synced: bool,
    /// Records the target group would still read from the checkpoints.
    pub target_lag: Option<i64>,
    /// Current failures (at most one per reason).
    pub failures: Vec<FailureState>,
}

/// One OffsetCheckpoint's state in the runner.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpecState {
    /// `spec.intervalSeconds`.
    pub interval_seconds: i32,
    /// `metadata.generation` of the spec being run.
    pub generation: Option<i64>,
    /// Cycles completed (successfully or not).
    pub cycles: u64,
    /// End of the last cycle.
    pub last_cycle: Option<Timestamp>,
    /// Wall time the last cycle took.
    pub last_cycle_duration: Option<Duration>,
    /// Error of the last cycle, if it failed as a whole.
    pub last_error: Option<String>,
    /// Group syncs completed (successfully or not); they run beside the cycles and take
    /// the newest plans (`group_sync`), so there may be fewer than cycles.
    pub group_syncs: u64,
    /// End of the last group sync.
    pub last_group_sync: Option<Timestamp>,
    /// Wall time the last group sync took.
    pub last_group_sync_duration: Option<Duration>,
    /// Error of the last group sync, if it failed as a whole (e.g. the target's groups
    /// could not be listed).
    pub last_sync_error: Option<String>,
    /// Groups currently selected, by id.
    pub groups: BTreeMap<String, GroupState>,
}

/// Everything the runner exposes (see `runner::CheckpointRunner::state`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunnerState {
    /// Per OffsetCheckpoint name.
    pub specs: BTreeMap<String, SpecState>,
    /// Source partitions with an offset-sync history.
    pub sync_partitions: usize,
    /// Offset syncs retained (≤ `sync_partitions × 64`).
    pub syncs_retained: usize,
    /// Checkpoints in force (group × partition).
    pub checkpoints_in_force: usize,
    /// Start-up done: offset syncs read to their end, checkpoints reloaded.
    pub started: bool,
    /// Error of the start-up, while it keeps failing.
    pub startup_error: Option<String>,
}

/// Merges this cycle's failures of a group into the previous ones, keeping `since` for a
/// reason that persists.
pub fn merge_failures(
    previous: &[FailureState],
    current: Vec<(GroupFailureReason, String)>,
    now: Timestamp,
) -> Vec<FailureState> {
    current
        .into_iter()
        .map(|(reason, message)| FailureState {
            since: previous
                .iter()
                .find(|f| f.reason == reason)
                .map_or(now, |f| f.since),
            reason,
            message,
        })
        .collect()
}

/// The groups and failures of a spec that ran, in the controller's report shape.
fn reports(state: &SpecState) -> CheckpointReports {
    let time = |t: &Timestamp| Time(Timestamp::from_second(t.as_second()).unwrap_or(*t));
    CheckpointReports {
        groups: state
            .groups
            .iter()
            .map(|(group, g)| GroupSummary {
                group: group.clone(),
                partitions: g.partitions,
                last_checkpoint_time: g.last_checkpoint.as_ref().map(time),
                synced: g.synced,
                target_lag: g.target_lag,
            })
            .collect(),
        failures: state
            .groups
            .iter()
            .flat_map(|(group, g)| {
                g.failures.iter().map(move |f| GroupFailure {
                    group: group.clone(),
                    reason: f.reason,
                    message: f.message.clone(),
                    since: time(&f.since),
                })
            })
            .collect(),
        error: None,
    }
}

/// What the runner reports for one OffsetCheckpoint, from its state (`None`: not accepted
/// yet) and the runner's start-up error: `None` until it completed a cycle or failed. An
/// empty report would read as "no group matched" (Ready); until then there is nothing to
/// report, and the controller says it awaits checkpoints.
pub fn report(state: Option<&SpecState>, startup_error: Option<&str>) -> Option<CheckpointReports> {
    let ran = state.filter(|s| s.cycles > 0);
    let error = startup_error
        .or(state.and_then(|s| s.last_error.as_deref().or(s.last_sync_error.as_deref())));
    if ran.is_none() && error.is_none() {
        return None;
    }
    Some(CheckpointReports {
        error: error.map(str::to_string),
        ..ran.map(reports).unwrap_or_default()
    })
}

fn fold(
    checkpoint: &OffsetCheckpoint,
    reports: Option<&CheckpointReports>,
    now: Timestamp,
) -> OffsetCheckpointStatus {
    fold_checkpoint_status(&CheckpointObservation {
        checkpoint,
        flow: FlowRefState::Found { invalid: false },
        invalid: None,
        reports,
        now,
    })
}

/// The status of `checkpoint` from the runner's state for it (`None`: not accepted yet) at
/// `now`, folded by the controller's rules. Previous conditions come from
/// `checkpoint.status` (transition times are kept).
pub fn checkpoint_status(
    checkpoint: &OffsetCheckpoint,
    state: Option<&SpecState>,
    startup_error: Option<&str>,
    now: Timestamp,
) -> OffsetCheckpointStatus {
    fold(checkpoint, report(state, startup_error).as_ref(), now)
}

/// What a worker reports per OffsetCheckpoint in its status entry, at `now` ([`report`]):
/// groups sorted and bounded as the status shows them.
pub fn worker_reports(
    state: &RunnerState,
    checkpoints: &[OffsetCheckpoint],
    now: Timestamp,
) -> Vec<WorkerCheckpointReport> {
    checkpoints
        .iter()
        .filter_map(|cp| {
            let name = cp.metadata.name.clone().unwrap_or_default();
            let r = report(state.specs.get(&name), state.startup_error.as_deref())?;
            let st = fold(cp, Some(&r), now);
            Some(WorkerCheckpointReport {
                name,
                groups: st.groups,
                failures: st.failures,
                error: r.error,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::status::{READY, STALE};
    use crate::api::{FlowRef, GroupSelector, OffsetCheckpointSpec};
    use jiff::ToSpan;
    use pretty_assertions::assert_eq;

    fn now() -> Timestamp {
        "2026-01-01T00:10:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Timestamp {
        now() - secs.seconds()
    }

    fn resource() -> OffsetCheckpoint {
        let mut cp = OffsetCheckpoint::new(
            "cp",
            OffsetCheckpointSpec {
                flow_ref: FlowRef { name: "f".into() },
                groups: GroupSelector::default(),
                interval_seconds: 5,
                sync_group_offsets: true,
                emit_checkpoints_topic: true,
            },
        );
        cp.metadata.generation = Some(3);
        cp
    }

    fn group(age: Option<i64>, failures: Vec<FailureState>) -> GroupState {
        GroupState {
            last_checkpoint: age.map(ago),
            partitions: 2,
            synced: true,
            target_lag: Some(0),
            failures,
        }
    }

    fn spec(groups: Vec<(&str, GroupState)>, error: Option<&str>) -> SpecState {
        SpecState {
            interval_seconds: 5,
            generation: Some(3),
            cycles: 4,
            last_cycle: Some(ago(1)),
            last_cycle_duration: Some(Duration::from_millis(20)),
            last_error: error.map(String::from),
            groups: groups
                .into_iter()
                .map(|(g, s)| (g.to_string(), s))
                .collect(),
            ..SpecState::default()
        }
    }

    fn cond(status: &OffsetCheckpointStatus, type_: &str) -> (String, String) {
        let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    #[test]
    fn status_table() {
        let active = FailureState {
            reason: GroupFailureReason::ActiveOnTarget,
            message: "2 members".into(),
            since: ago(30),
        };
        type Case = (
            &'static str,
            Option<SpecState>,
            Option<&'static str>,
            (&'static str, &'static str),
            (&'static str, &'static str),
            i32,
            Option<i64>,
            usize,
        );
        let cases: Vec<Case> = vec![
            (
                "not run yet",
                None,
                None,
                ("False", "AwaitingCheckpoints"),
                ("Unknown", "AwaitingCheckpoints"),
                0,
                None,
                0,
            ),
            (
                "fresh groups",
                Some(spec(
                    vec![("a", group(Some(2), vec![])), ("b", group(Some(9), vec![]))],
                    None,
                )),
                None,
                ("True", "Checkpointing"),
                ("False", "Fresh"),
                2,
                Some(9),
                0,
            ),
            (
                "exactly 3 intervals is not stale yet",
                Some(spec(vec![("a", group(Some(15), vec![]))], None)),
                None,
                ("True", "Checkpointing"),
                ("False", "Fresh"),
                1,
                Some(15),
                0,
            ),
            (
                "older than 3 intervals is stale",
                Some(spec(
                    vec![
                        ("a", group(Some(2), vec![])),
                        ("b", group(Some(16), vec![])),
                    ],
                    None,
                )),
                None,
                ("False", "CheckpointsStale"),
                ("True", "CheckpointsStale"),
                2,
                Some(16),
                0,
            ),
            (
                "refused group is reported but does not block Ready",
                Some(spec(
                    vec![("a", group(Some(2), vec![active.clone()]))],
                    None,
                )),
                None,
                ("True", "Checkpointing"),
                ("False", "Fresh"),
                1,
                Some(2),
                1,
            ),
            (
                "never checkpointed group is not counted and not stale",
                Some(spec(vec![("a", group(None, vec![]))], None)),
                None,
                ("True", "Checkpointing"),
                ("False", "Fresh"),
                0,
                None,
                0,
            ),
            (
                "no group matched",
                Some(spec(vec![], None)),
                None,
                ("True", "NoGroupsMatched"),
                ("False", "Fresh"),
                0,
                None,
                0,
            ),
            (
                "failed cycle: Ready False at once",
                Some(spec(
                    vec![("a", group(Some(2), vec![]))],
                    Some("source cluster dc1: list consumer groups: timed out"),
                )),
                None,
                ("False", "CheckpointFailed"),
                ("False", "Fresh"),
                1,
                Some(2),
                0,
            ),
            (
                "group sync failing as a whole",
                Some(SpecState {
                    last_sync_error: Some(
                        "target cluster dc2: list consumer groups: timed out".into(),
                    ),
                    ..spec(vec![("a", group(Some(2), vec![]))], None)
                }),
                None,
                ("False", "CheckpointFailed"),
                ("False", "Fresh"),
                1,
                Some(2),
                0,
            ),
            (
                "start-up failing",
                None,
                Some("offset syncs: timed out"),
                ("False", "CheckpointFailed"),
                ("Unknown", "CheckpointFailed"),
                0,
                None,
                0,
            ),
        ];
        for (name, state, startup, ready, stale, checkpointed, oldest, failures) in cases {
            let s = checkpoint_status(&resource(), state.as_ref(), startup, now());
            assert_eq!(
                cond(&s, READY),
                (ready.0.to_string(), ready.1.to_string()),
                "{name}: Ready"
            );
            assert_eq!(
                cond(&s, STALE),
                (stale.0.to_string(), stale.1.to_string()),
                "{name}: Stale"
            );
            assert_eq!(s.groups_checkpointed, checkpointed, "{name}");
            assert_eq!(s.oldest_checkpoint_age_seconds, oldest, "{name}");
            assert_eq!(s.failures.len(), failures, "{name}");
            assert_eq!(s.observed_generation, Some(3), "{name}");
        }
    }

    #[test]
    fn reports_checkpoints_that_ran_or_failed() {
        let never = SpecState {
            cycles: 0,
            last_cycle: None,
            ..spec(vec![], None)
        };
        let with_a = spec(vec![("a", group(Some(2), vec![]))], None);
        let invalid = SpecState {
            last_error: Some("spec.groups.include[0]: \"[\" is not a valid pattern".into()),
            ..never.clone()
        };
        const DOWN: &str = "target cluster dc2: create topic dc1.checkpoints.internal: timed out";
        // (case, the runner's state for "cp", its start-up error, the report's groups and
        // error: None = no report)
        type Case<'a> = (
            &'a str,
            Option<SpecState>,
            Option<&'a str>,
            Option<(Vec<&'a str>, Option<&'a str>)>,
        );
        let cases: Vec<Case> = vec![
            ("not accepted yet", None, None, None),
            ("accepted, no cycle yet", Some(never.clone()), None, None),
            (
                "ran, no group matched",
                Some(spec(vec![], None)),
                None,
                Some((vec![], None)),
            ),
            (
                "ran with a group",
                Some(with_a.clone()),
                None,
                Some((vec!["a"], None)),
            ),
            (
                "start-up failing before it accepted anything",
                None,
                Some(DOWN),
                Some((vec![], Some(DOWN))),
            ),
            (
                "start-up failing again after cycles (secrets rotated)",
                Some(with_a),
                Some(DOWN),
                Some((vec!["a"], Some(DOWN))),
            ),
            (
                "refused before its first cycle",
                Some(invalid),
                None,
                Some((
                    vec![],
                    Some("spec.groups.include[0]: \"[\" is not a valid pattern"),
                )),
            ),
            (
                "last cycle failed",
                Some(spec(
                    vec![],
                    Some("source cluster dc1: list consumer groups: timed out"),
                )),
                None,
                Some((
                    vec![],
                    Some("source cluster dc1: list consumer groups: timed out"),
                )),
            ),
        ];
        for (name, spec_state, startup, want) in cases {
            let state = RunnerState {
                specs: spec_state
                    .map(|s| ("cp".to_string(), s))
                    .into_iter()
                    .collect(),
                startup_error: startup.map(str::to_string),
                ..RunnerState::default()
            };
            let reports = worker_reports(&state, &[resource()], now());
            let got: Option<(Vec<&str>, Option<&str>)> = match reports.as_slice() {
                [] => None,
                [r] => {
                    assert_eq!(r.name, "cp", "{name}");
                    Some((
                        r.groups.iter().map(|g| g.group.as_str()).collect(),
                        r.error.as_deref(),
                    ))
                }
                more => panic!("{name}: {} reports for one OffsetCheckpoint", more.len()),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn summaries_are_stalest_first_and_bounded() {
        let groups: Vec<(String, GroupState)> = (0..60)
            .map(|i| (format!("g{i:02}"), group(Some(i), vec![])))
            .collect();
        let state = SpecState {
            groups: groups.into_iter().collect(),
            ..spec(vec![], None)
        };
        let s = checkpoint_status(&resource(), Some(&state), None, now());
        assert_eq!(s.groups.len(), 50);
        assert_eq!(s.groups[0].group, "g59");
        assert_eq!(s.groups_checkpointed, 60);
        assert_eq!(s.last_checkpoint_time, Some(Time(ago(0))));
        assert_eq!(s.oldest_checkpoint_age_seconds, Some(59));
    }

    #[test]
    fn error_message_and_transition_time() {
        let mut cp = resource();
        let first = checkpoint_status(&cp, Some(&spec(vec![], Some("boom"))), None, ago(100));
        cp.status = Some(first.clone());
        let again = checkpoint_status(&cp, Some(&spec(vec![], Some("boom again"))), None, now());
        let c = again.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(c.message, "boom again");
        let before = first.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(c.last_transition_time, before.last_transition_time);
    }

    #[test]
    fn failures_keep_since() {
        let prev = vec![FailureState {
            reason: GroupFailureReason::ActiveOnTarget,
            message: "old".into(),
            since: ago(50),
        }];
        let merged = merge_failures(
            &prev,
            vec![
                (GroupFailureReason::ActiveOnTarget, "new".into()),
                (GroupFailureReason::NoOffsetSync, "x".into()),
            ],
            now(),
        );
        assert_eq!(merged[0].since, ago(50));
        assert_eq!(merged[0].message, "new");
        assert_eq!(merged[1].since, now());
        assert!(merge_failures(&prev, vec![], now()).is_empty());
    }
}
