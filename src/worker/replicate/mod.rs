//! The replication engine and the standalone worker (`mirrorflow worker`). The rooms of the
//! engine are listed in `docs/ARCHITECTURE.md`; [`engine`] holds its loop.
//!
//! # What a worker does
//! - **Ownership.** Partitions are split between the `N` workers of a flow by
//!   [`assign::owner`]: `(fnv1a64(topic) + partition) mod N`. Stable, deterministic, no
//!   consumer group: the source consumer uses `assign`, never `subscribe`.
//! - **Topics.** Every `topics.refreshIntervalSeconds` ([`discovery`], on a task beside the
//!   replication loop) the source is listed; topics selected
//!   by [`select::TopicFilter`] (full-match include/exclude, never internal topics, never
//!   topics that came from the target) get a target topic named by `kafka::naming` with the
//!   same partition count and — with `syncTopicConfigs` — the source topic's own configs
//!   (minus broker-specific ones, as MM2). Partition increases are followed.
//! - **Records** keep key, value, headers, timestamp and partition number. No header is
//!   added to replicated records.
//! - **Progress** (next source offset per partition, [`crate::kafka::wire::Progress`]) lives on
//!   the target in the compacted topic `mirrorflow-progress.<namespace>.<flow>.internal` and is read back
//!   at start (read_committed), so a worker restarted anywhere resumes. A partition without
//!   progress starts per `startFrom` at an explicit offset (log start or end); partitions
//!   that appear while the worker runs start at their log start.
//! - **Offset syncs** (MM2 format, plus the `mirrorflow.sync.seq` header) go to
//!   `mm2-offset-syncs.<sourceAlias>.internal` on the target, emitted per [`syncs`] with the
//!   batch of records they describe (in its transaction with ExactlyOnce; right after its
//!   delivery reports with AtLeastOnce), so they never starve.
//! - **ExactlyOnce**: one transactional producer (`mirrorflow-<len(ns)>-<ns>-<flow>-<index>`); a batch's
//!   records, syncs and progress commit together. Starting fences a zombie with the same id.
//!   A target that refuses transactions stops the worker with a message naming the fix
//!   (`spec.delivery: AtLeastOnce`); there is no silent downgrade.
//! - **AtLeastOnce**: idempotent producer, pipelined. Each consumed record is handed to
//!   the producer as it is read (librdkafka's copy is the only one; the open batch keeps
//!   offsets, sizes and timestamps; from 512 bytes of key and value there is no copy:
//!   librdkafka reads the consumer's fetch buffer, whose event is held until the record's
//!   delivery report, `pipeline::HELD_MIN_BYTES`), while up to `Tuning::pipeline_depth` (2) earlier
//!   batches await their delivery reports. When a batch's records are acknowledged, its
//!   positions advance and its syncs and progress are sent; their acknowledgement is awaited
//!   in the background (a lost one is written again). A batch that fails drops every later
//!   one and the open batch: the consumer restarts from the committed positions (records
//!   already sent from them may arrive twice). A record the producer refuses outright halts
//!   its partition's later records until then; one the broker refuses for good stops the
//!   producer (`enable.gapless.guarantee`), so no later record of its partition lands before
//!   it is retried: the producer is recreated and what was in flight sent again. Duplicate
//!   bound: a failed batch or a crash re-sends at most the window below, after the records
//!   it repeats (each partition keeps its order of first appearance), except records whose
//!   delivery timed out (`message.timeout.ms`), which librdkafka's gap guarantee does not
//!   cover and which may then land after later ones. A full producer queue (a small
//!   `queue.buffering.max.*` in `target.config`) keeps the rest of the open batch in memory,
//!   sent in order when the batch is. A crash replicates again at most the records not
//!   covered by acknowledged progress: `Tuning::batch` (40,000 records / the batches' share
//!   of `spec.workers.inFlightMiB`, 40 of the default 45 MiB), the window that the sent
//!   batches, those awaiting progress and the open batch share.
//! - **Failures.** A record the target refuses for good (e.g. larger than `max.message.bytes`)
//!   stops its partition ([`status::PartitionState::Failed`]) with the broker's message;
//!   other partitions go on. Transient target errors rewind to the committed positions and
//!   retry with exponential backoff. An out-of-range position (offset validation) stops the
//!   partition as DataLoss or TopicReset.
//! - **paused** stops consuming (partitions unassigned) and keeps positions; HTTP stays up.
//! - **Secrets** (`docs/SECURITY.md`): every client reports authentication and TLS
//!   failures into the flow's connection health (`/status`, the status entry, `/readyz`);
//!   when a cluster's mounted Secrets change, the open batches finish and every client is
//!   rebuilt from them, resuming from the committed positions. Worker 0 also syncs topic
//!   ACLs (`worker::acl_sync`).
//! - **SIGTERM/SIGINT**: the batches in flight and the open one commit (their syncs and
//!   progress acknowledged) within 10 s, or are aborted; exit 0.
//!
//! # Memory bound (defaults, per worker)
//! `spec.workers.inFlightMiB` (45 MiB by default) bounds all record data a worker holds,
//! shared by [`settings::WindowShares`]:
//! - one fetch being read (`fetch.max.bytes` = 1 MiB, or `message.max.bytes` if
//!   `source.config` sets it larger);
//! - the consumer's prefetch: `queued.max.messages.kbytes`, an eighth of the window and at
//!   most 4 MiB (or 40,000 records, `queued.min.messages`);
//! - the rest, 40 MiB by default, for the batches: records sent and not yet acknowledged and
//!   the open batch, each record counted with 256 bytes of bookkeeping
//!   (`batch::RECORD_OVERHEAD_BYTES`; a record sent without a copy with 360 more for its
//!   held fetch event, `batch::HELD_OVERHEAD_BYTES`, and the fetch buffers such records keep
//!   counted whole until their reports, also after their batch was dropped,
//!   `kafka::delivery::Tracker::held_beyond_groups`), and 40,000 records in all ([`batch::BatchLimits::room`]:
//!   the open batch gets a third with the default depth, less what earlier batches still
//!   hold), held by librdkafka's producer or the consumer's fetch buffers (the engine keeps a copy only of records read ahead
//!   while a batch is written, or waiting for a full producer queue, within the same bound).
//!   A single record larger than the room forms a batch of its own;
//! - producer queue: ≤ 32 MiB of payload (`queue.buffering.max.kbytes`): the batches' 40 MiB
//!   count each record with its bookkeeping, so with records of more than about 1 KB the
//!   queue fills first and the engine keeps the rest of the open batch, within its share.
//!
//! Beyond the window are librdkafka's buffers and structures and the worker's own (measured:
//! peak RSS the window plus 16-29 MiB with 1,000 partitions, an idle worker 18 MiB;
//! docs/PERFORMANCE.md). Backpressure: a slow target holds the window full, and then nothing
//! more is consumed. `source.config` may set the consumer's bounds (`fetch.max.bytes`,
//! `queued.max.messages.kbytes`): the batches get what they leave, at least half.
//!
//! The window is the trade between memory and throughput: when the target acknowledges
//! slowly (a busy host), throughput is about the batches' share ÷ acknowledgement latency. On
//! the 2-core bench host (1 KB records, medians of 3 interleaved runs, the prefetch outside
//! the window then): batches of 16 MiB, 94.5 % of the bare copy loop (lz4 76.6 %); 32 MiB,
//! 103.0 % (lz4 93.6 %), measured when records were counted with 64 bytes of bookkeeping,
//! not 256; with the prefetch counted inside, batches of 40 MiB (a window of 45) against 32
//! (37): lz4 rate 98.3-106.1 % against 90.5-95.7 % of the bare loop's. Hence the default of 45.

pub mod assign;
pub mod batch;
pub mod clients;
pub mod created;
pub mod discovery;
pub mod engine;
pub mod intake;
pub mod io;
pub mod partitions;
pub mod pipeline;
pub mod report;
pub mod reset;
pub mod select;
pub mod settings;
pub mod status;
pub mod step;
pub mod syncs;
pub mod validate;
pub mod writer;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::api::{
    load_flow_file, MirrorFlow, MirrorFlowSpec, OffsetCheckpoint, WorkerCheckpointReport,
};
use crate::kafka::health::FlowHealth;
use crate::telemetry::http::{self, HttpState, Readiness};
use crate::telemetry::metrics::WorkerMetrics;
use crate::worker::acl_sync::{AclMetrics, AclSyncRunner};
use crate::worker::checkpoint::{self, runner::CheckpointRunner, status::RunnerState};
use crate::worker::heartbeats::HeartbeatRunner;
use crate::worker::report::{Extras, WithExtras};

pub use engine::{Engine, EngineError, EngineOutputs, EngineSettings, Tuning};
pub use status::{PartitionState, StatusSink, WorkerSnapshot};

/// `mirrorflow worker` arguments.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// Standalone mode: the MirrorFlow YAML file (the same document `kubectl apply` takes).
    /// Re-read periodically: `paused`, `reset` and `topics` edits apply live.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "flow_ref",
        required_unless_present = "flow_ref"
    )]
    pub flow: Option<PathBuf>,
    /// Kubernetes mode: the MirrorFlow as NAMESPACE/NAME, read from the API server.
    #[arg(long, value_name = "NS/NAME")]
    pub flow_ref: Option<String>,
    /// This worker's index; default: the trailing ordinal of $POD_NAME, else 0.
    #[arg(long, value_name = "I")]
    pub worker_index: Option<u32>,
    /// Number of workers of the flow.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub worker_count: u32,
    /// Address of the HTTP endpoints (/metrics, /healthz, /readyz, /status).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Directory where Secret references resolve: DIR/<secretName>/<key>.
    #[arg(long, value_name = "DIR", default_value = crate::api::SECRETS_DIR)]
    pub secrets_dir: PathBuf,
    /// Rendered flow + OffsetCheckpoints (read by the checkpoint side).
    #[arg(long, value_name = "FILE")]
    pub checkpoints_file: Option<PathBuf>,
    /// How often the flow file is re-read, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5)]
    pub flow_reload_seconds: u64,
}

impl WorkerArgs {
    /// The worker index: `--worker-index`, else `pod_name`'s trailing ordinal, else 0.
    pub fn resolve_index(&self, pod_name: Option<&str>) -> anyhow::Result<u32> {
        let index = match (self.worker_index, pod_name) {
            (Some(i), _) => i,
            (None, Some(name)) => assign::ordinal_from_pod_name(name).with_context(|| {
                format!("POD_NAME={name:?} has no trailing ordinal; pass --worker-index")
            })?,
            (None, None) => 0,
        };
        anyhow::ensure!(
            self.worker_count >= 1,
            "--worker-count must be at least 1 (got {})",
            self.worker_count
        );
        anyhow::ensure!(
            index < self.worker_count,
            "--worker-index {index} must be below --worker-count {}",
            self.worker_count
        );
        Ok(index)
    }
}

/// A flow as the engine consumes it: identity plus a live spec.
pub struct FlowInput {
    /// `metadata.namespace` (`default` when absent).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The spec; a new value applies live (`paused`, `reset`, `topics`, `offsetSyncs`).
    pub spec: watch::Receiver<MirrorFlowSpec>,
    /// The flow's OffsetCheckpoints; a new list applies live (worker 0 runs them).
    pub checkpoints: watch::Receiver<Vec<OffsetCheckpoint>>,
    /// The ids of the worker entries in the flow's `status.workers` when the worker started
    /// (Kubernetes mode; none standalone): who ran before a scale-down.
    pub reported_workers: Vec<String>,
}

/// Runs a standalone worker (`--flow FILE`) until SIGTERM/SIGINT.
///
/// Kubernetes mode (`--flow-ref`) builds its [`FlowInput`] and status sink from the API and
/// calls [`run_with`].
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let Some(path) = args.flow.clone() else {
        anyhow::bail!(
            "--flow-ref {} needs the Kubernetes flow source; this entry point runs a flow file (--flow FILE)",
            args.flow_ref.as_deref().unwrap_or("")
        );
    };
    let (input, _watcher) =
        watch_flow_file(&path, Duration::from_secs(args.flow_reload_seconds.max(1)))?;
    run_with(args, input, Vec::new(), shutdown_signal()).await
}

/// Runs a worker for `input`, serving HTTP on `args.listen`, publishing snapshots to
/// `sinks` (and `/status`), until `shutdown`.
pub async fn run_with(
    args: WorkerArgs,
    input: FlowInput,
    sinks: Vec<Arc<dyn StatusSink>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let pod = std::env::var("POD_NAME").ok();
    let index = args.resolve_index(pod.as_deref())?;
    let settings = EngineSettings {
        namespace: input.namespace.clone(),
        flow_name: input.name.clone(),
        worker_index: index,
        worker_count: args.worker_count,
        secrets_dir: args.secrets_dir.clone(),
        tuning: Tuning::for_spec(&input.spec.borrow()),
        // Worker 0 fences the transactional ids of workers scaled away (see EngineSettings).
        retired_workers: if index == 0 {
            crate::api::status::retired_workers(
                &input.name,
                input.reported_workers.iter().map(String::as_str),
                args.worker_count,
            )
        } else {
            Vec::new()
        },
    };
    let metrics = WorkerMetrics::new().context("creating metrics")?;
    let readiness = Readiness::new("starting");
    let delivery = input.spec.borrow().delivery;
    let (status_tx, status_rx) = watch::channel(WorkerSnapshot::starting(
        &input.namespace,
        &input.name,
        index,
        args.worker_count,
        delivery,
    ));
    let (report_checkpoints, report_rx) = watch::channel(None);
    for s in &sinks {
        s.attach_checkpoints(report_rx.clone());
    }
    let mut all_sinks: Vec<Arc<dyn StatusSink>> = vec![Arc::new(status_tx)];
    all_sinks.extend(sinks);
    // Connection health of both clusters, shared by every client that reports into it, and
    // the topic ACL sync (worker 0): added to each snapshot (see `worker::report`).
    let health = {
        let spec = input.spec.borrow();
        FlowHealth::new(&spec.source.alias, &spec.target.alias)
    };
    let (acl_state, acl_rx) = watch::channel(None);
    let (latency_state, latency_rx) = watch::channel(None);
    let sink: Arc<dyn StatusSink> = Arc::new(WithExtras {
        inner: Arc::new(Fanout(all_sinks)),
        extras: Extras {
            health: health.clone(),
            topic_acls: acl_rx,
            replication_latency: latency_rx,
        },
    });
    let (addr, stop_http_tx, http_task) = serve_http(
        args.listen,
        &metrics,
        &readiness,
        status_rx,
        report_rx.clone(),
    )
    .await?;
    info!(%addr, worker = %crate::api::status::worker_id(&input.name, index), count = args.worker_count, "worker HTTP endpoints up");
    // The engine owns the shutdown future; completing it (or the engine returning and
    // dropping it) stops the checkpoint runner too.
    let (stop_tx, stop_rx) = watch::channel(false);
    let engine_shutdown = async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    };
    // Rotation: a cluster's changed Secret files make the engine, the checkpoint runner, the
    // heartbeats and the ACL sync reconnect.
    let (secrets, secrets_watcher) = {
        let spec = input.spec.borrow();
        crate::kafka::secrets::watch_secrets(
            &spec,
            &args.secrets_dir,
            crate::kafka::secrets::DEFAULT_POLL,
        )
    };
    let acl_task = checkpoint::runner::should_run(index).then(|| {
        let runner = AclSyncRunner {
            namespace: input.namespace.clone(),
            flow: input.name.clone(),
            secrets_dir: args.secrets_dir.clone(),
            spec: input.spec.clone(),
            secrets: Some(secrets.clone()),
            state: acl_state,
            metrics: AclMetrics::new(&metrics.registry)
                .map_err(|e| warn!("topic ACL metrics are not exported: {e}"))
                .ok(),
        };
        tokio::spawn(runner.run(wait_for_stop(stop_rx.clone())))
    });
    // Heartbeats are a singleton like the ACL sync: worker 0 emits and measures them.
    let heartbeat_task = checkpoint::runner::should_run(index).then(|| {
        let runner = HeartbeatRunner {
            reader_group: format!("{}-heartbeats", settings.transactional_id()),
            secrets_dir: args.secrets_dir.clone(),
            spec: input.spec.clone(),
            state: latency_state,
            metrics: metrics.clone(),
            secrets: Some(secrets.clone()),
        };
        tokio::spawn(runner.run(wait_for_stop(stop_rx.clone())))
    });
    let checkpoints = checkpoint::runner::should_run(index)
        .then(|| {
            start_checkpoints(
                &input,
                &args.secrets_dir,
                &metrics.registry,
                secrets.clone(),
                &report_checkpoints,
                wait_for_stop(stop_rx.clone()),
            )
        })
        .flatten();
    let outputs = EngineOutputs {
        health: health.clone(),
        metrics,
        sink,
        readiness,
    };
    let result = match Engine::new(settings, input.spec, outputs) {
        Ok(engine) => engine.watch_secrets(secrets).run(engine_shutdown).await,
        Err(e) => {
            drop(engine_shutdown); // releases `stop_tx`: the runner stops at once
            Err(e)
        }
    };
    secrets_watcher.abort();
    stop_side_tasks(checkpoints, acl_task).await;
    stop_side_tasks(None, heartbeat_task).await;
    let _ = stop_http_tx.send(());
    let _ = http_task.await;
    result.map_err(anyhow::Error::from)
}

/// The worker's HTTP endpoints (`/metrics`, `/healthz`, `/readyz`, `/status` with the
/// checkpoint side's reports); the sender stops them.
async fn serve_http(
    listen: SocketAddr,
    metrics: &WorkerMetrics,
    readiness: &Arc<Readiness>,
    status_rx: watch::Receiver<WorkerSnapshot>,
    report_for_http: CheckpointReportSource,
) -> anyhow::Result<(
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    JoinHandle<std::io::Result<()>>,
)> {
    let status_fn: http::StatusFn = Arc::new(move || {
        let mut v = serde_json::to_value(&*status_rx.borrow()).unwrap_or(serde_json::Value::Null);
        if let Some(obj) = v.as_object_mut() {
            let reports = checkpoint_reports(&report_for_http);
            obj.insert(
                "checkpoints".into(),
                serde_json::to_value(reports).unwrap_or_default(),
            );
        }
        v
    });
    let router = http::router(HttpState {
        registry: metrics.registry.clone(),
        readiness: readiness.clone(),
        status: status_fn,
    });
    let (stop_http_tx, stop_http_rx) = tokio::sync::oneshot::channel::<()>();
    let (addr, http_task) = http::serve(listen, router, async {
        let _ = stop_http_rx.await;
    })
    .await?;
    Ok((addr, stop_http_tx, http_task))
}

type CheckpointTasks = (JoinHandle<anyhow::Result<()>>, JoinHandle<()>);

/// Worker 0's checkpoint runner and the task forwarding live OffsetCheckpoint changes to it;
/// `None` (with a warning) when the runner cannot be built: replication goes on.
fn start_checkpoints(
    input: &FlowInput,
    secrets_dir: &std::path::Path,
    registry: &prometheus::Registry,
    secrets: crate::kafka::secrets::FlowSecrets,
    report: &watch::Sender<CheckpointReport>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Option<CheckpointTasks> {
    let mut flow = MirrorFlow::new(&input.name, input.spec.borrow().clone());
    flow.metadata.namespace = Some(input.namespace.clone());
    let cps = input.checkpoints.borrow().clone();
    match CheckpointRunner::new(&flow, cps, secrets_dir, registry).map(|r| r.watch_secrets(secrets))
    {
        Ok(runner) => {
            let specs = runner.specs();
            let state = runner.state();
            let mut cp_rx = input.checkpoints.clone();
            let forward = tokio::spawn(async move {
                while cp_rx.changed().await.is_ok() {
                    let list = cp_rx.borrow_and_update().clone();
                    specs.send_replace(list);
                }
            });
            let task = tokio::spawn(runner.run(stop));
            report.send_replace(Some((state, input.checkpoints.clone())));
            Some((task, forward))
        }
        Err(e) => {
            warn!("checkpoints disabled: {e:#}");
            None
        }
    }
}

/// After the engine stopped (and dropped `stop_tx`): the checkpoint runner and the ACL sync
/// stop too; one stuck in a cluster call past the grace period must not outlive the worker.
async fn stop_side_tasks(checkpoints: Option<CheckpointTasks>, acl_task: Option<JoinHandle<()>>) {
    if let Some((task, forward)) = checkpoints {
        forward.abort();
        let abort = task.abort_handle();
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            match task.await {
                Ok(Err(e)) => warn!("checkpoint runner: {e:#}"),
                Err(e) if !e.is_cancelled() => warn!("checkpoint runner: {e}"),
                _ => {}
            }
        })
        .await;
        abort.abort();
    }
    if let Some(task) = acl_task {
        let abort = task.abort_handle();
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        abort.abort();
    }
}

/// Completes when `stop` turns true or its sender goes away.
async fn wait_for_stop(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// The checkpoint side's state, for `/status` and the Kubernetes status entry.
pub type CheckpointReportSource = watch::Receiver<CheckpointReport>;

/// The runner's state and the OffsetCheckpoints it serves, once it runs.
pub type CheckpointReport = Option<(
    watch::Receiver<RunnerState>,
    watch::Receiver<Vec<OffsetCheckpoint>>,
)>;

/// What the checkpoint runner reports, per OffsetCheckpoint, now.
pub fn checkpoint_reports(source: &CheckpointReportSource) -> Vec<WorkerCheckpointReport> {
    let Some((state, cps)) = source.borrow().clone() else {
        return Vec::new();
    };
    let state = state.borrow().clone();
    let cps = cps.borrow().clone();
    checkpoint::status::worker_reports(&state, &cps, jiff::Timestamp::now())
}

/// Publishes to several sinks.
struct Fanout(Vec<Arc<dyn StatusSink>>);

impl StatusSink for Fanout {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        for s in &self.0 {
            s.publish(snapshot);
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            warn!("cannot listen for SIGINT: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => info!("SIGINT received"),
        _ = term => info!("SIGTERM received"),
    }
}

/// Loads `path` and re-reads it every `every`, publishing changed specs. An unreadable or
/// invalid file at start is an error; later, the last good spec stays in force and the
/// problem is logged (once per distinct error). Returns the input and the watcher task
/// (aborting it freezes the spec).
pub fn watch_flow_file(
    path: &Path,
    every: Duration,
) -> anyhow::Result<(FlowInput, tokio::task::JoinHandle<()>)> {
    let file = load_flow_file(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let meta = &file.flow.metadata;
    let name = meta.name.clone().unwrap_or_default();
    let namespace = meta
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let (tx, rx) = watch::channel(file.flow.spec.clone());
    let (cp_tx, cp_rx) = watch::channel(file.checkpoints.clone());
    let path = path.to_path_buf();
    let (name_c, ns_c) = (name.clone(), namespace.clone());
    let task = tokio::spawn(async move {
        let mut last_error: Option<String> = None;
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            match load_flow_file(&path) {
                Ok(f) => {
                    last_error = None;
                    let new_ns = f.flow.metadata.namespace.clone().filter(|n| !n.is_empty());
                    if f.flow.metadata.name.as_deref() != Some(name_c.as_str())
                        || new_ns.as_deref().unwrap_or("default") != ns_c
                    {
                        warn!(file = %path.display(), "the flow's name or namespace changed; restart the worker to run the new flow");
                        continue;
                    }
                    cp_tx.send_if_modified(|cur| {
                        if *cur != f.checkpoints {
                            info!(file = %path.display(), "OffsetCheckpoints changed");
                            *cur = f.checkpoints.clone();
                            true
                        } else {
                            false
                        }
                    });
                    tx.send_if_modified(|cur| {
                        if *cur != f.flow.spec {
                            info!(file = %path.display(), "flow file changed");
                            *cur = f.flow.spec.clone();
                            true
                        } else {
                            false
                        }
                    });
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(msg.as_str()) {
                        warn!(file = %path.display(), "keeping the last good flow: {msg}");
                        last_error = Some(msg);
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    Ok((
        FlowInput {
            namespace,
            name,
            spec: rx,
            checkpoints: cp_rx,
            reported_workers: Vec::new(),
        },
        task,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use settings::{ConsumerBounds, WindowShares};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: WorkerArgs,
    }

    #[test]
    fn the_window_is_shared_between_fetch_prefetch_and_batches() {
        const MIB: usize = 1 << 20;
        const KIB: usize = 1 << 10;
        let cases = [
            // (window MiB, fetch, prefetch, batches)
            (45, MIB, 4 * MIB, 40 * MIB),
            (37, MIB, 4 * MIB, 32 * MIB),
            (32, MIB, 4 * MIB, 27 * MIB),
            (1024, MIB, 4 * MIB, 1019 * MIB),
            (16, MIB, 2 * MIB, 13 * MIB),
            (8, MIB, MIB, 6 * MIB),
            // The batches keep half: a fetch is 1 MiB whatever the window.
            (2, MIB, 256 * KIB, MIB),
            (1, MIB, 128 * KIB, 512 * KIB),
        ];
        for (mib, fetch, prefetch, batches) in cases {
            let s = WindowShares::of(mib << 20, &ConsumerBounds::default());
            assert_eq!(
                (s.fetch, s.prefetch, s.batches),
                (fetch, prefetch, batches),
                "{mib} MiB"
            );
            if mib >= 3 {
                assert!(s.fetch + s.prefetch + s.batches <= mib << 20, "{mib} MiB");
            }
        }
        // Whole KiB, as `queued.max.messages.kbytes` takes it.
        let default = ConsumerBounds::default();
        assert_eq!(WindowShares::of(3 * MIB + 5, &default).prefetch, 384 * KIB);

        // What `source.config` lets the consumer hold comes out of the batches' share.
        let config = |pairs: &[(&str, &str)]| {
            ConsumerBounds::from_config(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        // A window of 37 MiB; (source.config, (fetch, prefetch, batches) in MiB).
        let cases: [(&[(&str, &str)], _); 8] = [
            (&[], (1.0, 4.0, 32.0)),
            (&[("fetch.max.bytes", "4194304")], (4.0, 4.0, 29.0)),
            (
                &[("queued.max.messages.kbytes", "16384")],
                (1.0, 16.0, 20.0),
            ),
            // A larger `message.max.bytes` raises the fetch (librdkafka needs it); a smaller
            // one does not lower it; a `fetch.max.bytes` set is taken as it is (librdkafka
            // refuses one below `message.max.bytes` when the consumer is made).
            (&[("message.max.bytes", "3145728")], (3.0, 4.0, 30.0)),
            (&[("message.max.bytes", "500000")], (1.0, 4.0, 32.0)),
            (
                &[
                    ("fetch.max.bytes", "2097152"),
                    ("message.max.bytes", "3145728"),
                ],
                (2.0, 4.0, 31.0),
            ),
            // Bounds larger than the window: the batches keep half.
            (
                &[("queued.max.messages.kbytes", "65536")],
                (1.0, 64.0, 18.5),
            ),
            // Not a number: librdkafka refuses it when the consumer is made.
            (&[("fetch.max.bytes", "lots")], (1.0, 4.0, 32.0)),
        ];
        let mib = |bytes: usize| bytes as f64 / MIB as f64;
        for (pairs, want) in cases {
            let s = WindowShares::of(37 * MIB, &config(pairs));
            assert_eq!(
                (mib(s.fetch), mib(s.prefetch), mib(s.batches)),
                want,
                "{pairs:?}"
            );
        }
    }

    #[test]
    fn window_follows_in_flight_mib() {
        let spec = |workers: serde_json::Value| -> crate::api::MirrorFlowSpec {
            serde_json::from_value(serde_json::json!({
                "source": {"alias": "dc1", "bootstrapServers": "a:1"},
                "target": {"alias": "dc2", "bootstrapServers": "b:1"},
                "workers": workers,
            }))
            .unwrap()
        };
        let cases = [
            // (inFlightMiB, batches, prefetch KiB); `None`: the default
            (None, 40 << 20, 4096),
            (Some(37), 32 << 20, 4096),
            (Some(16), 13 << 20, 2048),
            (Some(1), 512 << 10, 128),
            // Refused by validation; never a zero window if it got through.
            (Some(0), 512 << 10, 128),
        ];
        for (mib, bytes, prefetch_kib) in cases {
            let workers = mib.map_or(
                serde_json::json!({}),
                |m: i32| serde_json::json!({ "inFlightMiB": m }),
            );
            let t = Tuning::for_spec(&spec(workers));
            assert_eq!(t.batch.max_bytes, bytes, "{mib:?}");
            assert_eq!(t.consumer_queue_kbytes, prefetch_kib, "{mib:?}");
            assert_eq!(t.fetch_max_bytes, 1 << 20, "{mib:?}");
            assert_eq!(
                t.batch.max_records,
                Tuning::default().batch.max_records,
                "{mib:?}"
            );
        }
        assert_eq!(
            Tuning::default(),
            Tuning::for_spec(&spec(serde_json::json!({})))
        );

        let mut with_prefetch = spec(serde_json::json!({}));
        with_prefetch
            .source
            .config
            .insert("queued.max.messages.kbytes".into(), "8192".into());
        assert_eq!(Tuning::for_spec(&with_prefetch).batch.max_bytes, 36 << 20);
    }

    #[test]
    fn args_and_index_table() {
        let parse = |argv: &[&str]| Cli::try_parse_from(argv).map(|c| c.args);
        let a = parse(&["w", "--flow", "f.yaml"]).unwrap();
        assert_eq!(a.worker_count, 1);
        assert_eq!(a.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(a.secrets_dir, PathBuf::from(crate::api::SECRETS_DIR));
        assert!(parse(&["w"]).is_err(), "--flow or --flow-ref is required");
        assert!(parse(&["w", "--flow", "f", "--flow-ref", "ns/f"]).is_err());
        let b = parse(&[
            "w",
            "--flow-ref",
            "ns/f",
            "--worker-count",
            "3",
            "--checkpoints-file",
            "/etc/x",
        ])
        .unwrap();
        let cases = [
            (None, None, 3, Some(0)),
            (Some(2), None, 3, Some(2)),
            (Some(2), Some("f-worker-1"), 3, Some(2)),
            (None, Some("f-worker-1"), 3, Some(1)),
            (None, Some("f-worker-3"), 3, None),
            (None, Some("nonumber"), 3, None),
            (Some(0), None, 0, None),
        ];
        for (index, pod, count, want) in cases {
            let args = WorkerArgs {
                worker_index: index,
                worker_count: count,
                ..b.clone()
            };
            let got = args.resolve_index(pod).ok();
            assert_eq!(got, want, "{index:?} {pod:?} {count}");
        }
    }

    #[tokio::test]
    async fn flow_file_is_watched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flow.yaml");
        let doc = |paused: bool| {
            format!(
                "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: orders\nspec:\n  \
                 source: {{alias: dc1, bootstrapServers: 'a:9092'}}\n  target: {{alias: dc2, bootstrapServers: 'b:9092'}}\n  \
                 delivery: AtLeastOnce\n  paused: {paused}\n"
            )
        };
        std::fs::write(&path, doc(false)).unwrap();
        let (mut input, task) = watch_flow_file(&path, Duration::from_millis(20)).unwrap();
        assert_eq!(
            (input.namespace.as_str(), input.name.as_str()),
            ("default", "orders")
        );
        assert!(!input.spec.borrow().paused);
        // An invalid edit keeps the last good spec...
        std::fs::write(&path, "kind: [").unwrap();
        // ...and a valid one is published.
        std::fs::write(&path, doc(true)).unwrap();
        tokio::time::timeout(Duration::from_secs(10), input.spec.changed())
            .await
            .expect("change seen")
            .unwrap();
        assert!(input.spec.borrow().paused);
        task.abort();
        assert!(watch_flow_file(&dir.path().join("missing.yaml"), Duration::from_secs(1)).is_err());
    }
}
