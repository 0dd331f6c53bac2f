//! Consumer-group checkpoints on Apache Kafka (two nodes of each test's own, source and
//! target: the checkpoint runner lists every group of the source).
//!
//! The replication engine is simulated: the same records are produced to the source topic
//! and to its replica on the target (so offsets match), and offset syncs are written to the
//! target's `mm2-offset-syncs.<sourceAlias>.internal` following the writer contract of
//! `worker/checkpoint/translate.rs`: the first record, every `lag_max`-th record and the
//! last replicated record, each tagged with the `mirrorflow.sync.seq` header (or, for the
//! "MM2" topics, without it).
//!
//! The checkpoints topic is decoded here by an independent decoder written from MM2's format
//! (Kafka's `org.apache.kafka.connect.mirror.Checkpoint`: key group, topic, partition; value
//! version 0, upstream, downstream, metadata), not by `kafka::wire`.
//!
//! Skipped (with a `SKIPPED` line) when Kafka's jars are not fetched, unless
//! `MIRRORFLOW_REQUIRE_BROKERS=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use mirrorflow::api::{parse_flow_file, FlowFile, GroupFailureReason, OffsetCheckpoint};
use mirrorflow::cli::flow_source::FlowSource;
use mirrorflow::cli::translate::{plan_apply, run_translate, translate_group, TranslateArgs};
use mirrorflow::kafka::admin::{GroupAdmin, GroupOffset};
use mirrorflow::kafka::Code;
use mirrorflow::telemetry::metrics::encode_registry;
use mirrorflow::testkit::brokers::{
    broker_or_skip, consume_all, create_topic, delete_topic, produce, watermarks, BrokerKind,
    ConsumeUntil, LocalBroker, ProduceRecord,
};
use mirrorflow::worker::checkpoint::runner::{statuses, CheckpointRunner};
use mirrorflow::worker::checkpoint::status::{checkpoint_status, worker_reports, RunnerState};
use pretty_assertions::assert_eq;
use prometheus::Registry;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use tokio::sync::{oneshot, watch};

const SOURCE_ALIAS: &str = "src";
const SYNCS_TOPIC: &str = "mm2-offset-syncs.src.internal";
const CHECKPOINTS_TOPIC: &str = "src.checkpoints.internal";
const WAIT: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------
// Set-up helpers

struct Clusters {
    source: LocalBroker,
    target: LocalBroker,
    dir: tempfile::TempDir,
}

impl Clusters {
    async fn start() -> Option<Clusters> {
        let (source, target) = tokio::join!(
            broker_or_skip(BrokerKind::Kafka),
            broker_or_skip(BrokerKind::Kafka)
        );
        Some(Clusters {
            source: source?,
            target: target?,
            dir: tempfile::tempdir().unwrap(),
        })
    }

    fn src(&self) -> String {
        self.source.bootstrap_servers()
    }

    fn dst(&self) -> String {
        self.target.bootstrap_servers()
    }

    /// The flow file text with one OffsetCheckpoint `cp` selecting `include`.
    fn flow_yaml(&self, include: &str, sync: bool) -> String {
        format!(
            r#"apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata:
  name: flow
spec:
  source:
    alias: {SOURCE_ALIAS}
    bootstrapServers: "{}"
  target:
    alias: dst
    bootstrapServers: "{}"
  delivery: AtLeastOnce
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata:
  name: cp
  generation: 1
spec:
  flowRef:
    name: flow
  groups:
    include: ["{include}"]
    refreshIntervalSeconds: 1
  intervalSeconds: 1
  syncGroupOffsets: {sync}
"#,
            self.src(),
            self.dst()
        )
    }

    fn flow(&self, include: &str, sync: bool) -> FlowFile {
        parse_flow_file(&self.flow_yaml(include, sync)).unwrap()
    }

    fn write_flow_file(&self, include: &str, sync: bool) -> std::path::PathBuf {
        let path = self.dir.path().join("flow.yaml");
        std::fs::write(&path, self.flow_yaml(include, sync)).unwrap();
        path
    }

    fn secrets(&self) -> &Path {
        self.dir.path()
    }
}

fn config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

fn admin(bootstrap: &str) -> GroupAdmin {
    GroupAdmin::new(&config(bootstrap), bootstrap, Duration::from_secs(30)).unwrap()
}

fn value(topic: &str, p: i32, i: i64) -> Vec<u8> {
    format!("{topic}-{p}-{i}").into_bytes()
}

/// Simulated replication of `topic`: `total` records per partition on the source, the
/// first `replicated` of them on the target as `src.<topic>` (same offsets), and offset
/// syncs per the writer contract (sequence header when `sequenced`).
#[allow(clippy::too_many_arguments)]
async fn replicate(
    c: &Clusters,
    topic: &str,
    partitions: i32,
    total: i64,
    replicated: i64,
    lag_max: i64,
    sequenced: bool,
) {
    let target_topic = format!("{SOURCE_ALIAS}.{topic}");
    create_topic(&c.src(), topic, partitions, &[])
        .await
        .unwrap();
    create_topic(&c.dst(), &target_topic, partitions, &[])
        .await
        .unwrap();
    ensure_syncs_topic(&c.dst()).await;
    let mut syncs = Vec::new();
    for p in 0..partitions {
        let records: Vec<ProduceRecord> = (0..total)
            .map(|i| ProduceRecord::new(format!("k{i}"), value(topic, p, i)).partition(p))
            .collect();
        let src = produce(&c.src(), topic, &records).await.unwrap();
        let dst = produce(&c.dst(), &target_topic, &records[..replicated as usize])
            .await
            .unwrap();
        for (i, d) in dst.iter().enumerate() {
            assert_eq!(
                d.offset, src[i].offset,
                "simulated replication keeps offsets"
            );
        }
        let mut points: Vec<i64> = (0..replicated).step_by(lag_max as usize).collect();
        if replicated > 0 && points.last() != Some(&(replicated - 1)) {
            points.push(replicated - 1);
        }
        for (seq, u) in points.into_iter().enumerate() {
            syncs.push(sync_record(
                topic,
                p,
                u,
                u,
                sequenced.then_some((7, seq as i64)),
            ));
        }
    }
    produce(&c.dst(), SYNCS_TOPIC, &syncs).await.unwrap();
}

async fn ensure_syncs_topic(bootstrap: &str) {
    let exists = mirrorflow::testkit::brokers::topic_partitions(bootstrap, SYNCS_TOPIC)
        .await
        .unwrap()
        .is_some();
    if !exists {
        // Not compacted here, so no broker-side compaction can make a test nondeterministic.
        create_topic(bootstrap, SYNCS_TOPIC, 1, &[]).await.unwrap();
    }
}

/// An offset-sync record built from the documented format (not `kafka::wire`).
fn sync_record(topic: &str, p: i32, u: i64, d: i64, seq: Option<(i64, i64)>) -> ProduceRecord {
    let mut key = (topic.len() as i16).to_be_bytes().to_vec();
    key.extend_from_slice(topic.as_bytes());
    key.extend_from_slice(&p.to_be_bytes());
    let mut val = u.to_be_bytes().to_vec();
    val.extend_from_slice(&d.to_be_bytes());
    let mut r = ProduceRecord::new(key, val).partition(0);
    if let Some((epoch, n)) = seq {
        let mut h = epoch.to_be_bytes().to_vec();
        h.extend_from_slice(&n.to_be_bytes());
        r = r.header("mirrorflow.sync.seq", Some(&h));
    }
    r
}

/// Group `group` reads the first `counts[p]` records of each partition of `topic` on the
/// source and commits (a real consumer of that group). Returns what it read.
async fn consume_on_source(
    bootstrap: &str,
    group: &str,
    topic: &str,
    counts: &[usize],
) -> BTreeMap<i32, Vec<Vec<u8>>> {
    let (bootstrap, group, topic, counts) = (
        bootstrap.to_string(),
        group.to_string(),
        topic.to_string(),
        counts.to_vec(),
    );
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config(&bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut read = BTreeMap::new();
        for (p, &count) in counts.iter().enumerate() {
            let p = p as i32;
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
            consumer.assign(&tpl).unwrap();
            let mut got: Vec<Vec<u8>> = Vec::new();
            let mut last = None;
            let deadline = Instant::now() + WAIT;
            while got.len() < count {
                assert!(Instant::now() < deadline, "source consumer stalled");
                if let Some(m) = consumer.poll(Duration::from_millis(100)) {
                    let m = m.unwrap();
                    if m.partition() == p {
                        got.push(m.payload().unwrap().to_vec());
                        last = Some(m.offset());
                    }
                }
            }
            if let Some(last) = last {
                let mut commit = TopicPartitionList::new();
                commit
                    .add_partition_offset(&topic, p, Offset::Offset(last + 1))
                    .unwrap();
                consumer.commit(&commit, CommitMode::Sync).unwrap();
            }
            read.insert(p, got);
        }
        read
    })
    .await
    .unwrap()
}

/// Commits offsets for `group` on a cluster directly (like a consumer that stopped there).
async fn commit(bootstrap: &str, group: &str, offsets: &[(&str, i32, i64)]) {
    let offsets: Vec<GroupOffset> = offsets
        .iter()
        .map(|(t, p, o)| GroupOffset {
            topic: t.to_string(),
            partition: *p,
            offset: *o,
            metadata: String::new(),
        })
        .collect();
    let group = group.to_string();
    // A cluster just started may still be electing or loading the group's coordinator
    // (the client's own few rounds can pass within that): the commit is asked again.
    let begin = Instant::now();
    loop {
        let (a, commits) = (admin(bootstrap), vec![(group.clone(), offsets.clone())]);
        let r = tokio::task::spawn_blocking(move || a.alter_offsets(&commits))
            .await
            .unwrap();
        let moving = r.iter().any(|r| {
            r.as_ref().is_err_and(|e| {
                e.error_code().is_some_and(|c| {
                    c == Code::NOT_COORDINATOR
                        || c == Code::COORDINATOR_NOT_AVAILABLE
                        || c == Code::COORDINATOR_LOAD_IN_PROGRESS
                })
            })
        });
        if !moving || begin.elapsed() > Duration::from_secs(30) {
            r.into_iter().for_each(|r| r.unwrap());
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Committed offsets of `group` by (topic, partition).
async fn committed(bootstrap: &str, group: &str) -> BTreeMap<(String, i32), i64> {
    let a = admin(bootstrap);
    let group = group.to_string();
    tokio::task::spawn_blocking(move || a.list_offsets(&[group]))
        .await
        .unwrap()
        .pop()
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|o| ((o.topic, o.partition), o.offset))
        .collect()
}

/// Polls `check` until it yields a value (bounded by [`WAIT`]; running into it fails the
/// test with `what`).
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Running {
    state: watch::Receiver<RunnerState>,
    specs: watch::Sender<Vec<OffsetCheckpoint>>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    registry: Registry,
}

impl Running {
    fn start(c: &Clusters, file: &FlowFile) -> Running {
        let registry = Registry::new();
        let runner =
            CheckpointRunner::new(&file.flow, file.checkpoints.clone(), c.secrets(), &registry)
                .unwrap();
        let state = runner.state();
        let specs = runner.specs();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(runner.run(async move {
            let _ = rx.await;
        }));
        Running {
            state,
            specs,
            stop: Some(tx),
            task,
            registry,
        }
    }

    /// Waits until the spec `cp` completed `n` more group syncs than now (they run beside
    /// the cycles, so they may finish after the cycle that planned them).
    async fn group_syncs(&self, n: u64) {
        let syncs = |s: &RunnerState| s.specs.get("cp").map_or(0, |s| s.group_syncs);
        let start = syncs(&self.state.borrow());
        wait_for(&format!("{n} more group sync(s)"), || {
            let done = syncs(&self.state.borrow()) >= start + n;
            async move { done.then_some(()) }
        })
        .await;
    }

    /// Waits until the spec `cp` completed `n` more cycles than now.
    async fn cycles(&self, n: u64) {
        let cycles = |s: &RunnerState| s.specs.get("cp").map_or(0, |s| s.cycles);
        let start = cycles(&self.state.borrow());
        wait_for(&format!("{n} more cycle(s)"), || {
            let done = cycles(&self.state.borrow()) >= start + n;
            async move { done.then_some(()) }
        })
        .await;
    }

    fn metric(&self, name: &str) -> f64 {
        encode_registry(&self.registry)
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse().unwrap())
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.await.unwrap().unwrap();
    }
}

/// A checkpoint record as decoded by the independent decoder below.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DecodedCheckpoint {
    record_partition: i32,
    group: String,
    topic: String,
    partition: i32,
    upstream: i64,
    downstream: i64,
    metadata: String,
}

/// Decodes a checkpoint record from the documented format: key = group STRING, topic
/// STRING, partition INT32; value = version INT16 (0), upstream INT64, downstream INT64,
/// metadata STRING; STRING = INT16 length + UTF-8, all big-endian.
fn decode_checkpoint(record_partition: i32, key: &[u8], value: &[u8]) -> DecodedCheckpoint {
    fn string(b: &[u8], at: &mut usize) -> String {
        let len = i16::from_be_bytes([b[*at], b[*at + 1]]);
        *at += 2;
        if len < 0 {
            return String::new();
        }
        let s = std::str::from_utf8(&b[*at..*at + len as usize])
            .unwrap()
            .to_string();
        *at += len as usize;
        s
    }
    fn int<const N: usize>(b: &[u8], at: &mut usize) -> [u8; N] {
        let a: [u8; N] = b[*at..*at + N].try_into().unwrap();
        *at += N;
        a
    }
    let mut k = 0;
    let group = string(key, &mut k);
    let topic = string(key, &mut k);
    let partition = i32::from_be_bytes(int::<4>(key, &mut k));
    assert_eq!(k, key.len(), "no trailing key bytes");
    let mut v = 0;
    let version = i16::from_be_bytes(int::<2>(value, &mut v));
    assert_eq!(version, 0, "checkpoint value version");
    let upstream = i64::from_be_bytes(int::<8>(value, &mut v));
    let downstream = i64::from_be_bytes(int::<8>(value, &mut v));
    let metadata = string(value, &mut v);
    assert_eq!(v, value.len(), "no trailing value bytes");
    DecodedCheckpoint {
        record_partition,
        group,
        topic,
        partition,
        upstream,
        downstream,
        metadata,
    }
}

/// Every checkpoint record on the target, in order.
async fn read_checkpoints(bootstrap: &str) -> Vec<DecodedCheckpoint> {
    consume_all(
        bootstrap,
        CHECKPOINTS_TOPIC,
        ConsumeUntil::idle(Duration::from_millis(800)),
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| {
        decode_checkpoint(
            r.partition,
            r.key.as_deref().unwrap(),
            r.value.as_deref().unwrap(),
        )
    })
    .collect()
}

/// A failover consumer of `group` on the target: subscribes to `topics` and reads from the
/// group's committed offsets (earliest where none) until every partition is at its end.
/// Returns what it read per (topic, partition).
async fn failover_read(
    bootstrap: &str,
    group: &str,
    topics: &[(&str, i32)],
) -> BTreeMap<(String, i32), Vec<Vec<u8>>> {
    // Records each partition holds from the group's start position (topics are contiguous).
    let starts = committed(bootstrap, group).await;
    let mut remaining: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (topic, parts) in topics {
        for p in 0..*parts {
            let (low, high) = watermarks(bootstrap, topic, p).await.unwrap();
            let key = (topic.to_string(), p);
            let from = starts.get(&key).copied().unwrap_or(low);
            remaining.insert(key, high - from);
        }
    }
    let (bootstrap, group) = (bootstrap.to_string(), group.to_string());
    let topics: Vec<String> = topics.iter().map(|(t, _)| t.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config(&bootstrap)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            // Partitions without a committed offset: the source group had none either.
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&refs).unwrap();
        let mut read: BTreeMap<(String, i32), Vec<Vec<u8>>> = BTreeMap::new();
        let deadline = Instant::now() + WAIT;
        while remaining.values().any(|n| *n > 0) {
            assert!(
                Instant::now() < deadline,
                "failover consumer stalled: {remaining:?}"
            );
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Err(e)) => panic!("failover consumer: {e}"),
                Some(Ok(m)) => {
                    let key = (m.topic().to_string(), m.partition());
                    *remaining.get_mut(&key).unwrap() -= 1;
                    read.entry(key)
                        .or_default()
                        .push(m.payload().unwrap().to_vec());
                }
            }
        }
        read
    })
    .await
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// Tests

/// A group consumed part of two topics on the source; after checkpoint + sync, the same
/// group on the target reads exactly what it had not consumed: nothing skipped; with
/// sequenced syncs (contiguous topic) nothing re-read, not even for the fully caught-up
/// partition; with MM2-style syncs (no header) at most `lag_max` re-reads per partition.
/// Also: the checkpoints topic decodes independently and matches the commits, the status
/// folds to Ready, and `mirrorflow translate` shows the same offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_reads_exactly_the_unconsumed_records() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    const LAG_MAX: i64 = 40;
    replicate(&c, "orders", 3, 250, 250, LAG_MAX, true).await;
    replicate(&c, "legacy", 2, 120, 120, LAG_MAX, false).await;
    let consumed_orders = consume_on_source(&c.src(), "app", "orders", &[137, 250, 3]).await;
    let consumed_legacy = consume_on_source(&c.src(), "app", "legacy", &[57, 100]).await;
    let source_committed = committed(&c.src(), "app").await;
    assert_eq!(source_committed.len(), 5, "{source_committed:?}");

    let file = c.flow("app", true);
    let running = Running::start(&c, &file);
    let expected_partitions = 5;
    wait_for("the target group to be synced", || {
        let s = running.state.borrow().clone();
        async move {
            let g = s.specs.get("cp")?.groups.get("app")?.clone();
            (g.synced && g.partitions == expected_partitions).then_some(())
        }
    })
    .await;
    running.cycles(1).await;
    let state = running.state.borrow().clone();
    let status = statuses(&state, &file.checkpoints, jiff::Timestamp::now());
    let (_, status) = &status[0];
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Checkpointing"),
        "{status:?}"
    );
    assert_eq!(status.groups_checkpointed, 1);
    assert!(status.failures.is_empty(), "{:?}", status.failures);
    let reported_lag = status.groups[0].target_lag;
    let exact = running.metric("mirrorflow_checkpoint_translations_total{kind=\"exact\"}");
    let safe = running.metric("mirrorflow_checkpoint_translation_fallbacks_total{kind=\"safe\"}");
    assert!(exact > 0.0 && safe > 0.0, "exact {exact}, safe {safe}");
    assert!(running.metric("mirrorflow_checkpoint_written_total{checkpoint=\"cp\"}") >= 5.0);
    running.stop().await;

    // The checkpoints topic, decoded independently, matches the target group's commits.
    let target_committed = committed(&c.dst(), "app").await;
    let mut lag = 0;
    for ((topic, p), at) in &target_committed {
        lag += watermarks(&c.dst(), topic, *p).await.unwrap().1 - at;
    }
    assert_eq!(reported_lag, Some(lag), "status targetLag");
    let records = read_checkpoints(&c.dst()).await;
    let mut last: BTreeMap<(String, String, i32), DecodedCheckpoint> = BTreeMap::new();
    for r in &records {
        assert_eq!(
            r.record_partition, 0,
            "checkpoints go to partition 0: {r:?}"
        );
        last.insert((r.group.clone(), r.topic.clone(), r.partition), r.clone());
    }
    assert_eq!(last.len(), 5, "{records:?}");
    for ((group, topic, p), r) in &last {
        assert_eq!(group, "app");
        let source_topic = topic
            .strip_prefix("src.")
            .expect("target topic names in keys");
        assert_eq!(
            r.upstream,
            source_committed[&(source_topic.to_string(), *p)],
            "{r:?}"
        );
        assert_eq!(
            Some(&r.downstream),
            target_committed.get(&(topic.clone(), *p)),
            "{r:?}"
        );
        assert_eq!(r.metadata, "");
    }

    // `mirrorflow translate` reads the same.
    let args = TranslateArgs {
        source: FlowSource::file(c.write_flow_file("app", true), c.secrets().to_path_buf()),
        output: Default::default(),
        group: "app".into(),
        apply: false,
        timeout_seconds: 30,
    };
    let report = translate_group(&args).await.unwrap();
    assert_eq!(report.rows.len(), 5);
    for row in &report.rows {
        let r = &last[&("app".to_string(), row.topic.clone(), row.partition)];
        assert_eq!(
            (row.source_offset, row.target_offset),
            (r.upstream, r.downstream)
        );
        assert_eq!(row.target_committed, Some(r.downstream));
    }

    // Fail over: the same group on the target.
    let read = failover_read(&c.dst(), "app", &[("src.orders", 3), ("src.legacy", 2)]).await;
    let mut duplicates: BTreeMap<(String, i32), usize> = BTreeMap::new();
    for (topic, consumed, parts, total) in [
        ("orders", &consumed_orders, 3, 250),
        ("legacy", &consumed_legacy, 2, 120),
    ] {
        for p in 0..parts {
            let key = (format!("src.{topic}"), p);
            let got: Vec<Vec<u8>> = read.get(&key).cloned().unwrap_or_default();
            let done: BTreeSet<&Vec<u8>> = consumed[&p].iter().collect();
            let unconsumed: Vec<Vec<u8>> = (0..total)
                .map(|i| value(topic, p, i))
                .filter(|v| !done.contains(v))
                .collect();
            let got_set: BTreeSet<&Vec<u8>> = got.iter().collect();
            let skipped: Vec<String> = unconsumed
                .iter()
                .filter(|v| !got_set.contains(v))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .collect();
            assert!(skipped.is_empty(), "{key:?}: skipped {skipped:?}");
            let dups = got.iter().filter(|v| done.contains(v)).count();
            duplicates.insert(key, dups);
        }
    }
    eprintln!("re-read records per partition after failover: {duplicates:?}");
    for ((topic, p), dups) in &duplicates {
        if topic == "src.orders" {
            assert_eq!(
                *dups, 0,
                "{topic}/{p}: sequenced syncs on a contiguous topic re-read nothing"
            );
        } else {
            assert!(
                *dups as i64 <= LAG_MAX,
                "{topic}/{p}: {dups} re-reads exceed lag_max"
            );
        }
    }
    // MM2's rule (d + 1) re-reads between syncs: 57 lies between syncs 40 and 80.
    assert_eq!(duplicates[&("src.legacy".to_string(), 0)], 57 - 41);
}

/// Replication behind the group, and a target truncated below the syncs: the translated
/// offsets never pass the target's end (no negative lag), and the group on the target
/// still misses nothing that was replicated.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lagging_replication_never_yields_negative_lag() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    // "lagging": 300 on the source, 120 replicated so far.
    replicate(&c, "lagging", 1, 300, 120, 50, true).await;
    // "truncated": the syncs claim 200 replicated records, but the target holds only 90
    // (e.g. recreated): the translation must be clamped.
    replicate(&c, "truncated", 1, 300, 90, 50, true).await;
    produce(
        &c.dst(),
        SYNCS_TOPIC,
        &[sync_record("truncated", 0, 199, 199, Some((7, 4)))],
    )
    .await
    .unwrap();
    commit(
        &c.src(),
        "laggard",
        &[("lagging", 0, 250), ("truncated", 0, 250)],
    )
    .await;

    let running = Running::start(&c, &c.flow("laggard", true));
    wait_for("the laggard group to be synced", || {
        let s = running.state.borrow().clone();
        async move {
            let g = s.specs.get("cp")?.groups.get("laggard")?.clone();
            (g.synced && g.partitions == 2).then_some(())
        }
    })
    .await;
    let lag = running.state.borrow().specs["cp"].groups["laggard"].target_lag;
    assert_eq!(lag, Some(0), "the group is past everything replicated");
    assert!(
        running.metric("mirrorflow_checkpoint_translation_fallbacks_total{kind=\"clamped\"}")
            >= 1.0
    );
    running.stop().await;

    let target = committed(&c.dst(), "laggard").await;
    for (topic, end_expected) in [("src.lagging", 120), ("src.truncated", 90)] {
        let (_, high) = watermarks(&c.dst(), topic, 0).await.unwrap();
        assert_eq!(high, end_expected);
        let at = target[&(topic.to_string(), 0)];
        assert!(
            at <= high,
            "{topic}: committed {at} past the end {high} (negative lag)"
        );
        // Nothing replicated is skipped: everything below the end was consumed on the
        // source (offsets < 250), so the position must be exactly the end.
        assert_eq!(at, high, "{topic}");
    }
    for r in read_checkpoints(&c.dst()).await {
        let (_, high) = watermarks(&c.dst(), &r.topic, r.partition).await.unwrap();
        assert!(
            r.downstream <= high,
            "checkpoint past the target end: {r:?}"
        );
    }
}

/// A flow without OffsetCheckpoints holds no checkpoint clients and creates nothing. One that
/// arrives while the runner waits (applied to a running flow: the worker's mounted file
/// changes) is run at once; when the last one is deleted the runner disconnects, and a new
/// one connects it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checkpoints_added_and_removed_on_a_running_flow() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    replicate(&c, "later", 1, 100, 100, 10, true).await;
    commit(&c.src(), "later-app", &[("later", 0, 40)]).await;
    let mut file = c.flow("later-app", true);
    let checkpoints = std::mem::take(&mut file.checkpoints);
    let running = Running::start(&c, &file);
    // Let it reach its wait: the change must arrive while it waits, as in a running worker.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !running.state.borrow().started,
        "started without a checkpoint"
    );
    let topic = mirrorflow::testkit::brokers::topic_partitions(&c.dst(), CHECKPOINTS_TOPIC).await;
    assert_eq!(
        topic.unwrap(),
        None,
        "checkpoints topic created without a checkpoint"
    );

    running.specs.send_replace(checkpoints.clone());
    let synced = |running: &Running| {
        let s = running.state.borrow().clone();
        s.specs
            .get("cp")
            .and_then(|s| s.groups.get("later-app"))
            .is_some_and(|g| g.synced)
    };
    wait_for("the added checkpoint to sync later-app", || {
        let done = synced(&running);
        async move { done.then_some(()) }
    })
    .await;
    let target = committed(&c.dst(), "later-app").await;
    assert_eq!(target.get(&("src.later".to_string(), 0)), Some(&40));

    running.specs.send_replace(vec![]);
    wait_for("the runner to disconnect", || {
        let s = running.state.borrow().clone();
        async move { (!s.started && s.specs.is_empty() && s.sync_partitions == 0).then_some(()) }
    })
    .await;

    // Connected again: the group moved on the source meanwhile, and follows.
    commit(&c.src(), "later-app", &[("later", 0, 70)]).await;
    running.specs.send_replace(checkpoints);
    wait_for("the group to follow after reconnecting", || {
        let dst = c.dst();
        async move {
            let at = committed(&dst, "later-app").await;
            (at.get(&("src.later".to_string(), 0)) == Some(&70)).then_some(())
        }
    })
    .await;
    assert!(running.state.borrow().started);
    running.stop().await;
}

/// A runner that cannot start says why in the report of every OffsetCheckpoint it would run
/// (their status turns `CheckpointFailed` with the error), and stops retrying, error cleared,
/// once they are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_cannot_start_says_why_until_its_checkpoint_goes() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    let mut file = c.flow("later-app", true);
    // A replication factor the target refuses for the checkpoints topic (Kafka answers
    // INVALID_REPLICATION_FACTOR above its broker count, here one).
    file.flow.spec.internal_topics.replication_factor = Some(2);
    let running = Running::start(&c, &file);
    let error = wait_for("the start-up to fail", || {
        let e = running.state.borrow().startup_error.clone();
        async move { e }
    })
    .await;
    assert!(error.contains(CHECKPOINTS_TOPIC), "{error}");
    let reports = || worker_reports(&running.state.borrow(), &file.checkpoints, Timestamp::now());
    let reported = reports();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert_eq!(reported[0].name, "cp");
    assert_eq!(reported[0].error.as_deref(), Some(error.as_str()));
    let status = checkpoint_status(&file.checkpoints[0], None, Some(&error), Timestamp::now());
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str(), &ready.message),
        ("False", "CheckpointFailed", &error)
    );

    running.specs.send_replace(vec![]);
    wait_for("the runner to give up its start-up", || {
        let s = running.state.borrow().clone();
        async move { (s.startup_error.is_none() && !s.started).then_some(()) }
    })
    .await;
    assert_eq!(reports(), vec![]);
    running.stop().await;
}

/// A start that hangs (the target unreachable: it would fail only at the 30 s request
/// timeout) ends, its clients dropped, as soon as its OffsetCheckpoint is deleted: the next
/// change of the runner's state is that end, not a start-up error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_start_ends_when_its_checkpoint_goes() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    let mut file = c.flow("later-app", true);
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    file.flow.spec.target.bootstrap_servers = closed.local_addr().unwrap().to_string();
    drop(closed);
    let running = Running::start(&c, &file);
    let mut state = running.state.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = state.borrow_and_update().clone();
    assert!(
        !before.started && before.startup_error.is_none(),
        "still starting: {before:?}"
    );
    running.specs.send_replace(vec![]);
    tokio::time::timeout(WAIT, state.changed())
        .await
        .expect("the runner's state changes")
        .unwrap();
    let after = state.borrow().clone();
    assert!(
        !after.started && after.startup_error.is_none(),
        "the start ended without failing: {after:?}"
    );
    running.stop().await;
}

/// A group with active members on the target is left alone and reported; refusals are
/// retried once per interval (no hot loop). Once the members leave, the next interval
/// syncs it. `mirrorflow translate --apply` refuses the active group too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn active_target_group_is_left_alone() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    replicate(&c, "orders", 1, 100, 100, 20, true).await;
    commit(&c.src(), "busy", &[("orders", 0, 60)]).await;

    // An active member of "busy" on the target.
    let dst = c.dst();
    let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
    let (joined_tx, joined_rx) = oneshot::channel::<()>();
    let member = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = config(&dst)
            .set("group.id", "busy")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&["src.orders"]).unwrap();
        let mut joined = Some(joined_tx);
        loop {
            let _ = consumer.poll(Duration::from_millis(100));
            if joined.is_some() && consumer.assignment().unwrap().count() > 0 {
                let _ = joined.take().unwrap().send(());
            }
            if leave_rx.try_recv().is_ok() {
                break;
            }
        }
        consumer.unsubscribe();
        drop(consumer); // closes: leaves the group
    });
    joined_rx.await.unwrap();

    let running = Running::start(&c, &c.flow("busy", true));
    let failure = wait_for("the refusal to be reported", || {
        let s = running.state.borrow().clone();
        async move {
            let g = s.specs.get("cp")?.groups.get("busy")?.clone();
            g.failures
                .into_iter()
                .find(|f| f.reason == GroupFailureReason::ActiveOnTarget)
        }
    })
    .await;
    assert!(
        failure.message.contains("active member"),
        "{}",
        failure.message
    );
    running.group_syncs(3).await;
    // Once per group sync (once per plan, not per retry), and never more often than cycles.
    let (syncs, cycles) = {
        let s = running.state.borrow();
        (
            s.specs["cp"].group_syncs as f64,
            s.specs["cp"].cycles as f64,
        )
    };
    let refused = running.metric("mirrorflow_checkpoint_groups_refused_total{checkpoint=\"cp\"}");
    assert!(
        refused >= 3.0 && refused <= syncs && syncs <= cycles,
        "refused {refused} times in {syncs} group syncs, {cycles} cycles"
    );
    assert!(
        !committed(&c.dst(), "busy")
            .await
            .contains_key(&("src.orders".to_string(), 0)),
        "the active group's offsets were touched"
    );
    let st = statuses(
        &running.state.borrow(),
        &c.flow("busy", true).checkpoints,
        jiff::Timestamp::now(),
    );
    assert_eq!(
        st[0].1.failures[0].reason,
        GroupFailureReason::ActiveOnTarget
    );

    // The CLI refuses too.
    let args = TranslateArgs {
        source: FlowSource::file(c.write_flow_file("busy", true), c.secrets().to_path_buf()),
        output: Default::default(),
        group: "busy".into(),
        apply: true,
        timeout_seconds: 30,
    };
    let report = translate_group(&args).await.unwrap();
    assert_eq!(report.target_members, Some(1));
    assert!(plan_apply(&report).is_err());
    let err = run_translate(args).await.unwrap_err().to_string();
    assert!(err.contains("active member"), "{err}");

    // The member leaves: the next interval syncs the group.
    leave_tx.send(()).unwrap();
    member.await.unwrap();
    let at = wait_for("the group to be synced after its members left", || {
        let dst = c.dst();
        async move {
            committed(&dst, "busy")
                .await
                .get(&("src.orders".to_string(), 0))
                .copied()
        }
    })
    .await;
    assert_eq!(at, 60);
    running.stop().await;
}

/// `mirrorflow translate --apply` commits the checkpoints to an idle target group when the
/// runner does not sync groups, and never moves a partition backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn translate_cli_applies_checkpoints() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    replicate(&c, "orders", 2, 80, 80, 20, true).await;
    commit(&c.src(), "cli", &[("orders", 0, 33), ("orders", 1, 80)]).await;
    // Partition 1 already ahead on the target: must stay.
    commit(&c.dst(), "cli", &[("src.orders", 1, 80)]).await;
    let running = Running::start(&c, &c.flow("cli", false));
    wait_for("checkpoints for the cli group", || {
        let s = running.state.borrow().clone();
        async move { (s.specs.get("cp")?.groups.get("cli")?.partitions == 2).then_some(()) }
    })
    .await;
    running.stop().await;
    assert_eq!(
        committed(&c.dst(), "cli").await.len(),
        1,
        "syncGroupOffsets=false commits nothing"
    );
    let args = TranslateArgs {
        source: FlowSource::file(c.write_flow_file("cli", false), c.secrets().to_path_buf()),
        output: Default::default(),
        group: "cli".into(),
        apply: true,
        timeout_seconds: 30,
    };
    run_translate(args).await.unwrap();
    let after = committed(&c.dst(), "cli").await;
    assert_eq!(after[&("src.orders".to_string(), 0)], 33);
    assert_eq!(after[&("src.orders".to_string(), 1)], 80);
}

/// A restarted runner reloads the checkpoints topic: with coarser offset syncs after the
/// restart (syncs topic compacted down to one MM2-style sync), it does not write a lower
/// checkpoint for an unchanged group, and the target group is not moved backwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_reloads_checkpoints_and_stays_monotonic() {
    let Some(c) = Clusters::start().await else {
        return;
    };
    replicate(&c, "orders", 1, 200, 200, 100, true).await;
    commit(&c.src(), "app", &[("orders", 0, 150)]).await;
    let file = c.flow("app", true);

    let first = Running::start(&c, &file);
    wait_for("the first checkpoint", || {
        let s = first.state.borrow().clone();
        async move { s.specs.get("cp")?.groups.get("app")?.synced.then_some(()) }
    })
    .await;
    first.stop().await;
    let before = read_checkpoints(&c.dst()).await;
    assert_eq!(
        before.last().map(|r| (r.upstream, r.downstream)),
        Some((150, 150)),
        "{before:?}"
    );

    // Only the oldest sync survives, without a sequence: 150 now translates to 1.
    delete_topic(&c.dst(), SYNCS_TOPIC).await.unwrap();
    ensure_syncs_topic(&c.dst()).await;
    produce(
        &c.dst(),
        SYNCS_TOPIC,
        &[sync_record("orders", 0, 0, 0, None)],
    )
    .await
    .unwrap();

    let second = Running::start(&c, &file);
    wait_for("the second runner to start", || {
        let started = second.state.borrow().started;
        async move { started.then_some(()) }
    })
    .await;
    // Group syncs, not only cycles: the sync runs beside the cycles and must have had its
    // chance to (wrongly) move the group backwards.
    second.group_syncs(3).await;
    assert_eq!(second.state.borrow().checkpoints_in_force, 1);
    let g = second.state.borrow().specs["cp"].groups["app"].clone();
    assert!(g.last_checkpoint.is_some() && g.partitions == 1, "{g:?}");
    second.stop().await;
    let after = read_checkpoints(&c.dst()).await;
    let downs: Vec<i64> = after.iter().map(|r| r.downstream).collect();
    assert_eq!(
        after.len(),
        before.len(),
        "no new checkpoint written: {downs:?}"
    );
    assert_eq!(
        committed(&c.dst(), "app").await[&("src.orders".to_string(), 0)],
        150
    );

    // A rewind of the group on the source is followed, even downwards.
    commit(&c.src(), "app", &[("orders", 0, 0)]).await;
    let third = Running::start(&c, &file);
    wait_for("the rewound checkpoint", || {
        let dst = c.dst();
        async move {
            let last = read_checkpoints(&dst).await.pop()?;
            (last.upstream == 0).then_some(last)
        }
    })
    .await;
    // The rewound checkpoint is the third runner's first cycle: its first group sync saw it.
    third.group_syncs(1).await;
    third.stop().await;
    let last = read_checkpoints(&c.dst()).await.pop().unwrap();
    assert_eq!((last.upstream, last.downstream), (0, 0));
    // The target group still never moves backwards.
    assert_eq!(
        committed(&c.dst(), "app").await[&("src.orders".to_string(), 0)],
        150
    );
}

/// Group offsets read and committed many groups per request (OffsetFetch v8, pipelined
/// OffsetCommit v8) agree with librdkafka's one group per request, both ways round, including
/// a group that committed nothing.
#[tokio::test]
async fn batched_group_calls_agree_with_librdkafka() {
    let Some(broker) = broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let bootstrap = broker.bootstrap_servers();
    create_topic(&bootstrap, "t", 3, &[]).await.unwrap();
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &bootstrap);
    let timeout = Duration::from_secs(30);
    let batched = GroupAdmin::with_batching(&c, "batched", timeout, true).unwrap();
    let single = GroupAdmin::with_batching(&c, "single", timeout, false).unwrap();
    assert!(batched.batches_groups() && !single.batches_groups());
    let offsets = |g: usize| -> Vec<GroupOffset> {
        (0..3)
            .map(|p| GroupOffset {
                topic: "t".into(),
                partition: p,
                offset: (g * 10 + p as usize) as i64,
                metadata: format!("m{g}"),
            })
            .collect()
    };
    // Groups 0-49 committed by the batched client, 50-99 by librdkafka; "never" by none.
    let commits: Vec<(String, Vec<GroupOffset>)> =
        (0..100).map(|g| (format!("g{g:03}"), offsets(g))).collect();
    let (a, b) = commits.split_at(50);
    let (a, b) = (a.to_vec(), b.to_vec());
    let results = tokio::task::spawn_blocking(move || {
        (
            batched.alter_offsets(&a),
            single.alter_offsets(&b),
            batched,
            single,
        )
    })
    .await
    .unwrap();
    assert!(
        results.0.iter().chain(&results.1).all(Result::is_ok),
        "{results:?}",
        results = (&results.0, &results.1)
    );
    let (batched, single) = (results.2, results.3);
    let mut names: Vec<String> = commits.iter().map(|(g, _)| g.clone()).collect();
    names.push("never".into());
    let (read_batched, read_single) = tokio::task::spawn_blocking(move || {
        (batched.list_offsets(&names), single.list_offsets(&names))
    })
    .await
    .unwrap();
    let sorted = |r: &Result<Vec<GroupOffset>, mirrorflow::kafka::Error>| {
        let mut v = r.clone().expect("read");
        v.sort_by_key(|o| o.partition);
        v
    };
    // Offsets and their commit metadata, as committed.
    for (g, (x, y)) in read_batched.iter().zip(&read_single).enumerate() {
        let want = if g < 100 { offsets(g) } else { Vec::new() };
        assert_eq!(
            sorted(x),
            sorted(y),
            "batched and librdkafka reads of group {g}"
        );
        assert_eq!(sorted(x), want, "group {g}");
    }
}

/// The offset-syncs reader fetches at most 256 KiB at a time (each fetched record costs
/// librdkafka a few hundred bytes until it is taken). A record batch larger than that (a
/// librdkafka writer's batches go up to 1 MB) is still read whole: the broker returns the
/// first batch of a fetch even when it exceeds the limit (KIP-74).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_batch_larger_than_a_fetch_is_read_whole() {
    use mirrorflow::kafka::tail::TopicTail;
    use mirrorflow::worker::checkpoint::store::SyncStore;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let Some(broker) = broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let bootstrap = broker.bootstrap_servers();
    create_topic(&bootstrap, SYNCS_TOPIC, 1, &[]).await.unwrap();
    // One batch: everything sent within the linger, under the producer's 1 MB request bound.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("linger.ms", "2000")
        .set("batch.num.messages", "100000")
        .set("batch.size", "1000000")
        .create()
        .unwrap();
    let (syncs, partitions) = (12_000i64, 100i64);
    let mut bytes = 0;
    for i in 0..syncs {
        let r = sync_record(
            "orders-with-a-longer-name",
            (i % partitions) as i32,
            i,
            i,
            None,
        );
        let (key, value) = (r.key.unwrap(), r.value.unwrap());
        bytes += key.len() + value.len();
        producer
            .send(
                BaseRecord::to(SYNCS_TOPIC)
                    .partition(0)
                    .key(key.as_slice())
                    .payload(value.as_slice()),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    assert!(bytes > 2 * 262_144, "{bytes} bytes of syncs");
    let read = tokio::task::spawn_blocking(move || {
        let mut tail = TopicTail::new(&config(&bootstrap), SYNCS_TOPIC, "test").unwrap();
        let mut store = SyncStore::new();
        let read = tail
            .catch_up(Duration::from_secs(60), |m| {
                store.apply(m.key(), m.payload(), None).unwrap();
            })
            .unwrap();
        (read, store.partitions())
    })
    .await
    .unwrap();
    assert_eq!(read, (syncs as usize, partitions as usize));
}
