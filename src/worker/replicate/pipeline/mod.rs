//! The dispatcher: the target producer, the open batch, the batches in flight, their syncs
//! and progress awaiting acknowledgement, and the window they share.
//!
//! ExactlyOnce: one transaction per batch, one at a time. AtLeastOnce: records are handed to
//! the producer as they are read ([`Pipeline::on_message`]), and up to `pipeline_depth`
//! sealed batches await their delivery reports, finished oldest first; a batch
//! that did not commit as a whole drops every later one and the open one, and the consumer is
//! re-assigned from the committed positions.
//!
//! The engine talks to it through a few entry points: events in ([`Pipeline::on`],
//! [`Pipeline::on_message`]), work to run ([`Pipeline::run`]), delivery waits
//! ([`Pipeline::delivered`]); what it must do next it decides from a [`View`]
//! (`super::step`).

mod finish;
mod send;
pub mod verdict;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use prometheus::IntCounterVec;
use rdkafka::consumer::StreamConsumer;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use tracing::{info, warn};

use super::batch::{Batch, BatchLimits, BatchRecord, Fill};
use super::intake::{detach_record, headers_and_size};
use super::partitions::PartitionTable;
use super::settings::{EngineError, EngineSettings, Tuning};
use super::step::after_write;
pub use super::step::WriteOutcome;
use super::writer::{classify_error, describe_error, ErrorClass, TargetWriter};
use crate::api::{Delivery, MirrorFlowSpec};
use crate::kafka::config::ClientProperties;
use crate::kafka::consume::{MessageEvent, Pins, SourceMessage};
use crate::kafka::context::LogContext;
use crate::kafka::events::ProducerEvents;
use crate::kafka::health::ClusterHealth;
use crate::kafka::produce::target_record;
use crate::kafka::producer::{Refused, ToSend};
use crate::kafka::wire::{offset_syncs_topic, progress_topic};
use crate::telemetry::metrics::{ErrorKind, WorkerMetrics};
use crate::worker::error::Error as WorkerError;
use send::{flush, head_delivered, meta_delivered, send_waiting};
pub use send::{Dispatched, MetaPending, Sending};

/// Key and value bytes from which a record streamed from its event is sent without a copy
/// (see [`Pipeline::on_message`]). Below it the copy costs less than holding the event: a
/// lock and a reference count per record.
pub const HELD_MIN_BYTES: usize = 512;

/// A consumed record as the pipeline takes it.
pub enum Consumed<'a> {
    /// Borrowed for the call (copied if sent).
    Message(SourceMessage<'a>),
    /// Its event, which may be held while librdkafka reads its bytes, and the consumer it
    /// was taken from.
    Event(MessageEvent<'a>, &'a Arc<StreamConsumer<LogContext>>),
    /// Read while a batch was written (topic, partition, the record with its payload).
    ReadAhead(&'a str, i32, BatchRecord),
}

/// A record straight from the consumer.
enum Fresh<'a> {
    Message(SourceMessage<'a>),
    Event(MessageEvent<'a>, &'a Arc<StreamConsumer<LogContext>>),
}

impl Fresh<'_> {
    fn message(&self) -> SourceMessage<'_> {
        match self {
            Fresh::Message(m) => *m,
            Fresh::Event(ev, _) => ev.message(),
        }
    }
}

/// Work the engine runs on the pipeline ([`Pipeline::run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// Finish every dispatched batch, then write the open batch and pending progress.
    Open,
    /// Finish the oldest dispatched batch.
    Head,
    /// Seal the open batch and send it without waiting for its delivery reports.
    Dispatch,
    /// Shutting down (or replacing the clients): write what is open, in flight and pending
    /// within the grace period (else abort it), wait for the syncs and progress, then drop
    /// everything.
    Final { grace: Duration },
    /// Shutting down: abort a transaction a write left open and, unless every write so far
    /// finished (`clean`), drop what is left (it would follow a batch whose outcome is
    /// unknown).
    Abandon { clean: bool },
}

/// What happened, for [`Pipeline::on`].
pub enum Event<'a> {
    /// The assignment changes (a partition stopped, appeared, was reset or paused; new
    /// clients): the open batch goes now (its records follow positions that are about to
    /// change) and the consumer is re-assigned at the committed positions before it reads
    /// more.
    AssignmentChanged,
    /// The consumer was re-assigned: the open batch starts over.
    Reassigned,
    /// Positions were read back after a commit whose outcome was unknown.
    Reloaded,
    /// A step failed (why): nothing is written for a backoff delay, and the consumer re-reads
    /// from the committed positions.
    Failed(&'a dyn std::fmt::Display),
    /// A start step failed: the next attempt waits for the next backoff delay
    /// ([`View::retry_at`]).
    StartFailed,
    /// The worker started: backoff delays start over.
    Started,
    /// The retry delay passed.
    RetryTimer,
    /// The oldest syncs and progress in flight have their reports ([`Pipeline::delivered`]).
    MetaDelivered,
    /// The producer signalled events nobody waits for (statistics, errors).
    ProducerSignalled,
    /// The target's Secrets rotated (after [`Job::Final`]): the next write creates a
    /// producer from fresh properties.
    SecretsRotated,
    /// `spec.offsetSyncs.lagMax` changed (it applies live).
    LagMax(i64),
}

/// What the engine reads of the pipeline at a turn (decisions: [`super::step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// A producer exists.
    pub has_writer: bool,
    /// A producer exists, no retry is pending and positions are known.
    pub can_write: bool,
    /// Positions must be read back from the progress topic before writing (a commit's
    /// outcome is unknown).
    pub reload_needed: bool,
    /// The consumer must be re-assigned at the committed positions before it reads more.
    pub reassign_needed: bool,
    /// Nothing is written before this instant.
    pub retry_at: Option<Instant>,
    /// The retry time (if any) has come.
    pub retry_due: bool,
    /// The open batch.
    pub open: Fill,
    /// Batches sent and not finished.
    pub in_flight: usize,
    /// Syncs and progress awaiting acknowledgement.
    pub meta_in_flight: usize,
    /// ExactlyOnce: one transaction per batch, one at a time.
    pub transactional: bool,
    /// Another batch may be dispatched now.
    pub has_room: bool,
    /// The oldest dispatched batch may be finished now (its syncs and progress need room).
    pub head_finishable: bool,
    /// When the target last acknowledged a batch, or syncs and progress.
    pub last_ack: Instant,
}

impl View {
    /// Whether batches may be dispatched before the previous ones finished: AtLeastOnce only
    /// (a transaction holds one batch), and not while a partition of `table` is being
    /// retried one record at a time.
    pub fn pipelined(&self, table: &PartitionTable) -> bool {
        !self.transactional && !table.any_careful()
    }

    /// Whether records (or syncs and progress) wait for the target.
    pub fn pending_work(&self) -> bool {
        self.open.records > 0 || self.in_flight > 0 || self.meta_in_flight > 0
    }
}

/// Which delivery wait finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// The oldest syncs and progress in flight have their reports.
    Meta,
    /// The oldest dispatched batch has all its reports.
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

/// Why the target producer could not be created this time (the worker retries): a
/// transactional producer whose `init_transactions` timed out is waiting for the target's
/// transaction coordinator, which is named with what keeps it away and the way out.
pub fn producer_problem(
    target_alias: &str,
    bootstrap: &str,
    transactional_id: Option<&str>,
    code: Option<RDKafkaErrorCode>,
    timeout: Duration,
    detail: &str,
) -> String {
    match (transactional_id, code) {
        (Some(tid), Some(RDKafkaErrorCode::OperationTimedOut)) => format!(
            "target cluster {target_alias} ({bootstrap}) did not initialize transactions for \
             transactional.id {tid} within {} s ({detail}): spec.delivery ExactlyOnce needs the \
             target's transaction coordinator, which does not answer while the target is \
             unreachable or cannot keep its __transaction_state topic (fewer brokers than \
             transaction.state.log.replication.factor, or fewer in sync than \
             transaction.state.log.min.isr). Retrying; fix the target, or set spec.delivery: \
             AtLeastOnce to replicate without transactions",
            timeout.as_secs()
        ),
        _ => format!("creating the producer for target {target_alias} failed: {detail}"),
    }
}

/// Who writes, where, and how.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// ExactlyOnce.
    pub transactional: bool,
    pub tuning: Tuning,
    pub target_alias: String,
    pub target_bootstrap: String,
    pub transactional_id: String,
    pub syncs_topic: String,
    pub progress_topic: String,
    /// `(index, count)` of this worker (its reset marker).
    pub worker: (u32, u32),
    /// The target's connection health (the producer reports into it); `None`: logs only.
    pub target_health: Option<ClusterHealth>,
    /// Namespace and name of the flow (the reset command in a RecordRejected message).
    pub namespace: String,
    pub flow_name: String,
}

impl PipelineConfig {
    /// The write side of worker `settings` of the flow `spec`.
    pub fn for_flow(settings: &EngineSettings, spec: &MirrorFlowSpec) -> Self {
        Self {
            transactional: spec.delivery == Delivery::ExactlyOnce,
            tuning: settings.tuning.clone(),
            target_alias: spec.target.alias.clone(),
            target_bootstrap: spec.target.bootstrap_servers.clone(),
            transactional_id: settings.transactional_id(),
            // MM2 3.x keeps offset syncs on the target under the source's alias.
            syncs_topic: offset_syncs_topic(&spec.source.alias),
            progress_topic: progress_topic(&settings.namespace, &settings.flow_name),
            worker: (settings.worker_index, settings.worker_count),
            target_health: None,
            namespace: settings.namespace.clone(),
            flow_name: settings.flow_name.clone(),
        }
    }
}

/// Exponential retry delays after a failed write or start step.
struct Retry {
    builder: ExponentialBuilder,
    backoff: ExponentialBackoff,
    max: Duration,
    /// Nothing is written before this instant.
    at: Option<Instant>,
}

impl Retry {
    fn new(t: &Tuning) -> Self {
        let builder = ExponentialBuilder::new()
            .with_min_delay(t.retry_min)
            .with_max_delay(t.retry_max)
            .with_jitter()
            .without_max_times();
        Self {
            backoff: builder.build(),
            builder,
            max: t.retry_max,
            at: None,
        }
    }

    /// The next delay.
    fn next_delay(&mut self) -> Duration {
        self.backoff.next().unwrap_or(self.max)
    }

    /// Back to the shortest delay.
    fn reset(&mut self) {
        self.backoff = self.builder.build();
    }

    /// Whether the retry time (if any) has come.
    fn due(&self) -> bool {
        self.at.is_none_or(|t| Instant::now() >= t)
    }
}

/// The write side of the engine.
pub struct Pipeline {
    cfg: PipelineConfig,
    /// `spec.offsetSyncs.lagMax` (applies live).
    lag_max: i64,
    retry: Retry,
    writer: Option<TargetWriter>,
    batch: Batch,
    /// A finished batch, emptied, whose memory the next open batch takes.
    spare_batch: Option<Batch>,
    /// What of the open batch was handed to the producer while it was read.
    live: Option<Sending>,
    /// Batches sent and not finished yet, oldest first (AtLeastOnce pipelines them).
    in_flight: VecDeque<Dispatched>,
    /// Syncs and progress of finished batches awaiting acknowledgement (AtLeastOnce).
    meta_in_flight: VecDeque<MetaPending>,
    /// The consumer must be re-assigned at the committed positions before it reads more.
    reassign_needed: bool,
    /// Positions must be read back from the progress topic before writing (a commit's
    /// outcome is unknown).
    reload_needed: bool,
    metrics: WorkerMetrics,
    /// `mirrorflow_worker_partition_failures_total{type}` (RecordRejected).
    failures_total: IntCounterVec,
    /// When the target last acknowledged a batch, or syncs and progress.
    last_ack: Instant,
    /// The fetch buffers that records sent without a copy keep allocated.
    pins: Pins,
    /// Why the target's authorizer refused the last batch (the worker shows it until a
    /// batch commits).
    write_refused: Option<String>,
}

impl Pipeline {
    pub fn new(
        cfg: PipelineConfig,
        lag_max: i64,
        metrics: WorkerMetrics,
        failures_total: IntCounterVec,
    ) -> Self {
        Self {
            retry: Retry::new(&cfg.tuning),
            cfg,
            lag_max,
            writer: None,
            batch: Batch::new(),
            spare_batch: None,
            live: None,
            in_flight: VecDeque::new(),
            meta_in_flight: VecDeque::new(),
            reassign_needed: false,
            reload_needed: false,
            write_refused: None,
            metrics,
            failures_total,
            last_ack: Instant::now(),
            pins: Pins::default(),
        }
    }

    /// Creates the producer if missing: `Ok(Some((problem, cause)))` when it failed for now
    /// (retry later); a target that can never provide the transactions asked for is fatal.
    pub async fn ensure_writer(
        &mut self,
        props: &ClientProperties,
    ) -> Result<Option<(String, KafkaError)>, EngineError> {
        if self.writer.is_some() {
            return Ok(None);
        }
        let tid = self
            .cfg
            .transactional
            .then(|| self.cfg.transactional_id.clone());
        let ctx = match &self.cfg.target_health {
            Some(h) => h.context(),
            None => LogContext::new(&self.cfg.target_alias),
        };
        match TargetWriter::create(props, ctx, tid.as_deref(), self.cfg.tuning.producer).await {
            Ok(w) => {
                info!(
                    transactional_id = tid.as_deref().unwrap_or("-"),
                    "target producer ready"
                );
                self.writer = Some(w);
                Ok(None)
            }
            Err(e) => {
                let class = classify_error(&e);
                let detail = describe_error(&e);
                match (class, tid) {
                    // A target that cannot do transactions (or refuses our transactional.id)
                    // never will: say what to change. Nobody can have fenced us at init.
                    (
                        ErrorClass::Fenced
                        | ErrorClass::Unsupported
                        | ErrorClass::Rejected
                        | ErrorClass::ProducerBroken,
                        Some(tid),
                        // The target refuses the transactions the flow asks for (the text says
                        // what to choose instead).
                    ) => Err(EngineError::Fatal(WorkerError::Refused(
                        transactions_unsupported_message(
                            &self.cfg.target_alias,
                            &self.cfg.target_bootstrap,
                            &tid,
                            &detail,
                        ),
                    ))),
                    (_, tid) => {
                        self.metrics.error(ErrorKind::TargetRetriable, &e);
                        let problem = producer_problem(
                            &self.cfg.target_alias,
                            &self.cfg.target_bootstrap,
                            tid.as_deref(),
                            e.rdkafka_error_code(),
                            self.cfg.tuning.producer.transaction_timeout,
                            &detail,
                        );
                        Ok(Some((problem, e)))
                    }
                }
            }
        }
    }

    /// What the engine reads of the pipeline now.
    pub fn view(&self) -> View {
        let depth = self.cfg.tuning.pipeline_depth.max(1);
        View {
            has_writer: self.writer.is_some(),
            can_write: self.can_write(),
            reload_needed: self.reload_needed,
            reassign_needed: self.reassign_needed,
            retry_at: self.retry.at,
            retry_due: self.retry.due(),
            open: self.batch.fill(),
            in_flight: self.in_flight.len(),
            meta_in_flight: self.meta_in_flight.len(),
            transactional: self.cfg.transactional,
            has_room: self.in_flight.len() < depth,
            head_finishable: !self.in_flight.is_empty() && self.meta_in_flight.len() < depth,
            last_ack: self.last_ack,
        }
    }

    /// Takes `event` in.
    pub fn on(&mut self, event: Event<'_>, table: &mut PartitionTable) {
        match event {
            Event::AssignmentChanged => self.request_reassign(),
            Event::Reassigned => {
                self.reassign_needed = false;
                self.clear_open();
            }
            Event::Reloaded => {
                self.reload_needed = false;
                self.request_reassign();
            }
            Event::Failed(why) => self.schedule_retry(why),
            Event::StartFailed => self.retry.at = Some(Instant::now() + self.retry.next_delay()),
            Event::Started => {
                self.retry.reset();
                self.retry.at = None;
            }
            Event::RetryTimer => self.retry.at = None,
            Event::MetaDelivered => self.on_meta_delivered(table),
            Event::ProducerSignalled => {
                if let Some(w) = &self.writer {
                    w.serve();
                }
            }
            Event::SecretsRotated => self.drop_writer(table),
            Event::LagMax(lag_max) => self.lag_max = lag_max,
        }
    }

    /// The producer's event signal, to wait for events nobody waits for (statistics,
    /// errors); then [`Event::ProducerSignalled`].
    pub fn producer_events(&self) -> Option<Arc<ProducerEvents>> {
        self.writer.as_ref().map(|w| Arc::clone(w.events()))
    }

    /// Whether a producer exists, no retry is pending and positions are known.
    fn can_write(&self) -> bool {
        self.writer.is_some() && self.retry.due() && !self.reload_needed
    }

    /// Asks for the consumer to be re-assigned at the committed positions (a partition
    /// stopped or appeared, a batch was rewound, ...). The open batch goes now: its records
    /// follow positions that are about to change, and are read again after re-assigning.
    fn request_reassign(&mut self) {
        self.reassign_needed = true;
        self.clear_open();
    }

    /// A write failed: nothing is written for a backoff delay, and the consumer re-reads
    /// from the committed positions.
    fn schedule_retry(&mut self, why: &dyn std::fmt::Display) {
        let delay = self.retry.next_delay();
        warn!(delay_ms = delay.as_millis() as u64, "{why}; retrying");
        self.retry.at = Some(Instant::now() + delay);
        self.request_reassign();
    }

    /// Why the target's authorizer refuses the worker's writes, until a batch commits.
    pub fn write_refused(&self) -> Option<&str> {
        self.write_refused.as_deref()
    }

    /// Counts a write's outcome and applies what it asks for ([`after_write`]).
    fn after_write(&mut self, outcome: WriteOutcome) {
        let a = after_write(outcome);
        if a.acknowledged {
            self.retry.reset();
            self.last_ack = Instant::now();
            self.write_refused = None;
        }
        self.reload_needed |= a.reload;
        if let Some(why) = a.retry {
            self.schedule_retry(&why);
        }
        self.metrics.batches.with_label_values(&[a.label]).inc();
    }

    /// Whether nothing at all is open, in flight or awaiting acknowledgement.
    fn idle(&self) -> bool {
        self.batch.is_empty() && self.in_flight.is_empty() && self.meta_in_flight.is_empty()
    }

    /// Whether batches may be dispatched before the previous ones finished.
    fn pipelined(&self, table: &PartitionTable) -> bool {
        self.view().pipelined(table)
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
    pub fn fill_limits(&self) -> BatchLimits {
        let window = self.cfg.tuning.batch;
        if self.cfg.transactional {
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
        // What records sent without a copy keep beyond their batches' count: the rest of
        // their fetch buffers, and everything of those whose batch was dropped before their
        // reports.
        used.1 += match &self.writer {
            Some(w) => w.tracker().held_beyond_groups(&self.pins),
            None => self.pins.bytes(),
        };
        window.room(self.cfg.tuning.pipeline_depth.max(1) + 1, used)
    }

    /// Waits until the oldest syncs and progress in flight are acknowledged, or (with
    /// `head`) the oldest dispatched batch has all its delivery reports; syncs and progress
    /// first. Pending while neither can happen.
    pub async fn delivered(&mut self, head: bool) -> Delivered {
        let meta = !self.meta_in_flight.is_empty();
        let head = head && !self.in_flight.is_empty();
        tokio::select! {
            biased;
            _ = meta_delivered(&mut self.meta_in_flight), if meta => Delivered::Meta,
            _ = head_delivered(&mut self.in_flight), if head => Delivered::Head,
            else => std::future::pending().await,
        }
    }

    /// A record read ahead: into the open batch with its payload, sent when the batch is.
    fn push_open(&mut self, topic: &str, partition: i32, record: BatchRecord) {
        let now = self.batch.opened_at().unwrap_or_else(Instant::now);
        self.batch.push(topic, partition, record, now);
    }

    /// A consumed record, if the table accepts it; whether the open batch takes more now
    /// (a producer that can write, room within `limits`, no re-assignment pending).
    ///
    /// A record read ahead goes into the open batch with its payload, sent when the batch
    /// is. Otherwise, while the open batch streams, the record is handed to the producer at
    /// once (as a bare copy loop does, and without a burst per batch), and the batch keeps
    /// its bookkeeping: a record of at least [`HELD_MIN_BYTES`] taken with its event is not
    /// copied at all (the event is held until the record's delivery report), others are
    /// copied by librdkafka. Otherwise its payload is copied into the batch.
    pub fn on_message(
        &mut self,
        c: Consumed<'_>,
        table: &mut PartitionTable,
        limits: &BatchLimits,
    ) -> bool {
        match c {
            Consumed::ReadAhead(topic, partition, record) => {
                if table.accept(topic, partition, record.offset) {
                    self.push_open(topic, partition, record);
                }
            }
            Consumed::Message(m) => self.stream(Fresh::Message(m), table),
            Consumed::Event(ev, consumer) => self.stream(Fresh::Event(ev, consumer), table),
        }
        self.can_write() && !self.reassign_needed && !self.batch.is_full(limits)
    }

    /// A record straight from the consumer (see [`Pipeline::on_message`]).
    fn stream(&mut self, c: Fresh<'_>, table: &mut PartitionTable) {
        let m = c.message();
        // Read once: each read is a `strlen` and a UTF-8 check.
        let topic = m.topic();
        let (partition, offset) = (m.partition(), m.offset());
        if !table.accept(topic, partition, offset) {
            return;
        }
        let streaming = self.streaming(table);
        let writer = match self.writer.as_mut() {
            Some(w) if streaming => w,
            _ => {
                self.push_open(topic, partition, detach_record(m));
                return;
            }
        };
        let timestamp = m.timestamp();
        let (headers, size) = headers_and_size(m);
        let bytes = m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len);
        let held = matches!(c, Fresh::Event(..)) && bytes >= HELD_MIN_BYTES;
        let now = self.batch.opened_at().unwrap_or_else(Instant::now);
        self.batch.push(
            topic,
            partition,
            BatchRecord::sent(offset, timestamp, size).with_held(held),
            now,
        );
        let s = self
            .live
            .get_or_insert_with(|| Sending::new(writer.tracker().group(0), 0));
        s.cover(&self.batch, table, writer);
        let i = self.batch.len() - 1;
        let slot = self.batch.records()[i].slot;
        s.reserve(i);
        let Some(target) = s.targets[slot].as_ref().filter(|_| !s.stopped[slot]) else {
            s.stopped[slot] = true;
            s.next = i + 1;
            return;
        };
        // Held: the event goes with the record; copied: the record borrows its bytes from
        // the consumed message, kept here until the producer copied them.
        let (event, copied) = match c {
            Fresh::Event(ev, consumer) if held => (Some(ev.hold(consumer, &self.pins)), None),
            c => (None, Some(c)),
        };
        let source = copied.as_ref().map(Fresh::message);
        let record = match (event, source) {
            (Some(event), _) => ToSend::Held {
                name: &target.name,
                at: (&s.group, i),
                event,
                timestamp,
                headers,
            },
            (None, Some(m)) => ToSend::Copied(target_record(
                &target.name,
                s.group.ticket(i),
                partition,
                m.key(),
                m.payload(),
                timestamp,
                headers,
            )),
            (None, None) => unreachable!("a record is sent either held or copied"),
        };
        match writer.send(target.id, record) {
            Ok(()) => {
                s.pending.push(i);
                s.sent += 1;
                s.next = i + 1;
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                // Kept with its payload; `dispatch` sends it and the rest of the batch
                // (waiting for room), in order.
                let kept = match (&back, source) {
                    (Refused::Held(ev), _) => detach_record(ev.message()),
                    (Refused::Copied(_), Some(m)) => detach_record(m),
                    (Refused::Copied(_), None) => unreachable!("a copied record has its source"),
                };
                self.batch.hold_last(kept);
            }
            Err((e, _)) => {
                s.refuse(i, slot, &e);
                s.next = i + 1;
                table.halt(&self.batch.partitions()[slot].tp);
            }
        }
    }

    /// Whether the next consumed record goes to the producer at once (given a producer):
    /// AtLeastOnce and pipelined when the batch opened (checked once per batch), and every
    /// earlier record of the batch handled (one kept with its payload keeps the rest behind
    /// it: order).
    fn streaming(&self, table: &PartitionTable) -> bool {
        match &self.live {
            Some(s) => s.next == self.batch.len(),
            None => self.batch.is_empty() && self.pipelined(table),
        }
    }

    /// Drops the open batch (records already sent from it may still reach the target: at
    /// least once).
    fn clear_open(&mut self) {
        self.batch.clear();
        self.live = None;
    }

    /// Takes the open batch and what of it was sent already.
    fn take_open(&mut self) -> (Batch, Option<Sending>) {
        let next = self.spare_batch.take().unwrap_or_default();
        (std::mem::replace(&mut self.batch, next), self.live.take())
    }

    /// Keeps a finished batch's memory for a later one: a batch's worth of fresh memory is
    /// page faults every batch (perf: 3 % of the worker's CPU at 100 B records).
    fn recycle(&mut self, mut batch: Batch) {
        batch.clear();
        self.spare_batch = Some(batch);
    }

    /// Sends the open batch without waiting for its delivery reports.
    async fn dispatch_open(&mut self, table: &mut PartitionTable) -> Result<(), EngineError> {
        let (batch, live) = self.take_open();
        match self.dispatch(batch, live, table).await? {
            Dispatch::Sent(d) => self.in_flight.push_back(d),
            Dispatch::Done(batch, outcome) => {
                let outcome = self.not_dispatched(&batch, outcome, table).await?;
                self.after_write(outcome);
            }
        }
        Ok(())
    }

    /// Runs `job`; a write's outcome is counted and applied (a failed one schedules a
    /// retry, an unknown one a reload: see [`View`]). Only a fatal error is returned.
    pub async fn run(&mut self, job: Job, table: &mut PartitionTable) -> Result<(), EngineError> {
        match job {
            Job::Open => {
                let outcome = self.write_batch(table).await?;
                self.after_write(outcome);
            }
            Job::Head => {
                let outcome = self.finish_head(table).await?;
                self.after_write(outcome);
            }
            Job::Dispatch => self.dispatch_open(table).await?,
            Job::Final { grace } => self.final_write(table, grace).await,
            Job::Abandon { clean } => self.abandon(clean).await,
        }
        Ok(())
    }

    /// Writes the open batch and pending progress, after every dispatched batch (in order).
    /// Errors other than fatal ones rewind and ask for a retry; the batch is consumed either
    /// way.
    async fn write_batch(
        &mut self,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        let depth = self.cfg.tuning.pipeline_depth.max(1);
        while !self.in_flight.is_empty() {
            // Keep the bound on records without acknowledged progress.
            while self.meta_in_flight.len() >= depth {
                self.next_meta(table).await;
            }
            let outcome = self.finish_head(table).await?;
            if outcome != WriteOutcome::Committed || self.reassign_needed {
                self.drain_meta(table).await;
                return Ok(outcome);
            }
            self.after_write(outcome);
        }
        let (batch, live) = self.take_open();
        let outcome = match self.dispatch(batch, live, table).await? {
            Dispatch::Sent(d) => self.finish(d, table).await?,
            Dispatch::Done(batch, outcome) => self.not_dispatched(&batch, outcome, table).await?,
        };
        self.drain_meta(table).await;
        Ok(outcome)
    }

    /// A batch that could not be sent (no producer, no transaction): on `Retry` it is
    /// rewound, and the batches sent before it are dropped (they are sent again after it).
    async fn not_dispatched(
        &mut self,
        batch: &Batch,
        outcome: WriteOutcome,
        table: &mut PartitionTable,
    ) -> Result<WriteOutcome, EngineError> {
        if outcome == WriteOutcome::Retry {
            self.rewind(batch, table).await?;
            self.discard_in_flight(table).await?;
        }
        Ok(outcome)
    }

    /// Hands the batch's records to the producer (opening the transaction first), after
    /// those already sent while it was read (`live`). Only a partition in careful mode, or a
    /// full producer queue, waits for delivery reports here.
    async fn dispatch(
        &mut self,
        batch: Batch,
        live: Option<Sending>,
        table: &mut PartitionTable,
    ) -> Result<Dispatch, EngineError> {
        let Some(writer) = self.writer.as_mut() else {
            return Ok(Dispatch::Done(batch, WriteOutcome::Retry));
        };
        let mut s = match live {
            Some(s) => s,
            None => {
                if let Err(e) = writer.begin() {
                    let outcome = self.write_error("begin transaction", &e, table)?;
                    return Ok(Dispatch::Done(batch, outcome));
                }
                Sending::new(writer.tracker().group(batch.len()), batch.len())
            }
        };
        let producer = writer.producer().clone();
        s.cover(&batch, table, writer);
        let writer = &*writer;
        let flush_timeout = self.cfg.tuning.producer.delivery_timeout;
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
            let Some(target) = targets[rec.slot].as_ref() else {
                s.stopped[rec.slot] = true;
                continue;
            };
            s.reserve(i);
            let br = target_record(
                &target.name,
                s.group.ticket(i),
                partition,
                rec.key(),
                rec.value(),
                rec.timestamp,
                rec.headers().cloned(),
            );
            // A full queue (earlier batches too) is waited for once; order is kept.
            match send_waiting(writer, target.id, br, flush_timeout).await {
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
                    table.halt(&batch.partitions()[rec.slot].tp);
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

    /// On shutdown: aborts a transaction a write left open (it cannot be finished safely)
    /// and, unless every write so far finished (`clean`), drops what is left (it would follow
    /// a batch whose outcome is unknown).
    async fn abandon(&mut self, clean: bool) {
        if !clean {
            self.in_flight.clear();
            self.clear_open();
        }
        if let Some(w) = &mut self.writer {
            if w.in_transaction() {
                if let Err(e) = w.abort().await {
                    warn!(
                        "aborting the open transaction failed: {}",
                        describe_error(&e)
                    );
                }
                self.clear_open();
            }
        }
    }

    /// On shutdown: writes what is open, in flight and pending within `grace` (else aborts
    /// it), waits for the syncs and progress, then drops everything.
    async fn final_write(&mut self, table: &mut PartitionTable, grace: Duration) {
        let open = !self.idle() || table.has_pending();
        if open && self.can_write() {
            match tokio::time::timeout(grace, self.write_batch(table)).await {
                Ok(Ok(outcome)) => self.after_write(outcome),
                Ok(Err(e)) => warn!("final batch: {e}"),
                Err(_) => {
                    warn!(?grace, "final batch did not commit in time; aborting it");
                    if let Some(w) = &mut self.writer {
                        let _ = w.abort().await;
                    }
                }
            }
        }
        if !self.meta_in_flight.is_empty()
            && tokio::time::timeout(grace, self.drain_meta(table))
                .await
                .is_err()
        {
            warn!(?grace, "offset syncs or progress not acknowledged in time");
        }
        self.clear_open();
        self.in_flight.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_problems() {
        let t = Duration::from_secs(60);
        let timed_out = Some(RDKafkaErrorCode::OperationTimedOut);
        let coordinator = producer_problem(
            "dc2",
            "k:9092",
            Some("mirrorflow-1-a-f-0"),
            timed_out,
            t,
            "x",
        );
        for want in [
            "target cluster dc2 (k:9092) did not initialize transactions for transactional.id \
             mirrorflow-1-a-f-0 within 60 s (x)",
            "transaction coordinator",
            "__transaction_state",
            "transaction.state.log.replication.factor",
            "spec.delivery: AtLeastOnce",
        ] {
            assert!(coordinator.contains(want), "{want}: {coordinator}");
        }
        let cases = [
            (None, timed_out),
            (Some("id"), Some(RDKafkaErrorCode::BrokerTransportFailure)),
            (Some("id"), None),
        ];
        for (tid, code) in cases {
            assert_eq!(
                producer_problem("dc2", "k:9092", tid, code, t, "x"),
                "creating the producer for target dc2 failed: x",
                "{tid:?} {code:?}"
            );
        }
    }
}
