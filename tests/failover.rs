//! End to end: a standalone worker runs a flow file holding a MirrorFlow and an
//! OffsetCheckpoint; the real engine replicates and writes offset syncs, worker 0's
//! checkpoint runner translates a source group's offsets and commits them on the target; a
//! consumer of that group on the target then reads exactly what it had not consumed. On two
//! Apache Kafka nodes of the test's own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorflow::testkit::brokers::{self, broker_or_skip, BrokerKind, ConsumeUntil, ProduceRecord};
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
