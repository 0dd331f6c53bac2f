//! Smoke tests for the local brokers in `mirrorflow::testkit::brokers`: every broker kind
//! starts, takes a topic, and round-trips records with keys, values, headers and
//! timestamps. Apache Kafka (and tansu, the demo's broker, where it can) also checks topic
//! ids after delete + recreate, and Kafka DeleteRecords. Kafka's tests share one node (topics
//! of their own per run) except the restart's. Child-process brokers are skipped with a
//! `SKIPPED` line when their binary is missing, unless `MIRRORFLOW_REQUIRE_BROKERS=1`.

use std::collections::BTreeMap;
use std::net::TcpStream;

use mirrorflow::testkit::brokers::{
    broker_or_skip, consume_all, delete_records_before, delete_topic, produce,
    shared_kafka_or_skip, topic_id, topic_partitions, watermarks, BrokerError, BrokerKind,
    ConsumeUntil, ConsumedRecord, LocalBroker, ProduceRecord,
};
use pretty_assertions::assert_eq;

const PARTITIONS: i32 = 3;
const BASE_TS: i64 = 1_700_000_000_000;

/// Records covering the shapes replication must preserve: keys, null key, null value
/// (tombstone), headers including a null header value and a repeated header key, explicit
/// timestamps, several partitions.
fn sample_records() -> Vec<ProduceRecord> {
    let mut records: Vec<ProduceRecord> = (0..9)
        .map(|i| {
            ProduceRecord::new(format!("k{i}"), format!("v{i}"))
                .partition(i % PARTITIONS)
                .header("idx", Some(i.to_string().as_bytes()))
                .header("null", None)
                .header("idx", Some(b"again"))
                .timestamp(BASE_TS + i64::from(i))
        })
        .collect();
    records.push(ProduceRecord {
        partition: Some(0),
        key: Some(b"tombstone".to_vec()),
        value: None,
        headers: vec![],
        timestamp_ms: Some(BASE_TS + 100),
    });
    records.push(ProduceRecord {
        partition: Some(1),
        key: None,
        value: Some(b"no key".to_vec()),
        headers: vec![],
        timestamp_ms: Some(BASE_TS + 101),
    });
    records
}

/// A broker of `kind`: Kafka's is the node this binary's tests share.
async fn broker(kind: BrokerKind) -> Option<LocalBroker> {
    match kind {
        BrokerKind::Kafka => shared_kafka_or_skip("smoke").await,
        _ => broker_or_skip(kind).await,
    }
}

/// `base` made unique to this run of this test (nextest: a process per test and retry).
fn unique(base: &str) -> String {
    format!("{base}-{}", std::process::id())
}

fn topic_configs(kind: BrokerKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        // The mock takes no topic configs.
        BrokerKind::Mock => &[],
        // Kafka applies retention.ms to the records' timestamps (2023): ten years keeps them.
        _ => &[
            ("cleanup.policy", "delete"),
            ("retention.ms", "315360000000"),
        ],
    }
}

async fn roundtrip(kind: BrokerKind) {
    let Some(broker) = broker(kind).await else {
        return;
    };
    eprintln!("{kind} started in {:?}", broker.started_in());
    let bootstrap = broker.bootstrap_servers();
    let topic = &unique("smoke");
    broker
        .create_topic(topic, PARTITIONS, topic_configs(kind))
        .await
        .unwrap();
    assert_eq!(
        topic_partitions(&bootstrap, topic).await.unwrap(),
        Some(PARTITIONS)
    );

    let records = sample_records();
    let delivered = produce(&bootstrap, topic, &records).await.unwrap();
    assert_eq!(delivered.len(), records.len());

    // Offsets grow per partition in produce order.
    let mut last_offset: BTreeMap<i32, i64> = BTreeMap::new();
    for (record, d) in records.iter().zip(&delivered) {
        assert_eq!(Some(d.partition), record.partition, "{d:?}");
        if let Some(prev) = last_offset.insert(d.partition, d.offset) {
            assert!(d.offset > prev, "offsets not increasing: {prev} then {d:?}");
        }
    }

    let mut expected: Vec<ConsumedRecord> = records
        .iter()
        .zip(&delivered)
        .map(|(r, d)| ConsumedRecord {
            partition: d.partition,
            offset: d.offset,
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: r.timestamp_ms,
        })
        .collect();
    expected.sort_by_key(|r| (r.partition, r.offset));
    let consumed = consume_all(&bootstrap, topic, ConsumeUntil::count(records.len()))
        .await
        .unwrap();
    assert_eq!(consumed, expected);

    for (partition, last) in last_offset {
        let (low, high) = watermarks(&bootstrap, topic, partition).await.unwrap();
        assert_eq!(low, 0, "{kind} low watermark of partition {partition}");
        if kind == BrokerKind::Tansu {
            // tansu's high watermark is "last batch base + 1" when the producer batches.
            eprintln!("{kind}: high watermark of partition {partition} is {high} (last offset {last}); not asserted, known tansu bug");
        } else {
            assert_eq!(
                high,
                last + 1,
                "{kind} high watermark of partition {partition}"
            );
        }
    }
}

#[tokio::test]
async fn kafka_roundtrip() {
    roundtrip(BrokerKind::Kafka).await;
}

#[tokio::test]
async fn tansu_roundtrip() {
    roundtrip(BrokerKind::Tansu).await;
}

#[tokio::test]
async fn mock_roundtrip() {
    roundtrip(BrokerKind::Mock).await;
}

/// "Target down, then back": stop refuses connections, restart listens on the same port.
/// Kafka (on disk) and the mock keep their data; tansu comes back empty (memory storage).
async fn restart_same_port(kind: BrokerKind) {
    let Some(mut broker) = broker_or_skip(kind).await else {
        return;
    };
    let bootstrap = broker.bootstrap_servers();
    broker.create_topic("before", 1, &[]).await.unwrap();
    produce(&bootstrap, "before", &[ProduceRecord::new("k", "v")])
        .await
        .unwrap();

    broker.stop().unwrap();
    assert!(!broker.is_running());
    if kind.is_child_process() {
        let addr = bootstrap.parse().unwrap();
        let refused = TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2));
        assert!(
            refused.is_err(),
            "{kind} still accepts connections after stop"
        );
    }
    broker.stop().unwrap(); // no-op on a stopped broker

    broker.restart().await.unwrap();
    eprintln!("{kind} restarted in {:?}", broker.started_in());
    assert!(broker.is_running());
    assert_eq!(broker.bootstrap_servers(), bootstrap);
    let survived = topic_partitions(&bootstrap, "before").await.unwrap();
    if kind == BrokerKind::Tansu {
        assert_eq!(
            survived, None,
            "{kind}: memory storage should be empty after restart"
        );
    } else {
        assert_eq!(survived, Some(1));
        let records = consume_all(&bootstrap, "before", ConsumeUntil::count(1))
            .await
            .unwrap();
        assert_eq!(records[0].value.as_deref(), Some(&b"v"[..]));
    }
}

#[tokio::test]
async fn kafka_restart_same_port() {
    restart_same_port(BrokerKind::Kafka).await;
}

#[tokio::test]
async fn tansu_restart_same_port() {
    restart_same_port(BrokerKind::Tansu).await;
}

#[tokio::test]
async fn mock_restart_same_port() {
    restart_same_port(BrokerKind::Mock).await;
}

/// Delete + recreate gives the topic a new id and restarts its offsets at 0: the signal
/// TopicReset detection relies on.
async fn recreate_gives_new_topic_id(kind: BrokerKind) {
    let Some(broker) = broker(kind).await else {
        return;
    };
    let bootstrap = broker.bootstrap_servers();
    let topic = &unique("reborn");
    broker.create_topic(topic, 2, &[]).await.unwrap();
    produce(
        &bootstrap,
        topic,
        &[ProduceRecord::new("a", "1").partition(0)],
    )
    .await
    .unwrap();
    let first = topic_id(&bootstrap, topic).await.unwrap();
    assert!(first.is_some(), "{kind} reports no topic id");

    delete_topic(&bootstrap, topic).await.unwrap();
    assert_eq!(topic_partitions(&bootstrap, topic).await.unwrap(), None);
    broker.create_topic(topic, 2, &[]).await.unwrap();
    let second = topic_id(&bootstrap, topic).await.unwrap();
    assert!(
        second.is_some(),
        "{kind} reports no topic id after recreate"
    );
    assert_ne!(first, second, "{kind}: recreated topic kept its id");

    let delivered = produce(
        &bootstrap,
        topic,
        &[ProduceRecord::new("b", "2").partition(0)],
    )
    .await
    .unwrap();
    assert_eq!(
        delivered[0].offset, 0,
        "{kind}: recreated topic continues old offsets"
    );
    eprintln!("{kind} topic ids: {first:?} -> {second:?}");
}

#[tokio::test]
async fn kafka_recreate_gives_new_topic_id() {
    recreate_gives_new_topic_id(BrokerKind::Kafka).await;
}

#[tokio::test]
async fn tansu_recreate_gives_new_topic_id() {
    recreate_gives_new_topic_id(BrokerKind::Tansu).await;
}

#[tokio::test]
async fn kafka_delete_records_moves_log_start() {
    let Some(broker) = broker(BrokerKind::Kafka).await else {
        return;
    };
    let bootstrap = broker.bootstrap_servers();
    let topic = &unique("trimmed");
    broker.create_topic(topic, 1, &[]).await.unwrap();
    let records: Vec<ProduceRecord> = (0..10)
        .map(|i| ProduceRecord::new(format!("k{i}"), format!("v{i}")).partition(0))
        .collect();
    let delivered = produce(&bootstrap, topic, &records).await.unwrap();
    assert_eq!(delivered.last().unwrap().offset, 9);

    let low = delete_records_before(&bootstrap, topic, 0, 5)
        .await
        .unwrap();
    assert_eq!(low, 5);
    assert_eq!(watermarks(&bootstrap, topic, 0).await.unwrap(), (5, 10));
    let rest = consume_all(&bootstrap, topic, ConsumeUntil::count(5))
        .await
        .unwrap();
    let offsets: Vec<i64> = rest.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![5, 6, 7, 8, 9]);
    assert_eq!(rest[0].value.as_deref(), Some(&b"v5"[..]));
}

#[tokio::test]
async fn mock_rejects_topic_configs_and_admin_only_calls() {
    let broker = LocalBroker::start(BrokerKind::Mock).await.unwrap();
    let err = broker
        .create_topic("cfg", 1, &[("cleanup.policy", "compact")])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BrokerError::Unsupported { kind: BrokerKind::Mock, op } if op.contains("cleanup.policy")),
        "{err}"
    );
    assert!(broker.log_path().is_none());
    // The mock exposes its MockCluster for error injection.
    let bootstrap = broker.with_mock(|c| c.bootstrap_servers()).unwrap();
    assert_eq!(bootstrap, broker.bootstrap_servers());
}
