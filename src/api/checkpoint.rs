//! The `OffsetCheckpoint` custom resource: which consumer groups a flow checkpoints.

// kube's derive repeats `printcolumn(...)` keys, which clippy mistakes for duplicates.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::defaults;

/// Checkpoints consumer groups of a MirrorFlow's source cluster: their committed offsets are
/// translated to the target cluster (MM2-compatible `<sourceAlias>.checkpoints.internal`
/// records) and, optionally, committed to the same groups on the target so consumers can fail
/// over without skipping records.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "mirrorflow.io",
    version = "v1alpha1",
    kind = "OffsetCheckpoint",
    plural = "offsetcheckpoints",
    doc = "Consumer-group checkpoints for a MirrorFlow: the committed offsets of the selected source groups are translated to the target cluster every intervalSeconds (never past a record the group has not consumed), written as MirrorMaker 2-compatible checkpoints and, when the group is idle on the target, committed there so its consumers can fail over.",
    namespaced,
    status = "OffsetCheckpointStatus",
    shortname = "ocp",
    category = "kafka",
    derive = "PartialEq",
    printcolumn(name = "Flow", type_ = "string", json_path = ".spec.flowRef.name"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Groups",
        type_ = "integer",
        json_path = ".status.groupsCheckpointed"
    ),
    printcolumn(
        name = "OldestAge",
        type_ = "integer",
        json_path = ".status.oldestCheckpointAgeSeconds",
        description = "seconds since the oldest group checkpoint (RPO)"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(cel, validation = Rule::new("self.syncGroupOffsets || self.emitCheckpointsTopic").message("at least one of syncGroupOffsets and emitCheckpointsTopic must be true"))]
#[serde(rename_all = "camelCase")]
pub struct OffsetCheckpointSpec {
    /// The MirrorFlow (same namespace) whose clusters and offset syncs are used.
    pub flow_ref: FlowRef,
    /// Which source consumer groups are checkpointed.
    #[serde(default)]
    pub groups: GroupSelector,
    /// How often offsets are translated and written.
    #[serde(default = "defaults::checkpoint_interval_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub interval_seconds: i32,
    /// Commit translated offsets to the same group on the target when it has no active members.
    #[serde(default = "defaults::true_")]
    pub sync_group_offsets: bool,
    /// Write checkpoint records to `<sourceAlias>.checkpoints.internal` on the target.
    #[serde(default = "defaults::true_")]
    pub emit_checkpoints_topic: bool,
}

/// Reference to a MirrorFlow in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct FlowRef {
    /// MirrorFlow name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Consumer group selection by regular expressions (full match).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupSelector {
    /// A group is checkpointed when it matches one of these...
    #[serde(default = "defaults::include_all")]
    pub include: Vec<String>,
    /// ...and none of these. Defaults are MirrorMaker 2's exclusions.
    #[serde(default = "defaults::group_excludes")]
    pub exclude: Vec<String>,
    /// How often the source is scanned for new groups.
    #[serde(default = "defaults::group_refresh_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub refresh_interval_seconds: i32,
}

impl Default for GroupSelector {
    fn default() -> Self {
        Self {
            include: defaults::include_all(),
            exclude: defaults::group_excludes(),
            refresh_interval_seconds: defaults::group_refresh_seconds(),
        }
    }
}

/// Observed state of an OffsetCheckpoint.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct OffsetCheckpointStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `Stale` (a group's checkpoint is older than 3 intervals); kstatus's
    /// `Reconciling` and `Stalled`, only while True.
    #[serde(default)]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// Number of groups with at least one checkpoint.
    #[serde(default)]
    pub groups_checkpointed: i32,
    /// When the newest checkpoint was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_time: Option<Time>,
    /// Age of the oldest group's latest checkpoint (the recovery point objective), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_checkpoint_age_seconds: Option<i64>,
    /// Per-group summaries (bounded to 50; the stalest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub groups: Vec<GroupSummary>,
    /// Groups that could not be checkpointed or synced (bounded to 50).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub failures: Vec<GroupFailure>,
}

/// One group's checkpoint state.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupSummary {
    /// Consumer group id.
    pub group: String,
    /// Partitions checkpointed.
    pub partitions: i32,
    /// When this group was last checkpointed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint_time: Option<Time>,
    /// Whether the translated offsets are committed to the group on the target.
    #[serde(default)]
    pub synced: bool,
    /// Records the target group would re-read or still has to read, summed over partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_lag: Option<i64>,
}

/// A group that was not checkpointed or synced.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupFailure {
    /// Consumer group id.
    pub group: String,
    /// Why.
    pub reason: GroupFailureReason,
    /// Details.
    pub message: String,
    /// Since when.
    pub since: Time,
}

/// Group failure reasons.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupFailureReason {
    /// The group has active members on the target, so its offsets are not touched.
    ActiveOnTarget,
    /// No offset sync at or below the group's offset yet: nothing safe to write.
    NoOffsetSync,
    /// Committing to the target failed.
    CommitFailed,
}
