//! Helpers for `tests/replication.rs`: run engines in-process against local brokers, wait for
//! conditions (bounded), compare source and target record by record.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorflow::api::{ClusterSpec, Delivery, MirrorFlowSpec, ReplicationPolicyType, StartFrom};
use mirrorflow::telemetry::http::{get_text, Readiness};
use mirrorflow::telemetry::metrics::WorkerMetrics;
use mirrorflow::testkit::brokers::{
    broker_or_skip, consume_all, shared_kafka_or_skip, BrokerKind, ConsumeUntil, ConsumedRecord,
    LocalBroker, ProduceRecord,
};
use mirrorflow::worker::process::args::WorkerArgs;
use mirrorflow::worker::process::flow_file::watch_flow_file;
use mirrorflow::worker::process::sinks::WorkerSink;
use mirrorflow::worker::process::wiring::run_with;
use mirrorflow::worker::replicate::batch::BatchLimits;
use mirrorflow::worker::replicate::writer::ProducerLimits;
use mirrorflow::worker::replicate::{
    Engine, EngineError, EngineOutputs, EngineSettings, StatusSink, Tuning, WorkerSnapshot,
};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

pub const BASE_TS: i64 = 1_700_000_000_000;
/// Upper bound of every wait in these tests (the machine is shared; generous on purpose).
pub const WAIT: Duration = Duration::from_secs(90);

/// A source and a target broker of `kind`; `None` (the test is skipped, as
/// [`broker_or_skip`] says) when the broker binary is missing.
pub async fn broker_pair(kind: BrokerKind) -> Option<(LocalBroker, LocalBroker)> {
    Some((broker_or_skip(kind).await?, broker_or_skip(kind).await?))
}

/// The Apache Kafka source and target this test binary's tests share (one node each,
/// started by the first test that asks). Their tests use names of their own ([`unique`])
/// and flows that select only their own topics without heartbeats ([`shared_flow_spec`]).
pub async fn shared_pair() -> Option<(LocalBroker, LocalBroker)> {
    Some((
        shared_kafka_or_skip("source").await?,
        shared_kafka_or_skip("target").await?,
    ))
}

/// An Apache Kafka source and target of this test's own (one node each, started side by
/// side): for tests that stop brokers, select every topic or own the `heartbeats` topics.
pub async fn kafka_pair() -> Option<(LocalBroker, LocalBroker)> {
    let (source, target) = tokio::join!(
        broker_or_skip(BrokerKind::Kafka),
        broker_or_skip(BrokerKind::Kafka)
    );
    Some((source?, target?))
}

/// `base` made unique to this run of this test on a shared cluster: nextest runs every test,
/// and every retry of it, in a process of its own, so a retry never finds the topics, groups
/// or progress of the attempt before it. (Under `cargo test` the tests share a process:
/// their `base`s differ.)
pub fn unique(base: &str) -> String {
    format!("{base}-{}", std::process::id())
}

/// [`flow_spec`] for shared clusters: heartbeats off. The source's `heartbeats` topic is
/// replicated by every flow whatever `topics` selects, so one flow's heartbeats would become
/// a partition of every later test's flow (heartbeats are tested on clusters of their own).
pub fn shared_flow_spec(
    source: &LocalBroker,
    target: &LocalBroker,
    delivery: Delivery,
) -> MirrorFlowSpec {
    let mut spec = flow_spec(source, target, delivery);
    spec.heartbeats.interval_seconds = 0;
    spec
}

/// A flow spec from `source` to `target` (aliases dc1 → dc2), refreshing topics every second.
pub fn flow_spec(source: &LocalBroker, target: &LocalBroker, delivery: Delivery) -> MirrorFlowSpec {
    let mut spec: MirrorFlowSpec = serde_json::from_value(serde_json::json!({
        "source": {"alias": "dc1", "bootstrapServers": source.bootstrap_servers()},
        "target": {"alias": "dc2", "bootstrapServers": target.bootstrap_servers()},
    }))
    .expect("spec");
    spec.delivery = delivery;
    spec.topics.refresh_interval_seconds = 1;
    spec.start_from = StartFrom::Earliest;
    spec.source = ClusterSpec {
        alias: "dc1".into(),
        bootstrap_servers: source.bootstrap_servers(),
        ..Default::default()
    };
    spec.target = ClusterSpec {
        alias: "dc2".into(),
        bootstrap_servers: target.bootstrap_servers(),
        ..Default::default()
    };
    spec
}

/// Sets `topics.include`.
pub fn include(mut spec: MirrorFlowSpec, patterns: &[&str]) -> MirrorFlowSpec {
    spec.topics.include = patterns.iter().map(|s| s.to_string()).collect();
    spec
}

/// Sets the naming policy.
pub fn policy(mut spec: MirrorFlowSpec, t: ReplicationPolicyType) -> MirrorFlowSpec {
    spec.replication_policy.type_ = t;
    spec
}

/// Test tuning: small batches (so crashes land between batches), fast retries.
pub fn test_tuning(max_records: usize) -> Tuning {
    Tuning {
        batch: BatchLimits {
            max_records,
            max_bytes: 1024 * 1024,
            linger: Duration::from_millis(20),
        },
        producer: ProducerLimits {
            transaction_timeout: Duration::from_secs(20),
            commit_timeout: Duration::from_secs(20),
            delivery_timeout: Duration::from_secs(20),
            ..ProducerLimits::default()
        },
        io_timeout: Duration::from_secs(10),
        status_interval: Duration::from_millis(200),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_secs(2),
        shutdown_grace: Duration::from_secs(10),
        ..Tuning::default()
    }
}

/// A running in-process worker.
pub struct Worker {
    pub task: JoinHandle<Result<(), EngineError>>,
    stop: Option<oneshot::Sender<()>>,
    pub status: watch::Receiver<WorkerSnapshot>,
    pub spec: watch::Sender<MirrorFlowSpec>,
    pub metrics: WorkerMetrics,
    pub readiness: Arc<Readiness>,
}

/// Starts worker `index` of `count` for flow `name`.
pub fn start_worker(
    name: &str,
    spec: MirrorFlowSpec,
    index: u32,
    count: u32,
    tuning: Tuning,
) -> Worker {
    start_worker_after_scale_down(name, spec, index, count, tuning, Vec::new())
}

/// [`start_worker`] for a flow whose workers `retired` were scaled away.
pub fn start_worker_after_scale_down(
    name: &str,
    spec: MirrorFlowSpec,
    index: u32,
    count: u32,
    tuning: Tuning,
    retired: Vec<u32>,
) -> Worker {
    // Engine logs (stderr) when asked for, e.g. RUST_LOG=mirrorflow=debug.
    if std::env::var_os("RUST_LOG").is_some() {
        mirrorflow::telemetry::logging::init(mirrorflow::telemetry::logging::LogFormat::Text);
    }
    let (spec_tx, spec_rx) = watch::channel(spec.clone());
    let (status_tx, status_rx) = watch::channel(WorkerSnapshot::starting(
        "test",
        name,
        index,
        count,
        spec.delivery,
    ));
    let metrics = WorkerMetrics::new().unwrap();
    let readiness = Readiness::new("starting");
    let sink: Arc<dyn StatusSink> = Arc::new(status_tx);
    let settings = EngineSettings {
        namespace: "test".into(),
        flow_name: name.into(),
        worker_index: index,
        worker_count: count,
        secrets_dir: std::env::temp_dir(),
        tuning,
        retired_workers: retired,
    };
    let engine = Engine::new(
        settings,
        spec_rx,
        EngineOutputs {
            metrics: metrics.clone(),
            sink,
            readiness: readiness.clone(),
            health: mirrorflow::kafka::health::FlowHealth::new(
                &spec.source.alias,
                &spec.target.alias,
            ),
        },
    )
    .expect("engine");
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(engine.run(async {
        let _ = stop_rx.await;
    }));
    Worker {
        task,
        stop: Some(stop_tx),
        status: status_rx,
        spec: spec_tx,
        metrics,
        readiness,
    }
}

impl Worker {
    /// Graceful stop (like SIGTERM); returns the engine's result.
    pub async fn stop(mut self) -> Result<(), EngineError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(WAIT, &mut self.task)
            .await
            .expect("worker stops within the bound")
            .expect("engine task")
    }

    /// Crash: the task is dropped wherever it is (no flush, no abort).
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Waits until `pred` holds for the latest snapshot; panics with the last snapshot.
    pub async fn wait_status(
        &mut self,
        what: &str,
        pred: impl Fn(&WorkerSnapshot) -> bool,
    ) -> WorkerSnapshot {
        let begin = Instant::now();
        loop {
            {
                let s = self.status.borrow_and_update();
                if pred(&s) {
                    return s.clone();
                }
            }
            if self.task.is_finished() {
                let s = self.status.borrow().clone();
                panic!(
                    "worker ended while waiting for {what}; last status: {}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            if begin.elapsed() > WAIT {
                let s = self.status.borrow().clone();
                panic!(
                    "timed out waiting for {what}; last status: {}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), self.status.changed()).await;
        }
    }

    /// Waits until every owned partition replicates and the total position reaches `records`
    /// beyond each partition's start (positions summed).
    pub async fn wait_positions(
        &mut self,
        topic: &str,
        want: &BTreeMap<i32, i64>,
    ) -> WorkerSnapshot {
        let want = want.clone();
        let topic = topic.to_string();
        self.wait_status(&format!("positions of {topic} reach {want:?}"), move |s| {
            want.iter().all(|(p, off)| {
                s.partitions.iter().any(|x| {
                    x.topic == topic
                        && x.partition == *p
                        && x.position.is_some_and(|pos| pos >= *off)
                })
            })
        })
        .await
    }
}

/// Records for `topic`: `n` per partition, with keys, values, headers (one null), explicit
/// timestamps; plus a tombstone and a null-key record on partition 0.
/// `records`, every third value padded to `len` bytes: records the worker streams from
/// their fetch event without a copy (from `HELD_MIN_BYTES`) mixed with copied ones.
pub fn records_some_large(tag: &str, partitions: i32, n: i32, len: usize) -> Vec<ProduceRecord> {
    let mut out = records(tag, partitions, n);
    for r in out.iter_mut().step_by(3) {
        if let Some(v) = r.value.as_mut() {
            v.resize(len.max(v.len()), b'.');
        }
    }
    out
}

pub fn records(tag: &str, partitions: i32, n: i32) -> Vec<ProduceRecord> {
    let mut out = Vec::new();
    for i in 0..n {
        for p in 0..partitions {
            out.push(
                ProduceRecord::new(format!("{tag}-k{p}-{i}"), format!("{tag}-v{p}-{i}"))
                    .partition(p)
                    .header("idx", Some(i.to_string().as_bytes()))
                    .header("null", None)
                    .timestamp(BASE_TS + i64::from(i)),
            );
        }
    }
    out.push(ProduceRecord {
        partition: Some(0),
        key: Some(format!("{tag}-tombstone").into_bytes()),
        value: None,
        headers: vec![],
        timestamp_ms: Some(BASE_TS + 500),
    });
    out.push(ProduceRecord {
        partition: Some(0),
        key: None,
        value: Some(format!("{tag}-nokey").into_bytes()),
        headers: vec![("h".into(), Some(b"x".to_vec()))],
        timestamp_ms: Some(BASE_TS + 501),
    });
    out
}

/// What must survive replication: (partition, key, value, headers, timestamp), per partition
/// in order. Offsets are not compared (the target numbers its own).
pub type Content = (
    i32,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
    Option<i64>,
);

pub fn content(records: &[ConsumedRecord]) -> Vec<Content> {
    records
        .iter()
        .map(|r| {
            (
                r.partition,
                r.key.clone(),
                r.value.clone(),
                r.headers.clone(),
                r.timestamp_ms,
            )
        })
        .collect()
}

/// Reads `topic` until `n` records arrived.
pub async fn read_n(bootstrap: &str, topic: &str, n: usize) -> Vec<ConsumedRecord> {
    consume_all(bootstrap, topic, ConsumeUntil::count(n).timeout(WAIT))
        .await
        .unwrap_or_else(|e| panic!("reading {n} records of {topic}: {e}"))
}

/// Reads `topic` until nothing new arrives for `idle`.
pub async fn read_idle(bootstrap: &str, topic: &str, idle: Duration) -> Vec<ConsumedRecord> {
    consume_all(bootstrap, topic, ConsumeUntil::idle(idle).timeout(WAIT))
        .await
        .unwrap_or_else(|e| panic!("reading {topic}: {e}"))
}

/// Asserts source and target hold the same records, partition by partition, in order.
pub fn assert_same(source: &[ConsumedRecord], target: &[ConsumedRecord], what: &str) {
    let s = content(source);
    let t = content(target);
    assert_eq!(s.len(), t.len(), "{what}: record counts differ");
    for (i, (a, b)) in s.iter().zip(&t).enumerate() {
        assert_eq!(a, b, "{what}: record #{i} differs");
    }
}

/// Decoded offset syncs of the target's syncs topic: (topic, partition, u, d, sequence).
pub fn decode_syncs(
    records: &[ConsumedRecord],
) -> Vec<(String, i32, i64, i64, mirrorflow::kafka::wire::SyncSequence)> {
    use mirrorflow::kafka::wire::{OffsetSync, SyncSequence, SYNC_SEQUENCE_HEADER};
    records
        .iter()
        .map(|r| {
            let s = OffsetSync::decode(r.key.as_deref().unwrap(), r.value.as_deref().unwrap())
                .expect("sync decodes");
            let h = r
                .headers
                .iter()
                .find(|(k, _)| k == SYNC_SEQUENCE_HEADER)
                .and_then(|(_, v)| v.clone())
                .expect("sync sequence header");
            (
                s.topic,
                s.partition,
                s.upstream_offset,
                s.downstream_offset,
                SyncSequence::decode(&h).unwrap(),
            )
        })
        .collect()
}

/// Checks the offset syncs of one source topic against the data: every sync points at the
/// target copy of its source record; between two consecutive syncs of one emitter the
/// mapping is linear or a single gap (the writer contract); the last source record of every
/// partition is covered by a sync.
pub fn check_syncs(
    topic: &str,
    source: &[ConsumedRecord],
    target: &[ConsumedRecord],
    syncs: &[(String, i32, i64, i64, mirrorflow::kafka::wire::SyncSequence)],
) {
    let by = |rs: &[ConsumedRecord]| -> BTreeMap<(i32, i64), Content> {
        rs.iter()
            .zip(content(rs))
            .map(|(r, c)| ((r.partition, r.offset), c))
            .collect()
    };
    let (src, dst) = (by(source), by(target));
    let mine: Vec<_> = syncs.iter().filter(|s| s.0 == topic).collect();
    assert!(!mine.is_empty(), "no offset syncs for {topic}");
    for (_, p, u, d, _) in &mine {
        let s = src
            .get(&(*p, *u))
            .unwrap_or_else(|| panic!("sync {topic}/{p} ({u},{d}): no source record at {u}"));
        let t = dst
            .get(&(*p, *d))
            .unwrap_or_else(|| panic!("sync {topic}/{p} ({u},{d}): no target record at {d}"));
        assert_eq!(s, t, "sync {topic}/{p} ({u},{d}) maps different records");
    }
    let partitions: std::collections::BTreeSet<i32> = mine.iter().map(|s| s.1).collect();
    let pairs: Vec<(_, _)> = partitions
        .iter()
        .flat_map(|p| {
            let of_p: Vec<_> = mine.iter().filter(|s| s.1 == *p).copied().collect();
            of_p.windows(2).map(|w| (w[0], w[1])).collect::<Vec<_>>()
        })
        .collect();
    for (a, b) in pairs {
        if !a.4.is_followed_by(&b.4) {
            continue;
        }
        let p = a.1;
        if b.2 - a.2 == b.3 - a.3 {
            for k in 0..=(b.2 - a.2) {
                if let Some(s) = src.get(&(p, a.2 + k)) {
                    assert_eq!(
                        Some(s),
                        dst.get(&(p, a.3 + k)),
                        "linear span {a:?}..{b:?} at +{k}"
                    );
                }
            }
        } else {
            // A gap: the two syncs are consecutive replicated records, so no record lies
            // strictly between them on either side.
            for u in (a.2 + 1)..b.2 {
                assert!(
                    !src.contains_key(&(p, u)),
                    "gap span {a:?}..{b:?} skips source offset {u}"
                );
            }
            for d in (a.3 + 1)..b.3 {
                assert!(
                    !dst.contains_key(&(p, d)),
                    "gap span {a:?}..{b:?} skips target offset {d}"
                );
            }
        }
    }
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for r in source {
        last.insert(r.partition, r.offset);
    }
    for (p, u) in last {
        assert!(
            mine.iter().any(|s| s.1 == p && s.2 == u),
            "last record {topic}/{p}@{u} has no sync"
        );
    }
}

/// Asserts `target` is `source` replicated with at most one rewind per partition (a crash
/// re-replicates from the last committed position): per partition, target = src[..a] ++
/// src[b..] with b ≤ a and a − b ≤ `max_dup`. Returns the duplicates per partition.
pub fn assert_no_loss_bounded_dups(
    source: &[ConsumedRecord],
    target: &[ConsumedRecord],
    max_dup: usize,
    what: &str,
) -> BTreeMap<i32, usize> {
    let mut dups = BTreeMap::new();
    let parts: std::collections::BTreeSet<i32> = source.iter().map(|r| r.partition).collect();
    for p in parts {
        let s: Vec<Content> = content(
            &source
                .iter()
                .filter(|r| r.partition == p)
                .cloned()
                .collect::<Vec<_>>(),
        );
        let t: Vec<Content> = content(
            &target
                .iter()
                .filter(|r| r.partition == p)
                .cloned()
                .collect::<Vec<_>>(),
        );
        assert!(
            t.len() >= s.len(),
            "{what}/{p}: target has {} records, source {}: records lost",
            t.len(),
            s.len()
        );
        let extra = t.len() - s.len();
        assert!(
            extra <= max_dup,
            "{what}/{p}: {extra} duplicates, more than {max_dup}"
        );
        // The target starts with a prefix src[..a]; then src[b..] follows with b = a − extra.
        let a = t.iter().zip(&s).take_while(|(x, y)| x == y).count();
        if extra == 0 {
            assert_eq!(a, s.len(), "{what}/{p}: target differs from source at #{a}");
        } else {
            assert!(
                a >= extra,
                "{what}/{p}: {extra} extra records but only {a} before the first difference"
            );
            let b = a - extra;
            assert_eq!(
                &t[a..],
                &s[b..],
                "{what}/{p}: after the rewind from {a} to {b}"
            );
        }
        dups.insert(p, extra);
    }
    dups
}

/// Creates a topic on any broker kind (the mock has no admin API).
pub async fn create(broker: &LocalBroker, topic: &str, partitions: i32) {
    broker
        .create_topic(topic, partitions, &[])
        .await
        .unwrap_or_else(|e| panic!("create {topic}: {e}"));
}

/// Source positions after producing `recs` to a topic starting empty: partition → count.
pub fn ends(recs: &[ProduceRecord]) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for r in recs {
        *out.entry(r.partition.unwrap_or(0)).or_insert(0) += 1;
    }
    out
}

/// Topic configs set on the topic itself (DescribeConfigs, source = topic override).
pub async fn topic_configs(bootstrap: &str, topic: &str) -> BTreeMap<String, String> {
    use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap();
    let res = admin
        .describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new())
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for r in res {
        for e in r.unwrap().entries {
            if e.source == ConfigSource::DynamicTopic {
                out.insert(e.name, e.value.unwrap_or_default());
            }
        }
    }
    out
}

/// Arguments of a standalone worker (index 0 of 1) for the flow file `flow`, serving HTTP on
/// a free loopback port.
pub fn standalone_args(flow: &Path, secrets_dir: &Path) -> WorkerArgs {
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port");
    WorkerArgs {
        flow: Some(flow.to_path_buf()),
        flow_ref: None,
        worker_index: Some(0),
        worker_count: 1,
        listen,
        secrets_dir: secrets_dir.to_path_buf(),
        checkpoints_file: None,
        flow_reload_seconds: 1,
    }
}

/// A standalone worker (`run_with`) following its flow file, as `mirrorflow worker --flow`.
pub struct Standalone {
    /// Where it serves HTTP.
    pub addr: SocketAddr,
    /// The flow's namespace, as read from the file.
    pub namespace: String,
    task: JoinHandle<anyhow::Result<()>>,
    stop: oneshot::Sender<()>,
    watcher: JoinHandle<()>,
}

impl Standalone {
    /// Starts a worker with `args` (the file re-read every 200 ms), reporting to `sinks`.
    pub fn start(args: &WorkerArgs, sinks: Vec<Arc<dyn WorkerSink>>) -> Self {
        if std::env::var_os("RUST_LOG").is_some() {
            mirrorflow::telemetry::logging::init(mirrorflow::telemetry::logging::LogFormat::Text);
        }
        let flow = args
            .flow
            .clone()
            .expect("a standalone worker has a flow file");
        let (input, watcher) = watch_flow_file(&flow, Duration::from_millis(200)).unwrap();
        let namespace = input.namespace.clone();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(run_with(args.clone(), input, sinks, async {
            let _ = stop_rx.await;
        }));
        Self {
            addr: args.listen,
            namespace,
            task,
            stop,
            watcher,
        }
    }

    /// Stops it as SIGTERM would and waits for a clean exit.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        self.watcher.abort();
    }
}

/// GETs `path` until it answers 200 with a body for which `pred` holds (bounded by [`WAIT`]).
pub async fn wait_http(
    addr: SocketAddr,
    path: &str,
    what: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let begin = Instant::now();
    loop {
        let last = match get_text(addr, path).await {
            Ok((200, body)) if pred(&body) => return body,
            Ok((code, body)) => format!("{code} {body}"),
            Err(e) => e.to_string(),
        };
        assert!(
            begin.elapsed() < WAIT,
            "{what}: GET {path}: last answer {last}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
