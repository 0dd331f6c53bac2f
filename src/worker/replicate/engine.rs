//! The replication loop of one worker: its lifecycle (start, run, shut down) and the select
//! loop that drives the rest.
//!
//! One task owns the source consumer ([`intake`]), the partition table ([`partitions`]) and
//! the write side ([`pipeline`]). Records are consumed into the open batch and written when it
//! is full or its linger time passed. Topic discovery and the periodic offset-validation
//! check run beside the loop ([`discovery`]): the loop only applies their plans. Anything
//! that changes the assignment (a refresh, pause, a failed partition, a rewind) drops the
//! later batches and the open one and is applied from the committed positions, so the
//! consumer never runs ahead of what the target holds. Offset validation: [`validate`];
//! resets: [`reset`].
//!
//! [`intake`]: super::intake
//! [`partitions`]: super::partitions
//! [`pipeline`]: super::pipeline
//! [`discovery`]: super::discovery
//! [`validate`]: super::validate
//! [`reset`]: super::reset

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use super::batch::BatchLimits;
use super::clients::Clients;
use super::discovery::{Discovery, RefreshPlan};
use super::intake::{classify_consumer_error, ConsumerError, ReadAhead};
use super::io;
use super::partitions::PartitionTable;
use super::pipeline::{Consumed, Delivered, Event, Job, Pipeline, PipelineConfig, View};
use super::report;
use super::reset::{handled_reset_ids, ResetIo, Resets};
use super::step::{due, next_step, wake_at, Deadlines, Due, LoopState, Step};
use super::validate::{
    attribute_out_of_range, detection_failure, failure_counter, out_of_range, Attribution, TopicIds,
};
use crate::api::status::worker_id;
use crate::api::MirrorFlowSpec;
use crate::kafka::consume::{Polled, ReadyQueue, SourceMessage};
use crate::kafka::context::LogContext;
use crate::kafka::events::ProducerEvents;
use crate::kafka::secrets::FlowSecrets;
use crate::kafka::topics;
use crate::kafka::wire::{offset_syncs_topic, progress_topic};
use crate::telemetry::metrics::{Categorized, ErrorKind};
use crate::worker::topic_filter::TopicFilter;
use crate::worker::validation::classify::{Detection, FlowRef, ReportedFailures};

use super::settings::{live_spec, EngineError, EngineOutputs, EngineSettings};
use crate::worker::error::Error as WorkerError;

mod failback;
mod publish;
mod refresh;

/// The replication engine of one worker.
pub struct Engine {
    settings: EngineSettings,
    spec: MirrorFlowSpec,
    flow_rx: watch::Receiver<MirrorFlowSpec>,
    out: EngineOutputs,
    clients: Clients,
    filter: TopicFilter,
    table: PartitionTable,
    pipeline: Pipeline,
    /// The clients of refreshes (and its stored progress once read).
    discovery: Discovery,
    topic_ids: TopicIds,
    /// The refresh running beside the loop.
    refreshing: Option<JoinHandle<RefreshPlan>>,
    next_refresh: Instant,
    progress_loaded: bool,
    /// MirrorMaker 2's positions were read (or are not asked for).
    mm2_loaded: bool,
    /// Where partitions started once MM2's positions were read.
    takeover: Option<super::migrate::Takeover>,
    /// The failback positions were read (or are not asked for).
    failback_loaded: bool,
    /// What failing back measured (worker 0 shows it).
    failback: Option<crate::api::FailbackReport>,
    internal_topics_ready: bool,
    out_of_range_seen: bool,
    started: bool,
    fatal: Option<WorkerError>,
    resets: Resets,
    /// Failures already logged (each is logged once at error level).
    reported: ReportedFailures,
    /// `mirrorflow_worker_partition_failures_total{type}`.
    failures_total: IntCounterVec,
    /// Since when records have waited for the target without an acknowledgement.
    waiting: Option<Instant>,
    /// Why the worker is stalled, once `waiting` passed `Tuning::stall_after`.
    stalled: Option<String>,
    /// Target topics that cannot take a write (from the last refresh that could check).
    unwritable: Vec<String>,
    /// A read the source refused, and whether the worker shows it
    /// ([`report::refusal_now`]: Degraded while a partition with records waiting is stuck).
    refused: Option<report::Refusal>,
    refused_shown: bool,
    /// Rotation versions of the clusters' mounted Secrets (see [`Engine::watch_secrets`]).
    secrets: Option<FlowSecrets>,
}

impl Engine {
    /// Builds the clients. Configuration problems (missing secrets, bad properties) are fatal.
    pub fn new(
        settings: EngineSettings,
        flow_rx: watch::Receiver<MirrorFlowSpec>,
        out: EngineOutputs,
    ) -> Result<Self, EngineError> {
        let spec = flow_rx.borrow().clone();
        let filter = TopicFilter::new(&spec)
            .map_err(|e| EngineError::Fatal(WorkerError::Spec(format!("spec.topics: {e}"))))?;
        let clients = Clients::connect(&settings, &spec, &out.health)?;
        let (failures_total, register_error) = failure_counter(&out.metrics.registry);
        if let Some(e) = register_error {
            warn!("mirrorflow_worker_partition_failures_total is not exported: {e}");
        }
        let tuning = settings.tuning.clone();
        let topic_ids = TopicIds::new(
            clients.source_admin.clone(),
            &spec.source.alias,
            tuning.validation_timeout,
            spec.offset_validation.enabled,
        );
        let pipeline = Pipeline::new(
            PipelineConfig {
                target_health: Some(out.health.target.clone()),
                ..PipelineConfig::for_flow(&settings, &spec)
            },
            spec.offset_syncs.lag_max,
            out.metrics.clone(),
            failures_total.clone(),
        );
        let discovery = Discovery::new(&clients, &settings, &spec, topic_ids.clone(), &out.metrics);
        Ok(Self {
            spec,
            flow_rx,
            out,
            clients,
            filter,
            table: PartitionTable::default(),
            pipeline,
            discovery,
            topic_ids,
            refreshing: None,
            next_refresh: Instant::now(),
            progress_loaded: false,
            mm2_loaded: false,
            takeover: None,
            failback_loaded: false,
            failback: None,
            internal_topics_ready: false,
            out_of_range_seen: false,
            started: false,
            fatal: None,
            resets: Resets::default(),
            reported: ReportedFailures::default(),
            failures_total,
            waiting: None,
            stalled: None,
            unwritable: Vec::new(),
            refused: None,
            refused_shown: false,
            secrets: None,
            settings,
        })
    }

    /// Rebuilds the clients whenever a cluster's mounted Secrets change (the kubelet's
    /// `..data` swap), from the committed positions, without a restart.
    pub fn watch_secrets(mut self, secrets: FlowSecrets) -> Self {
        self.secrets = Some(secrets);
        self
    }

    fn refresh_interval(&self) -> Duration {
        Duration::from_secs(
            u64::try_from(self.spec.topics.refresh_interval_seconds.max(1)).unwrap_or(10),
        )
    }

    /// What the engine reads of the pipeline now.
    fn view(&self) -> View {
        self.pipeline.view()
    }

    fn on(&mut self, event: Event<'_>) {
        self.pipeline.on(event, &mut self.table);
    }

    /// Runs until `shutdown` completes (graceful: the open batch is committed or aborted) or
    /// a fatal error.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), EngineError> {
        tokio::pin!(shutdown);
        let result = self.run_inner(&mut shutdown).await;
        if let Some(h) = self.refreshing.take() {
            h.abort();
        }
        if let Err(EngineError::Fatal(e)) = &result {
            error!(worker = %worker_id(&self.settings.flow_name, self.settings.worker_index), "{e}");
            self.out.metrics.error(ErrorKind::Fatal, e);
            self.fatal = Some(e.clone());
            self.out.readiness.set_not_ready(e.to_string());
        }
        self.out.metrics.ready.set(0.0);
        self.publish();
        result
    }

    async fn run_inner<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> Result<(), EngineError> {
        if !self.start(shutdown).await? {
            return Ok(());
        }
        let mut timers = Timers {
            next_status: Instant::now() + self.settings.tuning.status_interval,
            flow_open: true,
            wake: Box::pin(tokio::time::sleep(Duration::ZERO)),
        };
        loop {
            if let Some(e) = &self.fatal {
                return Err(EngineError::Fatal(e.clone()));
            }
            let v = self.view();
            if !v.has_writer && v.retry_due {
                self.ensure_writer().await?;
                if !self.view().has_writer {
                    self.on(Event::Failed(&"the target producer is not available"));
                }
            }
            let v = self.view();
            if v.reload_needed && v.has_writer {
                self.reload_positions().await?;
            }
            let limits = self.pipeline.fill_limits();
            match next_step(&self.loop_state(&limits)) {
                Step::Dispatch => {
                    self.pipeline.run(Job::Dispatch, &mut self.table).await?;
                    continue;
                }
                Step::Write => {
                    if !self.write_guarded(shutdown, Job::Open).await? {
                        return Ok(());
                    }
                    if self.out_of_range_seen && self.view().open.records == 0 {
                        self.out_of_range_seen = false;
                        self.handle_out_of_range().await;
                    }
                    continue;
                }
                Step::Wait { reassign } => {
                    if reassign {
                        self.reassign();
                    }
                }
            }
            if !self.wait(shutdown, &limits, &mut timers).await? {
                return Ok(());
            }
        }
    }

    /// Start: producer (fences a zombie with our transactional.id), internal topics,
    /// progress, retried with backoff; then the first refresh and reset. `Ok(false)`:
    /// shutdown came first.
    async fn start<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> Result<bool, EngineError> {
        while !self.start_step().await? {
            self.on(Event::StartFailed);
            let at = self.view().retry_at;
            let delay = at.map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            });
            self.publish();
            // Secrets that changed (also during the failed step) take effect before the next
            // attempt: a start that fails on a wrong password or CA must not retry with it.
            tokio::select! {
                _ = shutdown.as_mut() => return Ok(false),
                side = crate::kafka::secrets::rotated(&mut self.secrets), if self.secrets.is_some() => {
                    if !self.rotate(side, shutdown).await? {
                        return Ok(false);
                    }
                }
                _ = tokio::time::sleep(delay) => {}
            }
        }
        self.on(Event::Started);
        // Nothing replicates yet: the first refresh may hold the loop.
        let input = self.refresh_input();
        let plan = self.discovery.refresh(input).await;
        self.apply_refresh(plan);
        self.apply_reset().await;
        self.started = true;
        self.update_readiness();
        self.publish();
        Ok(true)
    }

    fn loop_state(&self, limits: &BatchLimits) -> LoopState {
        let v = self.view();
        LoopState {
            batch_due: v.open.is_due(limits, Instant::now()),
            progress_due: v.open.records == 0 && self.table.has_pending(),
            can_write: v.can_write && self.fatal.is_none(),
            pipelined: v.pipelined(&self.table),
            has_room: v.has_room,
            out_of_range: self.out_of_range_seen,
            reassign_needed: v.reassign_needed,
            open_empty: v.open.records == 0,
            none_in_flight: v.in_flight == 0,
            retry_due: v.retry_due,
        }
    }

    /// Waits for the next event and handles it. `Ok(false)`: shut down.
    async fn wait<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
        limits: &BatchLimits,
        timers: &mut Timers,
    ) -> Result<bool, EngineError> {
        let now = Instant::now();
        let v = self.view();
        let deadlines = Deadlines {
            refresh: self.refreshing.is_none().then_some(self.next_refresh),
            status: timers.next_status,
            batch: v.open.deadline(limits),
            retry: v.retry_at,
        };
        let due = due(&deadlines, now);
        if due.refresh {
            self.start_refresh();
        }
        if due.status {
            timers.next_status = now + self.settings.tuning.status_interval;
            self.update_readiness();
            self.publish();
        }
        if due.retry {
            self.on(Event::RetryTimer);
        }
        if due != Due::default() {
            // What was due may have changed the loop's state: decide again.
            return Ok(true);
        }
        let wake = wake_at(&deadlines, now).map(tokio::time::Instant::from_std);
        if let Some(at) =
            wake.filter(|at| timers.wake.deadline() != *at || timers.wake.is_elapsed())
        {
            timers.wake.as_mut().reset(at);
        }
        let can_write = v.can_write && self.fatal.is_none();
        let consuming = can_write && !v.open.is_full(limits) && !v.reassign_needed;
        let head_ready = can_write && v.head_finishable;
        let delivery_pending = head_ready || v.meta_in_flight > 0;
        let consumer = Arc::clone(&self.clients.consumer);
        let events = self.pipeline.producer_events();
        tokio::select! {
            biased;
            _ = shutdown.as_mut() => {
                self.shutdown_gracefully(true).await;
                return Ok(false);
            }
            changed = self.flow_rx.changed(), if timers.flow_open => match changed {
                Ok(()) => {
                    let spec = self.flow_rx.borrow_and_update().clone();
                    if !self.write_guarded(shutdown, Job::Open).await? {
                        return Ok(false);
                    }
                    self.apply_spec(spec);
                    self.apply_reset().await;
                }
                Err(_) => timers.flow_open = false,
            },
            plan = join_refresh(&mut self.refreshing), if self.refreshing.is_some() => {
                self.refreshing = None;
                match plan {
                    // A plan that changes the assignment drops the open batch: write it
                    // first, so its records are not sent twice.
                    Ok(plan) => {
                        if self.would_reassign(&plan) && !self.write_guarded(shutdown, Job::Open).await? {
                            return Ok(false);
                        }
                        self.apply_refresh(plan);
                        // A reset that failed (the source did not answer) is tried again.
                        self.apply_reset().await;
                    }
                    Err(e) => warn!("the topic refresh task failed: {e}"),
                }
            }
            d = self.pipeline.delivered(head_ready), if delivery_pending => match d {
                Delivered::Meta => self.on(Event::MetaDelivered),
                Delivered::Head => {
                    if !self.write_guarded(shutdown, Job::Head).await? {
                        return Ok(false);
                    }
                }
            },
            side = crate::kafka::secrets::rotated(&mut self.secrets), if self.secrets.is_some() => {
                if !self.rotate(side, shutdown).await? {
                    return Ok(false);
                }
            }
            // Delivery reports are served by the waits for them; this serves the rest
            // (statistics for the connection health, errors) while nothing is in flight.
            _ = ProducerEvents::signalled(events.as_deref()) => self.on(Event::ProducerSignalled),
            r = consumer.recv(), if consuming => {
                let more = match r {
                    Ok(m) => {
                        let m = Consumed::Message(SourceMessage::of(&m));
                        self.pipeline.on_message(m, &mut self.table, limits)
                    }
                    Err(e) => {
                        self.on_consumer_error(e);
                        consuming
                    }
                };
                self.drain_ready(&consumer, limits, more);
            }
            // Last: a busy loop sees its deadlines at the top of each turn.
            _ = timers.wake.as_mut(), if wake.is_some() => {}
        }
        Ok(true)
    }

    /// One start step; `Ok(true)` when everything is ready.
    async fn start_step(&mut self) -> Result<bool, EngineError> {
        self.ensure_writer().await?;
        if !self.view().has_writer {
            return Ok(false);
        }
        if !self.settings.retired_workers.is_empty() {
            if let Err(e) = self.fence_retired().await {
                self.start_problem(e.to_string(), &e);
                return Ok(false);
            }
        }
        let timeout = self.settings.tuning.io_timeout;
        if !self.internal_topics_ready {
            let internal = [
                progress_topic(&self.settings.namespace, &self.settings.flow_name),
                offset_syncs_topic(&self.spec.source.alias),
            ];
            let c = &self.clients;
            let alias = &self.spec.target.alias;
            let rf = self.spec.internal_topics.replication_factor;
            let r = topics::ensure_compacted(
                &c.target_meta,
                &c.target_admin,
                &internal,
                alias,
                rf,
                timeout,
            );
            if let Err(e) = r.await {
                self.start_problem(e.to_string(), &e);
                return Ok(false);
            }
            self.internal_topics_ready = true;
        }
        if !self.progress_loaded {
            let ctx = self.out.health.target.context();
            let topic = progress_topic(&self.settings.namespace, &self.settings.flow_name);
            match io::read_progress(&self.clients.target_props, ctx, &topic, timeout).await {
                Ok(p) => {
                    info!(topic = %topic, partitions = p.len(), "progress read");
                    let (index, count) = (self.settings.worker_index, self.settings.worker_count);
                    self.resets.handled = handled_reset_ids(p.values(), index, count);
                    self.discovery.stored = Arc::new(p);
                    self.progress_loaded = true;
                }
                Err(io::ProgressError::Corrupt(e)) => {
                    return Err(EngineError::Fatal(WorkerError::Record(format!(
                        "{e}. The progress topic holds a record this build cannot read; \
                         refusing to guess positions (that could skip records)"
                    ))));
                }
                Err(io::ProgressError::Unavailable(e)) => {
                    self.start_problem(e.to_string(), &e);
                    return Ok(false);
                }
            }
        }
        if !self.mm2_loaded && !self.load_mm2_positions().await? {
            return Ok(false);
        }
        if !self.failback_loaded {
            return self.load_failback().await;
        }
        Ok(true)
    }

    /// Reads MirrorMaker 2's positions once (`spec.source.startFrom.mirrorMaker2`). A flow
    /// with no stored progress yet waits until they hold a position for its source alias:
    /// starting without them would copy again (Earliest) or skip (Latest) what MM2 left.
    async fn load_mm2_positions(&mut self) -> Result<bool, EngineError> {
        let Some(mm2) = self
            .spec
            .source
            .start_from
            .as_ref()
            .and_then(|s| s.mirror_maker2.as_ref())
        else {
            self.mm2_loaded = true;
            return Ok(true);
        };
        let alias = self.spec.source.alias.clone();
        let topic = mm2.topic(&alias);
        let timeout = self.settings.tuning.io_timeout;
        let props = &self.clients.target_props;
        match io::read_mm2_positions(props, &topic, &alias, timeout).await {
            Ok(p) if p.is_empty() && self.discovery.stored.is_empty() => {
                let others = p.other_clusters();
                let found = if others.is_empty() {
                    String::new()
                } else {
                    let names: Vec<&str> = others.iter().map(String::as_str).collect();
                    format!(
                        " (it holds positions of source cluster {})",
                        names.join(", ")
                    )
                };
                let none = crate::worker::error::Error::Spec(format!(
                    "spec.source.startFrom.mirrorMaker2: topic {topic} on target cluster {} \
                     holds no MirrorSourceConnector position of source cluster {alias}{found}; \
                     MM2's source alias must be spec.source.alias, and offsetsTopic its Connect \
                     offsets topic",
                    self.spec.target.alias
                ));
                self.start_problem(none.to_string(), &none);
                Ok(false)
            }
            Ok(p) => {
                info!(topic = %topic, partitions = p.next_offsets().len(), "MirrorMaker 2 positions read");
                self.discovery.mm2 = Arc::new(p.next_offsets());
                self.takeover = Some(super::migrate::Takeover {
                    offsets_topic: topic,
                    ..Default::default()
                });
                self.mm2_loaded = true;
                Ok(true)
            }
            Err(io::Mm2ReadError::Unreadable(e)) => {
                Err(EngineError::Fatal(WorkerError::Record(format!(
                    "spec.source.startFrom.mirrorMaker2: {e}; refusing to guess positions (that \
                     could copy records again or skip them)"
                ))))
            }
            Err(io::Mm2ReadError::Unavailable(e)) => {
                self.start_problem(format!("spec.source.startFrom.mirrorMaker2: {e}"), &e);
                Ok(false)
            }
        }
    }

    /// Fences the transactional ids of the workers scaled away (worker 0, ExactlyOnce):
    /// `init_transactions` with each id aborts what it left open, so the progress read that
    /// follows does not wait for the coordinator's timeout. Done once.
    async fn fence_retired(&mut self) -> Result<(), crate::kafka::Error> {
        if self.spec.delivery != crate::api::Delivery::ExactlyOnce {
            self.settings.retired_workers.clear();
            return Ok(());
        }
        while let Some(&index) = self.settings.retired_workers.first() {
            let id = super::settings::worker_key(
                &self.settings.namespace,
                &self.settings.flow_name,
                index,
            );
            let ctx = self.out.health.target.context();
            let limits = self.settings.tuning.producer;
            super::writer::fence(&self.clients.target_props, ctx, &id, limits)
                .await
                .map_err(|e| {
                    crate::kafka::Error::from(e).context(format!(
                        "fencing transactional.id {id} of worker {index}, scaled away"
                    ))
                })?;
            info!(transactional_id = %id, worker = index, "fenced the transactions of a worker scaled away");
            self.settings.retired_workers.remove(0);
        }
        Ok(())
    }

    /// After a commit whose outcome was unknown, with the new producer (its init resolved the
    /// transaction): positions from the progress topic, so the batch is not written twice.
    async fn reload_positions(&mut self) -> Result<(), EngineError> {
        let ctx = LogContext::new(&self.spec.target.alias);
        let topic = progress_topic(&self.settings.namespace, &self.settings.flow_name);
        let timeout = self.settings.tuning.io_timeout;
        match io::read_progress(&self.clients.target_props, ctx, &topic, timeout).await {
            Ok(p) => {
                for (tp, position) in self.table.reload(&p) {
                    info!(topic = %tp.topic, partition = tp.partition, position, "the commit had happened: resuming after it");
                }
                self.on(Event::Reloaded);
                Ok(())
            }
            Err(io::ProgressError::Corrupt(e)) => {
                Err(EngineError::Fatal(WorkerError::Record(format!(
                    "{e}. The progress topic holds a record this build cannot read; refusing \
                     to guess positions (that could skip records)"
                ))))
            }
            Err(io::ProgressError::Unavailable(e)) => {
                self.on(Event::Failed(&format_args!(
                    "reading positions back after a commit: {e}"
                )));
                Ok(())
            }
        }
    }

    /// A start step failed with `cause` (`msg` says what it means); it is tried again.
    fn start_problem(&mut self, msg: String, cause: &dyn Categorized) {
        warn!("{msg}; retrying");
        self.out.metrics.error(ErrorKind::Progress, cause);
        self.out.readiness.set_not_ready(msg);
    }

    /// Creates the producer if missing; a transient failure leaves it missing (retry later).
    async fn ensure_writer(&mut self) -> Result<(), EngineError> {
        if let Some((problem, cause)) = self
            .pipeline
            .ensure_writer(&self.clients.target_props)
            .await?
        {
            self.start_problem(problem, &cause);
        }
        Ok(())
    }

    /// Runs `job` (a write). If shutdown comes during it, it may still finish within the grace
    /// period; otherwise its transaction is aborted. `Ok(false)` means shutdown happened (and
    /// was handled).
    async fn write_guarded<F: Future<Output = ()>>(
        &mut self,
        shutdown: &mut std::pin::Pin<&mut F>,
        job: Job,
    ) -> Result<bool, EngineError> {
        let v = self.view();
        let nothing_to = match job {
            Job::Head => v.in_flight == 0,
            _ => v.open.records == 0 && v.in_flight == 0 && !self.table.has_pending(),
        };
        if nothing_to || !(v.can_write && self.fatal.is_none()) {
            return Ok(true);
        }
        let grace = self.settings.tuning.shutdown_grace;
        let mut limits = self.pipeline.fill_limits();
        if let Job::Head = job {
            // The open batch stays open: read ahead only what it still has room for.
            limits.max_records = limits.max_records.saturating_sub(v.open.records);
            limits.max_bytes = limits.max_bytes.saturating_sub(v.open.bytes);
        }
        // While the batch is written, the next one is read ahead (the write waits on the
        // target most of the time). Not when the assignment is about to change: those
        // records would be dropped anyway.
        let mut ahead = ReadAhead::new(
            self.started
                && !v.reassign_needed
                && !self.out_of_range_seen
                && limits.max_records > 0
                && limits.max_bytes > 0,
            limits,
        );
        let consumer = Arc::clone(&self.clients.consumer);
        // The write may wait for a silent target for long (a transaction, up to its
        // timeouts): readiness and status keep telling, from what they were when it began.
        self.waiting = report::waiting_since(self.waiting, true, v.last_ack, Instant::now());
        let (waiting, before) = (self.waiting, self.snapshot());
        let mut status = tokio::time::interval(self.settings.tuning.status_interval);
        status.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (result, interrupted) = {
            let write = self.pipeline.run(job, &mut self.table);
            tokio::pin!(write);
            loop {
                tokio::select! {
                    biased;
                    r = &mut write => break (Some(r), false),
                    _ = shutdown.as_mut() => {
                        break (tokio::time::timeout(grace, write).await.ok(), true)
                    }
                    r = consumer.recv(), if ahead.open() => {
                        ahead.push(r.as_ref().map(SourceMessage::of).map_err(Clone::clone));
                        ahead.drain(&consumer);
                    }
                    _ = status.tick(), if self.started && self.fatal.is_none() => {
                        self.stalled = publish::report_stall_during_write(
                            &self.out,
                            &self.spec.target.alias,
                            self.settings.tuning.stall_after,
                            waiting,
                            &before,
                        );
                    }
                }
            }
        };
        let finished = result.is_some();
        match result {
            Some(r) => r?,
            None => warn!(
                ?grace,
                "the open batch did not finish within the shutdown grace period"
            ),
        }
        if interrupted {
            let clean = finished && !self.view().reassign_needed;
            self.shutdown_gracefully(clean).await;
            return Ok(false);
        }
        // Records read ahead follow the batch just written; they are kept only if it
        // committed as a whole. After a rewind, a stopped partition or anything else that
        // re-assigns, the consumer starts again from the committed positions: keeping them
        // would put them after a hole.
        let keep = !self.view().reassign_needed;
        ahead.take_each(|item| match item {
            Ok((topic, partition, record)) if keep => {
                let record = Consumed::ReadAhead(topic, partition, record);
                self.pipeline.on_message(record, &mut self.table, &limits);
            }
            Ok(_) => {}
            // An out-of-range error is handled either way (a re-assignment may not bring a
            // log truncation back).
            Err(e) => self.on_consumer_error(e),
        });
        Ok(true)
    }

    async fn shutdown_gracefully(&mut self, clean: bool) {
        info!("shutting down");
        if let Some(h) = self.refreshing.take() {
            h.abort();
        }
        // Neither job fails (they log).
        let abandon = Job::Abandon { clean };
        let _ = self.pipeline.run(abandon, &mut self.table).await;
        if self.fatal.is_none() {
            let grace = self.settings.tuning.shutdown_grace;
            let _ = self
                .pipeline
                .run(Job::Final { grace }, &mut self.table)
                .await;
        }
        let _ = self.clients.consumer.unassign();
        self.out.readiness.set_not_ready("stopped");
        info!("stopped");
    }

    /// Takes the records librdkafka already has queued without another trip through the
    /// select loop (whose timers cost more than a record), up to the batch bound.
    /// `more`: the open batch takes more ([`Pipeline::on_message`]).
    fn drain_ready(
        &mut self,
        consumer: &Arc<StreamConsumer<LogContext>>,
        limits: &BatchLimits,
        mut more: bool,
    ) {
        let Some(queue) = ReadyQueue::of(consumer.as_ref()) else {
            return;
        };
        for _ in 0..limits.max_records {
            // An out-of-range error must be handled (next loop turn) before taking more.
            if !(more && self.fatal.is_none() && !self.out_of_range_seen) {
                return;
            }
            match queue.poll() {
                Some(Polled::Message(ev)) => {
                    let m = Consumed::Event(ev, consumer);
                    more = self.pipeline.on_message(m, &mut self.table, limits);
                }
                Some(Polled::Error(e)) => self.on_consumer_error(e),
                None => return,
            }
        }
    }

    fn on_consumer_error(&mut self, e: KafkaError) {
        match classify_consumer_error(&e) {
            ConsumerError::OutOfRange => {
                self.out.metrics.error(ErrorKind::OffsetValidation, &e);
                // librdkafka does not say which partition: check them all after this batch.
                self.out_of_range_seen = true;
            }
            ConsumerError::Refused => {
                self.out.metrics.error(ErrorKind::Source, &e);
                let why = report::refusal_reason(&self.spec.source.alias, &e);
                if self.refused.is_none() {
                    warn!("{why}");
                }
                self.refused = Some(report::Refusal::new(why, &self.table));
            }
            ConsumerError::Other => {
                self.out.metrics.error(ErrorKind::Source, &e);
                debug!("source consumer: {e}");
            }
        }
    }

    /// An out-of-range error arrived (offset validation): tie it to partitions
    /// ([`attribute_out_of_range`]) and stop them as DataLoss or TopicReset.
    async fn handle_out_of_range(&mut self) {
        let timeout = self.settings.tuning.io_timeout;
        let candidates = match out_of_range(
            &mut self.table,
            &self.clients.source_meta,
            &self.topic_ids,
            timeout,
        )
        .await
        {
            Ok(c) => c,
            Err(e) => {
                self.on(Event::Failed(&format_args!("out-of-range check: {e}")));
                return;
            }
        };
        match attribute_out_of_range(&candidates) {
            Attribution::Failed(detections) => {
                for d in detections {
                    self.report_detection(d);
                }
                self.on(Event::AssignmentChanged);
            }
            Attribution::Unattributed => self.on(Event::Failed(&format_args!(
                "the source reported an out-of-range position, but none of the {} assigned \
                 partitions is outside its log and the error does not say which one it was",
                candidates.len()
            ))),
        }
    }

    /// Stops a partition for a DataLoss / TopicReset detection: status entry, one error log,
    /// one count.
    fn report_detection(&mut self, d: Detection) {
        let tp = d.tp.clone();
        let flow = FlowRef {
            namespace: &self.settings.namespace,
            name: &self.settings.flow_name,
        };
        let failed = detection_failure(d, flow, &mut self.reported, &self.failures_total);
        if self.table.fail(&tp, failed) {
            self.on(Event::AssignmentChanged);
        }
    }

    /// Re-assigns the consumer to every replicating partition at its committed position.
    fn reassign(&mut self) {
        self.on(Event::Reassigned);
        let mut tpl = TopicPartitionList::new();
        for (tp, pos) in self.table.assignment() {
            if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(pos)) {
                warn!(topic = %tp.topic, partition = tp.partition, "cannot assign: {e}");
                self.table.not_assigned(&tp);
            }
        }
        let r = if tpl.count() == 0 {
            self.clients.consumer.unassign()
        } else {
            self.clients.consumer.assign(&tpl)
        };
        if let Err(e) = r {
            self.out.metrics.error(ErrorKind::Source, &e);
            warn!("assigning source partitions failed: {e}");
            self.on(Event::AssignmentChanged);
        } else {
            debug!(partitions = tpl.count(), "assigned source partitions");
        }
    }

    fn apply_spec(&mut self, spec: MirrorFlowSpec) {
        let Some(live) = live_spec(&self.spec, spec) else {
            return;
        };
        if live.restart_needed {
            warn!("the flow changed in fields that need a worker restart (source, target, delivery, offsetValidation, replicationPolicy); they apply after a restart");
        }
        if live.topics_changed {
            match TopicFilter::new(&live.spec) {
                Ok(f) => {
                    self.filter = f;
                    self.next_refresh = Instant::now();
                }
                Err(e) => warn!("ignoring the new topic selection: {e}"),
            }
        }
        self.spec = live.spec;
        self.on(Event::LagMax(self.spec.offset_syncs.lag_max));
        if live.paused_changed {
            let paused = self.spec.paused;
            info!(paused, "spec.paused changed");
            self.out.metrics.paused.set(i64::from(paused));
            self.table.set_paused(paused);
            self.on(Event::AssignmentChanged);
        }
        self.publish();
    }

    /// Handles `spec.reset` (see [`Resets::handle`]).
    async fn apply_reset(&mut self) {
        let Some(req) = self.spec.reset.clone() else {
            return;
        };
        let worker = worker_id(&self.settings.flow_name, self.settings.worker_index);
        let syncs_topic = offset_syncs_topic(&self.spec.source.alias);
        let io = ResetIo {
            meta: &self.clients.source_meta,
            target_meta: &self.clients.target_meta,
            target_props: &self.clients.target_props,
            syncs_topic: &syncs_topic,
            ids: &self.topic_ids,
            timeout: self.settings.tuning.io_timeout,
            worker: (self.settings.worker_index, self.settings.worker_count),
            worker_id: &worker,
        };
        let paused = self.spec.paused;
        let Some(reset) = self.resets.handle(&req, &mut self.table, &io, paused).await else {
            return;
        };
        for tp in &reset {
            self.reported.forget(tp);
        }
        if !reset.is_empty() {
            self.on(Event::AssignmentChanged);
        }
        self.publish();
    }
}

/// The loop's own timers.
struct Timers {
    next_status: Instant,
    flow_open: bool,
    /// The one timer of the wait, armed for [`wake_at`] and kept from turn to turn: it is
    /// polled (registered with tokio's timer driver) only when the loop has nothing else to
    /// do, and reset only when its deadline changes or it fired.
    wake: std::pin::Pin<Box<tokio::time::Sleep>>,
}

/// Waits for the refresh task (pending while there is none).
async fn join_refresh(
    h: &mut Option<JoinHandle<RefreshPlan>>,
) -> Result<RefreshPlan, tokio::task::JoinError> {
    match h {
        Some(h) => h.await,
        None => std::future::pending().await,
    }
}
