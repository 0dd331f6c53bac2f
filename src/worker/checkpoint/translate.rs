//! Offset translation: the safety-critical core of checkpoints and group offset sync. A
//! consumer group that committed source offset `o` must, after failover, resume on the target
//! at a position that **never skips** a replicated record with source offset `≥ o` and **never
//! lies past the target's end** (negative lag), and that re-reads nothing whenever the offset
//! syncs prove it. What the syncs promise: [`Contract`]; why every answer is safe: [`translate`].

use crate::kafka::wire::{self, SyncSequence};

/// Hard bound on retained syncs per partition (MM2 keeps 64 too).
pub const MAX_SYNCS_PER_PARTITION: usize = 64;

/// One offset sync: source offset `upstream` was written at target offset `downstream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SyncPoint {
    /// Source offset.
    pub upstream: i64,
    /// Target offset of the copy.
    pub downstream: i64,
}

impl SyncPoint {
    /// Shorthand constructor.
    pub fn new(upstream: i64, downstream: i64) -> Self {
        Self {
            upstream,
            downstream,
        }
    }
}

impl From<&wire::OffsetSync> for SyncPoint {
    fn from(s: &wire::OffsetSync) -> Self {
        Self::new(s.upstream_offset, s.downstream_offset)
    }
}

/// Which guarantees the syncs of a partition come with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    /// mirrorflow's writer contract: spans between consecutive syncs are known, so
    /// translation may interpolate.
    ///
    /// mirrorflow's replication engine emits an offset sync `(u, d)` — source offset `u` was
    /// written at target offset `d` — for:
    /// - (a) the first record it replicates in a partition (after every start or restart);
    /// - (b) every record that follows a discontinuity on EITHER side: `u − u_prev ≠ 1`
    ///   (transaction markers, compaction, filtered records) or `d − d_prev ≠ 1` (markers of
    ///   the target transactions, anything else taking target offsets);
    /// - (c) the last record before such a discontinuity, emitted once the gap is seen and
    ///   before the sync of (b);
    /// - (d) at least every `lag_max` records;
    /// - (e) the last replicated record of a partition whenever it flushes/commits.
    ///
    /// On restart it resumes from a committed position no later than what it replicated, and
    /// records it wrote after its last delivered sync do not stay visible (with transactions
    /// the abort hides them; a graceful stop flushes (e) first). Without that, after a crash a
    /// group offset between the last sync and the crash point can, until re-replication passes
    /// it, translate past the only visible copy of those records.
    ///
    /// It writes each partition in source order (downstream order follows upstream order), and
    /// tags every sync with a [`SyncSequence`] (writer run + counter) so a reader can tell
    /// whether two syncs it sees were *consecutive when emitted*. Compaction of the syncs topic
    /// and writer restarts break that chain; the history then records [`Link::Unknown`].
    ///
    /// Consequence, for two consecutive syncs `s1 = (u1, d1)`, `s2 = (u2, d2)`:
    /// - no discontinuity lies between them: every source offset in `[u1, u2]` is a replicated
    ///   record at `d1 + (o − u1)` ([`Span::Linear`], `u2 − u1 == d2 − d1`); or
    /// - exactly one does: `s1` is the last record before it and `s2` the first after, so they
    ///   are consecutive replicated records and nothing replicated lies in `(d1, d2)`
    ///   ([`Span::Gap`]). A group at `o ∈ (u1, u2)` consumed through `s1`, so `d1 + 1` is exact.
    ///   (A gap whose sides happen to have equal length is classified `Linear`; interpolation
    ///   then lands strictly inside `(d1, d2)`, where no records lie, so it is still exact.)
    Mirrorflow,
    /// MM2 or unknown writer: only MM2's rule (Kafka PR 13178): `o == u → d`, `o > u → d + 1`,
    /// no sync `≤ o` → no translation.
    Mm2,
}

/// How an inserted sync relates to the previously inserted one, as the writer emitted them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// The writer emitted it right after the previous one (same run, next sequence number).
    Consecutive,
    /// Unknown: different writer run, a sync lost to compaction, MM2, or first sync.
    Unknown,
}

/// What lies between a retained sync and its retained predecessor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// Every source offset in between is a record at `d_prev + (o − u_prev)`.
    Linear,
    /// The two syncs are consecutive replicated records across one discontinuity.
    Gap,
    /// Nothing known (unknown link, or syncs in between were dropped).
    Unknown,
}

/// What [`SyncHistory::insert`] did with a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Added after the newest retained sync.
    Appended,
    /// Identical to the newest sync; nothing changed.
    Duplicate,
    /// Upstream did not advance (`u ≤ u_newest`): the source was reset or the writer
    /// re-replicated. Retained syncs not strictly below it on both sides were discarded.
    UpstreamRewound {
        /// Syncs discarded.
        discarded: usize,
    },
    /// Upstream advanced but downstream did not (`d ≤ d_newest`): the target was truncated or
    /// recreated. Retained syncs with downstream `≥ d` were discarded.
    DownstreamRewound {
        /// Syncs discarded.
        discarded: usize,
    },
    /// A negative offset; ignored, and the sequence chain is broken.
    Rejected,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    sync: SyncPoint,
    /// Span from the previous retained entry (meaningless for the first).
    from_prev: Span,
}

/// An upstream rewind whose re-replication has not yet passed the old frontier.
///
/// When a writer restarts and re-replicates from `resume`, records above `resume` that it
/// had already copied have their first copies *below* the new syncs. Until the new run's
/// syncs reach `frontier` (the newest upstream offset synced before the rewind), `d + 1`
/// of a new sync could skip those first copies, so group offsets `≥ resume` translate only
/// to `d + 1` of the last sync below `resume` (or not at all). MM2 has no such guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingRewind {
    /// Lowest upstream offset a rewind restarted from.
    pub resume: i64,
    /// Upstream offset the new run must sync to before translation above `resume` resumes.
    pub frontier: i64,
}

/// Bounded, per-partition history of offset syncs, strictly increasing in both upstream
/// and downstream offsets.
///
/// Insertion rule: a sync `s` discards every retained entry `e` with `e.u ≥ s.u` or
/// `e.d ≥ s.d` (a suffix, since both sides increase), then is appended.
/// - Upstream rewind (`s.u ≤ u_newest`): entries at or above the new upstream offset go;
///   older entries stay (they are still true copies and safe answers for older group
///   offsets; MM2 instead clears everything), and a [`PendingRewind`] guards offsets
///   `≥ s.u` until re-replication passes the old newest sync. A rewind is treated as the
///   writer re-replicating; on a *known* source topic reset (new topic id, applied reset)
///   the caller should [`clear`] first, since the old copies belong to another topic.
/// - Downstream rewind (`s.d ≤ d_newest`, target truncated or recreated): entries pointing
///   at or past the new downstream offset go; older ones can only point lower, so stay safe.
///
/// Bound: at most [`MAX_SYNCS_PER_PARTITION`] entries. When full, interior entries between
/// two `Linear` spans are merged away first (lossless: the union is linear); if still full,
/// one interior entry is dropped where the resulting spacing is smallest relative to its
/// distance from the newest sync, giving spacing that grows with age (dense near the
/// newest, sparse for old offsets). The oldest and newest entries are never dropped, so old
/// group offsets keep translating (safely, to `d + 1` of a nearby older sync).
///
/// [`clear`]: SyncHistory::clear
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncHistory {
    entries: Vec<Entry>,
    capacity: usize,
    /// Sequence of the last inserted sync, when it is the newest entry.
    last_sequence: Option<SyncSequence>,
    /// False after a rejected sync: the next `Link::Consecutive` would describe a sync we
    /// never retained.
    chain_intact: bool,
    rewind: Option<PendingRewind>,
}

impl Default for SyncHistory {
    fn default() -> Self {
        Self::new()
    }
}

impl SyncHistory {
    /// Empty history bounded at [`MAX_SYNCS_PER_PARTITION`].
    pub fn new() -> Self {
        Self::with_capacity(MAX_SYNCS_PER_PARTITION)
    }

    /// Empty history with a smaller bound (clamped to `2..=MAX_SYNCS_PER_PARTITION`); for
    /// tests and memory-tight deployments.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.clamp(2, MAX_SYNCS_PER_PARTITION);
        Self {
            entries: Vec::with_capacity(capacity + 1),
            capacity,
            last_sequence: None,
            chain_intact: false,
            rewind: None,
        }
    }

    /// Number of retained syncs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no sync is retained.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bound on retained syncs.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Newest retained sync.
    pub fn newest(&self) -> Option<SyncPoint> {
        self.entries.last().map(|e| e.sync)
    }

    /// Oldest retained sync.
    pub fn oldest(&self) -> Option<SyncPoint> {
        self.entries.first().map(|e| e.sync)
    }

    /// Retained syncs, oldest first, each with the span from its predecessor (the first
    /// one's span is always `Unknown`).
    pub fn entries(&self) -> impl Iterator<Item = (SyncPoint, Span)> + '_ {
        self.entries.iter().map(|e| (e.sync, e.from_prev))
    }

    /// Upstream rewind still being re-replicated, if any (see [`PendingRewind`]).
    pub fn pending_rewind(&self) -> Option<PendingRewind> {
        self.rewind
    }

    /// Forgets everything, e.g. after a known reset of the source topic.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.last_sequence = None;
        self.chain_intact = false;
        self.rewind = None;
    }

    /// Inserts a sync carrying the writer's [`SyncSequence`] (or none, for MM2 syncs); the
    /// link to the previous sync is derived from the sequence numbers.
    pub fn insert_sequenced(
        &mut self,
        sync: SyncPoint,
        sequence: Option<SyncSequence>,
    ) -> InsertOutcome {
        let link = match (self.last_sequence, sequence) {
            (Some(prev), Some(next)) if prev.is_followed_by(&next) => Link::Consecutive,
            _ => Link::Unknown,
        };
        let outcome = self.insert(sync, link);
        if outcome != InsertOutcome::Rejected {
            self.last_sequence = sequence;
        }
        outcome
    }

    /// Inserts a sync in arrival order. See the type docs for the rules.
    pub fn insert(&mut self, sync: SyncPoint, link: Link) -> InsertOutcome {
        // Only `insert_sequenced` knows the sequence; it sets this again afterwards.
        self.last_sequence = None;
        if sync.upstream < 0 || sync.downstream < 0 {
            self.chain_intact = false;
            return InsertOutcome::Rejected;
        }
        let prev_newest = self.newest();
        let chain_intact = std::mem::replace(&mut self.chain_intact, true);
        if prev_newest == Some(sync) {
            return InsertOutcome::Duplicate;
        }
        let keep = self.entries.partition_point(|e| {
            e.sync.upstream < sync.upstream && e.sync.downstream < sync.downstream
        });
        let discarded = self.entries.len() - keep;
        self.entries.truncate(keep);
        // The link describes the previously inserted sync; it only tells us something if
        // that sync is still our predecessor.
        let from_prev = match (self.entries.last(), link) {
            (Some(prev), Link::Consecutive) if discarded == 0 && chain_intact => {
                if sync.upstream - prev.sync.upstream == sync.downstream - prev.sync.downstream {
                    Span::Linear
                } else {
                    Span::Gap
                }
            }
            _ => Span::Unknown,
        };
        self.entries.push(Entry { sync, from_prev });
        self.enforce_bound();
        if let Some(p) = prev_newest.filter(|p| sync.upstream <= p.upstream) {
            self.rewind = Some(match self.rewind {
                Some(r) => PendingRewind {
                    resume: r.resume.min(sync.upstream),
                    frontier: r.frontier.max(p.upstream),
                },
                None => PendingRewind {
                    resume: sync.upstream,
                    frontier: p.upstream,
                },
            });
        }
        if self.rewind.is_some_and(|r| sync.upstream >= r.frontier) {
            self.rewind = None;
        }
        match prev_newest {
            Some(p) if sync.upstream <= p.upstream => InsertOutcome::UpstreamRewound { discarded },
            Some(_) if discarded > 0 => InsertOutcome::DownstreamRewound { discarded },
            _ => InsertOutcome::Appended,
        }
    }

    fn enforce_bound(&mut self) {
        if self.entries.len() <= self.capacity {
            return;
        }
        // Lossless first: an interior entry between two linear spans adds nothing.
        let n = self.entries.len();
        let mut w = 1;
        for r in 1..n {
            let redundant = r + 1 < n
                && self.entries[r].from_prev == Span::Linear
                && self.entries[r + 1].from_prev == Span::Linear;
            if !redundant {
                // w ≤ r, so entries[r + 1] is still unread when checked next round.
                self.entries[w] = self.entries[r];
                w += 1;
            }
        }
        self.entries.truncate(w);
        while self.entries.len() > self.capacity {
            let victim = self.eviction_victim();
            self.entries.remove(victim);
            self.entries[victim].from_prev = Span::Unknown;
        }
    }

    /// Interior entry whose removal leaves the smallest gap relative to the distance of that
    /// gap from the newest sync; ties go to the older entry.
    fn eviction_victim(&self) -> usize {
        let e = &self.entries;
        let newest = i128::from(e[e.len() - 1].sync.upstream);
        let score = |i: usize| {
            let left = i128::from(e[i - 1].sync.upstream);
            let gap = i128::from(e[i + 1].sync.upstream) - left;
            (gap, newest - left)
        };
        let mut best = 1;
        let (mut best_gap, mut best_age) = score(1);
        for i in 2..e.len() - 1 {
            let (gap, age) = score(i);
            // gap / age < best_gap / best_age, without division (ages are positive).
            if gap * best_age < best_gap * age {
                best = i;
                best_gap = gap;
                best_age = age;
            }
        }
        best
    }
}

/// Why no translation exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSyncReason {
    /// No sync retained for the partition.
    Empty,
    /// Every retained sync lies above the group's offset.
    BeforeOldest,
    /// The offset lies in a range being re-replicated after an upstream rewind, and no
    /// sync below that range is retained ([`PendingRewind`]).
    ReReplicating,
}

/// Result of translating a group's source offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translation {
    /// Re-reads nothing, with respect to the syncs seen so far ([`translate`]).
    Exact {
        /// Target offset to commit.
        downstream: i64,
        /// Sync the answer is based on.
        sync: SyncPoint,
    },
    /// Fallback `d + 1`: never skips, may re-read records up to the next retained sync.
    Safe {
        /// Target offset to commit.
        downstream: i64,
        /// Sync the answer is based on.
        sync: SyncPoint,
    },
    /// Lowered to the target's end offset by [`clamp_to_target_end`].
    Clamped {
        /// Target offset to commit (the end offset).
        downstream: i64,
        /// What translation produced before clamping.
        translated: i64,
        /// Sync the answer is based on.
        sync: SyncPoint,
    },
    /// No sync at or below the group's offset: do not guess.
    NoSync {
        /// Why.
        reason: NoSyncReason,
    },
}

impl Translation {
    /// Target offset to commit, if any.
    pub fn downstream(&self) -> Option<i64> {
        match *self {
            Translation::Exact { downstream, .. }
            | Translation::Safe { downstream, .. }
            | Translation::Clamped { downstream, .. } => Some(downstream),
            Translation::NoSync { .. } => None,
        }
    }

    /// Sync the answer is based on, if any.
    pub fn sync(&self) -> Option<SyncPoint> {
        match *self {
            Translation::Exact { sync, .. }
            | Translation::Safe { sync, .. }
            | Translation::Clamped { sync, .. } => Some(sync),
            Translation::NoSync { .. } => None,
        }
    }

    /// Stable label for metrics: `exact`, `safe`, `clamped`, `no_sync`.
    pub fn kind(&self) -> &'static str {
        match self {
            Translation::Exact { .. } => "exact",
            Translation::Safe { .. } => "safe",
            Translation::Clamped { .. } => "clamped",
            Translation::NoSync { .. } => "no_sync",
        }
    }
}

/// Translates a group's committed source offset to a target offset.
///
/// Every result is `d` of a retained sync `s ≤ o`, `d + 1`, or a linear interpolation inside
/// a span proven linear. Records with source offset `≥ o > u` were written after `s`, so they
/// sit at `≥ d + 1`; interpolation is exact by the contract; nothing extrapolates past the
/// newest sync. Hence no record is skipped and no answer exceeds `d_newest + 1 ≤ end`
/// (use [`clamp_to_target_end`] against a target that was truncated or an end read earlier).
///
/// "Exact" means: with respect to the syncs seen so far, the position re-reads nothing
/// (no record with source offset `< o` lies at or after it). `Safe` may re-read, at most
/// up to the next retained sync.
///
/// Rules, with `s = (u, d)` the newest retained sync with `u ≤ o`:
/// - `o == u` → `Exact d`.
/// - `Mm2`: `o > u` → `Safe d + 1`.
/// - `Mirrorflow`, span from `s` to the next retained sync `Linear` → `Exact d + (o − u)`;
///   `Gap` → `Exact d + 1`; otherwise (unknown, or `s` is the newest) `d + 1`, `Exact` if
///   `o == u + 1` (the group consumed exactly through `s`), else `Safe`.
/// - no such sync → `NoSync`.
///
/// While a [`PendingRewind`] is active, offsets `≥ resume` get `Safe d + 1` of the last
/// sync below `resume`, or `NoSync` if there is none — in both contracts.
pub fn translate(history: &SyncHistory, group_offset: i64, contract: Contract) -> Translation {
    let e = &history.entries;
    if e.is_empty() {
        return Translation::NoSync {
            reason: NoSyncReason::Empty,
        };
    }
    if let Some(r) = history.rewind.filter(|r| group_offset >= r.resume) {
        let below = e.partition_point(|x| x.sync.upstream < r.resume);
        return match below.checked_sub(1).map(|i| e[i].sync) {
            // Every copy of a record above `sync` was written after it.
            Some(sync) => Translation::Safe {
                downstream: sync.downstream.saturating_add(1),
                sync,
            },
            None => Translation::NoSync {
                reason: NoSyncReason::ReReplicating,
            },
        };
    }
    let idx = e.partition_point(|x| x.sync.upstream <= group_offset);
    if idx == 0 {
        return Translation::NoSync {
            reason: NoSyncReason::BeforeOldest,
        };
    }
    let sync = e[idx - 1].sync;
    let o = group_offset;
    let next = sync.downstream.saturating_add(1);
    if o == sync.upstream {
        return Translation::Exact {
            downstream: sync.downstream,
            sync,
        };
    }
    match contract {
        Contract::Mm2 => Translation::Safe {
            downstream: next,
            sync,
        },
        Contract::Mirrorflow => match e.get(idx).map(|n| n.from_prev) {
            // o < next entry's upstream, so the result stays below its downstream.
            Some(Span::Linear) => Translation::Exact {
                downstream: sync.downstream + (o - sync.upstream),
                sync,
            },
            Some(Span::Gap) => Translation::Exact {
                downstream: next,
                sync,
            },
            _ if o == sync.upstream + 1 => Translation::Exact {
                downstream: next,
                sync,
            },
            _ => Translation::Safe {
                downstream: next,
                sync,
            },
        },
    }
}

/// Never point past the target's end (negative lag): a translation above
/// `target_end_offset` (the partition's high watermark; negative treated as 0) becomes
/// `Clamped` at the end. Lowering never skips a record.
pub fn clamp_to_target_end(translated: Translation, target_end_offset: i64) -> Translation {
    let end = target_end_offset.max(0);
    match translated {
        Translation::Exact { downstream, sync } | Translation::Safe { downstream, sync }
            if downstream > end =>
        {
            Translation::Clamped {
                downstream: end,
                translated: downstream,
                sync,
            }
        }
        Translation::Clamped {
            downstream,
            translated,
            sync,
        } if downstream > end => Translation::Clamped {
            downstream: end,
            translated,
            sync,
        },
        other => other,
    }
}

/// Last checkpoint emitted for one (group, target topic, partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointState {
    /// Group's source offset in that checkpoint.
    pub upstream: i64,
    /// Translated target offset in that checkpoint.
    pub downstream: i64,
}

impl From<&wire::Checkpoint> for CheckpointState {
    fn from(c: &wire::Checkpoint) -> Self {
        Self {
            upstream: c.upstream_offset,
            downstream: c.downstream_offset,
        }
    }
}

/// Key of a checkpoint record: group, *target* topic, partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckpointKey {
    /// Consumer group id.
    pub group: String,
    /// Target topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

impl From<&wire::Checkpoint> for CheckpointKey {
    fn from(c: &wire::Checkpoint) -> Self {
        Self {
            group: c.group.clone(),
            topic: c.topic.clone(),
            partition: c.partition,
        }
    }
}

/// [`CheckpointKey`] borrowed: looks up an [`InForce`] map without building the key.
#[derive(Debug, Clone, Copy, Hash)]
pub struct CheckpointKeyRef<'a> {
    /// Consumer group id.
    pub group: &'a str,
    /// Target topic name.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
}

impl hashbrown::Equivalent<CheckpointKey> for CheckpointKeyRef<'_> {
    fn equivalent(&self, key: &CheckpointKey) -> bool {
        self.partition == key.partition && self.topic == key.topic && self.group == key.group
    }
}

/// A (topic, partition) key borrowed: looks up a [`PartitionMap`] without building the key.
#[derive(Debug, Clone, Copy, Hash)]
pub struct PartitionRef<'a>(pub &'a str, pub i32);

impl hashbrown::Equivalent<(String, i32)> for PartitionRef<'_> {
    fn equivalent(&self, key: &(String, i32)) -> bool {
        self.1 == key.1 && self.0 == key.0
    }
}

// Both ref types hash as their owned keys do (`&str` hashes as `String`, fields in the same
// order): `lookups_by_reference_find_owned_keys` checks it.

/// Checkpoints in force, looked up with [`CheckpointKeyRef`].
pub type InForce = hashbrown::HashMap<CheckpointKey, CheckpointState>;

/// Values by (topic, partition), looked up with [`PartitionRef`].
pub type PartitionMap<V> = hashbrown::HashMap<(String, i32), V>;

/// Rebuilds checkpoint state after a restart from checkpoint records read in topic order
/// (the last record per key wins, as compaction would keep it), so monotonicity holds
/// across restarts.
pub fn reload_checkpoints<I>(records: I) -> InForce
where
    I: IntoIterator<Item = wire::Checkpoint>,
{
    records
        .into_iter()
        .map(|c| (CheckpointKey::from(&c), CheckpointState::from(&c)))
        .collect()
}

/// Why a checkpoint is emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitReason {
    /// No earlier checkpoint for the partition.
    First,
    /// The group's source offset went backwards (reset); lowering downstream is allowed.
    UpstreamRewound,
    /// The translated target offset advanced.
    DownstreamAdvanced,
}

/// Why a checkpoint is not emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// The translated target offset is unchanged.
    NotAdvanced,
    /// It would lower the target offset without an upstream rewind (e.g. a coarser sync
    /// after eviction or restart).
    WouldLowerDownstream,
}

/// Whether to emit a checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointDecision {
    /// Write it.
    Emit(EmitReason),
    /// Keep the previous one.
    Skip(SkipReason),
}

/// Checkpoint monotonicity: emit when first for the partition, when the upstream offset
/// rewound, or when the downstream offset advanced; never lower the downstream offset
/// unless the upstream rewound. `next` is `(upstream, downstream)`.
pub fn decide_checkpoint(prev: Option<&CheckpointState>, next: (i64, i64)) -> CheckpointDecision {
    let (upstream, downstream) = next;
    match prev {
        None => CheckpointDecision::Emit(EmitReason::First),
        Some(p) if upstream < p.upstream => CheckpointDecision::Emit(EmitReason::UpstreamRewound),
        Some(p) if downstream > p.downstream => {
            CheckpointDecision::Emit(EmitReason::DownstreamAdvanced)
        }
        Some(p) if downstream == p.downstream => CheckpointDecision::Skip(SkipReason::NotAdvanced),
        Some(_) => CheckpointDecision::Skip(SkipReason::WouldLowerDownstream),
    }
}

/// What the target cluster says about a consumer group, for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetGroupState {
    /// The group exists on the target.
    pub exists: bool,
    /// Members currently in the group.
    pub active_members: u32,
    /// Committed offset for the partition, if any.
    pub committed: Option<i64>,
}

/// Whether to commit a translated offset to the target group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSyncDecision {
    /// Commit this offset.
    Commit(i64),
    /// The group has active members; the broker would refuse, and they own the offset.
    SkipActiveMembers,
    /// The target's committed offset is already at or past it (never move backwards), or
    /// the translation is negative.
    SkipNotAhead,
}

/// Group offset sync: commit only if the target group is absent or has no active members,
/// and only if that moves its committed offset forward.
pub fn decide_group_sync(target: &TargetGroupState, translated: i64) -> GroupSyncDecision {
    if target.exists && target.active_members > 0 {
        return GroupSyncDecision::SkipActiveMembers;
    }
    if translated < 0 || target.committed.is_some_and(|c| translated <= c) {
        return GroupSyncDecision::SkipNotAhead;
    }
    GroupSyncDecision::Commit(translated)
}

#[cfg(test)]
mod tests;
