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
    /// The timestamp (to the second, rounded down) of the last record the target partition
    /// held once replication stopped (Done; read_committed: transaction markers and aborted
    /// records are skipped). The flow copies each source record's timestamp, so this is the
    /// source's producer time (CreateTime), or its broker's append time for a source topic
    /// with `LogAppendTime`; a target topic set to `LogAppendTime` restamps records and
    /// makes it the copy's time instead. Absent when the partition holds no record or it
    /// could not be read (the message says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_replicated_time: Option<Time>,
    /// Records below `sourceEnd` not on the target (Planned; 0 after a full drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_replicated: Option<i64>,
    /// The topic on the target (Done): where failing back reads from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_topic: Option<String>,
    /// The target's end offset of the partition once replication stopped (Done): a flow
    /// failing back starts there, so it copies only what was written on the target after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_end: Option<i64>,
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
    /// The recovery point in time: the earliest `lastReplicatedTime` over the partitions not
    /// known to be complete (all of them in an Unplanned failover; none after a full drain).
    /// Every such partition holds the source's records up to at least this time. A partition
    /// that took no writes for long sets it early although nothing of it is missing: the
    /// per-partition times (`mirrorflow status`; `partitions`, oldest first after those
    /// behind) show which one sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point: Option<Time>,
    /// `startedAt` minus `recoveryPoint`, in whole seconds (0 when record timestamps are
    /// ahead of the worker's clock): at most this much time of source writes may be missing
    /// from the target. Record timestamps are set by producers (CreateTime), so their clocks
    /// bound its accuracy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point_seconds: Option<i64>,
    /// Per source partition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub partitions: Vec<FailoverPartition>,
    /// Per selected consumer group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub groups: Vec<FailoverGroup>,
    /// Partitions left out of `partitions` in `status.failover` (those behind are listed
    /// first); worker 0's failover store on the target keeps them all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_not_shown: Option<u32>,
}

/// The partitions `status.failover` lists: `kubectl describe` stays one screen.
pub const FAILOVER_PARTITIONS_SHOWN: usize = 8;

impl FailoverReport {
    /// A report of request `id` in `phase`, with nothing measured yet.
    pub fn new(id: &str, mode: FailoverMode, phase: FailoverPhase) -> Self {
        Self {
            id: id.to_string(),
            mode,
            phase,
            message: None,
            started_at: None,
            finished_at: None,
            not_replicated: None,
            recovery_point: None,
            recovery_point_seconds: None,
            partitions: Vec::new(),
            groups: Vec::new(),
            partitions_not_shown: None,
        }
    }

    /// The report as `status.failover` holds it: the partitions behind first (most records
    /// not replicated first), then the oldest `lastReplicatedTime` first (those without one
    /// last), then in order; at most [`FAILOVER_PARTITIONS_SHOWN`]. Pure; bounding a
    /// bounded report changes nothing.
    pub fn bounded(mut self) -> Self {
        if self.partitions.len() > FAILOVER_PARTITIONS_SHOWN {
            self.partitions.sort_by_key(|p| {
                (
                    std::cmp::Reverse(p.not_replicated.unwrap_or(0)),
                    p.last_replicated_time.is_none(),
                    p.last_replicated_time.as_ref().map(|t| t.0),
                )
            });
            let cut = self.partitions.len() - FAILOVER_PARTITIONS_SHOWN;
            self.partitions.truncate(FAILOVER_PARTITIONS_SHOWN);
            let before = self.partitions_not_shown.unwrap_or(0);
            self.partitions_not_shown = Some(before + u32::try_from(cut).unwrap_or(u32::MAX));
        }
        self
    }
}

/// What failing back (`spec.source.startFrom.afterFailover`) did: worker 0's entry.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailbackReport {
    /// The failed-over flow, `NAMESPACE/NAME`.
    pub flow: String,
    /// The failover's id.
    pub id: String,
    /// Partitions started at the failover's recorded positions.
    pub partitions_started: i32,
    /// Diverged records over all partitions: taken by the old primary (this flow's target)
    /// after the failover's recorded point, never on the new primary.
    pub diverged_records: i64,
    /// Diverged records copied to `<topic>.diverged` (`copyDiverged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged_copied: Option<i64>,
    /// Per partition (diverged first); at most [`FAILBACK_PARTITIONS_SHOWN`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub partitions: Vec<FailbackPartition>,
    /// Partitions left out of `partitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitions_not_shown: Option<u32>,
}

/// One partition of a failback.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FailbackPartition {
    /// Source topic (on the new primary).
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The source offset it started at (the failover's `targetEnd`).
    pub start_at: i64,
    /// The records the old primary holds that never reached the new primary, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diverged: Option<Diverged>,
}

/// Diverged records of one partition of the old primary (this flow's target).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Diverged {
    /// The topic on the old primary.
    pub topic: String,
    /// The offset of the first diverged record.
    pub first_offset: i64,
    /// The offset of the last diverged record.
    pub last_offset: i64,
    /// Records (read_committed: transaction markers and aborted records are not records).
    pub records: i64,
}

/// The partitions a failback report lists in status.
pub const FAILBACK_PARTITIONS_SHOWN: usize = 8;

impl FailbackReport {
    /// The report as status holds it: diverged partitions first (most records first), at
    /// most [`FAILBACK_PARTITIONS_SHOWN`]. Pure.
    pub fn bounded(mut self) -> Self {
        if self.partitions.len() > FAILBACK_PARTITIONS_SHOWN {
            self.partitions
                .sort_by_key(|p| std::cmp::Reverse(p.diverged.as_ref().map_or(0, |d| d.records)));
            let cut = self.partitions.len() - FAILBACK_PARTITIONS_SHOWN;
            self.partitions.truncate(FAILBACK_PARTITIONS_SHOWN);
            let before = self.partitions_not_shown.unwrap_or(0);
            self.partitions_not_shown = Some(before + u32::try_from(cut).unwrap_or(u32::MAX));
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(partition: i32, behind: Option<i64>) -> FailoverPartition {
        FailoverPartition {
            topic: "t".into(),
            partition,
            source_end: behind.map(|b| 100 + b),
            target_holds: 100,
            last_replicated_time: None,
            not_replicated: behind,
            target_topic: None,
            target_end: None,
        }
    }

    fn report(partitions: Vec<FailoverPartition>) -> FailoverReport {
        FailoverReport {
            partitions,
            ..FailoverReport::new("m", FailoverMode::Planned, FailoverPhase::TimedOut)
        }
    }

    #[test]
    fn status_lists_the_partitions_behind_first_and_at_most_a_screen() {
        let n = FAILOVER_PARTITIONS_SHOWN as i32;
        // (partitions as reported, partition ids shown, not shown)
        let few: Vec<_> = (0..n).map(|p| part(p, Some(0))).collect();
        let mut many: Vec<_> = (0..n + 4).map(|p| part(p, Some(0))).collect();
        many[n as usize + 2].not_replicated = Some(5);
        many[3].not_replicated = Some(9);
        let unplanned: Vec<_> = (0..n + 1).map(|p| part(p, None)).collect();
        // Times: partition n - 1 the oldest, then 2; the rest hold no record.
        let at = |s: i64| Some(Time(jiff::Timestamp::from_second(s).unwrap()));
        let mut timed: Vec<_> = (0..n + 2).map(|p| part(p, None)).collect();
        timed[2].last_replicated_time = at(2_000);
        timed[n as usize - 1].last_replicated_time = at(1_000);
        let cases = [
            ("fits", few, (0..n).collect::<Vec<_>>(), None),
            (
                "behind first, most first",
                many,
                [3, n + 2]
                    .into_iter()
                    .chain((0..n).filter(|p| *p != 3).take(n as usize - 2))
                    .collect(),
                Some(4),
            ),
            ("unplanned: in order", unplanned, (0..n).collect(), Some(1)),
            (
                "oldest last record first, then those without one",
                timed,
                [n - 1, 2]
                    .into_iter()
                    .chain(
                        (0..n + 2)
                            .filter(|p| *p != 2 && *p != n - 1)
                            .take(n as usize - 2),
                    )
                    .collect(),
                Some(2),
            ),
        ];
        for (name, parts, shown, not_shown) in cases {
            let b = report(parts).bounded();
            let got: Vec<i32> = b.partitions.iter().map(|p| p.partition).collect();
            assert_eq!((got, b.partitions_not_shown), (shown, not_shown), "{name}");
            assert_eq!(
                b.clone().bounded(),
                b,
                "{name}: bounding twice changes nothing"
            );
        }
    }

    #[test]
    fn failback_status_lists_diverged_partitions_first() {
        let part = |partition: i32, records: i64| FailbackPartition {
            topic: "t".into(),
            partition,
            start_at: 5,
            diverged: (records > 0).then(|| Diverged {
                topic: "t".into(),
                first_offset: 10,
                last_offset: 9 + records,
                records,
            }),
        };
        let n = FAILBACK_PARTITIONS_SHOWN as i32;
        let mut parts: Vec<_> = (0..n + 2).map(|p| part(p, 0)).collect();
        parts[n as usize + 1] = part(n + 1, 3);
        let report = FailbackReport {
            flow: "ns/f".into(),
            id: "x".into(),
            partitions_started: n + 2,
            diverged_records: 3,
            diverged_copied: None,
            partitions: parts,
            partitions_not_shown: None,
        };
        let b = report.bounded();
        let got: Vec<i32> = b.partitions.iter().map(|p| p.partition).collect();
        let want: Vec<i32> = [n + 1].into_iter().chain(0..n - 1).collect();
        assert_eq!((got, b.partitions_not_shown), (want, Some(2)));
        assert_eq!(b.clone().bounded(), b, "bounding twice changes nothing");
    }
}
