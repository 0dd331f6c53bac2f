//! Which source and target ranges of one partition an audit reads. Pure.
//!
//! A range starts at an offset sync (source offset `u` was written at target offset `d`)
//! both logs still hold, so the comparison knows where the first copy sits; without one it
//! starts at both log starts, unpinned. A bounded range (the continuous audit) also ends at
//! an offset sync, so the target range holds copies of the source range and nothing after
//! it. Only records below the committed progress are expected on the target.

use super::compare::{Anchor, Start};

/// What is known of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    /// Source `(log start, end)`.
    pub source: (i64, i64),
    /// Target `(log start, end)`; read before the source's, so every copy on the target is
    /// of a record below the source end.
    pub target: (i64, i64),
    /// The committed progress: the next source offset to replicate.
    pub progress: Option<i64>,
    /// Offset syncs of the partition, sorted.
    pub syncs: Vec<Anchor>,
}

/// What to audit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request {
    /// First source offset (default: the log start).
    pub from: Option<i64>,
    /// Source offset to stop before (default: the committed progress).
    pub to: Option<i64>,
    /// At most about this many source records, ending at an offset sync (the continuous
    /// audit); `None`: the whole range.
    pub records: Option<u64>,
}

/// The ranges to read and compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangePlan {
    /// Source offsets `[from, to)`.
    pub source: (i64, i64),
    /// Target offsets `[from, to)`.
    pub target: (i64, i64),
    /// Whether an offset sync pins the start.
    pub start: Start,
    /// Source records at or above are not expected on the target.
    pub expect_below: i64,
    /// Source offsets asked for that the source no longer holds.
    pub skipped: u64,
}

/// Why nothing is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nothing {
    /// No committed progress: the partition was never replicated.
    NotReplicated,
    /// The range asked for holds no replicated record the source still holds; `skipped`
    /// source offsets of it are gone.
    Empty {
        /// Source offsets asked for that the source no longer holds.
        skipped: u64,
    },
    /// No offset sync bounds a range (a bounded range needs two).
    NoSyncs,
}

/// The ranges for `request`. Pure.
pub fn plan(view: &PartitionView, request: Request) -> Result<RangePlan, Nothing> {
    let (s_low, s_high) = view.source;
    let (t_low, t_high) = view.target;
    let progress = view.progress.ok_or(Nothing::NotReplicated)?;
    let replicated_end = progress.min(s_high);
    let asked_from = request.from.unwrap_or(s_low);
    let want_to = request.to.map_or(replicated_end, |t| t.min(replicated_end));
    let skipped = (s_low.min(want_to) - asked_from).max(0) as u64;
    let want_from = asked_from.max(s_low);
    if want_from >= want_to {
        return Err(Nothing::Empty { skipped });
    }
    // Syncs of records both logs still hold and the progress covers.
    let usable: Vec<Anchor> = view
        .syncs
        .iter()
        .copied()
        .filter(|a| {
            (s_low..replicated_end).contains(&a.upstream) && (t_low..t_high).contains(&a.downstream)
        })
        .collect();
    let below = usable
        .iter()
        .rev()
        .find(|a| a.upstream <= want_from)
        .copied();
    let (source_from, target_from, start) = match (below, request.records) {
        (Some(a), _) => (a.upstream, a.downstream, Start::Pinned),
        (None, None) => (want_from, t_low, Start::Loose),
        (None, Some(_)) => match usable.iter().find(|a| a.upstream < want_to) {
            Some(a) => (a.upstream, a.downstream, Start::Pinned),
            None => return Err(Nothing::NoSyncs),
        },
    };
    let after = |a: &&Anchor| a.upstream > source_from && a.downstream > target_from;
    let Some(records) = request.records else {
        // The whole range: to the ends, or to the first sync at or past `to`.
        let end = request.to.and_then(|to| {
            usable
                .iter()
                .filter(after)
                .find(|a| a.upstream >= to - 1)
                .copied()
        });
        return Ok(RangePlan {
            source: end.map_or((source_from, s_high), |a| (source_from, a.upstream + 1)),
            target: end.map_or((target_from, t_high), |a| (target_from, a.downstream + 1)),
            start,
            expect_below: want_to,
            skipped,
        });
    };
    let goal = source_from.saturating_add(records.max(1) as i64) - 1;
    let end = usable
        .iter()
        .filter(after)
        .find(|a| a.upstream >= goal)
        .or_else(|| usable.iter().rfind(after))
        .copied()
        .ok_or(Nothing::NoSyncs)?;
    Ok(RangePlan {
        source: (source_from, end.upstream + 1),
        target: (target_from, end.downstream + 1),
        start,
        expect_below: end.upstream + 1,
        skipped,
    })
}

/// Where the next bounded range starts: after `done`, or back at the log start once the
/// committed progress is reached, so ranges move across the whole retained log. Pure.
pub fn next_cursor(done: Option<&RangePlan>, view: &PartitionView) -> i64 {
    match (done, view.progress) {
        (Some(p), Some(progress)) if p.source.1 < progress.min(view.source.1) => p.source.1,
        _ => view.source.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(upstream: i64, downstream: i64) -> Anchor {
        Anchor {
            upstream,
            downstream,
        }
    }

    fn view(syncs: Vec<Anchor>) -> PartitionView {
        PartitionView {
            source: (0, 1_000),
            target: (0, 1_000),
            progress: Some(900),
            syncs,
        }
    }

    #[test]
    fn plans() {
        let every_100: Vec<Anchor> = (0..10).map(|i| a(i * 100, i * 100 + 5)).collect();
        let whole = Request::default();
        let sample = |from| Request {
            from: Some(from),
            to: None,
            records: Some(250),
        };
        let range = |s: (i64, i64), t: (i64, i64), start, expect_below, skipped| {
            Ok(RangePlan {
                source: s,
                target: t,
                start,
                expect_below,
                skipped,
            })
        };
        let cases: Vec<(&str, PartitionView, Request, Result<RangePlan, Nothing>)> = vec![
            (
                "whole, pinned at the first sync",
                view(every_100.clone()),
                whole,
                range((0, 1_000), (5, 1_000), Start::Pinned, 900, 0),
            ),
            (
                "whole without syncs: loose from both log starts",
                view(vec![]),
                whole,
                range((0, 1_000), (0, 1_000), Start::Loose, 900, 0),
            ),
            (
                "whole, source past retention below the first sync: loose",
                PartitionView {
                    source: (50, 1_000),
                    ..view(vec![a(10, 10), a(150, 150)])
                },
                whole,
                range((50, 1_000), (0, 1_000), Start::Loose, 900, 0),
            ),
            (
                "from/to: pinned below, ends at the sync past to",
                view(every_100.clone()),
                Request {
                    from: Some(250),
                    to: Some(420),
                    records: None,
                },
                range((200, 501), (205, 506), Start::Pinned, 420, 0),
            ),
            (
                "from below the log start counts the offsets skipped",
                PartitionView {
                    source: (300, 1_000),
                    ..view(every_100.clone())
                },
                Request {
                    from: Some(100),
                    to: None,
                    records: None,
                },
                range((300, 1_000), (305, 1_000), Start::Pinned, 900, 200),
            ),
            (
                "a sample ends at the first sync past its size",
                view(every_100.clone()),
                sample(120),
                range((100, 401), (105, 406), Start::Pinned, 401, 0),
            ),
            (
                "a sample near the progress ends at the last usable sync",
                view(every_100.clone()),
                sample(750),
                range((700, 801), (705, 806), Start::Pinned, 801, 0),
            ),
            (
                "a sample whose target start is past retention starts at the next sync",
                PartitionView {
                    target: (150, 1_000),
                    ..view(every_100.clone())
                },
                sample(0),
                range((200, 501), (205, 506), Start::Pinned, 501, 0),
            ),
            (
                "a sample needs two syncs",
                view(vec![a(500, 505)]),
                sample(0),
                Err(Nothing::NoSyncs),
            ),
            (
                "never replicated",
                PartitionView {
                    progress: None,
                    ..view(every_100.clone())
                },
                whole,
                Err(Nothing::NotReplicated),
            ),
            (
                "everything asked for is past retention",
                PartitionView {
                    source: (950, 1_000),
                    ..view(every_100.clone())
                },
                Request {
                    from: Some(0),
                    to: Some(900),
                    records: None,
                },
                Err(Nothing::Empty { skipped: 900 }),
            ),
        ];
        for (name, v, r, want) in cases {
            assert_eq!(plan(&v, r), want, "{name}");
        }
    }

    #[test]
    fn the_cursor_wraps_at_the_progress() {
        let v = view(vec![]);
        let done = |to| RangePlan {
            source: (0, to),
            target: (0, to),
            start: Start::Pinned,
            expect_below: to,
            skipped: 0,
        };
        assert_eq!(next_cursor(None, &v), 0);
        assert_eq!(next_cursor(Some(&done(400)), &v), 400);
        assert_eq!(next_cursor(Some(&done(900)), &v), 0);
        let v = PartitionView {
            source: (120, 1_000),
            ..v
        };
        assert_eq!(next_cursor(Some(&done(950)), &v), 120);
    }
}
