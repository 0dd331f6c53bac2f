//! Delivery reports of the target producer, collected per group of records (a batch, or the
//! syncs and progress of a batch) without an allocation or a wake-up per record (rdkafka's
//! `FutureProducer` has a channel and a box per record). A record's delivery opaque is a plain
//! number (group id and index); whoever polls the producer (the task waiting for a group, see
//! `events`) stores the report under one lock, and the group's waker is woken once, when its
//! last report is in.
//!
//! A record sent without a copy (`produce::Topics::send_held`) has its fetch event held in
//! its group, released by its report; a group closed first leaves it as an orphan for the
//! report, and the producer's destruction releases what is left.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryResult, ProducerContext};

use crate::kafka::consume::{HeldEvent, Pins, HELD_EVENT_BYTES};
use crate::kafka::context::LogContext;
use crate::kafka::events::ProducerEvents;

/// Result of one record: its target offset, or why it was not delivered.
pub type DeliveryReport = Result<i64, KafkaError>;

#[derive(Debug, Default)]
struct Group {
    /// Per record: its target offset, [`NOT_IN`], or [`FAILED`] (the error is in `errors`).
    /// Eight bytes a record: a batch's worth of `Option<Result<i64, KafkaError>>` (56 bytes
    /// each) was written, read and cleared once per record, 5 % of the engine thread (perf).
    slots: Vec<i64>,
    /// The errors of the `FAILED` slots, by record index (rare).
    errors: Vec<(usize, KafkaError)>,
    /// Reports received.
    done: usize,
    /// Reports to wait for (records handed to the producer); `None` while still sending.
    expected: Option<usize>,
    waker: Option<Waker>,
    /// Per record sent without a copy: its consumed event, whose bytes librdkafka reads
    /// until the report (empty unless such records were sent).
    held: Vec<Option<HeldEvent>>,
}

/// A slot whose report is not in (or was taken).
const NOT_IN: i64 = i64::MIN;
/// A slot whose report is an error. Neither marker is an offset librdkafka reports (those
/// are at least `-1001`, its invalid offset).
const FAILED: i64 = i64::MIN + 1;

impl Group {
    fn complete(&self) -> bool {
        self.expected.is_some_and(|n| self.done >= n)
    }

    /// Stores the report of record `index`; returns whether it was the first for it.
    fn store(&mut self, index: usize, report: DeliveryReport) -> bool {
        let Some(slot) = self.slots.get_mut(index) else {
            return false;
        };
        let first = *slot == NOT_IN;
        if *slot == FAILED {
            self.errors.retain(|(i, _)| *i != index);
        }
        match report {
            Ok(offset) => *slot = offset.max(FAILED + 1),
            Err(e) => {
                *slot = FAILED;
                self.errors.push((index, e));
            }
        }
        first
    }

    /// Takes the report of record `index` (`None`: not in yet, taken, or never sent).
    fn take(&mut self, index: usize) -> Option<DeliveryReport> {
        let slot = self.slots.get_mut(index)?;
        match std::mem::replace(slot, NOT_IN) {
            NOT_IN => None,
            FAILED => {
                let at = self.errors.iter().position(|(i, _)| *i == index)?;
                Some(Err(self.errors.swap_remove(at).1))
            }
            offset => Some(Ok(offset)),
        }
    }
}

#[derive(Debug, Default)]
struct Groups {
    next_id: u32,
    open: OpenGroups,
    /// Key and value bytes of the events held in open groups (their batches count them).
    open_held_bytes: usize,
    /// Events held in `orphans` (no batch counts them any more).
    orphans_held: usize,
    /// Slot vectors of closed groups, kept for the next ones: a batch's worth of fresh
    /// memory is page faults every batch (perf: 4 % of the worker's CPU at 100 B records).
    spare: Vec<Vec<i64>>,
    spare_held: Vec<Vec<Option<HeldEvent>>>,
    /// Events of records sent without a copy whose group was closed before their report,
    /// by group: released by the report, or once the producer is gone.
    orphans: Vec<Orphans>,
}

/// A closed group's events still waiting for their reports.
#[derive(Debug)]
struct Orphans {
    id: u32,
    /// By record index, like [`Group::held`].
    held: Vec<Option<HeldEvent>>,
    /// Events left in `held`.
    left: usize,
}

/// The open groups by id: a handful at a time, so a list searched from the newest beats a
/// hash map, whose SipHash per delivery report showed in perf.
#[derive(Debug, Default)]
struct OpenGroups(Vec<(u32, Group)>);

impl OpenGroups {
    fn get_mut(&mut self, id: &u32) -> Option<&mut Group> {
        self.0
            .iter_mut()
            .rev()
            .find(|(i, _)| i == id)
            .map(|(_, g)| g)
    }

    fn contains_key(&self, id: &u32) -> bool {
        self.0.iter().any(|(i, _)| i == id)
    }

    /// `id` must not be open (the caller picks a free one).
    fn insert(&mut self, id: u32, group: Group) {
        self.0.push((id, group));
    }

    fn remove(&mut self, id: &u32) -> Option<Group> {
        let at = self.0.iter().position(|(i, _)| i == id)?;
        Some(self.0.remove(at).1)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }

    #[cfg(test)]
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Closed groups' vectors kept (a few batches are in flight at a time).
const SPARE_RESULTS: usize = 4;

/// Shared by the producer context (writes reports) and the engine (reads them).
#[derive(Clone, Default)]
pub struct Tracker {
    inner: Arc<Mutex<Groups>>,
    /// The producer's events, served while a group is waited for (weak: the writer owns
    /// them and drops them before its producer).
    events: Arc<OnceLock<Weak<ProducerEvents>>>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Tracker {
    fn lock(&self) -> MutexGuard<'_, Groups> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `other` is this tracker (a clone of it).
    pub fn is(&self, other: &Tracker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Where this tracker's reports come from: waits serve `events` (set once).
    pub fn serve_from(&self, events: &Arc<ProducerEvents>) {
        let _ = self.events.set(Arc::downgrade(events));
    }

    fn events(&self) -> Option<Arc<ProducerEvents>> {
        self.events.get().and_then(Weak::upgrade)
    }

    /// Runs `fut` while serving the producer's events (a blocking transactional call waits
    /// for delivery reports someone else must serve).
    pub async fn serving<T>(&self, fut: impl Future<Output = T>) -> T {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| match self.events() {
            Some(ev) => ev.poll_serving(cx, |cx| fut.as_mut().poll(cx)),
            None => fut.as_mut().poll(cx),
        })
        .await
    }

    /// Opens a group of `len` records (indexes `0..len`).
    pub fn group(&self, len: usize) -> GroupHandle {
        let mut g = self.lock();
        // Ids wrap after 4 billion groups; a handful are open at a time.
        let mut id = g.next_id;
        while g.open.contains_key(&id) || g.orphans.iter().any(|o| o.id == id) {
            id = id.wrapping_add(1);
        }
        g.next_id = id.wrapping_add(1);
        let mut slots = g.spare.pop().unwrap_or_default();
        slots.resize(len, NOT_IN);
        g.open.insert(
            id,
            Group {
                slots,
                ..Group::default()
            },
        );
        GroupHandle {
            id,
            tracker: self.clone(),
        }
    }

    /// Stores a report (producer polling thread) and releases the record's held event.
    /// Reports of dropped groups are ignored.
    fn report(&self, ticket: usize, result: DeliveryReport) {
        let (id, index) = split_ticket(ticket);
        // Destroyed after the lock is released.
        let _released: Option<HeldEvent>;
        let mut guard = self.lock();
        let g = &mut *guard;
        let Some(group) = g.open.get_mut(&id) else {
            let Some(at) = g.orphans.iter().position(|o| o.id == id) else {
                return;
            };
            let o = &mut g.orphans[at];
            _released = o.held.get_mut(index).and_then(Option::take);
            if _released.is_some() {
                o.left -= 1;
                if o.left == 0 {
                    g.orphans.swap_remove(at);
                }
                g.orphans_held -= 1;
            }
            return;
        };
        _released = group.held.get_mut(index).and_then(Option::take);
        if let Some(e) = &_released {
            g.open_held_bytes -= e.record_bytes();
        }
        if group.store(index, result) {
            group.done += 1;
        }
        if group.complete() {
            if let Some(w) = group.waker.take() {
                w.wake();
            }
        }
    }

    /// Releases every held event: only once librdkafka can no longer read them (the
    /// producer was destroyed; see [`DeliveryContext`]'s `Drop`).
    fn release_held(&self) {
        let mut released = Vec::new();
        {
            let mut g = self.lock();
            released.extend(g.orphans.drain(..).flat_map(|o| o.held).flatten());
            for (_, group) in &mut g.open.0 {
                released.extend(group.held.drain(..).flatten());
            }
            (g.open_held_bytes, g.orphans_held) = (0, 0);
        }
        drop(released);
    }

    /// Events held now (open groups and orphans).
    pub fn held_count(&self) -> usize {
        let g = self.lock();
        g.orphans.iter().map(|o| o.left).sum::<usize>()
            + g.open
                .0
                .iter()
                .map(|(_, group)| group.held.iter().flatten().count())
                .sum::<usize>()
    }

    /// What of the memory `pins` counts no open group's batch counts: librdkafka's fetch
    /// buffers beyond the key and value bytes of the records held in open groups (the rest
    /// of each buffer), and whatever the events of closed groups hold (their batches were
    /// dropped before the reports, which release them).
    pub fn held_beyond_groups(&self, pins: &Pins) -> usize {
        let (open, orphans) = {
            let g = self.lock();
            (g.open_held_bytes, g.orphans_held)
        };
        pins.bytes().saturating_sub(open) + orphans * HELD_EVENT_BYTES
    }

    /// Closed groups with events still held.
    #[cfg(test)]
    pub(crate) fn orphan_groups(&self) -> usize {
        self.lock().orphans.len()
    }

    #[cfg(test)]
    fn open_groups(&self) -> usize {
        self.lock().open.len()
    }
}

// A ticket packs a group id and an index into the delivery opaque.
const _: () = assert!(usize::BITS >= 64, "tickets need a 64-bit usize");

fn split_ticket(ticket: usize) -> (u32, usize) {
    (
        (ticket as u64 >> 32) as u32,
        (ticket as u64 & 0xffff_ffff) as usize,
    )
}

/// One open group; dropping it discards the reports still to come.
#[derive(Debug)]
pub struct GroupHandle {
    id: u32,
    tracker: Tracker,
}

impl GroupHandle {
    /// The delivery opaque of record `index`.
    pub fn ticket(&self, index: usize) -> usize {
        debug_assert!(index <= u32::MAX as usize);
        (((self.id as u64) << 32) | index as u64) as usize
    }

    /// Waits for `sent` reports in all (the number of records handed to the producer so
    /// far). May be called again with a larger number as more are sent.
    pub fn expect(&self, sent: usize) {
        let mut g = self.tracker.lock();
        if let Some(group) = g.open.get_mut(&self.id) {
            group.expected = Some(sent);
        }
    }

    /// Ready once the expected reports are in, serving the producer's events meanwhile.
    /// Cancel safe.
    pub fn poll_complete(&self, cx: &mut Context<'_>) -> Poll<()> {
        match self.tracker.events() {
            Some(ev) => ev.poll_serving(cx, |cx| self.poll_reports(cx)),
            None => self.poll_reports(cx),
        }
    }

    fn poll_reports(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut g = self.tracker.lock();
        let Some(group) = g.open.get_mut(&self.id) else {
            return Poll::Ready(());
        };
        if group.complete() {
            Poll::Ready(())
        } else {
            group.waker = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Waits until the expected reports are in.
    pub async fn complete(&self) {
        std::future::poll_fn(|cx| self.poll_complete(cx)).await
    }

    /// Waits until the expected reports are in, at most `limit`: whether they are.
    pub async fn complete_within(&self, limit: std::time::Duration) -> bool {
        tokio::time::timeout(limit, self.complete()).await.is_ok()
    }

    /// Makes room for records `0..len` (a group filled while its records are being read
    /// starts empty and grows).
    pub fn reserve(&self, len: usize) {
        let mut g = self.tracker.lock();
        if let Some(group) = g.open.get_mut(&self.id) {
            if group.slots.len() < len {
                group.slots.resize(len, NOT_IN);
            }
        }
    }

    /// Takes the reports of `indexes` under one lock, in order (`None`: not in yet, or never
    /// sent).
    pub fn take_each(&self, indexes: &[usize], mut f: impl FnMut(usize, Option<DeliveryReport>)) {
        let mut g = self.tracker.lock();
        let mut group = g.open.get_mut(&self.id);
        for &i in indexes {
            f(i, group.as_mut().and_then(|group| group.take(i)));
        }
    }

    /// Takes the report of record `index` (`None`: not in yet, or never sent).
    pub fn take(&self, index: usize) -> Option<DeliveryReport> {
        let mut g = self.tracker.lock();
        g.open.get_mut(&self.id).and_then(|group| group.take(index))
    }

    /// The tracker the group's reports go to.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// Holds `event` for record `index` until its report (or until the producer is gone):
    /// called before the record is handed to the producer without a copy of its bytes, so
    /// the report, wherever it is served, finds it. Gives it back if the group is closed.
    pub fn hold(&self, index: usize, event: HeldEvent) -> Result<(), HeldEvent> {
        let mut g = self.tracker.lock();
        let g = &mut *g;
        let Some(group) = g.open.get_mut(&self.id) else {
            return Err(event);
        };
        if group.held.len() <= index {
            if group.held.capacity() == 0 {
                group.held = g.spare_held.pop().unwrap_or_default();
            }
            // As long as the slots (reserved doubling), so this grows as rarely.
            let len = group.slots.len().max(index + 1);
            group.held.resize_with(len, || None);
        }
        g.open_held_bytes += event.record_bytes();
        if let Some(old) = group.held[index].replace(event) {
            g.open_held_bytes -= old.record_bytes();
        }
        Ok(())
    }

    /// Gives back the event held for record `index` (the producer refused the record).
    pub fn unhold(&self, index: usize) -> Option<HeldEvent> {
        let mut g = self.tracker.lock();
        let event = g
            .open
            .get_mut(&self.id)
            .and_then(|group| group.held.get_mut(index)?.take())?;
        g.open_held_bytes -= event.record_bytes();
        Some(event)
    }
}

impl Drop for GroupHandle {
    fn drop(&mut self) {
        let mut g = self.tracker.lock();
        if let Some(mut group) = g.open.remove(&self.id) {
            if g.spare.len() < SPARE_RESULTS {
                group.slots.clear();
                g.spare.push(group.slots);
            }
            // Records whose report has not come: librdkafka may still read their bytes.
            let left = group.held.iter().flatten().count();
            g.open_held_bytes -= group
                .held
                .iter()
                .flatten()
                .map(HeldEvent::record_bytes)
                .sum::<usize>();
            g.orphans_held += left;
            if left > 0 {
                g.orphans.push(Orphans {
                    id: self.id,
                    held: group.held,
                    left,
                });
            } else if group.held.capacity() > 0 && g.spare_held.len() < SPARE_RESULTS {
                group.held.clear();
                g.spare_held.push(group.held);
            }
        }
    }
}

/// The target producer's context: logs like [`LogContext`], reports into a [`Tracker`].
/// Dropped after librdkafka's client is destroyed (rdkafka's `Client` drops its native
/// handle first): then nothing reads the bytes of records sent without a copy, and their
/// events are released.
pub struct DeliveryContext {
    log: LogContext,
    tracker: Tracker,
}

impl DeliveryContext {
    /// A context logging as `log` and reporting into `tracker`.
    pub fn new(log: LogContext, tracker: Tracker) -> Self {
        Self { log, tracker }
    }

    /// Where the reports go.
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }
}

impl Drop for DeliveryContext {
    fn drop(&mut self) {
        self.tracker.release_held();
    }
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.log.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.log.error(error, reason);
    }

    fn stats_raw(&self, statistics: &[u8]) {
        self.log.stats_raw(statistics);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, ticket: usize) {
        let r = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.clone()),
        };
        self.tracker.report(ticket, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::types::RDKafkaErrorCode;

    fn noop_cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    #[test]
    fn a_group_completes_when_every_expected_report_is_in() {
        let t = Tracker::default();
        let g = t.group(3);
        let mut cx = noop_cx();
        // Reports may come before the group is sealed, and in any order across partitions.
        t.report(g.ticket(2), Ok(12));
        assert_eq!(g.poll_complete(&mut cx), Poll::Pending, "not sealed yet");
        g.expect(3);
        assert_eq!(g.poll_complete(&mut cx), Poll::Pending);
        t.report(g.ticket(0), Ok(10));
        t.report(
            g.ticket(1),
            Err(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageSizeTooLarge,
            )),
        );
        assert_eq!(g.poll_complete(&mut cx), Poll::Ready(()));
        assert_eq!(g.take(0).map(|r| r.ok()), Some(Some(10)));
        assert!(matches!(g.take(1), Some(Err(_))));
        assert_eq!(g.take(2).map(|r| r.ok()), Some(Some(12)));
        assert!(g.take(2).is_none(), "taken once");
    }

    #[test]
    fn expect_can_grow_while_sending() {
        let t = Tracker::default();
        let g = t.group(2);
        let mut cx = noop_cx();
        g.expect(1);
        t.report(g.ticket(0), Ok(0));
        assert_eq!(g.poll_complete(&mut cx), Poll::Ready(()));
        g.expect(2);
        assert_eq!(g.poll_complete(&mut cx), Poll::Pending);
        t.report(g.ticket(1), Ok(1));
        assert_eq!(g.poll_complete(&mut cx), Poll::Ready(()));
    }

    #[test]
    fn reports_of_dropped_groups_and_unknown_indexes_are_ignored() {
        let t = Tracker::default();
        let g = t.group(1);
        let stale = g.ticket(0);
        drop(g);
        assert_eq!(t.open_groups(), 0);
        t.report(stale, Ok(1)); // no panic, nothing kept
        let h = t.group(1);
        assert_ne!(
            h.ticket(0),
            stale,
            "ids are not reused while reports may come"
        );
        t.report(h.ticket(7), Ok(1));
        h.expect(1);
        assert_eq!(h.poll_complete(&mut noop_cx()), Poll::Pending);
        assert_eq!(t.open_groups(), 1);
    }

    #[test]
    fn reports_reach_their_own_group_among_several_open() {
        let t = Tracker::default();
        let groups: Vec<GroupHandle> = (0..4).map(|_| t.group(2)).collect();
        // Reports for every group, interleaved; then the oldest group closes first.
        for i in [1usize, 0] {
            for (n, g) in groups.iter().enumerate().rev() {
                t.report(g.ticket(i), Ok((n * 10 + i) as i64));
            }
        }
        let mut groups = groups.into_iter();
        drop(groups.next());
        for (n, g) in groups.enumerate().map(|(n, g)| (n + 1, g)) {
            g.expect(2);
            assert_eq!(g.poll_complete(&mut noop_cx()), Poll::Ready(()));
            assert_eq!(g.take(0).map(|r| r.unwrap()), Some((n * 10) as i64));
            assert_eq!(g.take(1).map(|r| r.unwrap()), Some((n * 10 + 1) as i64));
        }
        assert_eq!(t.open_groups(), 0);
    }

    #[test]
    fn a_group_grows_while_its_records_are_read() {
        let t = Tracker::default();
        let g = t.group(0);
        // A report for an index not reserved yet is dropped (the engine reserves first).
        t.report(g.ticket(0), Ok(5));
        g.reserve(2);
        t.report(g.ticket(0), Ok(10));
        t.report(g.ticket(1), Ok(11));
        g.reserve(1); // never shrinks
        g.expect(2);
        assert_eq!(g.poll_complete(&mut noop_cx()), Poll::Ready(()));
        let mut got = Vec::new();
        g.take_each(&[1, 0, 1], |i, r| got.push((i, r.map(|r| r.ok()))));
        assert_eq!(
            got,
            vec![(1, Some(Some(11))), (0, Some(Some(10))), (1, None)],
            "in the order asked, each taken once"
        );
    }

    #[test]
    fn take_each_on_a_dropped_group_gives_nothing() {
        let t = Tracker::default();
        let g = t.group(1);
        t.report(g.ticket(0), Ok(1));
        t.lock().open.clear();
        let mut got = Vec::new();
        g.take_each(&[0, 3], |i, r| got.push((i, r.is_some())));
        assert_eq!(got, vec![(0, false), (3, false)]);
    }

    #[test]
    fn a_closed_groups_results_are_reused_empty() {
        let t = Tracker::default();
        let g = t.group(3);
        t.report(g.ticket(1), Ok(7));
        drop(g);
        let h = t.group(2);
        h.expect(2);
        assert_eq!(
            h.poll_complete(&mut noop_cx()),
            Poll::Pending,
            "no stale report"
        );
        assert!(h.take(1).is_none());
        assert!(h.take(2).is_none(), "sized for this group");
        h.reserve(5);
        t.report(h.ticket(4), Ok(9));
        assert_eq!(h.take(4).map(|r| r.ok()), Some(Some(9)));
    }

    #[test]
    fn reports_are_taken_once_whatever_they_hold() {
        use RDKafkaErrorCode::{MessageSizeTooLarge as Big, MessageTimedOut as Late};
        type Outcome = Result<i64, RDKafkaErrorCode>;
        /// Reports in arrival order, the index taken, what it holds.
        type Case = (Vec<(usize, Outcome)>, usize, Option<Outcome>);
        let cases: Vec<Case> = vec![
            (vec![], 0, None),
            (vec![(0, Ok(0))], 0, Some(Ok(0))),
            // librdkafka's invalid offset (acks=0) is an offset like any other here
            (vec![(0, Ok(-1001))], 0, Some(Ok(-1001))),
            (vec![(1, Err(Big))], 1, Some(Err(Big))),
            (vec![(1, Err(Big))], 0, None),
            // errors of several records stay apart
            (vec![(0, Err(Big)), (2, Err(Late))], 2, Some(Err(Late))),
            (vec![(0, Err(Big)), (2, Err(Late))], 0, Some(Err(Big))),
            // a later report replaces the earlier, either way
            (vec![(0, Err(Big)), (0, Ok(5))], 0, Some(Ok(5))),
            (vec![(0, Ok(5)), (0, Err(Late))], 0, Some(Err(Late))),
            (vec![(0, Err(Big)), (0, Err(Late))], 0, Some(Err(Late))),
            // beyond the group: ignored
            (vec![(9, Ok(1))], 9, None),
        ];
        for (reports, index, want) in cases {
            let t = Tracker::default();
            let g = t.group(3);
            for (i, r) in &reports {
                t.report(g.ticket(*i), r.map_err(KafkaError::MessageProduction));
            }
            let got = g
                .take(index)
                .map(|r| r.map_err(|e| e.rdkafka_error_code().unwrap()));
            assert_eq!(got, want, "{reports:?}, take {index}");
            assert!(g.take(index).is_none(), "{reports:?}: taken once");
        }
    }

    #[tokio::test]
    async fn a_wait_for_reports_ends_at_its_limit() {
        let t = Tracker::default();
        let g = t.group(2);
        g.expect(2);
        t.report(g.ticket(0), Ok(0));
        let limit = std::time::Duration::from_millis(50);
        let started = std::time::Instant::now();
        assert!(!g.complete_within(limit).await, "one report is missing");
        assert!(started.elapsed() >= limit);
        t.report(g.ticket(1), Ok(1));
        assert!(g.complete_within(std::time::Duration::ZERO).await);
    }

    #[test]
    fn a_duplicate_report_counts_once() {
        let t = Tracker::default();
        let g = t.group(2);
        g.expect(2);
        t.report(g.ticket(0), Ok(0));
        t.report(g.ticket(0), Ok(0));
        assert_eq!(g.poll_complete(&mut noop_cx()), Poll::Pending);
    }

    #[test]
    fn the_waker_is_woken_once_complete() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::Wake;
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let t = Tracker::default();
        let g = t.group(2);
        g.expect(2);
        assert_eq!(g.poll_complete(&mut cx), Poll::Pending);
        t.report(g.ticket(0), Ok(0));
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "no wake before the last report"
        );
        t.report(g.ticket(1), Ok(1));
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }
}
