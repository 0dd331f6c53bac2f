//! The CRDs' status rules, shared by the controller (which writes them) and the workers
//! (which fold their own reports with the same rules): conditions, the flow and
//! OffsetCheckpoint folds, list bounds, worker ids. Pure functions of (resource, reports, now).

mod audit;
mod checkpoint;
mod flow;

pub use audit::{fold_audit, AUDITED, INTEGRITY_MISMATCH, MAX_AUDIT_MISMATCHES};
pub use checkpoint::*;
pub use flow::*;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// How often a worker is expected to refresh its `lastHeartbeatTime`.
pub const HEARTBEAT_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
/// A worker entry older than this counts as not ready (3 missed heartbeats).
pub const DEFAULT_STALE_AFTER: SignedDuration = SignedDuration::from_secs(3 * 10);
/// Bound of `status.failures` (the CRD schema's maxItems).
pub const MAX_FAILURES: usize = 100;
/// Bound of `OffsetCheckpointStatus.groups` and `.failures`.
pub const MAX_GROUPS: usize = 50;
/// A checkpoint older than this many intervals is stale.
pub const STALE_INTERVALS: i64 = 3;
/// How many items a condition message lists before "and N more".
const LIST_IN_MESSAGE: usize = 5;

/// Condition types of a MirrorFlow.
pub const READY: &str = "Ready";
pub const REPLICATING: &str = "Replicating";
pub const DATA_LOSS: &str = "DataLoss";
pub const TOPIC_RESET: &str = "TopicReset";
pub const PROGRESS_MISSING: &str = "ProgressMissing";
/// True while a partition is stopped at a record the target refused for good.
pub const RECORD_REJECTED: &str = "RecordRejected";
pub const INVALID_SPEC: &str = "InvalidSpec";
/// kstatus: True (and present) only while the resource gets to its desired state (workers
/// starting, rolling, scaling, a reset applied); reason and message are Ready's.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: True (and present) only while the resource cannot go on until someone acts (an
/// invalid spec, a child it cannot apply, stopped partitions, a connection or worker failing;
/// a failing or stale checkpoint); reason and message are Ready's.
pub const STALLED: &str = "Stalled";
/// True while a worker cannot authenticate to a cluster or verify its TLS certificates.
pub const CONNECTION_FAILED: &str = "ConnectionFailed";
/// True while a cluster has `tls.insecureSkipVerify` (a warning: test clusters only).
pub const INSECURE_TLS: &str = "InsecureTls";
/// True while a worker cannot write to a target topic: the target refused to create it, or
/// it has fewer replicas than its `min.insync.replicas` (no acks=all write can succeed).
pub const TOPIC_UNWRITABLE: &str = "TopicUnwritable";
/// Extra condition type of an OffsetCheckpoint.
pub const STALE: &str = "Stale";
/// Reason of an OffsetCheckpoint's `Ready=False` while its runner reports an error.
pub const CHECKPOINT_FAILED: &str = "CheckpointFailed";

/// `<flow>-worker-<i>`: worker `i`'s id, its pod name and its `status.workers[].id` (also in
/// standalone mode).
pub fn worker_id(flow: &str, index: u32) -> String {
    format!("{flow}-worker-{index}")
}

/// Indexes of the workers of flow `flow` that are not among the `count` it runs now but left
/// an entry in `status.workers` (ids `<flow>-worker-<i>`, [`worker_id`]): scaled away, their
/// transactional ids may still hold a transaction open. Sorted, without duplicates.
pub fn retired_workers<'a>(
    flow: &str,
    ids: impl IntoIterator<Item = &'a str>,
    count: u32,
) -> Vec<u32> {
    let prefix = format!("{flow}-worker-");
    let mut out: Vec<u32> = ids
        .into_iter()
        .filter_map(|id| id.strip_prefix(&prefix)?.parse::<u32>().ok())
        .filter(|i| *i >= count)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Build a condition, keeping the previous `lastTransitionTime` unless the status changed.
pub fn condition(
    previous: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        // The API server stores seconds; keep what we compare with what we read back.
        .unwrap_or_else(|| Time(Timestamp::from_second(now.as_second()).expect("in range")));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// What a fold decides for one condition: its status, reason and message. [`Verdict::stamp`]
/// adds the generation and the transition time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    /// `True`, `False` or `Unknown`.
    status: &'static str,
    reason: &'static str,
    message: String,
}

impl Verdict {
    fn new(status: bool, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: if status { "True" } else { "False" },
            reason,
            message: message.into(),
        }
    }

    fn yes(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(true, reason, message)
    }

    fn no(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(false, reason, message)
    }

    fn unknown(reason: &'static str) -> Self {
        Self {
            status: "Unknown",
            reason,
            message: String::new(),
        }
    }

    /// The condition of type `type_`, keeping `previous`'s transition time (see [`condition`]).
    fn stamp(
        self,
        previous: &[Condition],
        type_: &str,
        generation: Option<i64>,
        now: Timestamp,
    ) -> Condition {
        condition(
            previous,
            type_,
            self.status,
            self.reason,
            self.message,
            generation,
            now,
        )
    }
}

/// Where a resource stands, as kstatus reads it: `Stalled` (it cannot go on until someone
/// acts), `Reconciling` (it is getting there), or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Stalled,
    Reconciling,
    Current,
}

/// kstatus's `Reconciling` or `Stalled` for `phase`: present, True, with Ready's reason and
/// message, only while the resource is in that phase (kstatus reads their absence as False).
fn phase_stamps(
    ready: &Verdict,
    phase: Phase,
    previous: &[Condition],
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Condition> {
    let type_ = match phase {
        Phase::Reconciling => RECONCILING,
        Phase::Stalled => STALLED,
        Phase::Current => return None,
    };
    let v = Verdict::yes(ready.reason, ready.message.clone());
    Some(v.stamp(previous, type_, generation, now))
}

/// The first few of `items` joined for a condition message, with how many more there are.
pub fn list_some(items: &[String]) -> String {
    let mut out = items
        .iter()
        .take(LIST_IN_MESSAGE)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > LIST_IN_MESSAGE {
        out.push_str(&format!(" and {} more", items.len() - LIST_IN_MESSAGE));
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
