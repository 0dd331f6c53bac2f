//! Tests for offset translation: MM2 scenarios as tables, writer-contract scenarios, the
//! bound, and a seeded simulation of upstream/downstream logs with gaps and restarts.

use super::*;
use pretty_assertions::assert_eq;

use Contract::{Mirrorflow, Mm2};

fn sp(upstream: i64, downstream: i64) -> SyncPoint {
    SyncPoint::new(upstream, downstream)
}

fn history(syncs: &[(i64, i64)], link: Link) -> SyncHistory {
    let mut h = SyncHistory::new();
    for (i, &(u, d)) in syncs.iter().enumerate() {
        let l = if i == 0 { Link::Unknown } else { link };
        h.insert(sp(u, d), l);
    }
    h
}

fn exact(downstream: i64, sync: (i64, i64)) -> Translation {
    Translation::Exact {
        downstream,
        sync: sp(sync.0, sync.1),
    }
}

fn safe(downstream: i64, sync: (i64, i64)) -> Translation {
    Translation::Safe {
        downstream,
        sync: sp(sync.0, sync.1),
    }
}

const BEFORE: Translation = Translation::NoSync {
    reason: NoSyncReason::BeforeOldest,
};
const EMPTY: Translation = Translation::NoSync {
    reason: NoSyncReason::Empty,
};

/// Tiny deterministic PRNG (xorshift64*), so the simulation needs no extra crate.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// True with probability `per_mille / 1000`.
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Emits syncs exactly as the writer contract of `Contract::Mirrorflow` says.
struct ContractWriter {
    lag_max: u64,
    last_record: Option<SyncPoint>,
    last_emitted: Option<SyncPoint>,
    since_sync: u64,
    epoch: i64,
    seq: i64,
    out: Vec<(SyncPoint, SyncSequence)>,
}

impl ContractWriter {
    fn new(lag_max: u64) -> Self {
        Self {
            lag_max,
            last_record: None,
            last_emitted: None,
            since_sync: 0,
            epoch: 0,
            seq: 0,
            out: Vec::new(),
        }
    }

    fn emit(&mut self, s: SyncPoint) {
        if self.last_emitted == Some(s) {
            return;
        }
        self.out.push((
            s,
            SyncSequence {
                writer_epoch: self.epoch,
                seq: self.seq,
            },
        ));
        self.seq += 1;
        self.last_emitted = Some(s);
        self.since_sync = 0;
    }

    /// The record `s` was replicated.
    fn record(&mut self, s: SyncPoint) {
        match self.last_record {
            None => self.emit(s), // (a)
            Some(p) if s.upstream - p.upstream != 1 || s.downstream - p.downstream != 1 => {
                self.emit(p); // (c), no-op if already emitted
                self.emit(s); // (b)
            }
            Some(_) => {
                self.since_sync += 1;
                if self.since_sync >= self.lag_max {
                    self.emit(s); // (d)
                }
            }
        }
        self.last_record = Some(s);
    }

    /// (e)
    fn flush(&mut self) {
        if let Some(s) = self.last_record {
            self.emit(s);
        }
    }

    /// Crash and start again: pending syncs are lost, a new run begins.
    fn restart(&mut self) {
        self.last_record = None;
        self.last_emitted = None;
        self.since_sync = 0;
        self.epoch += 1;
        self.seq = 0;
    }
}

/// History built by the contract writer from `(upstream, downstream)` records in order.
fn contract_history(records: &[(i64, i64)], lag_max: u64, flush: bool) -> SyncHistory {
    let mut w = ContractWriter::new(lag_max);
    for &(u, d) in records {
        w.record(sp(u, d));
    }
    if flush {
        w.flush();
    }
    let mut h = SyncHistory::new();
    for (s, seq) in w.out {
        h.insert_sequenced(s, Some(seq));
    }
    h
}

/// The scenarios of MM2's translation rule (Kafka PR 13178), in both contracts where they agree.
#[test]
fn mm2_scenarios() {
    let one = history(&[(100, 200)], Link::Unknown);
    let two_unknown = history(&[(100, 200), (200, 300)], Link::Unknown);
    let two_linear = history(&[(100, 200), (200, 300)], Link::Consecutive);
    let empty = SyncHistory::new();
    // (name, history, group offset, contract, expected)
    let cases: Vec<(&str, &SyncHistory, i64, Contract, Translation)> = vec![
        ("exact sync", &one, 100, Mm2, exact(200, (100, 200))),
        ("exact sync", &one, 100, Mirrorflow, exact(200, (100, 200))),
        ("no syncs at all", &empty, 5, Mm2, EMPTY),
        ("no syncs at all", &empty, 5, Mirrorflow, EMPTY),
        ("before the first sync", &one, 99, Mm2, BEFORE),
        ("before the first sync", &one, 99, Mirrorflow, BEFORE),
        ("no committed offset", &one, -1, Mirrorflow, BEFORE),
        (
            "between syncs: d + 1",
            &two_unknown,
            150,
            Mm2,
            safe(201, (100, 200)),
        ),
        (
            "between, unknown span",
            &two_unknown,
            150,
            Mirrorflow,
            safe(201, (100, 200)),
        ),
        (
            "between, linear span",
            &two_linear,
            150,
            Mirrorflow,
            exact(250, (100, 200)),
        ),
        (
            "between, linear, MM2 rule",
            &two_linear,
            150,
            Mm2,
            safe(201, (100, 200)),
        ),
        (
            "second sync",
            &two_unknown,
            200,
            Mm2,
            exact(300, (200, 300)),
        ),
        // KAFKA-12468 negative lag: group at 1000, replication at 500. MM2's old rule said
        // 1000; d + 1 never passes the target's end.
        (
            "replication lagging",
            &one,
            1000,
            Mm2,
            safe(201, (100, 200)),
        ),
        (
            "replication lagging",
            &one,
            1000,
            Mirrorflow,
            safe(201, (100, 200)),
        ),
        (
            "consumed through newest",
            &one,
            101,
            Mirrorflow,
            exact(201, (100, 200)),
        ),
        (
            "consumed through newest",
            &one,
            101,
            Mm2,
            safe(201, (100, 200)),
        ),
    ];
    for (name, h, o, contract, want) in cases {
        assert_eq!(translate(h, o, contract), want, "{name} o={o} {contract:?}");
    }
}

/// Upstream rewinds, downstream truncation, duplicates and bad input.
#[test]
fn insert_rules() {
    struct Case {
        name: &'static str,
        before: &'static [(i64, i64)],
        insert: (i64, i64),
        outcome: InsertOutcome,
        after: &'static [(i64, i64)],
        /// (resume, frontier) of the pending rewind afterwards.
        rewind: Option<(i64, i64)>,
    }
    let cases = [
        Case {
            name: "source recreated: everything above the new upstream goes",
            before: &[(100, 200), (200, 300)],
            insert: (0, 400),
            outcome: InsertOutcome::UpstreamRewound { discarded: 2 },
            after: &[(0, 400)],
            rewind: Some((0, 200)),
        },
        Case {
            name: "partial rewind keeps older true syncs",
            before: &[(100, 200), (200, 300), (300, 400)],
            insert: (250, 500),
            outcome: InsertOutcome::UpstreamRewound { discarded: 1 },
            after: &[(100, 200), (200, 300), (250, 500)],
            rewind: Some((250, 300)),
        },
        Case {
            name: "same record re-replicated: newer copy wins",
            before: &[(100, 200), (200, 300)],
            insert: (200, 350),
            outcome: InsertOutcome::UpstreamRewound { discarded: 1 },
            after: &[(100, 200), (200, 350)],
            rewind: None,
        },
        Case {
            name: "target truncated: syncs at or past the new downstream go",
            before: &[(100, 200), (200, 300)],
            insert: (300, 250),
            outcome: InsertOutcome::DownstreamRewound { discarded: 1 },
            after: &[(100, 200), (300, 250)],
            rewind: None,
        },
        Case {
            name: "target recreated",
            before: &[(100, 200), (200, 300)],
            insert: (300, 0),
            outcome: InsertOutcome::DownstreamRewound { discarded: 2 },
            after: &[(300, 0)],
            rewind: None,
        },
        Case {
            name: "downstream stalls",
            before: &[(100, 200)],
            insert: (150, 200),
            outcome: InsertOutcome::DownstreamRewound { discarded: 1 },
            after: &[(150, 200)],
            rewind: None,
        },
        Case {
            name: "duplicate",
            before: &[(100, 200)],
            insert: (100, 200),
            outcome: InsertOutcome::Duplicate,
            after: &[(100, 200)],
            rewind: None,
        },
        Case {
            name: "negative upstream",
            before: &[(100, 200)],
            insert: (-1, 300),
            outcome: InsertOutcome::Rejected,
            after: &[(100, 200)],
            rewind: None,
        },
        Case {
            name: "negative downstream",
            before: &[(100, 200)],
            insert: (300, -1),
            outcome: InsertOutcome::Rejected,
            after: &[(100, 200)],
            rewind: None,
        },
        Case {
            name: "append",
            before: &[(100, 200)],
            insert: (101, 201),
            outcome: InsertOutcome::Appended,
            after: &[(100, 200), (101, 201)],
            rewind: None,
        },
    ];
    for c in cases {
        let mut h = history(c.before, Link::Unknown);
        let got = h.insert(sp(c.insert.0, c.insert.1), Link::Unknown);
        assert_eq!(got, c.outcome, "{}", c.name);
        let after: Vec<(i64, i64)> = h
            .entries()
            .map(|(s, _)| (s.upstream, s.downstream))
            .collect();
        assert_eq!(after, c.after, "{}", c.name);
        let rewind = h.pending_rewind().map(|r| (r.resume, r.frontier));
        assert_eq!(rewind, c.rewind, "{}", c.name);
    }
}

/// After rewinds, translation uses only what survived, and re-replicated ranges wait.
#[test]
fn translation_after_rewinds() {
    // Writer restarted at 250 after syncing up to 300: records 250..=300 still have their
    // first copies at 350..=400, below the new sync (250, 500).
    let mut h = history(&[(100, 200), (200, 300), (300, 400)], Link::Consecutive);
    h.insert(sp(250, 500), Link::Unknown);
    let cases = [
        (150, exact(250, (100, 200))), // span 100→200 is still linear
        (220, safe(301, (200, 300))),  // span 200→250 is unknown
        (250, safe(301, (200, 300))),  // not 500: that would skip the first copy of 250..
        (299, safe(301, (200, 300))),
        (400, safe(301, (200, 300))),
        (50, BEFORE),
    ];
    for (o, want) in cases {
        assert_eq!(translate(&h, o, Mirrorflow), want, "rewind pending o={o}");
        if o >= 250 {
            assert_eq!(
                translate(&h, o, Mm2),
                want,
                "the guard applies to MM2 too, o={o}"
            );
        }
    }
    // Re-replication reaches the old frontier: the new run translates normally.
    h.insert(sp(300, 550), Link::Consecutive);
    assert_eq!(h.pending_rewind(), None);
    let cases = [
        (250, exact(500, (250, 500))),
        (260, exact(510, (250, 500))), // the new run's span is linear
        (301, exact(551, (300, 550))),
        (220, safe(301, (200, 300))),
    ];
    for (o, want) in cases {
        assert_eq!(translate(&h, o, Mirrorflow), want, "re-replicated o={o}");
    }
    // Source recreated (offsets restart at 0): without being told, the history waits...
    let mut h = history(&[(100, 200), (200, 300)], Link::Consecutive);
    h.insert(sp(0, 400), Link::Unknown);
    let waiting = Translation::NoSync {
        reason: NoSyncReason::ReReplicating,
    };
    assert_eq!(translate(&h, 0, Mirrorflow), waiting);
    assert_eq!(translate(&h, 5, Mm2), waiting);
    // ...and once the caller knows the topic was reset, it clears first.
    h.clear();
    h.insert(sp(0, 400), Link::Unknown);
    assert_eq!(translate(&h, 0, Mirrorflow), exact(400, (0, 400)));
    assert_eq!(translate(&h, 5, Mm2), safe(401, (0, 400)));
    // Target recreated: only syncs of the new target remain.
    let mut h = history(&[(100, 200), (200, 300)], Link::Consecutive);
    h.insert(sp(300, 0), Link::Consecutive);
    assert_eq!(translate(&h, 300, Mm2), exact(0, (300, 0)));
    assert_eq!(translate(&h, 200, Mm2), BEFORE);
    // Target truncated: 150 no longer translates through the discarded (200, 300).
    let mut h = history(&[(100, 200), (200, 300)], Link::Consecutive);
    h.insert(sp(300, 250), Link::Consecutive);
    assert_eq!(translate(&h, 250, Mirrorflow), safe(201, (100, 200)));
}

/// Sequence numbers decide the link; lost syncs, new writer runs and rejected syncs break it.
#[test]
fn links_from_sequences() {
    let seq = |writer_epoch, seq| Some(SyncSequence { writer_epoch, seq });
    let spans = |inserts: &[((i64, i64), Option<SyncSequence>)]| {
        let mut h = SyncHistory::new();
        for &((u, d), s) in inserts {
            h.insert_sequenced(sp(u, d), s);
        }
        h.entries().map(|(_, span)| span).collect::<Vec<_>>()
    };
    use Span::{Gap, Linear, Unknown};
    type Inserts = Vec<((i64, i64), Option<SyncSequence>)>;
    let cases: Vec<(&str, Inserts, Vec<Span>)> = vec![
        (
            "consecutive",
            vec![
                ((0, 0), seq(1, 0)),
                ((10, 10), seq(1, 1)),
                ((12, 11), seq(1, 2)),
            ],
            vec![Unknown, Linear, Gap],
        ),
        (
            "a sync lost to compaction",
            vec![((0, 0), seq(1, 0)), ((10, 10), seq(1, 2))],
            vec![Unknown, Unknown],
        ),
        (
            "new writer run",
            vec![((0, 0), seq(1, 0)), ((10, 10), seq(2, 1))],
            vec![Unknown, Unknown],
        ),
        (
            "MM2 syncs carry no sequence",
            vec![((0, 0), None), ((10, 10), None)],
            vec![Unknown, Unknown],
        ),
        (
            "duplicate keeps the chain",
            vec![
                ((0, 0), seq(1, 0)),
                ((0, 0), seq(1, 1)),
                ((5, 5), seq(1, 2)),
            ],
            vec![Unknown, Linear],
        ),
        (
            "rejected sync breaks the chain",
            vec![
                ((0, 0), seq(1, 0)),
                ((-1, 3), seq(1, 1)),
                ((5, 5), seq(1, 2)),
            ],
            vec![Unknown, Unknown],
        ),
    ];
    for (name, inserts, want) in cases {
        assert_eq!(spans(&inserts), want, "{name}");
    }
    // Plain insert: a Consecutive link after a rejected sync is not trusted either.
    let mut h = SyncHistory::new();
    h.insert(sp(0, 0), Link::Unknown);
    h.insert(sp(-5, 0), Link::Consecutive);
    h.insert(sp(5, 5), Link::Consecutive);
    assert_eq!(translate(&h, 3, Mirrorflow), safe(1, (0, 0)));
}

/// Transactional source: a commit marker at every other upstream offset. PR 13178's
/// example: old MM2 translated group 1000 via (500, 250) to 750, skipping 250 records.
#[test]
fn upstream_transaction_markers_every_other_offset() {
    let records: Vec<(i64, i64)> = (0..1000).map(|i| (2 * i, i)).collect();
    let h = contract_history(&records, 100, true);
    assert!(h.len() <= MAX_SYNCS_PER_PARTITION);
    // Recent offsets: the newest syncs are kept dense, every span between them is a gap
    // between consecutive records, so exact.
    for o in 1970..=1999 {
        let want = (o + 1) / 2; // first record with upstream ≥ o
        let got = translate(&h, o, Mirrorflow);
        assert!(matches!(got, Translation::Exact { .. }), "o={o}: {got:?}");
        assert_eq!(got.downstream(), Some(want), "o={o}");
    }
    // Old offsets: still translate, never past the record they must not skip.
    for o in (0..1970).step_by(7) {
        let got = translate(&h, o, Mirrorflow).downstream().unwrap();
        assert!(got <= (o + 1) / 2, "o={o} -> {got}");
    }
    // Group past the final marker: newest sync (1998, 999) + 1 — nothing re-read, though
    // the history cannot prove no record lies in between (replication lag), so `Safe`.
    assert_eq!(translate(&h, 2000, Mirrorflow), safe(1000, (1998, 999)));
    // Sparse MM2 syncs: d + 1, never the linear 750.
    let mm2 = history(&[(0, 0), (500, 250)], Link::Unknown);
    assert_eq!(translate(&mm2, 1000, Mm2), safe(251, (500, 250)));
    assert_eq!(translate(&mm2, 1000, Mirrorflow), safe(251, (500, 250)));
}

/// Exactly-once target: a transaction marker after every 5 records downstream.
#[test]
fn downstream_eos_markers_after_every_transaction() {
    let d_of = |u: i64| u + u / 5;
    let records: Vec<(i64, i64)> = (0..50).map(|u| (u, d_of(u))).collect();
    let h = contract_history(&records, 100, true);
    for o in 0..=50 {
        let want = if o < 50 { d_of(o) } else { d_of(49) + 1 };
        let mf = translate(&h, o, Mirrorflow);
        assert_eq!(mf.downstream(), Some(want), "o={o}");
        assert!(matches!(mf, Translation::Exact { .. }), "o={o}: {mf:?}");
        // The MM2 rule on the same syncs is coarser but never ahead.
        let mm2 = translate(&h, o, Mm2).downstream().unwrap();
        assert!(mm2 <= want, "o={o}: mm2 {mm2} > {want}");
    }
}

/// Compacted source: holes in upstream offsets, contiguous downstream.
#[test]
fn compacted_gaps() {
    let ups = [0i64, 1, 2, 5, 6, 10, 11, 12, 20];
    let records: Vec<(i64, i64)> = ups
        .iter()
        .enumerate()
        .map(|(d, &u)| (u, d as i64))
        .collect();
    let h = contract_history(&records, 100, true);
    for o in 0..=21 {
        // Downstream position of the first record with upstream ≥ o (9 = end).
        let want = ups.iter().position(|&u| u >= o).unwrap_or(ups.len()) as i64;
        let got = translate(&h, o, Mirrorflow);
        assert_eq!(got.downstream(), Some(want), "o={o}");
        assert!(matches!(got, Translation::Exact { .. }), "o={o}: {got:?}");
    }
}

/// A group fully caught up resumes at exactly d_last + 1: zero re-read.
#[test]
fn caught_up_group_rereads_nothing() {
    // Plain topic, writer flushed its last record.
    let records: Vec<(i64, i64)> = (0..100).map(|u| (u, u + 1000)).collect();
    let h = contract_history(&records, 100, true);
    assert_eq!(translate(&h, 100, Mirrorflow), exact(1100, (99, 1099)));
    assert_eq!(translate(&h, 100, Mm2), safe(1100, (99, 1099)));
    assert_eq!(
        clamp_to_target_end(translate(&h, 100, Mirrorflow), 1100),
        exact(1100, (99, 1099))
    );
    // Without (e) the newest sync is older: the answer falls back, never past the end.
    let h = contract_history(&records, 30, false);
    let t = translate(&h, 100, Mirrorflow);
    assert!(matches!(t, Translation::Safe { .. }), "{t:?}");
    assert!(t.downstream().unwrap() <= 1100);
}

#[test]
fn clamp_to_end() {
    let s = sp(10, 20);
    let cases = [
        (exact(25, (10, 20)), 30, exact(25, (10, 20))),
        (exact(25, (10, 20)), 25, exact(25, (10, 20))),
        (
            exact(25, (10, 20)),
            22,
            Translation::Clamped {
                downstream: 22,
                translated: 25,
                sync: s,
            },
        ),
        (
            safe(21, (10, 20)),
            -1,
            Translation::Clamped {
                downstream: 0,
                translated: 21,
                sync: s,
            },
        ),
        (
            Translation::Clamped {
                downstream: 22,
                translated: 25,
                sync: s,
            },
            21,
            Translation::Clamped {
                downstream: 21,
                translated: 25,
                sync: s,
            },
        ),
        (BEFORE, 0, BEFORE),
    ];
    for (t, end, want) in cases {
        assert_eq!(clamp_to_target_end(t, end), want, "{t:?} end={end}");
    }
    assert_eq!(
        [
            exact(1, (0, 0)).kind(),
            safe(1, (0, 0)).kind(),
            BEFORE.kind()
        ],
        ["exact", "safe", "no_sync"]
    );
}

#[test]
fn checkpoint_decisions() {
    let prev = CheckpointState {
        upstream: 100,
        downstream: 500,
    };
    use CheckpointDecision::{Emit, Skip};
    let cases = [
        (None, (100, 500), Emit(EmitReason::First)),
        (Some(prev), (150, 550), Emit(EmitReason::DownstreamAdvanced)),
        (Some(prev), (100, 501), Emit(EmitReason::DownstreamAdvanced)),
        (Some(prev), (150, 500), Skip(SkipReason::NotAdvanced)),
        (Some(prev), (100, 500), Skip(SkipReason::NotAdvanced)),
        (
            Some(prev),
            (150, 499),
            Skip(SkipReason::WouldLowerDownstream),
        ),
        (Some(prev), (99, 400), Emit(EmitReason::UpstreamRewound)),
        (Some(prev), (0, 600), Emit(EmitReason::UpstreamRewound)),
    ];
    for (p, next, want) in cases {
        assert_eq!(decide_checkpoint(p.as_ref(), next), want, "{p:?} {next:?}");
    }
}

#[test]
fn group_sync_decisions() {
    let g = |exists, active_members, committed| TargetGroupState {
        exists,
        active_members,
        committed,
    };
    use GroupSyncDecision::{Commit, SkipActiveMembers, SkipNotAhead};
    let cases = [
        ("absent group", g(false, 0, None), 10, Commit(10)),
        ("empty group, no offset", g(true, 0, None), 10, Commit(10)),
        ("empty group, behind", g(true, 0, Some(5)), 10, Commit(10)),
        ("empty group, equal", g(true, 0, Some(10)), 10, SkipNotAhead),
        ("empty group, ahead", g(true, 0, Some(20)), 10, SkipNotAhead),
        ("active group", g(true, 3, Some(5)), 10, SkipActiveMembers),
        ("negative translation", g(false, 0, None), -1, SkipNotAhead),
    ];
    for (name, target, translated, want) in cases {
        assert_eq!(decide_group_sync(&target, translated), want, "{name}");
    }
}

/// Restart: checkpoint state comes back from the checkpoint records (last per key wins),
/// and a coarser post-restart history cannot lower a checkpoint.
#[test]
fn restart_with_reloaded_checkpoints() {
    let cp = |group: &str, partition, upstream_offset, downstream_offset| wire::Checkpoint {
        group: group.into(),
        topic: "dc1.orders".into(),
        partition,
        upstream_offset,
        downstream_offset,
        metadata: String::new(),
    };
    let written = [
        cp("g", 0, 200, 300),
        cp("g", 1, 10, 10),
        cp("g", 0, 250, 350), // later record for the same key
    ];
    // Round-trip through the wire format, as a restarted worker would read them.
    let read: Vec<wire::Checkpoint> = written
        .iter()
        .map(|c| wire::Checkpoint::decode(&c.encode_key().unwrap(), &c.encode_value().unwrap()))
        .collect::<Result<_, _>>()
        .unwrap();
    let states = reload_checkpoints(read);
    let key = |partition| CheckpointKey {
        group: "g".into(),
        topic: "dc1.orders".into(),
        partition,
    };
    assert_eq!(states.len(), 2);
    let p0 = states[&key(0)];
    assert_eq!(
        p0,
        CheckpointState {
            upstream: 250,
            downstream: 350
        }
    );
    // After the restart only a compacted, coarse sync survives: (240, 340), no links.
    let h = history(&[(240, 340)], Link::Unknown);
    use CheckpointDecision::{Emit, Skip};
    let cases = [
        (
            "same group offset, coarser sync",
            250,
            Skip(SkipReason::WouldLowerDownstream),
        ),
        (
            "group advanced a little",
            260,
            Skip(SkipReason::WouldLowerDownstream),
        ),
        (
            "group reset on the source",
            240,
            Emit(EmitReason::UpstreamRewound),
        ),
    ];
    for (name, o, want) in cases {
        let d = translate(&h, o, Mirrorflow).downstream().unwrap();
        assert_eq!(decide_checkpoint(Some(&p0), (o, d)), want, "{name}");
    }
    let h = history(&[(240, 340), (390, 500)], Link::Unknown);
    let d = translate(&h, 400, Mirrorflow).downstream().unwrap();
    assert_eq!(
        decide_checkpoint(Some(&p0), (400, d)),
        Emit(EmitReason::DownstreamAdvanced)
    );
    assert_eq!(
        decide_checkpoint(states.get(&key(7)), (1, 1)),
        Emit(EmitReason::First)
    );
}

/// Contiguous syncs merge losslessly: any number of them stays exact.
#[test]
fn linear_runs_merge_without_loss() {
    let mut h = SyncHistory::with_capacity(3);
    h.insert(sp(0, 100), Link::Unknown);
    for i in 1..=1000 {
        h.insert(sp(i * 10, 100 + i * 10), Link::Consecutive);
        assert!(h.len() <= 3);
    }
    for o in (0..=10_000).step_by(13) {
        assert_eq!(
            translate(&h, o, Mirrorflow).downstream(),
            Some(100 + o),
            "o={o}"
        );
    }
    assert_eq!(h.oldest(), Some(sp(0, 100)));
    assert_eq!(h.newest(), Some(sp(10_000, 10_100)));
}

/// Gapped syncs cannot merge: retained syncs thin out with age, the oldest stays.
#[test]
fn eviction_spacing_grows_with_age() {
    let mut h = SyncHistory::new();
    h.insert(sp(0, 0), Link::Unknown);
    for i in 1..20_000i64 {
        h.insert(sp(2 * i, i), Link::Consecutive); // every span is a gap
        assert!(h.len() <= MAX_SYNCS_PER_PARTITION);
    }
    assert_eq!(h.len(), MAX_SYNCS_PER_PARTITION);
    let ups: Vec<i64> = h.entries().map(|(s, _)| s.upstream).collect();
    assert_eq!(ups[0], 0, "oldest kept");
    let newest = *ups.last().unwrap();
    assert_eq!(newest, 39_998);
    // The newest syncs are dense (kept exact), older spacing stays within a fraction of
    // the age: a group `a` offsets behind re-reads at most about a/4 + 2.
    for w in ups.windows(2) {
        let (left, right) = (w[0], w[1]);
        let age = newest - right;
        assert!(
            right - left <= age / 4 + 2,
            "spacing {left}..{right}, age {age}: {ups:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Simulation: random upstream log, writer following the contract, random downstream gaps.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct SimConfig {
    upstream_len: i64,
    /// Upstream offset holds no record (marker, compacted away).
    hole: u64,
    /// Record filtered out by the writer.
    filter: u64,
    /// A marker is written downstream before a record.
    down_marker: u64,
    /// Writer crashes before a record and resumes from an earlier offset.
    restart: u64,
    /// Writer flushes after a record (contract (e)).
    flush: u64,
    /// Sync lost before the checkpoint side reads it (compaction).
    lost_sync: u64,
    lag_max: u64,
    /// First replicated upstream offset; replication stops before `replicate_until`.
    start: i64,
    replicate_until: i64,
    /// Checks after every this many delivered syncs.
    check_every: usize,
}

/// Probabilities above are per mille.
const NO_GAPS: SimConfig = SimConfig {
    upstream_len: 600,
    hole: 0,
    filter: 0,
    down_marker: 0,
    restart: 0,
    flush: 20,
    lost_sync: 0,
    lag_max: 16,
    start: 40,
    replicate_until: 600,
    check_every: 7,
};

/// Ground truth of a downstream log: per group offset, the safe ceiling and exact floor.
struct Truth {
    end: i64,
    /// Highest position that skips nothing: min over source records ≥ o of their last copy.
    hi: Vec<i64>,
    /// Lowest position that re-reads nothing: 1 + max position of a copy of a record < o.
    lo: Vec<i64>,
}

impl Truth {
    fn new(down: &[Option<i64>], upstream_len: i64) -> Self {
        let n = upstream_len as usize + 3;
        let mut last_copy = vec![-1i64; n];
        for (d, u) in down.iter().enumerate() {
            if let Some(u) = u {
                last_copy[*u as usize] = d as i64; // positions increase: the last is the max
            }
        }
        let end = down.len() as i64;
        let mut hi = vec![end; n];
        for o in (0..n - 1).rev() {
            hi[o] = hi[o + 1];
            if last_copy[o] >= 0 {
                hi[o] = hi[o].min(last_copy[o]);
            }
        }
        let mut lo = vec![0i64; n];
        for o in 1..n {
            lo[o] = lo[o - 1].max(last_copy[o - 1] + 1);
        }
        Self { end, hi, lo }
    }

    fn offsets(&self) -> std::ops::Range<i64> {
        0..self.hi.len() as i64
    }
}

/// Asserts the safety properties for every group offset and both contracts.
fn check(h: &SyncHistory, truth: &Truth, ctx: &str) {
    let mut prev = [None::<i64>; 2];
    for o in truth.offsets() {
        let mut got = [None::<i64>; 2];
        for (i, contract) in [Mirrorflow, Mm2].into_iter().enumerate() {
            let t = translate(h, o, contract);
            let Some(d) = t.downstream() else {
                assert!(
                    h.oldest().is_none_or(|s| o < s.upstream),
                    "{ctx} o={o} {contract:?}: no translation although a sync ≤ o exists"
                );
                continue;
            };
            let (lo, hi) = (truth.lo[o as usize], truth.hi[o as usize]);
            assert!(
                d <= hi,
                "{ctx} o={o} {contract:?}: {t:?} skips records (ceiling {hi})"
            );
            assert!(
                d <= truth.end,
                "{ctx} o={o} {contract:?}: {t:?} past end {}",
                truth.end
            );
            if matches!(t, Translation::Exact { .. }) {
                assert!(
                    d >= lo,
                    "{ctx} o={o} {contract:?}: {t:?} claims exact, re-reads (floor {lo})"
                );
            }
            assert_eq!(clamp_to_target_end(t, truth.end), t, "{ctx} o={o}");
            if let Some(p) = prev[i] {
                assert!(
                    d >= p,
                    "{ctx} o={o} {contract:?}: not monotonic ({p} then {d})"
                );
            }
            prev[i] = Some(d);
            got[i] = Some(d);
        }
        if let [Some(mf), Some(mm2)] = got {
            assert!(
                mf >= mm2,
                "{ctx} o={o}: Mirrorflow {mf} coarser than MM2 {mm2}"
            );
        }
    }
}

/// Runs one simulation, checking every history after every `check_every` delivered syncs
/// and at the end; returns the histories and the downstream log.
fn simulate(
    seed: u64,
    cfg: SimConfig,
    capacities: &[usize],
) -> (Vec<SyncHistory>, Vec<Option<i64>>) {
    let mut rng = XorShift::new(seed);
    let is_record: Vec<bool> = (0..cfg.upstream_len)
        .map(|_| !rng.chance(cfg.hole))
        .collect();
    let filtered: Vec<bool> = (0..cfg.upstream_len)
        .map(|_| rng.chance(cfg.filter))
        .collect();
    let mut down: Vec<Option<i64>> = Vec::new();
    let mut writer = ContractWriter::new(cfg.lag_max);
    let mut hs: Vec<SyncHistory> = capacities
        .iter()
        .map(|&c| SyncHistory::with_capacity(c))
        .collect();
    let mut delivered = 0usize;
    let mut lost_last: Option<(SyncPoint, SyncSequence)> = None;
    let mut pos = cfg.start;
    let ctx = |pos: i64| format!("seed={seed} pos={pos} cfg={cfg:?}");
    while pos < cfg.replicate_until {
        let u = pos as usize;
        if !is_record[u] || filtered[u] {
            pos += 1;
            continue;
        }
        if writer.last_record.is_some() && rng.chance(cfg.restart) {
            // The contract's restart clause: either a graceful stop flushes (e), or the
            // records written after the last sync were in an aborted transaction.
            // Progress is committed with the records, so the resume point never lies past
            // what stays visible.
            let mut resume_limit = pos;
            if rng.chance(500) {
                writer.flush();
            } else if let Some(last) = writer.last_emitted {
                for slot in &mut down[last.downstream as usize + 1..] {
                    *slot = None;
                }
                down.push(None); // the abort marker
                resume_limit = last.upstream + 1;
            }
            // Compaction never removes the newest sync of a partition.
            let newest = writer.out.last().copied().or(lost_last);
            for (s, seq) in std::mem::take(&mut writer.out).into_iter().chain(newest) {
                for h in &mut hs {
                    h.insert_sequenced(s, Some(seq));
                }
            }
            writer.restart();
            lost_last = None;
            pos = (resume_limit - rng.below(30) as i64).max(cfg.start);
            continue;
        }
        while rng.chance(cfg.down_marker) {
            down.push(None);
        }
        let d = down.len() as i64;
        down.push(Some(pos));
        writer.record(sp(pos, d));
        if rng.chance(cfg.flush) {
            writer.flush();
        }
        for (s, seq) in std::mem::take(&mut writer.out) {
            if rng.chance(cfg.lost_sync) {
                lost_last = Some((s, seq));
                continue;
            }
            lost_last = None;
            for h in &mut hs {
                h.insert_sequenced(s, Some(seq));
                assert!(h.len() <= h.capacity(), "{}", ctx(pos));
            }
            delivered += 1;
            if delivered.is_multiple_of(cfg.check_every) {
                let truth = Truth::new(&down, cfg.upstream_len);
                for h in &hs {
                    check(h, &truth, &ctx(pos));
                }
            }
        }
        pos += 1;
    }
    let truth = Truth::new(&down, cfg.upstream_len);
    for h in &hs {
        check(h, &truth, &format!("{} (end)", ctx(pos)));
    }
    (hs, down)
}

/// Random gaps on both sides, filtering, lost syncs, writer restarts, lagging replication:
/// never skip, never pass the end, `Exact` never re-reads, monotonic in the group offset.
#[test]
fn simulation_with_gaps_is_safe() {
    for seed in 0..24u64 {
        let mut rng = XorShift::new(seed ^ 0xABCD);
        let cfg = SimConfig {
            upstream_len: 700,
            hole: rng.below(400),
            filter: rng.below(100),
            down_marker: rng.below(300),
            restart: rng.below(8),
            flush: rng.below(50),
            lost_sync: if seed % 3 == 0 { rng.below(200) } else { 0 },
            lag_max: 1 + rng.below(40),
            start: rng.below(50) as i64,
            replicate_until: 300 + rng.below(400) as i64,
            check_every: 11,
        };
        simulate(seed, cfg, &[MAX_SYNCS_PER_PARTITION, 4, 2]);
    }
}

/// No gaps anywhere: Mirrorflow translation is exact for every group offset from the first
/// replicated record to one past the last, even with a tiny bound.
#[test]
fn simulation_without_gaps_is_exact() {
    for seed in 0..8u64 {
        let (hs, down) = simulate(seed, NO_GAPS, &[MAX_SYNCS_PER_PARTITION, 3]);
        for h in &hs {
            let newest = h.newest().unwrap();
            // Without a final flush the newest sync may trail the last record a little.
            assert!(down.len() as i64 - newest.downstream <= NO_GAPS.lag_max as i64);
            for o in 0..NO_GAPS.upstream_len + 5 {
                let t = translate(h, o, Mirrorflow);
                let expect = o - NO_GAPS.start; // downstream starts at 0 for `start`
                if o < NO_GAPS.start {
                    assert_eq!(t, BEFORE, "seed={seed} o={o}");
                } else if o <= newest.upstream + 1 {
                    assert!(
                        matches!(t, Translation::Exact { downstream, .. } if downstream == expect),
                        "seed={seed} cap={} o={o}: {t:?}",
                        h.capacity()
                    );
                } else {
                    let want = safe(newest.downstream + 1, (newest.upstream, newest.downstream));
                    assert_eq!(t, want, "seed={seed} o={o}");
                }
            }
        }
    }
}

/// The bound holds over 1e5+ mixed contiguous/gapped syncs; old offsets still translate,
/// safely, and not far below where they should.
#[test]
fn bound_holds_after_many_inserts() {
    let cfg = SimConfig {
        upstream_len: 320_000,
        hole: 150,
        filter: 10,
        down_marker: 80,
        restart: 0,
        flush: 5,
        lost_sync: 0,
        lag_max: 8,
        start: 0,
        replicate_until: 320_000,
        check_every: usize::MAX,
    };
    let mut rng = XorShift::new(7);
    let is_record: Vec<bool> = (0..cfg.upstream_len)
        .map(|_| !rng.chance(cfg.hole))
        .collect();
    let mut writer = ContractWriter::new(cfg.lag_max);
    let mut h = SyncHistory::new();
    let mut down: Vec<Option<i64>> = Vec::new();
    let mut inserts = 0usize;
    for u in 0..cfg.upstream_len {
        if !is_record[u as usize] {
            continue;
        }
        while rng.chance(cfg.down_marker) {
            down.push(None);
        }
        let d = down.len() as i64;
        down.push(Some(u));
        writer.record(sp(u, d));
        if rng.chance(cfg.flush) {
            writer.flush();
        }
        for (s, seq) in std::mem::take(&mut writer.out) {
            h.insert_sequenced(s, Some(seq));
            inserts += 1;
            assert!(h.len() <= MAX_SYNCS_PER_PARTITION);
        }
    }
    assert!(inserts >= 100_000, "only {inserts} inserts");
    let truth = Truth::new(&down, cfg.upstream_len);
    let oldest = h.oldest().unwrap();
    let newest = h.newest().unwrap();
    assert_eq!(
        oldest.upstream,
        is_record.iter().position(|&r| r).unwrap() as i64
    );
    for o in (0..cfg.upstream_len).step_by(101) {
        let t = translate(&h, o, Mirrorflow);
        let d = t.downstream().expect("old offsets still translate");
        assert!(d <= truth.hi[o as usize], "o={o}: {t:?} skips");
        // Re-read is bounded relative to the group's age (exponential spacing); measured
        // worst here ≈ 0.29 × age, where MM2's power-of-two buckets allow up to ≈ 1 × age.
        let age = newest.upstream - o;
        let base = t.sync().unwrap().upstream;
        assert!(
            o - base <= age * 2 / 5 + 2 * cfg.lag_max as i64,
            "o={o} base={base} age={age}"
        );
    }
}

#[test]
fn lookups_by_reference_find_owned_keys() {
    let mut in_force = InForce::default();
    let mut ends: PartitionMap<i64> = PartitionMap::default();
    for (group, topic, partition) in [("g", "dc1.t", 0), ("g", "dc1.t", 1), ("h", "dc1.u", 0)] {
        let key = CheckpointKey {
            group: group.into(),
            topic: topic.into(),
            partition,
        };
        let state = CheckpointState {
            upstream: i64::from(partition),
            downstream: group.len() as i64,
        };
        in_force.insert(key, state);
        ends.insert((topic.to_string(), partition), 10 + i64::from(partition));
    }
    let at = |group, topic, partition| {
        in_force
            .get(&CheckpointKeyRef {
                group,
                topic,
                partition,
            })
            .map(|s| (s.upstream, s.downstream))
    };
    assert_eq!(at("g", "dc1.t", 1), Some((1, 1)));
    assert_eq!(at("h", "dc1.u", 0), Some((0, 1)));
    // Same strings in other fields, or a prefix of the topic, are other keys.
    assert_eq!(at("dc1.t", "g", 1), None);
    assert_eq!(at("g", "dc1.", 1), None);
    assert_eq!(at("g", "dc1.t", 2), None);
    assert_eq!(ends.get(&PartitionRef("dc1.t", 1)), Some(&11));
    assert_eq!(ends.get(&PartitionRef("dc1.u", 0)), Some(&10));
    assert_eq!(ends.get(&PartitionRef("dc1.u", 1)), None);
}
