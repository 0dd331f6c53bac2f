//! Kubernetes mode of the worker (`mirrorflow worker --flow-ref NAMESPACE/NAME`).
//!
//! Two thin edges around the engine:
//! - the flow source: the MirrorFlow is read from the API server and watched (field selector
//!   on its name, which is all the worker's Role allows), so `paused` and `reset` apply live;
//! - the status sink: the worker server-side-applies its own `status.workers[id]` entry with
//!   its own field manager (`mirrorflow-worker-<i>`), so status never depends on the
//!   controller reaching the pod. The apply body holds only that entry: `status.workers` is a
//!   list-map keyed by `id`, so each worker owns exactly its element and the controller's
//!   fields are untouched.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::Client;
use serde_json::json;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use std::path::PathBuf;

use crate::api::{
    load_flow_file, validate_flow, MirrorFlow, MirrorFlowSpec, OffsetCheckpoint, WorkerStatus,
    GROUP, VERSION,
};
use crate::worker::replicate::{
    self, checkpoint_reports, CheckpointReportSource, FlowInput, StatusSink, WorkerArgs,
    WorkerSnapshot,
};

/// Heartbeat: an unchanged entry is re-applied this often (the controller counts entries
/// older than 30 s as not ready; see docs/ARCHITECTURE.md).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Changes are applied at most this often, so a flapping partition cannot flood the API.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// `NAMESPACE/NAME` → (namespace, name), with a message naming the flag on bad input.
pub fn parse_flow_ref(s: &str) -> anyhow::Result<(String, String)> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => anyhow::bail!("--flow-ref {s:?}: expected NAMESPACE/NAME, e.g. kafka/orders-dr"),
    }
}

/// The field manager of worker `index`.
pub fn field_manager(index: u32) -> String {
    format!("mirrorflow-worker-{index}")
}

/// The server-side-apply body for one worker's entry: nothing but `status.workers[entry]`.
pub fn worker_status_patch(flow: &str, entry: &WorkerStatus) -> serde_json::Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "MirrorFlow",
        "metadata": { "name": flow },
        "status": { "workers": [entry] },
    })
}

/// Runs a worker whose flow lives in the Kubernetes API, until SIGTERM/SIGINT.
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let flow_ref = args.flow_ref.clone().ok_or_else(|| {
        anyhow::anyhow!("--flow-ref NAMESPACE/NAME is required in Kubernetes mode")
    })?;
    let (namespace, name) = parse_flow_ref(&flow_ref)?;
    let index = args.resolve_index(std::env::var("POD_NAME").ok().as_deref())?;
    let client = Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("cannot reach the Kubernetes API (in-cluster or KUBECONFIG): {e}")
    })?;
    let api: Api<MirrorFlow> = Api::namespaced(client, &namespace);
    let (mut input, generation, source_task) = flow_source(api.clone(), &namespace, &name).await?;
    let reload = Duration::from_secs(args.flow_reload_seconds.max(1));
    // Only worker 0 runs checkpoints (checkpoint::runner::should_run); the others skip the file.
    let cp_file = args
        .checkpoints_file
        .clone()
        .filter(|_| crate::worker::checkpoint::runner::should_run(index));
    let (checkpoints, cp_task) = watch_checkpoints_file(cp_file, &name, reload);
    input.checkpoints = checkpoints;
    let sink = Arc::new(KubeStatusSink::spawn(api, name.clone(), index, generation));
    let result = replicate::run_with(
        args,
        input,
        vec![sink.clone()],
        replicate::shutdown_signal(),
    )
    .await;
    source_task.abort();
    cp_task.abort();
    // A final entry (e.g. Stopped) reaches the API before the pod goes away.
    sink.flush().await;
    result
}

/// Reads the flow once (it must exist and be valid), then watches it and publishes each new
/// valid spec. An invalid later spec keeps the last good one running: the controller reports
/// InvalidSpec and leaves the workers alone, and so do we.
pub async fn flow_source(
    api: Api<MirrorFlow>,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(
    FlowInput,
    watch::Receiver<Option<i64>>,
    tokio::task::JoinHandle<()>,
)> {
    let flow = api
        .get_opt(name)
        .await
        .map_err(|e| anyhow::anyhow!("reading MirrorFlow {namespace}/{name}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("MirrorFlow {namespace}/{name} not found"))?;
    validate_flow(&flow.spec)
        .map_err(|e| anyhow::anyhow!("MirrorFlow {namespace}/{name} is invalid: {e}"))?;
    let (spec_tx, spec_rx) = watch::channel(flow.spec.clone());
    let (gen_tx, gen_rx) = watch::channel(flow.metadata.generation);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let label = format!("{namespace}/{name}");
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(f)) | Ok(Event::InitApply(f)) => {
                    publish_spec(&label, &f, &spec_tx, &gen_tx);
                }
                Ok(Event::Delete(_)) => {
                    // Owner references delete the StatefulSet too; keep running until then.
                    warn!(flow = %label, "MirrorFlow deleted; waiting to be stopped");
                }
                Ok(Event::Init) | Ok(Event::InitDone) => {}
                Err(e) => {
                    // The watcher retries on its own; say so once per error.
                    warn!(flow = %label, "watching the MirrorFlow: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
    let input = FlowInput {
        namespace: namespace.to_string(),
        name: name.to_string(),
        spec: spec_rx,
        // Filled from the rendered config file by `run` (see `watch_checkpoints_file`).
        checkpoints: watch::channel(Vec::new()).1,
    };
    Ok((input, gen_rx, task))
}

/// The OffsetCheckpoints of flow `name` from the rendered config file the controller mounts
/// (`--checkpoints-file`, a ConfigMap volume: kubelet updates it in place), re-read every
/// `every`, so group settings change without restarting replication. A missing or bad file
/// leaves the last good list (empty at first) and is logged once per distinct problem.
pub fn watch_checkpoints_file(
    path: Option<PathBuf>,
    name: &str,
    every: Duration,
) -> (
    watch::Receiver<Vec<OffsetCheckpoint>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = watch::channel(Vec::new());
    let name = name.to_string();
    let task = tokio::spawn(async move {
        let Some(path) = path else { return };
        let mut last_error: Option<String> = None;
        loop {
            match load_flow_file(&path) {
                Ok(f) => {
                    last_error = None;
                    let list: Vec<OffsetCheckpoint> = f
                        .checkpoints
                        .into_iter()
                        .filter(|c| c.spec.flow_ref.name == name)
                        .collect();
                    tx.send_if_modified(|cur| {
                        let changed = *cur != list;
                        if changed {
                            info!(file = %path.display(), count = list.len(), "OffsetCheckpoints loaded");
                            *cur = list;
                        }
                        changed
                    });
                }
                Err(e) => {
                    let msg = e.to_string();
                    if last_error.as_deref() != Some(&msg) {
                        warn!(file = %path.display(), "reading OffsetCheckpoints: {msg}");
                        last_error = Some(msg);
                    }
                }
            }
            if tx.is_closed() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
    (rx, task)
}

/// Publish a watched flow's spec when it is valid and different. Pure apart from the channels.
pub fn publish_spec(
    label: &str,
    flow: &MirrorFlow,
    spec_tx: &watch::Sender<MirrorFlowSpec>,
    gen_tx: &watch::Sender<Option<i64>>,
) -> bool {
    if let Err(e) = validate_flow(&flow.spec) {
        warn!(flow = %label, "new spec is invalid, keeping the last valid one: {e}");
        return false;
    }
    gen_tx.send_replace(flow.metadata.generation);
    spec_tx.send_if_modified(|cur| {
        if *cur != flow.spec {
            info!(flow = %label, generation = ?flow.metadata.generation, "flow spec changed");
            *cur = flow.spec.clone();
            true
        } else {
            false
        }
    })
}

/// Applies the worker's status entry: on change (at most every [`MIN_INTERVAL`]) and as a
/// heartbeat every [`HEARTBEAT`]. `publish` never blocks the engine.
pub struct KubeStatusSink {
    latest: watch::Sender<Option<WorkerSnapshot>>,
    reports: Arc<std::sync::Mutex<Option<CheckpointReportSource>>>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    flush: Arc<tokio::sync::Notify>,
    flushed: Arc<tokio::sync::Notify>,
}

impl KubeStatusSink {
    /// Start the apply loop for worker `index` of flow `name`.
    pub fn spawn(
        api: Api<MirrorFlow>,
        name: String,
        index: u32,
        generation: watch::Receiver<Option<i64>>,
    ) -> Self {
        let (latest, mut rx) = watch::channel::<Option<WorkerSnapshot>>(None);
        let flush = Arc::new(tokio::sync::Notify::new());
        let flushed = Arc::new(tokio::sync::Notify::new());
        let (flush_c, flushed_c) = (flush.clone(), flushed.clone());
        let reports: Arc<std::sync::Mutex<Option<CheckpointReportSource>>> = Arc::default();
        let reports_c = reports.clone();
        let task = tokio::spawn(async move {
            let params = PatchParams::apply(&field_manager(index)).force();
            let mut last_sent: Option<WorkerStatus> = None;
            let mut last_time = tokio::time::Instant::now() - HEARTBEAT;
            loop {
                let flushing = tokio::select! {
                    r = rx.changed() => { if r.is_err() { break; } false }
                    _ = tokio::time::sleep_until(last_time + HEARTBEAT) => false,
                    _ = flush_c.notified() => true,
                };
                if !flushing {
                    // Debounce: bursts of snapshots become one apply.
                    tokio::time::sleep_until(last_time + MIN_INTERVAL).await;
                }
                let Some(snapshot) = rx.borrow_and_update().clone() else {
                    if flushing {
                        flushed_c.notify_one();
                    }
                    continue;
                };
                let mut entry = snapshot.to_worker_status(*generation.borrow());
                // The heartbeat is this apply: a snapshot can be older while the engine waits
                // on a slow cluster call, and the worker is still alive.
                entry.last_heartbeat_time = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
                );
                let source = reports_c.lock().expect("reports lock").clone();
                if let Some(source) = source {
                    entry.checkpoints = checkpoint_reports(&source);
                }
                let due = tokio::time::Instant::now() >= last_time + HEARTBEAT;
                if flushing || due || !same_but_heartbeat(last_sent.as_ref(), &entry) {
                    let patch = worker_status_patch(&name, &entry);
                    match api
                        .patch_status(&name, &params, &Patch::Apply(&patch))
                        .await
                    {
                        Ok(_) => {
                            debug!(worker = %entry.id, state = ?entry.state, "status entry applied");
                            last_sent = Some(entry);
                            last_time = tokio::time::Instant::now();
                        }
                        Err(e) => {
                            warn!(worker = %entry.id, "applying the worker status entry: {e}");
                            // Retry on the next tick, not in a hot loop.
                            last_time = tokio::time::Instant::now() - HEARTBEAT + MIN_INTERVAL * 5;
                        }
                    }
                }
                if flushing {
                    flushed_c.notify_one();
                }
            }
        });
        Self {
            latest,
            reports,
            task: tokio::sync::Mutex::new(Some(task)),
            flush,
            flushed,
        }
    }

    /// Apply the latest snapshot now and wait (bounded) for it to be sent.
    pub async fn flush(&self) {
        self.flush.notify_one();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.flushed.notified()).await;
        if let Some(t) = self.task.lock().await.take() {
            t.abort();
        }
    }
}

impl StatusSink for KubeStatusSink {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        self.latest.send_replace(Some(snapshot.clone()));
    }

    fn attach_checkpoints(&self, source: CheckpointReportSource) {
        *self.reports.lock().expect("reports lock") = Some(source);
    }
}

/// Entries equal except for the heartbeat time need no apply before the heartbeat is due.
fn same_but_heartbeat(prev: Option<&WorkerStatus>, next: &WorkerStatus) -> bool {
    let Some(prev) = prev else { return false };
    let mut a = prev.clone();
    a.last_heartbeat_time = None;
    let mut b = next.clone();
    b.last_heartbeat_time = None;
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::WorkerState;

    #[test]
    fn flow_ref_parsing() {
        let rows: Vec<(&str, Option<(&str, &str)>)> = vec![
            ("kafka/orders", Some(("kafka", "orders"))),
            ("orders", None),
            ("/orders", None),
            ("kafka/", None),
            ("a/b/c", None),
            ("", None),
        ];
        for (input, want) in rows {
            let got = parse_flow_ref(input).ok();
            assert_eq!(
                got.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                want,
                "{input}"
            );
        }
        let err = parse_flow_ref("orders").unwrap_err().to_string();
        assert!(
            err.contains("--flow-ref") && err.contains("NAMESPACE/NAME"),
            "{err}"
        );
    }

    fn entry(state: WorkerState, beat: i64) -> WorkerStatus {
        WorkerStatus {
            id: "f-worker-0".into(),
            partitions: 3,
            state,
            last_heartbeat_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(beat).unwrap(),
            )),
            message: None,
            observed_generation: Some(1),
            failures: vec![],
            replication_lag: None,
            last_applied_reset: None,
            checkpoints: vec![],
        }
    }

    #[test]
    fn patch_holds_only_the_workers_entry() {
        let p = worker_status_patch("f", &entry(WorkerState::Running, 5));
        assert_eq!(p["apiVersion"], "mirrorflow.io/v1alpha1");
        assert_eq!(p["kind"], "MirrorFlow");
        assert_eq!(p["metadata"], json!({"name": "f"}));
        let status = p["status"].as_object().unwrap();
        assert_eq!(
            status.keys().collect::<Vec<_>>(),
            vec!["workers"],
            "never the controller's fields"
        );
        assert_eq!(p["status"]["workers"][0]["id"], "f-worker-0");
        assert_eq!(p["status"]["workers"][0]["state"], "Running");
        assert_eq!(field_manager(3), "mirrorflow-worker-3");
    }

    #[test]
    fn heartbeat_only_changes_are_not_changes() {
        let a = entry(WorkerState::Running, 5);
        assert!(same_but_heartbeat(
            Some(&a),
            &entry(WorkerState::Running, 9)
        ));
        assert!(!same_but_heartbeat(
            Some(&a),
            &entry(WorkerState::Degraded, 5)
        ));
        assert!(!same_but_heartbeat(None, &a));
    }

    #[test]
    fn invalid_watched_specs_are_not_published() {
        let good: MirrorFlowSpec = serde_json::from_value(json!({
            "source": {"alias": "a", "bootstrapServers": "a:1"},
            "target": {"alias": "b", "bootstrapServers": "b:1"}
        }))
        .unwrap();
        let (spec_tx, spec_rx) = watch::channel(good.clone());
        let (gen_tx, gen_rx) = watch::channel(Some(1));
        let mut f = MirrorFlow::new("f", good.clone());
        f.metadata.generation = Some(2);
        assert!(
            !publish_spec("ns/f", &f, &spec_tx, &gen_tx),
            "unchanged spec"
        );
        assert_eq!(*gen_rx.borrow(), Some(2));
        f.spec.paused = true;
        f.metadata.generation = Some(3);
        assert!(publish_spec("ns/f", &f, &spec_tx, &gen_tx));
        assert!(spec_rx.borrow().paused);
        let mut bad = f.clone();
        bad.spec.target.alias = "a".into();
        bad.metadata.generation = Some(4);
        assert!(!publish_spec("ns/f", &bad, &spec_tx, &gen_tx));
        assert_eq!(spec_rx.borrow().target.alias, "b", "last valid spec stays");
        assert_eq!(*gen_rx.borrow(), Some(3));
    }
}
