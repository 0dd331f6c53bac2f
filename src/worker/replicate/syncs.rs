//! When to emit an offset sync: the writer contract the checkpoint translator relies on
//! (`worker::checkpoint::translate::Contract::Mirrorflow` states it). Pure. Records are fed
//! per partition in source order with their source offset and the target offset of their
//! delivery report; every sync carries the emitter's next [`SyncSequence`], so readers can
//! tell consecutive syncs from ones with a hole between.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::kafka::wire::SyncSequence;

/// Why a sync was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncReason {
    /// (a) First record of this emitter.
    First,
    /// (b) First record after a discontinuity.
    AfterGap,
    /// (c) Last record before a discontinuity.
    BeforeGap,
    /// (d) `lag_max` records since the last sync.
    LagMax,
    /// (e) Last record of a flushed batch.
    Flush,
}

/// One sync to write: source offset `upstream` sits at target offset `downstream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmittedSync {
    /// Source offset.
    pub upstream: i64,
    /// Target offset.
    pub downstream: i64,
    /// Its place in the emitter's sequence.
    pub sequence: SyncSequence,
    /// Why.
    pub reason: SyncReason,
}

/// Per-partition emission state. Clone it to compute a batch's syncs tentatively; keep the
/// clone only if the batch committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncEmitter {
    epoch: i64,
    next_seq: i64,
    /// Last record replicated `(u, d)` and whether a sync covered it.
    last: Option<(i64, i64, bool)>,
    /// Records replicated since the last sync.
    since_sync: i64,
}

impl SyncEmitter {
    /// A fresh emitter; `writer_epoch` must differ from every earlier emitter's for this
    /// partition (e.g. derived from the clock and a process-wide counter).
    pub fn new(writer_epoch: i64) -> Self {
        Self {
            epoch: writer_epoch,
            next_seq: 0,
            last: None,
            since_sync: 0,
        }
    }

    /// The writer epoch of this emitter.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    fn emit(&mut self, upstream: i64, downstream: i64, reason: SyncReason) -> EmittedSync {
        let sequence = SyncSequence {
            writer_epoch: self.epoch,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        EmittedSync {
            upstream,
            downstream,
            sequence,
            reason,
        }
    }

    /// Feeds the next replicated record; pushes the syncs it causes onto `out` (0, 1 or 2).
    /// `lag_max` below 1 counts as 1.
    pub fn on_record(
        &mut self,
        upstream: i64,
        downstream: i64,
        lag_max: i64,
        out: &mut Vec<EmittedSync>,
    ) {
        let lag_max = lag_max.max(1);
        let reason = match self.last {
            None => Some(SyncReason::First),
            Some((u_prev, d_prev, synced)) => {
                let gap = upstream.checked_sub(u_prev) != Some(1)
                    || downstream.checked_sub(d_prev) != Some(1);
                if gap {
                    if !synced {
                        out.push(self.emit(u_prev, d_prev, SyncReason::BeforeGap));
                    }
                    Some(SyncReason::AfterGap)
                } else if self.since_sync + 1 >= lag_max {
                    Some(SyncReason::LagMax)
                } else {
                    None
                }
            }
        };
        match reason {
            Some(reason) => {
                out.push(self.emit(upstream, downstream, reason));
                self.since_sync = 0;
                self.last = Some((upstream, downstream, true));
            }
            None => {
                self.since_sync += 1;
                self.last = Some((upstream, downstream, false));
            }
        }
    }

    /// The batch is being committed: the sync for its last record, unless already synced.
    pub fn on_flush(&mut self) -> Option<EmittedSync> {
        match self.last {
            Some((u, d, false)) => {
                let sync = self.emit(u, d, SyncReason::Flush);
                self.since_sync = 0;
                self.last = Some((u, d, true));
                Some(sync)
            }
            _ => None,
        }
    }
}

/// A writer epoch for a fresh sync emitter: increasing within the process and, being clock
/// based (µs), across restarts.
pub fn fresh_epoch() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = jiff::Timestamp::now().as_microsecond();
    let mut prev = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(prev + 1);
        match LAST.compare_exchange(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(p) => prev = p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use SyncReason::*;

    /// Steps: `Some((u, d))` is a record, `None` a flush.
    fn run(lag_max: i64, steps: &[Option<(i64, i64)>]) -> Vec<(i64, i64, SyncReason)> {
        let mut e = SyncEmitter::new(7);
        let mut out = Vec::new();
        for step in steps {
            match step {
                Some((u, d)) => e.on_record(*u, *d, lag_max, &mut out),
                None => out.extend(e.on_flush()),
            }
        }
        for (i, s) in out.iter().enumerate() {
            assert_eq!(
                s.sequence,
                SyncSequence {
                    writer_epoch: 7,
                    seq: i as i64
                }
            );
        }
        out.into_iter()
            .map(|s| (s.upstream, s.downstream, s.reason))
            .collect()
    }

    fn recs(pairs: &[(i64, i64)]) -> Vec<Option<(i64, i64)>> {
        pairs.iter().copied().map(Some).collect()
    }

    #[test]
    fn emission_table() {
        let contiguous: Vec<(i64, i64)> = (0..10).map(|i| (100 + i, 5 + i)).collect();
        type Case = (
            &'static str,
            i64,
            Vec<Option<(i64, i64)>>,
            Vec<(i64, i64, SyncReason)>,
        );
        let cases: Vec<Case> = vec![
            ("empty", 100, vec![], vec![]),
            ("flush with nothing replicated", 100, vec![None], vec![]),
            (
                "single record then flush",
                100,
                vec![Some((4, 9)), None],
                vec![(4, 9, First)],
            ),
            (
                "contiguous run, flush syncs the last",
                100,
                [recs(&contiguous), vec![None]].concat(),
                vec![(100, 5, First), (109, 14, Flush)],
            ),
            (
                "lag_max every 4th record",
                4,
                recs(&contiguous),
                vec![(100, 5, First), (104, 9, LagMax), (108, 13, LagMax)],
            ),
            (
                "lag_max 1 syncs every record",
                1,
                recs(&[(0, 0), (1, 1), (2, 2)]),
                vec![(0, 0, First), (1, 1, LagMax), (2, 2, LagMax)],
            ),
            (
                "upstream gap (source transaction marker)",
                100,
                recs(&[(0, 0), (1, 1), (2, 2), (4, 3), (5, 4)]),
                vec![(0, 0, First), (2, 2, BeforeGap), (4, 3, AfterGap)],
            ),
            (
                "downstream gap (our commit marker)",
                100,
                recs(&[(0, 10), (1, 11), (2, 13), (3, 14)]),
                vec![(0, 10, First), (1, 11, BeforeGap), (2, 13, AfterGap)],
            ),
            (
                "gap right after a synced record: no duplicate BeforeGap",
                100,
                recs(&[(0, 0), (5, 1)]),
                vec![(0, 0, First), (5, 1, AfterGap)],
            ),
            (
                "gap after a flush: the flush already covered the record before",
                100,
                vec![
                    Some((0, 0)),
                    Some((1, 1)),
                    None,
                    Some((2, 3)),
                    Some((3, 4)),
                    None,
                ],
                vec![
                    (0, 0, First),
                    (1, 1, Flush),
                    (2, 3, AfterGap),
                    (3, 4, Flush),
                ],
            ),
            (
                "downstream going backwards is a gap",
                100,
                recs(&[(0, 10), (1, 11), (2, 3)]),
                vec![(0, 10, First), (1, 11, BeforeGap), (2, 3, AfterGap)],
            ),
            (
                "consecutive gaps",
                100,
                recs(&[(0, 0), (2, 1), (4, 2), (5, 3)]),
                vec![(0, 0, First), (2, 1, AfterGap), (4, 2, AfterGap)],
            ),
            (
                "lag_max counter restarts after a gap sync",
                3,
                recs(&[(0, 0), (1, 1), (3, 2), (4, 3), (5, 4), (6, 5)]),
                vec![
                    (0, 0, First),
                    (1, 1, BeforeGap),
                    (3, 2, AfterGap),
                    (6, 5, LagMax),
                ],
            ),
            (
                "flush right after a sync emits nothing",
                2,
                vec![Some((0, 0)), Some((1, 1)), Some((2, 2)), None],
                vec![(0, 0, First), (2, 2, LagMax)],
            ),
        ];
        for (name, lag_max, steps, want) in cases {
            assert_eq!(run(lag_max, &steps), want, "{name}");
        }
    }

    #[test]
    fn distance_between_syncs_never_exceeds_lag_max() {
        for lag_max in 1..=7 {
            let steps: Vec<Option<(i64, i64)>> = (0..50).map(|i| Some((i, i))).collect();
            let syncs = run(lag_max, &steps);
            for w in syncs.windows(2) {
                assert!(w[1].0 - w[0].0 <= lag_max, "lag_max {lag_max}: {w:?}");
            }
        }
    }

    #[test]
    fn a_new_emitter_starts_over() {
        let mut e = SyncEmitter::new(1);
        let mut out = Vec::new();
        e.on_record(0, 0, 100, &mut out);
        e.on_record(1, 1, 100, &mut out);
        // Rewind after an aborted batch: a new emitter with a new epoch.
        let mut e = SyncEmitter::new(2);
        e.on_record(1, 3, 100, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].reason, First);
        assert_eq!(
            out[1].sequence,
            SyncSequence {
                writer_epoch: 2,
                seq: 0
            }
        );
        assert_eq!(e.epoch(), 2);
    }
}
