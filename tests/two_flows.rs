//! Two flows at once, end to end on Apache Kafka (clusters of each test's own: the flows
//! select every topic), each a standalone worker (`run_with`) following
//! its flow file as `mirrorflow worker --flow` does:
//! - A→B and B→A with the default `Prefix` policy: each side gets the other's topics once
//!   (`dc1.orders` on B, `dc2.payments` on A) and nothing comes back (`dc2.dc1.orders` on A
//!   never exists); a consumer group fails over from A to B through `mirrorflow translate`
//!   (the CSV reset plan, then `--apply`) while B→A keeps running, and reads on B exactly
//!   what it had not consumed on A;
//! - fan-in A→B and C→B: `dc1.x` and `dc3.x` on B each hold their own source's records, and
//!   each flow's offset syncs, checkpoints and progress are its own topics.

mod replication_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorflow::cli::flow_source::FlowSource;
use mirrorflow::cli::translate::{
    render_csv, run_translate, translate_group, TranslateArgs, TranslateOutput, TranslateReport,
};
use mirrorflow::testkit::brokers::{self, BrokerKind, LocalBroker, ProduceRecord};
use mirrorflow::worker::process::sinks::WorkerSink;
use mirrorflow::worker::replicate::WorkerSnapshot;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message};
use tokio::sync::watch;

use replication_support::{
    assert_same, check_syncs, create, decode_syncs, kafka_pair, read_n, records, standalone_args,
    Standalone, WAIT,
};

/// A flow file: MirrorFlow `name` in namespace `two` from `src` (alias `sa`) to `dst` (alias
/// `da`), every topic (the defaults' exclusions), refreshed every second; with `group`, an
/// OffsetCheckpoint that writes checkpoints but leaves the target group alone (failover is
/// done with `translate`).
fn flow_file(
    dir: &Path,
    name: &str,
    (sa, src): (&str, &LocalBroker),
    (da, dst): (&str, &LocalBroker),
    group: Option<&str>,
) -> PathBuf {
    let mut yaml = format!(
        "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: {name}, namespace: two}}
spec:
  source: {{alias: {sa}, bootstrapServers: '{}'}}
  target: {{alias: {da}, bootstrapServers: '{}'}}
  topics: {{refreshIntervalSeconds: 1}}
  delivery: AtLeastOnce
",
        src.bootstrap_servers(),
        dst.bootstrap_servers()
    );
    if let Some(g) = group {
        yaml.push_str(&format!(
            "---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: {g}, namespace: two}}
spec:
  flowRef: {{name: {name}}}
  groups: {{include: [{g}], refreshIntervalSeconds: 1}}
  intervalSeconds: 1
  syncGroupOffsets: false
"
        ));
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Starts the worker of a flow file; its snapshots land in the returned receiver.
fn start(dir: &Path, flow: &Path) -> (Standalone, watch::Receiver<WorkerSnapshot>) {
    let (tx, rx) = watch::channel(WorkerSnapshot::starting(
        "two",
        "?",
        0,
        1,
        Default::default(),
    ));
    let sink: Arc<dyn WorkerSink> = Arc::new(tx);
    (
        Standalone::start(&standalone_args(flow, &dir.join("secrets")), vec![sink]),
        rx,
    )
}

fn consumer(bootstrap: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap()
}

fn translate_args(flow: &Path, dir: &Path, group: &str, apply: bool) -> TranslateArgs {
    TranslateArgs {
        source: FlowSource::file(flow, dir.join("secrets")),
        output: TranslateOutput::Csv,
        group: group.into(),
        apply,
        timeout_seconds: 10,
    }
}

/// `translate` until the group's checkpoints cover `want` (source offsets per partition of
/// `topic`); bounded by [`WAIT`].
async fn checkpoints_reach(
    args: &TranslateArgs,
    worker: &Standalone,
    topic: &str,
    want: &BTreeMap<i32, i64>,
) -> TranslateReport {
    let begin = Instant::now();
    loop {
        let last = match translate_group(args).await {
            Ok(r) => {
                let have: BTreeMap<i32, i64> = r
                    .rows
                    .iter()
                    .filter(|row| row.topic == topic)
                    .map(|row| (row.partition, row.source_offset))
                    .collect();
                if &have == want {
                    return r;
                }
                format!("{have:?}")
            }
            Err(e) => e.to_string(),
        };
        if begin.elapsed() > WAIT {
            let status = mirrorflow::telemetry::http::get_text(worker.addr, "/status").await;
            panic!(
                "checkpoints of {} on {topic} never reached {want:?}; last: {last}; the worker's /status: {status:?}",
                args.group
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Reads `n` records of `topic` once the worker has created it (bounded by [`WAIT`]).
async fn read_copy(bootstrap: &str, topic: &str, n: usize) -> Vec<brokers::ConsumedRecord> {
    let begin = Instant::now();
    while brokers::topic_partitions(bootstrap, topic)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        assert!(begin.elapsed() < WAIT, "{topic} was never created");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    read_n(bootstrap, topic, n).await
}

/// Waits until the worker replicates `topic` (it owns a partition of it).
async fn wait_owns(rx: &mut watch::Receiver<WorkerSnapshot>, topic: &str) -> WorkerSnapshot {
    let begin = Instant::now();
    loop {
        {
            let s = rx.borrow_and_update();
            if s.partitions.iter().any(|p| p.topic == topic) {
                return s.clone();
            }
        }
        assert!(
            begin.elapsed() < WAIT,
            "the worker never took {topic}; last: {}",
            serde_json::to_string(&*rx.borrow()).unwrap()
        );
        let _ = tokio::time::timeout(Duration::from_millis(300), rx.changed()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_to_b_and_b_to_a_do_not_loop_and_a_group_fails_over_while_both_run() {
    let Some((a, b)) = kafka_pair().await else {
        return;
    };
    let (sa, sb) = (a.bootstrap_servers(), b.bootstrap_servers());
    create(&a, "orders", 3).await;
    create(&b, "payments", 2).await;
    let orders = records("orders", 3, 60);
    let payments = records("payments", 2, 20);
    brokers::produce(&sa, "orders", &orders).await.unwrap();
    brokers::produce(&sb, "payments", &payments).await.unwrap();
    // The group consumed none, part and all of a partition on A (records() adds a tombstone
    // and a null-key record to partition 0: 62 there, 60 elsewhere).
    let group_at: BTreeMap<i32, i64> = [(0, 0), (1, 25), (2, 60)].into_iter().collect();
    brokers::commit_group(&sa, "billing", "orders", &group_at)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ab = flow_file(dir.path(), "ab", ("dc1", &a), ("dc2", &b), Some("billing"));
    let ba = flow_file(dir.path(), "ba", ("dc2", &b), ("dc1", &a), None);
    let (ab_worker, mut ab_rx) = start(dir.path(), &ab);
    let (ba_worker, mut ba_rx) = start(dir.path(), &ba);

    // Each side gets the other's topic, record for record.
    let src_orders = read_n(&sa, "orders", orders.len()).await;
    let src_payments = read_n(&sb, "payments", payments.len()).await;
    assert_same(
        &src_orders,
        &read_copy(&sb, "dc1.orders", orders.len()).await,
        "orders A -> B",
    );
    assert_same(
        &src_payments,
        &read_copy(&sa, "dc2.payments", payments.len()).await,
        "payments B -> A",
    );

    // No loop. A topic created on each side after the remote topics existed is replicated:
    // the discovery that found it listed the remote topic too and left it out (cycle).
    create(&b, "late-b", 1).await;
    brokers::produce(&sb, "late-b", &[ProduceRecord::new("k", "v")])
        .await
        .unwrap();
    create(&a, "late-a", 1).await;
    brokers::produce(&sa, "late-a", &[ProduceRecord::new("k", "v")])
        .await
        .unwrap();
    read_copy(&sa, "dc2.late-b", 1).await;
    read_copy(&sb, "dc1.late-a", 1).await;
    let ba_snap = wait_owns(&mut ba_rx, "late-b").await;
    let ab_snap = wait_owns(&mut ab_rx, "late-a").await;
    // Each cluster's own `heartbeats` topic (both flows' worker 0 write into both) is
    // replicated like MM2 does, whenever it exists by now; the remote `dc1.heartbeats` /
    // `dc2.heartbeats` never travel back, so they must not show up below.
    let topics = |s: &WorkerSnapshot| -> std::collections::BTreeSet<String> {
        s.partitions
            .iter()
            .map(|p| p.topic.clone())
            .filter(|t| t != "heartbeats")
            .collect()
    };
    assert_eq!(
        topics(&ba_snap),
        ["late-b", "payments"].map(String::from).into(),
        "B -> A replicates B's own topics only"
    );
    assert_eq!(
        topics(&ab_snap),
        ["late-a", "orders"].map(String::from).into(),
        "A -> B replicates A's own topics only"
    );
    for (broker, topic) in [
        (&sa, "dc2.dc1.orders"),
        (&sb, "dc1.dc2.payments"),
        (&sa, "dc2.dc1.heartbeats"),
        (&sb, "dc1.dc2.heartbeats"),
    ] {
        assert_eq!(
            brokers::topic_partitions(broker, topic).await.unwrap(),
            None,
            "{topic} must not exist"
        );
    }

    // Failover of billing from A to B while B -> A runs: the checkpoints translate exactly
    // (contiguous topics), the CSV plan for kafka-consumer-groups says so, --apply commits it.
    let args = translate_args(&ab, dir.path(), "billing", false);
    let report = checkpoints_reach(&args, &ab_worker, "dc1.orders", &group_at).await;
    let translated: BTreeMap<i32, i64> = report
        .rows
        .iter()
        .map(|r| (r.partition, r.target_offset))
        .collect();
    assert_eq!(translated, group_at, "translation is exact");
    assert_eq!(
        render_csv(&report),
        "dc1.orders,0,0\ndc1.orders,1,25\ndc1.orders,2,60\n",
        "the reset plan for kafka-consumer-groups.sh --from-file"
    );
    assert!(brokers::group_committed(&sb, "billing", "dc1.orders", 3)
        .await
        .unwrap()
        .is_empty());
    run_translate(translate_args(&ab, dir.path(), "billing", true))
        .await
        .unwrap();
    assert_eq!(
        brokers::group_committed(&sb, "billing", "dc1.orders", 3)
            .await
            .unwrap(),
        group_at
    );

    // The group on B reads exactly the records it had not consumed on A.
    let c = consumer(&sb, "billing");
    c.subscribe(&["dc1.orders"]).unwrap();
    let mut want: Vec<(i32, i64)> = src_orders
        .iter()
        .filter(|r| r.offset >= group_at[&r.partition])
        .map(|r| (r.partition, r.offset))
        .collect();
    let mut got: Vec<(i32, i64)> = Vec::new();
    let deadline = Instant::now() + WAIT;
    while got.len() < want.len() && Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(300)) {
            got.push((m.partition(), m.offset()));
        }
    }
    // Offsets on B equal A's here (contiguous replication), so they name the same records.
    want.sort();
    got.sort();
    assert_eq!(got, want, "no skip, no re-read after failover");
    drop(c);

    ab_worker.stop().await;
    ba_worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_in_a_to_b_and_c_to_b_keep_their_topics_syncs_and_checkpoints_apart() {
    let Some((a, b)) = kafka_pair().await else {
        return;
    };
    let Some(c) = brokers::broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let (sa, sb, sc) = (
        a.bootstrap_servers(),
        b.bootstrap_servers(),
        c.bootstrap_servers(),
    );
    // The same topic name and the same group name on both sources, different records and
    // different progress.
    create(&a, "x", 2).await;
    create(&c, "x", 2).await;
    let from_a = records("from-a", 2, 30);
    let from_c = records("from-c", 2, 45);
    brokers::produce(&sa, "x", &from_a).await.unwrap();
    brokers::produce(&sc, "x", &from_c).await.unwrap();
    let at_a: BTreeMap<i32, i64> = [(0, 10), (1, 30)].into_iter().collect();
    let at_c: BTreeMap<i32, i64> = [(0, 40), (1, 5)].into_iter().collect();
    brokers::commit_group(&sa, "app", "x", &at_a).await.unwrap();
    brokers::commit_group(&sc, "app", "x", &at_c).await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ab = flow_file(dir.path(), "ab", ("dc1", &a), ("dc2", &b), Some("app"));
    let cb = flow_file(dir.path(), "cb", ("dc3", &c), ("dc2", &b), Some("app"));
    let (ab_worker, _) = start(dir.path(), &ab);
    let (cb_worker, _) = start(dir.path(), &cb);

    let src_a = read_n(&sa, "x", from_a.len()).await;
    let src_c = read_n(&sc, "x", from_c.len()).await;
    let on_b_a = read_copy(&sb, "dc1.x", from_a.len()).await;
    let on_b_c = read_copy(&sb, "dc3.x", from_c.len()).await;
    assert_same(&src_a, &on_b_a, "x of A as dc1.x on B");
    assert_same(&src_c, &on_b_c, "x of C as dc3.x on B");

    // Each flow's checkpoints: its own topic on B, its own source's group offsets, its own
    // target topic, translated exactly.
    for (flow, worker, topic, want, checkpoints) in [
        (&ab, &ab_worker, "dc1.x", &at_a, "dc1.checkpoints.internal"),
        (&cb, &cb_worker, "dc3.x", &at_c, "dc3.checkpoints.internal"),
    ] {
        let args = translate_args(flow, dir.path(), "app", false);
        let report = checkpoints_reach(&args, worker, topic, want).await;
        assert_eq!(report.checkpoints_topic, checkpoints);
        assert!(report.rows.iter().all(|r| r.topic == topic), "{report:?}");
        let translated: BTreeMap<i32, i64> = report
            .rows
            .iter()
            .map(|r| (r.partition, r.target_offset))
            .collect();
        assert_eq!(&translated, want, "{topic}");
    }

    ab_worker.stop().await;
    cb_worker.stop().await;

    // Each flow's offset syncs: its own topic on B, every sync mapping its own source's
    // record to its own copy (a sync of the other flow would map different records).
    for (alias, src, copy) in [("dc1", &src_a, &on_b_a), ("dc3", &src_c, &on_b_c)] {
        let topic = mirrorflow::kafka::wire::offset_syncs_topic(alias);
        let syncs = decode_syncs(
            &replication_support::read_idle(&sb, &topic, Duration::from_secs(2)).await,
        );
        check_syncs("x", src, copy, &syncs);
    }
    // And its own progress topic.
    for flow in ["ab", "cb"] {
        let topic = mirrorflow::kafka::wire::progress_topic("two", flow);
        assert!(
            brokers::topic_partitions(&sb, &topic)
                .await
                .unwrap()
                .is_some(),
            "{topic}"
        );
    }
}
