//! A failover's decisions: whether the drain is done, and what happens to each group. Pure;
//! the runner (`super::runner`) feeds them what it read from both clusters.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{FailoverGroup, FailoverPartition, FailoverReport};
use crate::kafka::admin::GroupOffset;
use crate::worker::checkpoint::translate::{
    decide_group_sync, GroupSyncDecision, TargetGroupState,
};

/// `(topic, partition)`.
pub type Tp = (String, i32);

/// The partitions whose offsets `[targetHolds, sourceEnd)` must be read to know how many
/// records they hold: offsets are not records (transaction markers and aborted records
/// take offsets that no reader gets).
pub fn ranges_to_count(ends: &BTreeMap<Tp, i64>, holds: &BTreeMap<Tp, i64>) -> Vec<(Tp, i64, i64)> {
    ends.iter()
        .filter_map(|(tp, &end)| {
            let held = holds.get(tp).copied().unwrap_or(0);
            (end > held).then(|| (tp.clone(), held, end))
        })
        .collect()
}

/// Planned: per partition, the source end taken at the start, the source position the
/// target holds (the committed progress; a partition without any holds nothing) and the
/// records not replicated,
/// as `counted` (committed records in `[targetHolds, sourceEnd)`, read_committed) says; a
/// partition not counted falls back to the offset difference (an upper bound).
pub fn planned_partitions(
    ends: &BTreeMap<Tp, i64>,
    holds: &BTreeMap<Tp, i64>,
    counted: &BTreeMap<Tp, i64>,
) -> Vec<FailoverPartition> {
    ends.iter()
        .map(|((topic, partition), &end)| {
            let tp = (topic.clone(), *partition);
            let held = holds.get(&tp).copied().unwrap_or(0);
            let behind = counted.get(&tp).copied().unwrap_or(end - held).max(0);
            FailoverPartition {
                topic: topic.clone(),
                partition: *partition,
                source_end: Some(end),
                target_holds: held,
                last_replicated_time: None,
                not_replicated: Some(behind),
                target_topic: None,
                target_end: None,
            }
        })
        .collect()
}

/// Done, once replication stopped: each partition's target topic, the target's end offset
/// (`ends`, by target topic) and the source position the target holds then (`holds`: more
/// than at the drain when the source took records meanwhile). A partition whose target end
/// was not read keeps `targetEnd` unset (failing back then refuses to guess it).
pub fn record_final(
    parts: &mut [FailoverPartition],
    holds: &BTreeMap<Tp, i64>,
    ends: &BTreeMap<Tp, i64>,
    target_topic: impl Fn(&str) -> String,
) {
    for p in parts {
        let t = target_topic(&p.topic);
        if let Some(&held) = holds.get(&(p.topic.clone(), p.partition)) {
            p.target_holds = p.target_holds.max(held);
        }
        p.target_end = ends.get(&(t.clone(), p.partition)).copied();
        p.target_topic = Some(t);
    }
}

/// A record's timestamp (ms since the epoch) as reported: to the second, rounded down
/// (status times carry seconds; rounding down never makes the target look more complete).
/// `None` for a timestamp outside what a time can hold.
pub fn record_time(ms: i64) -> Option<Timestamp> {
    Timestamp::from_second(ms.div_euclid(1000)).ok()
}

/// Records read back from a partition's end to find its last record.
const LAST_RECORD_WINDOW: i64 = 16;

/// The offset ranges `[from, to)` read back from `end` towards the log start `low` to find a
/// partition's last record: first [`LAST_RECORD_WINDOW`] offsets, then each range 8 times
/// wider, just below the previous one, while they held only transaction markers and aborted
/// records; none when the partition is empty.
pub fn windows_back(low: i64, end: i64) -> impl Iterator<Item = (i64, i64)> {
    let mut state = (end, LAST_RECORD_WINDOW);
    std::iter::from_fn(move || {
        let (to, window) = state;
        (to > low).then(|| {
            let from = to.saturating_sub(window).max(low);
            state = (from, window.saturating_mul(8));
            (from, to)
        })
    })
}

/// Sets each partition's `lastReplicatedTime` from `times` (ms, by target topic and
/// partition: the last record the target partition holds); a partition not in it (empty,
/// or not read) has none.
pub fn record_times(parts: &mut [FailoverPartition], times: &BTreeMap<Tp, i64>) {
    for p in parts {
        let tp = (p.target_topic.clone().unwrap_or_default(), p.partition);
        p.last_replicated_time = times.get(&tp).copied().and_then(record_time).map(Time);
    }
}

/// The recovery point: the earliest `lastReplicatedTime` over the partitions not known to be
/// complete (a drained partition's `notReplicated` is 0: nothing of it is missing, however
/// old its last record), and `started` minus it in whole seconds, never below 0. `None` when
/// no such partition has a time.
pub fn recovery_point(parts: &[FailoverPartition], started: Timestamp) -> Option<(Timestamp, i64)> {
    let earliest = parts
        .iter()
        .filter(|p| p.not_replicated != Some(0))
        .filter_map(|p| p.last_replicated_time.as_ref().map(|t| t.0))
        .min()?;
    Some((
        earliest,
        (started.as_second() - earliest.as_second()).max(0),
    ))
}

/// Sets the report's `recoveryPoint` and `recoveryPointSeconds` ([`recovery_point`]) from
/// its partitions and `startedAt`.
pub fn summarize_recovery(report: &mut FailoverReport) {
    let point = report
        .started_at
        .as_ref()
        .and_then(|s| recovery_point(&report.partitions, s.0));
    report.recovery_point = point.map(|(t, _)| Time(t));
    report.recovery_point_seconds = point.map(|(_, s)| s);
}

/// The drain's next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainStep {
    /// Every partition holds its source end: go on to the groups.
    Drained,
    /// Some partition is behind and there is time left.
    Wait,
    /// Time is up: the partitions still behind, as `topic/partition: n record(s)`.
    TimedOut(Vec<String>),
}

/// Whether the drain is done: every partition's `notReplicated` is 0; else wait until
/// `timeout` has passed since the start.
pub fn drain_step(parts: &[FailoverPartition], elapsed: Duration, timeout: Duration) -> DrainStep {
    let behind: Vec<String> = parts
        .iter()
        .filter(|p| p.not_replicated.unwrap_or(0) > 0)
        .map(|p| {
            format!(
                "{}/{}: {} record(s)",
                p.topic,
                p.partition,
                p.not_replicated.unwrap_or(0)
            )
        })
        .collect();
    if behind.is_empty() {
        DrainStep::Drained
    } else if elapsed >= timeout {
        DrainStep::TimedOut(behind)
    } else {
        DrainStep::Wait
    }
}

/// What to commit for one partition of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// Target topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The target offset to commit; `None`: no safe translation.
    pub offset: Option<i64>,
    /// Whether the offset re-reads nothing (an exact translation).
    pub exact: bool,
}

/// One group as the failover sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInput {
    /// Group id.
    pub group: String,
    /// Members on the target (`None`: the group does not exist there).
    pub members: Option<u32>,
    /// Its committed offsets on the target by (target topic, partition).
    pub committed: BTreeMap<Tp, i64>,
    /// One per partition of a replicated topic the group committed on the source (Planned)
    /// or has a checkpoint for (Unplanned).
    pub proposals: Vec<Proposal>,
}

/// What happens to a group: the offsets to commit (none when skipped) and its report line.
pub fn plan_group(g: &GroupInput) -> (Vec<GroupOffset>, FailoverGroup) {
    let mut report = FailoverGroup {
        group: g.group.clone(),
        committed: Vec::new(),
        records_read_again: None,
        skipped: None,
    };
    let skip = |mut r: FailoverGroup, why: String| {
        r.skipped = Some(why);
        (Vec::new(), r)
    };
    if let Some(m) = g.members.filter(|m| *m > 0) {
        return skip(
            report,
            format!("{m} active member(s) on the target: not touched (their commits would overwrite ours)"),
        );
    }
    if g.proposals.is_empty() {
        return skip(report, "no committed offset on a replicated topic".into());
    }
    let untranslated: Vec<String> = g
        .proposals
        .iter()
        .filter(|p| p.offset.is_none())
        .map(|p| format!("{}/{}", p.topic, p.partition))
        .collect();
    if !untranslated.is_empty() {
        return skip(
            report,
            format!(
                "no safe translation for {}: not touched",
                untranslated.join(", ")
            ),
        );
    }
    let mut commits = Vec::new();
    let mut proposals: Vec<&Proposal> = g.proposals.iter().collect();
    proposals.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    for p in proposals {
        let offset = p.offset.expect("checked above");
        let state = TargetGroupState {
            exists: g.members.is_some(),
            active_members: g.members.unwrap_or(0),
            committed: g.committed.get(&(p.topic.clone(), p.partition)).copied(),
        };
        match decide_group_sync(&state, offset) {
            GroupSyncDecision::Commit(o) => {
                report
                    .committed
                    .push(format!("{}/{}@{o}", p.topic, p.partition));
                commits.push(GroupOffset {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset: o,
                    metadata: String::new(),
                });
            }
            // Already at or past it: never moved backwards; it stays where it is.
            GroupSyncDecision::SkipNotAhead | GroupSyncDecision::SkipActiveMembers => {
                let at = state.committed.unwrap_or(offset).max(offset);
                report
                    .committed
                    .push(format!("{}/{}@{at}", p.topic, p.partition));
            }
        }
    }
    report.records_read_again = g.proposals.iter().all(|p| p.exact).then_some(0);
    (commits, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_string(), p)
    }

    #[test]
    fn planned_partitions_count_what_is_missing() {
        let ends = BTreeMap::from([(tp("a", 0), 100), (tp("a", 1), 50), (tp("b", 0), 0)]);
        let holds = BTreeMap::from([(tp("a", 0), 100), (tp("a", 1), 40)]);
        let parts = planned_partitions(&ends, &holds, &BTreeMap::new());
        let got: Vec<(i64, Option<i64>)> = parts
            .iter()
            .map(|p| (p.target_holds, p.not_replicated))
            .collect();
        // b/0 has no progress and nothing to replicate; a target ahead counts as 0.
        assert_eq!(got, vec![(100, Some(0)), (40, Some(10)), (0, Some(0))]);
        let ahead = planned_partitions(
            &BTreeMap::from([(tp("a", 0), 5)]),
            &BTreeMap::from([(tp("a", 0), 9)]),
            &BTreeMap::new(),
        );
        assert_eq!(ahead[0].not_replicated, Some(0));
    }

    /// On a transactional source the end offset is past the last record (a commit marker,
    /// an aborted tail): what the read finds counts, not the offsets.
    #[test]
    fn counted_records_replace_offset_differences() {
        let ends = BTreeMap::from([
            (tp("t", 0), 11), // 10 records, then a commit marker at 10
            (tp("t", 1), 20), // 3 aborted records and their abort marker after 16
            (tp("t", 2), 30), // 4 committed records not copied yet, then a marker
            (tp("t", 3), 8),  // not counted: the read failed
            (tp("t", 4), 5),  // drained by offsets
        ]);
        let holds = BTreeMap::from([
            (tp("t", 0), 10),
            (tp("t", 1), 16),
            (tp("t", 2), 25),
            (tp("t", 3), 6),
            (tp("t", 4), 5),
        ]);
        let ranges: Vec<(Tp, i64, i64)> = ranges_to_count(&ends, &holds);
        assert_eq!(
            ranges,
            vec![
                (tp("t", 0), 10, 11),
                (tp("t", 1), 16, 20),
                (tp("t", 2), 25, 30),
                (tp("t", 3), 6, 8),
            ],
            "only partitions behind by offsets are read"
        );
        let counted = BTreeMap::from([(tp("t", 0), 0), (tp("t", 1), 0), (tp("t", 2), 4)]);
        let got: Vec<Option<i64>> = planned_partitions(&ends, &holds, &counted)
            .iter()
            .map(|p| p.not_replicated)
            .collect();
        assert_eq!(got, vec![Some(0), Some(0), Some(4), Some(2), Some(0)]);
        let parts = planned_partitions(&ends, &holds, &counted);
        assert_eq!(
            drain_step(&parts[..2], Duration::ZERO, Duration::from_secs(1)),
            DrainStep::Drained,
            "a log ending in a marker or an aborted tail is drained"
        );
    }

    #[test]
    fn record_final_table() {
        let part = |topic: &str, partition: i32, held: i64| FailoverPartition {
            topic: topic.into(),
            partition,
            source_end: Some(held),
            target_holds: held,
            last_replicated_time: None,
            not_replicated: Some(0),
            target_topic: None,
            target_end: None,
        };
        let mut parts = vec![part("a", 0, 10), part("a", 1, 5), part("b", 0, 7)];
        // a/1 took 2 more records after the drain; b/0's target end was not read.
        let holds = BTreeMap::from([(tp("a", 0), 10), (tp("a", 1), 7), (tp("b", 0), 3)]);
        let ends = BTreeMap::from([(tp("dc1.a", 0), 12), (tp("dc1.a", 1), 7)]);
        record_final(&mut parts, &holds, &ends, |t| format!("dc1.{t}"));
        let got: Vec<(i64, Option<&str>, Option<i64>)> = parts
            .iter()
            .map(|p| (p.target_holds, p.target_topic.as_deref(), p.target_end))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, Some("dc1.a"), Some(12)),
                (7, Some("dc1.a"), Some(7)),
                (7, Some("dc1.b"), None),
            ],
            "holds never go back; ends by target topic"
        );
    }

    #[test]
    fn record_time_rounds_down_to_the_second() {
        let cases = [
            (1_700_000_000_999, Some(1_700_000_000)),
            (1_700_000_000_000, Some(1_700_000_000)),
            (0, Some(0)),
            (-1, Some(-1)),
            (i64::MAX, None),
        ];
        for (ms, want) in cases {
            assert_eq!(record_time(ms).map(|t| t.as_second()), want, "{ms}");
        }
    }

    #[test]
    fn windows_back_table() {
        let cases = [
            (0_i64, 0_i64, Vec::<(i64, i64)>::new()),
            (7, 7, vec![]),
            (0, 10, vec![(0, 10)]),
            (0, 200, vec![(184, 200), (56, 184), (0, 56)]),
            (100, 1_000, vec![(984, 1_000), (856, 984), (100, 856)]),
        ];
        for (low, end, want) in cases {
            assert_eq!(
                windows_back(low, end).collect::<Vec<_>>(),
                want,
                "{low}..{end}"
            );
        }
        let far: Vec<_> = windows_back(0, i64::MAX).collect();
        assert_eq!(far.last().map(|r| r.0), Some(0), "ends at the log start");
    }

    #[test]
    fn record_times_by_target_topic() {
        let part = |partition: i32| FailoverPartition {
            topic: "a".into(),
            partition,
            source_end: None,
            target_holds: 5,
            last_replicated_time: Some(Time(Timestamp::UNIX_EPOCH)),
            not_replicated: None,
            target_topic: Some("dc1.a".into()),
            target_end: Some(5),
        };
        let mut parts = vec![part(0), part(1)];
        // Partition 1 holds no record (or was not read): it has no time, not a stale one.
        record_times(
            &mut parts,
            &BTreeMap::from([(tp("dc1.a", 0), 1_700_000_000_500), (tp("a", 1), 9)]),
        );
        let got: Vec<Option<i64>> = parts
            .iter()
            .map(|p| p.last_replicated_time.as_ref().map(|t| t.0.as_second()))
            .collect();
        assert_eq!(got, vec![Some(1_700_000_000), None]);
    }

    #[test]
    fn recovery_point_table() {
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let part = |time: Option<i64>, not_replicated: Option<i64>| FailoverPartition {
            topic: "a".into(),
            partition: 0,
            source_end: None,
            target_holds: 1,
            last_replicated_time: time.map(|s| Time(at(s))),
            not_replicated,
            target_topic: None,
            target_end: None,
        };
        let started = at(10_000) + jiff::SignedDuration::from_millis(900);
        // (name, partitions, recovery point and seconds)
        let cases = [
            ("no partition", vec![], None),
            ("none holds a record", vec![part(None, None)], None),
            (
                "unplanned: the earliest; empty ones do not count",
                vec![
                    part(Some(9_000), None),
                    part(None, None),
                    part(Some(8_500), None),
                ],
                Some((8_500, 1_500)),
            ),
            (
                "drained partitions miss nothing, however old",
                vec![part(Some(1_000), Some(0)), part(Some(9_990), Some(3))],
                Some((9_990, 10)),
            ),
            ("all drained", vec![part(Some(1_000), Some(0))], None),
            (
                "timestamps ahead of the clock: 0",
                vec![part(Some(20_000), None)],
                Some((20_000, 0)),
            ),
        ];
        for (name, parts, want) in cases {
            let got = recovery_point(&parts, started).map(|(t, s)| (t.as_second(), s));
            assert_eq!(got, want, "{name}");
            let mut report = FailoverReport {
                started_at: Some(Time(started)),
                partitions: parts,
                ..FailoverReport::new(
                    "x",
                    crate::api::FailoverMode::Unplanned,
                    crate::api::FailoverPhase::Done,
                )
            };
            summarize_recovery(&mut report);
            let summary = report
                .recovery_point
                .map(|t| (t.0.as_second(), report.recovery_point_seconds.unwrap()));
            assert_eq!(summary, want, "{name}: the report's summary");
        }
    }

    #[test]
    fn drain_step_table() {
        let part = |missing: i64| FailoverPartition {
            topic: "a".into(),
            partition: 3,
            source_end: Some(10),
            target_holds: 10 - missing,
            last_replicated_time: None,
            not_replicated: Some(missing),
            target_topic: None,
            target_end: None,
        };
        let s = Duration::from_secs;
        let cases = [
            (
                vec![part(0), part(0)],
                s(1),
                DrainStep::Drained,
                "all there",
            ),
            (
                vec![part(0), part(0)],
                s(999),
                DrainStep::Drained,
                "all there, late",
            ),
            (vec![], s(0), DrainStep::Drained, "no partitions"),
            (
                vec![part(0), part(2)],
                s(9),
                DrainStep::Wait,
                "behind, time left",
            ),
            (
                vec![part(0), part(2)],
                s(10),
                DrainStep::TimedOut(vec!["a/3: 2 record(s)".into()]),
                "behind at the timeout",
            ),
        ];
        for (parts, elapsed, want, what) in cases {
            assert_eq!(drain_step(&parts, elapsed, s(10)), want, "{what}");
        }
    }

    fn proposal(topic: &str, partition: i32, offset: Option<i64>, exact: bool) -> Proposal {
        Proposal {
            topic: topic.into(),
            partition,
            offset,
            exact,
        }
    }

    #[test]
    fn plan_group_table() {
        let group =
            |members: Option<u32>, committed: &[(i32, i64)], proposals: Vec<Proposal>| GroupInput {
                group: "g".into(),
                members,
                committed: committed
                    .iter()
                    .map(|&(p, o)| (tp("dc1.a", p), o))
                    .collect(),
                proposals,
            };
        struct Case {
            what: &'static str,
            input: GroupInput,
            commits: Vec<(i32, i64)>,
            committed: Vec<&'static str>,
            read_again: Option<i64>,
            skipped: Option<&'static str>,
        }
        let cases = [
            Case {
                what: "absent on the target: every partition committed, exact",
                input: group(None, &[], vec![proposal("dc1.a", 1, Some(0), true), proposal("dc1.a", 0, Some(7), true)]),
                commits: vec![(0, 7), (1, 0)],
                committed: vec!["dc1.a/0@7", "dc1.a/1@0"],
                read_again: Some(0),
                skipped: None,
            },
            Case {
                what: "empty group behind: moved forward, never backward",
                input: group(Some(0), &[(0, 3), (1, 9)], vec![proposal("dc1.a", 0, Some(7), true), proposal("dc1.a", 1, Some(5), true)]),
                commits: vec![(0, 7)],
                committed: vec!["dc1.a/0@7", "dc1.a/1@9"],
                read_again: Some(0),
                skipped: None,
            },
            Case {
                what: "a safe translation: read-again unknown",
                input: group(None, &[], vec![proposal("dc1.a", 0, Some(7), false)]),
                commits: vec![(0, 7)],
                committed: vec!["dc1.a/0@7"],
                read_again: None,
                skipped: None,
            },
            Case {
                what: "active on the target: named, untouched",
                input: group(Some(2), &[], vec![proposal("dc1.a", 0, Some(7), true)]),
                commits: vec![],
                committed: vec![],
                read_again: None,
                skipped: Some("2 active member(s) on the target: not touched (their commits would overwrite ours)"),
            },
            Case {
                what: "one partition without a translation: the whole group untouched",
                input: group(None, &[], vec![proposal("dc1.a", 0, Some(7), true), proposal("dc1.a", 1, None, false)]),
                commits: vec![],
                committed: vec![],
                read_again: None,
                skipped: Some("no safe translation for dc1.a/1: not touched"),
            },
            Case {
                what: "nothing replicated committed",
                input: group(None, &[], vec![]),
                commits: vec![],
                committed: vec![],
                read_again: None,
                skipped: Some("no committed offset on a replicated topic"),
            },
        ];
        for c in cases {
            let (commits, report) = plan_group(&c.input);
            let got: Vec<(i32, i64)> = commits.iter().map(|o| (o.partition, o.offset)).collect();
            assert_eq!(got, c.commits, "{}", c.what);
            assert!(commits.iter().all(|o| o.topic == "dc1.a"), "{}", c.what);
            assert_eq!(report.committed, c.committed, "{}", c.what);
            assert_eq!(report.records_read_again, c.read_again, "{}", c.what);
            assert_eq!(report.skipped.as_deref(), c.skipped, "{}", c.what);
        }
    }
}
