//! The worker process, wired in one place: the replication engine, worker 0's singletons
//! (checkpoints, heartbeats, the topic ACL sync), the HTTP endpoints and the status sinks,
//! started for one flow and stopped together. The flow and the sinks come from the mode
//! that calls [`run_with`] (`flow_file` standalone, `k8s` in a pod).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::args::{FlowInput, WorkerArgs};
use super::sinks::{
    checkpoint_reports, CheckpointReport, CheckpointReportSource, Extras, Fanout, WithExtras,
    WorkerSink,
};
use crate::api::{MirrorFlow, MirrorFlowSpec, ReplicationLatency};
use crate::kafka::health::FlowHealth;
use crate::telemetry::http::{self, HttpState, Readiness};
use crate::telemetry::metrics::WorkerMetrics;
use crate::worker::acl_sync::{AclMetrics, AclSyncRunner};
use crate::worker::audit::runner::{AuditMetrics, AuditRunner};
use crate::worker::checkpoint::runner::{self, CheckpointRunner};
use crate::worker::failover::runner::FailoverRunner;
use crate::worker::heartbeats::HeartbeatRunner;
use crate::worker::replicate::{
    Engine, EngineOutputs, EngineSettings, StatusSink, Tuning, WorkerSnapshot,
};

/// Runs a worker for `input`, serving HTTP on `args.listen`, publishing snapshots to
/// `sinks` (and `/status`), until `shutdown`.
pub async fn run_with(
    args: WorkerArgs,
    input: FlowInput,
    sinks: Vec<Arc<dyn WorkerSink>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let index = args.resolve_index(std::env::var("POD_NAME").ok().as_deref())?;
    let settings = engine_settings(&args, &input, index);
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
    let (health, reports, sink) = {
        let spec = input.spec.borrow();
        side_reports(&spec, status_tx, sinks)
    };
    let Reports {
        acl: acl_state,
        latency: latency_state,
        audit: audit_state,
        failover: failover_state,
    } = reports;
    let (addr, stop_http_tx, http_task) = serve_http(
        args.listen,
        &metrics,
        &readiness,
        status_rx.clone(),
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
    // Every worker audits the partitions it owns (`spec.audit`), beside replication.
    let audit = (status_rx.clone(), audit_state);
    let audit_task = start_audit(&args, &input, audit, &metrics, &stop_rx);
    let acl = (secrets.clone(), acl_state);
    let acl_task = start_acl_sync(index, &args, &input, acl, &metrics, &stop_rx);
    // The failover first: the engine, the heartbeats and the checkpoints all stand down
    // while it says the flow is failed over (see `failed_over_view`).
    let (failover_task, failed_over) =
        start_failover(index, &args, &input, failover_state, &stop_rx);
    let engine_spec = failed_over_view(input.spec.clone(), failed_over.clone(), engine_view);
    // Heartbeats are a singleton like the ACL sync: worker 0 emits and measures them.
    let heartbeat_task = runner::should_run(index).then(|| {
        let spec = failed_over_view(input.spec.clone(), failed_over.clone(), heartbeats_view);
        start_heartbeats(
            &settings,
            &args,
            spec,
            latency_state,
            &metrics,
            &secrets,
            &stop_rx,
        )
    });
    let checkpoints = runner::should_run(index)
        .then(|| {
            start_checkpoints(
                &input,
                failed_over_view(input.checkpoints.clone(), failed_over, checkpoints_view),
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
    let result = match Engine::new(settings, engine_spec, outputs) {
        Ok(engine) => engine.watch_secrets(secrets).run(engine_shutdown).await,
        Err(e) => {
            drop(engine_shutdown); // releases `stop_tx`: the runner stops at once
            Err(e)
        }
    };
    secrets_watcher.abort();
    stop_side_tasks(checkpoints, acl_task).await;
    stop_side_tasks(None, heartbeat_task).await;
    stop_side_tasks(None, Some(audit_task)).await;
    stop_side_tasks(None, Some(failover_task)).await;
    let _ = stop_http_tx.send(());
    let _ = http_task.await;
    result.map_err(anyhow::Error::from)
}

/// Where the side tasks report (each into the worker's snapshot, see `sinks`).
struct Reports {
    acl: watch::Sender<Option<crate::api::TopicAclSync>>,
    latency: watch::Sender<Option<ReplicationLatency>>,
    audit: watch::Sender<Option<crate::api::AuditReport>>,
    failover: watch::Sender<Option<crate::api::FailoverReport>>,
}

/// Connection health of both clusters (shared by every client that reports into it), the
/// side tasks' report channels, and the engine's sink, which adds them to each snapshot.
fn side_reports(
    spec: &MirrorFlowSpec,
    status_tx: watch::Sender<WorkerSnapshot>,
    sinks: Vec<Arc<dyn WorkerSink>>,
) -> (FlowHealth, Reports, Arc<dyn StatusSink>) {
    let health = FlowHealth::new(&spec.source.alias, &spec.target.alias);
    let (acl, topic_acls) = watch::channel(None);
    let (latency, replication_latency) = watch::channel(None);
    let (audit, audit_rx) = watch::channel(None);
    let (failover, failover_rx) = watch::channel(None);
    let extras = Extras {
        health: health.clone(),
        topic_acls,
        replication_latency,
        audit: audit_rx,
        failover: failover_rx,
    };
    let reports = Reports {
        acl,
        latency,
        audit,
        failover,
    };
    (health, reports, engine_sink(status_tx, sinks, extras))
}

/// The heartbeats (worker 0): emitted and measured until `stop` says so.
fn start_heartbeats(
    settings: &EngineSettings,
    args: &WorkerArgs,
    spec: watch::Receiver<MirrorFlowSpec>,
    state: watch::Sender<Option<ReplicationLatency>>,
    metrics: &WorkerMetrics,
    secrets: &crate::kafka::secrets::FlowSecrets,
    stop: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let runner = HeartbeatRunner {
        reader_group: format!("{}-heartbeats", settings.transactional_id()),
        secrets_dir: args.secrets_dir.clone(),
        spec,
        state,
        metrics: metrics.clone(),
        secrets: Some(secrets.clone()),
    };
    tokio::spawn(runner.run(wait_for_stop(stop.clone())))
}

/// The failover (worker 0 runs it) and whether the flow is failed over: true while a
/// failover of the current id is done, and at start while `spec.failover` is set until the
/// store says that failover is not done.
fn start_failover(
    index: u32,
    args: &WorkerArgs,
    input: &FlowInput,
    state: watch::Sender<Option<crate::api::FailoverReport>>,
    stop: &watch::Receiver<bool>,
) -> (JoinHandle<()>, watch::Receiver<bool>) {
    let (stopped_tx, stopped_rx) = watch::channel(input.spec.borrow().failover.is_some());
    let task = tokio::spawn(
        FailoverRunner {
            namespace: input.namespace.clone(),
            flow: input.name.clone(),
            secrets_dir: args.secrets_dir.clone(),
            index,
            spec: input.spec.clone(),
            checkpoints: input.checkpoints.clone(),
            state,
            stopped: stopped_tx,
        }
        .run(wait_for_stop(stop.clone())),
    );
    (task, stopped_rx)
}

/// The flow as the engine sees it: paused while failed over.
fn engine_view(spec: &MirrorFlowSpec, failed_over: bool) -> MirrorFlowSpec {
    MirrorFlowSpec {
        paused: spec.paused || failed_over,
        ..spec.clone()
    }
}

/// The flow as the heartbeats see it: off while failed over. The old source's heartbeats
/// must not land on the new primary, and nothing replicated means no latency to measure.
fn heartbeats_view(spec: &MirrorFlowSpec, failed_over: bool) -> MirrorFlowSpec {
    let mut spec = spec.clone();
    if failed_over {
        spec.heartbeats.interval_seconds = 0;
    }
    spec
}

/// The OffsetCheckpoints the checkpoint runner runs: none while failed over. The consumers
/// now commit on the new primary; a group sync from the old source (back, with offsets ahead
/// of what was replicated) would move them past what the target holds or overwrite them.
#[allow(clippy::ptr_arg)] // a view of the watched `Vec` (see `failed_over_view`)
fn checkpoints_view(
    checkpoints: &Vec<crate::api::OffsetCheckpoint>,
    failed_over: bool,
) -> Vec<crate::api::OffsetCheckpoint> {
    if failed_over {
        Vec::new()
    } else {
        checkpoints.clone()
    }
}

/// `input` as `view` derives it from whether the flow is failed over, following both.
fn failed_over_view<T: Clone + Send + Sync + 'static>(
    mut input: watch::Receiver<T>,
    mut failed_over: watch::Receiver<bool>,
    view: fn(&T, bool) -> T,
) -> watch::Receiver<T> {
    let (tx, rx) = watch::channel(view(
        &input.borrow_and_update(),
        *failed_over.borrow_and_update(),
    ));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = input.changed() => if r.is_err() { return },
                r = failed_over.changed() => if r.is_err() { return },
                _ = tx.closed() => return,
            }
            let next = view(&input.borrow_and_update(), *failed_over.borrow_and_update());
            if tx.send(next).is_err() {
                return;
            }
        }
    });
    rx
}

/// The continuous audit of this worker's partitions (`worker::audit::runner`), fed the
/// engine's snapshots, reporting into `state`.
fn start_audit(
    args: &WorkerArgs,
    input: &FlowInput,
    (owned, state): (
        watch::Receiver<WorkerSnapshot>,
        watch::Sender<Option<crate::api::AuditReport>>,
    ),
    metrics: &WorkerMetrics,
    stop: &watch::Receiver<bool>,
) -> JoinHandle<()> {
    let runner = AuditRunner {
        namespace: input.namespace.clone(),
        flow: input.name.clone(),
        secrets_dir: args.secrets_dir.clone(),
        spec: input.spec.clone(),
        owned,
        state,
        metrics: AuditMetrics::new(&metrics.registry)
            .map_err(|e| warn!("audit metrics are not exported: {e}"))
            .ok(),
    };
    tokio::spawn(runner.run(wait_for_stop(stop.clone())))
}

/// The topic ACL sync (worker 0 only), reconnecting on rotated `secrets`.
fn start_acl_sync(
    index: u32,
    args: &WorkerArgs,
    input: &FlowInput,
    (secrets, state): (
        crate::kafka::secrets::FlowSecrets,
        watch::Sender<Option<crate::api::TopicAclSync>>,
    ),
    metrics: &WorkerMetrics,
    stop: &watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    runner::should_run(index).then(|| {
        let runner = AclSyncRunner {
            namespace: input.namespace.clone(),
            flow: input.name.clone(),
            secrets_dir: args.secrets_dir.clone(),
            spec: input.spec.clone(),
            secrets: Some(secrets),
            state,
            metrics: AclMetrics::new(&metrics.registry)
                .map_err(|e| warn!("topic ACL metrics are not exported: {e}"))
                .ok(),
        };
        tokio::spawn(runner.run(wait_for_stop(stop.clone())))
    })
}

/// Where the engine publishes: `/status`'s channel and `sinks`, `extras` added to each
/// snapshot.
fn engine_sink(
    status_tx: watch::Sender<WorkerSnapshot>,
    sinks: Vec<Arc<dyn WorkerSink>>,
    extras: Extras,
) -> Arc<dyn StatusSink> {
    let mut all: Vec<Arc<dyn StatusSink>> = vec![Arc::new(status_tx)];
    all.extend(sinks.into_iter().map(|s| s as Arc<dyn StatusSink>));
    Arc::new(WithExtras {
        inner: Arc::new(Fanout(all)),
        extras,
    })
}

/// Who the engine of worker `index` is, and its knobs.
fn engine_settings(args: &WorkerArgs, input: &FlowInput, index: u32) -> EngineSettings {
    EngineSettings {
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
    }
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
    checkpoints: watch::Receiver<Vec<crate::api::OffsetCheckpoint>>,
    secrets_dir: &std::path::Path,
    registry: &prometheus::Registry,
    secrets: crate::kafka::secrets::FlowSecrets,
    report: &watch::Sender<CheckpointReport>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Option<CheckpointTasks> {
    let mut flow = MirrorFlow::new(&input.name, input.spec.borrow().clone());
    flow.metadata.namespace = Some(input.namespace.clone());
    let cps = checkpoints.borrow().clone();
    let back = crate::worker::failover::groups_back::loader(&flow);
    match CheckpointRunner::new(&flow, cps, secrets_dir, registry)
        .map(|r| r.watch_secrets(secrets).failing_back(back))
    {
        Ok(runner) => {
            let specs = runner.specs();
            let state = runner.state();
            let mut cp_rx = checkpoints;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MirrorFlowSpec;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: WorkerArgs,
    }

    #[test]
    fn only_worker_zero_fences_the_retired_workers() {
        let spec: MirrorFlowSpec = serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        }))
        .unwrap();
        let input = FlowInput {
            namespace: "kafka".into(),
            name: "orders".into(),
            spec: watch::channel(spec).1,
            checkpoints: watch::channel(Vec::new()).1,
            reported_workers: [
                "orders-worker-0",
                "orders-worker-3",
                "orders-worker-1",
                "other-worker-5",
            ]
            .map(String::from)
            .to_vec(),
        };
        let args = Cli::try_parse_from(["x", "--flow", "f.yaml", "--worker-count", "2"])
            .unwrap()
            .args;
        let cases = [(0, vec![3]), (1, vec![])];
        for (index, retired) in cases {
            let s = engine_settings(&args, &input, index);
            assert_eq!(
                (s.worker_index, s.worker_count, s.retired_workers),
                (index, 2, retired),
                "worker {index}"
            );
            assert_eq!(
                (s.namespace.as_str(), s.flow_name.as_str()),
                ("kafka", "orders")
            );
        }
    }

    fn flow_spec() -> MirrorFlowSpec {
        serde_json::from_value(serde_json::json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        }))
        .unwrap()
    }

    fn checkpoint() -> crate::api::OffsetCheckpoint {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "mirrorflow.io/v1alpha1",
            "kind": "OffsetCheckpoint",
            "metadata": {"name": "cp", "namespace": "kafka"},
            "spec": {"flowRef": {"name": "orders"}, "groups": {"include": [".*"]}},
        }))
        .unwrap()
    }

    /// A failed-over flow writes nothing more to the target: no replication, no
    /// heartbeats, no checkpoints or group offsets; a flow that is not runs all three as
    /// its spec says.
    #[test]
    fn a_failed_over_flow_stands_every_writer_down() {
        let cps = vec![checkpoint()];
        // (paused in spec, failed over) -> (engine paused, heartbeat interval, checkpoints run)
        let cases = [
            ((false, false), (false, 1, 1)),
            ((true, false), (true, 1, 1)),
            ((false, true), (true, 0, 0)),
            ((true, true), (true, 0, 0)),
        ];
        for ((paused, failed_over), want) in cases {
            let spec = MirrorFlowSpec {
                paused,
                ..flow_spec()
            };
            let got = (
                engine_view(&spec, failed_over).paused,
                heartbeats_view(&spec, failed_over)
                    .heartbeats
                    .interval_seconds,
                checkpoints_view(&cps, failed_over).len(),
            );
            assert_eq!(got, want, "paused {paused}, failed over {failed_over}");
            let engine = engine_view(&spec, failed_over);
            assert_eq!(
                MirrorFlowSpec {
                    paused: spec.paused,
                    ..engine
                },
                spec,
                "only `paused` differs for the engine"
            );
        }
    }

    /// The views follow the failover both ways (done, then a new id not done yet) and the
    /// input's own changes.
    #[tokio::test]
    async fn the_views_follow_the_failover_and_the_input() {
        let (spec_tx, spec_rx) = watch::channel(flow_spec());
        let (failed_tx, failed_rx) = watch::channel(true);
        let mut view = failed_over_view(spec_rx, failed_rx, heartbeats_view);
        assert_eq!(view.borrow_and_update().heartbeats.interval_seconds, 0);
        failed_tx.send_replace(false);
        view.changed().await.unwrap();
        assert_eq!(view.borrow_and_update().heartbeats.interval_seconds, 1);
        spec_tx.send_modify(|s| s.heartbeats.interval_seconds = 5);
        view.changed().await.unwrap();
        assert_eq!(view.borrow_and_update().heartbeats.interval_seconds, 5);
        failed_tx.send_replace(true);
        view.changed().await.unwrap();
        assert_eq!(view.borrow_and_update().heartbeats.interval_seconds, 0);
    }
}
