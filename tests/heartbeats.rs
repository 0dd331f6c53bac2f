//! MirrorMaker 2 heartbeats on Apache Kafka (clusters of each test's own: the tests read the
//! whole `heartbeats` topics): where worker 0 writes them and in
//! which layout, which heartbeats topics the flow replicates (whatever `topics` selects,
//! never back to where they came from), the replication latency they measure while no
//! application record flows, and `spec.heartbeats.intervalSeconds: 0`.

mod replication_support;

use std::time::Duration;

use mirrorflow::kafka::wire::Heartbeat;
use mirrorflow::testkit::brokers::{produce, topic_partitions, ProduceRecord};
use replication_support::*;

/// A standalone flow dc1 → dc2 replicating only `orders` (ExactlyOnce, the default), policy
/// `policy`, heartbeats every `interval` seconds.
fn flow_doc(name: &str, sb: &str, tb: &str, policy: &str, interval: i32) -> String {
    format!(
        "apiVersion: mirrorflow.io/v1alpha1\nkind: MirrorFlow\nmetadata:\n  name: {name}\nspec:\n  \
         source: {{alias: dc1, bootstrapServers: '{sb}'}}\n  target: {{alias: dc2, bootstrapServers: '{tb}'}}\n  \
         replicationPolicy: {{type: {policy}}}\n  \
         topics: {{include: [orders], refreshIntervalSeconds: 1}}\n  heartbeats: {{intervalSeconds: {interval}}}\n"
    )
}

/// Decodes every record of `topic` as an MM2 heartbeat (panics on one that is not), with
/// the record's own timestamp.
async fn heartbeats(bootstrap: &str, topic: &str) -> Vec<(Heartbeat, Option<i64>)> {
    read_idle(bootstrap, topic, Duration::from_millis(1500))
        .await
        .into_iter()
        .map(|r| {
            let hb = Heartbeat::decode(
                r.key.as_deref().unwrap_or_default(),
                r.value.as_deref().unwrap_or_default(),
            )
            .unwrap_or_else(|e| panic!("{topic} offset {}: not a heartbeat: {e}", r.offset));
            assert_eq!(
                r.partition, 0,
                "{topic}: MM2 writes heartbeats to partition 0"
            );
            (hb, r.timestamp_ms)
        })
        .collect()
}

fn aliases(hbs: &[(Heartbeat, Option<i64>)]) -> Vec<(String, String)> {
    let mut v: Vec<_> = hbs
        .iter()
        .map(|(h, _)| (h.source_alias.clone(), h.target_alias.clone()))
        .collect();
    v.dedup();
    v
}

/// The placement and layout, the replication of heartbeats topics with the topic filter
/// excluding them, no replication back, and the latency without application traffic.
/// Under Identity, the policy with the caveats: the source's heartbeats must still be
/// prefixed on the target (else they would land in the target's own `heartbeats`), and
/// `dc2.heartbeats` on the source must still count as having come from the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_placement_replication_and_latency() {
    for policy in ["Prefix", "Identity"] {
        let Some((source, target)) = kafka_pair().await else {
            return;
        };
        let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
        create(&source, "orders", 1).await;
        // Heartbeats a reverse flow dc2 → dc1 brought here: they came from the target.
        create(&source, "dc2.heartbeats", 1).await;
        let from_target = Heartbeat {
            source_alias: "dc1".into(),
            target_alias: "dc2".into(),
            timestamp_ms: 1_700_000_000_000,
        };
        produce(
            &sb,
            "dc2.heartbeats",
            &[ProduceRecord::new(
                from_target.encode_key().unwrap(),
                from_target.encode_value().unwrap(),
            )
            .partition(0)],
        )
        .await
        .unwrap();

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flow.yaml");
        std::fs::write(&path, flow_doc("hb", &sb, &tb, policy, 1)).unwrap();
        let w = Standalone::start(&standalone_args(&path, dir.path()), Vec::new());
        // Latency measured while not one application record was produced.
        let body = wait_http(w.addr, "/status", "latency measured", |b| {
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            v["replicationLatency"]["lastSeenTime"].is_string()
                && v["replicationLatency"]["p99Millis"].is_i64()
        })
        .await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let lat = &v["replicationLatency"];
        let (last, p99) = (
            lat["lastMillis"].as_i64().unwrap(),
            lat["p99Millis"].as_i64().unwrap(),
        );
        eprintln!("{policy}: replication latency without traffic: last {last} ms, p99 {p99} ms");
        assert!(lat["lastError"].is_null(), "{policy}: {lat}");
        assert!(last >= 0 && p99 >= 0, "{policy}: {lat}");
        let metrics = wait_http(w.addr, "/metrics", "latency histogram", |b| {
            b.contains("mirrorflow_worker_replication_latency_seconds_count")
                && !b.contains("mirrorflow_worker_replication_latency_seconds_count 0")
        })
        .await;
        assert!(
            metrics.contains(
                "mirrorflow_worker_heartbeats_total{cluster=\"source\",outcome=\"written\"}"
            ),
            "{metrics}"
        );
        w.stop().await;

        // The flow's own heartbeat connector: into the target's `heartbeats`, (dc1, dc2).
        let on_target = heartbeats(&tb, "heartbeats").await;
        assert!(
            !on_target.is_empty(),
            "{policy}: no heartbeats on the target"
        );
        assert_eq!(
            aliases(&on_target),
            [("dc1".into(), "dc2".into())],
            "{policy}"
        );
        // The reverse pair's: into the source's `heartbeats`, (dc2, dc1).
        let on_source = heartbeats(&sb, "heartbeats").await;
        assert_eq!(
            aliases(&on_source),
            [("dc2".into(), "dc1".into())],
            "{policy}"
        );
        for (hb, ts) in on_source.iter().chain(&on_target) {
            assert_eq!(
                *ts,
                Some(hb.timestamp_ms),
                "{policy}: record timestamp = heartbeat's"
            );
        }
        // Replicated although `topics.include` is [orders], as dc1.heartbeats under both
        // policies (MM2's Identity policy prefixes heartbeats too).
        let replica = heartbeats(&tb, "dc1.heartbeats").await;
        assert_eq!(
            aliases(&replica),
            [("dc2".into(), "dc1".into())],
            "{policy}"
        );
        let written: Vec<i64> = on_source.iter().map(|(h, _)| h.timestamp_ms).collect();
        assert!(
            replica
                .iter()
                .all(|(h, _)| written.contains(&h.timestamp_ms)),
            "{policy}: the replica holds the source's heartbeats"
        );
        eprintln!(
            "{policy}: {} heartbeats on the source, {} on the target, {} replicated",
            on_source.len(),
            on_target.len(),
            replica.len()
        );
        // Not sent back where they came from.
        assert_eq!(
            topic_partitions(&tb, "dc1.dc2.heartbeats").await.unwrap(),
            None,
            "{policy}"
        );
        assert_eq!(
            topic_partitions(&tb, "dc2.heartbeats").await.unwrap(),
            None,
            "{policy}"
        );
    }
}

/// `intervalSeconds: 0` writes nothing while the flow replicates; switching it on in the
/// file starts the heartbeats (so their absence before was not a matter of waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_off_write_nothing() {
    let Some((source, target)) = kafka_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, "orders", 1).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.yaml");
    std::fs::write(&path, flow_doc("quiet", &sb, &tb, "Prefix", 0)).unwrap();
    let w = Standalone::start(&standalone_args(&path, dir.path()), Vec::new());
    let recs = records("o", 1, 20);
    let replicated = |n: usize| {
        move |b: &str| {
            let v: serde_json::Value = serde_json::from_str(b).unwrap();
            v["partitions"][0]["position"].as_i64() == Some(n as i64)
        }
    };
    produce(&sb, "orders", &recs).await.unwrap();
    // Two rounds of records replicated: the worker has long been past its first heartbeat.
    wait_http(w.addr, "/status", "first round", replicated(recs.len())).await;
    produce(&sb, "orders", &recs).await.unwrap();
    let status = wait_http(
        w.addr,
        "/status",
        "second round",
        replicated(2 * recs.len()),
    )
    .await;
    assert_eq!(
        read_n(&tb, "dc1.orders", 2 * recs.len()).await.len(),
        2 * recs.len()
    );
    assert!(!status.contains("replicationLatency"), "{status}");
    for (cluster, b) in [("source", &sb), ("target", &tb)] {
        assert_eq!(
            topic_partitions(b, "heartbeats").await.unwrap(),
            None,
            "no heartbeats topic on the {cluster}"
        );
    }
    std::fs::write(&path, flow_doc("quiet", &sb, &tb, "Prefix", 1)).unwrap();
    wait_http(w.addr, "/status", "latency once switched on", |b| {
        b.contains("\"lastSeenTime\"")
    })
    .await;
    w.stop().await;
    assert!(!heartbeats(&sb, "heartbeats").await.is_empty());
}
