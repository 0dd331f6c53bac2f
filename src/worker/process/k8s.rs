//! Kubernetes mode of the worker (`mirrorflow worker --flow-ref NAMESPACE/NAME`).
//!
//! Two thin edges around the engine:
//! - the flow source: the MirrorFlow is read from the API server and watched (field selector
//!   on its name, which is all the worker's Role allows), so `paused` and `reset` apply live;
//! - the status sink: the worker server-side-applies its own `status.workers[id]` entry with
//!   its own field manager (`mirrorflow-worker-<i>`), so status never depends on the
//!   controller reaching the pod. The apply body holds only that entry: `status.workers` is a
//!   list-map keyed by `id`, so each worker owns exactly its element and the controller's
//!   fields are untouched. The entry says state, heartbeat and counts: a failure's
//!   explanation (message, log start, records lost) is sent until the worker sees it in the
//!   controller's `status.failures`, then only its identity ([`compact_entry`]), so
//!   `kubectl describe` explains each failure once; worker 0's failover report likewise
//!   leaves the entry once the controller holds it in `status.failover`.

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

use super::args::{FlowInput, WorkerArgs};
use super::sinks::{checkpoint_reports, CheckpointReportSource, WorkerSink};
use super::wiring::{run_with, shutdown_signal};
use crate::api::status::{material, partition_ref, same_failure};
use crate::api::{
    load_flow_file, validate_flow, FailoverReport, MirrorFlow, MirrorFlowSpec, OffsetCheckpoint,
    PartitionFailure, WorkerState, WorkerStatus, GROUP, VERSION,
};
use crate::worker::checkpoint::runner::should_run;
use crate::worker::replicate::{PartitionState, StatusSink, WorkerSnapshot};

/// Heartbeat: the entry is re-applied this often, with what changed on every report (lag,
/// checkpoint times) since the last apply (the controller counts entries older than 30 s as
/// not ready; see docs/ARCHITECTURE.md).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Material changes (state, failures, resets, generation: [`material`]) are applied at once,
/// but at most this often, so a flapping partition cannot flood the API.
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
    let FlowSource {
        mut input,
        generation,
        folded,
        task: source_task,
    } = flow_source(api.clone(), &namespace, &name).await?;
    let reload = Duration::from_secs(args.flow_reload_seconds.max(1));
    // Only worker 0 runs checkpoints (`should_run`); the others skip the file.
    let cp_file = args.checkpoints_file.clone().filter(|_| should_run(index));
    let (checkpoints, cp_task) = watch_checkpoints_file(cp_file, &name, reload);
    input.checkpoints = checkpoints;
    let sink = Arc::new(KubeStatusSink::spawn(
        api,
        name.clone(),
        index,
        generation,
        folded,
    ));
    let result = run_with(args, input, vec![sink.clone()], shutdown_signal()).await;
    source_task.abort();
    cp_task.abort();
    // A final entry (e.g. Stopped) reaches the API before the pod goes away.
    sink.flush().await;
    result
}

/// What the worker reads from its MirrorFlow.
pub struct FlowSource {
    /// The spec (live) and, empty, the checkpoints (filled from the config file by [`run`]).
    pub input: FlowInput,
    /// The generation of the spec in force.
    pub generation: watch::Receiver<Option<i64>>,
    /// The flow's `status.failures` and `status.failover`, as the controller folded them.
    pub folded: watch::Receiver<Folded>,
    /// The watch; aborting it freezes the spec.
    pub task: tokio::task::JoinHandle<()>,
}

/// Reads the flow once (it must exist and be valid), then watches it and publishes each new
/// valid spec. An invalid later spec keeps the last good one running: the controller reports
/// InvalidSpec and leaves the workers alone, and so do we.
pub async fn flow_source(
    api: Api<MirrorFlow>,
    namespace: &str,
    name: &str,
) -> anyhow::Result<FlowSource> {
    let flow = api
        .get_opt(name)
        .await
        .map_err(|e| anyhow::anyhow!("reading MirrorFlow {namespace}/{name}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("MirrorFlow {namespace}/{name} not found"))?;
    validate_flow(&flow.spec)
        .map_err(|e| anyhow::anyhow!("MirrorFlow {namespace}/{name} is invalid: {e}"))?;
    let (spec_tx, spec_rx) = watch::channel(flow.spec.clone());
    let (gen_tx, gen_rx) = watch::channel(flow.metadata.generation);
    let (folded_tx, folded_rx) = watch::channel(Folded::of(&flow));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let label = format!("{namespace}/{name}");
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(Event::Apply(f)) | Ok(Event::InitApply(f)) => {
                    publish_spec(&label, &f, &spec_tx, &gen_tx);
                    folded_tx.send_if_modified(|cur| {
                        let now = Folded::of(&f);
                        let changed = *cur != now;
                        *cur = now;
                        changed
                    });
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
        reported_workers: flow
            .status
            .iter()
            .flat_map(|st| st.workers.iter().map(|w| w.id.clone()))
            .collect(),
    };
    Ok(FlowSource {
        input,
        generation: gen_rx,
        folded: folded_rx,
        task,
    })
}

/// What the controller has folded into the flow's status from the workers' entries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Folded {
    /// `status.failures`.
    pub failures: Vec<PartitionFailure>,
    /// `status.failover`.
    pub failover: Option<FailoverReport>,
}

impl Folded {
    fn of(flow: &MirrorFlow) -> Self {
        flow.status
            .as_ref()
            .map(|s| Folded {
                failures: s.failures.clone(),
                failover: s.failover.clone(),
            })
            .unwrap_or_default()
    }
}

/// The entry's failover report, unless the controller already holds this very report in
/// `status.failover` (then the entry leaves it out and `kubectl describe` shows it once; a
/// report that changes, or a new id, is sent again). Compared as the API holds them: times
/// there are whole seconds, ours may not be. Pure.
pub fn unfolded_failover(
    own: Option<FailoverReport>,
    folded: Option<&FailoverReport>,
) -> Option<FailoverReport> {
    let as_stored = |r: &FailoverReport| serde_json::to_value(r).ok();
    own.filter(|r| folded.is_none_or(|f| as_stored(&r.clone().bounded()) != as_stored(f)))
}

/// The entry as it is applied: a failure the controller has already folded into
/// `status.failures` with its explanation (`folded`) is named in `stoppedPartitions` instead,
/// so each explanation is shown once; a Degraded worker's message names only the failed
/// partitions no failure entry explains (a persisted failure this build cannot read). Pure.
pub fn compact_entry(
    mut entry: WorkerStatus,
    snapshot: &WorkerSnapshot,
    folded: &[PartitionFailure],
) -> WorkerStatus {
    let (explained, open): (Vec<PartitionFailure>, Vec<PartitionFailure>) =
        std::mem::take(&mut entry.failures)
            .into_iter()
            .partition(|f| {
                folded
                    .iter()
                    .any(|k| same_failure(k, f) && k.message.is_some())
            });
    entry.failures = open;
    entry.stopped_partitions = explained
        .iter()
        .map(|f| partition_ref(&f.topic, f.partition))
        .collect();
    // Degraded for another reason (a stalled or refusing cluster, an unwritable topic): its
    // own message stays.
    let partitions_failed = snapshot.partitions.iter().any(|p| p.state.is_failed());
    if entry.state == WorkerState::Degraded && partitions_failed {
        let unexplained: Vec<String> = snapshot
            .partitions
            .iter()
            .filter_map(|p| match &p.state {
                PartitionState::Failed(f) if f.failure.is_none() => Some(format!(
                    "{}/{}: {}",
                    p.topic,
                    p.partition,
                    shorten(&f.message, 160)
                )),
                _ => None,
            })
            .collect();
        entry.message = (!unexplained.is_empty()).then(|| {
            let mut msg = format!(
                "{} of {} partitions failed: {}",
                unexplained.len(),
                snapshot.partitions.len(),
                unexplained
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if unexplained.len() > 3 {
                msg.push_str(&format!("; and {} more", unexplained.len() - 3));
            }
            msg
        });
    }
    entry
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}…")
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
    /// Start the apply loop for worker `index` of flow `name`; `folded` follows the flow's
    /// `status.failures` ([`compact_entry`]) and `status.failover` ([`unfolded_failover`]).
    pub fn spawn(
        api: Api<MirrorFlow>,
        name: String,
        index: u32,
        generation: watch::Receiver<Option<i64>>,
        mut folded: watch::Receiver<Folded>,
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
            let mut folded_closed = false;
            loop {
                // A failure newly folded into status.failures leaves the entry at once, so
                // its explanation is shown twice as briefly as possible.
                let (flushing, now_folded) = tokio::select! {
                    r = rx.changed() => { if r.is_err() { break; } (false, false) }
                    _ = tokio::time::sleep_until(last_time + HEARTBEAT) => (false, false),
                    _ = flush_c.notified() => (true, false),
                    r = folded.changed(), if !folded_closed => {
                        folded_closed = r.is_err();
                        (false, r.is_ok())
                    }
                };
                if !flushing && !now_folded {
                    // Debounce: bursts of snapshots become one apply.
                    tokio::time::sleep_until(last_time + MIN_INTERVAL).await;
                }
                let Some(snapshot) = rx.borrow_and_update().clone() else {
                    if flushing {
                        flushed_c.notify_one();
                    }
                    continue;
                };
                let entry = snapshot.to_worker_status(*generation.borrow());
                let mut entry = {
                    let folded = folded.borrow();
                    let mut entry = compact_entry(entry, &snapshot, &folded.failures);
                    entry.failover = unfolded_failover(entry.failover, folded.failover.as_ref());
                    entry
                };
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
                if flushing || due || !same_material(last_sent.as_ref(), &entry) {
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
}

impl WorkerSink for KubeStatusSink {
    fn attach_checkpoints(&self, source: CheckpointReportSource) {
        *self.reports.lock().expect("reports lock") = Some(source);
    }
}

/// Entries that differ only in what changes on every report need no apply before the
/// heartbeat is due (the controller does not react to those fields either).
fn same_material(prev: Option<&WorkerStatus>, next: &WorkerStatus) -> bool {
    prev.is_some_and(|p| material(p) == material(next))
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
            stopped_partitions: vec![],
            replication_lag: None,
            last_applied_reset: None,
            checkpoints: vec![],
            connection_problems: vec![],
            topic_acls: None,
            unwritable_topics: vec![],
            replication_latency: None,
            audit: None,
            failover: None,
            mirror_maker2_takeover: None,
            failback: None,
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
    fn heartbeat_and_lag_changes_wait_for_the_heartbeat() {
        let a = entry(WorkerState::Running, 5);
        assert!(same_material(Some(&a), &entry(WorkerState::Running, 9)));
        let mut lagging = entry(WorkerState::Running, 9);
        lagging.replication_lag = Some(crate::api::ReplicationLag {
            records: 10,
            seconds: 1,
        });
        assert!(same_material(Some(&a), &lagging));
        assert!(!same_material(Some(&a), &entry(WorkerState::Degraded, 5)));
        let mut other_gen = entry(WorkerState::Running, 5);
        other_gen.observed_generation = Some(2);
        assert!(!same_material(Some(&a), &other_gen));
        assert!(!same_material(None, &a));
    }

    #[test]
    fn entries_say_state_and_counts_once_the_detail_is_folded() {
        use crate::api::FailureType;
        use crate::worker::replicate::status::{FailureKind, PartitionFailed, PartitionSnapshot};
        let failure = PartitionFailure {
            type_: FailureType::DataLoss,
            topic: "events".into(),
            partition: 0,
            requested_offset: 10,
            log_start_offset: Some(20),
            records_lost: Some(10),
            detected_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(7).unwrap() + jiff::SignedDuration::from_millis(250),
            ),
            reason: None,
            message: Some("DataLoss on source topic ... run: kubectl patch ...".into()),
        };
        let part = |p: i32, state: PartitionState| PartitionSnapshot {
            topic: "events".into(),
            partition: p,
            target_topic: "dc1.events".into(),
            position: Some(10),
            high_watermark: Some(30),
            lag_records: Some(20),
            lag_seconds: None,
            state,
        };
        let mut snap = WorkerSnapshot::starting("ns", "f", 0, 1, crate::api::Delivery::AtLeastOnce);
        snap.state = WorkerState::Degraded;
        snap.partitions = vec![
            part(
                0,
                PartitionState::Failed(PartitionFailed {
                    kind: FailureKind::DataLoss,
                    offset: 10,
                    message: "long".into(),
                    failure: Some(failure.clone()),
                }),
            ),
            part(1, PartitionState::Replicating),
        ];
        snap.failures = vec![failure.clone()];
        snap.message = Some("1 of 2 partitions failed: events/0: DataLoss on ... long".into());
        let entry = snap.to_worker_status(Some(1));

        // Not folded yet: the explanation travels; no message repeats it.
        let first = compact_entry(entry.clone(), &snap, &[]);
        assert_eq!(first.failures, vec![failure.clone()]);
        assert_eq!(first.stopped_partitions, Vec::<String>::new());
        assert_eq!(first.message, None);
        // Folded (the API server keeps whole seconds): the entry names the partition.
        let mut stored = failure.clone();
        stored.detected_at.0 = jiff::Timestamp::from_second(7).unwrap();
        let later = compact_entry(entry.clone(), &snap, std::slice::from_ref(&stored));
        assert_eq!(later.failures, vec![]);
        assert_eq!(later.stopped_partitions, vec!["events/0".to_string()]);
        // Folded without its explanation (an older controller still completing it): kept.
        stored.message = None;
        let kept = compact_entry(entry, &snap, std::slice::from_ref(&stored));
        assert_eq!(kept.failures, vec![failure.clone()]);
        // The controller completes the reference from what it folded before.
        let mut flow = MirrorFlow::new(
            "f",
            serde_json::from_value(json!({
                "source": {"alias": "a", "bootstrapServers": "a:1"},
                "target": {"alias": "b", "bootstrapServers": "b:1"}
            }))
            .unwrap(),
        );
        flow.status = Some(crate::api::MirrorFlowStatus {
            failures: vec![failure.clone()],
            workers: vec![later],
            ..Default::default()
        });
        let folded = crate::api::status::fold_flow_status(&crate::api::status::FlowObservation {
            flow: &flow,
            invalid: None,
            statefulset: None,
            draining: None,
            children: None,
            now: jiff::Timestamp::from_second(8).unwrap(),
            stale_after: crate::api::status::DEFAULT_STALE_AFTER,
        });
        assert_eq!(
            (folded.failures, folded.failed_partitions),
            (vec![failure], 1)
        );
    }

    /// The failover report is shown once: the entry drops it once `status.failover` holds
    /// the same report, and sends it again when it changes or a new id runs.
    #[test]
    fn the_failover_report_leaves_the_entry_once_folded() {
        use crate::api::{FailoverMode, FailoverPhase};
        let report = |id: &str, phase| FailoverReport {
            not_replicated: Some(0),
            ..FailoverReport::new(id, FailoverMode::Planned, phase)
        };
        let done = report("m1", FailoverPhase::Done);
        let draining = report("m1", FailoverPhase::Draining);
        // What the worker holds: the same report with a sub-second time the API drops.
        let mut precise = done.clone();
        let at = |s: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(s.parse().unwrap());
        precise.started_at = Some(at("2026-12-06T21:10:01.734Z"));
        let mut done = done;
        done.started_at = Some(at("2026-12-06T21:10:01Z"));
        let cases = [
            (None, None, None, "no failover"),
            (Some(&done), None, Some(&done), "not folded yet: sent"),
            (
                Some(&done),
                Some(&draining),
                Some(&done),
                "changed since: sent",
            ),
            (Some(&done), Some(&done), None, "folded: left out"),
            (
                Some(&report("m2", FailoverPhase::Draining)),
                Some(&done),
                Some(&report("m2", FailoverPhase::Draining)),
                "a new id: sent",
            ),
            (None, Some(&done), None, "none of its own"),
            (
                Some(&precise),
                Some(&done),
                None,
                "folded, its times cut to seconds: left out",
            ),
        ];
        for (own, folded, want, name) in cases {
            assert_eq!(
                unfolded_failover(own.cloned(), folded).as_ref(),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_failure_without_an_entry_is_named_in_the_message() {
        use crate::worker::replicate::status::{FailureKind, PartitionFailed, PartitionSnapshot};
        let mut snap = WorkerSnapshot::starting("ns", "f", 0, 1, crate::api::Delivery::AtLeastOnce);
        snap.state = WorkerState::Degraded;
        snap.partitions = vec![PartitionSnapshot {
            topic: "events".into(),
            partition: 2,
            target_topic: "dc1.events".into(),
            position: Some(10),
            high_watermark: Some(30),
            lag_records: Some(20),
            lag_seconds: None,
            state: PartitionState::Failed(PartitionFailed {
                kind: FailureKind::RecordRejected,
                offset: 10,
                message: "the target refused the record".into(),
                failure: None,
            }),
        }];
        let entry = compact_entry(snap.to_worker_status(Some(1)), &snap, &[]);
        assert_eq!(
            entry.message.as_deref(),
            Some("1 of 1 partitions failed: events/2: the target refused the record")
        );
    }

    #[test]
    fn degraded_without_failed_partitions_keeps_its_message() {
        let why = "source cluster dc1 refuses to let this worker read (...)";
        let mut snap = WorkerSnapshot::starting("ns", "f", 0, 1, crate::api::Delivery::AtLeastOnce);
        snap.state = WorkerState::Degraded;
        snap.message = Some(why.into());
        let entry = compact_entry(snap.to_worker_status(Some(1)), &snap, &[]);
        assert_eq!(entry.message.as_deref(), Some(why));
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
