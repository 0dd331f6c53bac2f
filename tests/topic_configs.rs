//! Topic config re-sync and replication factors on Apache Kafka: a config changed on a source
//! topic after its target topic was created reaches the target on a later refresh, excluded
//! configs never do, a target topic the flow did not create is never altered, the changes are
//! counted, and the replication factors of the spec reach CreateTopics (a three-node target)
//! or are refused by it (one node). The source, and the one-node target, are shared by this
//! binary's tests (names of their own per run).
//!
//! The retention.ms values are decades: Kafka applies them to the records' timestamps (2023).

mod replication_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mirrorflow::api::Delivery;
use mirrorflow::kafka::topic_config::ConfigChange;
use mirrorflow::kafka::wire::progress_topic;
use mirrorflow::testkit::brokers::{create_topic_replicated, kafka_or_skip, produce};
use mirrorflow::testkit::kafka::KafkaConfig;
use mirrorflow::worker::replicate::created::created_topics_store;
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use replication_support::*;

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .unwrap()
}

/// IncrementalAlterConfigs of one topic, as an operator would change it.
async fn alter(bootstrap: &str, topic: &str, changes: Vec<ConfigChange>) {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    let r = tokio::task::spawn_blocking(move || {
        mirrorflow::kafka::topic_config::alter_topic_configs(
            &admin(&b),
            &[(t, changes)],
            Duration::from_secs(10),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(r, vec![Ok(())], "alter {topic}");
}

fn set(name: &str, value: &str) -> ConfigChange {
    ConfigChange::Set(name.into(), value.into())
}

/// Replicas per partition of `topic`, from metadata.
async fn replicas(bootstrap: &str, topic: &str) -> Vec<usize> {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &b)
            .create()
            .unwrap();
        let md = c.fetch_metadata(Some(&t), Duration::from_secs(10)).unwrap();
        md.topics()[0]
            .partitions()
            .iter()
            .map(|p| p.replicas().len())
            .collect()
    })
    .await
    .unwrap()
}

/// Waits (bounded) until the configs set on `topic` satisfy `pred`; returns them.
async fn wait_configs(
    bootstrap: &str,
    topic: &str,
    what: &str,
    pred: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let begin = Instant::now();
    loop {
        let c = topic_configs(bootstrap, topic).await;
        if pred(&c) {
            return c;
        }
        assert!(begin.elapsed() < WAIT, "{topic}: {what}; configs now {c:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn topic_configs_resync_only_on_topics_the_flow_created() {
    let Some((source, _)) = shared_pair().await else {
        return;
    };
    // Three nodes: replication factors 3 and 2 are accepted, and min.insync.replicas counts.
    let Some(target) = kafka_or_skip(KafkaConfig::three_nodes()).await else {
        return;
    };
    let (orders, legacy, flow) = (unique("orders"), unique("legacy"), unique("cfg"));
    let (copy, legacy_copy) = (format!("dc1.{orders}"), format!("dc1.{legacy}"));
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    source
        .create_topic(
            &orders,
            2,
            &[
                ("retention.ms", "3153600000000"),
                ("min.insync.replicas", "1"),
                ("max.message.bytes", "200000"),
            ],
        )
        .await
        .unwrap();
    source
        .create_topic(&legacy, 1, &[("retention.ms", "3153600000000")])
        .await
        .unwrap();
    // Someone else's topic, there before the flow: replicated into, never altered.
    create_topic_replicated(
        &tb,
        &legacy_copy,
        1,
        1,
        &[("retention.ms", "3153600000001")],
    )
    .await
    .unwrap();
    let recs = records("a", 2, 5);
    produce(&sb, &orders, &recs).await.unwrap();
    produce(&sb, &legacy, &records("l", 1, 3)).await.unwrap();

    let mut spec = include(
        shared_flow_spec(&source, &target, Delivery::AtLeastOnce),
        &[&orders, &legacy],
    );
    spec.topic_configs.exclude = vec![r"max\.message\.bytes".into()];
    spec.target.replication_factor = Some(3);
    spec.internal_topics.replication_factor = Some(2);
    let mut w = start_worker(&flow, spec, 0, 1, test_tuning(50));
    w.wait_positions(&orders, &ends(&recs)).await;
    w.wait_positions(&legacy, &BTreeMap::from([(0, 5)])).await;

    // Created with the source's own configs, without MM2's and the spec's exclusions.
    let created = topic_configs(&tb, &copy).await;
    assert_eq!(
        created,
        BTreeMap::from([("retention.ms".to_string(), "3153600000000".to_string())]),
        "min.insync.replicas (MM2's exclusion) and max.message.bytes (topicConfigs.exclude) stay behind"
    );
    // The replication factors reached CreateTopics.
    assert_eq!(replicas(&tb, &copy).await, vec![3, 3]);
    assert_eq!(replicas(&tb, &progress_topic("test", &flow)).await, vec![2]);
    assert_eq!(
        replicas(&tb, &created_topics_store("test", &flow)).await,
        vec![2]
    );
    assert_eq!(
        replicas(&tb, &legacy_copy).await,
        vec![1],
        "the pre-existing topic keeps its own"
    );
    let changes = |op: &str| {
        w.metrics
            .topic_config_changes
            .with_label_values(&[op])
            .get()
    };
    assert_eq!(
        (changes("set"), changes("delete")),
        (0, 0),
        "creation is no change"
    );

    // The source topics change after their target topics exist.
    alter(
        &sb,
        &orders,
        vec![
            set("retention.ms", "6307200000000"),
            set("cleanup.policy", "compact"),
            set("max.message.bytes", "300000"),
            set("min.insync.replicas", "2"),
        ],
    )
    .await;
    alter(&sb, &legacy, vec![set("retention.ms", "9460800000000")]).await;
    let synced = wait_configs(&tb, &copy, "source changes synced", |c| {
        c.get("retention.ms").map(String::as_str) == Some("6307200000000")
            && c.contains_key("cleanup.policy")
    })
    .await;
    assert_eq!(
        synced,
        BTreeMap::from([
            ("cleanup.policy".to_string(), "compact".to_string()),
            ("retention.ms".to_string(), "6307200000000".to_string()),
        ]),
        "excluded configs never travel, also on a re-sync"
    );
    assert_eq!((changes("set"), changes("delete")), (2, 0));
    // The same refresh looked at legacy: not the flow's, so untouched.
    assert_eq!(
        topic_configs(&tb, &legacy_copy).await,
        BTreeMap::from([("retention.ms".to_string(), "3153600000001".to_string())])
    );

    // A config no longer set on the source is deleted on the target (its default applies).
    alter(
        &sb,
        &orders,
        vec![ConfigChange::Delete("retention.ms".into())],
    )
    .await;
    let after = wait_configs(&tb, &copy, "retention.ms deleted", |c| {
        !c.contains_key("retention.ms")
    })
    .await;
    assert_eq!(
        after,
        BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())])
    );
    assert_eq!((changes("set"), changes("delete")), (2, 1));
    // The start's refresh and the two that re-synced ran beside the loop: each one is
    // counted and timed.
    assert!(
        w.metrics.refreshes.get() >= 3,
        "{}",
        w.metrics.refreshes.get()
    );
    assert!(w.metrics.refresh_seconds.get() > 0.0);
    let text = w.metrics.encode();
    assert!(
        text.contains("mirrorflow_worker_topic_config_changes_total{op=\"set\"} 2"),
        "{text}"
    );

    // An operator raises the target topic's min.insync.replicas above its replication
    // factor: no acks=all write can succeed (Kafka answers NOT_ENOUGH_REPLICAS); the worker
    // says so, naming both.
    alter(&tb, &copy, vec![set("min.insync.replicas", "4")]).await;
    let s = w
        .wait_status("dc1.orders reported unwritable", |s| {
            !s.unwritable_topics.is_empty()
        })
        .await;
    assert_eq!(s.unwritable_topics.len(), 1, "{:?}", s.unwritable_topics);
    let why = &s.unwritable_topics[0];
    assert!(
        why.contains(&copy)
            && why.contains("replication factor 3")
            && why.contains("min.insync.replicas=4"),
        "{why}"
    );
    assert_eq!(s.state, mirrorflow::api::WorkerState::Degraded);
    assert_eq!(s.message.as_deref(), Some(why.as_str()));
    assert_eq!(
        s.to_worker_status(None).unwritable_topics,
        s.unwritable_topics,
        "in the status entry (the flow's TopicUnwritable condition)"
    );
    assert_eq!(w.metrics.topics_unwritable.get(), 1);
    // min.insync.replicas is excluded from the sync: the worker never reset it itself.
    assert_eq!(
        topic_configs(&tb, &copy)
            .await
            .get("min.insync.replicas")
            .map(String::as_str),
        Some("4")
    );
    alter(&tb, &copy, vec![set("min.insync.replicas", "3")]).await;
    let s = w
        .wait_status("dc1.orders writable again", |s| {
            s.unwritable_topics.is_empty()
        })
        .await;
    assert_eq!(s.state, mirrorflow::api::WorkerState::Running);
    assert_eq!(w.metrics.topics_unwritable.get(), 0);
    w.stop().await.unwrap();
}

/// A replication factor the target refuses is reported, naming the topic and the factor: 2
/// on one node (Kafka answers INVALID_REPLICATION_FACTOR above its broker count).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_replication_factor_is_reported() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let orders = unique("rf-orders");
    let copy = format!("dc1.{orders}");
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, &orders, 1).await;
    produce(&sb, &orders, &records("a", 1, 3)).await.unwrap();
    let mut spec = include(
        shared_flow_spec(&source, &target, Delivery::AtLeastOnce),
        &[&orders],
    );
    spec.target.replication_factor = Some(2);
    let mut w = start_worker(&unique("rf"), spec, 0, 1, test_tuning(50));
    let s = w
        .wait_status("the refused creation reported", |s| {
            !s.unwritable_topics.is_empty()
        })
        .await;
    let why = &s.unwritable_topics[0];
    eprintln!("reported: {why}");
    assert!(
        why.contains(&copy) && why.contains("replication factor 2"),
        "{why}"
    );
    assert!(
        w.metrics.topics_unwritable.get() == 1
            && w.metrics
                .errors_of(mirrorflow::telemetry::metrics::ErrorKind::TopicSync)
                >= 1
    );
    assert!(
        !topic_configs_exist(&tb, &copy).await,
        "nothing was created"
    );
    w.stop().await.unwrap();
}

/// Whether metadata lists `topic`.
async fn topic_configs_exist(bootstrap: &str, topic: &str) -> bool {
    let (b, t) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &b)
            .create()
            .unwrap();
        let md = c.fetch_metadata(None, Duration::from_secs(10)).unwrap();
        md.topics().iter().any(|x| x.name() == t)
    })
    .await
    .unwrap()
}

/// An internal topic with fewer replicas than its min.insync.replicas would fail every
/// progress write: the worker does not start and says why, naming the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unwritable_internal_topic_is_reported() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (orders, flow) = (unique("internal-orders"), unique("internal"));
    create(&source, &orders, 1).await;
    let progress = progress_topic("test", &flow);
    target
        .create_topic(&progress, 1, &[("min.insync.replicas", "2")])
        .await
        .unwrap();
    let spec = include(
        shared_flow_spec(&source, &target, Delivery::AtLeastOnce),
        &[&orders],
    );
    let mut w = start_worker(&flow, spec, 0, 1, test_tuning(50));
    let s = w
        .wait_status("the progress topic reported", |s| {
            s.message
                .as_deref()
                .is_some_and(|m| m.contains("min.insync.replicas"))
        })
        .await;
    let m = s.message.unwrap();
    eprintln!("reported: {m}");
    assert!(
        m.contains(&progress)
            && m.contains("replication factor 1")
            && m.contains("min.insync.replicas=2"),
        "{m}"
    );
    assert_eq!(s.state, mirrorflow::api::WorkerState::Starting);
    assert!(s.partitions.iter().all(|p| p.position.is_none()));
    w.stop().await.unwrap();
}
