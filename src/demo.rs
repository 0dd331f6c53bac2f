//! `mirrorflow demo`: two local brokers, a source topic with records, a standalone worker
//! running an example flow, the target consumed and compared, and a short report. Offline,
//! no Kubernetes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio::sync::watch;

use crate::api::{PartitionFailure, WorkerState};
use crate::testkit::brokers::{self, BrokerKind, ConsumeUntil, LocalBroker};
use crate::worker::replicate::{self, WorkerArgs, WorkerSnapshot};

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
    /// nisshi is the most faithful but takes ~17 minutes to `cargo install`; `mock` is
    /// librdkafka's in-process cluster (no install; slow to consume, 5 MiB per partition).
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
  # nisshi refuses transactions and tansu does not filter aborted records: the demo's
  # brokers can only show ExactlyOnce honestly as AtLeastOnce.
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
    let flow_path = dir.path().join("demo-flow.yaml");
    std::fs::write(&flow_path, demo_flow_yaml(&src, &tgt))?;
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let worker_args = WorkerArgs {
        flow: Some(flow_path.clone()),
        flow_ref: None,
        worker_index: Some(0),
        worker_count: 1,
        listen,
        secrets_dir: dir.path().join("secrets"),
        checkpoints_file: None,
        flow_reload_seconds: 5,
    };
    let (input, watcher) = replicate::watch_flow_file(&flow_path, Duration::from_secs(5))?;
    let (snap_tx, mut snap_rx) = watch::channel::<Option<WorkerSnapshot>>(None);
    let sink = Arc::new(SnapshotSink(snap_tx));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let worker = tokio::spawn(replicate::run_with(worker_args, input, vec![sink], async {
        let _ = stop_rx.await;
    }));

    // Read the source once: its records are the reference for the comparison below, and the
    // offset after each partition's last record is its end. Watermarks would be simpler, but
    // tansu's high watermark is "last batch base + 1" when the producer batches (a tansu bug:
    // `tests/brokers_smoke.rs` shows it).
    let until = |n: u64| ConsumeUntil::count(n as usize).timeout(Duration::from_secs(120));
    let src_records = brokers::consume_all(&src, "orders", until(args.records)).await?;
    let ends = source_ends(args.partitions, &src_records);

    // Wait until every partition's committed position reaches the source's end.
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let last = loop {
        let snap = snap_rx.borrow_and_update().clone();
        if let Some(s) = &snap {
            if s.state == WorkerState::Failed {
                bail!(
                    "the worker failed: {}",
                    s.message.clone().unwrap_or_default()
                );
            }
            // The worker also replicates the source's heartbeats (spec.heartbeats).
            let orders: Vec<_> = s
                .partitions
                .iter()
                .filter(|p| p.topic == "orders")
                .collect();
            let done = orders.len() == ends.len()
                && orders
                    .iter()
                    .all(|p| p.position.is_some() && p.position >= ends.get(&p.partition).copied());
            if done {
                break s.clone();
            }
        }
        if Instant::now() > deadline || worker.is_finished() {
            bail!(
                "replication did not finish within {} s; last status: {}",
                args.timeout_seconds,
                serde_json::to_string(&snap).unwrap_or_default()
            );
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), snap_rx.changed()).await;
    };
    let replicate_secs = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(());
    worker.await.context("worker task")?.context("worker")?;
    watcher.abort();

    // Compare the target with the source, record by record.
    // Read the target to its end (not just `records` of it), so duplicates are counted.
    let tgt_records = brokers::consume_all(
        &tgt,
        "dc1.orders",
        ConsumeUntil::idle(Duration::from_secs(2)).timeout(Duration::from_secs(120)),
    )
    .await?;
    let mut mismatches = 0usize;
    let by_key = |rs: &[brokers::ConsumedRecord]| {
        let mut m: BTreeMap<(i32, Vec<u8>), Vec<brokers::ConsumedRecord>> = BTreeMap::new();
        for r in rs {
            m.entry((r.partition, r.key.clone().unwrap_or_default()))
                .or_default()
                .push(r.clone());
        }
        m
    };
    let (s_map, t_map) = (by_key(&src_records), by_key(&tgt_records));
    for (k, s) in &s_map {
        let t = t_map.get(k);
        let same = t.is_some_and(|t| {
            t.len() >= s.len()
                && s.iter().zip(t.iter()).all(|(a, b)| {
                    a.value == b.value && a.headers == b.headers && a.timestamp_ms == b.timestamp_ms
                })
        });
        if !same {
            mismatches += 1;
        }
    }
    let duplicates = tgt_records.len().saturating_sub(src_records.len());
    let mb = (args.records * (args.value_bytes + 16)) as f64 / 1e6;

    println!();
    println!("  replication report (flow demo, worker demo-worker-0)");
    println!("  ─────────────────────────────────────────────────────");
    println!("  records on source              {:>12}", src_records.len());
    println!("  records on target (dc1.orders) {:>12}", tgt_records.len());
    println!("  missing or different records   {:>12}", mismatches);
    println!("  duplicates                     {:>12}", duplicates);
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
    if mismatches > 0 || tgt_records.len() < src_records.len() {
        bail!("the target does not hold every source record");
    }
    println!("  every record arrived with its key, value, headers, timestamp and partition");
    drop((source, target));
    Ok(())
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

impl replicate::StatusSink for SnapshotSink {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        self.0.send_replace(Some(snapshot.clone()));
    }
}

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
