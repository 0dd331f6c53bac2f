//! Controller bench: the controller's memory and API calls at 100 flows × 3 workers on a real
//! kube-apiserver (`../shared/k8s/start.sh`, as `tests/e2e_kube.rs` starts it, with an audit
//! log). Prints a table with PASS/MISS against the targets of issue #19: controller RSS ≤ 48
//! MiB, and ≤ 10 API calls per flow per minute at steady state.
//!
//! `cargo bench --bench controller`. Environment: `BENCH_FLOWS` (100), `BENCH_WORKERS` (3),
//! `BENCH_WINDOW_SECONDS` (180, the steady-state window), `MIRRORFLOW_K8S_DIR` (where
//! `start.sh` is, default `../shared/k8s`). Without the API server harness (or helm/kubectl)
//! it prints SKIPPED with the reason and exits 0.
//!
//! What is real: the API server, the chart's CRDs, RBAC and ServiceAccount, and the
//! `mirrorflow controller` process started from the chart's Deployment. What is simulated
//! (no kubelet, no Kafka): each flow's StatefulSet status (all replicas ready, as a kubelet
//! would report once) and the worker heartbeats: every worker server-side-applies its
//! `status.workers` entry every 10 s with its own field manager, the body `src/worker/process/k8s.rs`
//! builds (`worker_status_patch`), state Running, a fresh `lastHeartbeatTime` and a lag that
//! changes each time. The simulated calls are the bench's (admin user, not audited); only the
//! controller's ServiceAccount is counted.

#[path = "../tests/kube_support/mod.rs"]
mod kube_support;
#[path = "common/procfs.rs"]
mod procfs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use mirrorflow::api::{MirrorFlow, WorkerStatus};
use mirrorflow::worker::process::k8s::{field_manager, worker_status_patch, HEARTBEAT};
use serde_json::json;

use kube_support::chart::{self, NAMESPACE, RELEASE};
use kube_support::cluster::Cluster;
use kube_support::{ControllerProc, Scratch};

const NS: &str = "mirrorflow-bench";
const CONTROLLER_USER: &str = "system:serviceaccount:mirrorflow-system:mirrorflow";
const CONVERGE_LIMIT: Duration = Duration::from_secs(600);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn flow_name(i: usize) -> String {
    format!("bench-{i:03}")
}

fn flow(i: usize, workers: u64) -> MirrorFlow {
    serde_yaml::from_str(&format!(
        r#"apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: {name}}}
spec:
  source: {{alias: dc1, bootstrapServers: "kafka.dc1.invalid:9092"}}
  target: {{alias: dc2, bootstrapServers: "kafka.dc2.invalid:9092"}}
  topics: {{include: ["bench-{i}\\..*"]}}
  delivery: AtLeastOnce
  workers: {{replicas: {workers}}}
"#,
        name = flow_name(i)
    ))
    .expect("bench flow")
}

/// One simulated worker's entry at heartbeat `beat` (through JSON, so fields added to
/// `WorkerStatus` later take their defaults).
fn entry(flow: &str, index: u64, beat: u64, generation: i64) -> WorkerStatus {
    serde_json::from_value(json!({
        "id": format!("{flow}-worker-{index}"),
        "partitions": 10,
        "state": "Running",
        "lastHeartbeatTime": Timestamp::now().to_string(),
        "observedGeneration": generation,
        "replicationLag": {"records": (beat * 37 + index * 11) % 500, "seconds": beat % 3},
    }))
    .expect("a worker entry")
}

/// The workers of every flow: one apply per worker every [`HEARTBEAT`], spread over the
/// interval. Returns applies done and failed.
async fn heartbeats(
    client: kube::Client,
    flows: usize,
    workers: u64,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, u64) {
    let api: Api<MirrorFlow> = Api::namespaced(client, NS);
    let total = flows as u64 * workers;
    let mut tasks = Vec::new();
    for k in 0..total {
        let api = api.clone();
        let mut stop = stop.clone();
        let name = flow_name((k / workers) as usize);
        let index = (k % workers) as u32;
        tasks.push(tokio::spawn(async move {
            let offset = HEARTBEAT.mul_f64(k as f64 / total as f64);
            tokio::time::sleep(offset).await;
            let params = PatchParams::apply(&field_manager(index)).force();
            let (mut ok, mut failed, mut beat) = (0u64, 0u64, 0u64);
            let mut tick = tokio::time::interval(HEARTBEAT);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.changed() => break,
                }
                // The flows are never edited: generation 1 throughout.
                let e = entry(&name, u64::from(index), beat, 1);
                match api
                    .patch_status(
                        &name,
                        &params,
                        &Patch::Apply(&worker_status_patch(&name, &e)),
                    )
                    .await
                {
                    Ok(_) => ok += 1,
                    Err(_) => failed += 1,
                }
                beat += 1;
            }
            (ok, failed)
        }));
    }
    let mut out = (0, 0);
    for t in tasks {
        let (ok, failed) = t.await.unwrap_or((0, 0));
        out.0 += ok;
        out.1 += failed;
    }
    out
}

/// Plays the kubelet for StatefulSet status: every replica ready, once per change.
async fn statefulsets_ready(client: kube::Client, stop: tokio::sync::watch::Receiver<bool>) {
    let api: Api<StatefulSet> = Api::namespaced(client, NS);
    while !*stop.borrow() {
        if let Ok(list) = api.list(&ListParams::default()).await {
            for sts in list {
                let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let st = sts.status.clone().unwrap_or_default();
                if st.ready_replicas == Some(replicas)
                    && st.replicas == replicas
                    && st.observed_generation == sts.metadata.generation
                {
                    continue;
                }
                let status = json!({"status": {
                    "observedGeneration": sts.metadata.generation,
                    "replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                    "currentReplicas": replicas, "updatedReplicas": replicas,
                    "currentRevision": "bench", "updateRevision": "bench",
                }});
                let _ = api
                    .patch_status(
                        &sts.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
}

fn ready(f: &MirrorFlow, workers: u64) -> bool {
    let Some(s) = &f.status else { return false };
    s.workers_summary.as_deref() == Some(&format!("{workers}/{workers}"))
        && s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let flows = env("BENCH_FLOWS", 100) as usize;
    let workers = env("BENCH_WORKERS", 3);
    let window = Duration::from_secs(env("BENCH_WINDOW_SECONDS", 180));
    let Some(cluster) = Cluster::start_or_skip("controller bench").await else {
        return; // start_or_skip printed SKIPPED and why
    };
    if !cluster.is_local() {
        eprintln!("SKIPPED controller bench: it counts calls in our own API server's audit log (KUBECONFIG names another cluster)");
        return;
    }
    let audit = cluster.audit().expect("our API server has an audit log");
    let cluster = Arc::new(cluster);
    let mut scratch = Scratch::new("mf-bench-controller-");
    if std::env::var_os("MIRRORFLOW_KEEP_K8S").is_some() {
        scratch.keep();
        eprintln!("controller logs kept in {}", scratch.path.display());
    }
    let (deployment, _) = chart::install(&cluster).await;
    let token = cluster.sa_token_kubectl(NAMESPACE, RELEASE);
    let kubeconfig = cluster.kubeconfig_for("controller", &token, NAMESPACE);
    // A controller that exits (e.g. it lost its lease on a slow API server) is started again,
    // as its Deployment would; the restarts are reported.
    let start = |n: usize| {
        ControllerProc::start(
            &deployment,
            NAMESPACE,
            &format!("mirrorflow-controller-bench-{n}"),
            &kubeconfig,
            &[],
            &scratch.path,
        )
    };
    let mut restarts = 0usize;
    let mut controller = start(restarts);
    let mut pid = controller.proc.pid().expect("controller pid") as u32;
    cluster.namespace(NS).await;

    let started = Instant::now();
    let api: Api<MirrorFlow> = Api::namespaced(cluster.client.clone(), NS);
    for i in 0..flows {
        api.create(&PostParams::default(), &flow(i, workers))
            .await
            .unwrap_or_else(|e| panic!("create flow {i}: {e}"));
    }
    let created = started.elapsed();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let beats = tokio::spawn(heartbeats(
        cluster.client.clone(),
        flows,
        workers,
        stop_rx.clone(),
    ));
    let kubelet = tokio::spawn(statefulsets_ready(cluster.client.clone(), stop_rx));

    // Converged: every flow Ready with all its workers.
    let converged = loop {
        let list = api.list(&ListParams::default()).await.expect("list flows");
        let n = list.items.iter().filter(|f| ready(f, workers)).count();
        if n == flows {
            break started.elapsed();
        }
        if !controller.proc.running() {
            eprintln!("controller exited; log tail:\n{}", controller.proc.tail(10));
            restarts += 1;
            controller = start(restarts);
            pid = controller.proc.pid().expect("controller pid") as u32;
        }
        if started.elapsed() > CONVERGE_LIMIT {
            eprintln!("controller log tail:\n{}", controller.proc.tail(30));
            panic!("only {n}/{flows} flows Ready after {:?}", started.elapsed());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    // Let the start-up reconciles and their requeues settle before counting.
    tokio::time::sleep(Duration::from_secs(30)).await;

    let restarts_before = restarts;
    let from = Timestamp::now();
    let t0 = Instant::now();
    let mut cpu0 = procfs::cpu_of(&[pid]);
    let mut cpu_before = 0.0;
    let mut rss = Vec::new();
    let mut minute_marks = vec![from];
    while t0.elapsed() < window {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if !controller.proc.running() {
            eprintln!("controller exited; log tail:\n{}", controller.proc.tail(10));
            cpu_before += procfs::cpu_of(&[pid]) - cpu0;
            restarts += 1;
            controller = start(restarts);
            pid = controller.proc.pid().expect("controller pid") as u32;
            cpu0 = 0.0;
        }
        if let Some(k) = procfs::status_kib(pid, "VmRSS") {
            rss.push(procfs::mib(k));
        }
        if t0.elapsed() >= Duration::from_secs(60 * minute_marks.len() as u64) {
            minute_marks.push(Timestamp::now());
        }
    }
    let to = Timestamp::now();
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_before + procfs::cpu_of(&[pid]) - cpu0;
    let hwm = procfs::status_kib(pid, "VmHWM").map_or(f64::NAN, procfs::mib);
    // Where the resident memory is at the end: heap and stacks, or mapped files (the code).
    let split: Vec<f64> = ["RssAnon", "RssFile"]
        .iter()
        .map(|f| procfs::status_kib(pid, f).map_or(f64::NAN, procfs::mib))
        .collect();
    let threads = procfs::status_kib(pid, "Threads");
    let list = api.list(&ListParams::default()).await.expect("list flows");
    let still_ready = list.items.iter().filter(|f| ready(f, workers)).count();
    let _ = stop_tx.send(true);
    let (applies, failed) = beats.await.unwrap_or((0, 0));
    let _ = kubelet.await;
    controller.proc.stop(Duration::from_secs(5)).await;

    // Controller requests (leases apart: leader election costs the same at any flow count).
    let events: Vec<_> = audit
        .of_user(CONTROLLER_USER, from, to)
        .into_iter()
        .filter(|e| !e.is_watch())
        .collect();
    let lease = events.iter().filter(|e| e.is_lease()).count();
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| !e.is_lease()) {
        *by.entry(format!("{} {}", e.verb, e.resource()))
            .or_default() += 1;
    }
    let calls: usize = by.values().sum();
    let minutes = wall / 60.0;
    let per_flow_minute = calls as f64 / flows as f64 / minutes;
    // Per whole minute of the window: the spread of the rate.
    let mut per_minute = Vec::new();
    for w in minute_marks.windows(2) {
        let n = events
            .iter()
            .filter(|e| !e.is_lease() && e.stage_timestamp >= w[0] && e.stage_timestamp < w[1])
            .count();
        per_minute.push(n as f64 / flows as f64);
    }
    let per_minute = sorted(per_minute);
    let rss = sorted(rss);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    // Every controller that exited because it could not renew or lost the lease says so.
    let lease_losses: usize = std::fs::read_dir(&scratch.path)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|log| log.matches("lost leadership").count())
        .sum();

    println!(
        "controller bench: {flows} flows × {workers} workers (heartbeats simulated every {}s), real kube-apiserver, steady window {:.0} s",
        HEARTBEAT.as_secs(),
        wall
    );
    println!("host load (/proc/loadavg) at the end: {}", load.trim());
    let row = |k: &str, v: String| println!("{k:<62} {v:>14}");
    row("create flows (s)", format!("{:.1}", created.as_secs_f64()));
    row(
        "create → every flow Ready with all workers (s)",
        format!("{:.1}", converged.as_secs_f64()),
    );
    row(
        "flows still Ready at the end",
        format!("{still_ready}/{flows}"),
    );
    row(
        "controller restarts: before / during the window",
        format!("{restarts_before} / {}", restarts - restarts_before),
    );
    row(
        "lease losses (\"lost leadership\" in the controller logs)",
        lease_losses.to_string(),
    );
    row(
        "simulated worker applies: done / failed",
        format!("{applies} / {failed}"),
    );
    row(
        "controller requests in the window (no watches, no leases)",
        calls.to_string(),
    );
    row("  lease requests (leader election)", lease.to_string());
    for (k, n) in &by {
        row(&format!("  {k}"), n.to_string());
    }
    row(
        &format!(
            "calls per flow per minute, per whole minute ({}): median",
            per_minute.len()
        ),
        format!("{:.2}", percentile(&per_minute, 0.5)),
    );
    row(
        "  range",
        format!(
            "{:.2}-{:.2}",
            percentile(&per_minute, 0.0),
            percentile(&per_minute, 1.0)
        ),
    );
    row(
        &format!("controller RSS, {} samples: median (MiB)", rss.len()),
        format!("{:.1}", percentile(&rss, 0.5)),
    );
    row(
        "  range (MiB)",
        format!("{:.1}-{:.1}", percentile(&rss, 0.0), percentile(&rss, 1.0)),
    );
    row(
        "controller peak RSS since start, VmHWM (MiB)",
        format!("{hwm:.1}"),
    );
    row(
        "  at the end: heap (RssAnon) / file-backed (RssFile) (MiB)",
        format!("{:.1} / {:.1}", split[0], split[1]),
    );
    row(
        "  at the end: threads",
        threads.map_or("?".to_string(), |t| t.to_string()),
    );
    row(
        "controller CPU in the window (% of one core)",
        format!("{:.1}", 100.0 * cpu / wall),
    );
    println!();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    println!(
        "{:<62} {:>14} {:>8} {:>6}",
        "target", "measured", "target", ""
    );
    println!(
        "{:<62} {:>14} {:>8} {:>6}",
        "controller RSS, steady state, max sample (MiB)",
        format!("{:.1}", percentile(&rss, 1.0)),
        "≤ 48",
        verdict(percentile(&rss, 1.0) <= 48.0)
    );
    println!(
        "{:<62} {:>14} {:>8} {:>6}",
        "controller peak RSS incl. start-up, VmHWM (MiB)",
        format!("{hwm:.1}"),
        "≤ 48",
        verdict(hwm <= 48.0)
    );
    println!(
        "{:<62} {:>14} {:>8} {:>6}",
        "API calls per flow per minute, steady state",
        format!("{per_flow_minute:.2}"),
        "≤ 10",
        verdict(per_flow_minute <= 10.0)
    );
}
