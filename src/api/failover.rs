//! `spec.failover` (moving consumers to the target as one declared operation) and its report,
//! `status.failover` (worker 0 runs it and reports it in its entry; the controller copies it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to fail the flow's consumers over to the target. Applied once per `id`: the
/// flow then stops replicating and stays stopped while `spec.failover` names that id
/// (remove the field to replicate again).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRequest {
    /// Any string; a new value is a new request. Applied at most once.
    #[schemars(length(min = 1, max = 128))]
    pub id: String,
    /// `Planned` (the source is up: drain it first) or `Unplanned` (the source is gone).
    #[serde(default)]
    pub mode: FailoverMode,
    /// Planned only: how long to wait for the target to hold every record the source held
    /// when the failover began. When it passes, nothing else changes (no group is moved,
    /// replication goes on) and the report names the partitions still behind.
    #[serde(default = "default_drain_timeout_seconds")]
    #[schemars(range(min = 1, max = 86400))]
    pub drain_timeout_seconds: u32,
}

fn default_drain_timeout_seconds() -> u32 {
    300
}

/// How a failover treats the source.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FailoverMode {
    /// The source answers: take its end offsets, replicate until the target holds them,
    /// translate every selected group exactly and commit it on the target, then stop.
    #[default]
    Planned,
    /// The source is unreachable: commit every selected group's last checkpoint on the
    /// target, report what the target holds (the recovery point), then stop.
    Unplanned,
}

/// Where a failover is.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverPhase {
    /// Replicating until the target holds the source ends taken at the start.
    Draining,
    /// Committing the groups on the target.
    Committing,
    /// Groups committed, replication stopped.
    Done,
    /// The drain did not finish in time: nothing moved, replication goes on.
    TimedOut,
    /// Could not run (see `message`); nothing moved.
    Refused,
}

impl FailoverPhase {
    /// Whether the failover finished (successfully or not).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Done | Self::TimedOut | Self::Refused)
    }
}

/// One source partition in a failover report.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPartition {
    /// Source topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The source end offset taken when the failover began (Planned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_end: Option<i64>,
    /// The source position the target holds: every record below it is replicated.
    pub target_holds: i64,
    /// Records below `sourceEnd` not on the target (Planned; 0 after a full drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_replicated: Option<i64>,
}

/// One consumer group in a failover report.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverGroup {
    /// Group id.
    pub group: String,
    /// Where the group is on the target after the failover, as `topic/partition@offset`
    /// (target topic names): the translated offset, or its own where it already was at or
    /// past it (never moved backwards).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub committed: Vec<String>,
    /// Records its consumers read again on the target: 0 when every translation is exact
    /// (contiguous topics); absent when a translation is only safe (never skips, may re-read
    /// up to `offsetSyncs.lagMax` per partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_read_again: Option<i64>,
    /// Why the group was not touched (active members on the target, no checkpoint, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// What a failover did: worker 0's entry and `status.failover`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverReport {
    /// The request's id.
    pub id: String,
    /// The request's mode.
    pub mode: FailoverMode,
    /// Where it is.
    pub phase: FailoverPhase,
    /// One line on the outcome (why it was refused, which partitions are behind, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it reached its final phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
    /// Records not replicated, over all partitions (Planned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_replicated: Option<i64>,
    /// Per source partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub partitions: Vec<FailoverPartition>,
    /// Per selected consumer group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub groups: Vec<FailoverGroup>,
}
