//! What a batch's delivery results mean, and what committing it writes. Pure.
//!
//! [`judge`] reads the per-record results: stop the worker (fenced, or the target cannot
//! store the records), retry the batch, replay the other partitions (a refusal poisoned the
//! transaction), or commit what was delivered; partitions whose record was refused for good
//! stop, and a size refusal that may cover a whole produce batch first retries its partition
//! one record per request ("careful"). [`commit_plan`] builds the offset syncs and progress
//! records of a batch that commits, and what its commit changes.

use std::collections::{BTreeSet, HashMap};

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::super::batch::{partition_outcomes, Batch, PartitionOutcome, RECORD_OVERHEAD_BYTES};
use super::super::partitions::PartitionTable;
use super::super::reset::reset_marker;
use super::super::syncs::{EmittedSync, SyncEmitter};
use super::super::writer::{classify_error, describe_error, ErrorClass};
use crate::api::TopicPartitionRef;
use crate::kafka::wire::Progress;

/// A record's delivery: its target offset, or why it failed. Boxed: failures are rare, and
/// every record of the window has one of these (16 bytes, not 48).
pub type RecordResult = Result<i64, Box<RecordFailure>>;

/// A record-level failure from a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordFailure {
    /// What it means for the batch.
    pub class: ErrorClass,
    /// The client's or broker's message.
    pub message: String,
    /// Refused by the client before it was sent (the transaction is not affected).
    pub at_enqueue: bool,
    /// A size limit: the broker may have refused a whole produce batch for one record.
    pub size_related: bool,
    /// The error code, when there is one.
    pub code: Option<RDKafkaErrorCode>,
    /// Its category (the `reason` of `errors_total`).
    pub kind: crate::kafka::error::ErrorKind,
}

impl crate::telemetry::metrics::Categorized for RecordFailure {
    fn reason(&self) -> &'static str {
        self.kind.as_str()
    }
}

impl RecordFailure {
    /// The failure of a record the client refused (`at_enqueue`) or the broker reported.
    pub fn from_error(e: &KafkaError, at_enqueue: bool) -> Self {
        let size_related = matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge)
        );
        Self {
            class: classify_error(e),
            message: describe_error(e),
            at_enqueue,
            size_related,
            code: e.rdkafka_error_code(),
            kind: crate::kafka::Error::Rdkafka(e.clone()).kind(),
        }
    }

    /// A record whose delivery report never came.
    pub fn no_report() -> Self {
        // The report did not come within the delivery timeout.
        Self::unreported(
            "no delivery report for the record",
            crate::kafka::error::ErrorKind::Timeout,
        )
    }

    /// A record whose delivery report will not come: `why` says why, `kind` is its category
    /// (no client error names one).
    pub fn unreported(why: &str, kind: crate::kafka::error::ErrorKind) -> Self {
        Self {
            class: ErrorClass::Retriable,
            message: why.into(),
            at_enqueue: false,
            size_related: false,
            code: None,
            kind,
        }
    }
}

/// The first record failure that is the target's authorizer refusing the write: its code
/// and message. Pure.
pub fn refused_write(results: &[Option<RecordResult>]) -> Option<(RDKafkaErrorCode, String)> {
    results
        .iter()
        .flatten()
        .filter_map(|r| r.as_ref().err())
        .find_map(|f| match f.code {
            Some(
                c @ (RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed),
            ) => Some((c, f.message.clone())),
            _ => None,
        })
}

/// What to do after a failed commit of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAction {
    /// The commit may still succeed (e.g. it timed out waiting for the coordinator): call it
    /// again; the transaction is neither aborted nor re-sent.
    Retry,
    /// The transaction did not commit and must be aborted: rewind and retry the batch.
    Abort,
    /// Another producer took over the transactional id.
    Fenced,
    /// The outcome is unknown (the producer broke mid-commit): the coordinator may still
    /// complete it. Recreate the producer (its init resolves the transaction) and read the
    /// positions back from the progress topic before writing again; re-sending blindly
    /// could write the batch twice.
    Unknown,
}

/// Decides after a failed commit from librdkafka's view of the error: `fatal`,
/// `requires_abort`, `retriable`, and whether it is fencing.
pub fn commit_action(
    fenced: bool,
    fatal: bool,
    requires_abort: bool,
    retriable: bool,
) -> CommitAction {
    match (fenced, fatal, requires_abort, retriable) {
        (true, ..) => CommitAction::Fenced,
        (_, true, ..) => CommitAction::Unknown,
        (_, _, true, _) => CommitAction::Abort,
        (_, _, _, true) => CommitAction::Retry,
        _ => CommitAction::Unknown,
    }
}

/// [`commit_action`] of a commit error.
pub fn commit_error_action(e: &KafkaError) -> CommitAction {
    match e {
        KafkaError::Transaction(t) => commit_action(
            classify_error(e) == ErrorClass::Fenced,
            t.is_fatal(),
            t.txn_requires_abort(),
            t.is_retriable(),
        ),
        _ => CommitAction::Unknown,
    }
}

/// What to do with a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Another worker took over the transactional id: stop (the broker's message).
    Fenced(String),
    /// The target cannot store these records at all: stop (the broker's message).
    Unsupported(String),
    /// Rewind and retry after a backoff; recreate the producer first if it broke.
    Retry {
        recreate_producer: bool,
        first_error: Box<RecordFailure>,
    },
    /// A record the broker refused inside the transaction poisoned it: abort, and replay
    /// the other partitions at once (the refused one is stopped or careful).
    Replay,
    /// Commit what was delivered.
    Commit,
}

/// A batch's verdict and what it means per partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub verdict: Verdict,
    /// Per partition of the batch (slot order).
    pub outcomes: Vec<PartitionOutcome<Box<RecordFailure>>>,
    /// Partitions whose record the target refused for good: `(slot, source offset, why)`.
    pub rejected: Vec<(usize, i64, Box<RecordFailure>)>,
    /// Partitions to retry one record per request: `(slot, source offset)`.
    pub careful: Vec<(usize, i64)>,
}

/// Judges the delivery `results` of `batch` (per record, batch order; `None`: no result).
/// `careful[slot]`: the partition was already sent one record per request.
pub fn judge(
    batch: &Batch,
    results: &[Option<RecordResult>],
    careful: &[bool],
    transactional: bool,
) -> Judgement {
    let mut retry = false;
    let mut recreate_producer = false;
    let mut abort_needed = false;
    for f in results.iter().flatten().filter_map(|r| r.as_ref().err()) {
        match f.class {
            ErrorClass::Fenced => return stop(Verdict::Fenced(f.message.clone())),
            ErrorClass::Unsupported => return stop(Verdict::Unsupported(f.message.clone())),
            ErrorClass::Rejected => abort_needed |= !f.at_enqueue,
            ErrorClass::ProducerBroken => {
                retry = true;
                recreate_producer = true;
            }
            ErrorClass::Retriable => retry = true,
        }
    }
    let outcomes = partition_outcomes(batch, results);
    let mut rejected = Vec::new();
    let mut to_careful = Vec::new();
    for (slot, o) in outcomes.iter().enumerate() {
        let Some((offset, f)) = &o.failure else {
            continue;
        };
        if f.class != ErrorClass::Rejected {
            continue;
        }
        if f.size_related && !f.at_enqueue && !careful.get(slot).copied().unwrap_or(false) {
            to_careful.push((slot, *offset));
        } else {
            rejected.push((slot, *offset, f.clone()));
        }
    }
    let verdict = if retry {
        Verdict::Retry {
            recreate_producer,
            first_error: results
                .iter()
                .flatten()
                .find_map(|r| r.as_ref().err())
                .cloned()
                // Unreachable: `retry` is set by a failure.
                .unwrap_or_else(|| Box::new(RecordFailure::no_report())),
        }
    } else if abort_needed && transactional {
        Verdict::Replay
    } else {
        Verdict::Commit
    };
    Judgement {
        verdict,
        outcomes,
        rejected,
        careful: to_careful,
    }
}

fn stop(verdict: Verdict) -> Judgement {
    Judgement {
        verdict,
        outcomes: Vec::new(),
        rejected: Vec::new(),
        careful: Vec::new(),
    }
}

/// What committing a batch writes and changes.
#[derive(Debug, Clone)]
pub struct CommitPlan {
    /// Offset syncs, per partition slot in emission order.
    pub syncs: Vec<(usize, EmittedSync)>,
    /// The partitions' sync emitters once the syncs are written (slot order).
    pub emitters: Vec<Option<SyncEmitter>>,
    /// Progress: the batch's owned partitions (slot order), then other pending partitions
    /// (key order), then the worker's reset marker.
    pub progress: Vec<Progress>,
    /// The pending partitions outside the batch that `progress` persists.
    pub pending_written: Vec<TopicPartitionRef>,
    /// The reset marker among `progress`.
    pub marker: Option<String>,
    /// Records and payload bytes delivered, per source topic.
    pub counts: HashMap<String, (u64, u64)>,
    /// Timestamp of the last delivered record, per slot.
    pub last_timestamps: Vec<Option<i64>>,
}

/// The commit of `batch` given its `outcomes`: syncs (MM2 rules through each partition's
/// emitter, at most `lag_max` records apart), progress, counts.
pub fn commit_plan(
    batch: &Batch,
    outcomes: &[PartitionOutcome<Box<RecordFailure>>],
    table: &PartitionTable,
    lag_max: i64,
    worker: (u32, u32),
) -> CommitPlan {
    let slots = batch.partitions();
    let mut syncs = Vec::new();
    let mut emitters: Vec<Option<SyncEmitter>> = vec![None; slots.len()];
    for (slot, o) in outcomes.iter().enumerate() {
        let Some(p) = table.get(&slots[slot].tp) else {
            continue;
        };
        let mut e = p.emitter.clone();
        let mut out = Vec::new();
        for (u, d) in &o.delivered {
            e.on_record(*u, *d, lag_max, &mut out);
        }
        out.extend(e.on_flush());
        syncs.extend(out.into_iter().map(|s| (slot, s)));
        emitters[slot] = Some(e);
    }
    let mut progress = Vec::new();
    let mut in_batch: BTreeSet<&TopicPartitionRef> = BTreeSet::new();
    for (slot, o) in outcomes.iter().enumerate() {
        let tp = &slots[slot].tp;
        in_batch.insert(tp);
        if let Some(p) = table.get(tp) {
            progress.push(p.progress(tp, o.next_offset));
        }
    }
    let mut pending_written = Vec::new();
    for (tp, p) in table.pending().filter(|(tp, _)| !in_batch.contains(tp)) {
        pending_written.push(tp.clone());
        if let Some(pos) = p.position {
            progress.push(p.progress(tp, pos));
        }
    }
    let marker = table.pending_marker().map(str::to_string);
    if let Some(id) = &marker {
        progress.push(reset_marker(worker.0, worker.1, id));
    }
    // Counted per slot, then per topic: a topic key per record cost a String clone and a
    // hash each (perf: 4 % of the engine thread at 100 B records).
    let mut per_slot = vec![(0u64, 0u64); slots.len()];
    let mut last_timestamps = vec![None; slots.len()];
    let mut delivered: Vec<usize> = outcomes.iter().map(|o| o.delivered.len()).collect();
    for rec in batch.records() {
        let Some(left) = delivered.get_mut(rec.slot).filter(|n| **n > 0) else {
            continue;
        };
        *left -= 1;
        let c = &mut per_slot[rec.slot];
        c.0 += 1;
        c.1 += (rec.size - RECORD_OVERHEAD_BYTES) as u64;
        if rec.timestamp.is_some() {
            last_timestamps[rec.slot] = rec.timestamp;
        }
    }
    let mut counts: HashMap<String, (u64, u64)> = HashMap::new();
    for (slot, (n, bytes)) in per_slot.into_iter().enumerate() {
        if n > 0 {
            let c = counts.entry(slots[slot].tp.topic.clone()).or_default();
            c.0 += n;
            c.1 += bytes;
        }
    }
    CommitPlan {
        syncs,
        emitters,
        progress,
        pending_written,
        marker,
        counts,
        last_timestamps,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::replicate::batch::{record_size, BatchRecord};
    use crate::worker::replicate::partitions::Start;
    use pretty_assertions::assert_eq;
    use std::time::Instant;
    use ErrorClass::*;

    fn batch(records: &[(&str, i32, i64)]) -> Batch {
        let mut b = Batch::new();
        let now = Instant::now();
        for (t, p, o) in records {
            let size = record_size(Some(b"k"), Some(b"value"), 0);
            b.push(
                t,
                *p,
                BatchRecord::new(*o, Some(b"k"), Some(b"value"), None, Some(100 + o), size),
                now,
            );
        }
        b
    }

    fn fail(class: ErrorClass, at_enqueue: bool, size_related: bool) -> Option<RecordResult> {
        Some(Err(Box::new(RecordFailure {
            class,
            message: format!("{class:?}"),
            at_enqueue,
            size_related,
            code: None,
            kind: crate::kafka::error::ErrorKind::Broker,
        })))
    }

    type Results = Vec<Option<RecordResult>>;

    fn ok(d: i64) -> Option<RecordResult> {
        Some(Ok(d))
    }

    #[test]
    fn a_write_the_authorizer_refused_is_found_among_the_failures() {
        use RDKafkaErrorCode as C;
        let with = |code| {
            let mut f = fail(ErrorClass::Retriable, false, false);
            if let Some(Err(e)) = &mut f {
                e.code = Some(code);
                e.message = format!("{code:?}");
            }
            f
        };
        // (results, refusal found)
        let cases: [(Results, Option<C>); 5] = [
            (vec![ok(1), ok(2)], None),
            (vec![ok(1), with(C::PurgeQueue), None], None),
            (
                vec![with(C::PurgeQueue), with(C::TopicAuthorizationFailed)],
                Some(C::TopicAuthorizationFailed),
            ),
            (
                vec![None, with(C::ClusterAuthorizationFailed)],
                Some(C::ClusterAuthorizationFailed),
            ),
            (vec![fail(ErrorClass::Retriable, false, false)], None),
        ];
        for (results, want) in cases {
            assert_eq!(refused_write(&results).map(|(c, _)| c), want, "{results:?}");
        }
    }

    #[test]
    fn commit_actions() {
        use CommitAction::*;
        // (fenced, fatal, requires abort, retriable)
        let cases = [
            (
                "timed out waiting for the coordinator",
                (false, false, false, true),
                Retry,
            ),
            ("coordinator aborted it", (false, false, true, false), Abort),
            (
                "abortable and retriable: abort",
                (false, false, true, true),
                Abort,
            ),
            ("fenced", (true, true, false, false), Fenced),
            (
                "fatal, not fencing: unknown outcome",
                (false, true, false, false),
                Unknown,
            ),
            ("nothing to go by", (false, false, false, false), Unknown),
        ];
        for (name, (fenced, fatal, abort, retriable), want) in cases {
            assert_eq!(
                commit_action(fenced, fatal, abort, retriable),
                want,
                "{name}"
            );
        }
        assert_eq!(commit_error_action(&KafkaError::Canceled), Unknown);
    }

    #[test]
    fn verdicts() {
        let b = batch(&[("a", 0, 10), ("a", 0, 11), ("b", 0, 5)]);
        let retry = |e: Option<RecordResult>, recreate| Verdict::Retry {
            recreate_producer: recreate,
            first_error: e.unwrap().unwrap_err(),
        };
        #[rustfmt::skip]
        let cases: Vec<(&str, Results, bool, Verdict)> = vec![
            ("all delivered", vec![ok(0), ok(1), ok(0)], false, Verdict::Commit),
            ("a record never reported", vec![ok(0), Some(Err(Box::new(RecordFailure::no_report()))), ok(0)], false, retry(Some(Err(Box::new(RecordFailure::no_report()))), false)),
            ("retriable", vec![ok(0), fail(Retriable, false, false), ok(0)], false, retry(fail(Retriable, false, false), false)),
            ("broken producer", vec![fail(ProducerBroken, false, false), ok(1), ok(0)], true, retry(fail(ProducerBroken, false, false), true)),
            ("fenced wins", vec![fail(Retriable, false, false), fail(Fenced, false, false), ok(0)], true, Verdict::Fenced("Fenced".into())),
            ("unsupported stops", vec![ok(0), ok(1), fail(Unsupported, false, false)], false, Verdict::Unsupported("Unsupported".into())),
            ("refused by the broker, transactional", vec![ok(0), fail(Rejected, false, false), ok(0)], true, Verdict::Replay),
            ("refused by the broker, idempotent", vec![ok(0), fail(Rejected, false, false), ok(0)], false, Verdict::Commit),
            ("refused at enqueue, transactional", vec![ok(0), fail(Rejected, true, false), ok(0)], true, Verdict::Commit),
            ("retry beats replay", vec![fail(Rejected, false, false), ok(1), fail(Retriable, false, false)], true, retry(fail(Rejected, false, false), false)),
        ];
        for (name, results, transactional, want) in cases {
            let j = judge(&b, &results, &[false, false], transactional);
            assert_eq!(j.verdict, want, "{name}");
        }
    }

    #[test]
    fn refusals_stop_partitions_or_go_one_record_at_a_time() {
        let b = batch(&[("a", 0, 10), ("a", 0, 11), ("b", 0, 5), ("c", 0, 1)]);
        #[rustfmt::skip]
        type Case = (&'static str, Results, [bool; 3], Vec<(usize, i64, String)>, Vec<(usize, i64)>);
        let cases: Vec<Case> = vec![
            (
                "size refusal of a produce batch: careful first",
                vec![ok(0), fail(Rejected, false, true), ok(0), ok(0)],
                [false; 3],
                vec![],
                vec![(0, 11)],
            ),
            (
                "size refusal while careful: stop",
                vec![ok(0), fail(Rejected, false, true), ok(0), ok(0)],
                [true, false, false],
                vec![(0, 11, "Rejected".into())],
                vec![],
            ),
            (
                "size refusal at enqueue: the record itself",
                vec![ok(0), ok(1), fail(Rejected, true, true), ok(0)],
                [false; 3],
                vec![(1, 5, "Rejected".into())],
                vec![],
            ),
            (
                "policy refusal: stop",
                vec![ok(0), ok(1), ok(0), fail(Rejected, false, false)],
                [false; 3],
                vec![(2, 1, "Rejected".into())],
                vec![],
            ),
            (
                "retriable stops nobody",
                vec![ok(0), ok(1), fail(Retriable, false, false), ok(0)],
                [false; 3],
                vec![],
                vec![],
            ),
        ];
        for (name, results, careful, rejected, to_careful) in cases {
            let j = judge(&b, &results, &careful, false);
            let got: Vec<(usize, i64, String)> = j
                .rejected
                .into_iter()
                .map(|(slot, offset, f)| (slot, offset, f.message))
                .collect();
            assert_eq!((got, j.careful), (rejected, to_careful), "{name}");
        }
    }

    fn table(parts: &[(&str, i32, i64)]) -> PartitionTable {
        let mut t = PartitionTable::default();
        for (topic, p, pos) in parts {
            let k = TopicPartitionRef {
                topic: topic.to_string(),
                partition: *p,
            };
            t.take(&k, &format!("dc1.{topic}"), 1, false);
            t.start(&k, &Start::Fresh(*pos), false);
            t.clear_pending(&k);
        }
        t
    }

    #[test]
    fn counts_add_up_the_partitions_of_a_topic() {
        let t = table(&[("a", 0, 0), ("a", 1, 0), ("b", 0, 0)]);
        let b = batch(&[("a", 0, 0), ("a", 1, 0), ("b", 0, 0), ("a", 1, 1)]);
        let results = vec![ok(0), ok(0), ok(0), ok(1)];
        let j = judge(&b, &results, &[false; 3], false);
        let plan = commit_plan(&b, &j.outcomes, &t, 100, (0, 1));
        let (n, bytes) = plan.counts["b"];
        assert_eq!(n, 1);
        assert_eq!(plan.counts["a"], (3, 3 * bytes));
        assert_eq!(plan.counts.len(), 2);
    }

    // A record sent without a copy counts its held fetch event in the window, not in the
    // bytes replicated.
    #[test]
    fn bytes_counted_are_the_records_own_with_or_without_a_copy() {
        let t = table(&[("a", 0, 0)]);
        let mut b = Batch::new();
        let size = record_size(Some(b"k"), Some(&[0; 1000]), 5);
        for (o, held) in [(0, false), (1, true)] {
            let r = BatchRecord::sent(o, None, size).with_held(held);
            b.push("a", 0, r, Instant::now());
        }
        assert_eq!(
            b.bytes(),
            2 * size + crate::worker::replicate::batch::HELD_OVERHEAD_BYTES
        );
        let j = judge(&b, &[ok(0), ok(1)], &[false], false);
        let plan = commit_plan(&b, &j.outcomes, &t, 100, (0, 1));
        assert_eq!(plan.counts["a"], (2, 2 * (1 + 1000 + 5)));
    }

    #[test]
    fn commit_plan_progress_order_and_counts() {
        let mut t = table(&[("a", 0, 10), ("b", 0, 5), ("c", 0, 0), ("d", 0, 3)]);
        let b = batch(&[("b", 0, 5), ("a", 0, 10), ("a", 0, 11), ("x", 0, 0)]);
        let results = vec![ok(100), ok(7), fail(Rejected, false, false), ok(0)];
        t.mark_pending(&TopicPartitionRef {
            topic: "d".into(),
            partition: 0,
        });
        t.mark_pending(&TopicPartitionRef {
            topic: "a".into(),
            partition: 0,
        });
        t.set_pending_marker("r1");
        let j = judge(&b, &results, &[false; 3], false);
        let plan = commit_plan(&b, &j.outcomes, &t, 100, (0, 2));
        let progress: Vec<(String, i32, i64)> = plan
            .progress
            .iter()
            .map(|p| (p.topic.clone(), p.partition, p.next_offset))
            .collect();
        // Batch partitions first (x is not owned: no progress), then pending others, then
        // the marker; the refused record is where "a" resumes.
        assert_eq!(
            progress,
            vec![
                ("b".into(), 0, 6),
                ("a".into(), 0, 11),
                ("d".into(), 0, 3),
                (String::new(), -1, 2),
            ]
        );
        assert_eq!(
            plan.pending_written,
            vec![TopicPartitionRef {
                topic: "d".into(),
                partition: 0
            }]
        );
        assert_eq!(plan.marker.as_deref(), Some("r1"));
        assert_eq!(
            plan.counts.get("a"),
            Some(&(1, 1 + 5)),
            "only delivered records count"
        );
        assert_eq!(plan.counts.get("b"), Some(&(1, 6)));
        // Delivered records of a partition no longer owned still count (they are on the target).
        assert_eq!(plan.last_timestamps, vec![Some(105), Some(110), Some(100)]);
        // First record of each emitter: a sync for each delivered partition.
        let synced: Vec<(usize, i64, i64)> = plan
            .syncs
            .iter()
            .map(|(s, e)| (*s, e.upstream, e.downstream))
            .collect();
        assert_eq!(synced, vec![(0, 5, 100), (1, 10, 7)]);
        assert!(plan.emitters[2].is_none(), "not owned");
    }
}
