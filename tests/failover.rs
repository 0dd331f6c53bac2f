//! End to end: a standalone worker runs a flow file holding a MirrorFlow and an
//! OffsetCheckpoint; the real engine replicates and writes offset syncs, worker 0's
//! checkpoint runner translates a source group's offsets and commits them on the target; a
//! consumer of that group on the target then reads exactly what it had not consumed. On two
//! Apache Kafka nodes of the test's own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorflow::api::{FailoverGroup, FailoverPartition, FailoverPhase, FailoverReport};
use mirrorflow::kafka::admin::GroupAdmin;
use mirrorflow::testkit::brokers::{
    self, broker_or_skip, BrokerKind, ConsumeUntil, LocalBroker, ProduceRecord,
};
use mirrorflow::worker::process::args::WorkerArgs;
use mirrorflow::worker::process::flow_file::watch_flow_file;
use mirrorflow::worker::process::sinks::{checkpoint_reports, CheckpointReportSource, WorkerSink};
use mirrorflow::worker::process::wiring::run_with;
use mirrorflow::worker::replicate::{StatusSink, WorkerSnapshot};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};

const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 60;

fn consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap()
}

struct Sink(
    tokio::sync::watch::Sender<Option<WorkerSnapshot>>,
    std::sync::Mutex<Option<CheckpointReportSource>>,
);
impl StatusSink for Sink {
    fn publish(&self, s: &WorkerSnapshot) {
        self.0.send_replace(Some(s.clone()));
    }
}
impl WorkerSink for Sink {
    fn attach_checkpoints(&self, source: CheckpointReportSource) {
        *self.1.lock().unwrap() = Some(source);
    }
}

impl Sink {
    /// What the worker reports, for a failure message: its snapshot and checkpoint reports.
    fn describe(&self) -> String {
        let reports = self.1.lock().unwrap().as_ref().map(checkpoint_reports);
        format!(
            "status {}; checkpoints {}",
            serde_json::to_string(&*self.0.borrow()).unwrap_or_default(),
            serde_json::to_string(&reports).unwrap_or_default()
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_fails_over_to_the_target_without_skipping_or_rereading() {
    let (source, target) = tokio::join!(
        broker_or_skip(BrokerKind::Kafka),
        broker_or_skip(BrokerKind::Kafka)
    );
    let (Some(source), Some(target)) = (source, target) else {
        return;
    };
    let (src, tgt) = (source.bootstrap_servers(), target.bootstrap_servers());
    brokers::create_topic(&src, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    let records: Vec<ProduceRecord> = (0..PARTITIONS as i64 * PER_PARTITION)
        .map(|i| {
            ProduceRecord::new(format!("k{i}"), format!("v{i}"))
                .partition((i % PARTITIONS as i64) as i32)
        })
        .collect();
    brokers::produce(&src, "orders", &records).await.unwrap();

    // The group consumed a different amount of each partition on the source: none, part, all.
    let group_at: BTreeMap<i32, i64> = [(0, 0), (1, 25), (2, PER_PARTITION)].into_iter().collect();
    brokers::commit_group(&src, "billing", "orders", &group_at)
        .await
        .unwrap();
    assert_eq!(
        brokers::group_committed(&src, "billing", "orders", PARTITIONS)
            .await
            .unwrap(),
        group_at
    );

    let dir = tempfile::tempdir().unwrap();
    let flow = dir.path().join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: dr}}
spec:
  source: {{alias: dc1, bootstrapServers: '{src}'}}
  target: {{alias: dc2, bootstrapServers: '{tgt}'}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
  delivery: AtLeastOnce
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: billing}}
spec:
  flowRef: {{name: dr}}
  groups: {{include: [billing], refreshIntervalSeconds: 1}}
  intervalSeconds: 1
"
        ),
    )
    .unwrap();
    let (input, watcher) = watch_flow_file(&flow, Duration::from_secs(1)).unwrap();
    assert_eq!(input.checkpoints.borrow().len(), 1);
    let args = WorkerArgs {
        flow: Some(flow.clone()),
        flow_ref: None,
        worker_index: Some(0),
        worker_count: 1,
        listen: "127.0.0.1:0".parse().unwrap(),
        secrets_dir: dir.path().join("secrets"),
        checkpoints_file: None,
        flow_reload_seconds: 1,
    };
    let (snap_tx, _snap_rx) = tokio::sync::watch::channel(None);
    let sink = Arc::new(Sink(snap_tx, Default::default()));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(run_with(args, input, vec![sink.clone()], async {
        let _ = stop_rx.await;
    }));

    // The group appears on the target at the translated offsets.
    let deadline = Instant::now() + Duration::from_secs(90);
    let on_target = loop {
        let c = brokers::group_committed(&tgt, "billing", "dc1.orders", PARTITIONS)
            .await
            .unwrap();
        // Partition 0 was never consumed (offset 0 committed): its translation is exact too.
        if c.len() == group_at.len() {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "target group not synced in time; have {c:?}; the worker's last {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let _ = stop_tx.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();

    // Replication is contiguous on both sides here: translation must be exact (0 re-reads).
    assert_eq!(on_target, group_at, "translated offsets on the target");

    // A consumer of the group on the target reads exactly the records not consumed on source.
    let c = consumer(&tgt, "billing");
    c.subscribe(&["dc1.orders"]).unwrap();
    let mut got: Vec<(i32, String)> = Vec::new();
    let want_count: i64 = group_at.values().map(|o| PER_PARTITION - o).sum();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got.len() as i64) < want_count && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            got.push((
                m.partition(),
                String::from_utf8_lossy(m.key().unwrap()).into_owned(),
            ));
        }
    }
    // Give a duplicate the chance to show up.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            got.push((
                m.partition(),
                String::from_utf8_lossy(m.key().unwrap()).into_owned(),
            ));
        }
    }
    let src_records = brokers::consume_all(&src, "orders", ConsumeUntil::count(records.len()))
        .await
        .unwrap();
    let mut want: Vec<(i32, String)> = src_records
        .iter()
        .filter(|r| r.offset >= group_at[&r.partition])
        .map(|r| {
            (
                r.partition,
                String::from_utf8_lossy(r.key.as_ref().unwrap()).into_owned(),
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(
        got, want,
        "exactly the unconsumed records, no skips, no re-reads"
    );
}

// ---------------------------------------------------------------------------------------
// `spec.failover`: the declared operation.

/// A standalone worker on a flow file the test rewrites (`spec.failover`, `spec.paused`).
/// Two Apache Kafka nodes (`None`: skipped), the flow's files, and an empty `orders` topic
/// on the source.
async fn clusters_with_orders() -> Option<(LocalBroker, LocalBroker, FlowRun)> {
    let (source, target) = tokio::join!(
        broker_or_skip(BrokerKind::Kafka),
        broker_or_skip(BrokerKind::Kafka)
    );
    let (source, target) = (source?, target?);
    let run = FlowRun {
        dir: tempfile::tempdir().unwrap(),
        src: source.bootstrap_servers(),
        tgt: target.bootstrap_servers(),
    };
    brokers::create_topic(&run.src, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    Some((source, target, run))
}

struct FlowRun {
    dir: tempfile::TempDir,
    src: String,
    tgt: String,
}

impl FlowRun {
    fn write(&self, extra: &str) {
        self.write_syncing(extra, false);
    }

    /// `write`, the OffsetCheckpoint committing translated offsets on the target when `sync`.
    fn write_syncing(&self, extra: &str, sync: bool) {
        let (src, tgt) = (&self.src, &self.tgt);
        std::fs::write(
            self.dir.path().join("flow.yaml"),
            format!(
                "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: dr}}
spec:
  source: {{alias: dc1, bootstrapServers: '{src}'}}
  target: {{alias: dc2, bootstrapServers: '{tgt}'}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
  delivery: AtLeastOnce
{extra}
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: groups}}
spec:
  flowRef: {{name: dr}}
  groups: {{include: ['g-.*'], refreshIntervalSeconds: 1}}
  intervalSeconds: 1
  syncGroupOffsets: {sync}
"
            ),
        )
        .unwrap();
    }

    /// Starts a worker; stop it by sending on the returned channel.
    fn start(&self) -> Worker {
        self.start_file("flow.yaml")
    }

    /// The reverse flow `back` (source the failover's target, dc2; target dc1; Identity), in
    /// `back.yaml`, failing back after failover `id` of `default/dr`.
    fn write_back(&self, id: &str, copy_diverged: bool) {
        self.write_back_with(id, copy_diverged, "");
    }

    /// `write_back`, followed by `extra` (another object of the file).
    fn write_back_with(&self, id: &str, copy_diverged: bool, extra: &str) {
        let (src, tgt) = (&self.src, &self.tgt);
        std::fs::write(
            self.dir.path().join("back.yaml"),
            format!(
                "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: back}}
spec:
  source:
    alias: dc2
    bootstrapServers: '{tgt}'
    startFrom: {{afterFailover: {{flow: default/dr, id: {id}, copyDiverged: {copy_diverged}}}}}
  target: {{alias: dc1, bootstrapServers: '{src}'}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
  replicationPolicy: {{type: Identity}}
  delivery: AtLeastOnce
{extra}"
            ),
        )
        .unwrap();
    }

    /// Starts a worker on the flow file `name`.
    fn start_file(&self, name: &str) -> Worker {
        let flow = self.dir.path().join(name);
        let (input, watcher) = watch_flow_file(&flow, Duration::from_secs(1)).unwrap();
        let args = WorkerArgs {
            flow: Some(flow),
            flow_ref: None,
            worker_index: Some(0),
            worker_count: 1,
            listen: "127.0.0.1:0".parse().unwrap(),
            secrets_dir: self.dir.path().join("secrets"),
            checkpoints_file: None,
            flow_reload_seconds: 1,
        };
        let (snap_tx, _) = tokio::sync::watch::channel(None);
        let sink = Arc::new(Sink(snap_tx, Default::default()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(run_with(args, input, vec![sink.clone()], async {
            let _ = stop_rx.await;
        }));
        (sink, stop_tx, worker, watcher)
    }
}

/// A running worker: its status, how to stop it, its task, the flow file's watcher.
type Worker = (
    Arc<Sink>,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
    tokio::task::JoinHandle<()>,
);

impl Sink {
    fn failover(&self) -> Option<FailoverReport> {
        self.0.borrow().as_ref().and_then(|s| s.failover.clone())
    }

    /// Waits for the failover `id` to reach a final phase.
    async fn final_failover(&self, id: &str) -> FailoverReport {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(r) = self.failover().filter(|r| r.id == id && r.phase.is_final()) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "failover not finished; {}",
                self.describe()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn until(&self, what: &str, ok: impl Fn(&WorkerSnapshot) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !self.0.borrow().as_ref().is_some_and(&ok) {
            assert!(Instant::now() < deadline, "{what}; {}", self.describe());
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

fn batch(from: i64, per_partition: i64) -> Vec<ProduceRecord> {
    (from * PARTITIONS as i64..(from + per_partition) * PARTITIONS as i64)
        .map(|i| {
            ProduceRecord::new(format!("k{i}"), format!("v{i}"))
                .partition((i % PARTITIONS as i64) as i32)
        })
        .collect()
}

async fn target_ends(tgt: &str) -> BTreeMap<i32, i64> {
    ends(tgt, "dc1.orders").await
}

async fn ends(cluster: &str, topic: &str) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        out.insert(
            p,
            // -1 until the topic exists.
            brokers::watermarks(cluster, topic, p)
                .await
                .map_or(-1, |w| w.1),
        );
    }
    out
}

/// Reads what group `group` gets on the target from its committed offsets (keys per partition).
fn read_group(tgt: &str, group: &str, want: usize) -> Vec<(i32, i64)> {
    read_group_on(tgt, "dc1.orders", group, want)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_failover_drains_commits_the_idle_groups_names_the_active_one_and_stops() {
    let Some((_source, _target, run)) = clusters_with_orders().await else {
        return;
    };
    let (src, tgt) = (run.src.clone(), run.tgt.clone());
    brokers::produce(&src, "orders", &batch(0, PER_PARTITION))
        .await
        .unwrap();
    run.write("");
    let (sink, stop, worker, watcher) = run.start();
    let first: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION)).collect();
    sink.until("first records replicated", |_| true).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    while target_ends(&tgt).await != first {
        assert!(
            Instant::now() < deadline,
            "not replicated; {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Mid-stream: 500 more per partition land on the source; the failover starts at once,
    // so the drain has work to do.
    const MORE: i64 = 500;
    let end = PER_PARTITION + MORE;
    brokers::produce(&src, "orders", &batch(PER_PARTITION, MORE))
        .await
        .unwrap();
    let groups: [(&str, BTreeMap<i32, i64>); 3] = [
        ("g-a", [(0, 0), (1, 25), (2, end)].into_iter().collect()),
        ("g-b", [(0, end), (1, 300), (2, 7)].into_iter().collect()),
        ("g-active", [(0, 1), (1, 1), (2, 1)].into_iter().collect()),
    ];
    for (g, at) in &groups {
        brokers::commit_group(&src, g, "orders", at).await.unwrap();
    }
    // g-active has a live member on the target.
    let active = consumer(&tgt, "g-active");
    active.subscribe(&["dc1.orders"]).unwrap();
    let stop_active = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let stop_active = stop_active.clone();
        std::thread::spawn(move || {
            while !stop_active.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = active.poll(Duration::from_millis(100));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let admin = GroupAdmin::new(
            ClientConfig::new().set("bootstrap.servers", &tgt),
            "target",
            Duration::from_secs(10),
        )
        .unwrap();
        if admin
            .list_groups()
            .unwrap()
            .iter()
            .any(|g| g.group == "g-active" && g.members > 0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "g-active never got a member on the target"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    run.write("  failover: {id: move-1, mode: Planned, drainTimeoutSeconds: 120}");
    let report = sink.final_failover("move-1").await;
    eprintln!("report: {}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.phase, FailoverPhase::Done, "{report:?}");
    assert_eq!(report.not_replicated, Some(0));
    // The source's `heartbeats` topic is replicated too (worker 0 writes it every second).
    // Each partition holds records, so has a last time; drained, none is a recovery point.
    assert_eq!(
        report.recovery_point, None,
        "nothing missing after a full drain"
    );
    let parts: Vec<FailoverPartition> = report
        .partitions
        .iter()
        .filter(|p| p.topic == "orders")
        .cloned()
        .map(|mut p| {
            assert!(p.last_replicated_time.take().is_some(), "{p:?}");
            p
        })
        .collect();
    let want_parts: Vec<FailoverPartition> = (0..PARTITIONS)
        .map(|partition| FailoverPartition {
            topic: "orders".into(),
            partition,
            source_end: Some(end),
            target_holds: end,
            last_replicated_time: None,
            not_replicated: Some(0),
            target_topic: Some("dc1.orders".into()),
            target_end: Some(end),
        })
        .collect();
    assert_eq!(
        parts, want_parts,
        "the report's partitions are what the test produced"
    );
    let by_group: BTreeMap<&str, &FailoverGroup> = report
        .groups
        .iter()
        .map(|g| (g.group.as_str(), g))
        .collect();
    assert_eq!(by_group.len(), 3, "{report:?}");
    for (g, at) in &groups[..2] {
        let line = by_group[g];
        assert_eq!(line.skipped, None, "{g}: {line:?}");
        assert_eq!(
            line.records_read_again,
            Some(0),
            "{g}: exact on a contiguous topic"
        );
        let want: Vec<String> = at
            .iter()
            .map(|(p, o)| format!("dc1.orders/{p}@{o}"))
            .collect();
        assert_eq!(line.committed, want, "{g}");
        assert_eq!(
            brokers::group_committed(&tgt, g, "dc1.orders", PARTITIONS)
                .await
                .unwrap(),
            *at,
            "{g} on the target"
        );
    }
    let skipped = by_group["g-active"];
    assert!(
        skipped.committed.is_empty()
            && skipped
                .skipped
                .as_deref()
                .is_some_and(|s| s.contains("active member")),
        "{skipped:?}"
    );
    stop_active.store(true, std::sync::atomic::Ordering::Relaxed);
    poller.join().unwrap();
    assert_eq!(
        brokers::group_committed(&tgt, "g-active", "dc1.orders", PARTITIONS)
            .await
            .unwrap(),
        BTreeMap::new(),
        "the active group is untouched"
    );

    // Replication stopped: records produced now stay on the source.
    sink.until("the worker paused after the failover", |s| {
        s.state == mirrorflow::api::WorkerState::Paused
    })
    .await;
    brokers::produce(&src, "orders", &batch(end, 10))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let stopped_at: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, end)).collect();
    assert_eq!(
        target_ends(&tgt).await,
        stopped_at,
        "nothing replicated after the failover"
    );

    // Consumers moved to the target read exactly what they had not consumed: no re-read,
    // no skip, the counts the report implies.
    for (g, at) in &groups[..2] {
        let want: Vec<(i32, i64)> = at
            .iter()
            .flat_map(|(&p, &o)| (o..end).map(move |off| (p, off)))
            .collect();
        let got = read_group(&tgt, g, want.len());
        assert_eq!(got.len(), want.len(), "{g}: records read on the target");
        assert_eq!(got, want, "{g}: exactly the unconsumed records");
    }

    // A restart neither runs it again nor replicates.
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();
    let (sink, stop, worker, watcher) = run.start();
    let again = sink.final_failover("move-1").await;
    // Read back from the store (which keeps whole seconds), not run again.
    let second = |r: &FailoverReport| r.started_at.as_ref().map(|t| t.0.as_second());
    assert_eq!(second(&again), second(&report), "read back, not run again");
    sink.until("paused after the restart", |s| {
        s.state == mirrorflow::api::WorkerState::Paused
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        target_ends(&tgt).await,
        stopped_at,
        "still stopped after a restart"
    );

    // The old source keeps going: its groups move on, one appears. With syncGroupOffsets on,
    // nothing of it reaches the target: the consumers there own their groups now.
    run.write_syncing(
        "  failover: {id: move-1, mode: Planned, drainTimeoutSeconds: 120}",
        true,
    );
    let moved: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, end)).collect();
    brokers::commit_group(&src, "g-a", "orders", &moved)
        .await
        .unwrap();
    brokers::commit_group(&src, "g-late", "orders", &moved)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        brokers::group_committed(&tgt, "g-a", "dc1.orders", PARTITIONS)
            .await
            .unwrap(),
        groups[0].1,
        "g-a on the target stays where the failover put it"
    );
    assert_eq!(
        brokers::group_committed(&tgt, "g-late", "dc1.orders", PARTITIONS)
            .await
            .unwrap(),
        BTreeMap::new(),
        "a group committed on the old source after the failover is not synced"
    );
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unplanned_failover_commits_the_last_checkpoints_and_reports_the_recovery_point() {
    let Some((mut source, _target, run)) = clusters_with_orders().await else {
        return;
    };
    let (src, tgt) = (run.src.clone(), run.tgt.clone());
    // Explicit timestamps, whole seconds, ten minutes back: record j of a partition at
    // base + j s, shifted per partition so that partition 1 ends earliest.
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let base = (now_s - 600) * 1000;
    let skew = [0, -30_000, 5_000];
    let stamp = |partition: usize, j: i64| base + j * 1000 + skew[partition];
    let stamped: Vec<ProduceRecord> = batch(0, PER_PARTITION)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let (partition, j) = (i % PARTITIONS as usize, (i / PARTITIONS as usize) as i64);
            r.timestamp(stamp(partition, j))
        })
        .collect();
    brokers::produce(&src, "orders", &stamped).await.unwrap();
    // The last record each partition holds on the target (the rest never arrive).
    let last: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| (p, stamp(p as usize, PER_PARTITION - 1)))
        .collect();
    let at: BTreeMap<i32, i64> = [(0, 10), (1, 20), (2, PER_PARTITION)].into_iter().collect();
    brokers::commit_group(&src, "g-a", "orders", &at)
        .await
        .unwrap();
    run.write("");
    let (sink, stop, worker, watcher) = run.start();
    let first: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while target_ends(&tgt).await != first {
        assert!(
            Instant::now() < deadline,
            "not replicated; {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // A checkpoint for every partition of g-a.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let reports = sink
            .1
            .lock()
            .unwrap()
            .as_ref()
            .map(checkpoint_reports)
            .unwrap_or_default();
        if reports.iter().flat_map(|r| &r.groups).any(|g| {
            g.group == "g-a" && g.partitions == PARTITIONS && g.last_checkpoint_time.is_some()
        }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no checkpoints for g-a: {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Replication is paused, 40 more per partition land on the source, then the source dies:
    // those 40 never arrive.
    run.write("  paused: true");
    sink.until("paused", |s| {
        s.state == mirrorflow::api::WorkerState::Paused
    })
    .await;
    const LOST: i64 = 40;
    brokers::produce(&src, "orders", &batch(PER_PARTITION, LOST))
        .await
        .unwrap();
    source.stop().unwrap();

    run.write("  paused: true\n  failover: {id: dc1-down, mode: Unplanned}");
    let report = sink.final_failover("dc1-down").await;
    eprintln!("report: {}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.phase, FailoverPhase::Done, "{report:?}");
    // The recovery point: what the target holds; the test knows the source had LOST more.
    for p in report.partitions.iter().filter(|p| p.topic == "orders") {
        assert_eq!(
            (p.topic.as_str(), p.target_holds),
            ("orders", PER_PARTITION),
            "{p:?}"
        );
        assert_eq!(PER_PARTITION + LOST - p.target_holds, LOST, "never arrived");
        // The flow copies each record's timestamp: the last one on the target is the last
        // record that arrived, not one of the LOST (stamped now).
        assert_eq!(
            p.last_replicated_time.as_ref().map(|t| t.0),
            Some(jiff::Timestamp::from_millisecond(last[&p.partition]).unwrap()),
            "{p:?}"
        );
    }
    // The recovery point: the earliest of those, partition 1's; the start minus it.
    let earliest = *last.values().min().unwrap();
    assert_eq!(earliest, last[&1]);
    assert_eq!(
        report.recovery_point.as_ref().map(|t| t.0),
        Some(jiff::Timestamp::from_millisecond(earliest).unwrap())
    );
    let started = report.started_at.as_ref().expect("startedAt").0.as_second();
    assert_eq!(
        report.recovery_point_seconds,
        Some(started - earliest / 1000),
        "{report:?}"
    );
    assert!(
        report.recovery_point_seconds.unwrap() >= 600 - 29,
        "the last arrived at least 571s before the failover: {report:?}"
    );
    assert_eq!(
        report
            .partitions
            .iter()
            .filter(|p| p.topic == "orders")
            .count(),
        PARTITIONS as usize
    );
    let line = report
        .groups
        .iter()
        .find(|g| g.group == "g-a")
        .expect("g-a reported");
    assert_eq!(line.skipped, None, "{line:?}");
    assert_eq!(
        brokers::group_committed(&tgt, "g-a", "dc1.orders", PARTITIONS)
            .await
            .unwrap(),
        at,
        "g-a at its last checkpoint on the target"
    );
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();
}

/// One transaction of `n` records on `partition` of `topic`, committed or aborted.
fn transaction(producer: &rdkafka::producer::BaseProducer, partition: i32, n: usize, commit: bool) {
    use rdkafka::producer::{BaseRecord, Producer};
    let t = Duration::from_secs(30);
    producer.begin_transaction().unwrap();
    for i in 0..n {
        let key = format!("p{partition}-{i}");
        producer
            .send(
                BaseRecord::to("orders")
                    .partition(partition)
                    .key(&key)
                    .payload(&key),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    // In the log before the marker either way.
    producer.flush(t).unwrap();
    if commit {
        producer.commit_transaction(t).unwrap();
    } else {
        producer.abort_transaction(t).unwrap();
    }
}

/// A transactional source: partition 0 ends in a commit marker, partition 1 in aborted
/// records and their abort marker. The end offsets are past the last record, which the
/// worker's progress (last copied + 1) never reaches: the drain counts records, not offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planned_failover_drains_a_transactional_source_ending_in_markers() {
    use rdkafka::producer::Producer;
    let Some((_source, _target, run)) = clusters_with_orders().await else {
        return;
    };
    let (src, tgt) = (run.src.clone(), run.tgt.clone());
    let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &src)
        .set("transactional.id", "failover-test-source")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    const COMMITTED: usize = 10;
    transaction(&producer, 0, COMMITTED, true);
    transaction(&producer, 1, COMMITTED, true);
    transaction(&producer, 1, 5, false);
    // Partition 2 stays empty.
    run.write("");
    let (sink, stop, worker, watcher) = run.start();
    let copied: BTreeMap<i32, i64> = [(0, 10), (1, 10), (2, 0)].into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while target_ends(&tgt).await != copied {
        assert!(
            Instant::now() < deadline,
            "not replicated; {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    run.write("  failover: {id: tx, mode: Planned, drainTimeoutSeconds: 30}");
    let report = sink.final_failover("tx").await;
    eprintln!("report: {}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.phase, FailoverPhase::Done, "{report:?}");
    assert_eq!(report.not_replicated, Some(0));
    let parts: Vec<(i32, Option<i64>, i64, Option<i64>)> = report
        .partitions
        .iter()
        .filter(|p| p.topic == "orders")
        .map(|p| (p.partition, p.source_end, p.target_holds, p.not_replicated))
        .collect();
    // 10 records + a commit marker; 10 + marker + 5 aborted + marker.
    assert_eq!(
        parts,
        vec![
            (0, Some(11), 10, Some(0)),
            (1, Some(17), 10, Some(0)),
            (2, Some(0), 0, Some(0)),
        ],
        "offsets past the last record are markers and aborted records, not records behind"
    );
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();
}

// ---------------------------------------------------------------------------------------
// Failing back: `spec.source.startFrom.afterFailover` on the reverse flow.

/// Stops a worker and its flow file's watcher.
async fn stop(w: Worker) {
    let (_, stop, worker, watcher) = w;
    let _ = stop.send(());
    worker.await.unwrap().unwrap();
    watcher.abort();
}

/// `(partition, key)` of every record of `topic` on `cluster` (`n` of them).
async fn keys(cluster: &str, topic: &str, n: usize) -> Vec<(i32, String)> {
    let records = brokers::consume_all(
        cluster,
        topic,
        ConsumeUntil::count(n).timeout(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let mut got: Vec<(i32, String)> = records
        .iter()
        .map(|r| {
            let key = r.key.as_deref().unwrap_or_default();
            (r.partition, String::from_utf8_lossy(key).into_owned())
        })
        .collect();
    got.sort();
    got
}

/// Keyed records `<prefix><i>` for `(partition, count)`.
fn keyed(prefix: &str, per_partition: &[(i32, i64)]) -> Vec<ProduceRecord> {
    per_partition
        .iter()
        .flat_map(|&(p, n)| {
            (0..n).map(move |i| ProduceRecord::new(format!("{prefix}{p}-{i}"), "x").partition(p))
        })
        .collect()
}

/// dc1 (A) is the primary, dc2 (B) its mirror under Identity: 60 records per partition
/// replicated, then planned failover `move-1` Done and the forward flow stopped.
async fn failed_over(run: &FlowRun) -> FailoverReport {
    let (a, b) = (&run.src, &run.tgt);
    brokers::produce(a, "orders", &batch(0, PER_PARTITION))
        .await
        .unwrap();
    run.write("  replicationPolicy: {type: Identity}");
    let forward = run.start();
    let first: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while ends(b, "orders").await != first {
        assert!(
            Instant::now() < deadline,
            "not replicated; {}",
            forward.0.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    run.write("  replicationPolicy: {type: Identity}\n  failover: {id: move-1, mode: Planned}");
    let report = forward.0.final_failover("move-1").await;
    assert_eq!(report.phase, FailoverPhase::Done, "{report:?}");
    stop(forward).await;
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_copies_back_only_what_the_new_primary_took_and_reports_what_diverged() {
    let Some((_a, _b, run)) = clusters_with_orders().await else {
        return;
    };
    // dc1 (A) is the primary, dc2 (B) its mirror; under Identity the names match.
    let (a, b) = (run.src.clone(), run.tgt.clone());
    let report = failed_over(&run).await;
    let recorded: Vec<(i32, i64, Option<&str>, Option<i64>)> = report
        .partitions
        .iter()
        .filter(|p| p.topic == "orders")
        .map(|p| {
            (
                p.partition,
                p.target_holds,
                p.target_topic.as_deref(),
                p.target_end,
            )
        })
        .collect();
    let want: Vec<_> = (0..PARTITIONS)
        .map(|p| (p, PER_PARTITION, Some("orders"), Some(PER_PARTITION)))
        .collect();
    assert_eq!(
        recorded, want,
        "targetEnd recorded once replication stopped"
    );

    // After the failover: the old primary still takes a few records (they never reach B),
    // the new primary takes 5,000.
    let diverged: [(i32, i64); 3] = [(0, 7), (1, 0), (2, 3)];
    brokers::produce(&a, "orders", &keyed("d", &diverged))
        .await
        .unwrap();
    const NEW: i64 = 5_000;
    let new_records: Vec<ProduceRecord> = (0..NEW)
        .map(|i| {
            let p = (i % PARTITIONS as i64) as i32;
            ProduceRecord::new(format!("n{i}"), "new").partition(p)
        })
        .collect();
    brokers::produce(&b, "orders", &new_records).await.unwrap();
    let history = keys(
        &a,
        "orders",
        (PER_PARTITION * PARTITIONS as i64 + 10) as usize,
    )
    .await;

    run.write_back("move-1", true);
    let back = run.start_file("back.yaml");
    let sink = back.0.clone();
    sink.until("failback measured", |s| s.failback.is_some())
        .await;
    let fb = sink.0.borrow().as_ref().unwrap().failback.clone().unwrap();
    eprintln!("failback: {}", serde_json::to_string_pretty(&fb).unwrap());
    let want_total = history.len() as i64 + NEW;
    let deadline = Instant::now() + Duration::from_secs(120);
    while ends(&a, "orders").await.values().sum::<i64>() < want_total {
        assert!(
            Instant::now() < deadline,
            "not copied back; {}",
            sink.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The report: every partition started at B's end when the failover was done; the
    // diverged records are exactly what the test wrote to A, at the offsets it got.
    assert_eq!((fb.flow.as_str(), fb.id.as_str()), ("default/dr", "move-1"));
    assert_eq!(fb.diverged_records, 10);
    assert_eq!(fb.diverged_copied, Some(10));
    let mut parts: Vec<_> = fb
        .partitions
        .iter()
        .filter(|p| p.topic == "orders")
        .collect();
    parts.sort_by_key(|p| p.partition);
    for (p, (partition, n)) in parts.iter().zip(diverged) {
        assert_eq!(
            (p.partition, p.start_at),
            (partition, PER_PARTITION),
            "{p:?}"
        );
        let want = (n > 0).then(|| mirrorflow::api::Diverged {
            topic: "orders".into(),
            first_offset: PER_PARTITION,
            last_offset: PER_PARTITION + n - 1,
            records: n,
        });
        assert_eq!(p.diverged, want, "partition {partition}");
    }
    assert_eq!(parts.len(), PARTITIONS as usize);

    // A holds its history (with the diverged records) and exactly the 5,000 new ones, each
    // once: nothing of the history came back.
    let total = ends(&a, "orders").await.values().sum::<i64>();
    assert_eq!(total, want_total, "records on A");
    let got = keys(&a, "orders", want_total as usize).await;
    let mut want: Vec<(i32, String)> = history.clone();
    want.extend((0..NEW).map(|i| ((i % PARTITIONS as i64) as i32, format!("n{i}"))));
    want.sort();
    assert_eq!(got.len(), want.len());
    assert_eq!(
        got, want,
        "the history plus exactly the new records, no duplicates"
    );

    // copyDiverged: exactly those records, partition by partition.
    let copies = keys(&a, "orders.diverged", 10).await;
    let mut want_copies: Vec<(i32, String)> = diverged
        .iter()
        .flat_map(|&(p, n)| (0..n).map(move |i| (p, format!("d{p}-{i}"))))
        .collect();
    want_copies.sort();
    assert_eq!(copies, want_copies);
    assert_eq!(ends(&a, "orders.diverged").await.values().sum::<i64>(), 10);

    // A restart reads the stored outcome: nothing measured or copied again.
    stop(back).await;
    let back = run.start_file("back.yaml");
    back.0
        .until("failback read back", |s| s.failback.is_some())
        .await;
    let again = back
        .0
         .0
        .borrow()
        .as_ref()
        .unwrap()
        .failback
        .clone()
        .unwrap();
    assert_eq!(again, fb, "the stored report, not a new measurement");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(ends(&a, "orders").await.values().sum::<i64>(), want_total);
    assert_eq!(ends(&a, "orders.diverged").await.values().sum::<i64>(), 10);
    stop(back).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_waits_and_says_why_while_the_failover_is_unknown() {
    let Some((_a, _b, run)) = clusters_with_orders().await else {
        return;
    };
    let (a, b) = (run.src.clone(), run.tgt.clone());
    brokers::create_topic(&b, "orders", PARTITIONS, &[])
        .await
        .unwrap();
    brokers::produce(&b, "orders", &batch(0, PER_PARTITION))
        .await
        .unwrap();
    run.write_back("never-ran", false);
    let back = run.start_file("back.yaml");
    back.0
        .until("the worker says why it waits", |s| {
            s.message.as_deref().is_some_and(|m| {
                m.contains("failover never-ran of flow default/dr is not in mirrorflow-failover.default.dr.internal on source cluster dc2")
            })
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let nothing: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    assert_eq!(
        ends(&a, "orders").await,
        nothing,
        "nothing copied while waiting"
    );
    stop(back).await;
}

/// Waits until `group`'s committed offsets on `topic` of `cluster` are `want`.
async fn until_committed(
    cluster: &str,
    group: &str,
    topic: &str,
    want: &BTreeMap<i32, i64>,
    w: &Sink,
) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got = brokers::group_committed(cluster, group, topic, PARTITIONS)
            .await
            .unwrap_or_default();
        if &got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{group}: committed {got:?}, want {want:?}; {}",
            w.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_translates_the_groups_back_without_skipping() {
    let Some((_a, _b, run)) = clusters_with_orders().await else {
        return;
    };
    let (a, b) = (run.src.clone(), run.tgt.clone());
    failed_over(&run).await;
    let first: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, PER_PARTITION)).collect();

    // A takes records that never reach B (diverged); consumers that moved to B commit there:
    // g-below inside what the failover copied, g-at exactly where B ended (targetEnd).
    let diverged: BTreeMap<i32, i64> = [(0, 7), (1, 0), (2, 3)].into_iter().collect();
    let pairs: Vec<(i32, i64)> = diverged.iter().map(|(p, n)| (*p, *n)).collect();
    brokers::produce(&a, "orders", &keyed("d", &pairs))
        .await
        .unwrap();
    let below: BTreeMap<i32, i64> = [(0, 0), (1, 25), (2, 59)].into_iter().collect();
    brokers::commit_group(&b, "g-below", "orders", &below)
        .await
        .unwrap();
    brokers::commit_group(&b, "g-at", "orders", &first)
        .await
        .unwrap();

    let checkpoint = "---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {name: groups-back}
spec:
  flowRef: {name: back}
  groups: {include: ['g-.*'], refreshIntervalSeconds: 1}
  intervalSeconds: 1
  syncGroupOffsets: true
";
    run.write_back_with("move-1", false, checkpoint);
    let back = run.start_file("back.yaml");
    // Nothing new on B yet: the flow has written nothing, the seed alone translates g-at.
    // Under Identity an offset the failover copied is the same offset on A; B's end
    // (targetEnd) is A's end when the flow started, past the diverged records.
    let resume: BTreeMap<i32, i64> = diverged
        .iter()
        .map(|(p, n)| (*p, PER_PARTITION + n))
        .collect();
    until_committed(&a, "g-below", "orders", &below, &back.0).await;
    until_committed(&a, "g-at", "orders", &resume, &back.0).await;
    assert_eq!(
        ends(&a, "orders").await,
        resume,
        "the flow wrote nothing while the seed translated"
    );

    // B takes 200 new records per partition; the flow copies them back, and g-beyond,
    // committed 150 into them on B, translates by the flow's own syncs.
    const NEW: i64 = 200;
    let new_records: Vec<ProduceRecord> = (0..NEW * PARTITIONS as i64)
        .map(|i| {
            ProduceRecord::new(format!("n{i}"), "new").partition((i % PARTITIONS as i64) as i32)
        })
        .collect();
    brokers::produce(&b, "orders", &new_records).await.unwrap();
    let copied: BTreeMap<i32, i64> = resume.iter().map(|(p, r)| (*p, r + NEW)).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    while ends(&a, "orders").await != copied {
        assert!(
            Instant::now() < deadline,
            "not copied back; {}",
            back.0.describe()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let beyond: BTreeMap<i32, i64> = [(0, 150), (1, 1), (2, NEW)]
        .into_iter()
        .map(|(p, k)| (p, PER_PARTITION + k))
        .collect();
    brokers::commit_group(&b, "g-beyond", "orders", &beyond)
        .await
        .unwrap();
    let beyond_on_a: BTreeMap<i32, i64> = beyond
        .iter()
        .map(|(p, o)| (*p, o - PER_PARTITION + resume[p]))
        .collect();
    until_committed(&a, "g-beyond", "orders", &beyond_on_a, &back.0).await;
    // The seed's groups stay where they are (nothing moved on B).
    until_committed(&a, "g-at", "orders", &resume, &back.0).await;
    until_committed(&a, "g-below", "orders", &below, &back.0).await;
    eprintln!(
        "groups on B -> on A: g-below {below:?} -> {below:?}; g-at {first:?} -> {resume:?}; g-beyond {beyond:?} -> {beyond_on_a:?}"
    );

    stop(back).await;

    // What each group reads on A from there: nothing it read on B again, nothing it had not
    // read skipped: from its translated offset to A's end (for g-below that passes the
    // diverged records, which no consumer on B ever saw).
    let on_a = [
        ("g-below", &below),
        ("g-at", &resume),
        ("g-beyond", &beyond_on_a),
    ];
    for (g, from) in on_a {
        let mut want: Vec<(i32, i64)> = from
            .iter()
            .flat_map(|(p, o)| (*o..copied[p]).map(move |x| (*p, x)))
            .collect();
        want.sort();
        let got = read_group_on(&a, "orders", g, want.len());
        eprintln!("{g}: {} records read on A from {from:?}", got.len());
        assert_eq!(got, want, "{g}: read again nothing, skipped nothing");
    }
}

/// Reads what group `group` gets from `topic` on `cluster` from its committed offsets:
/// (partition, offset) of each record, sorted.
fn read_group_on(cluster: &str, topic: &str, group: &str, want: usize) -> Vec<(i32, i64)> {
    let c = consumer(cluster, group);
    c.subscribe(&[topic]).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet_until = None;
    while Instant::now() < deadline {
        match c.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => got.push((m.partition(), m.offset())),
            _ if got.len() >= want => {
                // Give a duplicate the chance to show up.
                let q = *quiet_until.get_or_insert(Instant::now() + Duration::from_secs(2));
                if Instant::now() >= q {
                    break;
                }
            }
            _ => {}
        }
    }
    got.sort();
    got
}
