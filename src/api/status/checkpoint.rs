//! The OffsetCheckpoint status fold.

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::*;
use crate::api::{
    GroupFailure, GroupSummary, OffsetCheckpoint, OffsetCheckpointStatus, ValidationErrors,
};

/// Ready reason until a worker reports (progress, not a stop).
const AWAITING_CHECKPOINTS: &str = "AwaitingCheckpoints";

/// Checkpoint data the workers report for one OffsetCheckpoint (`status.workers[].checkpoints`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckpointReports {
    pub groups: Vec<GroupSummary>,
    pub failures: Vec<GroupFailure>,
    /// The runner's start-up, or its last cycle or group sync, failed as a whole.
    pub error: Option<String>,
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
    let (gen, now) = (cp.metadata.generation, obs.now);
    let stale_after =
        SignedDuration::from_secs(STALE_INTERVALS * i64::from(cp.spec.interval_seconds.max(1)));

    if let Some(ready) = blocked(obs) {
        let stale = Verdict::unknown(ready.reason);
        let phase = if ready.reason == AWAITING_CHECKPOINTS {
            Phase::Reconciling
        } else {
            Phase::Stalled
        };
        let mut conditions = vec![
            ready.clone().stamp(pc, READY, gen, now),
            stale.stamp(pc, STALE, gen, now),
        ];
        conditions.extend(phase_stamps(&ready, phase, pc, gen, now));
        return OffsetCheckpointStatus {
            observed_generation: gen,
            conditions,
            ..Default::default()
        };
    }
    let reports = obs.reports.expect("blocked without reports");
    let times: Vec<Timestamp> = reports
        .groups
        .iter()
        .filter_map(|g| g.last_checkpoint_time.as_ref().map(|t| t.0))
        .collect();
    let stale = stale_groups(&reports.groups, now, stale_after);
    let ready = checkpoint_ready(reports, stale.len(), times.len());
    // A failing runner or a stale group needs someone to look: Stalled.
    let phase = if ready.status == "True" {
        Phase::Current
    } else {
        Phase::Stalled
    };
    let mut conditions = vec![
        ready.clone().stamp(pc, READY, gen, now),
        checkpoint_stale(&stale, stale_after).stamp(pc, STALE, gen, now),
    ];
    conditions.extend(phase_stamps(&ready, phase, pc, gen, now));
    let mut failures = reports.failures.clone();
    failures.sort_by(|a, b| a.group.cmp(&b.group));
    failures.truncate(MAX_GROUPS);
    OffsetCheckpointStatus {
        observed_generation: gen,
        conditions,
        groups_checkpointed: times.len() as i32,
        last_checkpoint_time: times.iter().max().map(|t| Time(*t)),
        oldest_checkpoint_age_seconds: times
            .iter()
            .min()
            .map(|t| now.duration_since(*t).as_secs().max(0)),
        groups: stalest_first(&reports.groups),
        failures,
    }
}

/// Why nothing can be judged yet, in this order: the spec, the flow it names, no report
/// yet, or a runner that fails before checkpointing anything. `Ready` is False with it and
/// `Stale` Unknown.
fn blocked(obs: &CheckpointObservation<'_>) -> Option<Verdict> {
    let cp = obs.checkpoint;
    let flow_name = &cp.spec.flow_ref.name;
    if let Some(errs) = obs.invalid {
        return Some(Verdict::no("InvalidSpec", errs.to_string()));
    }
    match obs.flow {
        FlowRefState::NotFound => {
            return Some(Verdict::no(
                "FlowNotFound",
                format!(
                    "MirrorFlow {flow_name:?} (spec.flowRef.name) not found in namespace {:?}",
                    cp.namespace().unwrap_or_default()
                ),
            ))
        }
        FlowRefState::Found { invalid: true } => {
            return Some(Verdict::no(
                "FlowInvalid",
                format!(
                    "MirrorFlow {flow_name:?} has an invalid spec (see its InvalidSpec condition)"
                ),
            ))
        }
        FlowRefState::Found { invalid: false } => {}
    }
    match obs.reports {
        None => Some(Verdict::no(
            AWAITING_CHECKPOINTS,
            "no worker has reported checkpoints for this OffsetCheckpoint yet",
        )),
        // Nothing checkpointed yet to judge staleness on: the error is all there is.
        Some(CheckpointReports {
            groups,
            error: Some(e),
            ..
        }) if groups.is_empty() => Some(Verdict::no(CHECKPOINT_FAILED, e.clone())),
        Some(_) => None,
    }
}

/// The groups whose last checkpoint is older than `stale_after` at `now` (never-checkpointed
/// groups are not: they have no age yet).
fn stale_groups(
    groups: &[GroupSummary],
    now: Timestamp,
    stale_after: SignedDuration,
) -> Vec<String> {
    groups
        .iter()
        .filter(|g| {
            g.last_checkpoint_time
                .as_ref()
                .is_some_and(|t| now.duration_since(t.0) > stale_after)
        })
        .map(|g| g.group.clone())
        .collect()
}

/// `Stale`: True, naming the stale groups, while any is.
fn checkpoint_stale(stale: &[String], stale_after: SignedDuration) -> Verdict {
    let threshold = format!(
        "{STALE_INTERVALS} × intervalSeconds ({}s)",
        stale_after.as_secs()
    );
    if stale.is_empty() {
        Verdict::no(
            "Fresh",
            format!("every group checkpointed within {threshold}"),
        )
    } else {
        Verdict::yes(
            "CheckpointsStale",
            format!(
                "last checkpoint older than {threshold}: {}",
                list_some(stale)
            ),
        )
    }
}

/// `Ready` once the runner reports: False while its cycles fail or a group is stale; True
/// otherwise, also when no group matches.
fn checkpoint_ready(reports: &CheckpointReports, stale: usize, checkpointed: usize) -> Verdict {
    if let Some(error) = &reports.error {
        Verdict::no(CHECKPOINT_FAILED, error.clone())
    } else if stale > 0 {
        Verdict::no("CheckpointsStale", format!("{stale} group(s) stale"))
    } else if reports.groups.is_empty() {
        Verdict::yes(
            "NoGroupsMatched",
            "no source consumer group matches spec.groups",
        )
    } else {
        Verdict::yes(
            "Checkpointing",
            format!("{checkpointed} group(s) checkpointed"),
        )
    }
}

/// The group summaries the status shows: stalest first (never-checkpointed groups are the
/// stalest of all), then by name, at most [`MAX_GROUPS`].
fn stalest_first(groups: &[GroupSummary]) -> Vec<GroupSummary> {
    let mut groups = groups.to_vec();
    groups.sort_by(|a, b| {
        let ka = a.last_checkpoint_time.as_ref().map(|t| t.0);
        let kb = b.last_checkpoint_time.as_ref().map(|t| t.0);
        ka.cmp(&kb).then_with(|| a.group.cmp(&b.group))
    });
    groups.truncate(MAX_GROUPS);
    groups
}

#[cfg(test)]
mod tests;
