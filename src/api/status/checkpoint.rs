//! The OffsetCheckpoint status fold.

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;

use super::*;
use crate::api::{
    GroupFailure, GroupSummary, OffsetCheckpoint, OffsetCheckpointStatus, ValidationErrors,
};

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
    } else {
        match obs.reports {
            None => Some((
                "AwaitingCheckpoints",
                "no worker has reported checkpoints for this OffsetCheckpoint yet".into(),
            )),
            // Nothing checkpointed yet to judge staleness on: the error is all there is.
            Some(CheckpointReports {
                groups,
                error: Some(e),
                ..
            }) if groups.is_empty() => Some((CHECKPOINT_FAILED, e.clone())),
            Some(_) => None,
        }
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
    let ready = if let Some(error) = &reports.error {
        condition(
            pc,
            READY,
            "False",
            CHECKPOINT_FAILED,
            error.clone(),
            gen,
            now,
        )
    } else if !stale_groups.is_empty() {
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
