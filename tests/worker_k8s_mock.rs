//! The worker's Kubernetes edge against a mocked API server (tower_test, kube's documented
//! approach): the flow is read and watched, and the worker applies only its own status entry.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::{Api, Client};
use mirrorflow::api::{Delivery, MirrorFlow};
use mirrorflow::worker::k8s::{flow_source, KubeStatusSink};
use mirrorflow::worker::replicate::{StatusSink, WorkerSnapshot};
use serde_json::{json, Value};

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    body: Value,
}

fn flow_json(paused: bool, generation: i64) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlow",
        "metadata": {"name": "orders", "namespace": "kafka", "uid": "u1",
                     "generation": generation, "resourceVersion": "7"},
        "spec": {"source": {"alias": "dc1", "bootstrapServers": "a:9092"},
                 "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
                 "paused": paused}
    })
}

/// A fake API server: GET returns the flow, list/watch return it once, PATCH status echoes.
fn client(log: Arc<Mutex<Vec<Recorded>>>, flow: Value) -> Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let query = req.uri().query().unwrap_or_default().to_string();
            let bytes = req.into_body().collect_bytes().await.unwrap();
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            log.lock().unwrap().push(Recorded {
                method: method.clone(),
                path: path.clone(),
                query: query.clone(),
                body: body.clone(),
            });
            if query.contains("watch=true") {
                // Hold the watch open without blocking other requests: nothing changes here.
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    drop(send);
                });
                continue;
            }
            let (code, resp) = match (method.as_str(), path.as_str()) {
                ("GET", "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows/orders") => {
                    (StatusCode::OK, flow.clone())
                }
                ("GET", "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows") => (
                    StatusCode::OK,
                    json!({"apiVersion": "mirrorflow.io/v1alpha1", "kind": "MirrorFlowList",
                           "metadata": {"resourceVersion": "7"}, "items": [flow.clone()]}),
                ),
                (
                    "PATCH",
                    "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows/orders/status",
                ) => {
                    let mut f = flow.clone();
                    f["status"] = body["status"].clone();
                    (StatusCode::OK, f)
                }
                _ => (
                    StatusCode::NOT_FOUND,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&resp).unwrap()))
                    .unwrap(),
            );
        }
    });
    Client::new(service, "kafka")
}

#[tokio::test]
async fn reads_the_flow_and_applies_only_its_own_entry() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let api: Api<MirrorFlow> = Api::namespaced(client(log.clone(), flow_json(true, 4)), "kafka");
    let (input, generation, task) = flow_source(api.clone(), "kafka", "orders").await.unwrap();
    assert_eq!(
        (input.namespace.as_str(), input.name.as_str()),
        ("kafka", "orders")
    );
    assert!(input.spec.borrow().paused, "the spec comes from the API");
    assert_eq!(*generation.borrow(), Some(4));

    let sink = KubeStatusSink::spawn(api, "orders".into(), 2, generation);
    sink.publish(&WorkerSnapshot::starting(
        "kafka",
        "orders",
        2,
        3,
        Delivery::AtLeastOnce,
    ));
    // The first apply goes out at once (then debounced / heartbeat).
    let mut patch = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        patch = log
            .lock()
            .unwrap()
            .iter()
            .find(|r| r.method == "PATCH")
            .cloned();
        if patch.is_some() {
            break;
        }
    }
    let patch = patch.expect("the worker applied its status entry");
    assert!(
        patch.path.ends_with("/mirrorflows/orders/status"),
        "{}",
        patch.path
    );
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
    sink.flush().await;
    task.abort();
}

#[tokio::test]
async fn a_missing_flow_is_a_clear_error() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let api: Api<MirrorFlow> = Api::namespaced(client(log, flow_json(false, 1)), "kafka");
    let err = flow_source(api, "kafka", "nope")
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
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut flow = flow_json(false, 1);
    flow["spec"]["target"]["alias"] = json!("dc1");
    let api: Api<MirrorFlow> = Api::namespaced(client(log, flow), "kafka");
    let err = flow_source(api, "kafka", "orders")
        .await
        .err()
        .expect("invalid flow fails");
    assert!(err.to_string().contains("spec.target.alias"), "{err}");
}
