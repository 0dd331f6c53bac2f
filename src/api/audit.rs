//! `spec.audit` (the continuous integrity audit) and what it reports: each worker's entry
//! `audit`, folded into `status.audit` and the `Audited` condition (`api::status::audit`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The continuous integrity audit: each worker compares, every `intervalSeconds`, a range of
/// about `recordsPerPartition` replicated records of each partition it owns with their copies
/// on the target (key, value, headers, timestamp, partition), through the committed progress
/// and the offset syncs, moving across the whole retained log from run to run. A mismatch
/// sets `Audited=False` (reason `IntegrityMismatch`) and never stops replication. Cost per
/// run: reading `recordsPerPartition` records of each owned partition once more from each
/// cluster (about 2 × recordsPerPartition × record size of network reads per partition), and
/// about 60 bytes of memory per record compared while a range is compared; at the defaults
/// (1,000 records every 300 s) a few records a second per partition.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    /// Run the audit (on by default).
    #[serde(default = "super::defaults::true_")]
    pub enabled: bool,
    /// Seconds between two runs of a worker.
    #[serde(default = "default_interval_seconds")]
    #[schemars(range(min = 10, max = 86400))]
    pub interval_seconds: u32,
    /// About how many records of each owned partition one run compares.
    #[serde(default = "default_records_per_partition")]
    #[schemars(range(min = 1, max = 1000000))]
    pub records_per_partition: u32,
}

fn default_interval_seconds() -> u32 {
    300
}

fn default_records_per_partition() -> u32 {
    1_000
}

impl Default for Audit {
    fn default() -> Self {
        Self {
            enabled: true,
            interval_seconds: default_interval_seconds(),
            records_per_partition: default_records_per_partition(),
        }
    }
}

/// What the audit found, per kind: a worker's since it started, or the flow's (the sum).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditCounts {
    /// Records compared (source records with their copies, and target records).
    #[serde(default)]
    pub compared: u64,
    /// Replicated source records without a copy on the target.
    #[serde(default)]
    pub missing: u64,
    /// Target records no source record maps to.
    #[serde(default)]
    pub extra: u64,
    /// Copies with other bytes than their source record.
    #[serde(default)]
    pub different: u64,
    /// Copies written more than once (AtLeastOnce re-sends; a mismatch under ExactlyOnce or
    /// beyond the documented bound).
    #[serde(default)]
    pub duplicated: u64,
    /// Records not compared because a side no longer holds them (retention, compaction).
    #[serde(default)]
    pub skipped: u64,
}

/// The audit's report: in a worker's entry (its own partitions) and in `status.audit` (the
/// flow's).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// Counts since the worker started.
    #[serde(default)]
    pub records: AuditCounts,
    /// When the last run finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_time: Option<Time>,
    /// Partitions whose last audited range has a mismatch, each as
    /// `<kind> in <topic>/<partition>: source offset <o>, target offset <o>` (bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub mismatches: Vec<String>,
    /// Why the last run could not compare (a cluster unreachable, ...); absent when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl AuditReport {
    /// Without what changes on every run (time, compared and skipped counts): what makes
    /// the controller fold the entry again.
    pub fn material(&self) -> Self {
        Self {
            records: AuditCounts {
                compared: 0,
                skipped: 0,
                ..self.records.clone()
            },
            last_run_time: None,
            ..self.clone()
        }
    }
}
