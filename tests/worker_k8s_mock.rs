//! The worker's Kubernetes edge against the fake API server (`kube_mock`): the flow is read
//! and watched, and the worker applies only its own status entry, material changes at once and
//! the rest with its heartbeat.

mod kube_mock;

use std::time::Duration;

use kube::Api;
use mirrorflow::api::{Delivery, MirrorFlow};
use mirrorflow::worker::process::k8s::{flow_source, FlowSource, KubeStatusSink};
use mirrorflow::worker::replicate::{StatusSink, WorkerSnapshot};
use serde_json::json;

use kube_mock::{flow_json, FakeApi, Recorded, FLOWS, NS};

fn flow(paused: bool, generation: i64) -> serde_json::Value {
    let mut f = flow_json(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "paused": paused
    }));
    f["metadata"]["generation"] = json!(generation);
    f
}

fn api_for(fake: &FakeApi) -> Api<MirrorFlow> {
    Api::namespaced(fake.client(), NS)
}

/// Waits (bounded) for the `n`-th status PATCH.
async fn status_patch(fake: &FakeApi, n: usize) -> Recorded {
    let path = format!("{FLOWS}/orders/status");
    for _ in 0..200 {
        let patches: Vec<Recorded> = fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .collect();
        if patches.len() >= n {
            return patches[n - 1].clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no status PATCH #{n}: {:?}", fake.calls());
}

#[tokio::test]
async fn reads_the_flow_and_applies_only_its_own_entry() {
    let fake = FakeApi::new();
    fake.insert(flow(true, 4));
    let api = api_for(&fake);
    let FlowSource {
        input,
        generation,
        folded,
        task,
    } = flow_source(api.clone(), NS, "orders").await.unwrap();
    assert_eq!(
        (input.namespace.as_str(), input.name.as_str()),
        (NS, "orders")
    );
    assert!(input.spec.borrow().paused, "the spec comes from the API");
    assert_eq!(*generation.borrow(), Some(4));
    let sink = KubeStatusSink::spawn(api, "orders".into(), 2, generation, folded);
    let mut snap = WorkerSnapshot::starting(NS, "orders", 2, 3, Delivery::AtLeastOnce);
    sink.publish(&snap);
    // The first apply goes out at once.
    let patch = status_patch(&fake, 1).await;
    assert!(
        patch.query.contains("fieldManager=mirrorflow-worker-2"),
        "{}",
        patch.query
    );
    assert!(patch.query.contains("force=true"), "{}", patch.query);
    let status = patch.body["status"].as_object().unwrap();
    assert_eq!(status.keys().collect::<Vec<_>>(), vec!["workers"]);
    let entry = &patch.body["status"]["workers"][0];
    assert_eq!(entry["id"], "orders-worker-2");
    assert_eq!(entry["observedGeneration"], 4);
    assert!(entry["lastHeartbeatTime"].is_string());
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.method == "GET" && r.query.contains("fieldSelector=metadata.name%3Dorders")),
        "the watch selects the flow by name (all its Role allows): {:?}",
        fake.requests().iter().map(|r| &r.query).collect::<Vec<_>>()
    );

    // Lag alone waits for the heartbeat (10 s); a state change goes out at once (≤ 1 s).
    snap.replication_lag.records = 500;
    sink.publish(&snap);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let patches = |f: &FakeApi| f.requests().iter().filter(|r| r.method == "PATCH").count();
    assert_eq!(patches(&fake), 1, "a lag change is no reason for an apply");
    snap.state = mirrorflow::api::WorkerState::Running;
    sink.publish(&snap);
    let patch = status_patch(&fake, 2).await;
    let entry = &patch.body["status"]["workers"][0];
    assert_eq!(entry["state"], "Running");
    assert_eq!(
        entry["replicationLag"]["records"], 500,
        "the lag rides along"
    );
    sink.flush().await;
    task.abort();
}

#[tokio::test]
async fn a_missing_flow_is_a_clear_error() {
    let fake = FakeApi::new();
    fake.insert(flow(false, 1));
    let err = flow_source(api_for(&fake), NS, "nope")
        .await
        .err()
        .expect("missing flow fails");
    assert!(
        err.to_string().contains("MirrorFlow kafka/nope not found"),
        "{err}"
    );
}

#[tokio::test]
async fn an_invalid_flow_is_refused_at_start() {
    let fake = FakeApi::new();
    let mut f = flow(false, 1);
    f["spec"]["target"]["alias"] = json!("dc1");
    fake.insert(f);
    let err = flow_source(api_for(&fake), NS, "orders")
        .await
        .err()
        .expect("invalid flow fails");
    assert!(err.to_string().contains("spec.target.alias"), "{err}");
}
