//! Checkpoint bench: latency from a group commit on the source to the translated offset
//! committed on the target, cycle time, CPU and RPO, for many groups on real brokers (two
//! nisshi processes). Prints a table.
//!
//! `cargo bench --bench checkpoints` (defaults: 1000 groups × 10 partitions, interval 5 s).
//! Environment: `BENCH_GROUPS`, `BENCH_PARTITIONS`, `BENCH_INTERVAL_SECONDS`,
//! `BENCH_ROUNDS`, `BENCH_IDLE_SECONDS`.
//!
//! The replication engine is simulated as in `tests/checkpoints.rs`: identical records on
//! both sides and sequenced offset syncs every 50 records, so every translation is exact and
//! the expected target offset equals the source offset.

#[path = "common/procfs.rs"]
mod procfs;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use mirrorflow::api::parse_flow_file;
use mirrorflow::kafka::admin::{GroupAdmin, GroupOffset};
use mirrorflow::testkit::brokers::{create_topic, produce, BrokerKind, LocalBroker, ProduceRecord};
use mirrorflow::worker::checkpoint::runner::{statuses, CheckpointRunner};
use mirrorflow::worker::checkpoint::status::RunnerState;
use prometheus::Registry;
use rdkafka::ClientConfig;
use tokio::sync::{oneshot, watch};

const RECORDS: i64 = 400;
const LAG_MAX: i64 = 50;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn admin(bootstrap: &str) -> GroupAdmin {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    GroupAdmin::new(&c, bootstrap, Duration::from_secs(60)).expect("admin client")
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Offset of group `g` on partition `p` in round `r` (deterministic, within the
/// replicated range, moving forward each round).
fn offset(g: usize, p: i32, r: usize) -> i64 {
    let base = ((g * 7 + p as usize * 13) % 150) as i64;
    (base + 60 * r as i64).min(RECORDS)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// Commits round `r`'s offsets for every group on `bootstrap` (topic `topic`).
async fn commit_round(bootstrap: &str, topic: &str, groups: &[String], partitions: i32, r: usize) {
    let a = admin(bootstrap);
    let commits: Vec<(String, Vec<GroupOffset>)> = groups
        .iter()
        .enumerate()
        .map(|(g, name)| {
            let offsets = (0..partitions)
                .map(|p| GroupOffset {
                    topic: topic.to_string(),
                    partition: p,
                    offset: offset(g, p, r),
                    metadata: String::new(),
                })
                .collect();
            (name.clone(), offsets)
        })
        .collect();
    let results = blocking(move || a.alter_offsets(&commits)).await;
    let failed = results.iter().filter(|r| r.is_err()).count();
    assert_eq!(
        failed,
        0,
        "source commits failed: {:?}",
        results.iter().find(|r| r.is_err())
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n_groups = env("BENCH_GROUPS", 1000) as usize;
    let partitions = env("BENCH_PARTITIONS", 10) as i32;
    let interval = env("BENCH_INTERVAL_SECONDS", 5);
    let rounds = env("BENCH_ROUNDS", 5) as usize;
    let idle_secs = env("BENCH_IDLE_SECONDS", 30);

    let source = match LocalBroker::start(BrokerKind::Nisshi).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIPPED checkpoints bench: {e}");
            return;
        }
    };
    let target = LocalBroker::start(BrokerKind::Nisshi)
        .await
        .expect("target broker");
    let (src, dst) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = "bench";
    let target_topic = "src.bench";
    let syncs_topic = "mm2-offset-syncs.src.internal";

    // Set-up: records on both sides, sequenced syncs, groups on the source.
    let setup = Instant::now();
    create_topic(&src, topic, partitions, &[]).await.unwrap();
    create_topic(&dst, target_topic, partitions, &[])
        .await
        .unwrap();
    create_topic(&dst, syncs_topic, 1, &[]).await.unwrap();
    let mut syncs = Vec::new();
    for p in 0..partitions {
        let records: Vec<ProduceRecord> = (0..RECORDS)
            .map(|i| ProduceRecord::new(format!("k{i}"), vec![0u8; 100]).partition(p))
            .collect();
        produce(&src, topic, &records).await.unwrap();
        produce(&dst, target_topic, &records).await.unwrap();
        let mut points: Vec<i64> = (0..RECORDS).step_by(LAG_MAX as usize).collect();
        points.push(RECORDS - 1);
        for (seq, u) in points.into_iter().enumerate() {
            let mut key = (topic.len() as i16).to_be_bytes().to_vec();
            key.extend_from_slice(topic.as_bytes());
            key.extend_from_slice(&p.to_be_bytes());
            let mut val = u.to_be_bytes().to_vec();
            val.extend_from_slice(&u.to_be_bytes());
            let mut h = 1i64.to_be_bytes().to_vec();
            h.extend_from_slice(&(seq as i64).to_be_bytes());
            syncs.push(
                ProduceRecord::new(key, val)
                    .partition(0)
                    .header("mirrorflow.sync.seq", Some(&h)),
            );
        }
    }
    produce(&dst, syncs_topic, &syncs).await.unwrap();
    let groups: Vec<String> = (0..n_groups).map(|g| format!("bench-{g:04}")).collect();
    let commits_started = Instant::now();
    commit_round(&src, topic, &groups, partitions, 0).await;
    let commit_time = commits_started.elapsed();
    let setup_time = setup.elapsed();

    let yaml = format!(
        r#"apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: bench}}
spec:
  source: {{alias: src, bootstrapServers: "{src}"}}
  target: {{alias: dst, bootstrapServers: "{dst}"}}
  delivery: AtLeastOnce
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: cp}}
spec:
  flowRef: {{name: bench}}
  groups: {{include: ["bench-.*"], refreshIntervalSeconds: 30}}
  intervalSeconds: {interval}
"#
    );
    let file = parse_flow_file(&yaml).expect("bench flow");
    let registry = Registry::new();
    let dir = tempfile::tempdir().unwrap();
    let runner = CheckpointRunner::new(&file.flow, file.checkpoints.clone(), dir.path(), &registry)
        .expect("runner");
    let state: watch::Receiver<RunnerState> = runner.state();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let started = Instant::now();
    let task = tokio::spawn(runner.run(async move {
        let _ = stop_rx.await;
    }));

    // Expected target offsets: identity replication with exact translations.
    let target_admin = std::sync::Arc::new(admin(&dst));
    let wait_round = |r: usize, t0: Instant| {
        let groups = groups.clone();
        let target_admin = target_admin.clone();
        async move {
            let mut latency: HashMap<usize, f64> = HashMap::new();
            let deadline = t0 + Duration::from_secs(interval * 6 + 120);
            while latency.len() < groups.len() {
                assert!(
                    Instant::now() < deadline,
                    "round {r}: only {} groups synced",
                    latency.len()
                );
                let pending: Vec<usize> = (0..groups.len())
                    .filter(|g| !latency.contains_key(g))
                    .collect();
                let names: Vec<String> = pending.iter().map(|g| groups[*g].clone()).collect();
                let a = target_admin.clone();
                let answers = blocking(move || a.list_offsets(&names)).await;
                let seen = t0.elapsed().as_secs_f64();
                for (g, answer) in pending.into_iter().zip(answers) {
                    let Ok(offsets) = answer else { continue };
                    let at: BTreeMap<i32, i64> = offsets
                        .into_iter()
                        .map(|o| (o.partition, o.offset))
                        .collect();
                    if (0..partitions).all(|p| at.get(&p) == Some(&offset(g, p, r))) {
                        latency.insert(g, seen);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut v: Vec<f64> = latency.into_values().collect();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v
        }
    };
    let first = wait_round(0, started).await;
    let first_sync = first.last().copied().unwrap_or(f64::NAN);
    let first_cycle = state
        .borrow()
        .specs
        .get("cp")
        .and_then(|s| s.last_cycle_duration);

    // Steady state: nothing moves; CPU and RPO over an idle window.
    let brokers = procfs::children(None);
    let me = std::process::id();
    let cpu0 = procfs::cpu_of(&[me]);
    let bcpu0 = procfs::cpu_of(&brokers);
    let idle_start = Instant::now();
    let mut max_rpo = 0i64;
    let mut cycle_times = Vec::new();
    let mut last_cycles = state.borrow().specs.get("cp").map_or(0, |s| s.cycles);
    while idle_start.elapsed() < Duration::from_secs(idle_secs) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let s = state.borrow().clone();
        let st = statuses(&s, &file.checkpoints, jiff::Timestamp::now());
        if let Some(age) = st[0].1.oldest_checkpoint_age_seconds {
            max_rpo = max_rpo.max(age);
        }
        let spec = &s.specs["cp"];
        if spec.cycles > last_cycles {
            last_cycles = spec.cycles;
            if let Some(d) = spec.last_cycle_duration {
                cycle_times.push(d.as_secs_f64());
            }
        }
    }
    let idle_wall = idle_start.elapsed().as_secs_f64();
    let cpu_idle = procfs::cpu_of(&[me]) - cpu0;
    let bcpu_idle = procfs::cpu_of(&brokers) - bcpu0;

    // Latency rounds: every group commits new offsets on the source at t0.
    let mut all = Vec::new();
    let mut per_round = Vec::new();
    let cpu1 = procfs::cpu_of(&[me]);
    let rounds_start = Instant::now();
    for r in 1..=rounds {
        // A round ends right after a cycle; waiting (r-1)/rounds of an interval spreads the
        // commit moment evenly over the cycle phase.
        let phase = interval * 1000 * (r as u64 - 1) / rounds as u64;
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let t0 = Instant::now();
        commit_round(&src, topic, &groups, partitions, r).await;
        let mut v = wait_round(r, t0).await;
        per_round.push(format!("{:.1}-{:.1}", v[0], v[v.len() - 1]));
        all.append(&mut v);
    }
    let busy_wall = rounds_start.elapsed().as_secs_f64();
    let cpu_busy = procfs::cpu_of(&[me]) - cpu1;
    all.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let s = state.borrow().clone();
    let spec = &s.specs["cp"];
    let final_status = statuses(&s, &file.checkpoints, jiff::Timestamp::now());
    let _ = stop_tx.send(());
    task.await.unwrap().unwrap();
    cycle_times.sort_by(|a, b| a.partial_cmp(b).unwrap());

    println!("checkpoint bench: {n_groups} groups × {partitions} partitions, intervalSeconds {interval}, nisshi source + target");
    println!("{:<58} {:>12}", "measure", "value");
    let row = |k: &str, v: String| println!("{k:<58} {v:>12}");
    row(
        "set-up: records, syncs, source commits (s)",
        format!("{:.1}", setup_time.as_secs_f64()),
    );
    row(
        "  of which: commit all groups on the source (s)",
        format!("{:.2}", commit_time.as_secs_f64()),
    );
    row(
        "start-up → all groups synced on the target (s)",
        format!("{first_sync:.2}"),
    );
    row(
        "first cycle (all groups new) (s)",
        first_cycle.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64())),
    );
    row(
        "steady cycle, nothing moved: median (s)",
        format!("{:.2}", percentile(&cycle_times, 0.5)),
    );
    row(
        "steady cycle, nothing moved: max (s)",
        format!("{:.2}", percentile(&cycle_times, 1.0)),
    );
    row(
        &format!(
            "latency source commit → target commit, {} samples: p50 (s)",
            all.len()
        ),
        format!("{:.2}", percentile(&all, 0.5)),
    );
    row("  p95 (s)", format!("{:.2}", percentile(&all, 0.95)));
    row("  max (s)", format!("{:.2}", percentile(&all, 1.0)));
    row("  per round min-max (s)", per_round.join(" "));
    row(
        "RPO: max oldestCheckpointAgeSeconds while idle (s)",
        max_rpo.to_string(),
    );
    row("RPO target: 2 × interval (s)", (2 * interval).to_string());
    row(
        "runner process CPU while idle (% of one core)",
        format!("{:.1}", 100.0 * cpu_idle / idle_wall),
    );
    row(
        "brokers CPU while idle (% of one core, both)",
        format!("{:.1}", 100.0 * bcpu_idle / idle_wall),
    );
    row(
        "runner process CPU during latency rounds (% of one core)",
        format!("{:.1}", 100.0 * cpu_busy / busy_wall),
    );
    row("cycles run", spec.cycles.to_string());
    row("checkpoints in force", s.checkpoints_in_force.to_string());
    row(
        "offset-sync partitions / syncs retained",
        format!("{} / {}", s.sync_partitions, s.syncs_retained),
    );
    let rss = procfs::status_kib(std::process::id(), "VmRSS").map_or(0.0, procfs::mib);
    row("process RSS (MiB)", format!("{rss:.0}"));
    let ready = final_status[0]
        .1
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!("{}/{}", c.status, c.reason));
    row("final Ready condition", ready.unwrap_or_default());
    println!("note: CPU of the bench's own polling of the target (1 OffsetFetch per pending group every ~100 ms) is included in the latency-round figure, not in the idle one.");
}
