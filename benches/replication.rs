//! Replication bench: mirrorflow beside Apache Kafka's MirrorMaker 2 and a bare rdkafka
//! consume→produce loop (the ceiling), with a `kcat -C … | kcat -P …` pipe for reference, on
//! the same two local Apache Kafka nodes and the same records in one run. Throughput (MB/s),
//! CPU seconds per GB, peak RSS and start to first record for 100 B, 1 KB, 1 KB lz4 and 10 KB
//! records; a scale curve (1 KB records over 1, 100 and 1,000 partitions); end-to-end latency
//! at a fixed offered rate (`latency`); time to resume after SIGKILL (`resume`); then peak
//! RSS of a worker owning 1,000 partitions and the cost of a topic refresh behind 20 ms of
//! added round trip (`refresh`, below). Prints a side-by-side table per scenario and the
//! goals of issue #50 as ratios of the same run with PASS/MISS (against MM2 with `tasks.max`
//! 1, the worker count): MB per CPU s ≥ 3×, throughput ≥ 2×, peak RSS ≤ 1/5, p99 latency ≤,
//! start to first record ≤ 1/3 of MM2's; and the remaining targets of issue #19 (peak RSS at
//! 1,000 partitions ≤ window + 32 MiB, idle worker reading a long offset-syncs history ≤ 32
//! MiB, no pause of replication during a topic refresh). The bare loop and kcat are
//! references. No assertion depends on timing: a missed goal is reported.
//!
//! `cargo bench --bench replication`
//!
//! # How each contender runs (all as child processes, so CPU and RSS are per contender)
//! - **mirrorflow**: the real binary, `mirrorflow worker --flow FILE --listen 127.0.0.1:PORT`
//!   (`CARGO_BIN_EXE_mirrorflow`, built by `cargo bench` itself; `MIRRORFLOW_BIN` overrides).
//!   `delivery: AtLeastOnce` (like the other two), offset validation on, offset syncs
//!   every 100 records (`offsetSyncs.lagMax: 100`, MM2's default). The worker creates its
//!   target topic, internal topics, and reads progress: that is its start-up. Each worker run
//!   has its own flow name and source alias, so it starts with empty progress and offset-syncs
//!   topics whatever ran before it.
//! - **bare loop**: this bench binary re-run with `MIRRORFLOW_BENCH_ROLE=bare`: a
//!   `BaseConsumer` (assign, no group) polled one record at a time into a `BaseProducer`,
//!   with the engine's consumer settings (prefetch bounds from `Tuning::default()`) and the
//!   engine's producer settings (`writer::producer_properties` and `PRODUCER_TUNING`:
//!   idempotent, gapless, `acks=all`, `linger.ms=5`, same queue bounds; no statistics),
//!   until every record is acknowledged. It keeps partition, key, value, headers and
//!   timestamp, like the engine.
//! - **kcat pipe**: Debian's `kcat` (1.7.1) as `kcat -C -o beginning -e -f '%k\t%s\n' |
//!   kcat -P -K '\t'` with the same producer durability settings (`acks=all`, idempotence,
//!   `linger.ms=5`), consumer at kcat's defaults. It copies key and value only; the target
//!   partition comes from the key hash; headers and timestamps are lost (less work than the
//!   others). kcat runs with `LD_LIBRARY_PATH` pointing at a `librdkafka.so.1` linked here
//!   from the `librdkafka.a` (2.12.1) that rdkafka-sys built for this crate — the same
//!   librdkafka as the other two contenders (Debian's is 2.0.2). `MIRRORFLOW_BENCH_KCAT_LIBDIR` overrides the
//!   directory; without a usable library the kcat rows are reported as not run.
//!
//! - **MirrorMaker 2**: `org.apache.kafka.connect.mirror.MirrorMaker` (dedicated mode, the
//!   jars of `scripts/setup-kafka.sh`) from the testkit's typed config, with `tasks.max` 1
//!   and 2 (`MIRRORFLOW_BENCH_CONTENDERS`), its defaults (2 GiB heap as
//!   `connect-mirror-maker.sh`, Connect's producer: `acks=all`, offset syncs every 100
//!   records on the source, checkpoints every 60 s, heartbeats every second) except what
//!   makes the comparison fair: the same single topic, lz4 on the target's producer in the
//!   compressed scenario, no heartbeat flow back from the target (a second Connect worker
//!   mirrorflow has no counterpart of). Each run has its own cluster aliases (so empty
//!   Connect offsets and syncs) and its internal topics are deleted after it. Its CPU and RSS
//!   are the JVM's, from /proc. The worker runs with an OffsetCheckpoint in these rounds, as
//!   MM2 checkpoints.
//!
//! # What is measured
//! Each contender copies the same source topic (produced once per record size) into its own,
//! empty target topic. A poller in this process reads the target's high watermarks (one
//! ListOffsets request) every 50 ms: *wall* is spawn → all records on the target; *start-up*
//! is spawn → first records on the target; *records/s* and *MB/s* are the steady rate: the
//! least-squares slope of records on the target over time, from the polls that saw 10–90 %
//! of the records (start-up and the last flush excluded); the ratios use that rate. A ratio
//! is taken within each round (the host's speed drifts by ±15 % over minutes here) and the
//! median over rounds is shown and judged, with the range; the contenders' order turns
//! each round, so none always runs right after another's target topic was deleted.
//! *CPU ms/MB*: user + system time of the contender's processes (`/proc/<pid>/stat`) from spawn
//! until the copy is complete (bare loop and kcat: until they exit, flush included; the
//! worker keeps running and is read when the last record is on the target); judged.
//! *10-90 %*: the same between the first poll that saw 10 % of the records and the last that
//! saw at most 90 % (the rate's window: no start-up, no final flush); shown, not judged: the
//! records in flight at the window's ends (up to the batches' share, 40 MiB by default, at 1 KB a twelfth of
//! the run) are paid for on one side and counted on the other, so its rounds spread more.
//! Broker CPU is excluded from both and shown separately. *Peak RSS*: `VmHWM` of the contender's
//! processes (kcat: the sum of both). Record size = key (12 B) + value; no headers.
//!
//! # Compression
//! The `1024-lz4` scenario's source records are produced lz4-compressed (values shaped like
//! JSON events, about 2:1), and every contender writes lz4 too (the worker through
//! `target.config: compression.type: lz4`). MB are always uncompressed record bytes.
//!
//! # Peak RSS with 1,000 partitions
//! The worker (and, for reference, the bare loop) copies a 1,000-partition topic: a light
//! load (5 × 1 KB records per partition: the per-partition cost) and a loaded one (100 × 1 KB
//! per partition: record data in flight), each `ROUNDS` times; the worst peak is judged. An
//! idle worker (flow selecting no topic) gives the baseline: without an OffsetCheckpoint (the
//! checkpoint runner holds no clients), with one and an empty offset-syncs topic, and with one
//! and `MIRRORFLOW_BENCH_SYNC_HISTORY` (default 200,000) syncs to read at start (what a
//! restarted worker finds on an uncompacted syncs topic). The throughput runs' flows have no
//! OffsetCheckpoint, like the bare loop. Heap (`RssAnon`) and
//! file-backed (`RssFile`, the mapped binary) are sampled maxima, shown to locate the cost.
//!
//! # Topic refresh under latency (`refresh`)
//! A third Kafka node, the source, sits behind the testkit's Kafka proxy, which delays
//! every client→broker request by 20 ms (it cannot delay the other direction: the whole added
//! round trip is on the request). The bench produces a steady load through it (2,000 × 100 B
//! records/s round-robin over 1,000 partitions) while a worker copies the topic with
//! `spec.topics.refreshIntervalSeconds: 3`. Every 50 ms it reads the target's high watermarks
//! and the worker's `/metrics`: `mirrorflow_worker_topic_refreshes_total` steps when a cycle
//! ended, `mirrorflow_worker_topic_refresh_seconds` gives its length. Shown per run: the
//! cycles (count, median, max), the longest *stall* (time between two polls that saw the
//! target grow) overlapping a cycle and outside every cycle, the rate during and outside the
//! cycles. Judged: the longest stall in a cycle ≤ max(stall bound, longest stall outside);
//! the bound is the batch linger + 2 × the added round trip + 2 polls (240 ms), what the
//! pipeline's own cadence explains, where a pause would last the whole cycle; the rate during
//! cycles ≥ 80 % of the rate outside; records reached the target during ≥ 90 % of the cycles
//! (between two polls inside the span a cycle surely ran: from its latest possible start to
//! its earliest possible end). These are the target's view: a build awaiting the refresh on
//! the loop passed them too (see `benches/replication/refresh.rs`).
//!
//! # Environment
//! `MIRRORFLOW_BENCH_QUICK=1` (a quick subset: 400,000 × 100 B, 2 rounds, no kcat, no
//! scale, rss or refresh; a variable set explicitly still wins),
//! `MIRRORFLOW_BENCH_CONTENDERS` (default `bare,mirrorflow,kcat,mm2t1,mm2t2`; `mm2tN` is MM2
//! with `tasks.max` N), `MIRRORFLOW_BENCH_RECORDS` (100 B records, default 1,000,000; 1 KB
//! records are 2/5 of it, 10 KB records 1/25), `MIRRORFLOW_BENCH_PARTITIONS` (default 8), `MIRRORFLOW_BENCH_ROUNDS` (default 5; each
//! contender's median round by records/s is shown, ratios are medians of per-round ratios), `MIRRORFLOW_BENCH_RSS_PARTITIONS` (default 1000),
//! `MIRRORFLOW_BENCH_RSS_RECORDS` / `MIRRORFLOW_BENCH_RSS_LIGHT_RECORDS` (1 KB records per
//! partition of the loaded / light RSS run, defaults 100 / 5), `MIRRORFLOW_BENCH_SCENARIOS`
//! (comma list of `100`, `1024`, `1024-lz4`, `10240`, `scale`, `latency`, `resume`, `rss`,
//! `idle` (in `rss`), `refresh`, `audit` (the integrity audit's cost,
//! `benches/replication/audit.rs`); default all),
//! `MIRRORFLOW_BENCH_SCALE_PARTITIONS` (default `1,100,1000`),
//! `MIRRORFLOW_BENCH_LATENCY_RATE` (offered 1 KB records/s, default 2,000),
//! `MIRRORFLOW_BENCH_LATENCY_SECONDS` (default 20), `MIRRORFLOW_BENCH_RESUME_RECORDS` (1 KB
//! records of the resume topic, default 200,000; killed at 30 %),
//! `MIRRORFLOW_BENCH_SCALE_RECORDS` (1 KB records per scale run, default 200,000),
//! `MIRRORFLOW_BENCH_IDLE_SECONDS` (how long the idle worker runs, default 6; its settled RSS
//! is the last sample), `MIRRORFLOW_BENCH_TIMEOUT_SECONDS` (per
//! contender run, default 300), `MIRRORFLOW_BIN`, `MIRRORFLOW_BENCH_BARE_WRAPPER` (a program
//! the bare loop is run under, given the bench binary and its role in the environment: a
//! `valgrind` or `perf stat` script, as `MIRRORFLOW_BIN` can be for the worker),
//! `MIRRORFLOW_BENCH_KCAT_LIBDIR`,
//! `MIRRORFLOW_BENCH_KEEP_LOGS` (keep contender logs), `MIRRORFLOW_BENCH_LAG_MAX` (the flow's
//! `offsetSyncs.lagMax`, default 100: what offset syncs cost), `MIRRORFLOW_BENCH_IN_FLIGHT_MIB`
//! (the flow's `workers.inFlightMiB`, default the API's 45: memory against throughput), `MIRRORFLOW_BENCH_WORKER_RUST_LOG` (the
//! worker's `RUST_LOG`; `RUST_LOG` itself is removed so the brokers never log at debug
//! level), `MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG` / `MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG`
//! (`key=value,...` added to the flow's `source.config` / `target.config`, for tuning
//! experiments). The `refresh` scenario: `MIRRORFLOW_BENCH_REFRESH_PARTITIONS` (default
//! 1000), `MIRRORFLOW_BENCH_REFRESH_RTT_MS` (added round trip, default 20),
//! `MIRRORFLOW_BENCH_REFRESH_INTERVAL_SECONDS` (default 3), `MIRRORFLOW_BENCH_REFRESH_RATE`
//! (100 B records/s, default 2000), `MIRRORFLOW_BENCH_REFRESH_SECONDS` (measured window per
//! run after a 5 s warm-up, default 45), `MIRRORFLOW_BENCH_REFRESH_RUNS` (default 3).
//!
//! # Layout
//! This file is the entry: the bare role, the configuration, the orchestration. Under
//! `benches/replication/`: the rounds (`rounds.rs`), one contender run (`contender.rs`,
//! `process.rs`), the contenders' specifics (`worker.rs`, `bare.rs`, `kcat.rs`), the Kafka
//! helpers (`kafka.rs`), MM2 (`mm2.rs`), latency and resume (`live.rs`), the refresh
//! scenario (`refresh.rs`) and the reports (`report.rs`, `versus.rs`); the /proc readings
//! (`benches/common/procfs.rs`) are shared with the checkpoint bench.

#[path = "replication/audit.rs"]
mod audit;
#[path = "replication/bare.rs"]
mod bare;
#[path = "replication/contender.rs"]
mod contender;
#[path = "replication/kafka.rs"]
mod kafka;
#[path = "replication/kcat.rs"]
mod kcat;
#[path = "replication/live.rs"]
mod live;
#[path = "replication/mm2.rs"]
mod mm2;
#[path = "replication/process.rs"]
mod process;
#[path = "common/procfs.rs"]
mod procfs;
#[path = "replication/refresh.rs"]
mod refresh;
#[path = "replication/report.rs"]
mod report;
#[path = "replication/rounds.rs"]
mod rounds;
#[path = "replication/versus.rs"]
mod versus;
#[path = "replication/worker.rs"]
mod worker;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use mirrorflow::testkit::brokers::{BrokerError, BrokerKind, LocalBroker};

fn main() {
    if std::env::var(bare::ROLE_ENV).as_deref() == Ok("bare") {
        match bare::run_from_env() {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("bare copy loop: {e:#}");
                std::process::exit(1);
            }
        }
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: do not start brokers
    // and copy millions of records from a test run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("replication bench: run it with `cargo bench --bench replication`");
        return;
    }
    if let Err(e) = run() {
        eprintln!("replication bench failed: {e:#}");
        std::process::exit(1);
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            eprintln!("{name}={v:?} is not a number; using {default}");
            default
        }),
        Err(_) => default,
    }
}

/// Bench parameters from the environment.
#[derive(Debug, Clone)]
struct Config {
    records_100: u64,
    records_1k: u64,
    records_10k: u64,
    /// Who runs in the throughput and scale rounds (`MIRRORFLOW_BENCH_CONTENDERS`).
    contenders: Vec<contender::Contender>,
    /// The latency and resume scenarios' knobs.
    live: live::LiveConfig,
    partitions: i32,
    rounds: usize,
    rss_partitions: i32,
    rss_records_per_partition: u64,
    rss_light_records_per_partition: u64,
    rss_sync_history: u64,
    /// How long the idle worker runs (its settled RSS is the last sample).
    idle_settle: Duration,
    scale_partitions: Vec<i32>,
    scale_records: u64,
    scenarios: Vec<String>,
    timeout: Duration,
}

impl Config {
    fn from_env() -> Self {
        // The quick subset: smaller runs, fewer rounds and scenarios (defaults only: every
        // variable set still wins).
        let quick = std::env::var_os("MIRRORFLOW_BENCH_QUICK").is_some_and(|v| v != "0");
        let records_100 = env_u64(
            "MIRRORFLOW_BENCH_RECORDS",
            if quick { 400_000 } else { 1_000_000 },
        )
        .max(1);
        let scenarios = std::env::var("MIRRORFLOW_BENCH_SCENARIOS")
            .unwrap_or_else(|_| {
                if quick {
                    "100,1024,1024-lz4,10240,latency,resume".to_string()
                } else {
                    "100,1024,1024-lz4,10240,scale,latency,resume,rss,refresh".to_string()
                }
            })
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        let contenders = std::env::var("MIRRORFLOW_BENCH_CONTENDERS")
            .unwrap_or_else(|_| {
                if quick {
                    "bare,mirrorflow,mm2t1,mm2t2".to_string()
                } else {
                    "bare,mirrorflow,kcat,mm2t1,mm2t2".to_string()
                }
            })
            .split(',')
            .filter_map(|c| match c.trim() {
                "bare" => Some(contender::Contender::Bare),
                "mirrorflow" => Some(contender::Contender::Mirrorflow),
                "kcat" => Some(contender::Contender::Kcat),
                other => match other.strip_prefix("mm2t").map(str::parse::<u32>) {
                    Some(Ok(t)) if t > 0 => Some(contender::Contender::Mm2(t)),
                    _ => {
                        eprintln!("MIRRORFLOW_BENCH_CONTENDERS: {other:?} is not a contender");
                        None
                    }
                },
            })
            .collect();
        Self {
            records_100,
            records_1k: (records_100 * 2 / 5).max(1),
            records_10k: (records_100 / 25).max(1),
            contenders,
            live: live::LiveConfig::from_env(quick),
            partitions: env_u64("MIRRORFLOW_BENCH_PARTITIONS", 8).clamp(1, 10_000) as i32,
            rounds: env_u64("MIRRORFLOW_BENCH_ROUNDS", if quick { 2 } else { 5 }).clamp(1, 20)
                as usize,
            rss_partitions: env_u64("MIRRORFLOW_BENCH_RSS_PARTITIONS", 1000).clamp(1, 10_000)
                as i32,
            rss_records_per_partition: env_u64("MIRRORFLOW_BENCH_RSS_RECORDS", 100).max(1),
            rss_light_records_per_partition: env_u64("MIRRORFLOW_BENCH_RSS_LIGHT_RECORDS", 5)
                .max(1),
            rss_sync_history: env_u64("MIRRORFLOW_BENCH_SYNC_HISTORY", 200_000),
            idle_settle: Duration::from_secs(env_u64("MIRRORFLOW_BENCH_IDLE_SECONDS", 6).max(1)),
            scale_partitions: std::env::var("MIRRORFLOW_BENCH_SCALE_PARTITIONS")
                .unwrap_or_else(|_| "1,100,1000".to_string())
                .split(',')
                .filter_map(|p| p.trim().parse::<i32>().ok())
                .map(|p| p.clamp(1, 10_000))
                .collect(),
            scale_records: env_u64(
                "MIRRORFLOW_BENCH_SCALE_RECORDS",
                if quick { 100_000 } else { 200_000 },
            )
            .max(1),
            scenarios,
            timeout: Duration::from_secs(env_u64("MIRRORFLOW_BENCH_TIMEOUT_SECONDS", 300)),
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

fn mirrorflow_bin() -> PathBuf {
    std::env::var_os("MIRRORFLOW_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mirrorflow")))
}

fn start_broker(rt: &tokio::runtime::Runtime) -> Result<LocalBroker, BrokerError> {
    rt.block_on(LocalBroker::start(BrokerKind::Kafka))
}

fn run() -> anyhow::Result<()> {
    // A debug RUST_LOG would slow the bench's own clients and every child down: only the
    // worker gets one, from MIRRORFLOW_BENCH_WORKER_RUST_LOG.
    // Still single-threaded here, so changing the environment is sound.
    std::env::remove_var("RUST_LOG");
    let cfg = Config::from_env();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let source = match start_broker(&rt) {
        Ok(b) => b,
        Err(e @ BrokerError::BinaryNotFound { .. }) => {
            println!("SKIPPED replication bench: {e}");
            return Ok(());
        }
        Err(e) => return Err(e).context("starting the source broker"),
    };
    let target = start_broker(&rt).context("starting the target broker")?;
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    // The nodes' JVMs, whose CPU is shown apart.
    let broker_pids: Vec<u32> = [&source, &target]
        .iter()
        .filter_map(|b| b.kafka()?.node_pid(1))
        .collect();
    let bin = mirrorflow_bin();
    anyhow::ensure!(
        bin.is_file(),
        "mirrorflow binary {} not found (set MIRRORFLOW_BIN)",
        bin.display()
    );
    let logs = tempfile::Builder::new()
        .prefix("mirrorflow-bench-")
        .tempdir()?;
    let keep_logs = std::env::var_os("MIRRORFLOW_BENCH_KEEP_LOGS").is_some();
    let kcat_lib = kcat::libdir(&src);
    println!(
        "replication bench: Apache Kafka {} source {src}, target {tgt} (one node each), 2 brokers pids {broker_pids:?}",
        source.kafka().map_or("?", |k| k.version())
    );
    println!(
        "  {} cores; mirrorflow binary {}; kcat: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bin.display(),
        match &kcat_lib {
            Ok(dir) => format!("Debian kcat 1.7.1 with librdkafka from {}", dir.display()),
            Err(e) => format!("not run ({e})"),
        }
    );
    let bench = rounds::Bench {
        cfg: &cfg,
        src: &src,
        tgt: &tgt,
        broker_pids: &broker_pids,
        logs: logs.path(),
        kcat_libdir: kcat_lib.as_deref().ok(),
        mirrorflow_bin: &bin,
        rt: &rt,
    };
    let mut out = rounds::Outcome::default();
    bench.throughput(&mut out)?;
    if cfg.wants("scale") {
        bench.scale(&mut out)?;
    }
    if cfg.wants("latency") {
        bench.latency(&mut out)?;
    }
    if cfg.wants("resume") {
        bench.resume(&mut out)?;
    }
    if cfg.wants("rss") {
        bench.rss(&mut out)?;
    }
    if cfg.wants("rss") || cfg.wants("idle") {
        bench.idle(&mut out);
    }
    if cfg.wants("refresh") {
        bench.refresh(&mut out)?;
    }

    report::print(&cfg, &out);
    if audit::wanted() {
        if let Err(e) = audit::audit_cost(&bench) {
            println!("  integrity audit cost: not measured ({e:#})");
        }
    }
    if keep_logs {
        println!("  logs kept in {}", logs.keep().display());
    }
    drop((source, target));
    Ok(())
}
