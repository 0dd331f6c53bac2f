//! End-to-end replication tests on Apache Kafka (see `mirrorflow::testkit::kafka`): most on a
//! source and a target this binary's tests share (names of their own, see
//! `replication_support::unique`), the ones that stop a broker or own the `heartbeats` topics
//! on clusters of their own; librdkafka's mock as the target where a test injects errors only
//! it can inject. Skipped (`SKIPPED ...` on stderr) when Kafka's jars are not fetched, unless
//! `MIRRORFLOW_REQUIRE_BROKERS=1`.

mod replication_support;

use std::collections::BTreeMap;
use std::time::Duration;

use mirrorflow::api::{Delivery, MirrorFlowSpec};
use mirrorflow::testkit::brokers::LocalBroker;
use mirrorflow::testkit::brokers::{broker_or_skip, produce, BrokerKind, ProduceRecord};
use mirrorflow::worker::replicate::settings::worker_key;
use replication_support::*;

/// A flow on the shared clusters selecting only `topics`.
fn shared_spec(
    source: &LocalBroker,
    target: &LocalBroker,
    delivery: Delivery,
    topics: &[&str],
) -> MirrorFlowSpec {
    include(shared_flow_spec(source, target, delivery), topics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_records_exactly_at_least_once() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let (orders_t, payments_t) = (unique("alo-orders"), unique("alo-payments"));
    source.create_topic(&orders_t, 3, &[]).await.unwrap();
    source.create_topic(&payments_t, 2, &[]).await.unwrap();
    let orders = records("o", 3, 20);
    let payments = records("p", 2, 15);
    produce(&sb, &orders_t, &orders).await.unwrap();
    produce(&sb, &payments_t, &payments).await.unwrap();

    let spec = shared_spec(
        &source,
        &target,
        Delivery::AtLeastOnce,
        &[&orders_t, &payments_t],
    );
    let mut w = start_worker(&unique("basic"), spec, 0, 1, test_tuning(25));
    let want: BTreeMap<i32, i64> = [(0, 22), (1, 20), (2, 20)].into();
    w.wait_positions(&orders_t, &want).await;
    let want: BTreeMap<i32, i64> = [(0, 17), (1, 15)].into();
    w.wait_positions(&payments_t, &want).await;

    w.stop().await.unwrap();
    let syncs = decode_syncs(
        &read_idle(&tb, "mm2-offset-syncs.dc1.internal", Duration::from_secs(2)).await,
    );
    for (topic, n) in [(&orders_t, orders.len()), (&payments_t, payments.len())] {
        let src = read_n(&sb, topic, n).await;
        let dst = read_n(&tb, &format!("dc1.{topic}"), n).await;
        assert_same(&src, &dst, topic);
        check_syncs(topic, &src, &dst, &syncs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_records_exactly_exactly_once() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique("eos-orders");
    source.create_topic(&topic, 3, &[]).await.unwrap();
    let orders = records("o", 3, 30);
    produce(&sb, &topic, &orders).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::ExactlyOnce, &[&topic]);
    let mut w = start_worker(&unique("eos"), spec, 0, 1, test_tuning(25));
    let want: BTreeMap<i32, i64> = [(0, 32), (1, 30), (2, 30)].into();
    w.wait_positions(&topic, &want).await;
    let src = read_n(&sb, &topic, orders.len()).await;
    let dst = read_n(&tb, &format!("dc1.{topic}"), orders.len()).await;
    assert_same(&src, &dst, &topic);
    assert!(w.metrics.transactions.with_label_values(&["commit"]).get() > 0);
    w.stop().await.unwrap();
    // Commit markers take target offsets: the syncs must describe the gaps.
    let syncs = decode_syncs(
        &read_idle(&tb, "mm2-offset-syncs.dc1.internal", Duration::from_secs(2)).await,
    );
    check_syncs(&topic, &src, &dst, &syncs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn selection_cycles_and_new_topics() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    // Every name starts with this test's own prefix: the patterns select nothing of others.
    let u = unique("sel");
    let name = |t: &str| format!("{u}-{t}");
    for (t, n) in [
        (name("orders"), 2),
        (name("orders-tmp"), 1),
        (name("audit"), 1),
        (format!("dc2.{u}-orders"), 1),
        (name("other"), 1),
    ] {
        create(&source, &t, n).await;
        produce(&sb, &t, &records(&t, n, 3)).await.unwrap();
    }
    let mut spec = include(
        shared_flow_spec(&source, &target, Delivery::AtLeastOnce),
        &[
            &format!("{u}-orders.*"),
            &name("audit"),
            &format!("dc2\\.{u}-.*"),
            &format!("{u}-late-.*"),
        ],
    );
    spec.topics.exclude = vec![".*-tmp".into()];
    let mut w = start_worker(&unique("select"), spec, 0, 1, test_tuning(50));
    w.wait_positions(&name("orders"), &[(0, 5), (1, 3)].into())
        .await;
    w.wait_positions(&name("audit"), &[(0, 5)].into()).await;

    // A topic created while running is found (refresh every second; the bound is generous).
    let late_t = name("late-topic");
    create(&source, &late_t, 2).await;
    let late = records("late", 2, 4);
    produce(&sb, &late_t, &late).await.unwrap();
    w.wait_positions(&late_t, &ends(&late)).await;

    let s = w.status.borrow().clone();
    let topics: std::collections::BTreeSet<String> =
        s.partitions.iter().map(|p| p.topic.clone()).collect();
    assert_eq!(
        topics,
        [name("audit"), late_t.clone(), name("orders")].into(),
        "owned topics"
    );
    w.stop().await.unwrap();

    use mirrorflow::testkit::brokers::topic_partitions;
    for (t, want) in [
        (format!("dc1.{u}-orders"), Some(2)),
        (format!("dc1.{u}-audit"), Some(1)),
        (format!("dc1.{late_t}"), Some(2)),
        (format!("dc1.{u}-orders-tmp"), None),
        (format!("dc1.dc2.{u}-orders"), None),
        (format!("dc1.{u}-other"), None),
    ] {
        assert_eq!(
            topic_partitions(&tb, &t).await.unwrap(),
            want,
            "target topic {t}"
        );
    }
    let src = read_n(&sb, &late_t, late.len()).await;
    let dst = read_n(&tb, &format!("dc1.{late_t}"), late.len()).await;
    assert_same(&src, &dst, &late_t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identity_policy_keeps_names() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let orders = unique("id-orders");
    let remote = format!("dc2.{orders}");
    create(&source, &orders, 2).await;
    create(&source, &remote, 1).await;
    let recs = records("o", 2, 5);
    produce(&sb, &orders, &recs).await.unwrap();
    produce(&sb, &remote, &records("c", 1, 2)).await.unwrap();
    let spec = policy(
        shared_spec(&source, &target, Delivery::AtLeastOnce, &[&orders, &remote]),
        mirrorflow::api::ReplicationPolicyType::Identity,
    );
    let mut w = start_worker(&unique("identity"), spec, 0, 1, test_tuning(50));
    w.wait_positions(&orders, &ends(&recs)).await;
    // Identity cannot recognise where a topic came from: dc2.<orders> is replicated too.
    w.wait_positions(&remote, &[(0, 4)].into()).await;
    w.stop().await.unwrap();
    let src = read_n(&sb, &orders, recs.len()).await;
    let dst = read_n(&tb, &orders, recs.len()).await;
    assert_same(&src, &dst, "orders (identity)");
    let s = read_n(&tb, &remote, 4).await;
    assert_eq!(s.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_split_partitions() {
    use mirrorflow::worker::replicate::assign::owner;
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    // Names whose partitions both workers get a share of (the split hashes the names).
    let (orders_t, payments_t) = (0..)
        .map(|i| {
            (
                unique(&format!("split{i}-orders")),
                unique(&format!("split{i}-payments")),
            )
        })
        .find(|(o, p)| {
            let owners: std::collections::BTreeSet<u32> = (0..6)
                .map(|x| owner(o, x, 2))
                .chain((0..3).map(|x| owner(p, x, 2)))
                .collect();
            owners.len() == 2
        })
        .unwrap();
    create(&source, &orders_t, 6).await;
    create(&source, &payments_t, 3).await;
    let orders = records("o", 6, 10);
    let payments = records("p", 3, 10);
    produce(&sb, &orders_t, &orders).await.unwrap();
    produce(&sb, &payments_t, &payments).await.unwrap();
    let spec = shared_spec(
        &source,
        &target,
        Delivery::AtLeastOnce,
        &[&orders_t, &payments_t],
    );
    let flow = unique("split");
    let mut w0 = start_worker(&flow, spec.clone(), 0, 2, test_tuning(50));
    let mut w1 = start_worker(&flow, spec, 1, 2, test_tuning(50));
    let owned = |s: &mirrorflow::worker::replicate::WorkerSnapshot| -> std::collections::BTreeSet<(String, i32)> {
        s.partitions.iter().map(|p| (p.topic.clone(), p.partition)).collect()
    };
    let all = |s: &mirrorflow::worker::replicate::WorkerSnapshot| {
        !s.partitions.is_empty()
            && s.partitions
                .iter()
                .all(|p| p.position.is_some_and(|x| x >= 10))
    };
    let s0 = w0.wait_status("worker 0 caught up", all).await;
    let s1 = w1.wait_status("worker 1 caught up", all).await;
    let (o0, o1) = (owned(&s0), owned(&s1));
    assert!(
        o0.is_disjoint(&o1),
        "no partition owned twice: {o0:?} {o1:?}"
    );
    let union: std::collections::BTreeSet<(String, i32)> = o0.union(&o1).cloned().collect();
    let expected: std::collections::BTreeSet<(String, i32)> = (0..6)
        .map(|p| (orders_t.clone(), p))
        .chain((0..3).map(|p| (payments_t.clone(), p)))
        .collect();
    assert_eq!(union, expected);
    for (o, i) in [(&o0, 0u32), (&o1, 1)] {
        for (t, p) in o {
            assert_eq!(owner(t, *p, 2), i);
        }
    }
    w0.stop().await.unwrap();
    w1.stop().await.unwrap();
    for (topic, n) in [(&orders_t, orders.len()), (&payments_t, payments.len())] {
        let src = read_n(&sb, topic, n).await;
        let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
        assert_same(&src, &dst, topic);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_keeps_position() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique("paused-orders");
    let copy = format!("dc1.{topic}");
    create(&source, &topic, 1).await;
    let first = records("a", 1, 10);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    let mut w = start_worker(&unique("paused"), spec.clone(), 0, 1, test_tuning(50));
    w.wait_positions(&topic, &[(0, 12)].into()).await;

    let mut paused = spec.clone();
    paused.paused = true;
    w.spec.send(paused).unwrap();
    w.wait_status("paused", |s| {
        s.state == mirrorflow::api::WorkerState::Paused
    })
    .await;
    let second = records("b", 1, 10);
    produce(&sb, &topic, &second).await.unwrap();
    // The worker sees the new records (high watermark past its position) but stays put.
    let s = w
        .wait_status("new records seen while paused", |s| {
            s.partitions.iter().any(|p| {
                p.high_watermark
                    .zip(p.position)
                    .is_some_and(|(h, pos)| h > pos)
            })
        })
        .await;
    assert_eq!(s.partitions[0].position, Some(12));
    assert!(matches!(
        s.partitions[0].state,
        mirrorflow::worker::replicate::PartitionState::Paused
    ));
    assert_eq!(
        read_idle(&tb, &copy, Duration::from_secs(1)).await.len(),
        12
    );

    w.spec.send(spec).unwrap();
    w.wait_positions(&topic, &[(0, 24)].into()).await;
    w.stop().await.unwrap();
    let src = read_n(&sb, &topic, 24).await;
    let dst = read_n(&tb, &copy, 24).await;
    assert_same(&src, &dst, "orders after resume");
}

const CRASH_BATCH: usize = 20;

/// Kills a worker mid-stream (the task is dropped wherever it is: no flush, no abort, an
/// open transaction left behind), restarts it, checks that it resumed from its stored
/// progress and returns what the source and (read_committed) the target hold.
async fn crash_and_resume(
    delivery: Delivery,
    tag: &str,
) -> Option<(
    Vec<mirrorflow::testkit::brokers::ConsumedRecord>,
    Vec<mirrorflow::testkit::brokers::ConsumedRecord>,
)> {
    let (source, target) = shared_pair().await?;
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique(&format!("{tag}-orders"));
    create(&source, &topic, 3).await;
    let recs = records("o", 3, 400);
    produce(&sb, &topic, &recs).await.unwrap();
    let batch = CRASH_BATCH;
    let spec = shared_spec(&source, &target, delivery, &[&topic]);
    let flow = unique(tag);
    let mut w = start_worker(&flow, spec.clone(), 0, 1, test_tuning(batch));
    // Some progress, not all of it.
    w.wait_status("some progress", |s| {
        s.partitions.iter().filter_map(|p| p.position).sum::<i64>() >= 300
    })
    .await;
    w.kill().await;
    let mut w = start_worker(&flow, spec, 0, 1, test_tuning(batch));
    let resumed = w
        .wait_status("resumed from progress", |s| {
            s.partitions.len() == 3 && s.partitions.iter().all(|p| p.position.is_some())
        })
        .await;
    assert!(
        resumed
            .partitions
            .iter()
            .filter_map(|p| p.position)
            .sum::<i64>()
            >= 300 - 3 * batch as i64,
        "restart resumes from stored progress, not from the beginning: {:?}",
        resumed.partitions
    );
    w.wait_positions(&topic, &ends(&recs)).await;
    w.stop().await.unwrap();
    let src = read_n(&sb, &topic, recs.len()).await;
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    Some((src, dst))
}

/// AtLeastOnce: nothing lost, duplicates within one batch per partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_and_resume_at_least_once() {
    if let Some((src, dst)) = crash_and_resume(Delivery::AtLeastOnce, "crash-alo").await {
        let dups = assert_no_loss_bounded_dups(&src, &dst, CRASH_BATCH, "orders");
        eprintln!("duplicates per partition after the crash: {dups:?}");
    }
}

/// ExactlyOnce: the crash leaves a transaction open; the restarted worker's InitProducerId
/// fences it and the coordinator aborts it, so a read_committed reader (librdkafka's
/// default, which the testkit's reader keeps) sees every source record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crash_and_resume_exactly_once() {
    if let Some((src, dst)) = crash_and_resume(Delivery::ExactlyOnce, "crash-eos").await {
        assert_same(&src, &dst, "orders after a crash, read_committed");
    }
}

/// A target that refuses the worker's transactions (here librdkafka's mock answering
/// InitProducerId with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, what a Kafka without the
/// TransactionalId ACL answers): the worker fails at once, saying what to change, and never
/// falls back to AtLeastOnce by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_on_a_target_without_transactions_fails_clearly_mock() {
    let (Some((source, _)), Some(target)) =
        (shared_pair().await, broker_or_skip(BrokerKind::Mock).await)
    else {
        return;
    };
    let topic = unique("refused-orders");
    let flow = unique("eos-refused");
    create(&source, &topic, 1).await;
    // The mock has no CreateTopics: the worker finds these existing.
    create(&target, &format!("dc1.{topic}"), 1).await;
    create(
        &target,
        &mirrorflow::kafka::wire::progress_topic("test", &flow),
        1,
    )
    .await;
    create(&target, "mm2-offset-syncs.dc1.internal", 1).await;
    target
        .with_mock(|m| {
            m.request_errors(
                rdkafka::types::RDKafkaApiKey::InitProducerId,
                &[rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED; 5],
            )
        })
        .unwrap();
    let spec = shared_spec(&source, &target, Delivery::ExactlyOnce, &[&topic]);
    let mut w = start_worker(&flow, spec, 0, 1, test_tuning(50));
    let s = w
        .wait_status("failed", |s| {
            s.state == mirrorflow::api::WorkerState::Failed
        })
        .await;
    let msg = s.message.unwrap_or_default();
    assert!(msg.contains("spec.delivery: AtLeastOnce"), "{msg}");
    assert!(msg.contains("dc2"), "names the target: {msg}");
    assert!(w
        .readiness
        .not_ready_reason()
        .is_some_and(|r| r.contains("refused transactions")));
    let err = w.stop().await.unwrap_err().to_string();
    assert!(err.contains("spec.delivery: AtLeastOnce"), "{err}");
}

/// Records, some large enough to be sent from the fetch buffer, on a compacted topic whose
/// configs travel to the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicates_records_and_topic_configs() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique("cfg-orders");
    let copy = format!("dc1.{topic}");
    // Retention applies to the records' timestamps (from 2023): ten years keeps them.
    let retention = "315360000000";
    source
        .create_topic(
            &topic,
            3,
            &[
                ("cleanup.policy", "compact"),
                ("retention.ms", retention),
                ("min.insync.replicas", "1"),
            ],
        )
        .await
        .unwrap();
    // A compacted topic refuses records without a key.
    let orders: Vec<ProduceRecord> = records_some_large("o", 3, 50, 2_000)
        .into_iter()
        .filter(|r| r.key.is_some())
        .collect();
    produce(&sb, &topic, &orders).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    let mut w = start_worker(&unique("configs"), spec, 0, 1, test_tuning(40));
    w.wait_positions(&topic, &ends(&orders)).await;
    // Lag is exact (right watermarks): zero once caught up.
    let s = w
        .wait_status("lag 0", |s| {
            s.partitions.iter().all(|p| p.lag_records == Some(0))
        })
        .await;
    assert_eq!(s.replication_lag.records, 0);
    // Bytes replicated are the records' own (key, value, header names and values), whether
    // they went with a copy or without (every third record).
    let own: usize = orders
        .iter()
        .map(|r| {
            let headers: usize = r
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
                .sum();
            r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + headers
        })
        .sum();
    assert_eq!(
        w.metrics.bytes.with_label_values(&[&topic]).get(),
        own as u64
    );
    w.stop().await.unwrap();
    let src = read_n(&sb, &topic, orders.len()).await;
    let dst = read_n(&tb, &copy, orders.len()).await;
    assert_same(&src, &dst, &topic);
    let syncs = decode_syncs(
        &read_idle(&tb, "mm2-offset-syncs.dc1.internal", Duration::from_secs(2)).await,
    );
    check_syncs(&topic, &src, &dst, &syncs);
    // Topic configs set on the source topic travel, except broker-specific ones.
    let configs = topic_configs(&tb, &copy).await;
    eprintln!("target topic configs: {configs:?}");
    assert_eq!(
        configs.get("cleanup.policy").map(String::as_str),
        Some("compact")
    );
    assert_eq!(
        configs.get("retention.ms").map(String::as_str),
        Some(retention)
    );
    let source_configs = topic_configs(&sb, &topic).await;
    assert_eq!(
        source_configs
            .get("min.insync.replicas")
            .map(String::as_str),
        Some("1"),
        "set on the source: {source_configs:?}"
    );
    assert!(
        !configs.contains_key("min.insync.replicas"),
        "broker-specific configs stay behind: {configs:?}"
    );
}

/// A record larger than the target accepts stops its partition with a clear error; the other
/// partition and the records before it are replicated; nothing is skipped. `tail` more
/// records follow the big one in its partition (spanning later batches).
async fn too_large_record(tag: &str, delivery: Delivery, broker_side: bool, tail: i32) {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique(&format!("{tag}-orders"));
    let copy = format!("dc1.{topic}");
    create(&source, &topic, 2).await;
    let small = |i: i32, p: i32| {
        mirrorflow::testkit::brokers::ProduceRecord::new(format!("k{i}"), vec![b'x'; 100])
            .partition(p)
    };
    let big =
        mirrorflow::testkit::brokers::ProduceRecord::new("big", vec![b'y'; 20_000]).partition(0);
    let mut recs = vec![
        small(0, 0),
        small(1, 0),
        big,
        small(2, 0),
        small(3, 1),
        small(4, 1),
        small(5, 1),
    ];
    recs.extend((0..tail).map(|i| {
        mirrorflow::testkit::brokers::ProduceRecord::new(format!("t{i}"), vec![b'z'; 100])
            .partition(0)
    }));
    produce(&sb, &topic, &recs).await.unwrap();
    let mut spec = shared_spec(&source, &target, delivery, &[&topic]);
    if broker_side {
        // The target topic exists with a small max.message.bytes (the worker keeps it).
        target
            .create_topic(&copy, 2, &[("max.message.bytes", "5000")])
            .await
            .unwrap();
    } else {
        // The producer's own limit (target.config) refuses it before it leaves the worker.
        spec.target
            .config
            .insert("message.max.bytes".into(), "5000".into());
    }
    let mut w = start_worker(&unique(tag), spec, 0, 1, test_tuning(50));
    let s = w
        .wait_status("partition 0 failed", |s| {
            s.partitions
                .iter()
                .any(|p| p.partition == 0 && p.state.is_failed())
                && s.partitions
                    .iter()
                    .any(|p| p.partition == 1 && p.position == Some(3))
        })
        .await;
    let p0 = s.partitions.iter().find(|p| p.partition == 0).unwrap();
    let mirrorflow::worker::replicate::PartitionState::Failed(f) = &p0.state else {
        unreachable!()
    };
    assert_eq!(
        f.kind,
        mirrorflow::worker::replicate::status::FailureKind::RecordRejected
    );
    assert_eq!(f.offset, 2, "the big record's offset");
    assert!(
        f.message.to_lowercase().contains("too large"),
        "{}",
        f.message
    );
    assert_eq!(s.state, mirrorflow::api::WorkerState::Degraded);
    assert!(
        s.message
            .as_deref()
            .unwrap_or("")
            .contains(&format!("{topic}/0")),
        "{:?}",
        s.message
    );
    assert!(
        w.metrics
            .errors_of(mirrorflow::telemetry::metrics::ErrorKind::RecordRejected)
            >= 1
    );
    assert_eq!(w.metrics.partitions_failed.get(), 1);
    w.stop().await.unwrap();
    let dst = read_idle(&tb, &copy, Duration::from_secs(2)).await;
    let keys = |p: i32| -> Vec<String> {
        dst.iter()
            .filter(|r| r.partition == p)
            .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
            .collect()
    };
    // Delivered before the big one; never the record after it (no gap on the target).
    if delivery == Delivery::AtLeastOnce || !broker_side {
        let k0 = keys(0);
        let distinct: std::collections::BTreeSet<&String> = k0.iter().collect();
        assert_eq!(distinct.len(), 2, "{k0:?}");
        assert_eq!(&keys(0)[..2], &["k0".to_string(), "k1".to_string()]);
    }
    assert!(
        !keys(0).iter().any(|k| k == "k2" || k.starts_with('t')),
        "nothing after the refused record: {:?}",
        keys(0)
    );
    // The other partition loses nothing and keeps its order; it may see its records again
    // (at least once: each refusal stops the producer, see enable.gapless.guarantee).
    let mut first_seen: Vec<String> = Vec::new();
    for k in keys(1) {
        if !first_seen.contains(&k) {
            first_seen.push(k);
        }
    }
    assert_eq!(first_seen, vec!["k3", "k4", "k5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_large_record_fails_its_partition_broker_limit() {
    too_large_record("big-broker", Delivery::AtLeastOnce, true, 0).await;
}

/// Refused by the producer itself while later batches are being read and sent: none of the
/// partition's later records may reach the target past the refused one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_large_record_fails_its_partition_producer_limit_pipelined() {
    too_large_record("big-pipelined", Delivery::AtLeastOnce, false, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn too_large_record_fails_its_partition_producer_limit_eos() {
    too_large_record("big-eos", Delivery::ExactlyOnce, false, 0).await;
}

/// The target crashes (SIGKILL) and comes back with its data: the worker keeps retrying
/// with backoff and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn target_down_then_back_at_least_once() {
    let (Some((source, _)), Some(mut target)) =
        (shared_pair().await, broker_or_skip(BrokerKind::Kafka).await)
    else {
        return;
    };
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    let topic = unique("down-orders");
    create(&source, &topic, 2).await;
    let first = records("a", 2, 30);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    let mut tuning = test_tuning(20);
    tuning.producer.delivery_timeout = Duration::from_secs(3);
    let mut w = start_worker(&unique("down"), spec, 0, 1, tuning);
    w.wait_positions(&topic, &ends(&first)).await;

    target.stop().unwrap();
    let second = records("b", 2, 30);
    produce(&sb, &topic, &second).await.unwrap();
    // Wait until a batch failed against the down target (bounded, no timing assumption).
    let begin = std::time::Instant::now();
    while w.metrics.batches.with_label_values(&["retried"]).get() == 0 {
        assert!(
            begin.elapsed() < WAIT,
            "no retried batch while the target is down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!w.task.is_finished(), "the worker survives a down target");
    target.restart().await.unwrap();

    let mut all = first.clone();
    all.extend(second.iter().cloned());
    w.wait_positions(&topic, &ends(&all)).await;
    w.stop().await.unwrap();
    let src = read_n(&sb, &topic, all.len()).await;
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(3)).await;
    let dups = assert_no_loss_bounded_dups(&src, &dst, 20, "orders");
    eprintln!("duplicates after the outage: {dups:?}");
}

/// Two workers with the same index (a zombie): the newer one's InitProducerId fences the
/// older one, which stops with an error naming the transactional.id; the newer one goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zombie_is_fenced() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let topic = unique("zombie-orders");
    let flow = unique("zombie");
    create(&source, &topic, 1).await;
    produce(&sb, &topic, &records("a", 1, 10)).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::ExactlyOnce, &[&topic]);
    let mut old = start_worker(&flow, spec.clone(), 0, 1, test_tuning(10));
    old.wait_positions(&topic, &[(0, 12)].into()).await;
    let mut new = start_worker(&flow, spec, 0, 1, test_tuning(10));
    new.wait_status("new worker running", |s| {
        s.state == mirrorflow::api::WorkerState::Running
    })
    .await;
    // Keep records flowing until the old worker tries to commit and learns it was fenced.
    let begin = std::time::Instant::now();
    let mut i = 0;
    while !old.task.is_finished() {
        assert!(begin.elapsed() < WAIT, "the zombie was not fenced");
        produce(&sb, &topic, &records(&format!("z{i}"), 1, 1))
            .await
            .unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = old.stop().await.unwrap_err().to_string();
    assert!(
        err.contains("fenced") && err.contains(&worker_key("test", &flow, 0)),
        "{err}"
    );
    assert!(!new.task.is_finished(), "the new worker goes on");
    new.stop().await.unwrap();
}

/// Records deleted on the source before they were replicated: the partition stops as
/// DataLoss with the exact count (offset validation: auto.offset.reset=error), and the worker
/// reports it; other partitions go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_unreplicated_records_stop_the_partition() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let topic = unique("loss-orders");
    let flow = unique("dataloss");
    let sb = source.bootstrap_servers();
    create(&source, &topic, 2).await;
    let first = records("a", 2, 10);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    let mut w = start_worker(&flow, spec.clone(), 0, 1, test_tuning(50));
    w.wait_positions(&topic, &ends(&first)).await;
    // Pause so nothing is fetched, write more, delete part of it unreplicated.
    let mut paused = spec.clone();
    paused.paused = true;
    w.spec.send(paused).unwrap();
    w.wait_status("paused", |s| {
        s.state == mirrorflow::api::WorkerState::Paused
    })
    .await;
    let second: Vec<_> = records("b", 1, 20);
    produce(&sb, &topic, &second).await.unwrap();
    let low = mirrorflow::testkit::brokers::delete_records_before(&sb, &topic, 0, 17)
        .await
        .unwrap();
    assert_eq!(low, 17);
    w.spec.send(spec.clone()).unwrap();
    let s = w
        .wait_status("DataLoss on orders/0", |s| {
            s.partitions
                .iter()
                .any(|p| p.partition == 0 && p.state.is_failed())
        })
        .await;
    let p0 = s.partitions.iter().find(|p| p.partition == 0).unwrap();
    let mirrorflow::worker::replicate::PartitionState::Failed(f) = &p0.state else {
        unreachable!()
    };
    assert_eq!(
        f.kind,
        mirrorflow::worker::replicate::status::FailureKind::DataLoss
    );
    assert_eq!(f.offset, 12, "the committed position");
    let failure = f.failure.as_ref().expect("status.failures entry");
    assert_eq!(failure.records_lost, Some(5));
    assert_eq!(failure.log_start_offset, Some(17));
    assert_eq!(s.failures.len(), 1);
    assert_eq!(s.state, mirrorflow::api::WorkerState::Degraded);
    assert_eq!(
        p0.position,
        Some(12),
        "position kept: nothing skipped silently"
    );
    // Partition 1 is unaffected and keeps replicating.
    let more = vec![mirrorflow::testkit::brokers::ProduceRecord::new("k", "v").partition(1)];
    produce(&sb, &topic, &more).await.unwrap();
    w.wait_positions(&topic, &[(1, 11)].into()).await;

    // The operator accepts the gap: spec.reset resumes from the log start, once.
    let mut reset = spec.clone();
    reset.reset = Some(mirrorflow::api::ResetRequest {
        id: "accept-gap-1".into(),
        strategy: mirrorflow::api::ResetStrategy::ResumeFromLogStart,
        partitions: vec![],
    });
    w.spec.send(reset.clone()).unwrap();
    // p0 holds offsets 0..34 (12 + 22 records); 17..34 are replicated after the reset.
    let s = w.wait_positions(&topic, &[(0, 34)].into()).await;
    let applied = s.last_applied_reset.clone().expect("lastAppliedReset");
    assert_eq!(applied.id, "accept-gap-1");
    assert_eq!(applied.outcome, mirrorflow::api::ResetOutcome::Applied);
    assert!(
        s.failures.is_empty() && s.state == mirrorflow::api::WorkerState::Running,
        "{s:?}"
    );
    w.stop().await.unwrap();
    let dst = read_idle(
        &target.bootstrap_servers(),
        &format!("dc1.{topic}"),
        Duration::from_secs(2),
    )
    .await;
    let p0: Vec<Vec<u8>> = dst
        .iter()
        .filter(|r| r.partition == 0)
        .map(|r| r.key.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        p0.len(),
        12 + 17,
        "12 before the gap, offsets 17..34 after it"
    );

    // Restarted with the same request still in the spec: not applied again.
    let mut w = start_worker(&flow, reset, 0, 1, test_tuning(50));
    w.wait_positions(&topic, &[(0, 34), (1, 11)].into()).await;
    // Running is published after the start-up reset check.
    let s = w
        .wait_status("running", |s| {
            s.state == mirrorflow::api::WorkerState::Running
        })
        .await;
    assert!(
        s.last_applied_reset.is_none(),
        "the handled id is remembered across restarts: {:?}",
        s.last_applied_reset
    );
    w.stop().await.unwrap();
}

/// The standalone worker: flow file in, HTTP endpoints out, live `paused` edits, clean stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standalone_worker_serves_http_and_follows_the_file() {
    // Clusters of its own: the flow selects every topic and writes heartbeats.
    let Some((source, target)) = kafka_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    create(&source, "orders", 2).await;
    let recs = records("o", 2, 10);
    produce(&sb, "orders", &recs).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.yaml");
    let doc = |paused: bool| {
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: http\n  namespace: team-a\nspec:\n  \
             source: {{alias: dc1, bootstrapServers: '{sb}'}}\n  target: {{alias: dc2, bootstrapServers: '{}'}}\n  \
             delivery: AtLeastOnce\n  paused: {paused}\n  topics: {{refreshIntervalSeconds: 1}}\n",
            target.bootstrap_servers()
        )
    };
    std::fs::write(&path, doc(false)).unwrap();
    let w = Standalone::start(&standalone_args(&path, dir.path()), Vec::new());
    assert_eq!(w.namespace, "team-a");
    wait_http(w.addr, "/healthz", "healthy", |_| true).await;
    wait_http(w.addr, "/readyz", "ready", |_| true).await;
    // The source's `heartbeats` (written by this very worker, spec.heartbeats is on by
    // default) is replicated too.
    let orders = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        v["partitions"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter(|p| p["topic"] == "orders")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    let body = wait_http(w.addr, "/status", "caught up", |b| {
        let v: serde_json::Value = serde_json::from_str(b).unwrap();
        let ps = orders(&v);
        ps.len() == 2
            && ps
                .iter()
                .map(|p| p["position"].as_i64().unwrap_or(0))
                .sum::<i64>()
                == 22
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["workerId"], "http-worker-0");
    assert_eq!(v["namespace"], "team-a");
    assert_eq!(v["state"], "Running");
    assert_eq!(orders(&v)[0]["targetTopic"], "dc1.orders");
    // orders (2 partitions) and heartbeats (1).
    wait_http(w.addr, "/metrics", "records counted", |b| {
        b.contains("mirrorflow_worker_records_replicated_total{topic=\"orders\"} 22")
            && b.contains("mirrorflow_worker_partitions_owned 3")
    })
    .await;

    std::fs::write(&path, doc(true)).unwrap();
    wait_http(w.addr, "/status", "paused from the file", |b| {
        b.contains("\"state\":\"Paused\"")
    })
    .await;
    w.stop().await;
}

/// `spec.workers.inFlightMiB` reaches the running worker's window: 3 MB of records with a
/// 1 MiB window take many batches (the batches' share is half of it, 512 KiB, and each batch
/// at most a third of that), where the default 45 MiB would take one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_flight_mib_sets_the_window() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let topic = unique("window-blobs");
    let sb = source.bootstrap_servers();
    create(&source, &topic, 1).await;
    let value = "x".repeat(10_000);
    let recs: Vec<_> = (0..300)
        .map(|i| ProduceRecord::new(format!("k{i}"), value.clone()).partition(0))
        .collect();
    produce(&sb, &topic, &recs).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: {}\nspec:\n  \
             source: {{alias: dc1, bootstrapServers: '{sb}'}}\n  target: {{alias: dc2, bootstrapServers: '{}'}}\n  \
             delivery: AtLeastOnce\n  workers: {{inFlightMiB: 1}}\n  topics: {{include: ['{topic}']}}\n  \
             heartbeats: {{intervalSeconds: 0}}\n",
            unique("window"),
            target.bootstrap_servers()
        ),
    )
    .unwrap();
    let w = Standalone::start(&standalone_args(&path, dir.path()), Vec::new());
    let metrics = wait_http(w.addr, "/metrics", "300 records replicated", |b| {
        b.contains(&format!(
            "mirrorflow_worker_records_replicated_total{{topic=\"{topic}\"}} 300"
        ))
    })
    .await;
    let committed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mirrorflow_worker_batches_total{outcome=\"committed\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no committed batch count in {metrics}"));
    // 300 records of about 10 KB in shares of ≤ 512 KiB / 3, about 17 records: at least 17
    // batches (9 if the whole window went to the batches).
    assert!(
        committed >= 17,
        "{committed} batches for 3 MB with a 1 MiB window"
    );
    w.stop().await;
}

/// A graceful stop commits what was consumed: the restarted worker continues exactly where
/// it stopped (no duplicates even with AtLeastOnce), and a new flow with startFrom Latest
/// skips what existed before it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn graceful_restart_and_start_from_latest() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let topic = unique("graceful-orders");
    let flow = unique("graceful");
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    create(&source, &topic, 2).await;
    let first = records("a", 2, 40);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    let mut w = start_worker(&flow, spec.clone(), 0, 1, test_tuning(15));
    w.wait_positions(&topic, &ends(&first)).await;
    w.stop().await.unwrap();

    let second = records("b", 2, 10);
    produce(&sb, &topic, &second).await.unwrap();
    let mut w = start_worker(&flow, spec.clone(), 0, 1, test_tuning(15));
    let mut want = ends(&first);
    for (p, n) in ends(&second) {
        *want.entry(p).or_default() += n;
    }
    w.wait_positions(&topic, &want).await;
    w.stop().await.unwrap();
    let n = first.len() + second.len();
    let src = read_n(&sb, &topic, n).await;
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    assert_same(&src, &dst, "orders after a graceful restart");

    // startFrom Latest: a new flow (own progress) starts at the end of existing partitions.
    let mut latest = spec.clone();
    latest.start_from = mirrorflow::api::StartFrom::Latest;
    latest.replication_policy.separator = "-".into();
    let mut w = start_worker(&unique("latest"), latest, 0, 1, test_tuning(15));
    let s = w
        .wait_status("positions known", |s| {
            s.partitions.len() == 2 && s.partitions.iter().all(|p| p.position.is_some())
        })
        .await;
    let positions: BTreeMap<i32, i64> = s
        .partitions
        .iter()
        .map(|p| (p.partition, p.position.unwrap()))
        .collect();
    assert_eq!(positions, want, "Latest starts at the end");
    let fresh = vec![mirrorflow::testkit::brokers::ProduceRecord::new("new", "v").partition(1)];
    produce(&sb, &topic, &fresh).await.unwrap();
    w.wait_positions(&topic, &[(1, want[&1] + 1)].into()).await;
    w.stop().await.unwrap();
    let dst = read_n(&tb, &format!("dc1-{topic}"), 1).await;
    assert_eq!(dst[0].key.as_deref(), Some(&b"new"[..]));
}

/// A producer queue smaller than the batch window (`target.config` can make it so): records
/// read while the queue is full stay in the batch and go out behind the ones already sent;
/// syncs and progress wait for room. Nothing is lost, duplicated or reordered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_producer_queue_keeps_order_and_loses_nothing() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let topic = unique("flood");
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    create(&source, &topic, 3).await;
    let flood = records_some_large("f", 3, 600, 1_500);
    produce(&sb, &topic, &flood).await.unwrap();
    let spec = shared_spec(&source, &target, Delivery::AtLeastOnce, &[&topic]);
    // A window of 400 records (the open batch gets at most a third) in front of a queue
    // of 60.
    let mut tuning = test_tuning(400);
    tuning.producer.queue_messages = 60;
    let mut w = start_worker(&unique("queue-full"), spec, 0, 1, tuning);
    w.wait_positions(&topic, &ends(&flood)).await;
    let batches = &w.metrics.batches;
    assert_eq!(
        batches.with_label_values(&["retried"]).get(),
        0,
        "a full queue is waited for, not failed"
    );
    w.stop().await.unwrap();
    let src = read_n(&sb, &topic, flood.len()).await;
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    assert_same(&src, &dst, &topic);
    let syncs = decode_syncs(
        &read_idle(&tb, "mm2-offset-syncs.dc1.internal", Duration::from_secs(2)).await,
    );
    check_syncs(&topic, &src, &dst, &syncs);
}

/// ExactlyOnce, a record the target refuses inside a transaction after records of the same
/// partition were sent in it (librdkafka's mock target answers the third produce request
/// with POLICY_VIOLATION; one record per request): the transaction is aborted, the records
/// before the refused one are written again and committed, and the partition stops exactly
/// at the refused record, nothing after it committed; SkipRecord then skips that one offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rejected_record_inside_a_transaction_stops_at_it_mock_eos() {
    use mirrorflow::testkit::brokers::ProduceRecord;
    let (Some((source, _)), Some(target)) =
        (shared_pair().await, broker_or_skip(BrokerKind::Mock).await)
    else {
        return;
    };
    let topic = unique("txn-orders");
    let copy = format!("dc1.{topic}");
    let sb = source.bootstrap_servers();
    let tb = target.bootstrap_servers();
    create(&source, &topic, 1).await;
    // The mock has no CreateTopics: the worker finds these existing.
    create(&target, &copy, 1).await;
    create(&target, "mirrorflow-progress.test.txn-rejected.internal", 1).await;
    create(&target, "mm2-offset-syncs.dc1.internal", 1).await;
    let rec = |k: String| ProduceRecord::new(k, vec![b'x'; 100]).partition(0);
    produce(
        &sb,
        &topic,
        &(0..3).map(|i| rec(format!("a{i}"))).collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let mut spec = shared_spec(&source, &target, Delivery::ExactlyOnce, &[&topic]);
    // One record per produce request, so the injected error names one record.
    spec.target
        .config
        .insert("batch.num.messages".into(), "1".into());
    let mut w = start_worker("txn-rejected", spec.clone(), 0, 1, test_tuning(50));
    w.wait_positions(&topic, &[(0, 3)].into()).await;
    target
        .with_mock(|m| {
            use rdkafka::types::RDKafkaRespErr as E;
            m.request_errors(
                rdkafka::types::RDKafkaApiKey::Produce,
                &[
                    E::RD_KAFKA_RESP_ERR_NO_ERROR,
                    E::RD_KAFKA_RESP_ERR_NO_ERROR,
                    E::RD_KAFKA_RESP_ERR_POLICY_VIOLATION,
                ],
            )
        })
        .unwrap();
    // b0, b1 land in the first two requests, b2 (offset 5) is refused, b3..b5 follow it.
    produce(
        &sb,
        &topic,
        &(0..6).map(|i| rec(format!("b{i}"))).collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let s = w
        .wait_status("orders/0 rejected", |s| {
            s.failures
                .iter()
                .any(|f| f.topic == topic && f.partition == 0)
        })
        .await;
    let f = s.failures[0].clone();
    assert_eq!(
        f.type_,
        mirrorflow::api::FailureType::RecordRejected,
        "{f:?}"
    );
    let at = f.requested_offset;
    let pos = s.partitions[0].position;
    assert_eq!(pos, Some(at), "stopped exactly at the refused record");
    assert!(
        f.reason
            .as_deref()
            .unwrap_or("")
            .contains("PolicyViolation"),
        "{f:?}"
    );
    assert!(
        w.metrics.transactions.with_label_values(&["abort"]).get() >= 1,
        "the poisoned transaction was aborted"
    );
    let skipped = format!("b{}", at - 3);
    let first_seen = |records: &[mirrorflow::testkit::brokers::ConsumedRecord]| {
        let mut seen: Vec<String> = Vec::new();
        for r in records {
            let k = String::from_utf8(r.key.clone().unwrap()).unwrap();
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        (seen, records.len())
    };
    let (seen, copies) = first_seen(&read_idle(&tb, &copy, Duration::from_secs(2)).await);
    let mut want: Vec<String> = (0..3).map(|i| format!("a{i}")).collect();
    want.extend((0..(at - 3)).map(|i| format!("b{i}")));
    let before = want.len();
    assert_eq!(&seen[..before], &want[..], "everything before it, in order");
    assert!(
        !seen.contains(&skipped),
        "the refused record never lands: {seen:?}"
    );
    let reset = MirrorFlowSpec {
        reset: Some(mirrorflow::api::ResetRequest {
            id: "skip".into(),
            strategy: mirrorflow::api::ResetStrategy::SkipRecord,
            partitions: vec![],
        }),
        ..spec.clone()
    };
    w.spec.send(reset).unwrap();
    let s = w
        .wait_status("skip applied, caught up", |s| {
            s.failures.is_empty() && s.partitions[0].position == Some(9)
        })
        .await;
    let r = s.last_applied_reset.unwrap();
    assert_eq!(r.skipped_records.len(), 1, "{r:?}");
    assert_eq!(r.skipped_records[0].offset, at);
    w.stop().await.unwrap();
    let (seen_after, copies_after) =
        first_seen(&read_idle(&tb, &copy, Duration::from_secs(2)).await);
    let mut want: Vec<String> = (0..3).map(|i| format!("a{i}")).collect();
    want.extend((0..6).map(|i| format!("b{i}")).filter(|k| *k != skipped));
    assert_eq!(seen_after, want, "only {skipped} skipped, order kept");
    println!(
        "FAULT record-rejected-eos: POLICY_VIOLATION on the third produce request of a \
         transaction (mock target): aborted, stopped at offset {at} with the {before} records \
         before it ({copies} copies visible on the mock, which shows aborted records), \
         {skipped} never written; SkipRecord skipped offset {at} only ({} records, \
         {copies_after} copies)",
        want.len()
    );
}
