//! Data safety on Apache Kafka (a source and a target shared by this binary's tests, names of
//! their own per run): what a restarting worker reads back as its positions, and commits that
//! time out. Kafka's read_committed readers stop at the last stable offset and skip aborted
//! records, as these tests need.

mod replication_support;

use std::time::{Duration, Instant};

use mirrorflow::api::Delivery;
use mirrorflow::kafka::wire::Progress;
use mirrorflow::testkit::brokers::{produce, proxied_broker_or_skip, BrokerKind};
use mirrorflow::testkit::proxy::{api, Faults};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;
use replication_support::*;

/// A transaction another worker holds open on the progress topic hides every progress record
/// committed after it began (read_committed stops at the last stable offset). A restarting
/// worker must not resume from the older positions it can see (that would replicate records
/// twice): it waits until the transaction ends, then resumes from its latest progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn open_transaction_does_not_hide_newer_progress() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (topic, flow) = (unique("hidden-orders"), unique("hidden"));
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, &topic, 1).await;
    let first = records("a", 1, 20);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = include(
        shared_flow_spec(&source, &target, Delivery::ExactlyOnce),
        &[&topic],
    );
    let mut tuning = test_tuning(50);
    // The hung transaction outlasts the first read attempts; the worker retries.
    tuning.io_timeout = Duration::from_secs(3);
    let mut w = start_worker(&flow, spec.clone(), 0, 1, tuning.clone());
    w.wait_positions(&topic, &ends(&first)).await;

    // Another writer (a worker of the flow mid-commit) opens a transaction on the progress
    // topic and keeps it open.
    let progress_topic = mirrorflow::kafka::wire::progress_topic("test", &flow);
    let other =
        hold_progress_transaction(&tb, &progress_topic, &unique("another-worker"), None).await;
    // The worker replicates on; its progress commits behind the open transaction.
    let second = records("b", 1, 30);
    produce(&sb, &topic, &second).await.unwrap();
    let total = ends(&first)[&0] + ends(&second)[&0];
    w.wait_positions(&topic, &[(0, total)].into()).await;
    w.stop().await.unwrap();

    let mut w = start_worker(&flow, spec, 0, 1, tuning);
    let begin = Instant::now();
    loop {
        let reason = w.readiness.not_ready_reason().unwrap_or_default();
        if reason.contains("transaction another worker has open") {
            break;
        }
        assert!(
            begin.elapsed() < WAIT,
            "the worker waits for the open transaction"
        );
        assert!(
            w.status.borrow().partitions.is_empty(),
            "no partition is taken before progress is read: {:?}",
            w.status.borrow().partitions
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = begin.elapsed();
    tokio::task::spawn_blocking(move || other.commit_transaction(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let s = w.wait_positions(&topic, &[(0, total)].into()).await;
    w.stop().await.unwrap();
    let n = first.len() + second.len();
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    let src = read_n(&sb, &topic, n).await;
    assert_same(&src, &dst, "no record replicated twice");
    assert!(s.failures.is_empty());
    println!(
        "FAULT open-transaction: another writer held a transaction open on the progress topic \
         while the worker restarted: it waited {} s (not ready, saying why) and resumed at \
         {total}, its latest progress: {n} records, 0 duplicates",
        waited.as_secs()
    );
}

/// After a scale-down, a transaction a worker that no longer exists left open on the progress
/// topic would hide newer progress until the coordinator's timeout (here 15 minutes). Worker
/// 0 fences the transactional ids of the workers scaled away at start, which aborts it: the
/// restarted worker resumes at its latest progress at once, and nothing is written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scaled_away_workers_open_transaction_is_fenced() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (topic, flow) = (unique("retire-orders"), unique("retire"));
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, &topic, 1).await;
    let first = records("a", 1, 20);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = include(
        shared_flow_spec(&source, &target, Delivery::ExactlyOnce),
        &[&topic],
    );
    let mut tuning = test_tuning(50);
    tuning.io_timeout = Duration::from_secs(3);
    let mut w = start_worker(&flow, spec.clone(), 0, 1, tuning.clone());
    w.wait_positions(&topic, &ends(&first)).await;

    // Worker 1 of the flow's earlier two, mid-commit when it was scaled away.
    let retired_id = mirrorflow::worker::replicate::settings::worker_key("test", &flow, 1);
    let progress_topic = mirrorflow::kafka::wire::progress_topic("test", &flow);
    let zombie = hold_progress_transaction(&tb, &progress_topic, &retired_id, Some(900_000)).await;
    let second = records("b", 1, 30);
    produce(&sb, &topic, &second).await.unwrap();
    let total = ends(&first)[&0] + ends(&second)[&0];
    w.wait_positions(&topic, &[(0, total)].into()).await;
    w.stop().await.unwrap();

    let mut w = start_worker_after_scale_down(&flow, spec, 0, 1, tuning, vec![1]);
    // Without the fence this waits for the 15-minute transaction timeout (and WAIT fails it).
    let s = w.wait_positions(&topic, &[(0, total)].into()).await;
    w.stop().await.unwrap();
    let fenced =
        tokio::task::spawn_blocking(move || zombie.commit_transaction(Duration::from_secs(10)))
            .await
            .unwrap();
    assert!(
        fenced.is_err(),
        "the scaled-away worker's transaction was fenced"
    );
    let n = first.len() + second.len();
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    let src = read_n(&sb, &topic, n).await;
    assert_same(&src, &dst, "no record replicated twice");
    assert!(s.failures.is_empty());
    println!(
        "FAULT retired-transaction: a scaled-away worker ({retired_id}) held a transaction open \
         on the progress topic; worker 0 fenced it at start and resumed at {total}: {n} \
         records, 0 duplicates; the zombie's commit was refused: {}",
        fenced.unwrap_err()
    );
}

/// A commit that times out waiting for the coordinator (EndTxn held by the proxy) is
/// committed again, never aborted and re-sent: the batch lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_that_times_out_is_committed_again() {
    let Some((source, _)) = shared_pair().await else {
        return;
    };
    // A target of its own behind the proxy that holds its EndTxn requests.
    let Some((target, proxy)) = proxied_broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let topic = unique("slow-orders");
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, &topic, 1).await;
    let first = records("a", 1, 20);
    produce(&sb, &topic, &first).await.unwrap();
    let spec = include(
        shared_flow_spec(&source, &target, Delivery::ExactlyOnce),
        &[&topic],
    );
    let mut tuning = test_tuning(50);
    tuning.producer.commit_timeout = Duration::from_secs(1);
    let mut w = start_worker(&unique("slowcommit"), spec, 0, 1, tuning);
    w.wait_positions(&topic, &ends(&first)).await;

    proxy.set(Faults {
        hold_api: Some(api::END_TXN),
        ..Faults::default()
    });
    let second = records("b", 1, 30);
    produce(&sb, &topic, &second).await.unwrap();
    // Wait until the worker did something about the held commit: committed again (right)
    // or gave up on it (aborted: wrong, shows below as duplicates).
    let count = |label: &str| w.metrics.transactions.with_label_values(&[label]).get();
    let begin = Instant::now();
    while count("commit_retry") < 2 && count("abort") == 0 {
        assert!(begin.elapsed() < WAIT, "the held commit is handled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.set(Faults::default());
    assert_eq!(
        count("abort"),
        0,
        "the held commit was committed again, never aborted"
    );
    let total = ends(&first)[&0] + ends(&second)[&0];
    w.wait_positions(&topic, &[(0, total)].into()).await;
    w.stop().await.unwrap();
    let n = first.len() + second.len();
    let src = read_n(&sb, &topic, n).await;
    let dst = read_idle(&tb, &format!("dc1.{topic}"), Duration::from_secs(2)).await;
    assert_same(&src, &dst, "the batch whose commit timed out landed once");
}

/// A producer with transactional id `id` that has written a progress record to `topic` in a
/// transaction it keeps open (`timeout_ms`: its transaction timeout, else librdkafka's).
async fn hold_progress_transaction(
    bootstrap: &str,
    topic: &str,
    id: &str,
    timeout_ms: Option<u64>,
) -> BaseProducer {
    let (bootstrap, topic, id) = (bootstrap.to_string(), topic.to_string(), id.to_string());
    tokio::task::spawn_blocking(move || {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &bootstrap)
            .set("transactional.id", &id);
        if let Some(ms) = timeout_ms {
            config.set("transaction.timeout.ms", ms.to_string());
        }
        let p: BaseProducer = config.create().unwrap();
        p.init_transactions(Duration::from_secs(10)).unwrap();
        p.begin_transaction().unwrap();
        let rec = Progress {
            topic: "elsewhere".into(),
            partition: 0,
            next_offset: 0,
            topic_id: String::new(),
            reset_id: String::new(),
            failure: String::new(),
        };
        let (k, v) = (rec.encode_key().unwrap(), rec.encode_value().unwrap());
        p.send(BaseRecord::to(&topic).partition(0).key(&k).payload(&v))
            .unwrap();
        p.flush(Duration::from_secs(10)).unwrap();
        p
    })
    .await
    .unwrap()
}
