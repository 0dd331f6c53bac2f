//! What a worker reports: per-partition state, failures, lag, the last applied reset.
//!
//! The engine publishes a [`WorkerSnapshot`] through a [`StatusSink`]. The HTTP `/status`
//! endpoint serves the latest snapshot as JSON; in Kubernetes mode a sink turns it into the
//! worker's `status.workers[]` entry with [`WorkerSnapshot::to_worker_status`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::api::status::{worker_id, MAX_FAILURES};
use crate::api::{
    AppliedReset, ConnectionProblem, Delivery, PartitionFailure, ReplicationLag,
    ReplicationLatency, TopicAclSync, WorkerState, WorkerStatus,
};

/// Why a partition stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureKind {
    /// The target refused a record for good (too large, invalid, policy violation). The
    /// partition stays stopped at that record, across restarts, until a reset: `RetryRecord`
    /// once the target topic is fixed (e.g. `max.message.bytes`), or `SkipRecord`.
    RecordRejected,
    /// Records were deleted on the source before they were replicated (offset validation).
    DataLoss,
    /// The source topic was deleted and recreated (offset validation).
    TopicReset,
    /// No progress, but the target topic already holds records.
    ProgressMissing,
}

/// A stopped partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionFailed {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The source offset concerned (the rejected record, or the position that was out of
    /// range).
    pub offset: i64,
    /// What happened and how to clear it, with the broker's message.
    pub message: String,
    /// The entry for `status.failures` (absent only for a persisted failure this build
    /// cannot read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<PartitionFailure>,
}

/// State of one owned partition. `Failed` stops only that partition; the others go on.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum PartitionState {
    /// Owned, position not known yet (target topic missing, progress not read).
    Starting,
    /// Being replicated.
    Replicating,
    /// `spec.paused` is set; the position is kept.
    Paused,
    /// Stopped by a failure.
    Failed(PartitionFailed),
}

impl PartitionState {
    /// Whether the partition is stopped by a failure.
    pub fn is_failed(&self) -> bool {
        matches!(self, PartitionState::Failed(_))
    }
}

/// One owned partition in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionSnapshot {
    /// Source topic.
    pub topic: String,
    /// Partition number (same on both sides).
    pub partition: i32,
    /// Target topic.
    pub target_topic: String,
    /// Next source offset to replicate (committed), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// Source high watermark at the last check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_watermark: Option<i64>,
    /// Records not yet replicated (high watermark − position).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_records: Option<i64>,
    /// Source timestamp → target acknowledgement of the last replicated record, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
    /// State.
    #[serde(flatten)]
    pub state: PartitionState,
}

/// Everything a worker reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerSnapshot {
    /// `<flow>-worker-<i>`.
    pub worker_id: String,
    /// Worker index.
    pub worker_index: u32,
    /// Number of workers of the flow.
    pub worker_count: u32,
    /// Namespace of the flow.
    pub namespace: String,
    /// Flow name.
    pub flow: String,
    /// Delivery guarantee in use.
    pub delivery: Delivery,
    /// Overall state.
    pub state: WorkerState,
    /// Why the worker is Failed or Degraded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Owned partitions, sorted by topic and partition.
    pub partitions: Vec<PartitionSnapshot>,
    /// DataLoss / TopicReset / ProgressMissing / RecordRejected failures (for
    /// `status.failures`).
    pub failures: Vec<PartitionFailure>,
    /// The last reset request handled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_applied_reset: Option<AppliedReset>,
    /// Lag over the owned partitions.
    pub replication_lag: ReplicationLag,
    /// Clusters the worker cannot authenticate to or verify (from the connection health).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connection_problems: Vec<ConnectionProblem>,
    /// The topic ACL sync (worker 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_acls: Option<TopicAclSync>,
    /// Target topics this worker cannot write to: creation refused, or a replication factor
    /// below `min.insync.replicas` (why, naming each).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unwritable_topics: Vec<String>,
    /// Heartbeat latency (worker 0, `spec.heartbeats`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication_latency: Option<ReplicationLatency>,
    /// The continuous integrity audit of the owned partitions (`worker::audit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<crate::api::AuditReport>,
    /// The failover (worker 0, `spec.failover`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::api::FailoverReport>,
    /// Partitions started from MirrorMaker 2's positions
    /// (`spec.source.startFrom.mirrorMaker2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mirror_maker2_takeover: Option<crate::api::MirrorMaker2Takeover>,
    /// Where partitions started after a failover, and what diverged (worker 0,
    /// `spec.source.startFrom.afterFailover`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failback: Option<crate::api::FailbackReport>,
    /// When this snapshot was taken.
    pub time: Time,
}

impl WorkerSnapshot {
    /// A snapshot of a worker that has not started replicating.
    pub fn starting(
        namespace: &str,
        flow: &str,
        index: u32,
        count: u32,
        delivery: Delivery,
    ) -> Self {
        Self {
            worker_id: worker_id(flow, index),
            worker_index: index,
            worker_count: count,
            namespace: namespace.to_string(),
            flow: flow.to_string(),
            delivery,
            state: WorkerState::Starting,
            message: None,
            partitions: Vec::new(),
            failures: Vec::new(),
            last_applied_reset: None,
            replication_lag: ReplicationLag::default(),
            connection_problems: Vec::new(),
            topic_acls: None,
            unwritable_topics: Vec::new(),
            replication_latency: None,
            audit: None,
            failover: None,
            mirror_maker2_takeover: None,
            failback: None,
            time: Time(jiff::Timestamp::now()),
        }
    }

    /// Partitions stopped by a failure.
    pub fn failed_partitions(&self) -> usize {
        self.partitions
            .iter()
            .filter(|p| p.state.is_failed())
            .count()
    }

    /// The worker's `status.workers[]` entry (without checkpoint reports).
    pub fn to_worker_status(&self, observed_generation: Option<i64>) -> WorkerStatus {
        WorkerStatus {
            id: self.worker_id.clone(),
            partitions: i32::try_from(self.partitions.len()).unwrap_or(i32::MAX),
            state: self.state,
            last_heartbeat_time: Some(self.time.clone()),
            message: self.message.clone(),
            observed_generation,
            failures: self.failures.iter().take(MAX_FAILURES).cloned().collect(),
            stopped_partitions: Vec::new(),
            replication_lag: Some(self.replication_lag.clone()),
            last_applied_reset: self.last_applied_reset.clone(),
            // Filled in by the checkpoint side, which owns those reports.
            checkpoints: Vec::new(),
            connection_problems: self.connection_problems.clone(),
            topic_acls: self.topic_acls.clone(),
            unwritable_topics: self.unwritable_topics.iter().take(20).cloned().collect(),
            replication_latency: self.replication_latency.clone(),
            audit: self.audit.clone(),
            failover: self.failover.clone(),
            mirror_maker2_takeover: self.mirror_maker2_takeover.clone(),
            failback: self
                .failback
                .clone()
                .map(crate::api::FailbackReport::bounded),
        }
    }
}

/// The worker state and message from its situation. Pure.
///
/// `fatal` (the worker cannot replicate at all) wins; then paused; then failed partitions
/// make it Degraded (the rest still replicate); `started` means positions are known and the
/// consumer runs.
pub fn worker_state(
    fatal: Option<&str>,
    started: bool,
    paused: bool,
    partitions: &[PartitionSnapshot],
) -> (WorkerState, Option<String>) {
    if let Some(msg) = fatal {
        return (WorkerState::Failed, Some(msg.to_string()));
    }
    if !started {
        return (WorkerState::Starting, None);
    }
    let failed: Vec<&PartitionSnapshot> =
        partitions.iter().filter(|p| p.state.is_failed()).collect();
    if !failed.is_empty() {
        let mut msg = format!(
            "{} of {} partitions failed: ",
            failed.len(),
            partitions.len()
        );
        for (i, p) in failed.iter().take(3).enumerate() {
            if i > 0 {
                msg.push_str("; ");
            }
            if let PartitionState::Failed(f) = &p.state {
                msg.push_str(&format!("{}/{}: {}", p.topic, p.partition, f.message));
            }
        }
        if failed.len() > 3 {
            msg.push_str(&format!("; and {} more (see /status)", failed.len() - 3));
        }
        return (WorkerState::Degraded, Some(msg));
    }
    if paused {
        return (WorkerState::Paused, None);
    }
    (WorkerState::Running, None)
}

/// Lag over partitions: records summed, seconds the worst among lagging partitions.
pub fn total_lag(partitions: &[PartitionSnapshot]) -> ReplicationLag {
    let records = partitions
        .iter()
        .filter_map(|p| p.lag_records)
        .map(|r| r.max(0))
        .sum();
    let seconds = partitions
        .iter()
        .filter(|p| p.lag_records.unwrap_or(0) > 0)
        .filter_map(|p| p.lag_seconds)
        .fold(0.0f64, f64::max);
    ReplicationLag {
        records,
        seconds: seconds.ceil() as i64,
    }
}

/// DataLoss / TopicReset / ProgressMissing / RecordRejected failures among the partitions,
/// for `status.failures`.
pub fn validation_failures(partitions: &[PartitionSnapshot]) -> Vec<PartitionFailure> {
    partitions
        .iter()
        .filter_map(|p| match &p.state {
            PartitionState::Failed(PartitionFailed {
                failure: Some(f), ..
            }) => Some(f.clone()),
            _ => None,
        })
        .take(MAX_FAILURES)
        .collect()
}

/// Where the engine publishes snapshots. Must not block: an implementation that writes to an
/// API server keeps the latest snapshot and pushes it from its own task.
pub trait StatusSink: Send + Sync {
    /// A new snapshot is available.
    fn publish(&self, snapshot: &WorkerSnapshot);
}

impl StatusSink for tokio::sync::watch::Sender<WorkerSnapshot> {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        self.send_replace(snapshot.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(
        topic: &str,
        lag: Option<i64>,
        secs: Option<f64>,
        state: PartitionState,
    ) -> PartitionSnapshot {
        PartitionSnapshot {
            topic: topic.into(),
            partition: 0,
            target_topic: format!("dc1.{topic}"),
            position: Some(5),
            high_watermark: lag.map(|l| l + 5),
            lag_records: lag,
            lag_seconds: secs,
            state,
        }
    }

    fn failed(kind: FailureKind, msg: &str) -> PartitionState {
        PartitionState::Failed(PartitionFailed {
            kind,
            offset: 5,
            message: msg.into(),
            failure: None,
        })
    }

    #[test]
    fn worker_state_table() {
        let ok = part("a", Some(0), None, PartitionState::Replicating);
        let bad = part(
            "b",
            Some(3),
            None,
            failed(FailureKind::RecordRejected, "too large"),
        );
        let cases = [
            (
                Some("no tx"),
                true,
                false,
                vec![ok.clone()],
                WorkerState::Failed,
                Some("no tx"),
            ),
            (None, false, false, vec![], WorkerState::Starting, None),
            (
                None,
                true,
                false,
                vec![ok.clone()],
                WorkerState::Running,
                None,
            ),
            (
                None,
                true,
                true,
                vec![ok.clone()],
                WorkerState::Paused,
                None,
            ),
            (
                None,
                true,
                true,
                vec![ok.clone(), bad.clone()],
                WorkerState::Degraded,
                Some("1 of 2 partitions failed: b/0: too large"),
            ),
        ];
        for (fatal, started, paused, parts, want_state, want_msg) in cases {
            let (state, msg) = worker_state(fatal, started, paused, &parts);
            assert_eq!(state, want_state, "{fatal:?} {started} {paused}");
            assert_eq!(msg.as_deref(), want_msg);
        }
    }

    #[test]
    fn lag_totals() {
        let parts = [
            part("a", Some(10), Some(2.5), PartitionState::Replicating),
            part("b", Some(0), Some(99.0), PartitionState::Replicating),
            part("c", None, None, PartitionState::Starting),
            part("d", Some(1), Some(0.2), PartitionState::Replicating),
        ];
        assert_eq!(
            total_lag(&parts),
            ReplicationLag {
                records: 11,
                seconds: 3
            }
        );
    }

    #[test]
    fn snapshot_json_shape() {
        let mut s = WorkerSnapshot::starting("ns", "f", 1, 2, Delivery::AtLeastOnce);
        s.partitions = vec![part(
            "b",
            Some(3),
            None,
            failed(FailureKind::RecordRejected, "too large"),
        )];
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["workerId"], "f-worker-1");
        assert_eq!(v["partitions"][0]["state"], "failed");
        assert_eq!(v["partitions"][0]["kind"], "RecordRejected");
        assert_eq!(v["partitions"][0]["lagRecords"], 3);
        let st = s.to_worker_status(Some(4));
        assert_eq!(st.id, "f-worker-1");
        assert_eq!(st.partitions, 1);
        assert_eq!(st.observed_generation, Some(4));
    }
}
