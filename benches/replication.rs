//! Replication bench: throughput (records/s, MB/s), CPU seconds per MB and peak RSS of
//! mirrorflow against (a) a bare rdkafka consume→produce copy loop and (b) a
//! `kcat -C … | kcat -P …` pipe, on the same two local nisshi brokers in one run, for
//! 100 B and 1 KB records; then the peak RSS of a worker owning 1,000 partitions. Prints a
//! table with the ratios and PASS/MISS against the targets of the issue (≥ 90 % of the bare
//! loop with offset validation and offset syncs on, ≥ 2× the kcat pipe, worker RSS ≤ 64 MiB
//! with 1,000 partitions). No assertion depends on timing: a missed target is reported.
//!
//! `cargo bench --bench replication`
//!
//! # How each contender runs (all as child processes, so CPU and RSS are per contender)
//! - **mirrorflow**: the real binary, `mirrorflow worker --flow FILE --listen 127.0.0.1:PORT`
//!   (`CARGO_BIN_EXE_mirrorflow`, built by `cargo bench` itself; `MIRRORFLOW_BIN` overrides).
//!   `delivery: AtLeastOnce` (nisshi refuses transactions), offset validation on, offset syncs
//!   every 100 records (`offsetSyncs.lagMax: 100`, MM2's default). The worker creates its
//!   target topic, internal topics, and reads progress: that is its start-up. Each worker run
//!   has its own flow name and source alias, so it starts with empty progress and offset-syncs
//!   topics whatever ran before it.
//! - **bare loop**: this bench binary re-run with `MIRRORFLOW_BENCH_ROLE=bare`: a
//!   `BaseConsumer` (assign, no group) polled one record at a time into a `BaseProducer`,
//!   with the engine's consumer settings (prefetch bounds from `Tuning::default()`) and the
//!   engine's producer settings (idempotent, `acks=all`, `linger.ms=5`, same queue bounds),
//!   until every record is acknowledged. It keeps partition, key, value, headers and
//!   timestamp, like the engine.
//! - **kcat pipe**: Debian's `kcat` (1.7.1) as `kcat -C -o beginning -e -f '%k\t%s\n' |
//!   kcat -P -K '\t'` with the same producer durability settings (`acks=all`, idempotence,
//!   `linger.ms=5`), consumer at kcat's defaults. It copies key and value only; the target
//!   partition comes from the key hash; headers and timestamps are lost (less work than the
//!   others). Debian's librdkafka 2.0.2 cannot parse nisshi's ApiVersions response (tagged
//!   fields), so kcat runs with `LD_LIBRARY_PATH` pointing at a `librdkafka.so.1` linked here
//!   from the `librdkafka.a` (2.12.1) that rdkafka-sys built for this crate — the same
//!   librdkafka as the other two contenders. `MIRRORFLOW_BENCH_KCAT_LIBDIR` overrides the
//!   directory; without a usable library the kcat rows are reported as not run.
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
//! worker keeps running and is read when the last record is on the target). Broker CPU is
//! excluded from CPU ms/MB and shown separately. *Peak RSS*: `VmHWM` of the contender's
//! processes (kcat: the sum of both). Record size = key (12 B) + value; no headers.
//!
//! # Peak RSS with 1,000 partitions
//! The worker (and, for reference, the bare loop) copies a 1,000-partition topic: a light
//! load (5 × 1 KB records per partition: the per-partition cost) and a loaded one (100 × 1 KB
//! per partition: record data in flight), each `ROUNDS` times; the worst peak is judged. An
//! idle worker (flow selecting no topic) gives the baseline, once with an empty offset-syncs
//! topic and once with `MIRRORFLOW_BENCH_SYNC_HISTORY` (default 200,000) syncs to read at
//! start (what a restarted worker finds on an uncompacted syncs topic). Heap (`RssAnon`) and
//! file-backed (`RssFile`, the mapped binary) are sampled maxima, shown to locate the cost.
//!
//! # Environment
//! `MIRRORFLOW_BENCH_RECORDS` (100 B records, default 1,000,000; 1 KB records are 2/5 of
//! it), `MIRRORFLOW_BENCH_PARTITIONS` (default 8), `MIRRORFLOW_BENCH_ROUNDS` (default 5; each
//! contender's median round by records/s is shown, ratios are medians of per-round ratios), `MIRRORFLOW_BENCH_RSS_PARTITIONS` (default 1000),
//! `MIRRORFLOW_BENCH_RSS_RECORDS` / `MIRRORFLOW_BENCH_RSS_LIGHT_RECORDS` (1 KB records per
//! partition of the loaded / light RSS run, defaults 100 / 5), `MIRRORFLOW_BENCH_SCENARIOS`
//! (comma list of `100`, `1024`, `rss`; default all), `MIRRORFLOW_BENCH_TIMEOUT_SECONDS` (per
//! contender run, default 300), `MIRRORFLOW_BIN`, `MIRRORFLOW_BENCH_KCAT_LIBDIR`,
//! `MIRRORFLOW_BENCH_KEEP_LOGS` (keep contender logs), `MIRRORFLOW_BENCH_LAG_MAX` (the flow's
//! `offsetSyncs.lagMax`, default 100: what offset syncs cost), `MIRRORFLOW_BENCH_IN_FLIGHT_MIB`
//! (the flow's `workers.inFlightMiB`, default 16: memory against throughput), `MIRRORFLOW_BENCH_WORKER_RUST_LOG` (the
//! worker's `RUST_LOG`; `RUST_LOG` itself is removed so the brokers never log at debug
//! level), `MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG` / `MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG`
//! (`key=value,...` added to the flow's `source.config` / `target.config`, for tuning
//! experiments).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use mirrorflow::kafka::wire::{offset_syncs_topic, OffsetSync};
use mirrorflow::testkit::brokers::{self, BrokerError, BrokerKind, LocalBroker};
use mirrorflow::testkit::stats::{self, median};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

/// Env var that turns this binary into the bare copy loop (a child of the bench).
const ROLE_ENV: &str = "MIRRORFLOW_BENCH_ROLE";
/// Key bytes of every record (`{i:012}`); the value fills the rest of the record size.
const KEY_BYTES: usize = 12;
/// How often the target is polled during throughput runs.
const POLL: Duration = Duration::from_millis(50);
/// The RSS target of the issue.
const RSS_TARGET_MIB: f64 = 64.0;
/// Linux `USER_HZ` (clock ticks in `/proc/<pid>/stat`).
const TICKS_PER_SECOND: f64 = 100.0;

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("bare") {
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
    partitions: i32,
    rounds: usize,
    rss_partitions: i32,
    rss_records_per_partition: u64,
    rss_light_records_per_partition: u64,
    rss_sync_history: u64,
    scenarios: Vec<String>,
    timeout: Duration,
}

impl Config {
    fn from_env() -> Self {
        let records_100 = env_u64("MIRRORFLOW_BENCH_RECORDS", 1_000_000).max(1);
        let scenarios = std::env::var("MIRRORFLOW_BENCH_SCENARIOS")
            .unwrap_or_else(|_| "100,1024,rss".to_string())
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        Self {
            records_100,
            records_1k: (records_100 * 2 / 5).max(1),
            partitions: env_u64("MIRRORFLOW_BENCH_PARTITIONS", 8).clamp(1, 10_000) as i32,
            rounds: env_u64("MIRRORFLOW_BENCH_ROUNDS", 5).clamp(1, 20) as usize,
            rss_partitions: env_u64("MIRRORFLOW_BENCH_RSS_PARTITIONS", 1000).clamp(1, 10_000)
                as i32,
            rss_records_per_partition: env_u64("MIRRORFLOW_BENCH_RSS_RECORDS", 100).max(1),
            rss_light_records_per_partition: env_u64("MIRRORFLOW_BENCH_RSS_LIGHT_RECORDS", 5)
                .max(1),
            rss_sync_history: env_u64("MIRRORFLOW_BENCH_SYNC_HISTORY", 200_000),
            scenarios,
            timeout: Duration::from_secs(env_u64("MIRRORFLOW_BENCH_TIMEOUT_SECONDS", 300)),
        }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.scenarios.iter().any(|s| s == scenario)
    }
}

// ---------------------------------------------------------------------------------------
// /proc readings
// ---------------------------------------------------------------------------------------

/// `(state, user + system CPU seconds)` of `pid`; also works for a zombie (not yet reaped).
fn proc_cpu(pid: u32) -> Option<(char, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is parenthesised and may hold spaces: split after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some((state, ticks / TICKS_PER_SECOND))
}

/// A `kB` field of `/proc/<pid>/status` (`VmHWM`, `VmRSS`); absent for a zombie.
fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// Child processes of this process whose command name is `comm` (the brokers).
fn children_named(comm: &str) -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        let ppid = stat[close + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(me) && name == comm {
            out.push(pid);
        }
    }
    out
}

fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter()
        .filter_map(|p| proc_cpu(*p))
        .map(|(_, c)| c)
        .sum()
}

// ---------------------------------------------------------------------------------------
// Kafka helpers (blocking)
// ---------------------------------------------------------------------------------------

/// Key of record `i`.
fn key_of(i: u64) -> String {
    format!("{i:012}")
}

/// A printable value (no tab, no newline: kcat's delimiters) of `len` bytes.
fn value_of(i: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| b'a' + ((i as usize + j) % 26) as u8)
        .collect()
}

/// Produces `n` records of `size` bytes (12 B key + value) round-robin over `partitions`.
fn produce_source(
    bootstrap: &str,
    topic: &str,
    n: u64,
    partitions: i32,
    size: usize,
) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "10")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .context("creating the source producer")?;
    let value_len = size.saturating_sub(KEY_BYTES);
    // A handful of distinct values is enough (no compression anywhere).
    let values: Vec<Vec<u8>> = (0..26).map(|i| value_of(i, value_len)).collect();
    for i in 0..n {
        let key = key_of(i);
        let mut record = BaseRecord::to(topic)
            .key(key.as_str())
            .payload(values[(i % 26) as usize].as_slice())
            .partition((i % partitions as u64) as i32);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => bail!("producing record {i} to {topic}: {e}"),
            }
        }
        if i.is_multiple_of(4096) {
            producer.poll(Duration::ZERO);
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .with_context(|| format!("flushing the records of {topic}"))?;
    Ok(())
}

/// Writes `n` offset syncs (MM2 format) for `partitions` partitions of `topic` to the
/// offset-syncs topic of source alias `alias` on `bootstrap`, as a worker would have written
/// them over time (no compaction happens on nisshi).
fn produce_sync_history(
    bootstrap: &str,
    alias: &str,
    topic: &str,
    partitions: i32,
    n: u64,
) -> anyhow::Result<()> {
    let syncs_topic = offset_syncs_topic(alias);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "10")
        .set("queue.buffering.max.messages", "500000")
        .create()
        .context("creating the sync history producer")?;
    let partitions = partitions.max(1) as u64;
    for i in 0..n {
        let round = (i / partitions) as i64;
        let sync = OffsetSync {
            topic: topic.to_string(),
            partition: (i % partitions) as i32,
            upstream_offset: round * 100,
            downstream_offset: round * 100,
        };
        let (key, value) = (sync.encode_key()?, sync.encode_value()?);
        let mut record = BaseRecord::to(&syncs_topic)
            .partition(0)
            .key(key.as_slice())
            .payload(value.as_slice());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => bail!("producing sync {i} to {syncs_topic}: {e}"),
            }
        }
    }
    producer
        .flush(Duration::from_secs(120))
        .with_context(|| format!("flushing {syncs_topic}"))?;
    Ok(())
}

/// Reads high watermarks with one ListOffsets request (timestamp -1 = latest).
struct TargetCounter {
    bootstrap: String,
    consumer: BaseConsumer,
    created: Instant,
}

impl TargetCounter {
    fn new(bootstrap: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bootstrap: bootstrap.to_string(),
            consumer: Self::client(bootstrap)?,
            created: Instant::now(),
        })
    }

    fn client(bootstrap: &str) -> anyhow::Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "mirrorflow-bench-counter")
            .set("enable.auto.commit", "false")
            .set("topic.metadata.refresh.interval.ms", "1000")
            .create()
            .context("creating the target counter")
    }

    /// High watermark per partition of `topic` (partitions `0..partitions`), or `None` while
    /// the topic does not exist or the broker does not answer.
    fn ends(&mut self, topic: &str, partitions: i32) -> Option<Vec<i64>> {
        let ends = self.try_ends(topic, partitions);
        // librdkafka remembers a missing topic until its next metadata refresh; a new
        // client sees a topic created meanwhile (the worker creates its target topic).
        if ends.is_none() && self.created.elapsed() > Duration::from_millis(500) {
            if let Ok(c) = Self::client(&self.bootstrap) {
                self.consumer = c;
                self.created = Instant::now();
            }
        }
        ends
    }

    fn try_ends(&self, topic: &str, partitions: i32) -> Option<Vec<i64>> {
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::End).ok()?;
        }
        let answer = self
            .consumer
            .offsets_for_times(tpl, Duration::from_secs(10))
            .ok()?;
        let mut ends = vec![0; partitions as usize];
        for e in answer.elements() {
            e.error().ok()?;
            match e.offset() {
                Offset::Offset(o) => *ends.get_mut(e.partition() as usize)? = o,
                _ => return None,
            }
        }
        Some(ends)
    }

    fn count(&mut self, topic: &str, partitions: i32) -> Option<u64> {
        self.ends(topic, partitions)
            .map(|e| e.iter().map(|o| (*o).max(0) as u64).sum())
    }
}

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

/// `GET path` on `127.0.0.1:port` (HTTP/1.0, whole body).
fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: malformed answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// Sum of the samples of a Prometheus metric (all label sets) whose line starts with
/// `prefix`.
fn metric_sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------------------
// The bare copy loop (child role)
// ---------------------------------------------------------------------------------------

mod bare {
    use super::*;

    /// Counts delivery reports.
    #[derive(Default)]
    struct Acks {
        ok: AtomicU64,
        failed: AtomicU64,
        first_error: Mutex<Option<String>>,
    }

    impl ClientContext for Acks {}

    impl ProducerContext for Acks {
        type DeliveryOpaque = ();

        fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
            match result {
                Ok(_) => {
                    self.ok.fetch_add(1, Ordering::Relaxed);
                }
                Err((e, _)) => {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut first) = self.first_error.lock() {
                        first.get_or_insert_with(|| e.to_string());
                    }
                }
            }
        }
    }

    fn var(name: &str) -> anyhow::Result<String> {
        std::env::var(name).with_context(|| format!("{name} is not set"))
    }

    /// Environment of the child: where to copy from and to, and how many records.
    pub fn child_env(
        src: &str,
        tgt: &str,
        topic: &str,
        target_topic: &str,
        partitions: i32,
        n: u64,
    ) -> Vec<(&'static str, String)> {
        vec![
            (ROLE_ENV, "bare".to_string()),
            ("MIRRORFLOW_BENCH_BARE_SOURCE", src.to_string()),
            ("MIRRORFLOW_BENCH_BARE_TARGET", tgt.to_string()),
            ("MIRRORFLOW_BENCH_BARE_TOPIC", topic.to_string()),
            (
                "MIRRORFLOW_BENCH_BARE_TARGET_TOPIC",
                target_topic.to_string(),
            ),
            ("MIRRORFLOW_BENCH_BARE_PARTITIONS", partitions.to_string()),
            ("MIRRORFLOW_BENCH_BARE_RECORDS", n.to_string()),
        ]
    }

    /// Copies `RECORDS` records from `TOPIC` to `TARGET_TOPIC` (same partition, key, value,
    /// headers, timestamp) and exits once all are acknowledged.
    pub fn run_from_env() -> anyhow::Result<()> {
        let src = var("MIRRORFLOW_BENCH_BARE_SOURCE")?;
        let tgt = var("MIRRORFLOW_BENCH_BARE_TARGET")?;
        let topic = var("MIRRORFLOW_BENCH_BARE_TOPIC")?;
        let target_topic = var("MIRRORFLOW_BENCH_BARE_TARGET_TOPIC")?;
        let partitions: i32 = var("MIRRORFLOW_BENCH_BARE_PARTITIONS")?.parse()?;
        let n: u64 = var("MIRRORFLOW_BENCH_BARE_RECORDS")?.parse()?;
        // The engine's consumer settings (engine.rs `create_consumer`, defaults of `Tuning`).
        let tuning = mirrorflow::worker::replicate::Tuning::default();
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &src)
            .set("group.id", "mirrorflow-bench-bare")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "error")
            .set(
                "queued.max.messages.kbytes",
                tuning.consumer_queue_kbytes.to_string(),
            )
            .set("queued.min.messages", "10000")
            .set("fetch.max.bytes", tuning.fetch_max_bytes.to_string())
            .set("fetch.wait.max.ms", "100")
            .set("fetch.queue.backoff.ms", "20")
            .create()
            .context("creating the consumer")?;
        // The engine's producer settings (writer.rs `TargetWriter::create`, AtLeastOnce).
        let producer: BaseProducer<Acks> = ClientConfig::new()
            .set("bootstrap.servers", &tgt)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set(
                "queue.buffering.max.kbytes",
                tuning.producer.queue_kbytes.to_string(),
            )
            .set(
                "queue.buffering.max.messages",
                tuning.producer.queue_messages.to_string(),
            )
            .set("message.timeout.ms", "60000")
            .set("linger.ms", "5")
            .create_with_context(Acks::default())
            .context("creating the producer")?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)?;
        }
        consumer.assign(&tpl).context("assign")?;
        let mut copied = 0u64;
        while copied < n {
            let Some(m) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let m = m.context("consuming")?;
            let headers = m.headers().map(|h| h.detach());
            let mut record: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(&target_topic).partition(m.partition());
            if let Some(k) = m.key() {
                record = record.key(k);
            }
            if let Some(v) = m.payload() {
                record = record.payload(v);
            }
            if let Some(ts) = m.timestamp().to_millis() {
                record = record.timestamp(ts);
            }
            if let Some(h) = headers {
                record = record.headers(h);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => bail!("producing to {target_topic}: {e}"),
                }
            }
            copied += 1;
            if copied.is_multiple_of(1024) {
                producer.poll(Duration::ZERO);
            }
        }
        producer
            .flush(Duration::from_secs(120))
            .context("flushing")?;
        let acks = producer.context();
        let (ok, failed) = (
            acks.ok.load(Ordering::Relaxed),
            acks.failed.load(Ordering::Relaxed),
        );
        if failed > 0 || ok != n {
            let first = acks
                .first_error
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .unwrap_or_default();
            bail!("{ok} of {n} records acknowledged, {failed} failed (first error: {first})");
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Running and measuring one contender
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Contender {
    Bare,
    Mirrorflow,
    Kcat,
}

impl Contender {
    fn label(self) -> &'static str {
        match self {
            Contender::Bare => "bare rdkafka loop",
            Contender::Mirrorflow => "mirrorflow (AtLeastOnce)",
            Contender::Kcat => "kcat -C | kcat -P",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Contender::Bare => "bare",
            Contender::Mirrorflow => "mirrorflow",
            Contender::Kcat => "kcat",
        }
    }
}

/// One process of a contender, with its latest readings.
struct Proc {
    name: String,
    child: Child,
    log: PathBuf,
    cpu: f64,
    hwm_kib: u64,
    /// Largest sampled `RssAnon` (heap) and `RssFile` (mapped binary and libraries).
    anon_kib: u64,
    file_kib: u64,
    exit: Option<std::process::ExitStatus>,
    /// Whether the contender ends by itself (false: the worker, stopped by us).
    exits_by_itself: bool,
}

impl Proc {
    fn new(name: &str, child: Child, log: PathBuf) -> Self {
        Self {
            name: name.to_string(),
            child,
            log,
            cpu: 0.0,
            hwm_kib: 0,
            anon_kib: 0,
            file_kib: 0,
            exit: None,
            exits_by_itself: true,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Takes readings; reaps the process once it is a zombie (after its final reading).
    fn sample(&mut self) {
        if self.exit.is_some() {
            return;
        }
        if let Some(kib) = proc_status_kib(self.pid(), "VmHWM") {
            self.hwm_kib = self.hwm_kib.max(kib);
        }
        if let Some(kib) = proc_status_kib(self.pid(), "RssAnon") {
            self.anon_kib = self.anon_kib.max(kib);
        }
        if let Some(kib) = proc_status_kib(self.pid(), "RssFile") {
            self.file_kib = self.file_kib.max(kib);
        }
        if let Some((state, cpu)) = proc_cpu(self.pid()) {
            self.cpu = cpu;
            if state == 'Z' {
                self.exit = self.child.try_wait().ok().flatten();
            }
        } else {
            // Gone from /proc without being reaped cannot happen for our child; reap anyway.
            self.exit = self.child.try_wait().ok().flatten();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

/// What one contender run measured.
#[derive(Debug, Clone)]
struct Measured {
    contender: Contender,
    size: usize,
    /// Round of the run (ratios pair contenders of the same round).
    round: usize,
    records: u64,
    /// Spawn → every record on the target.
    wall: f64,
    /// Spawn → first records on the target.
    startup: f64,
    /// Records/s between the first and the last poll.
    steady_rate: f64,
    cpu: f64,
    broker_cpu: f64,
    peak_rss_kib: u64,
    /// Largest sampled heap (`RssAnon`) and file-backed (`RssFile`) RSS, summed over processes.
    peak_anon_kib: u64,
    peak_file_kib: u64,
    /// Records on the target beyond the source's (duplicates).
    extra: u64,
    notes: Vec<String>,
}

impl Measured {
    fn mb(&self) -> f64 {
        self.records as f64 * self.size as f64 / 1e6
    }

    fn end_to_end_rate(&self) -> f64 {
        self.records as f64 / self.wall
    }
}

/// Everything a contender run needs.
struct Run<'a> {
    src: &'a str,
    tgt: &'a str,
    topic: &'a str,
    partitions: i32,
    records: u64,
    size: usize,
    round: usize,
    poll: Duration,
    timeout: Duration,
    brokers: &'a [u32],
    logs: &'a Path,
    kcat_libdir: Option<&'a Path>,
    mirrorflow_bin: &'a Path,
    rt: &'a tokio::runtime::Runtime,
    /// Appended to the worker's source alias (see [`Run::alias`]).
    alias_suffix: &'a str,
}

impl Run<'_> {
    /// The worker's source alias: its own per run, so every worker starts with an empty
    /// offset-syncs topic (`mm2-offset-syncs.<alias>.internal`, read whole at start by the
    /// checkpoint side) instead of the history of the runs before it.
    fn alias(&self) -> String {
        format!("{}-r{}{}", self.topic, self.round, self.alias_suffix)
    }

    fn target_topic(&self, c: Contender) -> String {
        match c {
            // The worker names it: `<sourceAlias>.<topic>` (default policy).
            Contender::Mirrorflow => format!("{}.{}", self.alias(), self.topic),
            _ => format!("{}.{}", c.tag(), self.topic),
        }
    }

    fn log_file(&self, name: &str) -> anyhow::Result<(PathBuf, File)> {
        let path = self
            .logs
            .join(format!("{name}-{}-r{}.log", self.topic, self.round));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok((path, file))
    }

    fn spawn(&self, name: &str, cmd: &mut Command, stdout: Stdio) -> anyhow::Result<Proc> {
        let (log, file) = self.log_file(name)?;
        let child = cmd
            .stdout(stdout)
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Proc::new(name, child, log))
    }

    /// `mirrorflow worker --flow FLOW --listen 127.0.0.1:PORT`.
    fn worker_command(&self, flow: &Path, port: u16) -> Command {
        let mut cmd = Command::new(self.mirrorflow_bin);
        if let Some(filter) = std::env::var_os("MIRRORFLOW_BENCH_WORKER_RUST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        cmd.arg("worker")
            .arg("--flow")
            .arg(flow)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--worker-index")
            .arg("0")
            .arg("--secrets-dir")
            .arg(self.logs);
        cmd
    }

    /// Peak RSS, heap and file-backed RSS (KiB) of a worker whose flow selects no topic,
    /// sampled for `settle`: the baseline under the per-partition and record-data costs.
    fn idle_worker_rss(&self, settle: Duration) -> anyhow::Result<(u64, u64, u64)> {
        let port = free_port()?;
        let flow = self.logs.join("flow-idle.yaml");
        std::fs::write(&flow, flow_yaml(self, port))?;
        let mut p = self.spawn(
            "mirrorflow-idle",
            &mut self.worker_command(&flow, port),
            Stdio::null(),
        )?;
        p.exits_by_itself = false;
        let t = Instant::now();
        while t.elapsed() < settle && p.exit.is_none() {
            p.sample();
            std::thread::sleep(Duration::from_millis(100));
        }
        let exited = p.exit;
        stop(&mut p);
        if let Some(status) = exited {
            bail!("the idle worker exited with {status}:\n{}", p.log_tail());
        }
        let _ = std::fs::remove_file(&p.log);
        Ok((p.hwm_kib, p.anon_kib, p.file_kib))
    }

    /// Runs contender `c` and measures it; the target topic is deleted afterwards.
    fn measure(&self, c: Contender) -> anyhow::Result<Measured> {
        let target_topic = self.target_topic(c);
        if c != Contender::Mirrorflow {
            self.rt
                .block_on(brokers::create_topic(
                    self.tgt,
                    &target_topic,
                    self.partitions,
                    &[],
                ))
                .with_context(|| format!("creating {target_topic}"))?;
        }
        let mut counter = TargetCounter::new(self.tgt)?;
        let result = self.measure_inner(c, &target_topic, &mut counter);
        // Free the brokers' memory for the next contender (memory storage).
        if let Err(e) = self
            .rt
            .block_on(brokers::delete_topic(self.tgt, &target_topic))
        {
            eprintln!("  note: could not delete {target_topic}: {e}");
        }
        result
    }

    fn measure_inner(
        &self,
        c: Contender,
        target_topic: &str,
        counter: &mut TargetCounter,
    ) -> anyhow::Result<Measured> {
        let mut notes = Vec::new();
        let mut worker_port = None;
        let broker_cpu0 = cpu_of(self.brokers);
        let t0 = Instant::now();
        let mut procs = match c {
            Contender::Bare => {
                let exe = std::env::current_exe().context("locating the bench binary")?;
                let mut cmd = Command::new(exe);
                cmd.envs(bare::child_env(
                    self.src,
                    self.tgt,
                    self.topic,
                    target_topic,
                    self.partitions,
                    self.records,
                ));
                vec![self.spawn("bare", &mut cmd, Stdio::null())?]
            }
            Contender::Mirrorflow => {
                let port = free_port()?;
                worker_port = Some(port);
                let flow = self
                    .logs
                    .join(format!("flow-{}-r{}.yaml", self.topic, self.round));
                std::fs::write(&flow, flow_yaml(self, port))?;
                let mut cmd = self.worker_command(&flow, port);
                let mut p = self.spawn("mirrorflow", &mut cmd, Stdio::null())?;
                p.exits_by_itself = false;
                vec![p]
            }
            Contender::Kcat => {
                let lib = self
                    .kcat_libdir
                    .context("no librdkafka usable by kcat against nisshi")?;
                let mut consume = Command::new("kcat");
                consume
                    .env("LD_LIBRARY_PATH", lib)
                    .args(["-C", "-b", self.src, "-t", self.topic])
                    .args(["-o", "beginning", "-e", "-q", "-f", "%k\t%s\n"]);
                let mut consumer = self.spawn("kcat-C", &mut consume, Stdio::piped())?;
                let pipe = consumer
                    .child
                    .stdout
                    .take()
                    .context("kcat -C has no stdout")?;
                let mut produce = Command::new("kcat");
                produce
                    .env("LD_LIBRARY_PATH", lib)
                    .args(["-P", "-b", self.tgt, "-t", target_topic, "-K", "\t"])
                    .args(["-X", "acks=all", "-X", "enable.idempotence=true"])
                    .args(["-X", "linger.ms=5"]);
                let (log, file) = self.log_file("kcat-P")?;
                let child = produce
                    .stdin(Stdio::from(pipe))
                    .stdout(Stdio::null())
                    .stderr(file)
                    .spawn()
                    .context("spawning kcat -P")?;
                let producer = Proc::new("kcat-P", child, log);
                vec![consumer, producer]
            }
        };
        let outcome = self.watch(c, &mut procs, target_topic, counter, t0, broker_cpu0);
        if let (Some(port), Ok(_)) = (worker_port, &outcome) {
            match worker_report(self, port) {
                Ok(report) => notes.extend(report),
                Err(e) => notes.push(format!("worker status/metrics unavailable: {e:#}")),
            }
        }
        // Stop whatever still runs (the worker; anything left after a failure).
        for p in &mut procs {
            stop(p);
        }
        let keep = std::env::var_os("MIRRORFLOW_BENCH_KEEP_LOGS").is_some();
        let mut m = match outcome {
            Ok(m) => m,
            Err(e) => {
                let tails: Vec<String> = procs
                    .iter()
                    .map(|p| format!("--- {} ({}):\n{}", p.name, p.log.display(), p.log_tail()))
                    .collect();
                return Err(e.context(tails.join("\n")));
            }
        };
        if !keep {
            for p in &procs {
                let _ = std::fs::remove_file(&p.log);
            }
        }
        m.notes.extend(notes);
        Ok(m)
    }

    /// Polls the target until every record is there; samples CPU and RSS meanwhile.
    fn watch(
        &self,
        c: Contender,
        procs: &mut [Proc],
        target_topic: &str,
        counter: &mut TargetCounter,
        t0: Instant,
        broker_cpu0: f64,
    ) -> anyhow::Result<Measured> {
        let n = self.records;
        let mut first: Option<(f64, u64)> = None;
        let mut samples: Vec<(f64, u64)> = Vec::new();
        let mut last_count = 0;
        let mut last_progress = Instant::now();
        loop {
            for p in procs.iter_mut() {
                p.sample();
            }
            let count = counter.count(target_topic, self.partitions).unwrap_or(0);
            let at = t0.elapsed().as_secs_f64();
            if count > last_count {
                last_count = count;
                last_progress = Instant::now();
            }
            if count > 0 && first.is_none() {
                first = Some((at, count));
            }
            samples.push((at, count));
            if count >= n {
                let broker_cpu = cpu_of(self.brokers) - broker_cpu0;
                // Processes that end by themselves are measured to their exit (flush
                // included); the worker as it is now.
                let settle = Instant::now();
                while procs.iter().any(|p| p.exits_by_itself && p.exit.is_none())
                    && settle.elapsed() < Duration::from_secs(30)
                {
                    std::thread::sleep(Duration::from_millis(10));
                    for p in procs.iter_mut().filter(|p| p.exits_by_itself) {
                        p.sample();
                    }
                }
                for p in procs.iter() {
                    if let Some(status) = p.exit {
                        if !status.success() {
                            bail!("{} exited with {status}", p.name);
                        }
                    }
                }
                let (t_first, n_first) = first.unwrap_or((at, count));
                let steady_rate = stats::steady_rate(&samples, n).unwrap_or(
                    if at - t_first > 0.2 && n > n_first {
                        (n - n_first) as f64 / (at - t_first)
                    } else {
                        n as f64 / at
                    },
                );
                // A final count: anything beyond `n` is a duplicate.
                let final_count = counter
                    .count(target_topic, self.partitions)
                    .unwrap_or(count);
                return Ok(Measured {
                    contender: c,
                    size: self.size,
                    round: self.round,
                    records: n,
                    wall: at,
                    startup: t_first,
                    steady_rate,
                    cpu: procs.iter().map(|p| p.cpu).sum(),
                    broker_cpu,
                    peak_rss_kib: procs.iter().map(|p| p.hwm_kib).sum(),
                    peak_anon_kib: procs.iter().map(|p| p.anon_kib).sum(),
                    peak_file_kib: procs.iter().map(|p| p.file_kib).sum(),
                    extra: final_count.saturating_sub(n),
                    notes: Vec::new(),
                });
            }
            for p in procs.iter() {
                if let Some(status) = p.exit {
                    if !status.success() || !p.exits_by_itself {
                        bail!(
                            "{} exited with {status} after {last_count} of {n} records reached the target",
                            p.name
                        );
                    }
                }
            }
            if procs.iter().all(|p| p.exit.is_some())
                && last_progress.elapsed() > Duration::from_secs(5)
            {
                bail!("{c:?} exited, but only {last_count} of {n} records reached the target");
            }
            if t0.elapsed() > self.timeout {
                bail!(
                    "{c:?} did not copy {n} records within {:?} ({last_count} arrived)",
                    self.timeout
                );
            }
            std::thread::sleep(self.poll);
        }
    }
}

/// The flow the worker runs (one per topic and round, so progress starts empty).
/// `key=value,key=value` from `var`, as a YAML `config:` block (empty when unset).
fn config_block(var: &str) -> String {
    let entries: String = std::env::var(var)
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| format!("\n      {}: \"{}\"", k.trim(), v.trim()))
        .collect();
    if entries.is_empty() {
        String::new()
    } else {
        format!("\n    config:{entries}")
    }
}

/// The flow's `spec.workers.inFlightMiB` (`MIRRORFLOW_BENCH_IN_FLIGHT_MIB`, default 16: the
/// API's default).
fn in_flight_mib() -> u64 {
    env_u64("MIRRORFLOW_BENCH_IN_FLIGHT_MIB", 16).clamp(1, 1024)
}

fn flow_yaml(run: &Run<'_>, port: u16) -> String {
    // Tuning experiments: `MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG=key=value,key=value` lands
    // in `spec.source.config` (the worker's consumer), e.g. `queued.max.messages.kbytes=4096`;
    // `MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG` in `spec.target.config` (its producer).
    let source_config = config_block("MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG");
    let target_config = config_block("MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG");
    format!(
        "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata:
  name: bench-{topic}-r{round}-{port}
spec:
  source:
    alias: {alias}
    bootstrapServers: \"{src}\"{source_config}
  target:
    alias: dc2
    bootstrapServers: \"{tgt}\"{target_config}
  topics:
    include: [\"{topic}\"]
  # nisshi refuses transactions.
  delivery: AtLeastOnce
  offsetValidation:
    enabled: true
  offsetSyncs:
    lagMax: {lag}
  workers:
    inFlightMiB: {in_flight}
",
        lag = env_u64("MIRRORFLOW_BENCH_LAG_MAX", 100).max(1),
        in_flight = in_flight_mib(),
        topic = run.topic,
        round = run.round,
        alias = run.alias(),
        src = run.src,
        tgt = run.tgt,
    )
}

/// After the copy: waits until the worker's status shows every partition at the source end
/// (progress committed), and reads batch and sync counts from /metrics.
fn worker_report(run: &Run<'_>, port: u16) -> anyhow::Result<Vec<String>> {
    let mut counter = TargetCounter::new(run.src)?;
    let ends = counter
        .ends(run.topic, run.partitions)
        .context("source high watermarks")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut notes = Vec::new();
    loop {
        let status: serde_json::Value = serde_json::from_str(&http_get(port, "/status")?)?;
        let positions: BTreeMap<i64, i64> = status["partitions"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| Some((p["partition"].as_i64()?, p["position"].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let done = ends
            .iter()
            .enumerate()
            .all(|(p, end)| positions.get(&(p as i64)) == Some(end));
        if done {
            break;
        }
        if Instant::now() > deadline {
            notes.push(format!(
                "worker status did not show every position at the source end within 20 s (state {})",
                status["state"]
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = http_get(port, "/metrics")?;
    let batches = metric_sum(
        &metrics,
        "mirrorflow_worker_batches_total{outcome=\"committed\"}",
    );
    let retried = metric_sum(
        &metrics,
        "mirrorflow_worker_batches_total{outcome=\"retried\"}",
    );
    let syncs = metric_sum(&metrics, "mirrorflow_worker_offset_syncs_total");
    let errors = metric_sum(&metrics, "mirrorflow_worker_errors_total");
    if batches > 0.0 {
        notes.push(format!(
            "{batches:.0} batches committed ({:.0} records/batch), {retried:.0} retried, {syncs:.0} offset syncs, {errors:.0} errors",
            run.records as f64 / batches
        ));
    }
    Ok(notes)
}

/// Stops a process still running: SIGTERM (graceful), then SIGKILL after 20 s.
fn stop(p: &mut Proc) {
    if p.exit.is_some() || matches!(p.child.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(p.pid().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = p.child.try_wait() {
            p.exit = Some(status);
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = p.child.kill();
    p.exit = p.child.wait().ok();
}

// ---------------------------------------------------------------------------------------
// kcat's librdkafka
// ---------------------------------------------------------------------------------------

/// Whether `kcat` (with `libdir` on the library path, if any) can list the broker's metadata.
fn kcat_works(libdir: Option<&Path>, bootstrap: &str) -> bool {
    let mut cmd = Command::new("kcat");
    if let Some(dir) = libdir {
        cmd.env("LD_LIBRARY_PATH", dir);
    }
    cmd.args(["-L", "-b", bootstrap, "-m", "5"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The newest `librdkafka.a` rdkafka-sys built in this target directory.
fn find_librdkafka_a() -> Option<PathBuf> {
    // <target>/<profile>/deps/replication-<hash> → <target>/<profile>/build
    let exe = std::env::current_exe().ok()?;
    let build = exe.parent()?.parent()?.join("build");
    std::fs::read_dir(&build)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("rdkafka-sys-"))
        .map(|e| e.path().join("out/lib/librdkafka.a"))
        .filter(|p| p.is_file())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// A directory holding a `librdkafka.so.1` kcat can use against nisshi, or why not.
fn kcat_libdir(bootstrap: &str) -> Result<PathBuf, String> {
    if Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        return Err("kcat is not installed (Debian package `kcat`)".to_string());
    }
    if let Some(dir) = std::env::var_os("MIRRORFLOW_BENCH_KCAT_LIBDIR") {
        let dir = PathBuf::from(dir);
        return if kcat_works(Some(&dir), bootstrap) {
            Ok(dir)
        } else {
            Err(format!(
                "kcat with MIRRORFLOW_BENCH_KCAT_LIBDIR={} cannot reach nisshi",
                dir.display()
            ))
        };
    }
    let archive = find_librdkafka_a().ok_or("no librdkafka.a from rdkafka-sys found")?;
    let dir = archive
        .parent()
        .and_then(Path::parent)
        .ok_or("unexpected rdkafka-sys layout")?
        .join("kcat-shim");
    let so = dir.join("librdkafka.so.1");
    let fresh = |so: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(so), m(&archive)), (Some(a), Some(b)) if a >= b)
    };
    if !fresh(&so) {
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new("cc")
            .args(["-shared", "-o"])
            .arg(&so)
            .args(["-Wl,-soname,librdkafka.so.1", "-Wl,--whole-archive"])
            .arg(&archive)
            .args(["-Wl,--no-whole-archive", "-Wl,--no-undefined"])
            .args([
                "-lssl",
                "-lcrypto",
                "-lz",
                "-lzstd",
                "-lpthread",
                "-lm",
                "-ldl",
            ])
            .output()
            .map_err(|e| format!("running cc: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "linking {} from {} failed: {}",
                so.display(),
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    if kcat_works(Some(&dir), bootstrap) {
        Ok(dir)
    } else {
        Err(format!("kcat with {} cannot reach nisshi", so.display()))
    }
}

// ---------------------------------------------------------------------------------------
// The bench
// ---------------------------------------------------------------------------------------

fn mirrorflow_bin() -> PathBuf {
    std::env::var_os("MIRRORFLOW_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mirrorflow")))
}

fn start_broker(rt: &tokio::runtime::Runtime) -> Result<LocalBroker, BrokerError> {
    rt.block_on(LocalBroker::start(BrokerKind::Nisshi))
}

fn run() -> anyhow::Result<()> {
    // The brokers inherit our environment, and a debug RUST_LOG slows nisshi down by two
    // orders of magnitude: only the worker gets one, from MIRRORFLOW_BENCH_WORKER_RUST_LOG.
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
    let broker_pids = children_named("nisshi");
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
    let kcat = kcat_libdir(&src);
    println!("replication bench: nisshi source {src}, target {tgt} (memory storage), 2 brokers pids {broker_pids:?}");
    println!(
        "  {} cores; mirrorflow binary {}; kcat: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        bin.display(),
        match &kcat {
            Ok(dir) => format!("Debian kcat 1.7.1 with librdkafka from {}", dir.display()),
            Err(e) => format!("not run ({e})"),
        }
    );
    let mut results: Vec<Measured> = Vec::new();
    let mut failures: Vec<String> = Vec::new();

    let sizes: Vec<(usize, u64)> = [(100usize, cfg.records_100), (1024, cfg.records_1k)]
        .into_iter()
        .filter(|(size, _)| cfg.wants(&size.to_string()))
        .collect();
    for (size, n) in &sizes {
        let topic = format!("src-{size}");
        rt.block_on(brokers::create_topic(&src, &topic, cfg.partitions, &[]))?;
        let t = Instant::now();
        produce_source(&src, &topic, *n, cfg.partitions, *size)?;
        println!(
            "  produced {n} × {size} B records to {topic} ({} partitions) in {:.1} s",
            cfg.partitions,
            t.elapsed().as_secs_f64()
        );
    }
    for round in 0..cfg.rounds {
        for (size, n) in &sizes {
            let topic = format!("src-{size}");
            let run = Run {
                src: &src,
                tgt: &tgt,
                topic: &topic,
                partitions: cfg.partitions,
                records: *n,
                size: *size,
                round,
                poll: POLL,
                timeout: cfg.timeout,
                brokers: &broker_pids,
                logs: logs.path(),
                kcat_libdir: kcat.as_deref().ok(),
                mirrorflow_bin: &bin,
                rt: &rt,
                alias_suffix: "",
            };
            // The order turns each round: a run right after another contender's target topic
            // was deleted may share the broker with that clean-up, and no contender should
            // always be the one that does.
            let mut order = [Contender::Bare, Contender::Mirrorflow, Contender::Kcat];
            order.rotate_left(round % 3);
            for c in order {
                if c == Contender::Kcat && kcat.is_err() {
                    continue;
                }
                match run.measure(c) {
                    Ok(m) => {
                        println!(
                            "  round {round}: {:<26} {size:>5} B  {:>9.0} records/s  wall {:>6.2} s",
                            c.label(),
                            m.steady_rate,
                            m.wall
                        );
                        results.push(m);
                    }
                    Err(e) => {
                        let msg = format!("{} {size} B round {round}: {e:#}", c.label());
                        eprintln!("  FAILED {msg}");
                        failures.push(msg);
                    }
                }
            }
        }
    }

    // Peak RSS with many partitions: a light run (per-partition cost) and a loaded one.
    let mut rss: Vec<Measured> = Vec::new();
    let mut idle_rss: Vec<(String, (u64, u64, u64))> = Vec::new();
    if cfg.wants("rss") {
        let parts = cfg.rss_partitions;
        let runs = [
            (
                "rss-light",
                cfg.rss_light_records_per_partition,
                &[Contender::Mirrorflow][..],
            ),
            (
                "rss-loaded",
                cfg.rss_records_per_partition,
                &[Contender::Mirrorflow, Contender::Bare][..],
            ),
        ];
        for (topic, per_partition, contenders) in runs {
            let n = per_partition * parts as u64;
            let t = Instant::now();
            if let Err(e) = rt.block_on(brokers::create_topic(&src, topic, parts, &[])) {
                failures.push(format!(
                    "RSS run: creating {topic} ({parts} partitions): {e}"
                ));
                continue;
            }
            let created_in = t.elapsed().as_secs_f64();
            let t = Instant::now();
            produce_source(&src, topic, n, parts, 1024)?;
            println!(
                "  created {topic} ({parts} partitions) in {created_in:.1} s, produced {n} × 1 KB records in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let run = Run {
                src: &src,
                tgt: &tgt,
                topic,
                partitions: parts,
                records: n,
                size: 1024,
                round: 0,
                poll: Duration::from_millis(200),
                timeout: cfg.timeout,
                brokers: &broker_pids,
                logs: logs.path(),
                kcat_libdir: kcat.as_deref().ok(),
                mirrorflow_bin: &bin,
                rt: &rt,
                alias_suffix: "",
            };
            // Peak RSS depends on how much data happens to be in flight: every round
            // counts, the worst is reported.
            for round in 0..cfg.rounds {
                let run = Run { round, ..run };
                for c in contenders {
                    match run.measure(*c) {
                        Ok(m) => rss.push(m),
                        Err(e) => failures.push(format!(
                            "RSS run {topic} round {round}, {}: {e:#}",
                            c.label()
                        )),
                    }
                }
            }
        }
        let idle = Run {
            src: &src,
            tgt: &tgt,
            topic: "bench-no-such-topic",
            partitions: 1,
            records: 0,
            size: 0,
            round: 0,
            poll: POLL,
            timeout: cfg.timeout,
            brokers: &broker_pids,
            logs: logs.path(),
            kcat_libdir: None,
            mirrorflow_bin: &bin,
            rt: &rt,
            alias_suffix: "",
        };
        match idle.idle_worker_rss(Duration::from_secs(6)) {
            Ok(r) => idle_rss.push(("no offset syncs".to_string(), r)),
            Err(e) => failures.push(format!("idle worker RSS: {e:#}")),
        }
        // A restarted worker reads its offset-syncs topic whole (checkpoint side): the
        // same idle worker over a history of syncs.
        let history = Run {
            alias_suffix: "-hist",
            ..idle
        };
        let syncs = cfg.rss_sync_history;
        let produced = produce_sync_history(&tgt, &history.alias(), "rss-loaded", parts, syncs);
        match produced.and_then(|()| history.idle_worker_rss(Duration::from_secs(10))) {
            Ok(r) => idle_rss.push((format!("{syncs} offset syncs to read"), r)),
            Err(e) => failures.push(format!("idle worker RSS with sync history: {e:#}")),
        }
    }

    print_report(&cfg, &results, &rss, &idle_rss, &failures);
    if keep_logs {
        println!("  logs kept in {}", logs.keep().display());
    }
    drop((source, target));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------

/// Steady-rate ratios `a / b` of the rounds where both ran at `size` (see
/// [`stats::paired_ratios`]: the host's speed moves by ±15 % over minutes here).
fn paired_ratios(results: &[Measured], size: usize, a: Contender, b: Contender) -> Vec<f64> {
    let rates = |c: Contender| -> Vec<(usize, f64)> {
        results
            .iter()
            .filter(|m| m.size == size && m.contender == c)
            .map(|m| (m.round, m.steady_rate))
            .collect()
    };
    stats::paired_ratios(&rates(a), &rates(b))
}

/// `median (min–max of n rounds)` of ratios, formatted with `fmt`.
fn spread(xs: &[f64], fmt: impl Fn(f64) -> String) -> String {
    match median(xs) {
        None => "-".to_string(),
        Some(m) if xs.len() == 1 => fmt(m),
        Some(m) => {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{} (rounds {}–{})", fmt(m), fmt(lo), fmt(hi))
        }
    }
}

/// The median run (by steady records/s) of each (size, contender).
fn medians(results: &[Measured]) -> BTreeMap<(usize, Contender), Measured> {
    let mut by: BTreeMap<(usize, Contender), Vec<&Measured>> = BTreeMap::new();
    for m in results {
        by.entry((m.size, m.contender)).or_default().push(m);
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.steady_rate.total_cmp(&b.steady_rate));
            (k, v[v.len() / 2].clone())
        })
        .collect()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn print_report(
    cfg: &Config,
    results: &[Measured],
    rss: &[Measured],
    idle_rss: &[(String, (u64, u64, u64))],
    failures: &[String],
) {
    let med = medians(results);
    println!();
    println!(
        "Replication throughput — {} partitions, nisshi → nisshi on one host, {} round(s){}",
        cfg.partitions,
        cfg.rounds,
        if cfg.rounds > 1 {
            " (median shown)"
        } else {
            ""
        }
    );
    println!(
        "mirrorflow: delivery AtLeastOnce (nisshi refuses transactions), offset validation on, offset syncs every {} records, {} MiB in flight",
        env_u64("MIRRORFLOW_BENCH_LAG_MAX", 100).max(1),
        in_flight_mib()
    );
    println!(
        "{:<26} {:>6} {:>9} {:>7} {:>7} {:>10} {:>7} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "contender",
        "size",
        "records",
        "wall s",
        "start s",
        "records/s",
        "MB/s",
        "CPU ms/MB",
        "brk ms/MB",
        "peak RSS",
        "vs bare",
        "vs kcat"
    );
    for ((size, c), m) in &med {
        let ratio = |other: Contender| {
            median(&paired_ratios(results, *size, *c, other))
                .map(|r| format!("{r:.2}×"))
                .unwrap_or_else(|| "-".to_string())
        };
        println!(
            "{:<26} {:>6} {:>9} {:>7.2} {:>7.2} {:>10.0} {:>7.1} {:>9.2} {:>9.2} {:>5.1} MiB {:>7} {:>7}",
            c.label(),
            if *size == 1024 { "1 KB".to_string() } else { format!("{size} B") },
            m.records,
            m.wall,
            m.startup,
            m.steady_rate,
            m.steady_rate * *size as f64 / 1e6,
            1000.0 * m.cpu / m.mb(),
            1000.0 * m.broker_cpu / m.mb(),
            mib(m.peak_rss_kib),
            ratio(Contender::Bare),
            ratio(Contender::Kcat),
        );
    }
    for ((size, c), m) in &med {
        if m.extra > 0 {
            println!(
                "  {} {size} B: {} duplicate records on the target",
                c.label(),
                m.extra
            );
        }
        for note in &m.notes {
            println!("  {} {size} B: {note}", c.label());
        }
        if *c == Contender::Mirrorflow {
            println!(
                "  {} {size} B: end-to-end (start-up included) {:.0} records/s",
                c.label(),
                m.end_to_end_rate()
            );
        }
    }
    println!(
        "records/s and MB/s: steady rate: slope of records on the target over time while 10-90 % of them arrived;"
    );
    println!(
        "CPU ms/MB: the contender's processes only; brk ms/MB: both brokers; peak RSS: VmHWM (kcat: both processes);"
    );
    println!(
        "vs bare, vs kcat: median over rounds of the ratio within a round (the contenders' order turns each round)."
    );

    if !rss.is_empty() {
        println!();
        println!(
            "Peak RSS with {} partitions, 1 KB records (heap = sampled RssAnon, file-backed = sampled RssFile)",
            cfg.rss_partitions
        );
        // The worst run of each (load, contender), with every run's peak.
        let mut groups: BTreeMap<(u64, Contender), Vec<&Measured>> = BTreeMap::new();
        for m in rss {
            groups.entry((m.records, m.contender)).or_default().push(m);
        }
        for ((records, contender), runs) in &groups {
            let Some(m) = runs.iter().max_by_key(|m| m.peak_rss_kib) else {
                continue;
            };
            let peaks: Vec<String> = runs
                .iter()
                .map(|m| format!("{:.1}", mib(m.peak_rss_kib)))
                .collect();
            println!(
                "{:<26} {:>4} rec/partition: peak RSS {:>6.1} MiB (heap ≤ {:.1}, file-backed ≤ {:.1}); {} records in {:.1} s ({:.0} records/s end to end), CPU {:.2} s; peaks of {} run(s): {} MiB",
                contender.label(),
                records / cfg.rss_partitions.max(1) as u64,
                mib(m.peak_rss_kib),
                mib(m.peak_anon_kib),
                mib(m.peak_file_kib),
                m.records,
                m.wall,
                m.end_to_end_rate(),
                m.cpu,
                runs.len(),
                peaks.join(", ")
            );
            for note in &m.notes {
                println!("  {note}");
            }
        }
        for (what, (hwm, anon, file)) in idle_rss {
            println!(
                "{:<26} {:>4} partitions:    peak RSS {:>6.1} MiB (heap ≤ {:.1}, file-backed ≤ {:.1}); flow selecting no topic, {what}",
                "mirrorflow idle worker",
                0,
                mib(*hwm),
                mib(*anon),
                mib(*file)
            );
        }
    }

    println!();
    println!("Targets");
    for (size, _) in med.keys().filter(|(_, c)| *c == Contender::Mirrorflow) {
        let label = if *size == 1024 {
            "1 KB".to_string()
        } else {
            format!("{size} B")
        };
        let vs_bare = paired_ratios(results, *size, Contender::Mirrorflow, Contender::Bare);
        match median(&vs_bare) {
            Some(r) => println!(
                "  {:<52} {:>8.1} %   {}   {}",
                format!("mirrorflow ≥ 90 % of the bare loop, {label}"),
                r * 100.0,
                verdict(r >= 0.9),
                spread(&vs_bare, |x| format!("{:.1} %", x * 100.0))
            ),
            None => println!("  mirrorflow vs bare loop, {label}: bare loop not measured"),
        }
        let vs_kcat = paired_ratios(results, *size, Contender::Mirrorflow, Contender::Kcat);
        match median(&vs_kcat) {
            Some(r) => println!(
                "  {:<52} {:>8.2} ×   {}   {}",
                format!("mirrorflow ≥ 2× the kcat pipe, {label}"),
                r,
                verdict(r >= 2.0),
                spread(&vs_kcat, |x| format!("{x:.2}×"))
            ),
            None => println!("  mirrorflow vs kcat pipe, {label}: kcat not measured"),
        }
        if let Some(r) = median(&paired_ratios(
            results,
            *size,
            Contender::Bare,
            Contender::Kcat,
        )) {
            println!(
                "  {:<52} {:>8.2} ×   (reference: what the kcat target asks of a copy loop here)",
                format!("bare loop vs the kcat pipe, {label}"),
                r
            );
        }
    }
    // Judged on the worst loaded run (the most records per partition).
    let loaded = rss.iter().map(|m| m.records).max().unwrap_or(0);
    if let Some(m) = rss
        .iter()
        .filter(|m| m.contender == Contender::Mirrorflow && m.records == loaded)
        .max_by_key(|m| m.peak_rss_kib)
    {
        let peak = mib(m.peak_rss_kib);
        println!(
            "  {:<52} {:>6.1} MiB   {}",
            format!(
                "worker peak RSS ≤ 64 MiB, {} partitions",
                cfg.rss_partitions
            ),
            peak,
            verdict(peak <= RSS_TARGET_MIB)
        );
    }
    for f in failures {
        println!("  NOT MEASURED: {f}");
    }
}
