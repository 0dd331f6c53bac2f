//! The partition table: one entry per source partition this worker owns or has parked, and
//! every transition of it. Pure: the engine applies what the table answers (the consumer's
//! assignment, what to persist) and supplies the clock-based sync epochs.
//!
//! A parked partition's source topic disappeared (deleted or deselected); it keeps its
//! position, baseline and failure in case the topic comes back, and is not owned meanwhile.

use super::batch::{BatchPartition, PartitionOutcome};
use super::status::{FailureKind, PartitionFailed, PartitionState};
use super::syncs::SyncEmitter;
use crate::api::{StartFrom, TopicPartitionRef};
use crate::kafka::wire::Progress;
use crate::worker::validation::classify::{KnownPartition, PartitionObservation};

/// One source partition.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Where its records go.
    pub target_topic: String,
    /// Replicating, paused, failed, or waiting for a position.
    pub state: PartitionState,
    /// Next source offset to replicate, as committed (or about to be, see
    /// [`PartitionTable::mark_pending`]).
    pub position: Option<i64>,
    /// Next offset expected from the consumer (drops stale records after a re-assign).
    pub fetched: Option<i64>,
    /// Offset syncs of this partition.
    pub emitter: SyncEmitter,
    /// Watermarks at the last lookup (lag, status).
    pub low: Option<i64>,
    pub high: Option<i64>,
    /// Source timestamp → target acknowledgement of the last replicated record.
    pub lag_seconds: Option<f64>,
    /// Source topic id recorded for this partition (persisted in its progress); empty if
    /// unknown.
    pub topic_id: String,
    /// Last reset applied to it (persisted in its progress); empty if none.
    pub reset_id: String,
    /// Highest log start and high watermark seen through ListOffsets since the position was
    /// taken or reset (offset validation baseline; never from fetch responses).
    pub max_log_start: Option<i64>,
    pub max_high_watermark: Option<i64>,
    /// A record of this partition arrived since the last periodic check.
    pub fetched_since_check: bool,
    /// Send one record per produce request (after a size refusal of a whole batch).
    pub careful: bool,
    /// Bumped by every transition that makes evidence gathered about the partition before it
    /// worthless (parked, failed, reset): a refresh planned against an older version is not
    /// applied to it. Taking or starting it does not bump it: only a refresh does that.
    pub version: u64,
    /// A record was refused outright in a batch not finished yet: later records are not taken
    /// (they would land past the refused one) until the consumer is re-assigned.
    halted: bool,
    /// The target rejected the record at `offset` of this failure while the committed
    /// position was still before it (its batch was retried or its transaction aborted): the
    /// records before it are replicated again, none from it on is taken, and the partition
    /// fails once its position reaches it ([`PartitionTable::fail_at`]).
    stop_at: Option<PartitionFailed>,
    /// The position (or topic id) is not persisted yet.
    pending: bool,
    parked: bool,
}

impl Partition {
    fn new(target_topic: String, epoch: i64) -> Self {
        Self {
            target_topic,
            state: PartitionState::Starting,
            position: None,
            fetched: None,
            emitter: SyncEmitter::new(epoch),
            low: None,
            high: None,
            lag_seconds: None,
            topic_id: String::new(),
            reset_id: String::new(),
            max_log_start: None,
            max_high_watermark: None,
            fetched_since_check: false,
            careful: false,
            version: 0,
            halted: false,
            stop_at: None,
            pending: false,
            parked: false,
        }
    }

    /// What validation knows about this partition at `position`.
    pub fn known(&self, tp: &TopicPartitionRef, position: i64) -> KnownPartition {
        KnownPartition {
            tp: tp.clone(),
            position,
            topic_id: (!self.topic_id.is_empty()).then(|| self.topic_id.clone()),
            high_watermark: self.max_high_watermark,
            log_start: self.max_log_start,
        }
    }

    /// Folds in a healthy observation made at `position`; true if the topic id was learned
    /// just now (persist it).
    pub fn record(
        &mut self,
        tp: &TopicPartitionRef,
        position: i64,
        now: &PartitionObservation,
    ) -> bool {
        let mut k = self.known(tp, position);
        k.record(now);
        self.max_log_start = k.log_start;
        self.max_high_watermark = k.high_watermark;
        let id = k.topic_id.unwrap_or_default();
        let learned = id != self.topic_id;
        self.topic_id = id;
        learned
    }

    /// Whether records of it are being replicated.
    pub fn replicating(&self) -> bool {
        matches!(self.state, PartitionState::Replicating)
    }

    /// Its progress record at `position` (with its failure, if it is stopped, or stops at
    /// `position`: a commit that reaches a rejected record persists the failure with it).
    pub fn progress(&self, tp: &TopicPartitionRef, position: i64) -> Progress {
        Progress {
            topic: tp.topic.clone(),
            partition: tp.partition,
            next_offset: position,
            topic_id: self.topic_id.clone(),
            reset_id: self.reset_id.clone(),
            failure: match (&self.state, &self.stop_at) {
                (PartitionState::Failed(f), _) => persisted_failure(f),
                (_, Some(f)) if f.offset <= position => persisted_failure(f),
                _ => String::new(),
            },
        }
    }

    /// The offset from which no record of it may be taken (a rejected record not yet reached).
    pub fn stops_at(&self) -> Option<i64> {
        self.stop_at.as_ref().map(|f| f.offset)
    }

    fn resume_state(&self, paused: bool) -> PartitionState {
        match (self.position, paused) {
            (None, _) => PartitionState::Starting,
            (Some(_), true) => PartitionState::Paused,
            (Some(_), false) => PartitionState::Replicating,
        }
    }
}

/// Longest failure text persisted (a Kafka STRING holds 32,767 bytes; progress stays small).
const MAX_PERSISTED_FAILURE: usize = 8 * 1024;

/// A failure as its progress record carries it (JSON), its message shortened if needed.
/// Every failure with a status entry persists (DataLoss, TopicReset, ProgressMissing, and a
/// record the target rejected): a restart keeps the partition stopped until a reset clears
/// it (`RetryRecord` once the target topic is fixed, or `SkipRecord`).
pub fn persisted_failure(f: &PartitionFailed) -> String {
    if f.failure.is_none() {
        return String::new();
    }
    let text = serde_json::to_string(f).unwrap_or_default();
    if text.len() <= MAX_PERSISTED_FAILURE {
        return text;
    }
    let mut short = f.clone();
    short.message = short.message.chars().take(1024).collect();
    if let Some(pf) = &mut short.failure {
        pf.message = pf.message.as_ref().map(|m| m.chars().take(1024).collect());
    }
    serde_json::to_string(&short).unwrap_or_default()
}

/// The failure a progress record carried; one this build cannot read still stops the
/// partition, saying so.
pub fn restored_failure(text: &str) -> PartitionFailed {
    serde_json::from_str(text).unwrap_or_else(|e| PartitionFailed {
        kind: FailureKind::RecordRejected,
        offset: -1,
        message: format!(
            "the partition was stopped before the worker restarted, but its recorded failure \
             cannot be read ({e}): {text}. It stays stopped; patch spec.reset to clear it"
        ),
        failure: None,
    })
}

/// Where a partition without a position starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Resume from the progress it persisted (with its topic id and reset id).
    Resume(Progress),
    /// No progress: at this offset of the source log (then persisted).
    Fresh(i64),
    /// No progress: where MirrorMaker 2 left off, after the last offset it copied (then
    /// persisted).
    MirrorMaker2(i64),
    /// No progress: failing back, at the end offset this source had when the reverse flow's
    /// failover was done (then persisted).
    AfterFailover(i64),
}

impl Start {
    /// The position it starts at.
    pub fn position(&self) -> i64 {
        match self {
            Start::Resume(p) => p.next_offset,
            Start::Fresh(o) | Start::MirrorMaker2(o) | Start::AfterFailover(o) => *o,
        }
    }
}

/// Where a partition without a position starts: its stored progress, else an external
/// position (`external`: where MirrorMaker 2 left it, or where a failover left this source,
/// per `spec.source.startFrom`), else per
/// `startFrom` at the log start or end of `marks` (`(log start, high watermark)`).
/// `startFrom` applies only to what exists at the worker's first refresh: a partition that
/// appears later starts at its beginning (nothing written to it may be skipped). `None`
/// without marks: retried later.
pub fn start_position(
    stored: Option<&Progress>,
    external: Option<Start>,
    marks: Option<(i64, i64)>,
    start_from: StartFrom,
    first_refresh: bool,
) -> Option<Start> {
    if let Some(p) = stored {
        return Some(Start::Resume(p.clone()));
    }
    if let Some(start) = external {
        return Some(start);
    }
    let (low, high) = marks?;
    Some(Start::Fresh(
        if start_from == StartFrom::Latest && first_refresh {
            high
        } else {
            low
        },
    ))
}

/// What taking an owned partition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// It was owned already.
    Known,
    /// It was new: an entry waiting for a position.
    New,
    /// It was parked and is back with its own position, baseline and failure.
    Back,
}

/// The entries in key order, found by binary search (never removed: a partition is parked
/// instead). Boxed, so an entry inserted before others moves pointers, not entries.
#[derive(Debug, Default, Clone)]
struct Entries(Vec<(TopicPartitionRef, Box<Partition>)>);

impl Entries {
    fn find(&self, topic: &str, partition: i32) -> Result<usize, usize> {
        // The order of `TopicPartitionRef`: topic, then partition.
        self.0
            .binary_search_by(|(k, _)| (k.topic.as_str(), k.partition).cmp(&(topic, partition)))
    }

    fn get(&self, tp: &TopicPartitionRef) -> Option<&Partition> {
        let i = self.find(&tp.topic, tp.partition).ok()?;
        Some(&self.0[i].1)
    }

    fn get_mut(&mut self, tp: &TopicPartitionRef) -> Option<&mut Partition> {
        let i = self.find(&tp.topic, tp.partition).ok()?;
        Some(&mut self.0[i].1)
    }

    /// Adds `tp` (not present).
    fn insert(&mut self, tp: TopicPartitionRef, p: Partition) {
        match self.find(&tp.topic, tp.partition) {
            Ok(i) => *self.0[i].1 = p,
            Err(i) => self.0.insert(i, (tp, Box::new(p))),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&TopicPartitionRef, &Partition)> {
        self.0.iter().map(|(k, p)| (k, &**p))
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = (&TopicPartitionRef, &mut Partition)> {
        self.0.iter_mut().map(|(k, p)| (&*k, &mut **p))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Partition> {
        self.0.iter_mut().map(|(_, p)| &mut **p)
    }
}

/// The partitions of one worker.
#[derive(Debug, Default, Clone)]
pub struct PartitionTable {
    entries: Entries,
    /// Index in `entries` of the partition of the last consumed record: records come in runs
    /// per partition, and a search per record compared topic names about four times (2 % of
    /// the engine thread at 100 B records, perf). Checked before use: never stale.
    last: Option<usize>,
    /// Owned partitions with a pending position.
    pending: usize,
    /// A handled reset id to persist (the worker's marker record in the progress topic).
    pending_marker: Option<String>,
    /// Whether a refresh was applied (then `startFrom: Latest` no longer applies).
    refreshed_once: bool,
}

impl PartitionTable {
    /// Owned partitions (not parked), in key order.
    pub fn owned(&self) -> impl Iterator<Item = (&TopicPartitionRef, &Partition)> {
        self.entries.iter().filter(|(_, p)| !p.parked)
    }

    /// Owned partitions, mutably.
    pub fn owned_mut(&mut self) -> impl Iterator<Item = (&TopicPartitionRef, &mut Partition)> {
        self.entries.iter_mut().filter(|(_, p)| !p.parked)
    }

    /// Every entry, parked ones included: `(key, entry, parked)`.
    pub fn entries(&self) -> impl Iterator<Item = (&TopicPartitionRef, &Partition, bool)> {
        self.entries.iter().map(|(tp, p)| (tp, p, p.parked))
    }

    /// Every entry mutably, parked ones included: `(key, entry, parked)`.
    pub fn entries_mut(
        &mut self,
    ) -> impl Iterator<Item = (&TopicPartitionRef, &mut Partition, bool)> {
        self.entries.iter_mut().map(|(tp, p)| {
            let parked = p.parked;
            (tp, p, parked)
        })
    }

    /// An owned partition.
    pub fn get(&self, tp: &TopicPartitionRef) -> Option<&Partition> {
        self.entries.get(tp).filter(|p| !p.parked)
    }

    /// An owned partition, mutably.
    pub fn get_mut(&mut self, tp: &TopicPartitionRef) -> Option<&mut Partition> {
        self.entries.get_mut(tp).filter(|p| !p.parked)
    }

    /// Number of owned partitions.
    pub fn len(&self) -> usize {
        self.owned().count()
    }

    /// Whether no partition is owned.
    pub fn is_empty(&self) -> bool {
        self.owned().next().is_none()
    }

    /// Whether a refresh was applied.
    pub fn refreshed_once(&self) -> bool {
        self.refreshed_once
    }

    /// A refresh was applied.
    pub fn mark_refreshed(&mut self) {
        self.refreshed_once = true;
    }

    /// Whether a consumed record of `topic`/`partition` at `offset` is replicated: its
    /// partition replicates, is not halted, and the record is not stale (from before a
    /// re-assign). Notes it as fetched.
    pub fn accept(&mut self, topic: &str, partition: i32, offset: i64) -> bool {
        let entries = &self.entries.0;
        let hit = self.last.filter(|&i| {
            entries
                .get(i)
                .is_some_and(|(tp, _)| tp.partition == partition && tp.topic == topic)
        });
        let i = match hit {
            Some(i) => i,
            None => match self.entries.find(topic, partition) {
                Ok(i) => {
                    self.last = Some(i);
                    i
                }
                Err(_) => return false,
            },
        };
        let p = &mut *self.entries.0[i].1;
        if p.parked || p.halted || !p.replicating() {
            return false;
        }
        if p.stop_at.as_ref().is_some_and(|f| offset >= f.offset) {
            // The rejected record and what follows wait for the operator's reset.
            return false;
        }
        if p.fetched.is_some_and(|f| offset < f) {
            return false;
        }
        p.fetched = Some(offset + 1);
        p.fetched_since_check = true;
        true
    }

    /// A record of `tp` was refused outright: take none of its later records until the
    /// consumer is re-assigned.
    pub fn halt(&mut self, tp: &TopicPartitionRef) {
        if let Some(p) = self.entries.get_mut(tp) {
            p.halted = true;
        }
    }

    /// The consumer's new assignment: every replicating partition at its committed position
    /// (halts lifted; the consumer expects exactly these offsets next).
    pub fn assignment(&mut self) -> Vec<(TopicPartitionRef, i64)> {
        let mut out = Vec::new();
        for (tp, p) in self.entries.iter_mut() {
            p.halted = false;
            if p.parked || !p.replicating() {
                p.fetched = None;
                continue;
            }
            let Some(pos) = p.position else { continue };
            p.fetched = Some(pos);
            out.push((tp.clone(), pos));
        }
        out
    }

    /// The consumer refused to take `tp` at `pos`: nothing is expected from it.
    pub fn not_assigned(&mut self, tp: &TopicPartitionRef) {
        if let Some(p) = self.entries.get_mut(tp) {
            p.fetched = None;
        }
    }

    /// `tp`'s position must be persisted (with the next batch, or alone).
    pub fn mark_pending(&mut self, tp: &TopicPartitionRef) {
        if let Some(p) = self.entries.get_mut(tp) {
            if !p.parked && !p.pending {
                p.pending = true;
                self.pending += 1;
            }
        }
    }

    /// `tp`'s position was persisted.
    pub fn clear_pending(&mut self, tp: &TopicPartitionRef) {
        if let Some(p) = self.entries.get_mut(tp) {
            if !p.parked && p.pending {
                p.pending = false;
                self.pending -= 1;
            }
        }
    }

    /// Whether a position or the reset marker waits to be persisted.
    pub fn has_pending(&self) -> bool {
        self.pending > 0 || self.pending_marker.is_some()
    }

    /// Owned partitions whose position waits to be persisted, in key order.
    pub fn pending(&self) -> impl Iterator<Item = (&TopicPartitionRef, &Partition)> {
        self.owned().filter(|(_, p)| p.pending)
    }

    /// The reset id whose marker waits to be persisted.
    pub fn pending_marker(&self) -> Option<&str> {
        self.pending_marker.as_deref()
    }

    /// Reset `id` was handled: persist the marker.
    pub fn set_pending_marker(&mut self, id: &str) {
        self.pending_marker = Some(id.to_string());
    }

    /// The marker of reset `id` was persisted (a newer id stays pending).
    pub fn marker_persisted(&mut self, id: &str) {
        if self.pending_marker.as_deref() == Some(id) {
            self.pending_marker = None;
        }
    }

    /// A marker write failed: persist it again unless a newer one is pending.
    pub fn marker_lost(&mut self, id: String) {
        self.pending_marker.get_or_insert(id);
    }

    /// Ensures an entry for an owned partition `tp` (targeting `target`): new, back from
    /// parked (a fresh sync emitter; not-failed partitions resume per their position and
    /// `paused`; an unpersisted position is pending again), or known.
    pub fn take(
        &mut self,
        tp: &TopicPartitionRef,
        target: &str,
        epoch: i64,
        paused: bool,
    ) -> Taken {
        match self.entries.get_mut(tp) {
            Some(p) if !p.parked => Taken::Known,
            Some(p) => {
                p.parked = false;
                p.target_topic = target.to_string();
                p.emitter = SyncEmitter::new(epoch);
                if !p.state.is_failed() {
                    p.state = p.resume_state(paused);
                }
                if p.pending {
                    self.pending += 1;
                }
                Taken::Back
            }
            None => {
                self.entries
                    .insert(tp.clone(), Partition::new(target.to_string(), epoch));
                Taken::New
            }
        }
    }

    /// Parks `tp` (its topic vanished or is no longer selected): position, baseline, failure
    /// and an unpersisted position are kept. True if it was owned.
    pub fn park(&mut self, tp: &TopicPartitionRef) -> bool {
        let Some(p) = self.entries.get_mut(tp).filter(|p| !p.parked) else {
            return false;
        };
        p.parked = true;
        p.fetched = None;
        p.fetched_since_check = false;
        p.halted = false;
        p.version += 1;
        if p.pending {
            self.pending -= 1;
        }
        true
    }

    /// Gives a partition without a position its start: replicating (or paused), its topic and
    /// reset ids from the progress it resumes from; a fresh start is pending. True if
    /// applied (the partition is owned and had no position).
    pub fn start(&mut self, tp: &TopicPartitionRef, start: &Start, paused: bool) -> bool {
        let Some(p) = self.get_mut(tp).filter(|p| p.position.is_none()) else {
            return false;
        };
        p.position = Some(start.position());
        p.state = if paused {
            PartitionState::Paused
        } else {
            PartitionState::Replicating
        };
        if let Start::Resume(stored) = start {
            p.topic_id = stored.topic_id.clone();
            p.reset_id = stored.reset_id.clone();
            if !stored.failure.is_empty() {
                // Stopped before the restart: it stays stopped until a reset clears it.
                p.state = PartitionState::Failed(restored_failure(&stored.failure));
            }
        }
        if let Start::Fresh(_) | Start::MirrorMaker2(_) | Start::AfterFailover(_) = start {
            self.mark_pending(tp);
        }
        true
    }

    /// `spec.paused` changed: replicating partitions pause, paused ones resume. True if any
    /// partition changed.
    pub fn set_paused(&mut self, paused: bool) -> bool {
        let mut changed = false;
        for p in self.entries.values_mut().filter(|p| !p.parked) {
            match (&p.state, paused) {
                (PartitionState::Replicating, true) => p.state = PartitionState::Paused,
                (PartitionState::Paused, false) => p.state = PartitionState::Replicating,
                _ => continue,
            }
            changed = true;
        }
        changed
    }

    /// Stops `tp` with `failed` (the others go on). True if it is owned.
    pub fn fail(&mut self, tp: &TopicPartitionRef, failed: PartitionFailed) -> bool {
        let Some(p) = self.get_mut(tp) else {
            return false;
        };
        p.state = PartitionState::Failed(failed);
        p.fetched = None;
        p.version += 1;
        // Persisted with its position: a restart keeps it stopped.
        self.mark_pending(tp);
        true
    }

    /// Stops `tp` at the rejected record of `failed` (`failed.offset`): at once if its
    /// position is there; otherwise the records before it are replicated first (a retried
    /// batch or an aborted transaction left them uncommitted) and it fails when its position
    /// reaches it ([`PartitionTable::apply_commit`]). True if it is owned.
    pub fn fail_at(&mut self, tp: &TopicPartitionRef, failed: PartitionFailed) -> bool {
        let Some(p) = self.get_mut(tp) else {
            return false;
        };
        // Also when paused or stopped otherwise: the failure must name the position.
        if p.position.is_some_and(|pos| pos < failed.offset) {
            p.stop_at = Some(failed);
            p.fetched = None;
            return true;
        }
        self.fail(tp, failed)
    }

    /// Applies a reset to `tp`: the new position and reset id, a fresh emitter, the current
    /// log as the validation baseline (an unknown topic id is learned at the next check
    /// rather than compared with the old topic's), replicating or paused, pending.
    #[allow(clippy::too_many_arguments)]
    pub fn reset(
        &mut self,
        tp: &TopicPartitionRef,
        position: i64,
        reset_id: &str,
        topic_id: Option<String>,
        (low, high): (i64, i64),
        epoch: i64,
        paused: bool,
    ) -> bool {
        let Some(p) = self.get_mut(tp) else {
            return false;
        };
        p.position = Some(position);
        p.fetched = None;
        p.stop_at = None;
        p.reset_id = reset_id.to_string();
        p.emitter = SyncEmitter::new(epoch);
        p.topic_id = topic_id.unwrap_or_default();
        p.max_log_start = Some(low);
        p.max_high_watermark = Some(high);
        p.fetched_since_check = false;
        p.state = if paused {
            PartitionState::Paused
        } else {
            PartitionState::Replicating
        };
        p.version += 1;
        self.mark_pending(tp);
        true
    }

    /// Positions read back from the progress topic after a commit with an unknown outcome:
    /// each owned partition with stored progress takes its stored position (the commit did
    /// happen if it is ahead); the others keep theirs (it did not). Returns the partitions
    /// that moved.
    pub fn reload(
        &mut self,
        stored: &std::collections::HashMap<(String, i32), Progress>,
    ) -> Vec<(TopicPartitionRef, i64)> {
        let mut moved = Vec::new();
        for (tp, p) in self.entries.iter_mut().filter(|(_, p)| !p.parked) {
            let Some(s) = stored.get(&(tp.topic.clone(), tp.partition)) else {
                continue;
            };
            if p.position != Some(s.next_offset) && p.position.is_some() {
                p.position = Some(s.next_offset);
                p.fetched = None;
                moved.push((tp.clone(), s.next_offset));
            }
        }
        moved
    }

    /// Fresh sync emitters for `tps` (the target may hold copies the next attempt writes
    /// again).
    pub fn restart_emitters<'a>(
        &mut self,
        tps: impl IntoIterator<Item = &'a TopicPartitionRef>,
        epoch: impl Fn() -> i64,
    ) {
        for tp in tps {
            if let Some(p) = self.entries.get_mut(tp) {
                p.emitter = SyncEmitter::new(epoch());
            }
        }
    }

    /// Applies a committed batch: each partition resumes after its last delivered record (or
    /// at its first failed one), takes its new sync emitter and lag, and is persisted. True
    /// when a partition must be fetched again (its refused record is retried one record per
    /// request).
    pub fn apply_commit<E>(
        &mut self,
        slots: &[BatchPartition],
        outcomes: &[PartitionOutcome<E>],
        emitters: Vec<Option<SyncEmitter>>,
        last_timestamps: &[Option<i64>],
        acked_at_ms: i64,
    ) -> bool {
        let mut refetch = false;
        let mut reached = Vec::new();
        for (slot, (o, emitter)) in outcomes.iter().zip(emitters).enumerate() {
            let Some(p) = self.get_mut(&slots[slot].tp) else {
                continue;
            };
            p.position = Some(o.next_offset);
            if p.stop_at
                .as_ref()
                .is_some_and(|f| f.offset <= o.next_offset)
            {
                reached.push(slot);
            }
            if let Some(e) = emitter {
                p.emitter = e;
            }
            if let Some(ts) = last_timestamps.get(slot).copied().flatten() {
                p.lag_seconds = Some(((acked_at_ms - ts).max(0) as f64) / 1000.0);
            }
            if o.failure.is_none() {
                p.high = p.high.map(|h| h.max(o.next_offset));
                p.careful = false;
            } else if !p.state.is_failed() {
                p.fetched = None;
                refetch = true;
            }
        }
        for s in slots {
            self.clear_pending(&s.tp);
        }
        // The rejected record is reached: stopped (the commit persisted the failure, see
        // `Partition::progress`).
        for slot in reached {
            let tp = &slots[slot].tp;
            if let Some(f) = self.get_mut(tp).and_then(|p| p.stop_at.take()) {
                if let Some(p) = self.get_mut(tp) {
                    p.state = PartitionState::Failed(f);
                    p.fetched = None;
                    p.version += 1;
                }
                refetch = true;
            }
        }
        refetch
    }

    /// Whether any partition is sent one record per request.
    pub fn any_careful(&self) -> bool {
        self.owned().any(|(_, p)| p.careful)
    }

    /// Owned partitions with a position, for lag and status: `(tp, partition)`.
    pub fn positioned(&self) -> impl Iterator<Item = (&TopicPartitionRef, &Partition)> {
        self.owned().filter(|(_, p)| p.position.is_some())
    }

    /// DataLoss / TopicReset / RecordRejected failures of the owned partitions.
    pub fn failed(&self) -> impl Iterator<Item = (&TopicPartitionRef, &PartitionFailed)> {
        self.owned().filter_map(|(tp, p)| match &p.state {
            PartitionState::Failed(f) => Some((tp, f)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests;
