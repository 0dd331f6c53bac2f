//! Which heartbeats a flow emits where ([`emissions`], MirrorMaker 2's placement), and the
//! replication latency measured with them ([`LatencyTracker`]). Pure.

use std::collections::VecDeque;

use crate::api::MirrorFlowSpec;
use crate::kafka::wire::Heartbeat;

/// The window of the percentile in the status: 5 minutes.
pub const WINDOW_MS: i64 = 5 * 60 * 1000;
/// Heartbeats waiting for their replica that are remembered; beyond, the newest are not
/// (the oldest one decides the current latency).
pub const MAX_PENDING: usize = 4096;

/// Which cluster a heartbeat is written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster {
    Source,
    Target,
}

impl Cluster {
    /// `source` / `target` (metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Cluster::Source => "source",
            Cluster::Target => "target",
        }
    }
}

/// The heartbeats of the flow at `timestamp_ms`, and where each goes (the topic is
/// `heartbeats` on both clusters), as MirrorMaker 2 places them (decided from its sources):
///
/// MM2's `MirrorHeartbeatConnector` of the pair `A->B` writes to the cluster its Connect
/// worker runs on, the *target* `B`, in the topic `heartbeats`, key
/// `(sourceClusterAlias=A, targetClusterAlias=B)`, record timestamp = the heartbeat's. So a
/// heartbeat's own replication flow never carries it. For a replication flow `A->B`, MM2's
/// dedicated mode also runs the pair `B->A` (`MirrorMakerConfig.clusterPairs`: every pair
/// gets a herder for heartbeats unless `emit.heartbeats.enabled=false`), whose heartbeat
/// connector writes `(B, A)` into `A`'s `heartbeats`; `A->B`'s `MirrorSourceConnector`
/// replicates that topic to `B` as `A.heartbeats` (heartbeats topics bypass the topic filter).
/// That replica is what `RemoteClusterUtils.upstreamClusters` and `replicationHops` read on
/// `B`. A flow here does both.
pub fn emissions(spec: &MirrorFlowSpec, timestamp_ms: i64) -> [(Cluster, Heartbeat); 2] {
    let (source, target) = (&spec.source.alias, &spec.target.alias);
    let hb = |from: &str, to: &str| Heartbeat {
        source_alias: from.to_string(),
        target_alias: to.to_string(),
        timestamp_ms,
    };
    [
        (Cluster::Target, hb(source, target)),
        (Cluster::Source, hb(target, source)),
    ]
}

/// Whether a heartbeat read from the target's replica of the source's heartbeats topic
/// measures this flow: it was written into the source (its target alias is the source's).
/// Heartbeats other emitters wrote there count too (they crossed the same flow).
pub fn measures_flow(hb: &Heartbeat, source_alias: &str) -> bool {
    hb.target_alias == source_alias
}

/// Latency of a heartbeat written at `timestamp_ms` and seen at `seen_ms`; never negative
/// (a clock that stepped back).
pub fn latency_ms(timestamp_ms: i64, seen_ms: i64) -> i64 {
    seen_ms.saturating_sub(timestamp_ms).max(0)
}

/// Nearest-rank percentile `p` (0 < p ≤ 100) of `values`; `None` when empty.
pub fn percentile(values: &[i64], p: u32) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (u64::from(p.clamp(1, 100)) * v.len() as u64).div_ceil(100);
    let i = usize::try_from(rank).unwrap_or(v.len()).clamp(1, v.len()) - 1;
    Some(v[i])
}

/// What the reader knows: heartbeats written and not seen yet, and recent latencies.
///
/// The `(target, source)` heartbeats written into the source travel through this flow: the
/// time from a heartbeat's timestamp to when worker 0 reads its replica in the target's
/// `<sourceAlias><separator>heartbeats` (read_committed: what the target's consumers see) is
/// the flow's end-to-end latency, measured once a second even when no application record
/// flows. Emitter and reader are the same process, so no clock skew enters. A replica that
/// never arrives must not leave the last good value standing: while a heartbeat the source
/// acknowledged is still missing on the target, its age is the current latency when that is
/// larger ([`LatencyTracker::current`]), so a stalled flow shows a growing value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyTracker {
    /// Timestamps of heartbeats the source acknowledged, not seen on the target, ascending.
    pending: VecDeque<i64>,
    /// `(seen at, latency)` of the heartbeats seen within [`WINDOW_MS`].
    samples: VecDeque<(i64, i64)>,
    /// The latest latency measured and when.
    last: Option<(i64, i64)>,
}

impl LatencyTracker {
    /// The source acknowledged a heartbeat written at `timestamp_ms`.
    pub fn emitted(&mut self, timestamp_ms: i64) {
        if self.pending.len() < MAX_PENDING
            && self.pending.back().is_none_or(|b| *b <= timestamp_ms)
        {
            self.pending.push_back(timestamp_ms);
        }
    }

    /// A replica written at `timestamp_ms` was read at `seen_ms`: its latency (a sample).
    /// Every pending heartbeat up to it is settled (one partition keeps order; an earlier
    /// one that never shows was compacted away on the source).
    pub fn seen(&mut self, timestamp_ms: i64, seen_ms: i64) -> i64 {
        let l = latency_ms(timestamp_ms, seen_ms);
        while self.pending.front().is_some_and(|p| *p <= timestamp_ms) {
            self.pending.pop_front();
        }
        self.samples.push_back((seen_ms, l));
        self.prune(seen_ms);
        self.last = Some((seen_ms, l));
        l
    }

    /// Forget what is pending (paused flow: nothing is expected to arrive).
    pub fn forget_pending(&mut self) {
        self.pending.clear();
    }

    /// The current latency at `now_ms`: the latest measured, or the age of the oldest
    /// heartbeat still missing when that is larger; `None` before anything was measured or
    /// is missing.
    pub fn current(&self, now_ms: i64) -> Option<i64> {
        let missing = self.pending.front().map(|p| latency_ms(*p, now_ms));
        match (self.last.map(|(_, l)| l), missing) {
            (Some(l), Some(m)) => Some(l.max(m)),
            (l, m) => l.or(m),
        }
    }

    /// The 99th percentile of the latencies seen within [`WINDOW_MS`] before `now_ms`.
    pub fn p99(&self, now_ms: i64) -> Option<i64> {
        let recent: Vec<i64> = self
            .samples
            .iter()
            .filter(|(at, _)| now_ms.saturating_sub(*at) <= WINDOW_MS)
            .map(|(_, l)| *l)
            .collect();
        percentile(&recent, 99)
    }

    /// When the latest heartbeat was seen.
    pub fn last_seen(&self) -> Option<i64> {
        self.last.map(|(at, _)| at)
    }

    fn prune(&mut self, now_ms: i64) {
        while self
            .samples
            .front()
            .is_some_and(|(at, _)| now_ms.saturating_sub(*at) > WINDOW_MS)
        {
            self.samples.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        }))
        .unwrap()
    }

    #[test]
    fn placement_is_mm2s() {
        let [(c1, to_target), (c2, to_source)] = emissions(&spec(), 42);
        // The flow's own heartbeat connector: into the target, keyed (source, target).
        assert_eq!(c1, Cluster::Target);
        assert_eq!(
            (
                to_target.source_alias.as_str(),
                to_target.target_alias.as_str()
            ),
            ("dc1", "dc2")
        );
        // The reverse pair's: into the source, keyed (target, source); replicated by this flow.
        assert_eq!(c2, Cluster::Source);
        assert_eq!(
            (
                to_source.source_alias.as_str(),
                to_source.target_alias.as_str()
            ),
            ("dc2", "dc1")
        );
        assert_eq!((to_target.timestamp_ms, to_source.timestamp_ms), (42, 42));
        assert!(measures_flow(&to_source, "dc1"));
        assert!(!measures_flow(&to_target, "dc1"));
    }

    #[test]
    fn latency_table() {
        let cases = [
            (1_000, 1_250, 250),
            (1_000, 1_000, 0),
            // A clock that stepped back never yields a negative latency.
            (1_000, 900, 0),
            (i64::MIN, i64::MAX, i64::MAX),
        ];
        for (ts, seen, want) in cases {
            assert_eq!(latency_ms(ts, seen), want, "{ts} {seen}");
        }
    }

    #[test]
    fn percentile_table() {
        let hundred: Vec<i64> = (1..=100).collect();
        let cases: [(&[i64], u32, Option<i64>); 6] = [
            (&[], 99, None),
            (&[7], 99, Some(7)),
            (&[5, 1, 3], 50, Some(3)),
            (&hundred, 99, Some(99)),
            (&hundred, 100, Some(100)),
            (&[10, 10, 10, 10, 900], 99, Some(900)),
        ];
        for (values, p, want) in cases {
            assert_eq!(percentile(values, p), want, "{values:?} p{p}");
        }
    }

    #[test]
    fn tracker_table() {
        enum Step {
            Emit(i64),
            Seen(i64, i64),
            Forget,
        }
        use Step::*;
        /// (name, steps, now, current, p99)
        type Case = (&'static str, Vec<Step>, i64, Option<i64>, Option<i64>);
        let cases: Vec<Case> = vec![
            ("nothing yet", vec![], 10_000, None, None),
            (
                "emitted, not seen: its age",
                vec![Emit(1_000)],
                1_400,
                Some(400),
                None,
            ),
            (
                "seen: the latest latency",
                vec![Emit(1_000), Seen(1_000, 1_300)],
                1_500,
                Some(300),
                Some(300),
            ),
            (
                "a fresh pending one younger than the latest latency does not count",
                vec![Emit(1_000), Seen(1_000, 1_300), Emit(2_000)],
                2_100,
                Some(300),
                Some(300),
            ),
            (
                "stalled: the oldest missing heartbeat's age wins",
                vec![Emit(1_000), Seen(1_000, 1_300), Emit(2_000), Emit(3_000)],
                62_000,
                Some(60_000),
                Some(300),
            ),
            (
                "a later replica settles earlier ones (compacted on the source)",
                vec![Emit(1_000), Emit(2_000), Emit(3_000), Seen(3_000, 3_200)],
                9_000,
                Some(200),
                Some(200),
            ),
            (
                "paused: pending forgotten",
                vec![Emit(1_000), Seen(1_000, 1_100), Emit(2_000), Forget],
                90_000,
                Some(100),
                Some(100),
            ),
            (
                "p99 over the window only",
                vec![Seen(0, 50_000), Seen(400_000, 400_100)],
                400_200,
                Some(100),
                Some(100),
            ),
            (
                "p99 is the worst of few samples",
                vec![Seen(0, 100), Seen(1_000, 3_000), Seen(2_000, 2_100)],
                3_000,
                Some(100),
                Some(2_000),
            ),
            (
                "other emitters' heartbeats measure too (nothing pending of ours)",
                vec![Seen(5_000, 5_700)],
                6_000,
                Some(700),
                Some(700),
            ),
        ];
        for (name, steps, now, current, p99) in cases {
            let mut t = LatencyTracker::default();
            for s in steps {
                match s {
                    Emit(ts) => t.emitted(ts),
                    Seen(ts, at) => {
                        t.seen(ts, at);
                    }
                    Forget => t.forget_pending(),
                }
            }
            assert_eq!(t.current(now), current, "{name}: current");
            assert_eq!(t.p99(now), p99, "{name}: p99");
        }
    }

    #[test]
    fn pending_is_bounded_and_ordered() {
        let mut t = LatencyTracker::default();
        for i in 0..(MAX_PENDING as i64 + 10) {
            t.emitted(i);
        }
        t.emitted(-5); // out of order: ignored
        assert_eq!(t.pending.len(), MAX_PENDING);
        assert_eq!(t.current(10_000), Some(10_000));
    }
}
