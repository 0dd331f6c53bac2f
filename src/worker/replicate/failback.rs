//! Failing back (`spec.source.startFrom.afterFailover`): which partitions start where, and
//! which offsets of the old primary diverged. Pure; the I/O is in [`super::failback_io`].

use std::collections::{BTreeMap, HashSet};

/// `(topic, partition)`.
pub type Tp = (String, i32);

use crate::api::{Diverged, FailbackPartition, FailbackReport, FailoverPhase, FailoverReport};

/// Why a flow failing back does not start yet (its worker status says so).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailbackWait {
    #[error("failover {id} of flow {flow} is not in {store} on source cluster {cluster} (not run yet, or another flow or id); waiting for it")]
    Unknown {
        flow: String,
        id: String,
        store: String,
        cluster: String,
    },
    #[error("failover {id} of flow {flow} is {phase:?}, not Done{why}; waiting for it to be Done")]
    NotDone {
        flow: String,
        id: String,
        phase: FailoverPhase,
        why: String,
    },
    #[error("failover {id} of flow {flow} recorded no targetEnd for {partitions} (it ran on an older build, or the end could not be read); refusing to guess where to start")]
    NoPositions {
        flow: String,
        id: String,
        partitions: String,
    },
    #[error("worker 0 measures what diverged before any worker writes; waiting for its report in {store}")]
    Worker0 { store: String },
}

/// One partition the failover reported, as failing back sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The partition on the new primary (this flow's source): the failover's target topic.
    pub source: Tp,
    /// The partition on the old primary (this flow's target): the failover's source topic.
    pub old: Tp,
    /// Where this flow starts: the new primary's end when the failover was done.
    pub start_at: i64,
    /// The old primary's offset below which the new primary holds every record.
    pub holds: i64,
}

/// The failover report of `flow` → where each reported partition this flow replicates
/// (`selected`, by its target topic: this flow's source topic) starts. Only a Done report
/// with every such `targetEnd` recorded will do.
pub fn points(
    flow: &str,
    report: &FailoverReport,
    selected: impl Fn(&str) -> bool,
) -> Result<Vec<Point>, FailbackWait> {
    if report.phase != FailoverPhase::Done {
        return Err(FailbackWait::NotDone {
            flow: flow.to_owned(),
            id: report.id.clone(),
            phase: report.phase,
            why: report
                .message
                .as_ref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
        });
    }
    let mut missing = Vec::new();
    let mut out = Vec::new();
    let reported = report.partitions.iter();
    for p in reported.filter(|p| p.target_topic.as_deref().is_none_or(&selected)) {
        match (&p.target_topic, p.target_end) {
            (Some(t), Some(end)) => out.push(Point {
                source: (t.clone(), p.partition),
                old: (p.topic.clone(), p.partition),
                start_at: end,
                holds: p.target_holds,
            }),
            _ => missing.push(format!("{}/{}", p.topic, p.partition)),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(FailbackWait::NoPositions {
            flow: flow.to_owned(),
            id: report.id.clone(),
            partitions: crate::api::status::list_some(&missing),
        })
    }
}

/// The offsets of the old primary to read for divergence: `[holds, end)` of each partition
/// whose end (`old_ends`, now, before this flow wrote) is past what the new primary holds.
/// Partitions this flow already replicated (`replicated`, by source partition) are not
/// measured: the old primary's end includes this flow's own writes by then.
pub fn diverged_ranges(
    points: &[Point],
    old_ends: &BTreeMap<Tp, i64>,
    replicated: &HashSet<Tp>,
) -> Vec<(Tp, i64, i64)> {
    points
        .iter()
        .filter(|p| !replicated.contains(&p.source))
        .filter_map(|p| {
            let end = *old_ends.get(&p.old)?;
            (end > p.holds).then(|| (p.old.clone(), p.holds, end))
        })
        .collect()
}

/// What one diverged range held: `(first offset, last offset, records)` read_committed.
pub type Measured = (i64, i64, i64);

/// The failback report from the points and what each diverged range held (`measured`, by
/// old-primary partition; a range without records is not divergence).
pub fn report(
    flow: &str,
    id: &str,
    points: &[Point],
    measured: &BTreeMap<Tp, Measured>,
    copied: Option<i64>,
) -> FailbackReport {
    let partitions: Vec<FailbackPartition> = points
        .iter()
        .map(|p| FailbackPartition {
            topic: p.source.0.clone(),
            partition: p.source.1,
            start_at: p.start_at,
            diverged: measured
                .get(&p.old)
                .filter(|m| m.2 > 0)
                .map(|&(first, last, records)| Diverged {
                    topic: p.old.0.clone(),
                    first_offset: first,
                    last_offset: last,
                    records,
                }),
        })
        .collect();
    FailbackReport {
        flow: flow.to_owned(),
        id: id.to_owned(),
        partitions_started: i32::try_from(points.len()).unwrap_or(i32::MAX),
        diverged_records: measured.values().map(|m| m.2).sum(),
        diverged_copied: copied,
        partitions,
        partitions_not_shown: None,
    }
}

/// Where each partition starts, by source partition, from a (stored) failback report.
pub fn starts(report: &FailbackReport) -> BTreeMap<Tp, i64> {
    report
        .partitions
        .iter()
        .map(|p| ((p.topic.clone(), p.partition), p.start_at))
        .collect()
}

/// The topic diverged records of `topic` are copied to.
pub fn diverged_topic(topic: &str) -> String {
    format!("{topic}.diverged")
}

/// The key of a failback in its store: the failed-over flow and the failover's id.
pub fn store_key(flow: &str, id: &str) -> String {
    format!("{flow}/{id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FailoverMode, FailoverPartition};

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_owned(), p)
    }

    fn part(partition: i32, holds: i64, end: Option<i64>) -> FailoverPartition {
        FailoverPartition {
            topic: "orders".into(),
            partition,
            source_end: Some(holds),
            target_holds: holds,
            last_replicated_time: None,
            not_replicated: Some(0),
            target_topic: Some("orders".into()),
            target_end: end,
        }
    }

    fn failover(phase: FailoverPhase, parts: Vec<FailoverPartition>) -> FailoverReport {
        FailoverReport {
            partitions: parts,
            ..FailoverReport::new("x", FailoverMode::Planned, phase)
        }
    }

    #[test]
    fn points_table() {
        let mut other = part(0, 5, Some(6));
        other.target_topic = Some("dc1.heartbeats".into());
        let done = failover(
            FailoverPhase::Done,
            vec![part(0, 60, Some(61)), part(1, 60, Some(60)), other],
        );
        assert_eq!(
            points("ns/dr", &done, |t| t == "orders").unwrap(),
            vec![
                Point {
                    source: tp("orders", 0),
                    old: tp("orders", 0),
                    start_at: 61,
                    holds: 60
                },
                Point {
                    source: tp("orders", 1),
                    old: tp("orders", 1),
                    start_at: 60,
                    holds: 60
                },
            ]
        );
        let cases = [
            (
                FailoverPhase::Draining,
                vec![part(0, 1, Some(1))],
                "is Draining, not Done",
            ),
            (
                FailoverPhase::TimedOut,
                vec![part(0, 1, Some(1))],
                "is TimedOut, not Done",
            ),
            (FailoverPhase::Refused, vec![], "is Refused"),
            (
                FailoverPhase::Done,
                vec![part(0, 1, Some(1)), part(2, 1, None)],
                "no targetEnd for orders/2",
            ),
        ];
        for (phase, parts, says) in cases {
            let e = points("ns/dr", &failover(phase, parts), |_| true);
            let e = e.expect_err(says).to_string();
            assert!(e.contains(says) && e.contains("ns/dr"), "{says}: {e}");
        }
    }

    #[test]
    fn diverged_ranges_table() {
        let pts = vec![
            Point {
                source: tp("orders", 0),
                old: tp("orders", 0),
                start_at: 61,
                holds: 60,
            },
            Point {
                source: tp("orders", 1),
                old: tp("orders", 1),
                start_at: 60,
                holds: 60,
            },
            Point {
                source: tp("orders", 2),
                old: tp("orders", 2),
                start_at: 9,
                holds: 50,
            },
            Point {
                source: tp("orders", 3),
                old: tp("orders", 3),
                start_at: 9,
                holds: 50,
            },
        ];
        let ends = BTreeMap::from([
            (tp("orders", 0), 75), // 15 offsets past: read them
            (tp("orders", 1), 60), // nothing after the recorded point
            (tp("orders", 2), 58), // already replicated by this flow: not measured
        ]); // orders/3: its end was not read
        let replicated = HashSet::from([tp("orders", 2)]);
        assert_eq!(
            diverged_ranges(&pts, &ends, &replicated),
            vec![(tp("orders", 0), 60, 75)]
        );
        assert!(diverged_ranges(&pts, &BTreeMap::new(), &HashSet::new()).is_empty());
    }

    #[test]
    fn report_and_starts() {
        let pts = vec![
            Point {
                source: tp("orders", 0),
                old: tp("dc1.orders", 0),
                start_at: 61,
                holds: 60,
            },
            Point {
                source: tp("orders", 1),
                old: tp("dc1.orders", 1),
                start_at: 70,
                holds: 60,
            },
        ];
        // orders/0: 12 records at 60..=74 (a transaction's marker took an offset); orders/1:
        // a range holding only markers is no divergence.
        let measured = BTreeMap::from([
            (tp("dc1.orders", 0), (60, 74, 12)),
            (tp("dc1.orders", 1), (0, 0, 0)),
        ]);
        let r = report("ns/dr", "x", &pts, &measured, Some(12));
        assert_eq!(
            (r.partitions_started, r.diverged_records, r.diverged_copied),
            (2, 12, Some(12))
        );
        assert_eq!(
            r.partitions[0].diverged,
            Some(Diverged {
                topic: "dc1.orders".into(),
                first_offset: 60,
                last_offset: 74,
                records: 12
            })
        );
        assert_eq!(r.partitions[1].diverged, None);
        assert_eq!(
            starts(&r),
            BTreeMap::from([(tp("orders", 0), 61), (tp("orders", 1), 70)])
        );
        assert_eq!(store_key("ns/dr", "x"), "ns/dr/x");
        assert_eq!(diverged_topic("orders"), "orders.diverged");
    }
}
