//! Checkpoint bench: latency from a group commit on the source to the translated offset
//! committed on the target, cycle time, CPU and RPO, for many groups on real brokers (two
//! Apache Kafka nodes). Prints a table; then MirrorMaker 2's `MirrorCheckpointConnector` on
//! the same groups at the same interval, side by side with PASS/MISS against issue #50's goal
//! (RPO ≤ MM2's at ≤ 1/3 of its CPU; see `benches/checkpoints/mm2.rs`).
//!
//! `cargo bench --bench checkpoints` (defaults: 10,000 groups × 10 partitions, interval 5 s).
//! Environment: `BENCH_GROUPS`, `BENCH_PARTITIONS`, `BENCH_INTERVAL_SECONDS`,
//! `BENCH_ROUNDS`, `BENCH_IDLE_SECONDS`, `BENCH_MM2` (`0`: without MirrorMaker 2); `MIRRORFLOW_DIRECT_GROUP_CALLS=0` makes the runner
//! read and commit group offsets one group per request (librdkafka), as before batching.
//!
//! Targets (issue #19): RPO (source commit → translated offset on the target) ≤ 2 ×
//! `intervalSeconds`, and the runner ≤ 10 % of one core. The runner's CPU is the process's
//! minus what the bench's own threads spend committing and polling (`/proc/thread-self`);
//! the bench's clients always batch.
//!
//! The replication engine is simulated as in `tests/checkpoints.rs`: identical records on
//! both sides and sequenced offset syncs every 50 records, so every translation is exact and
//! the expected target offset equals the source offset.

#[path = "checkpoints/mm2.rs"]
mod mm2;
#[path = "common/procfs.rs"]
mod procfs;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use mirrorflow::api::parse_flow_file;
use mirrorflow::kafka::admin::{GroupAdmin, GroupOffset};
use mirrorflow::kafka::tail::TopicTail;
use mirrorflow::kafka::wire;
use mirrorflow::testkit::brokers::{create_topic, produce, BrokerKind, LocalBroker, ProduceRecord};
use mirrorflow::worker::checkpoint::runner::{statuses, CheckpointRunner};
use mirrorflow::worker::checkpoint::status::RunnerState;
use prometheus::Registry;
use rdkafka::{ClientConfig, Message as _};
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
    GroupAdmin::with_batching(&c, bootstrap, Duration::from_secs(60), true).expect("admin client")
}

/// Runs `f` on the blocking pool and returns its result with the CPU seconds its thread
/// spent (the bench's own work, taken out of the runner's figure).
async fn measured<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> (T, f64) {
    blocking(move || {
        let c0 = procfs::thread_cpu();
        let r = f();
        (r, procfs::thread_cpu() - c0)
    })
    .await
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
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

/// Groups per source commit call in a round: each group's sample starts when its call was
/// sent, not when the round began (a round's commits take seconds).
const COMMIT_CHUNK: usize = 500;

/// Groups per call of the bench's polls of the target groups.
const POLL_CHUNK: usize = 500;

/// Commits round `r`'s offsets for every group on `bootstrap` (topic `topic`), in calls of
/// [`COMMIT_CHUNK`] groups; returns the bench's CPU seconds for it and, per group, when its
/// call was sent (seconds after `t0`): the earliest its commit can have taken effect, so a
/// sample measured from it is an upper bound, by at most one call's duration.
async fn commit_round(
    bootstrap: &str,
    topic: &str,
    groups: &[String],
    partitions: i32,
    r: usize,
    t0: Instant,
) -> (f64, Vec<f64>) {
    let a = std::sync::Arc::new(admin(bootstrap));
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
    let mut cpu = 0.0;
    let mut sent = Vec::with_capacity(groups.len());
    for chunk in commits.chunks(COMMIT_CHUNK) {
        let chunk = chunk.to_vec();
        let at = t0.elapsed().as_secs_f64();
        sent.extend(std::iter::repeat_n(at, chunk.len()));
        let a = a.clone();
        let (results, c) = measured(move || a.alter_offsets(&chunk)).await;
        cpu += c;
        let failed = results.iter().filter(|r| r.is_err()).count();
        assert_eq!(
            failed,
            0,
            "source commits failed: {:?}",
            results.iter().find(|r| r.is_err())
        );
    }
    (cpu, sent)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(bench());
    // A runtime dropped normally waits for every blocking task. The runner's stop drops a
    // cycle or group sync mid-call, whose blocking task then ends after the brokers are gone;
    // one that owns a consumer with a group.id (the offset-syncs tail) loops in its drop
    // until librdkafka reports it closed (rdkafka 0.39 `BaseConsumer::drop`, unbounded).
    // So the process could hang after its table; wait a bounded time instead.
    rt.shutdown_timeout(Duration::from_secs(5));
}

async fn bench() {
    // `RUST_LOG=mirrorflow::worker::checkpoint=debug` shows each cycle's steps and times.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let n_groups = env("BENCH_GROUPS", 10_000) as usize;
    let partitions = env("BENCH_PARTITIONS", 10) as i32;
    let interval = env("BENCH_INTERVAL_SECONDS", 5);
    let rounds = env("BENCH_ROUNDS", 5) as usize;
    let idle_secs = env("BENCH_IDLE_SECONDS", 30);

    let source = match LocalBroker::start(BrokerKind::Kafka).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIPPED checkpoints bench: {e}");
            return;
        }
    };
    let target = LocalBroker::start(BrokerKind::Kafka)
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
    let groups: Vec<String> = (0..n_groups).map(|g| format!("bench-{g:05}")).collect();
    let commits_started = Instant::now();
    commit_round(&src, topic, &groups, partitions, 0, commits_started).await;
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
    // The checkpoints as written: the target's checkpoints topic, read as it grows; the latest
    // upstream offset per (group, partition).
    let mut tail_config = ClientConfig::new();
    tail_config.set("bootstrap.servers", &dst);
    let tail = TopicTail::new(&tail_config, "src.checkpoints.internal", "bench").expect("tail");
    /// Per (group, partition): the latest checkpoint's upstream offset and record timestamp.
    type Written = (TopicTail, HashMap<(String, i32), (i64, i64)>);
    let written: std::sync::Arc<std::sync::Mutex<Written>> =
        std::sync::Arc::new(std::sync::Mutex::new((tail, HashMap::new())));
    // Per round: when each group's checkpoints (all partitions) were written, and when its
    // translated offsets were committed to the target group; sorted, with the bench's CPU.
    let wait_round = |r: usize, t0: Instant| {
        let groups = std::sync::Arc::new(groups.clone());
        let target_admin = target_admin.clone();
        let written = written.clone();
        async move {
            let deadline = t0 + Duration::from_secs(interval * 6 + 120);
            // Two loops at their own pace: the checkpoints' catch-up (seconds over 100,000
            // records) must not hold up the target polls, whose return time is the sample.
            let checkpoints = async {
                let mut checkpointed: HashMap<usize, f64> = HashMap::new();
                let mut cpu_sum = 0.0;
                while checkpointed.len() < groups.len() {
                    assert!(
                        Instant::now() < deadline,
                        "round {r}: only {} groups checkpointed",
                        checkpointed.len()
                    );
                    let w = written.clone();
                    let groups = groups.clone();
                    let (seen_at, cpu) = measured(move || {
                        let mut guard = w.lock().unwrap();
                        let (tail, latest) = &mut *guard;
                        let _ = tail.catch_up(Duration::from_secs(30), |m| {
                            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                                if let Ok(c) = wire::Checkpoint::decode(k, v) {
                                    let ts = m.timestamp().to_millis().unwrap_or(0);
                                    latest.insert((c.group, c.partition), (c.upstream_offset, ts));
                                }
                            }
                        });
                        // When a group's last partition was written: its checkpoint records'
                        // timestamps (the runner's clock, the bench's host), not when this
                        // loop saw them (a catch-up over 100,000 records takes seconds).
                        let t0_ms = jiff::Timestamp::now().as_millisecond()
                            - t0.elapsed().as_millis() as i64;
                        let done: Vec<(usize, f64)> = (0..groups.len())
                            .filter_map(|g| {
                                (0..partitions)
                                    .map(|p| match latest.get(&(groups[g].clone(), p)) {
                                        Some((o, ts)) if *o == offset(g, p, r) => Some(*ts),
                                        _ => None,
                                    })
                                    .collect::<Option<Vec<i64>>>()
                                    .map(|ts| {
                                        let last = ts.into_iter().max().unwrap_or(t0_ms);
                                        (g, (last - t0_ms).max(0) as f64 / 1000.0)
                                    })
                            })
                            .collect();
                        done
                    })
                    .await;
                    cpu_sum += cpu;
                    for (g, at) in seen_at {
                        checkpointed.entry(g).or_insert(at);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                (checkpointed, cpu_sum)
            };
            let synced = async {
                let mut latency: HashMap<usize, f64> = HashMap::new();
                let mut cpu_sum = 0.0;
                let mut calls = Vec::new();
                while latency.len() < groups.len() {
                    assert!(
                        Instant::now() < deadline,
                        "round {r}: only {} groups synced",
                        latency.len()
                    );
                    let pending: Vec<usize> = (0..groups.len())
                        .filter(|g| !latency.contains_key(g))
                        .collect();
                    // In calls of POLL_CHUNK groups, each stamped when it returns: a stamp
                    // at the end of a pass over every group would add the rest of the pass
                    // to the samples read first. A sample is late by at most its call.
                    for chunk in pending.chunks(POLL_CHUNK) {
                        let names: Vec<String> = chunk.iter().map(|g| groups[*g].clone()).collect();
                        let a = target_admin.clone();
                        let sent = t0.elapsed().as_secs_f64();
                        let (answers, cpu) = measured(move || a.list_offsets(&names)).await;
                        cpu_sum += cpu;
                        let seen = t0.elapsed().as_secs_f64();
                        calls.push(seen - sent);
                        for (&g, answer) in chunk.iter().zip(answers) {
                            let Ok(offsets) = answer else { continue };
                            let at: BTreeMap<i32, i64> = offsets
                                .into_iter()
                                .map(|o| (o.partition, o.offset))
                                .collect();
                            if (0..partitions).all(|p| at.get(&p) == Some(&offset(g, p, r))) {
                                latency.insert(g, seen);
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                (latency, cpu_sum, calls)
            };
            let ((checkpointed, c1), (latency, c2, calls)) = tokio::join!(checkpoints, synced);
            (latency, checkpointed, c1 + c2, calls)
        }
    };
    let (first, _, _, _) = wait_round(0, started).await;
    let first_sync = first.into_values().fold(f64::NAN, f64::max);
    let first_cycle = state
        .borrow()
        .specs
        .get("cp")
        .and_then(|s| s.last_cycle_duration);

    // Steady state: nothing moves; CPU and RPO over an idle window.
    let brokers: Vec<u32> = [&source, &target]
        .iter()
        .filter_map(|b| b.kafka()?.node_pid(1))
        .collect();
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
    let mut round_max = Vec::new();
    let mut all_cp = Vec::new();
    let mut per_round_cp = Vec::new();
    let mut round_max_cp = Vec::new();
    let mut per_round_start = Vec::new();
    let mut round_max_start = Vec::new();
    let mut per_round_cp_start = Vec::new();
    let mut round_max_cp_start = Vec::new();
    let mut bench_cpu = 0.0;
    let mut commit_secs = Vec::new();
    let mut poll_calls = Vec::new();
    let cpu1 = procfs::cpu_of(&[me]);
    let rounds_start = Instant::now();
    for r in 1..=rounds {
        // A round ends right after a cycle; waiting (r-1)/rounds of an interval spreads the
        // commit moment evenly over the cycle phase.
        let phase = interval * 1000 * (r as u64 - 1) / rounds as u64;
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let t0 = Instant::now();
        let (cpu, sent) = commit_round(&src, topic, &groups, partitions, r, t0).await;
        bench_cpu += cpu;
        commit_secs.push(t0.elapsed().as_secs_f64());
        let (synced_at, written_at, cpu, mut calls) = wait_round(r, t0).await;
        bench_cpu += cpu;
        poll_calls.append(&mut calls);
        // Per group, from its own commit (RPO) and from the round's start (as before).
        let since_commit = |m: &HashMap<usize, f64>| -> Vec<f64> {
            sorted(m.iter().map(|(g, at)| at - sent[*g]).collect())
        };
        let since_round =
            |m: &HashMap<usize, f64>| -> Vec<f64> { sorted(m.values().copied().collect()) };
        for (m, per, max, all, per_r, max_r) in [
            (
                &written_at,
                &mut per_round_cp,
                &mut round_max_cp,
                &mut all_cp,
                &mut per_round_cp_start,
                &mut round_max_cp_start,
            ),
            (
                &synced_at,
                &mut per_round,
                &mut round_max,
                &mut all,
                &mut per_round_start,
                &mut round_max_start,
            ),
        ] {
            let mut v = since_commit(m);
            per.push(format!("{:.1}-{:.1}", v[0], v[v.len() - 1]));
            max.push(v[v.len() - 1]);
            all.append(&mut v);
            let v = since_round(m);
            per_r.push(format!("{:.1}-{:.1}", v[0], v[v.len() - 1]));
            max_r.push(v[v.len() - 1]);
        }
    }
    let busy_wall = rounds_start.elapsed().as_secs_f64();
    let cpu_busy = procfs::cpu_of(&[me]) - cpu1 - bench_cpu;
    commit_secs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let round_max = sorted(round_max);
    let round_max_cp = sorted(round_max_cp);
    let round_max_start = sorted(round_max_start);
    let round_max_cp_start = sorted(round_max_cp_start);
    let all_cp = sorted(all_cp);
    let all = sorted(all);
    let s = state.borrow().clone();
    let spec = &s.specs["cp"];
    let final_status = statuses(&s, &file.checkpoints, jiff::Timestamp::now());
    let superseded = mirrorflow::telemetry::metrics::encode_registry(&registry)
        .lines()
        .find(|l| l.starts_with("mirrorflow_checkpoint_group_syncs_superseded_total"))
        .and_then(|l| l.rsplit(' ').next().map(str::to_string))
        .unwrap_or_default();
    let _ = stop_tx.send(());
    task.await.unwrap().unwrap();
    cycle_times.sort_by(|a, b| a.partial_cmp(b).unwrap());

    let batching = std::env::var(mirrorflow::kafka::admin::DIRECT_GROUP_CALLS_ENV)
        .map_or(true, |v| v.trim() != "0");
    println!(
        "checkpoint bench: {n_groups} groups × {partitions} partitions, intervalSeconds {interval}, {rounds} rounds, Apache Kafka source + target, runner group calls: {}",
        if batching { "batched (OffsetFetch v8, pipelined OffsetCommit)" } else { "one group per request (librdkafka)" }
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("host load (/proc/loadavg) at the end: {}", load.trim());
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
            "RPO: group's commit → checkpoint written, {} samples: p50 (s)",
            all_cp.len()
        ),
        format!("{:.2}", percentile(&all_cp, 0.5)),
    );
    row("  p95 (s)", format!("{:.2}", percentile(&all_cp, 0.95)));
    row("  max (s)", format!("{:.2}", percentile(&all_cp, 1.0)));
    row("  per round min-max (s)", per_round_cp.join(" "));
    row(
        "  from the round's start instead: per round min-max (s)",
        per_round_cp_start.join(" "),
    );
    row(
        &format!(
            "RPO: group's commit → target group committed, {} samples: p50 (s)",
            all.len()
        ),
        format!("{:.2}", percentile(&all, 0.5)),
    );
    row("  p95 (s)", format!("{:.2}", percentile(&all, 0.95)));
    row("  max (s)", format!("{:.2}", percentile(&all, 1.0)));
    row("  per round min-max (s)", per_round.join(" "));
    row(
        "  from the round's start instead: per round min-max (s)",
        per_round_start.join(" "),
    );
    let poll_calls = sorted(poll_calls);
    row(
        &format!("  resolution: the bench's poll calls ({POLL_CHUNK} groups) p50 / max (s)"),
        format!(
            "{:.2} / {:.2}",
            percentile(&poll_calls, 0.5),
            percentile(&poll_calls, 1.0)
        ),
    );
    row(
        "group syncs run / cycle plans superseded",
        format!("{} / {}", spec.group_syncs, superseded),
    );
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
        "runner CPU during latency rounds (% of one core)",
        format!("{:.1}", 100.0 * cpu_busy / busy_wall),
    );
    row(
        "  bench's own commits and polling, taken out (% of one core)",
        format!("{:.1}", 100.0 * bench_cpu / busy_wall),
    );
    row(
        "source commit of all groups per round: median (s)",
        format!("{:.2}", percentile(&commit_secs, 0.5)),
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
    println!();
    let verdict = |ok: bool| if ok { "PASS" } else { "MISS" };
    let rpo = percentile(&all_cp, 1.0);
    let rpo_target = 2.0 * interval as f64;
    let cpu_idle_pct = 100.0 * cpu_idle / idle_wall;
    let cpu_busy_pct = 100.0 * cpu_busy / busy_wall;
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "target", "measured", "target", ""
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "RPO: commit → checkpoint written, median of round maxima (s)",
        format!("{:.2}", percentile(&round_max_cp, 0.5)),
        format!("≤ {rpo_target:.0}"),
        verdict(percentile(&round_max_cp, 0.5) <= rpo_target)
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "RPO: commit → checkpoint written, worst sample (s)",
        format!("{rpo:.2}"),
        format!("≤ {rpo_target:.0}"),
        verdict(rpo <= rpo_target)
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "RPO: commit → target group committed, median of maxima (s)",
        format!("{:.2}", percentile(&round_max, 0.5)),
        format!("≤ {rpo_target:.0}"),
        verdict(percentile(&round_max, 0.5) <= rpo_target)
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "RPO: commit → target group committed, worst sample (s)",
        format!("{:.2}", percentile(&all, 1.0)),
        format!("≤ {rpo_target:.0}"),
        verdict(percentile(&all, 1.0) <= rpo_target)
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "(info) as before: from the round's start, median of maxima (s)",
        format!(
            "{:.2} / {:.2}",
            percentile(&round_max_cp_start, 0.5),
            percentile(&round_max_start, 0.5)
        ),
        "-",
        ""
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "runner CPU, nothing moving (% of one core)",
        format!("{cpu_idle_pct:.1}"),
        "≤ 10",
        verdict(cpu_idle_pct <= 10.0)
    );
    println!(
        "{:<58} {:>12} {:>8} {:>6}",
        "runner CPU, every group moving each round (% of one core)",
        format!("{cpu_busy_pct:.1}"),
        "≤ 10",
        verdict(cpu_busy_pct <= 10.0)
    );
    // MirrorMaker 2 on the same groups and interval, after mirrorflow's runner stopped.
    if env("BENCH_MM2", 1) != 0 {
        let figures = mm2::run(&src, &dst, &groups, partitions, interval, rounds, idle_secs).await;
        mm2::print(
            percentile(&all_cp, 0.5),
            percentile(&all_cp, 1.0),
            percentile(&round_max_cp, 0.5),
            cpu_busy_pct,
            cpu_idle_pct,
            &figures,
        );
    }
}
