//! The replication loop of one worker.
//!
//! One task owns everything: a source consumer (manual `assign`, no group membership), the
//! target producer, the batch, and the state of every owned partition. Records are consumed
//! into a bounded [`Batch`]; a batch is written when it is full or its linger time passed:
//! records, then offset syncs and progress. ExactlyOnce: one transaction per batch, one at a
//! time. AtLeastOnce: pipelined (see the `replicate` module docs): records are handed to
//! the producer as they are read (`Engine::on_message`, `Sending`), and batches are sealed
//! while earlier ones await their delivery reports (`Dispatched`, collected per batch by
//! `delivery::Tracker`), finished oldest first, their syncs and progress acknowledged in
//! the background (`MetaPending`). While a write waits, the next records are read ahead.
//! Anything that changes the assignment (topic refresh, pause, a failed partition, a rewind
//! after a failed batch) drops the later batches and the open one and is applied from the
//! committed positions, so the consumer never runs ahead of what the target holds.
//!
//! # Offset validation (`spec.offsetValidation.enabled`, default true)
//!
//! The consumer runs with `auto.offset.reset=error`: librdkafka never moves a position by
//! itself. Partitions without progress start at an explicit offset (log start, or the end
//! for `startFrom: Latest` at first start), so only a known position can fail. A failed
//! partition stops (it is unassigned; nothing more is written for it, its committed position
//! is kept) while the others go on. It is logged once at error level, counted in
//! `mirrorflow_worker_partition_failures_total{type}`, and reported in the snapshot's
//! `failures` with the message and `kubectl patch` command built by
//! `worker::validation::classify`.
//!
//! Signals, where they are read, and what each can miss:
//! 1. **Out of range** (librdkafka `AutoOffsetReset` / `LogTruncation` on the consumer): the
//!    source refused our position. rdkafka drops the partition of consumer errors, so
//!    `validate::attribute_out_of_range` ties the error to partitions: those whose
//!    position lies outside `[log start, high watermark]` (ListOffsets) or whose topic id
//!    changed; else the only assigned partition; else nobody (warned, retried with backoff;
//!    librdkafka keeps refusing a real one). Classified by the log start: log start >
//!    position → DataLoss (exact count); otherwise TopicReset; recreated and purged →
//!    DataLoss; failed lookup → DataLoss with unknown counts. Misses every case where the
//!    position stays fetchable: a recreated topic that already holds more records than our
//!    position, and — nisshi and tansu answer a fetch past the high watermark with no error —
//!    a shorter one too.
//! 2. **Topic id** (KIP-516, DescribeTopics through `kafka::topic_id`): the id is recorded
//!    when a partition is first checked and persisted in its progress record
//!    (`Progress.topic_id`), then compared at start (before the partition is assigned) and on
//!    every periodic check. Certain proof of recreation. Misses: brokers without ids (before
//!    Kafka 2.8, or answering the zero id) and clusters where DescribeTopics fails (e.g. no
//!    controller: the librdkafka mock); after a failed lookup ids are not asked for
//!    [`TOPIC_ID_RETRY`]. Records of the new topic fetched between its creation and the next
//!    check are written before the check stops the partition (at most one refresh interval:
//!    librdkafka itself ignores id changes); they stay on the target, and a later
//!    `RestartFromEarliest` replicates the new topic again from its start.
//! 3. **Watermarks** (`fetch_watermarks` = ListOffsets on every owned partition each
//!    `topics.refreshIntervalSeconds`, busy or idle, paused included): high watermark below
//!    the highest seen, or our position past the high watermark → TopicReset (the shorter
//!    recreated topic); log start back to 0 from above 0 → TopicReset; log start past our
//!    position → DataLoss (an idle or paused partition whose unreplicated records were
//!    purged: no fetch, so no error, would ever report it). A TopicReset that rests only on
//!    the ListOffsets high watermark stops the partition only if a Fetch agrees (the
//!    consumer's last fetch response for a partition it fetches, else a probe consumer;
//!    `validate::needs_fetch_confirmation`): one ListOffsets answer can be wrong (a new
//!    leader before Kafka 2.2; tansu always answers "last batch base + 1"). While the
//!    consumer is fetching the partition, a bare "log start past position" is deferred to
//!    the next check (the records may sit in librdkafka's prefetch queue). Highest
//!    watermarks live in memory: after a restart only the recorded topic id and the current
//!    watermarks count. Misses: without topic ids, a topic recreated between two checks that
//!    already holds at least as many records as the highest high watermark seen (and whose
//!    old log started at 0); and a failure detected by watermarks only is detected again
//!    after a restart only while the evidence persists (the failure itself is not
//!    persisted: `Progress` has no field for it).
//! 4. **Leader epochs**: not read (rdkafka 0.39 exposes none; see `classify.rs`).
//!
//! A source topic that disappears (deleted, or deselected) parks its partitions with their
//! positions, marks and failures; if it comes back, it resumes from there and is checked
//! like any other (a recreated topic is then caught by signal 2 or 3).
//!
//! Recovery: `spec.reset` (see `worker::validation::reset`), scoped to this worker's own
//! partitions by `validate::plan_worker_reset`, handled at most once per id: the id is
//! persisted in the reset partitions' progress (`Progress.reset_id`) and in a per-worker
//! marker record (`validate::handled_reset_ids` reads them back at start). A reset sets a
//! new baseline (current topic id and watermarks) so the new log is not flagged again.
//!
//! With validation disabled the consumer runs with `auto.offset.reset=earliest` and no check
//! runs: MirrorMaker 2's behaviour (an out-of-range position silently moves to the log
//! start; nothing is reported).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::watch;
use tracing::{debug, error, info, warn};

use super::batch::{partition_outcomes, record_size, Batch, BatchLimits, BatchRecord};
use super::delivery::{DeliveryContext, DeliveryReport, GroupHandle};
use super::io::{self, Admin, LogContext, MetaClient};
use super::select::{target_topic_action, TargetTopicAction, TopicDecision, TopicFilter};
use super::status::{
    total_lag, validation_failures, worker_id, worker_state, FailureKind, PartitionFailed,
    PartitionSnapshot, PartitionState, StatusSink, WorkerSnapshot,
};
use super::syncs::{EmittedSync, SyncEmitter};
use super::writer::{
    classify_code, classify_error, describe_error, ErrorClass, ProducerLimits, TargetWriter,
};
use crate::api::{
    AppliedReset, Delivery, MirrorFlowSpec, StartFrom, TopicPartitionRef, WorkerState,
};
use crate::kafka::config::{client_properties, ClientProperties};
use crate::kafka::wire::{
    offset_syncs_topic, progress_topic, OffsetSync, Progress, SYNC_SEQUENCE_HEADER,
};
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::{ErrorKind, WorkerMetrics};
use crate::worker::validation::classify::{
    check_partition, Detection, FlowRef, KnownPartition, PartitionObservation, ReportedFailures,
};
use crate::worker::validation::reset::{failed_status, ResetDecision, SeekTarget};
use validate::{
    attribute_out_of_range, defer_while_fetching, failure_counter, failure_kind_name,
    handled_reset_ids, kind_of, needs_fetch_confirmation, nothing_here_status, plan_worker_reset,
    reset_marker, Attribution, OutOfRangeCandidate, WorkerReset,
};

mod validate;

pub use validate::reset_marker_partition;

/// After a failed topic id lookup, ids are not asked for this long (other signals go on).
pub const TOPIC_ID_RETRY: Duration = Duration::from_secs(300);

/// Knobs with safe defaults. The memory bound of a worker follows from them (see the
/// `replicate` module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Batch bounds.
    pub batch: BatchLimits,
    /// Producer bounds and timeouts.
    pub producer: ProducerLimits,
    /// Consumer prefetch bound, `queued.max.messages.kbytes` (unless set in `source.config`).
    pub consumer_queue_kbytes: u32,
    /// `fetch.max.bytes` (unless set in `source.config`).
    pub fetch_max_bytes: u32,
    /// AtLeastOnce: batches sent to the target before the oldest one's delivery reports are
    /// in, and batches whose syncs and progress may await acknowledgement (1 = one at a
    /// time). `batch` then bounds all of them together, so after a crash at most
    /// `batch.max_records` records are replicated again.
    pub pipeline_depth: usize,
    /// Bound of metadata, admin and watermark calls, and of reading progress.
    pub io_timeout: Duration,
    /// How often the status is published and lag gauges refreshed between refreshes.
    pub status_interval: Duration,
    /// First retry delay after a failed batch or start step; doubles up to `retry_max`.
    pub retry_min: Duration,
    /// Longest retry delay.
    pub retry_max: Duration,
    /// On shutdown, how long an open batch may take to commit before it is aborted.
    pub shutdown_grace: Duration,
    /// Bound of offset validation's own lookups: topic ids (DescribeTopics) and the fetch
    /// that confirms a ListOffsets answer. Short: on a cluster that reports no controller the
    /// id lookup only ends with this timeout (then ids are skipped for [`TOPIC_ID_RETRY`]).
    pub validation_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            batch: BatchLimits::default(),
            producer: ProducerLimits::default(),
            // Sized for ≤ 64 MiB RSS at 1,000 partitions (measured by benches/replication.rs).
            consumer_queue_kbytes: 4 * 1024,
            fetch_max_bytes: 2 * 1024 * 1024,
            pipeline_depth: 2,
            io_timeout: Duration::from_secs(30),
            status_interval: Duration::from_secs(2),
            retry_min: Duration::from_millis(200),
            retry_max: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            validation_timeout: Duration::from_secs(5),
        }
    }
}

impl Tuning {
    /// The defaults with the flow's window (`spec.workers.inFlightMiB`, read at start: the
    /// controller restarts workers when it changes).
    pub fn for_spec(spec: &MirrorFlowSpec) -> Self {
        let mut t = Self::default();
        let mib = usize::try_from(spec.workers.in_flight_mib.max(1)).unwrap_or(1);
        t.batch.max_bytes = mib << 20;
        t
    }
}

/// Who this worker is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineSettings {
    /// Namespace of the flow (`default` in standalone mode unless the file says otherwise).
    pub namespace: String,
    /// Flow name.
    pub flow_name: String,
    /// This worker's index.
    pub worker_index: u32,
    /// Number of workers of the flow.
    pub worker_count: u32,
    /// Where Secret references resolve (`<dir>/<secretName>/<key>`).
    pub secrets_dir: PathBuf,
    /// Knobs.
    pub tuning: Tuning,
}

impl EngineSettings {
    /// `mirrorflow-<ns>-<flow>-<index>`.
    pub fn transactional_id(&self) -> String {
        format!(
            "mirrorflow-{}-{}-{}",
            self.namespace, self.flow_name, self.worker_index
        )
    }
}

/// Why the engine stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The worker cannot replicate: bad configuration, fenced, or the target cannot provide
    /// the requested delivery guarantee. The message says what to do.
    #[error("{0}")]
    Fatal(String),
}

/// Where the engine reports.
#[derive(Clone)]
pub struct EngineOutputs {
    /// Metrics.
    pub metrics: WorkerMetrics,
    /// Status snapshots.
    pub sink: Arc<dyn StatusSink>,
    /// Readiness for `/readyz`.
    pub readiness: Arc<Readiness>,
}

/// A writer epoch for a fresh [`SyncEmitter`]: increasing within the process and, being
/// clock based (µs), across restarts.
fn fresh_epoch() -> i64 {
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

/// One owned source partition.
#[derive(Debug)]
struct Owned {
    target_topic: String,
    state: PartitionState,
    /// Next source offset to replicate, as committed (or about to be, see `pending_progress`).
    position: Option<i64>,
    /// Next offset expected from the consumer (drops stale records after a re-assign).
    fetched: Option<i64>,
    emitter: SyncEmitter,
    /// Watermarks at the last lookup (lag, status).
    low: Option<i64>,
    high: Option<i64>,
    lag_seconds: Option<f64>,
    /// Source topic id recorded for this partition (persisted in its progress); empty if
    /// unknown.
    topic_id: String,
    reset_id: String,
    /// Highest log start and high watermark seen through ListOffsets since the position was
    /// taken or reset (offset validation baseline; never from fetch responses).
    max_log_start: Option<i64>,
    max_high_watermark: Option<i64>,
    /// A record of this partition arrived since the last periodic check.
    fetched_since_check: bool,
    /// Send one record per produce request (after a size refusal of a whole batch).
    careful: bool,
}

impl Owned {
    fn new(target_topic: String) -> Self {
        Self {
            target_topic,
            state: PartitionState::Starting,
            position: None,
            fetched: None,
            emitter: SyncEmitter::new(fresh_epoch()),
            low: None,
            high: None,
            lag_seconds: None,
            topic_id: String::new(),
            reset_id: String::new(),
            max_log_start: None,
            max_high_watermark: None,
            fetched_since_check: false,
            careful: false,
        }
    }

    /// What validation knows about this partition at `position`.
    fn known(&self, tp: &TopicPartitionRef, position: i64) -> KnownPartition {
        KnownPartition {
            tp: tp.clone(),
            position,
            topic_id: (!self.topic_id.is_empty()).then(|| self.topic_id.clone()),
            high_watermark: self.max_high_watermark,
            log_start: self.max_log_start,
            leader_epoch: None,
        }
    }

    /// Folds in a healthy observation; true if the topic id was learned just now (persist it).
    fn record(
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

    /// A new baseline after a reset: the current log is the reference.
    fn rebase(&mut self, topic_id: Option<String>, log_start: i64, high: i64) {
        self.topic_id = topic_id.unwrap_or_default();
        self.max_log_start = Some(log_start);
        self.max_high_watermark = Some(high);
        self.fetched_since_check = false;
    }
}

/// Copies a consumed record out of librdkafka's buffer (one allocation for key and value;
/// headers are parsed once).
fn detach_record(m: &BorrowedMessage<'_>) -> BatchRecord {
    let (headers, size) = headers_and_size(m);
    BatchRecord::new(
        m.offset(),
        m.key(),
        m.payload(),
        headers,
        m.timestamp().to_millis(),
        size,
    )
}

/// A consumed record's headers (parsed once) and the size it counts in a batch.
fn headers_and_size(m: &BorrowedMessage<'_>) -> (Option<OwnedHeaders>, usize) {
    let (key, value) = (m.key(), m.payload());
    match m.headers() {
        Some(h) => {
            let list: Vec<(&str, Option<&[u8]>)> = h.iter().map(|x| (x.key, x.value)).collect();
            (Some(h.detach()), record_size(key, value, &list))
        }
        None => (None, record_size(key, value, &[])),
    }
}

/// Records read while a batch is written, bounded like a batch (so at most two batches of
/// records are held: the one being written and this one). Stops at the first consumer error,
/// which is handled with the records (an out-of-range error must be seen before more are
/// taken).
struct ReadAhead {
    open: bool,
    limits: BatchLimits,
    bytes: usize,
    /// Topics of the records, so a record carries an index instead of a copied name.
    topics: Vec<String>,
    items: Vec<Result<(usize, i32, BatchRecord), KafkaError>>,
}

impl ReadAhead {
    fn new(enabled: bool, limits: BatchLimits) -> Self {
        Self {
            open: enabled,
            limits,
            bytes: 0,
            topics: Vec::new(),
            items: Vec::new(),
        }
    }

    fn open(&self) -> bool {
        self.open
    }

    fn push(&mut self, r: Result<BorrowedMessage<'_>, KafkaError>) {
        match r {
            Ok(m) => {
                let topic = match self.topics.iter().rposition(|t| t == m.topic()) {
                    Some(i) => i,
                    None => {
                        self.topics.push(m.topic().to_string());
                        self.topics.len() - 1
                    }
                };
                let record = detach_record(&m);
                self.bytes += record.size;
                self.items.push(Ok((topic, m.partition(), record)));
            }
            Err(e) => {
                self.open = false;
                self.items.push(Err(e));
            }
        }
        if self.items.len() >= self.limits.max_records || self.bytes >= self.limits.max_bytes {
            self.open = false;
        }
    }

    /// Takes what librdkafka already has queued, without waiting.
    fn drain(&mut self, consumer: &StreamConsumer<LogContext>) {
        use futures::{FutureExt as _, StreamExt as _};
        // One stream for the whole drain: each `recv` registers and drops a waker slot.
        let mut stream = consumer.stream();
        while self.open {
            match stream.next().now_or_never() {
                Some(Some(r)) => self.push(r),
                _ => return,
            }
        }
    }
}

/// A record-level failure from a batch.
#[derive(Debug, Clone)]
struct RecordFailure {
    class: ErrorClass,
    message: String,
    /// Refused by the client before it was sent (the transaction is not affected).
    at_enqueue: bool,
    /// A size limit: the broker may have refused a whole produce batch for one record.
    size_related: bool,
}

impl RecordFailure {
    fn from_error(e: &KafkaError, at_enqueue: bool) -> Self {
        let size_related = matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge)
        );
        Self {
            class: classify_error(e),
            message: describe_error(e),
            at_enqueue,
            size_related,
        }
    }
}

/// Result of writing a batch.
enum WriteOutcome {
    Committed,
    /// Rewound; retry after a backoff.
    Retry,
    /// Rewound because a partition stopped; replay the others at once.
    Replay,
}

/// What was handed to the producer for one batch so far. Built by `dispatch`, or record by
/// record while the batch is read (AtLeastOnce, pipelined: `Engine::on_message`).
struct Sending {
    /// Where the delivery reports arrive.
    group: GroupHandle,
    /// Records `0..reserved` have a place in `group`.
    reserved: usize,
    /// Target topic per batch slot.
    targets: Vec<Option<String>>,
    /// Partitions sent one record per request, per slot.
    careful: Vec<bool>,
    /// Partitions not sent any further in this batch (a record was refused), per slot.
    stopped: Vec<bool>,
    /// Per record, once known (`Ok(target offset)`).
    results: Vec<Option<Result<i64, RecordFailure>>>,
    /// Records sent whose report is still to be collected from `group`.
    pending: Vec<usize>,
    /// Records handed to the producer.
    sent: usize,
    /// Records `0..next` of the batch were handled (sent, refused, or skipped).
    next: usize,
    sent_at: Instant,
}

impl Sending {
    fn new(group: GroupHandle, reserved: usize) -> Self {
        Self {
            group,
            reserved,
            targets: Vec::new(),
            careful: Vec::new(),
            stopped: Vec::new(),
            results: Vec::new(),
            pending: Vec::new(),
            sent: 0,
            next: 0,
            sent_at: Instant::now(),
        }
    }

    /// Extends the per-slot and per-record state to every partition and record of `batch`.
    fn cover(&mut self, batch: &Batch, owned: &BTreeMap<TopicPartitionRef, Owned>) {
        for p in &batch.partitions()[self.targets.len()..] {
            let o = owned.get(&p.tp);
            self.targets.push(o.map(|o| o.target_topic.clone()));
            self.careful.push(o.is_some_and(|o| o.careful));
            self.stopped.push(false);
        }
        self.results.resize(batch.len(), None);
    }

    /// Makes room in the group for record `index` (doubling, so the lock is rarely taken).
    fn reserve(&mut self, index: usize) {
        if index >= self.reserved {
            self.reserved = (2 * self.reserved).max(index + 1).max(1024);
            self.group.reserve(self.reserved);
        }
    }

    /// Record `index` (of partition `slot`) was refused before it was sent: the partition
    /// sends nothing more in this batch.
    fn refuse(&mut self, index: usize, slot: usize, e: &KafkaError) {
        self.results[index] = Some(Err(RecordFailure::from_error(e, true)));
        self.stopped[slot] = true;
    }

    /// Collects the reports of the records sent so far.
    fn collect(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let results = &mut self.results;
        self.group
            .take_each(&pending, |j, r| results[j] = Some(delivery_result(r)));
    }
}

/// A batch whose records were handed to the producer; delivery reports are pending.
struct Dispatched {
    batch: Batch,
    s: Sending,
}

/// A record for the producer (delivery opaque: `ticket`).
fn target_record<'a>(
    target: &'a str,
    ticket: usize,
    partition: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    timestamp: Option<i64>,
    headers: Option<OwnedHeaders>,
) -> BaseRecord<'a, [u8], [u8], usize> {
    let mut br = BaseRecord::with_opaque_to(target, ticket).partition(partition);
    if let Some(k) = key {
        br = br.key(k);
    }
    if let Some(v) = value {
        br = br.payload(v);
    }
    if let Some(ts) = timestamp {
        br = br.timestamp(ts);
    }
    if let Some(h) = headers {
        br = br.headers(h);
    }
    br
}

/// Waits until every record of the oldest dispatched batch has its delivery report.
async fn head_delivered(in_flight: &mut VecDeque<Dispatched>) {
    match in_flight.front_mut() {
        Some(d) => d.s.group.complete().await,
        None => std::future::pending().await,
    }
}

/// Offset syncs and progress of a finished batch, sent without transactions; their delivery
/// reports are pending.
struct MetaPending {
    group: GroupHandle,
    /// Records sent (indexes `0..sent` of `group`).
    sent: usize,
    /// Partitions whose position these progress records persist.
    progress: Vec<TopicPartitionRef>,
    /// The reset marker among them.
    marker: Option<String>,
    /// Records and bytes of the batch whose progress this is (still in the window).
    window: (usize, usize),
}

/// The first of records `0..sent` of `group` that was not delivered.
fn first_failure(group: &GroupHandle, sent: usize) -> Option<RecordFailure> {
    (0..sent).find_map(|j| delivery_result(group.take(j)).err())
}

/// Waits until the oldest syncs and progress in flight are acknowledged.
async fn meta_delivered(meta: &mut VecDeque<MetaPending>) {
    match meta.front_mut() {
        Some(m) => m.group.complete().await,
        None => std::future::pending().await,
    }
}

/// What a guarded write does.
#[derive(Debug, Clone, Copy)]
enum Job {
    /// Finish every dispatched batch, then write the open batch and pending progress.
    Open,
    /// Finish the oldest dispatched batch.
    Head,
}

/// Result of handing a batch to the producer.
enum Dispatch {
    /// Sent; finish it once its delivery reports are in.
    Sent(Dispatched),
    /// Nothing sent (no producer, or the transaction did not open).
    Done(Batch, WriteOutcome),
}

/// The message when the target refuses transactions.
pub fn transactions_unsupported_message(
    target_alias: &str,
    bootstrap: &str,
    transactional_id: &str,
    detail: &str,
) -> String {
    format!(
        "target cluster {target_alias} ({bootstrap}) refused transactions for transactional.id \
         {transactional_id} ({detail}): spec.delivery ExactlyOnce needs a target that supports \
         Kafka transactions and lets this worker use that id (ACL: WRITE on TransactionalId). \
         Set spec.delivery: AtLeastOnce to replicate without transactions (no loss; duplicates \
         after a crash are bounded by one batch window), or use a target that supports them"
    )
}

/// The replication engine of one worker.
pub struct Engine {
    settings: EngineSettings,
    spec: MirrorFlowSpec,
    flow_rx: watch::Receiver<MirrorFlowSpec>,
    out: EngineOutputs,
    source_props: ClientProperties,
    target_props: ClientProperties,
    /// Shared so records can be read ahead while a batch is being written.
    consumer: Arc<StreamConsumer<LogContext>>,
    source_meta: MetaClient,
    target_meta: MetaClient,
    /// Shared with blocking topic id lookups.
    source_admin: Arc<Admin>,
    target_admin: Admin,
    writer: Option<TargetWriter>,
    filter: TopicFilter,
    owned: BTreeMap<TopicPartitionRef, Owned>,
    /// Progress read at start, by source partition.
    stored_progress: HashMap<(String, i32), Progress>,
    progress_loaded: bool,
    internal_topics_ready: bool,
    /// Partitions whose position is not persisted yet.
    pending_progress: BTreeSet<TopicPartitionRef>,
    batch: Batch,
    /// What of the open batch was handed to the producer while it was read (AtLeastOnce,
    /// pipelined; see [`Engine::on_message`]).
    live: Option<Sending>,
    /// Batches sent and not finished yet, oldest first (AtLeastOnce pipelines them).
    in_flight: VecDeque<Dispatched>,
    /// Syncs and progress of finished batches awaiting acknowledgement (AtLeastOnce).
    meta_in_flight: VecDeque<MetaPending>,
    /// Partitions whose record the producer refused outright in a batch not finished yet:
    /// later records are not taken (they would land past the refused one) until the
    /// consumer is re-assigned from the committed positions.
    halted: BTreeSet<TopicPartitionRef>,
    /// Key of the partition of the last consumed record (saves a copy of the name).
    last_tp: Option<TopicPartitionRef>,
    reassign_needed: bool,
    out_of_range_seen: bool,
    refreshed_once: bool,
    started: bool,
    retry_at: Option<Instant>,
    backoff: ExponentialBackoff,
    fatal: Option<String>,
    last_applied_reset: Option<AppliedReset>,
    /// Reset ids handled by this worker (from progress at start, and since).
    handled_resets: BTreeSet<String>,
    /// A handled reset id to persist (worker marker record in the progress topic).
    pending_reset_marker: Option<String>,
    /// Partitions whose source topic disappeared (deleted or deselected), kept with their
    /// position, baseline and failure in case the topic comes back; and whether their
    /// position still had to be persisted.
    parked: HashMap<TopicPartitionRef, (Owned, bool)>,
    /// Failures already logged (each is logged once at error level).
    reported: ReportedFailures,
    /// `mirrorflow_worker_partition_failures_total{type}`.
    failures_total: prometheus::IntCounterVec,
    /// Topic ids are not looked up before this instant (after a failed lookup).
    topic_ids_paused_until: Option<Instant>,
    next_refresh: Instant,
    progress_topic: String,
    syncs_topic: String,
}

impl Engine {
    /// Builds the clients. Configuration problems (missing secrets, bad properties) are fatal.
    pub fn new(
        settings: EngineSettings,
        flow_rx: watch::Receiver<MirrorFlowSpec>,
        out: EngineOutputs,
    ) -> Result<Self, EngineError> {
        let spec = flow_rx.borrow().clone();
        let fatal =
            |what: &str, e: &dyn std::fmt::Display| EngineError::Fatal(format!("{what}: {e}"));
        let source_props = client_properties(&spec.source, &settings.secrets_dir)
            .map_err(|e| fatal("spec.source", &e))?;
        let target_props = client_properties(&spec.target, &settings.secrets_dir)
            .map_err(|e| fatal("spec.target", &e))?;
        info!(source = %source_props, target = %target_props, "client properties");
        let filter = TopicFilter::new(&spec).map_err(|e| fatal("spec.topics", &e))?;
        let (sctx, tctx) = (
            LogContext::new(&spec.source.alias),
            LogContext::new(&spec.target.alias),
        );
        let consumer = Self::create_consumer(&settings, &spec, &source_props, sctx.clone())
            .map_err(|e| fatal("source consumer", &e))?;
        let source_meta =
            io::meta_client(&source_props, sctx.clone()).map_err(|e| fatal("source client", &e))?;
        let target_meta =
            io::meta_client(&target_props, tctx.clone()).map_err(|e| fatal("target client", &e))?;
        let source_admin = Arc::new(
            io::admin_client(&source_props, sctx).map_err(|e| fatal("source admin client", &e))?,
        );
        let target_admin =
            io::admin_client(&target_props, tctx).map_err(|e| fatal("target admin client", &e))?;
        let progress_topic = progress_topic(&settings.namespace, &settings.flow_name);
        // MM2 3.x keeps offset syncs on the target under the source's alias.
        let syncs_topic = offset_syncs_topic(&spec.source.alias);
        let backoff = Self::backoff_builder(&settings.tuning).build();
        let (failures_total, register_error) = failure_counter(&out.metrics.registry);
        if let Some(e) = register_error {
            warn!("mirrorflow_worker_partition_failures_total is not exported: {e}");
        }
        Ok(Self {
            spec,
            flow_rx,
            out,
            source_props,
            target_props,
            consumer: Arc::new(consumer),
            source_meta,
            target_meta,
            source_admin,
            target_admin,
            writer: None,
            filter,
            owned: BTreeMap::new(),
            stored_progress: HashMap::new(),
            progress_loaded: false,
            internal_topics_ready: false,
            pending_progress: BTreeSet::new(),
            batch: Batch::new(),
            live: None,
            halted: BTreeSet::new(),
            in_flight: VecDeque::new(),
            meta_in_flight: VecDeque::new(),
            last_tp: None,
            reassign_needed: false,
            out_of_range_seen: false,
            refreshed_once: false,
            started: false,
            retry_at: None,
            backoff,
            fatal: None,
            last_applied_reset: None,
            handled_resets: BTreeSet::new(),
            pending_reset_marker: None,
            parked: HashMap::new(),
            reported: ReportedFailures::default(),
            failures_total,
            topic_ids_paused_until: None,
            next_refresh: Instant::now(),
            progress_topic,
            syncs_topic,
            settings,
        })
    }

    fn backoff_builder(t: &Tuning) -> ExponentialBuilder {
        ExponentialBuilder::new()
            .with_min_delay(t.retry_min)
            .with_max_delay(t.retry_max)
            .with_jitter()
            .without_max_times()
    }

    fn create_consumer(
        settings: &EngineSettings,
        spec: &MirrorFlowSpec,
        props: &ClientProperties,
        ctx: LogContext,
    ) -> Result<StreamConsumer<LogContext>, KafkaError> {
        let mut config = props.to_client_config();
        let t = &settings.tuning;
        let defaults = [
            (
                "queued.max.messages.kbytes",
                t.consumer_queue_kbytes.to_string(),
            ),
            ("queued.min.messages", "10000".to_string()),
            ("fetch.max.bytes", t.fetch_max_bytes.to_string()),
            ("fetch.wait.max.ms", "100".to_string()),
            // librdkafka's default (1 s) idles the fetcher for a second whenever the queue
            // bound was reached, which a busy worker hits on every few batches.
            ("fetch.queue.backoff.ms", "20".to_string()),
        ];
        for (k, v) in defaults {
            if props.get(k).is_none() {
                config.set(k, v);
            }
        }
        config
            // Never used for commits or membership: positions live in the progress topic.
            .set(
                "group.id",
                format!(
                    "mirrorflow-{}-{}-{}",
                    settings.namespace, settings.flow_name, settings.worker_index
                ),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed")
            .set(
                "auto.offset.reset",
                if spec.offset_validation.enabled {
                    "error"
                } else {
                    "earliest"
                },
            );
        config.create_with_context(ctx)
    }

    fn lag_max(&self) -> i64 {
        self.spec.offset_syncs.lag_max
    }

    fn transactional(&self) -> bool {
        self.spec.delivery == Delivery::ExactlyOnce
    }

    fn refresh_interval(&self) -> Duration {
        Duration::from_secs(
            u64::try_from(self.spec.topics.refresh_interval_seconds.max(1)).unwrap_or(10),
        )
    }

    fn flow_ref(&self) -> FlowRef<'_> {
        FlowRef {
            namespace: &self.settings.namespace,
            name: &self.settings.flow_name,
        }
    }

    /// Runs until `shutdown` completes (graceful: the open batch is committed or aborted) or
    /// a fatal error.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), EngineError> {
        tokio::pin!(shutdown);
        let result = self.run_inner(&mut shutdown).await;
        if let Err(EngineError::Fatal(msg)) = &result {
            error!(worker = %worker_id(&self.settings.flow_name, self.settings.worker_index), "{msg}");
            self.out.metrics.error(ErrorKind::Fatal);
            self.fatal = Some(msg.clone());
            self.out.readiness.set_not_ready(msg.clone());
        }
        self.out.metrics.ready.set(0.0);
        self.publish();
        result
    }

    async fn run_inner<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> Result<(), EngineError> {
        // Start: producer (fences a zombie with our transactional.id), internal topics,
        // progress. Transient failures are retried; shutdown interrupts.
        loop {
            match self.start_step().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return Err(e),
            }
            let delay = self
                .backoff
                .next()
                .unwrap_or(self.settings.tuning.retry_max);
            self.publish();
            tokio::select! {
                _ = shutdown.as_mut() => return Ok(()),
                _ = tokio::time::sleep(delay) => {}
            }
        }
        self.reset_backoff();
        self.refresh().await;
        self.apply_reset().await;
        self.started = true;
        self.update_readiness();
        self.publish();
        let mut next_status = Instant::now() + self.settings.tuning.status_interval;
        let mut flow_open = true;
        loop {
            if let Some(msg) = &self.fatal {
                return Err(EngineError::Fatal(msg.clone()));
            }
            if self.writer.is_none() && self.retry_due() {
                self.ensure_writer().await?;
                if self.writer.is_none() {
                    self.schedule_retry(&"the target producer is not available");
                }
            }
            let limits = self.fill_limits();
            let batch_due = !self.batch.is_empty()
                && (self.batch.is_full(&limits)
                    || self
                        .batch
                        .deadline(&limits)
                        .is_some_and(|d| Instant::now() >= d));
            let progress_due = self.batch.is_empty()
                && (!self.pending_progress.is_empty() || self.pending_reset_marker.is_some());
            if batch_due && self.can_write() && self.pipelined() && !self.out_of_range_seen {
                if self.in_flight.len() < self.settings.tuning.pipeline_depth.max(1) {
                    self.dispatch_open().await?;
                    continue;
                }
                // The pipeline is full: wait for the oldest batch (select below).
            } else if (batch_due || progress_due || self.out_of_range_seen) && self.can_write() {
                if !self.write_guarded(shutdown, Job::Open).await? {
                    return Ok(());
                }
                if self.out_of_range_seen && self.batch.is_empty() {
                    self.out_of_range_seen = false;
                    self.handle_out_of_range().await;
                }
                continue;
            }
            if self.reassign_needed
                && self.batch.is_empty()
                && self.in_flight.is_empty()
                && self.retry_due()
            {
                self.reassign();
            }
            let consuming =
                self.can_write() && !self.batch.is_full(&limits) && !self.reassign_needed;
            let far = Instant::now() + Duration::from_secs(3600);
            // Only a deadline still ahead: a due batch waiting for room in the pipeline must
            // not wake the loop again at once.
            let batch_deadline = self
                .batch
                .deadline(&limits)
                .filter(|d| *d > Instant::now())
                .unwrap_or(far);
            let retry_at = self.retry_at.unwrap_or(far);
            let next_refresh = self.next_refresh;
            let consumer = Arc::clone(&self.consumer);
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => {
                    self.shutdown_gracefully(true).await;
                    return Ok(());
                }
                changed = self.flow_rx.changed(), if flow_open => {
                    match changed {
                        Ok(()) => {
                            let spec = self.flow_rx.borrow_and_update().clone();
                            if !self.write_guarded(shutdown, Job::Open).await? {
                                return Ok(());
                            }
                            self.apply_spec(spec);
                            self.apply_reset().await;
                        }
                        Err(_) => flow_open = false,
                    }
                }
                _ = tokio::time::sleep_until(next_refresh.into()) => {
                    if !self.write_guarded(shutdown, Job::Open).await? {
                        return Ok(());
                    }
                    self.refresh().await;
                }
                _ = tokio::time::sleep_until(next_status.into()) => {
                    next_status = Instant::now() + self.settings.tuning.status_interval;
                    self.update_readiness();
                    self.publish();
                }
                _ = meta_delivered(&mut self.meta_in_flight), if !self.meta_in_flight.is_empty() => {
                    self.on_meta_delivered();
                }
                _ = head_delivered(&mut self.in_flight), if !self.in_flight.is_empty()
                    && self.can_write()
                    && self.meta_in_flight.len() < self.settings.tuning.pipeline_depth.max(1) => {
                    if !self.write_guarded(shutdown, Job::Head).await? {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep_until(batch_deadline.into()), if batch_deadline < far => {}
                _ = tokio::time::sleep_until(retry_at.into()), if self.retry_at.is_some() => {
                    self.retry_at = None;
                }
                r = consumer.recv(), if consuming => {
                    match r {
                        Ok(m) => self.on_message(&m),
                        Err(e) => self.on_consumer_error(e),
                    }
                    self.drain_ready(&consumer, &limits);
                }
            }
        }
    }

    /// One start step; `Ok(true)` when everything is ready.
    async fn start_step(&mut self) -> Result<bool, EngineError> {
        if let Err(e) = self.ensure_writer().await {
            return match e {
                EngineError::Fatal(_) => Err(e),
            };
        }
        if self.writer.is_none() {
            return Ok(false);
        }
        let timeout = self.settings.tuning.io_timeout;
        if !self.internal_topics_ready {
            let topics = match io::list_topics(&self.target_meta, timeout).await {
                Ok(t) => t,
                Err(e) => {
                    self.start_problem(format!("target cluster {}: {e}", self.spec.target.alias));
                    return Ok(false);
                }
            };
            let compact = [("cleanup.policy".to_string(), "compact".to_string())];
            for topic in [self.progress_topic.clone(), self.syncs_topic.clone()] {
                if topics.contains_key(&topic) {
                    continue;
                }
                if let Err(e) =
                    io::create_topic(&self.target_admin, &topic, 1, &compact, timeout).await
                {
                    self.start_problem(format!(
                        "cannot create internal topic {topic} on target cluster {}: {e}",
                        self.spec.target.alias
                    ));
                    return Ok(false);
                }
                info!(topic, "created internal topic on the target");
            }
            self.internal_topics_ready = true;
        }
        if !self.progress_loaded {
            let ctx = LogContext::new(&self.spec.target.alias);
            match io::read_progress(&self.target_props, ctx, &self.progress_topic, timeout).await {
                Ok(p) => {
                    info!(topic = %self.progress_topic, partitions = p.len(), "progress read");
                    let (index, count) = (self.settings.worker_index, self.settings.worker_count);
                    self.handled_resets = handled_reset_ids(p.values(), index, count);
                    self.stored_progress = p;
                    self.progress_loaded = true;
                }
                Err(io::ProgressError::Corrupt(e)) => {
                    return Err(EngineError::Fatal(format!(
                        "{e}. The progress topic holds a record this build cannot read; \
                         refusing to guess positions (that could skip records)"
                    )));
                }
                Err(io::ProgressError::Unavailable(e)) => {
                    self.start_problem(e);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    fn start_problem(&mut self, msg: String) {
        warn!("{msg}; retrying");
        self.out.metrics.error(ErrorKind::Progress);
        self.out.readiness.set_not_ready(msg);
    }

    /// Creates the producer if missing. Transient failures leave it missing (retry later).
    async fn ensure_writer(&mut self) -> Result<(), EngineError> {
        if self.writer.is_some() {
            return Ok(());
        }
        let tid = self
            .transactional()
            .then(|| self.settings.transactional_id());
        let ctx = LogContext::new(&self.spec.target.alias);
        match TargetWriter::create(
            &self.target_props,
            ctx,
            tid.as_deref(),
            self.settings.tuning.producer,
        )
        .await
        {
            Ok(w) => {
                info!(
                    transactional_id = tid.as_deref().unwrap_or("-"),
                    "target producer ready"
                );
                self.writer = Some(w);
                Ok(())
            }
            Err(e) => {
                let class = classify_error(&e);
                let detail = describe_error(&e);
                match (class, tid.is_some()) {
                    // A target that cannot do transactions (or refuses our transactional.id)
                    // never will: say what to change. Nobody can have fenced us at init.
                    (
                        ErrorClass::Fenced
                        | ErrorClass::Unsupported
                        | ErrorClass::Rejected
                        | ErrorClass::ProducerBroken,
                        true,
                    ) => Err(EngineError::Fatal(transactions_unsupported_message(
                        &self.spec.target.alias,
                        &self.spec.target.bootstrap_servers,
                        &tid.unwrap_or_default(),
                        &detail,
                    ))),
                    _ => {
                        let msg = format!(
                            "creating the producer for target {} failed: {detail}",
                            self.spec.target.alias
                        );
                        self.start_problem(msg);
                        self.out.metrics.error(ErrorKind::TargetRetriable);
                        Ok(())
                    }
                }
            }
        }
    }

    fn retry_due(&self) -> bool {
        self.retry_at.is_none_or(|t| Instant::now() >= t)
    }

    fn can_write(&self) -> bool {
        self.writer.is_some() && self.retry_due() && self.fatal.is_none()
    }

    fn reset_backoff(&mut self) {
        self.backoff = Self::backoff_builder(&self.settings.tuning).build();
    }

    fn schedule_retry(&mut self, why: &dyn std::fmt::Display) {
        let delay = self
            .backoff
            .next()
            .unwrap_or(self.settings.tuning.retry_max);
        warn!(delay_ms = delay.as_millis() as u64, "{why}; retrying");
        self.retry_at = Some(Instant::now() + delay);
        self.request_reassign();
    }

    /// Runs `job` (a write). If shutdown comes during it, it may still finish within the grace
    /// period; otherwise its transaction is aborted. `Ok(false)` means shutdown happened (and
    /// was handled).
    async fn write_guarded<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
        job: Job,
    ) -> Result<bool, EngineError> {
        let nothing = match job {
            Job::Open => {
                self.batch.is_empty()
                    && self.in_flight.is_empty()
                    && self.pending_progress.is_empty()
                    && self.pending_reset_marker.is_none()
            }
            Job::Head => self.in_flight.is_empty(),
        };
        if nothing || !self.can_write() {
            return Ok(true);
        }
        let grace = self.settings.tuning.shutdown_grace;
        let mut limits = self.fill_limits();
        if let Job::Head = job {
            // The open batch stays open: read ahead only what it still has room for.
            limits.max_records = limits.max_records.saturating_sub(self.batch.len());
            limits.max_bytes = limits.max_bytes.saturating_sub(self.batch.bytes());
        }
        // While the batch is written, the next one is read ahead (the write waits on the
        // target most of the time). Not when the assignment is about to change: those
        // records would be dropped anyway.
        let mut ahead = ReadAhead::new(
            self.started
                && !self.reassign_needed
                && !self.out_of_range_seen
                && limits.max_records > 0
                && limits.max_bytes > 0,
            limits,
        );
        let consumer = Arc::clone(&self.consumer);
        let (result, interrupted) = {
            let write = self.run_job(job);
            tokio::pin!(write);
            loop {
                tokio::select! {
                    biased;
                    r = &mut write => break (Some(r), false),
                    _ = shutdown.as_mut() => {
                        break (tokio::time::timeout(grace, write).await.ok(), true)
                    }
                    r = consumer.recv(), if ahead.open() => {
                        ahead.push(r);
                        ahead.drain(&consumer);
                    }
                }
            }
        };
        let finished = result.is_some();
        match result {
            Some(r) => self.after_write(r)?,
            None => warn!(
                ?grace,
                "the open batch did not finish within the shutdown grace period"
            ),
        }
        if interrupted {
            let clean = finished && !self.reassign_needed;
            self.shutdown_gracefully(clean).await;
            return Ok(false);
        }
        // Records read ahead follow the batch just written; they are kept only if it
        // committed as a whole. After a rewind, a stopped partition or anything else that
        // re-assigns, the consumer starts again from the committed positions: keeping them
        // would put them after a hole.
        let keep = !self.reassign_needed;
        let ReadAhead { topics, items, .. } = ahead;
        for item in items {
            match item {
                Ok((t, partition, record)) if keep => self.on_record(&topics[t], partition, record),
                Ok(_) => {}
                // An out-of-range error is handled either way (a re-assignment may not bring
                // a log truncation back).
                Err(e) => self.on_consumer_error(e),
            }
        }
        Ok(true)
    }

    fn after_write(&mut self, r: Result<WriteOutcome, EngineError>) -> Result<(), EngineError> {
        match r? {
            WriteOutcome::Committed => {
                self.reset_backoff();
                self.out
                    .metrics
                    .batches
                    .with_label_values(&["committed"])
                    .inc();
            }
            WriteOutcome::Retry => {
                self.out
                    .metrics
                    .batches
                    .with_label_values(&["retried"])
                    .inc();
                self.schedule_retry(&"writing a batch to the target failed");
            }
            WriteOutcome::Replay => {
                self.out
                    .metrics
                    .batches
                    .with_label_values(&["retried"])
                    .inc();
            }
        }
        Ok(())
    }

    /// `clean`: every write so far finished; otherwise what is left (dispatched batches, the
    /// open batch) is dropped, since it would follow a batch whose outcome is unknown.
    async fn shutdown_gracefully(&mut self, clean: bool) {
        info!("shutting down");
        let grace = self.settings.tuning.shutdown_grace;
        if !clean {
            self.in_flight.clear();
            self.clear_open();
        }
        if let Some(w) = &mut self.writer {
            if w.in_transaction() {
                // A write was interrupted: its transaction cannot be finished safely.
                if let Err(e) = w.abort().await {
                    warn!(
                        "aborting the open transaction failed: {}",
                        describe_error(&e)
                    );
                }
                self.clear_open();
            }
        }
        let open = !self.batch.is_empty()
            || !self.in_flight.is_empty()
            || !self.meta_in_flight.is_empty()
            || !self.pending_progress.is_empty();
        if open && self.can_write() {
            match tokio::time::timeout(grace, self.write_batch()).await {
                Ok(r) => {
                    if let Err(e) = self.after_write(r) {
                        warn!("final batch: {e}");
                    }
                }
                Err(_) => {
                    warn!(?grace, "final batch did not commit in time; aborting it");
                    if let Some(w) = &mut self.writer {
                        let _ = w.abort().await;
                    }
                }
            }
        }
        if !self.meta_in_flight.is_empty()
            && tokio::time::timeout(grace, self.drain_meta())
                .await
                .is_err()
        {
            warn!(?grace, "offset syncs or progress not acknowledged in time");
        }
        self.clear_open();
        self.in_flight.clear();
        let _ = self.consumer.unassign();
        self.out.readiness.set_not_ready("stopped");
        info!("stopped");
    }

    /// Takes the records librdkafka already has queued without another trip through the
    /// select loop (whose timers cost more than a record), up to the batch bound.
    fn drain_ready(&mut self, consumer: &StreamConsumer<LogContext>, limits: &BatchLimits) {
        use futures::{FutureExt as _, StreamExt as _};
        // One stream for the whole drain: each `recv` registers and drops a waker slot.
        let mut stream = consumer.stream();
        for _ in 0..limits.max_records {
            // An out-of-range error must be handled (next loop turn) before taking more.
            if !(self.can_write()
                && !self.batch.is_full(limits)
                && !self.reassign_needed
                && !self.out_of_range_seen)
            {
                return;
            }
            match stream.next().now_or_never() {
                Some(Some(Ok(m))) => self.on_message(&m),
                Some(Some(Err(e))) => self.on_consumer_error(e),
                _ => return,
            }
        }
    }

    /// Whether a consumed record of `topic`/`partition` at `offset` is replicated (its
    /// partition replicates and the record is not stale); notes it as fetched.
    fn accept(&mut self, topic: &str, partition: i32, offset: i64) -> bool {
        // Records come in runs per partition: reuse the key of the previous one.
        if !self
            .last_tp
            .as_ref()
            .is_some_and(|tp| tp.partition == partition && tp.topic == topic)
        {
            self.last_tp = Some(TopicPartitionRef {
                topic: topic.to_string(),
                partition,
            });
        }
        let Some(tp) = self.last_tp.as_ref() else {
            return false;
        };
        if !self.halted.is_empty() && self.halted.contains(tp) {
            return false;
        }
        let Some(o) = self.owned.get_mut(tp) else {
            return false;
        };
        if !matches!(o.state, PartitionState::Replicating) {
            return false;
        }
        if o.fetched.is_some_and(|f| offset < f) {
            return false; // stale, from before a re-assign
        }
        o.fetched = Some(offset + 1);
        o.fetched_since_check = true;
        true
    }

    /// A record read ahead: into the open batch with its payload, sent when the batch is.
    fn on_record(&mut self, topic: &str, partition: i32, record: BatchRecord) {
        if self.accept(topic, partition, record.offset) {
            self.push_open(topic, partition, record);
        }
    }

    fn push_open(&mut self, topic: &str, partition: i32, record: BatchRecord) {
        let now = self.batch.opened_at().unwrap_or_else(Instant::now);
        self.batch.push(topic, partition, record, now);
    }

    /// A record straight from the consumer. While the open batch streams it is handed to
    /// the producer at once, copied only by librdkafka (as a bare copy loop does, and
    /// without a burst per batch); the batch keeps its bookkeeping. Otherwise its payload
    /// is copied into the batch.
    fn on_message(&mut self, m: &BorrowedMessage<'_>) {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        if !self.accept(topic, partition, offset) {
            return;
        }
        let writer = match self.writer.as_ref() {
            Some(w) if self.streaming() => w,
            _ => {
                self.push_open(topic, partition, detach_record(m));
                return;
            }
        };
        let timestamp = m.timestamp().to_millis();
        let (headers, size) = headers_and_size(m);
        let now = self.batch.opened_at().unwrap_or_else(Instant::now);
        self.batch.push(
            topic,
            partition,
            BatchRecord::sent(offset, timestamp, size),
            now,
        );
        let s = self
            .live
            .get_or_insert_with(|| Sending::new(writer.tracker().group(0), 0));
        s.cover(&self.batch, &self.owned);
        let i = self.batch.len() - 1;
        let slot = self.batch.records()[i].slot;
        s.reserve(i);
        let Some(target) = s.targets[slot].as_deref().filter(|_| !s.stopped[slot]) else {
            s.stopped[slot] = true;
            s.next = i + 1;
            return;
        };
        let record = target_record(
            target,
            s.group.ticket(i),
            partition,
            m.key(),
            m.payload(),
            timestamp,
            headers,
        );
        match writer.producer().send(record).map_err(|(e, _)| e) {
            Ok(()) => {
                s.pending.push(i);
                s.sent += 1;
                s.next = i + 1;
            }
            Err(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)) => {
                // Kept with its payload; `dispatch` sends it and the rest of the batch
                // (waiting for room), in order.
                self.batch.hold_last(detach_record(m));
            }
            Err(e) => {
                s.refuse(i, slot, &e);
                s.next = i + 1;
                self.halted.insert(self.batch.partitions()[slot].tp.clone());
            }
        }
    }

    /// Whether the next consumed record goes to the producer at once (given a producer):
    /// AtLeastOnce and pipelined when the batch opened (checked once per batch), and every
    /// earlier record of the batch handled (one kept with its payload keeps the rest behind
    /// it: order).
    fn streaming(&self) -> bool {
        match &self.live {
            Some(s) => s.next == self.batch.len(),
            None => self.batch.is_empty() && self.pipelined(),
        }
    }

    fn on_consumer_error(&mut self, e: KafkaError) {
        match e {
            KafkaError::MessageConsumption(
                RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::LogTruncation,
            ) => {
                self.out.metrics.error(ErrorKind::OffsetValidation);
                // librdkafka does not say which partition: check them all after this batch.
                self.out_of_range_seen = true;
            }
            e => {
                self.out.metrics.error(ErrorKind::Source);
                debug!("source consumer: {e}");
            }
        }
    }

    /// An out-of-range error arrived (offset validation): tie it to partitions
    /// ([`attribute_out_of_range`]) and stop them as DataLoss or TopicReset.
    async fn handle_out_of_range(&mut self) {
        let assigned: Vec<(TopicPartitionRef, i64)> = self
            .owned
            .iter()
            .filter(|(_, o)| matches!(o.state, PartitionState::Replicating))
            .filter_map(|(tp, o)| o.position.map(|p| (tp.clone(), p)))
            .collect();
        let marks = match io::watermarks(
            &self.source_meta,
            assigned
                .iter()
                .map(|(tp, _)| (tp.topic.clone(), tp.partition))
                .collect(),
            self.settings.tuning.io_timeout,
        )
        .await
        {
            Ok(m) => m,
            Err(e) => {
                self.schedule_retry(&format_args!("out-of-range check: {e}"));
                return;
            }
        };
        let mut marks: HashMap<(String, i32), Result<(i64, i64), String>> =
            marks.into_iter().collect();
        let topics: BTreeSet<String> = assigned.iter().map(|(tp, _)| tp.topic.clone()).collect();
        let ids = self.current_topic_ids(topics).await;
        let candidates: Vec<OutOfRangeCandidate> = assigned
            .into_iter()
            .map(|(tp, position)| {
                let recorded = self
                    .owned
                    .get(&tp)
                    .map(|o| o.topic_id.clone())
                    .unwrap_or_default();
                let topic_id_changed = match ids.get(&tp.topic) {
                    Some(now) if !recorded.is_empty() => Some(*now != recorded),
                    _ => None,
                };
                let marks = marks
                    .remove(&(tp.topic.clone(), tp.partition))
                    .unwrap_or_else(|| {
                        Err(format!("no watermarks for {}/{}", tp.topic, tp.partition))
                    });
                OutOfRangeCandidate {
                    tp,
                    position,
                    marks,
                    topic_id_changed,
                }
            })
            .collect();
        for c in &candidates {
            if let (Ok((low, high)), Some(o)) = (&c.marks, self.owned.get_mut(&c.tp)) {
                o.low = Some(*low);
                o.high = Some(*high);
            }
        }
        match attribute_out_of_range(&candidates) {
            Attribution::Failed(detections) => {
                for d in detections {
                    self.report_detection(d);
                }
                self.request_reassign();
            }
            Attribution::Unattributed => self.schedule_retry(&format_args!(
                "the source reported an out-of-range position, but none of the {} assigned \
                 partitions is outside its log and the error does not say which one it was",
                candidates.len()
            )),
        }
    }

    /// Topic ids of `topics` on the source (for offset validation), by topic; topics whose id
    /// is unknown are left out. Empty when validation is off or ids are paused after a failed
    /// lookup.
    async fn current_topic_ids(&mut self, topics: BTreeSet<String>) -> HashMap<String, String> {
        if !self.spec.offset_validation.enabled
            || topics.is_empty()
            || self
                .topic_ids_paused_until
                .is_some_and(|t| Instant::now() < t)
        {
            return HashMap::new();
        }
        let timeout = self.settings.tuning.validation_timeout;
        match io::topic_ids(&self.source_admin, topics.into_iter().collect(), timeout).await {
            Ok(ids) => {
                self.topic_ids_paused_until = None;
                ids.into_iter()
                    .filter_map(|(topic, r)| match r {
                        Ok(Some(id)) => Some((topic, id)),
                        Ok(None) => None,
                        Err(e) => {
                            debug!("{e}");
                            None
                        }
                    })
                    .collect()
            }
            Err(e) => {
                warn!(
                    retry_in_s = TOPIC_ID_RETRY.as_secs(),
                    "topic ids of source cluster {} unavailable ({e}); recreated topics are \
                     detected from watermarks only until then",
                    self.spec.source.alias
                );
                self.topic_ids_paused_until = Some(Instant::now() + TOPIC_ID_RETRY);
                HashMap::new()
            }
        }
    }

    /// Fresh watermarks (and topic id, if known) of an owned partition: updates lag and runs
    /// the periodic offset validation check (`worker::validation::classify::check_partition`)
    /// on partitions with a known position. A detection that rests only on the ListOffsets
    /// high watermark is returned instead, to be confirmed by a Fetch
    /// ([`Engine::confirm_with_fetch`]).
    fn observe_watermarks(
        &mut self,
        tp: &TopicPartitionRef,
        low: i64,
        high: i64,
        topic_id: Option<String>,
    ) -> Option<(PartitionObservation, Detection)> {
        let validation = self.spec.offset_validation.enabled;
        let o = self.owned.get_mut(tp)?;
        o.low = Some(low);
        o.high = Some(high);
        let fetching = std::mem::take(&mut o.fetched_since_check);
        if !validation
            || !matches!(
                o.state,
                PartitionState::Replicating | PartitionState::Paused
            )
        {
            return None;
        }
        let position = o.position?;
        let now = PartitionObservation {
            topic_id,
            log_start: low,
            high_watermark: high,
            leader_epoch: None,
        };
        match check_partition(&o.known(tp, position), &now) {
            None => {
                if o.record(tp, position, &now) {
                    // Persist the id with the position, also for an idle partition.
                    self.pending_progress.insert(tp.clone());
                }
            }
            Some(d) if defer_while_fetching(&d, fetching) => debug!(
                topic = %tp.topic,
                partition = tp.partition,
                position,
                log_start = low,
                "log start past the committed position while fetching; checking again later"
            ),
            Some(d) if needs_fetch_confirmation(&d) => return Some((now, d)),
            Some(d) => self.report_detection(d),
        }
        None
    }

    /// Confirms watermark-only detections with the high watermark of a fetch response: the
    /// consumer's own (for partitions it fetches) or a probe's. The partition stops if the
    /// check still fails with the larger of both high watermarks; without a fetch answer the
    /// ListOffsets answer stands.
    async fn confirm_with_fetch(
        &mut self,
        items: Vec<(TopicPartitionRef, PartitionObservation, Detection)>,
    ) {
        if items.is_empty() {
            return;
        }
        let mut fetched: HashMap<TopicPartitionRef, i64> = HashMap::new();
        let mut probe = Vec::new();
        for (tp, _, d) in &items {
            let assigned = self
                .owned
                .get(tp)
                .is_some_and(|o| matches!(o.state, PartitionState::Replicating));
            let cached = assigned
                .then(|| io::cached_watermarks(self.consumer.client(), &tp.topic, tp.partition))
                .flatten();
            match cached {
                Some((_, high)) => {
                    fetched.insert(tp.clone(), high);
                }
                None => probe.push((tp.topic.clone(), tp.partition, d.requested_offset)),
            }
        }
        if !probe.is_empty() {
            let ctx = LogContext::new(&self.spec.source.alias);
            let timeout = self.settings.tuning.validation_timeout;
            match io::fetch_high_watermarks(&self.source_props, ctx, probe, timeout).await {
                Ok(m) => fetched
                    .extend(m.into_iter().map(|((topic, partition), h)| {
                        (TopicPartitionRef { topic, partition }, h)
                    })),
                Err(e) => warn!("confirming source watermarks with a fetch: {e}"),
            }
        }
        for (tp, mut now, d) in items {
            let Some(h) = fetched.get(&tp).copied() else {
                self.report_detection(d);
                continue;
            };
            let Some(o) = self.owned.get_mut(&tp) else {
                continue;
            };
            let Some(position) = o.position else {
                continue;
            };
            let listed = now.high_watermark;
            now.high_watermark = listed.max(h);
            match check_partition(&o.known(&tp, position), &now) {
                None => {
                    debug!(
                        topic = %tp.topic,
                        partition = tp.partition,
                        position,
                        list_offsets = listed,
                        fetch = h,
                        "ListOffsets' high watermark is below the position but a fetch's is not; not stopping"
                    );
                    if o.record(&tp, position, &now) {
                        self.pending_progress.insert(tp.clone());
                    }
                }
                Some(d) => self.report_detection(d),
            }
        }
    }

    /// Stops a partition for a DataLoss / TopicReset detection: status entry, one error log,
    /// one count.
    fn report_detection(&mut self, d: Detection) {
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        let failure = d.to_failure(self.flow_ref(), now);
        let kind = kind_of(d.type_);
        let message = failure.message.clone().unwrap_or_default();
        if self.reported.first_report(&d) {
            error!(
                topic = %d.tp.topic,
                partition = d.tp.partition,
                requested_offset = d.requested_offset,
                log_start = ?d.log_start,
                records_lost = ?failure.records_lost,
                "{message}"
            );
            self.failures_total
                .with_label_values(&[failure_kind_name(kind)])
                .inc();
        }
        self.fail_partition(
            &d.tp,
            PartitionFailed {
                kind,
                offset: d.requested_offset,
                message,
                failure: Some(failure),
            },
        );
    }

    fn fail_partition(&mut self, tp: &TopicPartitionRef, failed: PartitionFailed) {
        if let Some(o) = self.owned.get_mut(tp) {
            o.state = PartitionState::Failed(failed);
            o.fetched = None;
            self.request_reassign();
        }
    }

    /// Re-assigns the consumer to every replicating partition at its committed position.
    fn reassign(&mut self) {
        self.reassign_needed = false;
        self.clear_open();
        self.halted.clear();
        let mut tpl = TopicPartitionList::new();
        for (tp, o) in self.owned.iter_mut() {
            if !matches!(o.state, PartitionState::Replicating) {
                o.fetched = None;
                continue;
            }
            let Some(pos) = o.position else { continue };
            if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos)) {
                warn!(topic = %tp.topic, partition = tp.partition, "cannot assign: {e}");
                continue;
            }
            o.fetched = Some(pos);
        }
        let r = if tpl.count() == 0 {
            self.consumer.unassign()
        } else {
            self.consumer.assign(&tpl)
        };
        if let Err(e) = r {
            self.out.metrics.error(ErrorKind::Source);
            warn!("assigning source partitions failed: {e}");
            self.request_reassign();
        } else {
            debug!(partitions = tpl.count(), "assigned source partitions");
        }
    }

    fn apply_spec(&mut self, spec: MirrorFlowSpec) {
        if spec == self.spec {
            return;
        }
        let restart_needed = spec.source != self.spec.source
            || spec.target != self.spec.target
            || spec.delivery != self.spec.delivery
            || spec.offset_validation != self.spec.offset_validation
            || spec.replication_policy != self.spec.replication_policy;
        if restart_needed {
            warn!("the flow changed in fields that need a worker restart (source, target, delivery, offsetValidation, replicationPolicy); they apply after a restart");
        }
        let paused_changed = spec.paused != self.spec.paused;
        let topics_changed = spec.topics != self.spec.topics;
        match TopicFilter::new(&spec) {
            Ok(f) if topics_changed => {
                self.filter = f;
                self.next_refresh = Instant::now();
            }
            Ok(_) => {}
            Err(e) => warn!("ignoring the new topic selection: {e}"),
        }
        let policy = self.spec.replication_policy.clone();
        let (source, target, delivery, validation) = (
            self.spec.source.clone(),
            self.spec.target.clone(),
            self.spec.delivery,
            self.spec.offset_validation.clone(),
        );
        self.spec = spec;
        // Fields that need a restart keep their running values.
        self.spec.replication_policy = policy;
        self.spec.source = source;
        self.spec.target = target;
        self.spec.delivery = delivery;
        self.spec.offset_validation = validation;
        if paused_changed {
            let paused = self.spec.paused;
            info!(paused, "spec.paused changed");
            self.out.metrics.paused.set(i64::from(paused));
            for o in self.owned.values_mut() {
                match (&o.state, paused) {
                    (PartitionState::Replicating, true) => o.state = PartitionState::Paused,
                    (PartitionState::Paused, false) => o.state = PartitionState::Replicating,
                    _ => {}
                }
            }
            self.request_reassign();
        }
        self.publish();
    }

    /// Handles `spec.reset` (at most once per id, see `worker::validation::reset`): clears
    /// DataLoss / TopicReset failures of the partitions this worker owns by seeking them to
    /// the log start or the end ([`plan_worker_reset`] scopes the request to this worker).
    /// The id is persisted with the progress of the reset partitions and in a per-worker
    /// marker record, so a restart never applies it again.
    async fn apply_reset(&mut self) {
        let Some(req) = self.spec.reset.clone() else {
            return;
        };
        if self.handled_resets.contains(&req.id) {
            return;
        }
        let (index, count) = (self.settings.worker_index, self.settings.worker_count);
        let failed: Vec<crate::api::PartitionFailure> = self
            .owned
            .values()
            .filter_map(|o| match &o.state {
                PartitionState::Failed(PartitionFailed {
                    failure: Some(f), ..
                }) => Some(f.clone()),
                _ => None,
            })
            .collect();
        let worker = worker_id(&self.settings.flow_name, index);
        let now = || k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
        match plan_worker_reset(&req, &failed, index, count, &worker) {
            WorkerReset::NothingHere(msg) => {
                info!(id = %req.id, "{msg}");
                self.last_applied_reset = Some(nothing_here_status(&req, msg, now()));
            }
            WorkerReset::Plan(_, ResetDecision::NoOp) => return,
            WorkerReset::Plan(_, decision @ ResetDecision::Refused(_)) => {
                if let ResetDecision::Refused(why) = &decision {
                    warn!(id = %req.id, "reset refused: {why}");
                }
                self.last_applied_reset = decision.status(&req, now());
            }
            WorkerReset::Plan(_, decision @ ResetDecision::Apply(_)) => {
                let ResetDecision::Apply(actions) = &decision else {
                    unreachable!()
                };
                let tps: Vec<(String, i32)> = actions
                    .iter()
                    .map(|a| (a.tp.topic.clone(), a.tp.partition))
                    .collect();
                let topics: BTreeSet<String> = actions.iter().map(|a| a.tp.topic.clone()).collect();
                let marks =
                    io::watermarks(&self.source_meta, tps, self.settings.tuning.io_timeout).await;
                let ids = self.current_topic_ids(topics).await;
                let mut resolved = Vec::new();
                let mut error = None;
                match marks {
                    Ok(m) => {
                        let m: HashMap<(String, i32), Result<(i64, i64), String>> =
                            m.into_iter().collect();
                        for a in actions {
                            match m.get(&(a.tp.topic.clone(), a.tp.partition)) {
                                Some(Ok((low, high))) => resolved.push((
                                    a.tp.clone(),
                                    match a.target {
                                        SeekTarget::LogStart => *low,
                                        SeekTarget::End => *high,
                                    },
                                    (*low, *high),
                                )),
                                Some(Err(e)) => error = Some(e.clone()),
                                None => {
                                    error = Some(format!(
                                        "no watermarks for {}/{}",
                                        a.tp.topic, a.tp.partition
                                    ))
                                }
                            }
                        }
                    }
                    Err(e) => error = Some(e),
                }
                if let Some(e) = error {
                    warn!(id = %req.id, "reset failed: {e}");
                    self.last_applied_reset = Some(failed_status(&req, actions, &e, now()));
                } else {
                    let paused = self.spec.paused;
                    for (tp, position, (low, high)) in resolved {
                        if let Some(o) = self.owned.get_mut(&tp) {
                            info!(topic = %tp.topic, partition = tp.partition, position, id = %req.id, "reset applied");
                            o.position = Some(position);
                            o.fetched = None;
                            o.reset_id = req.id.clone();
                            o.emitter = SyncEmitter::new(fresh_epoch());
                            // The current log is the new reference: an unknown id is learned
                            // at the next check rather than compared with the old topic's.
                            o.rebase(ids.get(&tp.topic).cloned(), low, high);
                            o.state = if paused {
                                PartitionState::Paused
                            } else {
                                PartitionState::Replicating
                            };
                            self.reported.forget(&tp);
                            self.pending_progress.insert(tp);
                        }
                    }
                    self.request_reassign();
                    self.last_applied_reset = decision.status(&req, now());
                }
            }
        }
        self.mark_reset_handled(&req.id);
        self.publish();
    }

    fn mark_reset_handled(&mut self, id: &str) {
        self.handled_resets.insert(id.to_string());
        self.pending_reset_marker = Some(id.to_string());
    }

    /// Discovers topics, creates/grows target topics, takes new partitions, drops vanished
    /// ones, reads watermarks (lag).
    async fn refresh(&mut self) {
        let refresh_begin = Instant::now();
        self.next_refresh = refresh_begin + self.refresh_interval();
        let timeout = self.settings.tuning.io_timeout;
        let source_topics = match io::list_topics(&self.source_meta, timeout).await {
            Ok(t) => t,
            Err(e) => {
                self.out.metrics.error(ErrorKind::TopicSync);
                warn!("source cluster {}: {e}", self.spec.source.alias);
                return;
            }
        };
        let (index, count) = (self.settings.worker_index, self.settings.worker_count);
        // Source topic → (partitions, target topic) for the topics we own partitions of.
        let mut wanted: BTreeMap<String, (i32, String)> = BTreeMap::new();
        for (topic, partitions) in &source_topics {
            if self.filter.decide(topic) != TopicDecision::Replicate {
                continue;
            }
            let mine = (0..*partitions).any(|p| super::assign::is_owned(topic, p, index, count));
            if mine {
                wanted.insert(
                    topic.clone(),
                    (*partitions, self.filter.target_topic(topic)),
                );
            }
        }
        // Drop partitions that vanished or are no longer selected.
        let gone: Vec<TopicPartitionRef> = self
            .owned
            .keys()
            .filter(|tp| {
                wanted
                    .get(&tp.topic)
                    .is_none_or(|(n, _)| tp.partition >= *n)
            })
            .cloned()
            .collect();
        for tp in gone {
            info!(topic = %tp.topic, partition = tp.partition, "partition no longer replicated by this worker");
            if let Some(mut o) = self.owned.remove(&tp) {
                // Kept in case the topic comes back (recreated or selected again): it resumes
                // from its own position, baseline and failure, never from scratch.
                o.fetched = None;
                o.fetched_since_check = false;
                let unpersisted = self.pending_progress.remove(&tp);
                self.parked.insert(tp.clone(), (o, unpersisted));
            }
            self.out.metrics.forget_partition(&tp.topic, tp.partition);
            self.request_reassign();
        }
        // Target topics: create or grow.
        let target_topics = match io::list_topics(&self.target_meta, timeout).await {
            Ok(t) => t,
            Err(e) => {
                self.out.metrics.error(ErrorKind::TopicSync);
                warn!("target cluster {}: {e}", self.spec.target.alias);
                return;
            }
        };
        let mut ready_targets: BTreeSet<String> = BTreeSet::new();
        for (topic, (partitions, target)) in &wanted {
            match target_topic_action(*partitions, target_topics.get(target).copied()) {
                TargetTopicAction::Ready => {
                    ready_targets.insert(target.clone());
                }
                TargetTopicAction::Grow { from, to } => {
                    match io::add_partitions(&self.target_admin, target, to, timeout).await {
                        Ok(()) => {
                            info!(topic = %target, from, to, "grew target topic");
                            ready_targets.insert(target.clone());
                        }
                        Err(e) => {
                            self.out.metrics.error(ErrorKind::TopicSync);
                            warn!("{e}");
                        }
                    }
                }
                TargetTopicAction::Create => {
                    let configs = if self.spec.sync_topic_configs {
                        match io::syncable_topic_configs(&self.source_admin, topic, timeout).await {
                            Ok(c) => c,
                            Err(e) => {
                                self.out.metrics.error(ErrorKind::TopicSync);
                                warn!("not creating target topic {target} yet (spec.syncTopicConfigs is true): {e}");
                                continue;
                            }
                        }
                    } else {
                        Vec::new()
                    };
                    match io::create_topic(
                        &self.target_admin,
                        target,
                        *partitions,
                        &configs,
                        timeout,
                    )
                    .await
                    {
                        Ok(()) => {
                            info!(topic = %target, partitions, ?configs, "created target topic");
                            ready_targets.insert(target.clone());
                        }
                        Err(e) => {
                            self.out.metrics.error(ErrorKind::TopicSync);
                            warn!("{e}");
                        }
                    }
                }
            }
        }
        // New partitions.
        let latest_allowed = !self.refreshed_once;
        let mut new_parts: Vec<TopicPartitionRef> = Vec::new();
        for (topic, (partitions, target)) in &wanted {
            for p in 0..*partitions {
                if !super::assign::is_owned(topic, p, index, count) {
                    continue;
                }
                let tp = TopicPartitionRef {
                    topic: topic.clone(),
                    partition: p,
                };
                if !self.owned.contains_key(&tp) {
                    if let Some((mut o, unpersisted)) = self.parked.remove(&tp) {
                        info!(topic = %tp.topic, partition = tp.partition, position = ?o.position, "partition is back");
                        o.target_topic = target.clone();
                        o.emitter = SyncEmitter::new(fresh_epoch());
                        if !o.state.is_failed() {
                            o.state = match (o.position, self.spec.paused) {
                                (None, _) => PartitionState::Starting,
                                (Some(_), true) => PartitionState::Paused,
                                (Some(_), false) => PartitionState::Replicating,
                            };
                        }
                        if unpersisted {
                            self.pending_progress.insert(tp.clone());
                        }
                        self.owned.insert(tp.clone(), o);
                        self.request_reassign();
                    }
                }
                let o = self
                    .owned
                    .entry(tp.clone())
                    .or_insert_with(|| Owned::new(target.clone()));
                if o.position.is_none() && ready_targets.contains(target) {
                    new_parts.push(tp);
                }
            }
        }
        // Watermarks of every owned partition: positions for new ones, lag for all.
        let all: Vec<(String, i32)> = self
            .owned
            .keys()
            .map(|tp| (tp.topic.clone(), tp.partition))
            .collect();
        let marks = match io::watermarks(&self.source_meta, all, timeout).await {
            Ok(m) => m,
            Err(e) => {
                warn!("{e}");
                Vec::new()
            }
        };
        let mut marks_by_tp: BTreeMap<TopicPartitionRef, (i64, i64)> = BTreeMap::new();
        for ((topic, partition), r) in marks {
            let tp = TopicPartitionRef { topic, partition };
            match r {
                Ok(m) => {
                    marks_by_tp.insert(tp, m);
                }
                Err(e) => debug!("{e}"),
            }
        }
        for tp in new_parts {
            let stored = self
                .stored_progress
                .get(&(tp.topic.clone(), tp.partition))
                .cloned();
            let start_from = self.spec.start_from;
            let paused = self.spec.paused;
            let Some(o) = self.owned.get_mut(&tp) else {
                continue;
            };
            let position = match &stored {
                Some(p) => {
                    o.topic_id = p.topic_id.clone();
                    o.reset_id = p.reset_id.clone();
                    p.next_offset
                }
                None => {
                    let Some((low, high)) = marks_by_tp.get(&tp) else {
                        continue; // retried at the next refresh
                    };
                    // startFrom applies to what exists when the worker starts; partitions
                    // that appear later start at their beginning (nothing written to them
                    // may be skipped).
                    if start_from == StartFrom::Latest && latest_allowed {
                        *high
                    } else {
                        *low
                    }
                }
            };
            info!(topic = %tp.topic, partition = tp.partition, position, resumed = stored.is_some(), "taking partition");
            o.position = Some(position);
            o.state = if paused {
                PartitionState::Paused
            } else {
                PartitionState::Replicating
            };
            if stored.is_none() {
                self.pending_progress.insert(tp.clone());
            }
            self.request_reassign();
        }
        // Offset validation: every partition with a position, busy or idle, against fresh
        // watermarks and topic ids. New partitions are checked here too, before the consumer
        // is assigned to them (the assignment happens after this refresh).
        let topics: BTreeSet<String> = self
            .owned
            .iter()
            .filter(|(_, o)| o.position.is_some() && !o.state.is_failed())
            .map(|(tp, _)| tp.topic.clone())
            .collect();
        let ids = self.current_topic_ids(topics).await;
        let mut to_confirm = Vec::new();
        for (tp, (low, high)) in marks_by_tp {
            let id = ids.get(&tp.topic).cloned();
            if let Some((now, d)) = self.observe_watermarks(&tp, low, high, id) {
                to_confirm.push((tp, now, d));
            }
        }
        self.confirm_with_fetch(to_confirm).await;
        self.refreshed_once = true;
        debug!(
            elapsed_ms = refresh_begin.elapsed().as_millis() as u64,
            owned = self.owned.len(),
            "topics refreshed"
        );
        self.update_lag_gauges();
        self.update_readiness();
        self.publish();
    }

    fn update_lag_gauges(&self) {
        let m = &self.out.metrics;
        let mut owned = 0;
        let mut failed = 0;
        for (tp, o) in &self.owned {
            owned += 1;
            if o.state.is_failed() {
                failed += 1;
            }
            let p = tp.partition.to_string();
            if let (Some(high), Some(pos)) = (o.high, o.position) {
                m.lag_records
                    .with_label_values(&[&tp.topic, &p])
                    .set((high - pos).max(0));
            }
            if let Some(s) = o.lag_seconds {
                m.lag_seconds.with_label_values(&[&tp.topic, &p]).set(s);
            }
        }
        m.partitions_owned.set(owned);
        m.partitions_failed.set(failed);
    }

    fn update_readiness(&self) {
        if let Some(msg) = &self.fatal {
            self.out.readiness.set_not_ready(msg.clone());
        } else if !self.started {
            self.out.readiness.set_not_ready("starting");
        } else {
            self.out.readiness.set_ready();
        }
        self.out
            .metrics
            .ready
            .set(if self.started && self.fatal.is_none() {
                1.0
            } else {
                0.0
            });
    }

    /// Builds and publishes the status snapshot.
    fn publish(&self) {
        self.update_lag_gauges();
        let partitions: Vec<PartitionSnapshot> = self
            .owned
            .iter()
            .map(|(tp, o)| PartitionSnapshot {
                topic: tp.topic.clone(),
                partition: tp.partition,
                target_topic: o.target_topic.clone(),
                position: o.position,
                high_watermark: o.high,
                lag_records: o.high.zip(o.position).map(|(h, p)| (h - p).max(0)),
                lag_seconds: o.lag_seconds,
                state: o.state.clone(),
            })
            .collect();
        let (state, message) = worker_state(
            self.fatal.as_deref(),
            self.started,
            self.spec.paused,
            &partitions,
        );
        let mut snap = WorkerSnapshot::starting(
            &self.settings.namespace,
            &self.settings.flow_name,
            self.settings.worker_index,
            self.settings.worker_count,
            self.spec.delivery,
        );
        snap.state = state;
        snap.message = message.or_else(|| {
            (state == WorkerState::Starting)
                .then(|| self.out.readiness.not_ready_reason())
                .flatten()
        });
        snap.replication_lag = total_lag(&partitions);
        snap.failures = validation_failures(&partitions);
        snap.partitions = partitions;
        snap.last_applied_reset = self.last_applied_reset.clone();
        self.out.sink.publish(&snap);
    }

    /// Writes the open batch and pending progress, after every dispatched batch (in order).
    /// Errors other than fatal ones rewind and ask for a retry; the batch is consumed either
    /// way.
    async fn write_batch(&mut self) -> Result<WriteOutcome, EngineError> {
        let depth = self.settings.tuning.pipeline_depth.max(1);
        while !self.in_flight.is_empty() {
            // Keep the bound on records without acknowledged progress.
            while self.meta_in_flight.len() >= depth {
                self.next_meta().await;
            }
            let outcome = self.finish_head().await?;
            if !matches!(outcome, WriteOutcome::Committed) || self.reassign_needed {
                self.drain_meta().await;
                return Ok(outcome);
            }
            self.after_write(Ok(outcome))?;
        }
        let (batch, live) = self.take_open();
        let outcome = match self.dispatch(batch, live).await? {
            Dispatch::Sent(d) => self.finish(d).await?,
            Dispatch::Done(batch, outcome) => self.not_dispatched(&batch, outcome).await?,
        };
        self.drain_meta().await;
        Ok(outcome)
    }

    /// Waits for every sync and progress record in flight.
    async fn drain_meta(&mut self) {
        while !self.meta_in_flight.is_empty() {
            self.next_meta().await;
        }
    }

    /// Waits for the oldest syncs and progress in flight. librdkafka reports every record
    /// within its delivery timeout; past that (and a margin) they count as failed.
    async fn next_meta(&mut self) {
        let limit = self.settings.tuning.producer.delivery_timeout + Duration::from_secs(10);
        if tokio::time::timeout(limit, meta_delivered(&mut self.meta_in_flight))
            .await
            .is_ok()
        {
            self.on_meta_delivered();
        } else if let Some(m) = self.meta_in_flight.pop_front() {
            self.meta_failed(m, "no delivery report within the delivery timeout");
        }
    }

    async fn run_job(&mut self, job: Job) -> Result<WriteOutcome, EngineError> {
        match job {
            Job::Open => self.write_batch().await,
            Job::Head => self.finish_head().await,
        }
    }

    /// Whether batches may be dispatched before the previous ones finished: AtLeastOnce only
    /// (a transaction holds one batch), and not while a partition is being retried one record
    /// at a time.
    fn pipelined(&self) -> bool {
        !self.transactional() && !self.owned.values().any(|o| o.careful)
    }

    /// Bounds of the open batch. `Tuning::batch` is the window: it bounds the record data
    /// held (the producer's copies of sent records, the open batch, records read ahead)
    /// and, without transactions, the records not yet covered by acknowledged progress
    /// (what a crash may replicate again; the open batch counts, its records are sent as
    /// they are read). AtLeastOnce: while up to `pipeline_depth` dispatched batches await
    /// their delivery reports, then their progress, the open batch is sent too; it gets a
    /// `pipeline_depth + 1`-th share of the window, less what those still hold. A batch
    /// whose progress write failed leaves the count although its positions are written
    /// again only with the next batch (rare; the bound then holds one batch late).
    /// ExactlyOnce: half (the batch in the transaction and the one read meanwhile).
    fn fill_limits(&self) -> BatchLimits {
        let window = self.settings.tuning.batch;
        if self.transactional() {
            return window.share(2);
        }
        let mut used = (0, 0);
        for d in &self.in_flight {
            used.0 += d.batch.len();
            used.1 += d.batch.bytes();
        }
        for m in &self.meta_in_flight {
            used.0 += m.window.0;
            used.1 += m.window.1;
        }
        window.room(self.settings.tuning.pipeline_depth.max(1) + 1, used)
    }

    /// Sends the open batch without waiting for its delivery reports.
    async fn dispatch_open(&mut self) -> Result<(), EngineError> {
        let (batch, live) = self.take_open();
        match self.dispatch(batch, live).await? {
            Dispatch::Sent(d) => self.in_flight.push_back(d),
            Dispatch::Done(batch, outcome) => {
                let outcome = self.not_dispatched(&batch, outcome).await?;
                self.after_write(Ok(outcome))?;
            }
        }
        Ok(())
    }

    /// A batch that could not be sent (no producer, no transaction): on `Retry` it is
    /// rewound, and the batches sent before it are dropped (they are sent again after it).
    async fn not_dispatched(
        &mut self,
        batch: &Batch,
        outcome: WriteOutcome,
    ) -> Result<WriteOutcome, EngineError> {
        if let WriteOutcome::Retry = outcome {
            self.rewind(batch).await?;
            self.discard_in_flight().await?;
        }
        Ok(outcome)
    }

    /// Asks for the consumer to be re-assigned at the committed positions (a partition
    /// stopped or appeared, a batch was rewound, ...). The open batch goes now: its records
    /// follow positions that are about to change, and are read again after re-assigning.
    fn request_reassign(&mut self) {
        self.reassign_needed = true;
        self.clear_open();
    }

    /// Drops the open batch (records already sent from it may still reach the target: at
    /// least once).
    fn clear_open(&mut self) {
        self.batch.clear();
        self.live = None;
    }

    /// Takes the open batch and what of it was sent already.
    fn take_open(&mut self) -> (Batch, Option<Sending>) {
        (std::mem::take(&mut self.batch), self.live.take())
    }

    /// Finishes the oldest dispatched batch (its records were sent before any later one's).
    /// A batch that did not commit as a whole drops every later one: the consumer restarts
    /// from the committed positions.
    async fn finish_head(&mut self) -> Result<WriteOutcome, EngineError> {
        let Some(d) = self.in_flight.pop_front() else {
            return Ok(WriteOutcome::Committed);
        };
        let outcome = self.finish(d).await?;
        if !matches!(outcome, WriteOutcome::Committed) || self.reassign_needed {
            self.discard_in_flight().await?;
        }
        Ok(outcome)
    }

    /// Drops the dispatched batches: their records may still reach the target (at least
    /// once: they are sent again from the committed positions), their syncs start over.
    async fn discard_in_flight(&mut self) -> Result<(), EngineError> {
        while let Some(d) = self.in_flight.pop_front() {
            debug!(
                records = d.batch.len(),
                "dropping a dispatched batch after a failed one"
            );
            self.rewind(&d.batch).await?;
        }
        Ok(())
    }

    /// Waits for every delivery report of the batch and finishes it: offset syncs and
    /// progress, then the committed positions. `Retry` has rewound.
    async fn finish(&mut self, mut d: Dispatched) -> Result<WriteOutcome, EngineError> {
        let outcome = self.finish_inner(&mut d).await;
        debug!(
            records = d.batch.len(),
            bytes = d.batch.bytes(),
            elapsed_ms = d.s.sent_at.elapsed().as_millis() as u64,
            committed = matches!(outcome, Ok(WriteOutcome::Committed)),
            "batch written"
        );
        if let Ok(WriteOutcome::Retry) = &outcome {
            self.rewind(&d.batch).await?;
        }
        outcome
    }

    /// The error that stops a fenced worker.
    fn fenced(&self, detail: &str) -> EngineError {
        EngineError::Fatal(format!(
            "this worker was fenced on target {}: another worker took over transactional.id {} \
             ({detail}). Two workers with the same index were running; this one stops",
            self.spec.target.alias,
            self.settings.transactional_id()
        ))
    }

    /// Fails if the producer is fenced (librdkafka then reports only "purged" deliveries):
    /// a fenced worker must stop, never re-initialize and fence the worker that replaced it.
    fn check_fenced(&self) -> Result<(), EngineError> {
        match self.writer.as_ref().and_then(TargetWriter::fatal_error) {
            Some((code, msg)) if classify_code(code, true) == ErrorClass::Fenced => {
                Err(self.fenced(&msg))
            }
            _ => Ok(()),
        }
    }

    async fn rewind(&mut self, batch: &Batch) -> Result<(), EngineError> {
        self.check_fenced()?;
        if let Some(w) = &mut self.writer {
            if let Err(e) = w.abort().await {
                if classify_error(&e) == ErrorClass::Fenced {
                    return Err(self.fenced(&describe_error(&e)));
                }
                warn!(
                    "aborting the transaction failed ({}); recreating the producer",
                    describe_error(&e)
                );
                self.drop_writer();
            }
        }
        // Emitters start over: the target may hold copies the next attempt writes again.
        for p in batch.partitions() {
            if let Some(o) = self.owned.get_mut(&p.tp) {
                o.emitter = SyncEmitter::new(fresh_epoch());
            }
        }
        self.request_reassign();
        self.out
            .metrics
            .transactions
            .with_label_values(&["abort"])
            .inc_by(u64::from(self.transactional()));
        Ok(())
    }

    /// Hands the batch's records to the producer (opening the transaction first), after
    /// those already sent while it was read (`live`). Only a partition in careful mode, or a
    /// full producer queue, waits for delivery reports here.
    async fn dispatch(
        &mut self,
        batch: Batch,
        live: Option<Sending>,
    ) -> Result<Dispatch, EngineError> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(Dispatch::Done(batch, WriteOutcome::Retry));
        };
        let mut s = match live {
            Some(s) => s,
            None => {
                if let Err(e) = writer.begin() {
                    let outcome = self.write_error("begin transaction", &e)?;
                    return Ok(Dispatch::Done(batch, outcome));
                }
                Sending::new(writer.tracker().group(batch.len()), batch.len())
            }
        };
        let producer = writer.producer().clone();
        s.cover(&batch, &self.owned);
        let flush_timeout = self.settings.tuning.producer.delivery_timeout;
        if s.careful.iter().any(|c| *c) {
            // Records of dropped batches may still be queued: out of the way first, so each
            // careful record really travels alone.
            flush(&producer, flush_timeout).await;
        }
        // Borrowed by the records below while `s` changes.
        let targets = std::mem::take(&mut s.targets);
        for (i, rec) in batch.records().iter().enumerate().skip(s.next) {
            if s.stopped[rec.slot] {
                continue;
            }
            // Only records with their payload are left to send here.
            debug_assert!(
                !rec.was_sent(),
                "a sent record in the unsent part of a batch"
            );
            let partition = batch.partitions()[rec.slot].tp.partition;
            let Some(target) = targets[rec.slot].as_deref() else {
                s.stopped[rec.slot] = true;
                continue;
            };
            s.reserve(i);
            let br = target_record(
                target,
                s.group.ticket(i),
                partition,
                rec.key(),
                rec.value(),
                rec.timestamp,
                rec.headers.clone(),
            );
            // A full queue (earlier batches too) is waited for once; order is kept.
            match send_waiting(&producer, br, flush_timeout).await {
                Ok(()) => {
                    s.pending.push(i);
                    s.sent += 1;
                    if s.careful[rec.slot] {
                        // One record per produce request, so a size refusal names the
                        // record that is really too large (flush: no linger wait).
                        s.group.expect(s.sent);
                        flush(&producer, flush_timeout).await;
                        s.group.complete().await;
                        s.collect();
                        if let Some(Err(fail)) = &s.results[i] {
                            s.stopped[rec.slot] = fail.class == ErrorClass::Rejected;
                        }
                    }
                }
                Err(e) => {
                    s.refuse(i, rec.slot, &e);
                    self.halted.insert(batch.partitions()[rec.slot].tp.clone());
                }
            }
        }
        s.targets = targets;
        s.next = batch.len();
        s.group.expect(s.sent);
        // librdkafka copied every sent record; a retry re-reads from the source. Only the
        // bookkeeping stays while the batch is in flight.
        let mut batch = batch;
        batch.release_payloads();
        Ok(Dispatch::Sent(Dispatched { batch, s }))
    }

    async fn finish_inner(&mut self, d: &mut Dispatched) -> Result<WriteOutcome, EngineError> {
        d.s.group.complete().await;
        d.s.collect();
        let Some(producer) = self.writer.as_ref().map(|w| w.producer().clone()) else {
            return Ok(WriteOutcome::Retry);
        };
        let Dispatched {
            batch,
            s:
                Sending {
                    targets,
                    careful,
                    results,
                    ..
                },
        } = &*d;
        let acked_at = jiff::Timestamp::now().as_millisecond();
        // Anything that makes the batch unusable? A fenced producer only reports "purged".
        if results.iter().flatten().any(Result::is_err) {
            self.check_fenced()?;
        }
        let mut retry = false;
        let mut abort_needed = false;
        for r in results.iter().flatten() {
            if let Err(f) = r {
                match f.class {
                    ErrorClass::Fenced => return Err(self.fenced(&f.message)),
                    ErrorClass::Unsupported => {
                        return Err(EngineError::Fatal(format!(
                            "target {} cannot store the records: {}",
                            self.spec.target.alias, f.message
                        )));
                    }
                    // A refusal at enqueue never reached the broker: the transaction is fine.
                    ErrorClass::Rejected => abort_needed |= !f.at_enqueue,
                    ErrorClass::ProducerBroken => {
                        retry = true;
                        self.drop_writer();
                    }
                    ErrorClass::Retriable => retry = true,
                }
            }
        }
        let outcomes = partition_outcomes(batch, results);
        // Rejected records stop their partition, in both modes. A size refusal from the
        // broker may cover a whole produce batch: first retry the partition one record per
        // request to find the record that is really too large.
        for (slot, o) in outcomes.iter().enumerate() {
            let Some((offset, f)) = &o.failure else {
                continue;
            };
            if f.class != ErrorClass::Rejected {
                continue;
            }
            let tp = &batch.partitions()[slot].tp;
            if f.size_related && !f.at_enqueue && !careful[slot] {
                if let Some(owned) = self.owned.get_mut(tp) {
                    info!(topic = %tp.topic, partition = tp.partition, offset, "the target refused a produce batch as too large; retrying this partition one record per request");
                    owned.careful = true;
                    self.request_reassign();
                }
                continue;
            }
            self.out.metrics.error(ErrorKind::RecordRejected);
            let message = format!(
                "the target refused the record at source offset {offset} for {}/{}: {}. \
                 The partition is stopped (no record is skipped); fix the target topic \
                 (e.g. raise max.message.bytes, or the producer's message.max.bytes in \
                 target.config) and restart the worker",
                targets[slot].as_deref().unwrap_or("?"),
                tp.partition,
                f.message
            );
            error!(topic = %tp.topic, partition = tp.partition, "{message}");
            self.failures_total
                .with_label_values(&[failure_kind_name(FailureKind::RecordRejected)])
                .inc();
            self.fail_partition(
                tp,
                PartitionFailed {
                    kind: FailureKind::RecordRejected,
                    offset: *offset,
                    message,
                    failure: None,
                },
            );
        }
        if retry {
            self.out.metrics.error(ErrorKind::TargetRetriable);
            let first = results
                .iter()
                .flatten()
                .find_map(|r| r.as_ref().err())
                .map(|f| f.message.clone())
                .unwrap_or_default();
            warn!(
                "records were not delivered to target {}: {first}",
                self.spec.target.alias
            );
            return Ok(WriteOutcome::Retry);
        }
        if abort_needed && self.transactional() {
            // The broker refused a record inside the transaction, which is now poisoned:
            // abort and replay the other partitions (the refused one is Failed or careful).
            self.rewind(batch).await?;
            return Ok(WriteOutcome::Replay);
        }
        // Offset syncs (tentative emitters) and progress.
        let lag_max = self.lag_max();
        let mut syncs: Vec<(usize, EmittedSync)> = Vec::new();
        let mut emitters: Vec<Option<SyncEmitter>> = vec![None; batch.partitions().len()];
        for (slot, o) in outcomes.iter().enumerate() {
            let tp = &batch.partitions()[slot].tp;
            let Some(owned) = self.owned.get(tp) else {
                continue;
            };
            let mut e = owned.emitter.clone();
            let mut out = Vec::new();
            for (u, d) in &o.delivered {
                e.on_record(*u, *d, lag_max, &mut out);
            }
            out.extend(e.on_flush());
            syncs.extend(out.into_iter().map(|s| (slot, s)));
            emitters[slot] = Some(e);
        }
        let mut progress: Vec<Progress> = Vec::new();
        let mut in_batch: BTreeSet<&TopicPartitionRef> = BTreeSet::new();
        for (slot, o) in outcomes.iter().enumerate() {
            let tp = &batch.partitions()[slot].tp;
            in_batch.insert(tp);
            let Some(owned) = self.owned.get(tp) else {
                continue;
            };
            progress.push(Progress {
                topic: tp.topic.clone(),
                partition: tp.partition,
                next_offset: o.next_offset,
                topic_id: owned.topic_id.clone(),
                reset_id: owned.reset_id.clone(),
            });
        }
        let pending_written: Vec<TopicPartitionRef> = self
            .pending_progress
            .iter()
            .filter(|tp| !in_batch.contains(tp))
            .cloned()
            .collect();
        for tp in &pending_written {
            if let Some(o) = self.owned.get(tp) {
                if let Some(pos) = o.position {
                    progress.push(Progress {
                        topic: tp.topic.clone(),
                        partition: tp.partition,
                        next_offset: pos,
                        topic_id: o.topic_id.clone(),
                        reset_id: o.reset_id.clone(),
                    });
                }
            }
        }
        let marker = self.pending_reset_marker.clone();
        if let Some(id) = &marker {
            progress.push(reset_marker(
                self.settings.worker_index,
                self.settings.worker_count,
                id,
            ));
        }
        // Syncs and progress go together (one round trip). Without transactions a crash may
        // keep the progress and lose syncs of the batch: translation then falls back to the
        // safe rule for those offsets (their sync sequence has a hole), never past them.
        let Some(tracker) = self.writer.as_ref().map(|w| w.tracker().clone()) else {
            return Ok(WriteOutcome::Retry);
        };
        let meta_group = tracker.group(syncs.len() + progress.len());
        let flush_timeout = self.settings.tuning.producer.delivery_timeout;
        let mut meta_sent = 0usize;
        for (slot, s) in &syncs {
            let tp = &batch.partitions()[*slot].tp;
            let sync = OffsetSync {
                topic: tp.topic.clone(),
                partition: tp.partition,
                upstream_offset: s.upstream,
                downstream_offset: s.downstream,
            };
            let (key, value) = match (sync.encode_key(), sync.encode_value()) {
                (Ok(k), Ok(v)) => (k, v),
                (Err(e), _) | (_, Err(e)) => {
                    return Err(EngineError::Fatal(format!("encoding an offset sync: {e}")))
                }
            };
            let seq = s.sequence.encode();
            let headers = OwnedHeaders::new().insert(Header {
                key: SYNC_SEQUENCE_HEADER,
                value: Some(seq.as_slice()),
            });
            let br: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(&self.syncs_topic, meta_group.ticket(meta_sent))
                    .partition(0)
                    .key(key.as_slice())
                    .payload(value.as_slice())
                    .headers(headers);
            match send_waiting(&producer, br, flush_timeout).await {
                Ok(()) => meta_sent += 1,
                Err(e) => return self.write_error("send offset sync", &e),
            }
        }
        for p in &progress {
            let (key, value) = match (p.encode_key(), p.encode_value()) {
                (Ok(k), Ok(v)) => (k, v),
                (Err(e), _) | (_, Err(e)) => {
                    return Err(EngineError::Fatal(format!("encoding progress: {e}")))
                }
            };
            let br: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(&self.progress_topic, meta_group.ticket(meta_sent))
                    .partition(0)
                    .key(key.as_slice())
                    .payload(value.as_slice());
            match send_waiting(&producer, br, flush_timeout).await {
                Ok(()) => meta_sent += 1,
                Err(e) => return self.write_error("send progress", &e),
            }
        }
        meta_group.expect(meta_sent);
        if self.transactional() {
            let Some(writer) = self.writer.as_mut() else {
                return Ok(WriteOutcome::Retry);
            };
            if let Err(e) = writer.commit().await {
                return self.write_error("commit transaction", &e);
            }
            meta_group.complete().await;
            if let Some(fail) = first_failure(&meta_group, meta_sent) {
                // Cannot happen after a successful commit; never claim success then.
                warn!("progress not delivered after commit: {}", fail.message);
                return Ok(WriteOutcome::Retry);
            }
            self.out
                .metrics
                .transactions
                .with_label_values(&["commit"])
                .inc();
        }
        // Without transactions the records are on the target now (acknowledged): positions
        // advance at once, while syncs and progress are acknowledged in the background
        // ([`Engine::on_meta_delivered`]). A lost progress record is written again.
        let meta = (!self.transactional()).then_some(MetaPending {
            group: meta_group,
            sent: meta_sent,
            progress: progress
                .iter()
                .map(|p| TopicPartitionRef {
                    topic: p.topic.clone(),
                    partition: p.partition,
                })
                .collect(),
            marker: marker.clone(),
            window: (batch.len(), batch.bytes()),
        });
        // Committed: apply.
        self.out.metrics.offset_syncs.inc_by(syncs.len() as u64);
        let mut per_topic: HashMap<&str, (u64, u64)> = HashMap::new();
        let mut last_ts: Vec<Option<i64>> = vec![None; batch.partitions().len()];
        let mut delivered_count: Vec<usize> = outcomes.iter().map(|o| o.delivered.len()).collect();
        for rec in batch.records() {
            if delivered_count[rec.slot] == 0 {
                continue;
            }
            delivered_count[rec.slot] -= 1;
            let e = per_topic
                .entry(batch.partitions()[rec.slot].tp.topic.as_str())
                .or_default();
            e.0 += 1;
            e.1 += (rec.size - super::batch::RECORD_OVERHEAD_BYTES) as u64;
            if rec.timestamp.is_some() {
                last_ts[rec.slot] = rec.timestamp;
            }
        }
        for (topic, (n, bytes)) in per_topic {
            self.out
                .metrics
                .records
                .with_label_values(&[topic])
                .inc_by(n);
            self.out
                .metrics
                .bytes
                .with_label_values(&[topic])
                .inc_by(bytes);
        }
        for (slot, o) in outcomes.iter().enumerate() {
            let tp = &batch.partitions()[slot].tp;
            let Some(owned) = self.owned.get_mut(tp) else {
                continue;
            };
            owned.position = Some(o.next_offset);
            if let Some(e) = emitters[slot].take() {
                owned.emitter = e;
            }
            if let Some(ts) = last_ts[slot] {
                owned.lag_seconds = Some(((acked_at - ts).max(0) as f64) / 1000.0);
            }
            if o.failure.is_none() {
                owned.high = owned.high.map(|h| h.max(o.next_offset));
                owned.careful = false;
            } else if !owned.state.is_failed() {
                // Retried from the refused record (careful mode): fetch it again.
                owned.fetched = None;
                self.request_reassign();
            }
        }
        for tp in in_batch {
            self.pending_progress.remove(tp);
        }
        for tp in pending_written {
            self.pending_progress.remove(&tp);
        }
        if marker.is_some() && self.pending_reset_marker == marker {
            self.pending_reset_marker = None;
        }
        if let Some(m) = meta {
            self.meta_in_flight.push_back(m);
        }
        Ok(WriteOutcome::Committed)
    }

    /// Drops the producer (it is recreated before the next write). Its reports for syncs and
    /// progress still in flight may never come: those positions are written again.
    fn drop_writer(&mut self) {
        self.writer = None;
        if self.live.is_some() {
            // Sent through the producer that goes: read them again.
            self.request_reassign();
        }
        while let Some(m) = self.meta_in_flight.pop_front() {
            self.meta_failed(m, "the producer was recreated");
        }
    }

    /// Syncs and progress of a batch were acknowledged (AtLeastOnce). On failure, the
    /// positions are written again with the next batch; the syncs are not (their sequence
    /// has a hole, which readers see: translation falls back to the safe rule there).
    fn on_meta_delivered(&mut self) {
        let Some(m) = self.meta_in_flight.pop_front() else {
            return;
        };
        if let Some(f) = first_failure(&m.group, m.sent) {
            self.meta_failed(m, &f.message);
        }
    }

    fn meta_failed(&mut self, m: MetaPending, message: &str) {
        self.out.metrics.error(ErrorKind::Progress);
        warn!("offset syncs or progress not delivered: {message}; writing the positions again");
        for tp in m.progress {
            if self.owned.contains_key(&tp) {
                self.pending_progress.insert(tp);
            }
        }
        if let (Some(id), None) = (m.marker, &self.pending_reset_marker) {
            self.pending_reset_marker = Some(id);
        }
    }

    fn write_error(&mut self, what: &str, e: &KafkaError) -> Result<WriteOutcome, EngineError> {
        self.check_fenced()?;
        let detail = describe_error(e);
        match classify_error(e) {
            ErrorClass::Fenced => Err(self.fenced(&format!("{what}: {detail}"))),
            ErrorClass::ProducerBroken => {
                warn!("{what}: {detail}; recreating the producer");
                self.drop_writer();
                self.out.metrics.error(ErrorKind::TargetRetriable);
                Ok(WriteOutcome::Retry)
            }
            _ => {
                warn!("{what}: {detail}");
                self.out.metrics.error(ErrorKind::TargetRetriable);
                Ok(WriteOutcome::Retry)
            }
        }
    }
}

/// Hands a record to the producer; if its queue is full (`target.config` may make it smaller
/// than the batch window), waits for the queue to empty once and tries again.
async fn send_waiting(
    producer: &ThreadedProducer<DeliveryContext>,
    record: BaseRecord<'_, [u8], [u8], usize>,
    timeout: Duration,
) -> Result<(), KafkaError> {
    match producer.send(record) {
        Ok(()) => Ok(()),
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), record)) => {
            flush(producer, timeout).await;
            producer.send(record).map_err(|(e, _)| e)
        }
        Err((e, _)) => Err(e),
    }
}

/// Sends everything queued in the producer now and waits for its reports (bounded).
async fn flush(producer: &ThreadedProducer<DeliveryContext>, timeout: Duration) {
    let p = producer.clone();
    let r = tokio::task::spawn_blocking(move || p.flush(timeout)).await;
    if let Ok(Err(e)) = r {
        debug!("flushing the target producer: {e}");
    }
}

fn delivery_result(r: Option<DeliveryReport>) -> Result<i64, RecordFailure> {
    match r {
        Some(Ok(offset)) => Ok(offset),
        Some(Err(e)) => Err(RecordFailure::from_error(&e, false)),
        None => Err(RecordFailure {
            class: ErrorClass::Retriable,
            message: "no delivery report for the record".into(),
            at_enqueue: false,
            size_related: false,
        }),
    }
}
