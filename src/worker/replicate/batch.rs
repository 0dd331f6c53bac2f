//! Batch bookkeeping: the records consumed since the last commit, bounded in records and
//! bytes, grouped by partition, and what a batch's delivery results mean per partition. Pure.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::message::OwnedHeaders;

use crate::api::TopicPartitionRef;

/// librdkafka's copy of a produced record beyond its key, value and headers: the message
/// struct (`rd_kafka_msg_t`, 176 bytes in librdkafka 2.x, allocated with the key and value)
/// and the allocation's header and rounding.
const PRODUCER_MESSAGE_BYTES: usize = 192;

/// Memory of a record in flight beside its key, value and headers, counted against the
/// window so that `inFlightMiB` bounds what the records take: librdkafka's message, the
/// batch's entry and its delivery slot (`kafka::delivery`). 64 bytes were counted before, so
/// a window of 1 KB records held about 15 % more than it said. Keeps batches of tiny
/// records bounded too.
pub const RECORD_OVERHEAD_BYTES: usize =
    PRODUCER_MESSAGE_BYTES + std::mem::size_of::<BatchRecord>() + std::mem::size_of::<i64>();

/// What a record sent without a copy holds beyond [`RECORD_OVERHEAD_BYTES`] until its
/// delivery report: the consumer's fetch event and its slot in the delivery group. Its key
/// and value stay in the consumer's fetch buffer instead of librdkafka's copy (the rest of
/// that buffer is counted apart, `kafka::delivery::Tracker::held_beyond_groups`).
pub const HELD_OVERHEAD_BYTES: usize = crate::kafka::consume::HELD_EVENT_BYTES;

/// When a batch is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// At most this many records.
    pub max_records: usize,
    /// At most about this many bytes (a single record larger than this still forms a batch
    /// of its own, so it is never stuck).
    pub max_bytes: usize,
    /// Write at most this long after the batch's first record arrived.
    pub linger: Duration,
}

/// How full and how old a batch is, against its [`BatchLimits`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fill {
    pub records: usize,
    /// Bytes counted so far.
    pub bytes: usize,
    /// When the first record arrived (`None` while empty).
    pub opened_at: Option<Instant>,
}

impl Fill {
    /// Whether a bound is reached: the batch must be written before consuming more.
    pub fn is_full(&self, limits: &BatchLimits) -> bool {
        self.records >= limits.max_records || self.bytes >= limits.max_bytes
    }

    /// When the batch must be written at the latest (`None` while empty).
    pub fn deadline(&self, limits: &BatchLimits) -> Option<Instant> {
        self.opened_at.map(|t| t + limits.linger)
    }

    /// Whether the batch must be written at `now`: it holds a record and is full, or its
    /// linger time passed.
    pub fn is_due(&self, limits: &BatchLimits, now: Instant) -> bool {
        self.records > 0
            && (self.is_full(limits) || self.deadline(limits).is_some_and(|d| now >= d))
    }
}

/// The window of `spec.workers.inFlightMiB` = `mib`, in bytes (at least 1 MiB).
pub fn window_bytes(mib: i32) -> usize {
    (mib.max(1).unsigned_abs() as usize) << 20
}

impl BatchLimits {
    /// One of `parts` equal shares of the record and byte bounds (at least 1 each; the
    /// linger is the same).
    pub fn share(&self, parts: usize) -> Self {
        let parts = parts.max(1);
        Self {
            max_records: (self.max_records / parts).max(1),
            max_bytes: (self.max_bytes / parts).max(1),
            linger: self.linger,
        }
    }
}

impl BatchLimits {
    /// Bounds of the open batch when batches sent before it still hold `used` (records,
    /// bytes) of this window: a `parts`-th share at most, and never past the window (an
    /// empty window may give 0: wait).
    pub fn room(&self, parts: usize, used: (usize, usize)) -> Self {
        let share = self.share(parts);
        Self {
            max_records: share
                .max_records
                .min(self.max_records.saturating_sub(used.0)),
            max_bytes: share.max_bytes.min(self.max_bytes.saturating_sub(used.1)),
            linger: self.linger,
        }
    }
}

/// One consumed source record. Small (56 bytes): a window holds tens of thousands of these,
/// nearly all sent as they were read, so the payload of the few kept is boxed apart.
#[derive(Debug, Clone)]
pub struct BatchRecord {
    /// Index into [`Batch::partitions`].
    pub slot: usize,
    /// Source offset.
    pub offset: i64,
    /// Source timestamp (create or log-append time), ms.
    pub timestamp: Option<i64>,
    /// The record's bytes (key, value, headers) plus [`RECORD_OVERHEAD_BYTES`]
    /// ([`record_size`]); the window counts [`BatchRecord::window_size`].
    pub size: usize,
    /// Key, value and headers while they are kept; `None` once released or never kept.
    payload: Option<Box<Payload>>,
    /// Handed to the producer as it was read: no payload was ever kept.
    sent: bool,
    /// Sent without a copy: its fetch event is held until its report.
    held: bool,
}

#[derive(Debug, Clone)]
struct Payload {
    /// Key bytes then value bytes: one allocation per record.
    data: Vec<u8>,
    /// Key length (`None` = null key).
    key_len: Option<usize>,
    /// Whether the value is non-null.
    has_value: bool,
    /// Headers, in order.
    headers: Option<OwnedHeaders>,
}

impl BatchRecord {
    /// A record copied from borrowed key and value (`None` = null).
    pub fn new(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
        timestamp: Option<i64>,
        size: usize,
    ) -> Self {
        let (k, v) = (key.unwrap_or_default(), value.unwrap_or_default());
        let mut data = Vec::with_capacity(k.len() + v.len());
        data.extend_from_slice(k);
        data.extend_from_slice(v);
        Self {
            slot: 0,
            offset,
            timestamp,
            size,
            payload: Some(Box::new(Payload {
                data,
                key_len: key.map(<[u8]>::len),
                has_value: value.is_some(),
                headers,
            })),
            sent: false,
            held: false,
        }
    }

    /// Bookkeeping of a record handed to the producer straight from the consumer: no
    /// payload is kept (`key()`/`value()` are `None`).
    pub fn sent(offset: i64, timestamp: Option<i64>, size: usize) -> Self {
        Self {
            slot: 0,
            offset,
            timestamp,
            size,
            payload: None,
            sent: true,
            held: false,
        }
    }

    /// This record, sent without a copy when `held` (see [`HELD_OVERHEAD_BYTES`]).
    pub fn with_held(self, held: bool) -> Self {
        Self { held, ..self }
    }

    /// Bytes the window counts for this record: [`BatchRecord::size`], and
    /// [`HELD_OVERHEAD_BYTES`] more for a record sent without a copy.
    pub fn window_size(&self) -> usize {
        self.size + if self.held { HELD_OVERHEAD_BYTES } else { 0 }
    }

    /// Whether this is the bookkeeping of a record sent as it was read ([`Self::sent`]): a
    /// null key and value here mean "not kept", not a tombstone.
    pub fn was_sent(&self) -> bool {
        self.sent
    }

    /// Key bytes (`None` = null).
    pub fn key(&self) -> Option<&[u8]> {
        let p = self.payload.as_deref()?;
        p.key_len.map(|n| &p.data[..n])
    }

    /// Value bytes (`None` = null).
    pub fn value(&self) -> Option<&[u8]> {
        let p = self.payload.as_deref()?;
        p.has_value.then(|| &p.data[p.key_len.unwrap_or(0)..])
    }

    /// Headers, in order (`None` = none, or not kept).
    pub fn headers(&self) -> Option<&OwnedHeaders> {
        self.payload.as_deref()?.headers.as_ref()
    }
}

/// The records of one partition in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPartition {
    /// Source partition.
    pub tp: TopicPartitionRef,
    /// Offset of its first record in the batch.
    pub first: i64,
    /// Offset of its last record in the batch.
    pub last: i64,
    /// Records of this partition in the batch.
    pub count: usize,
}

/// Records consumed since the last commit.
#[derive(Debug, Default)]
pub struct Batch {
    records: Vec<BatchRecord>,
    partitions: Vec<BatchPartition>,
    index: HashMap<String, Vec<(i32, usize)>>,
    bytes: usize,
    opened_at: Option<Instant>,
    /// Records holding a payload (not [`BatchRecord::sent`]): a batch sent as it was read
    /// has none to release.
    held: usize,
}

/// Size counted for a record: key, value, header names and values, plus overhead.
pub fn record_size(key: Option<&[u8]>, value: Option<&[u8]>, header_bytes: usize) -> usize {
    key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + header_bytes + RECORD_OVERHEAD_BYTES
}

/// The bytes of headers' names and values, as [`record_size`] counts them.
pub fn header_bytes<'h>(headers: impl IntoIterator<Item = (&'h [u8], Option<&'h [u8]>)>) -> usize {
    headers
        .into_iter()
        .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
        .sum()
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a record of `topic`/`partition`; `record.slot` is filled in.
    pub fn push(&mut self, topic: &str, partition: i32, mut record: BatchRecord, now: Instant) {
        // Records come in runs per partition: try the partition of the previous record first.
        let last = self.records.last().map(|r| r.slot).filter(|&s| {
            let tp = &self.partitions[s].tp;
            tp.partition == partition && tp.topic == topic
        });
        let found = last.or_else(|| {
            self.index
                .get(topic)
                .and_then(|v| v.iter().find(|(p, _)| *p == partition))
                .map(|(_, slot)| *slot)
        });
        let slot = match found {
            Some(slot) => slot,
            None => {
                let slot = self.partitions.len();
                self.partitions.push(BatchPartition {
                    tp: TopicPartitionRef {
                        topic: topic.to_string(),
                        partition,
                    },
                    first: record.offset,
                    last: record.offset,
                    count: 0,
                });
                self.index
                    .entry(topic.to_string())
                    .or_default()
                    .push((partition, slot));
                slot
            }
        };
        let part = &mut self.partitions[slot];
        part.last = record.offset;
        part.count += 1;
        record.slot = slot;
        self.bytes += record.window_size();
        self.held += usize::from(!record.sent);
        self.opened_at.get_or_insert(now);
        self.records.push(record);
    }

    /// Replaces the payload of the last record with `record`'s (same offset; a record
    /// the producer could not take after all is kept to be sent later).
    pub fn hold_last(&mut self, record: BatchRecord) {
        if let Some(last) = self.records.last_mut() {
            debug_assert_eq!(last.offset, record.offset);
            let slot = last.slot;
            self.bytes = self.bytes - last.window_size() + record.window_size();
            self.held = self.held + usize::from(!record.sent) - usize::from(!last.sent);
            *last = BatchRecord { slot, ..record };
        }
    }

    /// Frees key, value and headers of every record (the producer holds its own copy once a
    /// record is sent); offsets, sizes and timestamps stay. `key()`/`value()` are `None`
    /// afterwards.
    pub fn release_payloads(&mut self) {
        if std::mem::take(&mut self.held) == 0 {
            return;
        }
        for r in &mut self.records {
            r.payload = None;
        }
    }

    /// Records in consumption order (per partition: source order).
    pub fn records(&self) -> &[BatchRecord] {
        &self.records
    }

    /// Partitions in the batch, in order of first appearance.
    pub fn partitions(&self) -> &[BatchPartition] {
        &self.partitions
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes counted so far.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the batch reached a bound and must be written before consuming more.
    pub fn is_full(&self, limits: &BatchLimits) -> bool {
        self.fill().is_full(limits)
    }

    /// How full and how old the batch is.
    pub fn fill(&self) -> Fill {
        Fill {
            records: self.records.len(),
            bytes: self.bytes,
            opened_at: self.opened_at,
        }
    }

    /// When the first record arrived (`None` while empty).
    pub fn opened_at(&self) -> Option<Instant> {
        self.opened_at
    }

    /// Empties the batch.
    pub fn clear(&mut self) {
        self.records.clear();
        self.partitions.clear();
        self.index.clear();
        self.bytes = 0;
        self.opened_at = None;
        self.held = 0;
    }
}

/// What happened to one partition's records of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOutcome<E> {
    /// `(source offset, target offset)` of the records delivered before the first failure,
    /// in order.
    pub delivered: Vec<(i64, i64)>,
    /// The first record that failed: its source offset and the error. Later records of the
    /// partition do not count, delivered or not: the partition stops at the failure.
    pub failure: Option<(i64, E)>,
    /// Next source offset to replicate: the failed record, or one past the last delivered.
    pub next_offset: i64,
}

/// Folds per-record results (same order as [`Batch::records`]; `Ok(target offset)`) into
/// per-partition outcomes, in the order of [`Batch::partitions`]. A missing result (the
/// record was never sent because an earlier one of its partition failed) counts as not
/// delivered.
pub fn partition_outcomes<E: Clone>(
    batch: &Batch,
    results: &[Option<Result<i64, E>>],
) -> Vec<PartitionOutcome<E>> {
    let mut out: Vec<PartitionOutcome<E>> = batch
        .partitions
        .iter()
        .map(|p| PartitionOutcome {
            delivered: Vec::with_capacity(p.count),
            failure: None,
            next_offset: p.last + 1,
        })
        .collect();
    let mut stopped = vec![false; out.len()];
    for (i, record) in batch.records.iter().enumerate() {
        if stopped[record.slot] {
            continue;
        }
        let o = &mut out[record.slot];
        match results.get(i) {
            Some(Some(Ok(d))) => o.delivered.push((record.offset, *d)),
            Some(Some(Err(e))) => {
                o.failure = Some((record.offset, e.clone()));
                o.next_offset = record.offset;
                stopped[record.slot] = true;
            }
            // Never sent: the partition stops before it (never claim it delivered).
            Some(None) | None => {
                o.next_offset = record.offset;
                stopped[record.slot] = true;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn rec(offset: i64, size: usize) -> BatchRecord {
        BatchRecord::new(
            offset,
            None,
            Some(&vec![0; size]),
            None,
            Some(0),
            size + RECORD_OVERHEAD_BYTES,
        )
    }

    #[test]
    fn a_record_is_small_and_its_payload_boxed() {
        // The window's bookkeeping: 32 MiB of 1 KB records is 32,000 of these.
        assert!(std::mem::size_of::<BatchRecord>() <= 56);
        let kept = BatchRecord::new(3, None, Some(b""), None, Some(9), 12);
        assert_eq!(
            (kept.key(), kept.value()),
            (None, Some(&b""[..])),
            "null key, empty value"
        );
        let sent = BatchRecord::sent(3, Some(9), 12);
        assert_eq!(
            (sent.key(), sent.value(), sent.was_sent()),
            (None, None, true)
        );
    }

    #[test]
    fn a_record_counts_what_the_api_docs_say() {
        // `spec.workers.inFlightMiB`'s description (the CRD, README) names this figure.
        assert_eq!(RECORD_OVERHEAD_BYTES, 256);
        assert_eq!(record_size(Some(&[0; 12]), Some(&[0; 1024]), 0), 1292);
    }

    #[test]
    fn shares_of_the_limits() {
        let l = BatchLimits {
            max_records: 40_000,
            max_bytes: 16 << 20,
            linger: Duration::from_millis(100),
        };
        let cases = [
            (0, 40_000, 16 << 20),
            (1, 40_000, 16 << 20),
            (2, 20_000, 8 << 20),
            (4, 10_000, 4 << 20),
            (3, 13_333, (16 << 20) / 3),
        ];
        for (parts, records, bytes) in cases {
            let s = l.share(parts);
            assert_eq!(
                (s.max_records, s.max_bytes, s.linger),
                (records, bytes, l.linger),
                "{parts} parts"
            );
        }
        let tiny = BatchLimits {
            max_records: 3,
            max_bytes: 2,
            linger: Duration::ZERO,
        };
        assert_eq!((tiny.share(4).max_records, tiny.share(4).max_bytes), (1, 1));
    }

    #[test]
    fn records_keep_null_and_empty_keys_and_values_apart() {
        let h = || Some(OwnedHeaders::new());
        type Bytes<'a> = Option<&'a [u8]>;
        let cases: [(Bytes, Bytes); 6] = [
            (None, None),
            (Some(b""), None),
            (None, Some(b"")),
            (Some(b"k"), Some(b"value")),
            (None, Some(b"value")),
            (Some(b"key"), None),
        ];
        for (key, value) in cases {
            let r = BatchRecord::new(7, key, value, h(), Some(1), 99);
            assert_eq!((r.key(), r.value()), (key, value), "{key:?} {value:?}");
            assert_eq!((r.offset, r.timestamp, r.size), (7, Some(1), 99));
        }
        let mut b = Batch::new();
        b.push(
            "t",
            0,
            BatchRecord::new(0, Some(b"k"), Some(b"v"), h(), None, 66),
            Instant::now(),
        );
        b.release_payloads();
        let r = &b.records()[0];
        assert_eq!(
            (r.key(), r.value(), r.headers().is_none()),
            (None, None, true)
        );
        assert_eq!(
            (r.offset, r.size, b.bytes()),
            (0, 66, 66),
            "bookkeeping stays"
        );
    }

    #[test]
    fn a_payload_held_after_sent_records_is_released_too() {
        let now = Instant::now();
        let mut b = Batch::new();
        b.push("t", 0, BatchRecord::sent(0, None, 10), now);
        b.push("t", 0, BatchRecord::sent(1, None, 10), now);
        // The producer's queue was full: the last record keeps its payload for later.
        b.hold_last(BatchRecord::new(1, Some(b"k"), Some(b"v"), None, None, 12));
        assert_eq!(b.records()[1].value(), Some(&b"v"[..]));
        b.release_payloads();
        assert_eq!(b.records()[1].value(), None);
        assert_eq!(b.bytes(), 22);
        // Then a record read into the batch (not sent) after a release.
        b.push(
            "t",
            1,
            BatchRecord::new(5, None, Some(b"w"), None, None, 3),
            now,
        );
        b.release_payloads();
        assert_eq!(b.records()[2].value(), None);
    }

    #[test]
    fn fill_full_deadline_due() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let limits = BatchLimits {
            max_records: 4,
            max_bytes: 1000,
            linger: ms(50),
        };
        let fill = |records, bytes, opened_at| Fill {
            records,
            bytes,
            opened_at,
        };
        // (case, fill, now, full, deadline, due)
        let cases = [
            ("empty", Fill::default(), t0, false, None, false),
            (
                "young",
                fill(1, 10, Some(t0)),
                t0 + ms(49),
                false,
                Some(t0 + ms(50)),
                false,
            ),
            (
                "linger passed",
                fill(1, 10, Some(t0)),
                t0 + ms(50),
                false,
                Some(t0 + ms(50)),
                true,
            ),
            (
                "record bound",
                fill(4, 10, Some(t0)),
                t0,
                true,
                Some(t0 + ms(50)),
                true,
            ),
            (
                "byte bound",
                fill(1, 1000, Some(t0)),
                t0,
                true,
                Some(t0 + ms(50)),
                true,
            ),
            (
                "below both",
                fill(3, 999, Some(t0)),
                t0,
                false,
                Some(t0 + ms(50)),
                false,
            ),
        ];
        for (case, f, now, full, deadline, due) in cases {
            assert_eq!(f.is_full(&limits), full, "{case}: full");
            assert_eq!(f.deadline(&limits), deadline, "{case}: deadline");
            assert_eq!(f.is_due(&limits, now), due, "{case}: due");
        }
    }

    #[test]
    fn groups_by_partition_and_bounds() {
        let now = Instant::now();
        let limits = BatchLimits {
            max_records: 4,
            max_bytes: 1000,
            linger: Duration::from_millis(50),
        };
        let mut b = Batch::new();
        assert_eq!(b.fill().deadline(&limits), None);
        b.push("a", 0, rec(10, 1), now);
        b.push("b", 0, rec(3, 1), now + Duration::from_millis(5));
        b.push("a", 0, rec(11, 1), now);
        assert!(!b.is_full(&limits));
        b.push("a", 1, rec(0, 1), now);
        assert!(b.is_full(&limits), "record bound");
        assert_eq!(
            b.fill().deadline(&limits),
            Some(now + Duration::from_millis(50))
        );
        let parts: Vec<(String, i32, i64, i64, usize)> = b
            .partitions()
            .iter()
            .map(|p| (p.tp.topic.clone(), p.tp.partition, p.first, p.last, p.count))
            .collect();
        assert_eq!(
            parts,
            vec![
                ("a".into(), 0, 10, 11, 2),
                ("b".into(), 0, 3, 3, 1),
                ("a".into(), 1, 0, 0, 1)
            ]
        );
        let slots: Vec<usize> = b.records().iter().map(|r| r.slot).collect();
        assert_eq!(slots, vec![0, 1, 0, 2]);
        assert_eq!(b.bytes(), 4 * (1 + RECORD_OVERHEAD_BYTES));
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.bytes(), 0);
        assert!(b.partitions().is_empty());
        b.push("big", 0, rec(0, 2000), now);
        assert!(
            b.is_full(&limits),
            "byte bound; a single large record is a batch of its own"
        );
    }

    #[test]
    fn room_is_a_share_within_what_the_window_has_left() {
        let w = BatchLimits {
            max_records: 300,
            max_bytes: 3000,
            linger: Duration::from_millis(7),
        };
        // (parts, used records, used bytes) -> (records, bytes)
        let cases = [
            ((3, 0, 0), (100, 1000)),
            ((3, 150, 1000), (100, 1000)),
            ((3, 250, 0), (50, 1000)),
            ((3, 0, 2500), (100, 500)),
            ((3, 300, 0), (0, 1000)),
            ((3, 400, 4000), (0, 0)),
            ((1, 100, 100), (200, 2900)),
        ];
        for ((parts, r, b), want) in cases {
            let got = w.room(parts, (r, b));
            assert_eq!(
                (got.max_records, got.max_bytes),
                want,
                "parts {parts}, used ({r}, {b})"
            );
            assert_eq!(got.linger, w.linger);
        }
    }

    #[test]
    fn sent_records_keep_bookkeeping_and_a_held_one_gets_its_payload_back() {
        let now = Instant::now();
        let mut b = Batch::new();
        b.push("t", 0, BatchRecord::sent(5, Some(1), 70), now);
        b.push("t", 1, BatchRecord::sent(9, None, 80), now);
        assert_eq!((b.len(), b.bytes()), (2, 150));
        assert_eq!(b.records()[1].value(), None, "no payload kept once sent");
        assert!(
            b.records()[1].was_sent(),
            "not to be mistaken for a tombstone"
        );
        let held = BatchRecord::new(9, Some(b"k"), Some(b"vv"), None, Some(3), 67);
        b.hold_last(held);
        let last = &b.records()[1];
        assert_eq!(
            (
                last.slot,
                last.offset,
                last.key(),
                last.value(),
                last.timestamp
            ),
            (1, 9, Some(&b"k"[..]), Some(&b"vv"[..]), Some(3)),
            "slot kept, payload and timestamp from the held copy"
        );
        assert_eq!(b.bytes(), 70 + 67, "bytes follow the held copy");
        assert!(!last.was_sent() && b.records()[0].was_sent());
        assert_eq!(b.partitions()[1].count, 1);
    }

    #[test]
    fn record_size_counts_everything() {
        let headers = header_bytes([(&b"h"[..], Some(&b"12"[..])), (b"n", None)]);
        let size = record_size(Some(b"kk"), Some(b"vvv"), headers);
        assert_eq!(size, 2 + 3 + 1 + 2 + 1 + RECORD_OVERHEAD_BYTES);
        assert_eq!(record_size(None, None, 0), RECORD_OVERHEAD_BYTES);
    }

    #[test]
    fn outcomes_table() {
        let now = Instant::now();
        let mut b = Batch::new();
        // p0: 5, 6, 7 ; p1: 20, 21
        for (p, o) in [(0, 5), (1, 20), (0, 6), (1, 21), (0, 7)] {
            b.push("t", p, rec(o, 1), now);
        }
        type R = Option<Result<i64, &'static str>>;
        type Case = (&'static str, Vec<R>, Vec<PartitionOutcome<&'static str>>);
        let cases: Vec<Case> = vec![
            (
                "all delivered",
                vec![
                    Some(Ok(100)),
                    Some(Ok(7)),
                    Some(Ok(101)),
                    Some(Ok(8)),
                    Some(Ok(102)),
                ],
                vec![
                    PartitionOutcome {
                        delivered: vec![(5, 100), (6, 101), (7, 102)],
                        failure: None,
                        next_offset: 8,
                    },
                    PartitionOutcome {
                        delivered: vec![(20, 7), (21, 8)],
                        failure: None,
                        next_offset: 22,
                    },
                ],
            ),
            (
                "failure in the middle stops the partition there; later successes ignored",
                vec![
                    Some(Ok(100)),
                    Some(Ok(7)),
                    Some(Err("too large")),
                    Some(Ok(8)),
                    Some(Ok(102)),
                ],
                vec![
                    PartitionOutcome {
                        delivered: vec![(5, 100)],
                        failure: Some((6, "too large")),
                        next_offset: 6,
                    },
                    PartitionOutcome {
                        delivered: vec![(20, 7), (21, 8)],
                        failure: None,
                        next_offset: 22,
                    },
                ],
            ),
            (
                "unsent record without a failure: the partition stops before it",
                vec![Some(Ok(100)), Some(Ok(7)), None, Some(Ok(8)), Some(Ok(102))],
                vec![
                    PartitionOutcome {
                        delivered: vec![(5, 100)],
                        failure: None,
                        next_offset: 6,
                    },
                    PartitionOutcome {
                        delivered: vec![(20, 7), (21, 8)],
                        failure: None,
                        next_offset: 22,
                    },
                ],
            ),
            (
                "first record fails, rest never sent",
                vec![Some(Err("x")), Some(Ok(7)), None, Some(Ok(8)), None],
                vec![
                    PartitionOutcome {
                        delivered: vec![],
                        failure: Some((5, "x")),
                        next_offset: 5,
                    },
                    PartitionOutcome {
                        delivered: vec![(20, 7), (21, 8)],
                        failure: None,
                        next_offset: 22,
                    },
                ],
            ),
        ];
        for (name, results, want) in cases {
            assert_eq!(partition_outcomes(&b, &results), want, "{name}");
        }
    }
}
