//! Reconcile scenarios against a fake API server (tower_test::mock): create, update,
//! resize, invalid spec, missing flowRef, deletion, unchanged status, API errors.
//!
//! The fake answers by method and path from a small object table and records every request,
//! so each test asserts on what the controller asked for, not on call order details that do
//! not matter.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::Client;
use mirrorflow::api::{MirrorFlow, OffsetCheckpoint};
use mirrorflow::controller::build::{
    spec_hash, BuildSettings, SPEC_HASH_ANNOTATION, WORKER_COUNT_ANNOTATION,
};
use mirrorflow::controller::error::ErrorCategory;
use mirrorflow::controller::metrics::{Metrics, FLOW};
use mirrorflow::controller::reconcile::{
    error_policy, reconcile_checkpoint, reconcile_flow, Context,
};
use prometheus::Registry;
use serde_json::{json, Value};

const NS: &str = "kafka";
const FLOWS: &str = "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows";
const CPS: &str = "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/offsetcheckpoints";
const STS: &str = "/apis/apps/v1/namespaces/kafka/statefulsets/orders-worker";
const PODS: &str = "/api/v1/namespaces/kafka/pods";

#[derive(Debug, Clone)]
struct Recorded {
    method: String,
    path: String,
    query: String,
    body: Value,
}

/// The fake API server's state: objects by path, list responses, forced failures.
#[derive(Default)]
struct World {
    objects: BTreeMap<String, Value>,
    checkpoints: Vec<Value>,
    pods: usize,
    /// Status written into StatefulSets returned from apply.
    sts_status: Option<Value>,
    /// Paths whose PATCH fails with this HTTP code.
    fail_patch: BTreeMap<String, u16>,
    requests: Vec<Recorded>,
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "not found", "reason": "NotFound", "code": 404}),
    )
}

fn answer(world: &mut World, method: &str, path: &str, body: &Value) -> (StatusCode, Value) {
    match method {
        "GET" if path == CPS => (
            StatusCode::OK,
            json!({"apiVersion": "mirrorflow.io/v1alpha1", "kind": "OffsetCheckpointList",
                   "metadata": {"resourceVersion": "1"}, "items": world.checkpoints}),
        ),
        "GET" if path == PODS => {
            let items: Vec<Value> = (0..world.pods)
                .map(|i| json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                "metadata": {"name": format!("orders-worker-{i}"), "namespace": NS}}))
                .collect();
            (
                StatusCode::OK,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        "GET" => match world.objects.get(path) {
            Some(o) => (StatusCode::OK, o.clone()),
            None => not_found(),
        },
        "POST" if path.ends_with("/events") => (StatusCode::CREATED, body.clone()),
        "PATCH" => {
            if let Some(code) = world.fail_patch.get(path) {
                let code = *code;
                return (
                    StatusCode::from_u16(code).unwrap(),
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": "forbidden by the test", "reason": "Forbidden", "code": code}),
                );
            }
            if let Some(parent) = path.strip_suffix("/status") {
                // Status apply: the parent object with the applied status.
                let mut obj = world
                    .objects
                    .get(parent)
                    .cloned()
                    .unwrap_or_else(|| panic!("status of unknown {parent}"));
                obj["status"] = body["status"].clone();
                world.objects.insert(parent.to_string(), obj.clone());
                return (StatusCode::OK, obj);
            }
            let mut obj = body.clone();
            if path == STS {
                if let Some(st) = &world.sts_status {
                    obj["status"] = st.clone();
                }
            }
            world.objects.insert(path.to_string(), obj.clone());
            (StatusCode::OK, obj)
        }
        _ => panic!("unexpected {method} {path}"),
    }
}

/// A context whose client talks to the fake `world`.
fn context(world: Arc<Mutex<World>>) -> (Arc<Context>, Registry) {
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
            let (code, resp) = {
                let mut w = world.lock().unwrap();
                w.requests.push(Recorded {
                    method: method.clone(),
                    path: path.clone(),
                    query,
                    body: body.clone(),
                });
                answer(&mut w, &method, &path, &body)
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&resp).unwrap()))
                    .unwrap(),
            );
        }
    });
    let client = Client::new(service, NS);
    let registry = Registry::new();
    let metrics = Metrics::new(&registry).unwrap();
    let ctx = Context::new(
        client,
        BuildSettings {
            worker_image: "mirrorflow:test".into(),
        },
        metrics,
        Reporter {
            controller: "mirrorflow-controller".into(),
            instance: Some("test".into()),
        },
    );
    (Arc::new(ctx), registry)
}

fn flow_json(spec: Value) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "MirrorFlow",
        "metadata": {"name": "orders", "namespace": NS, "uid": "uid-1", "generation": 1, "resourceVersion": "10"},
        "spec": spec,
    })
}

fn spec(replicas: i32) -> Value {
    json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092",
                   "sasl": {"mechanism": "PLAIN", "credentials": {"secretName": "dc1-user"}}},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "workers": {"replicas": replicas}
    })
}

fn checkpoint_json(name: &str, flow: &str, include: &str) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "OffsetCheckpoint",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"flowRef": {"name": flow}, "groups": {"include": [include]}},
    })
}

fn world_with_flow(flow: &Value) -> Arc<Mutex<World>> {
    let mut w = World::default();
    w.objects.insert(format!("{FLOWS}/orders"), flow.clone());
    Arc::new(Mutex::new(w))
}

fn requests(world: &Arc<Mutex<World>>) -> Vec<Recorded> {
    world.lock().unwrap().requests.clone()
}

/// `METHOD path` of every request except event posts.
fn calls(world: &Arc<Mutex<World>>) -> Vec<String> {
    requests(world)
        .into_iter()
        .filter(|r| !r.path.ends_with("/events"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn events(world: &Arc<Mutex<World>>) -> Vec<(String, String, String)> {
    requests(world)
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/events"))
        .map(|r| {
            (
                r.body["type"].as_str().unwrap_or_default().to_string(),
                r.body["reason"].as_str().unwrap_or_default().to_string(),
                r.body["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn patch_body(world: &Arc<Mutex<World>>, path: &str) -> Value {
    requests(world)
        .into_iter()
        .rev()
        .find(|r| r.method == "PATCH" && r.path == path)
        .unwrap_or_else(|| panic!("no PATCH {path}"))
        .body
}

fn condition(status: &Value, type_: &str) -> (String, String, String) {
    let c = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"));
    (
        c["status"].as_str().unwrap().into(),
        c["reason"].as_str().unwrap().into(),
        c["message"].as_str().unwrap().into(),
    )
}

fn flow_of(v: &Value) -> Arc<MirrorFlow> {
    Arc::new(serde_json::from_value(v.clone()).unwrap())
}

fn children_paths() -> Vec<String> {
    vec![
        "PATCH /api/v1/namespaces/kafka/configmaps/orders-worker-config".into(),
        "PATCH /api/v1/namespaces/kafka/serviceaccounts/orders-worker".into(),
        "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/kafka/roles/orders-worker".into(),
        "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/kafka/rolebindings/orders-worker"
            .into(),
        "PATCH /api/v1/namespaces/kafka/services/orders-worker".into(),
        format!("PATCH {STS}"),
    ]
}

#[tokio::test]
async fn create_applies_children_and_status() {
    let flow = flow_json(spec(3));
    let world = world_with_flow(&flow);
    world.lock().unwrap().checkpoints = vec![checkpoint_json("groups", "orders", ".*")];
    let (ctx, _) = context(world.clone());

    let action = reconcile_flow(flow_of(&flow), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    let mut want = vec![format!("GET {CPS}"), format!("GET {STS}")];
    want.extend(children_paths());
    want.push(format!("PATCH {FLOWS}/orders/status"));
    assert_eq!(
        calls(&world),
        want,
        "no pod listing when no StatefulSet exists"
    );

    for r in requests(&world).iter().filter(|r| r.method == "PATCH") {
        assert!(
            r.query.contains("fieldManager=mirrorflow-controller"),
            "{} {}",
            r.path,
            r.query
        );
        assert!(r.query.contains("force=true"), "{} {}", r.path, r.query);
    }
    let sts = patch_body(&world, STS);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["metadata"]["annotations"][WORKER_COUNT_ANNOTATION], "3");
    assert_eq!(sts["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    let volumes = sts["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "dc1-user"),
        "{volumes:?}"
    );

    let cm = patch_body(
        &world,
        "/api/v1/namespaces/kafka/configmaps/orders-worker-config",
    );
    let yaml = cm["data"]["flow.yaml"].as_str().unwrap();
    let parsed = mirrorflow::api::parse_flow_file(yaml).unwrap();
    assert_eq!(parsed.checkpoints.len(), 1);

    let st = patch_body(&world, &format!("{FLOWS}/orders/status"));
    assert_eq!(st["apiVersion"], "mirrorflow.io/v1alpha1");
    assert_eq!(st["kind"], "MirrorFlow");
    assert!(
        st["status"].get("workers").is_none(),
        "the controller never writes worker entries"
    );
    assert_eq!(st["status"]["observedGeneration"], 1);
    assert_eq!(st["status"]["workersSummary"], "0/3");
    assert_eq!(condition(&st["status"], "Ready").1, "WorkersStarting");
    assert_eq!(condition(&st["status"], "InvalidSpec").0, "False");
    assert_eq!(events(&world), vec![]);
}

#[tokio::test]
async fn update_rolls_on_spec_change_and_renders_only_valid_checkpoints() {
    let mut new_spec = spec(3);
    new_spec["source"]["bootstrapServers"] = json!("c:9092");
    let mut flow = flow_json(new_spec.clone());
    flow["metadata"]["generation"] = json!(2);
    let world = world_with_flow(&flow);
    {
        let mut w = world.lock().unwrap();
        let old: MirrorFlow = serde_json::from_value(flow_json(spec(3))).unwrap();
        w.objects.insert(
            STS.into(),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": "orders-worker", "namespace": NS,
                                "annotations": {WORKER_COUNT_ANNOTATION: "3"}},
                   "spec": {"replicas": 3, "serviceName": "orders-worker", "selector": {},
                            "template": {"metadata": {"annotations": {SPEC_HASH_ANNOTATION: spec_hash(&old.spec)}}}}}),
        );
        w.pods = 3;
        w.sts_status = Some(
            json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1, "observedGeneration": 1,
                                   "currentRevision": "a", "updateRevision": "b"}),
        );
        w.checkpoints = vec![
            checkpoint_json("b-valid", "orders", "team-.*"),
            checkpoint_json("a-invalid", "orders", "("),
            checkpoint_json("other", "payments", ".*"),
        ];
    }
    let (ctx, _) = context(world.clone());
    let f = flow_of(&flow);
    reconcile_flow(f.clone(), ctx).await.unwrap();

    let c = calls(&world);
    assert!(c.contains(&format!("GET {PODS}")), "{c:?}");
    let sts = patch_body(&world, STS);
    let hash = sts["spec"]["template"]["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(hash, spec_hash(&f.spec));
    let old: MirrorFlow = serde_json::from_value(flow_json(spec(3))).unwrap();
    assert_ne!(
        hash,
        spec_hash(&old.spec),
        "a bootstrap change rolls the workers"
    );
    assert_eq!(sts["spec"]["replicas"], 3);

    let cm = patch_body(
        &world,
        "/api/v1/namespaces/kafka/configmaps/orders-worker-config",
    );
    let parsed =
        mirrorflow::api::parse_flow_file(cm["data"]["flow.yaml"].as_str().unwrap()).unwrap();
    let names: Vec<_> = parsed
        .checkpoints
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["b-valid"],
        "invalid and foreign checkpoints stay out"
    );
    assert_eq!(parsed.flow.spec.source.bootstrap_servers, "c:9092");

    let st = patch_body(&world, &format!("{FLOWS}/orders/status"));
    assert_eq!(condition(&st["status"], "Ready").1, "RollingUpdate");
    assert_eq!(st["status"]["observedGeneration"], 2);
}

#[tokio::test]
async fn resize_drains_to_zero_first() {
    let flow = flow_json(spec(3));
    let world = world_with_flow(&flow);
    {
        let mut w = world.lock().unwrap();
        w.objects.insert(
            STS.into(),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": "orders-worker", "namespace": NS, "annotations": {WORKER_COUNT_ANNOTATION: "2"}},
                   "spec": {"replicas": 2, "selector": {}, "template": {}}}),
        );
        w.pods = 2;
    }
    let (ctx, _) = context(world.clone());
    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
    let sts = patch_body(&world, STS);
    assert_eq!(
        sts["spec"]["replicas"], 0,
        "old workers stop before the new count starts"
    );
    assert!(sts["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .windows(2)
        .any(|w| w[0] == "--worker-count" && w[1] == "2"));
    let st = patch_body(&world, &format!("{FLOWS}/orders/status"));
    let (_, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(reason, "Scaling");
    assert!(message.contains("from 2 to 3"), "{message}");

    // Pods still terminating: keep waiting.
    world.lock().unwrap().pods = 1;
    let flow_now: Value = world.lock().unwrap().objects[&format!("{FLOWS}/orders")].clone();
    reconcile_flow(flow_of(&flow_now), ctx.clone())
        .await
        .unwrap();
    assert_eq!(patch_body(&world, STS)["spec"]["replicas"], 0);

    // No pod left: the new count.
    world.lock().unwrap().pods = 0;
    let action = reconcile_flow(flow_of(&flow_now), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let sts = patch_body(&world, STS);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["metadata"]["annotations"][WORKER_COUNT_ANNOTATION], "3");
}

#[tokio::test]
async fn invalid_spec_sets_a_condition_and_touches_no_child() {
    let mut s = spec(1);
    s["topics"] = json!({"include": ["("]});
    let flow = flow_json(s);
    let world = world_with_flow(&flow);
    let (ctx, registry) = context(world.clone());

    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(300)),
        "long requeue, no hot loop"
    );
    assert_eq!(
        calls(&world),
        vec![format!("PATCH {FLOWS}/orders/status")],
        "no child read or written"
    );
    let st = patch_body(&world, &format!("{FLOWS}/orders/status"));
    let (status, reason, message) = condition(&st["status"], "InvalidSpec");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ValidationFailed")
    );
    assert!(message.contains("spec.topics.include[0]"), "{message}");
    assert_eq!(condition(&st["status"], "Ready").1, "InvalidSpec");
    let ev = events(&world);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Warning", "InvalidSpec")
    );
    assert!(ev[0].2.contains("spec.topics.include[0]"));
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains("mirrorflow_controller_reconcile_errors_total{category=\"InvalidSpec\",resource=\"mirrorflow\"} 1"),
        "{text}"
    );

    // The status write triggers another reconcile: it must change nothing and say nothing.
    let before = requests(&world).len();
    let flow_now: Value = world.lock().unwrap().objects[&format!("{FLOWS}/orders")].clone();
    reconcile_flow(flow_of(&flow_now), ctx).await.unwrap();
    assert_eq!(
        requests(&world).len(),
        before,
        "an unchanged invalid flow makes no request"
    );
}

#[tokio::test]
async fn long_flow_name_is_an_invalid_spec() {
    let mut flow = flow_json(spec(1));
    let name = "x".repeat(60);
    flow["metadata"]["name"] = json!(name);
    let world = Arc::new(Mutex::new(World::default()));
    world
        .lock()
        .unwrap()
        .objects
        .insert(format!("{FLOWS}/{name}"), flow.clone());
    let (ctx, _) = context(world.clone());
    reconcile_flow(flow_of(&flow), ctx).await.unwrap();
    let st = patch_body(&world, &format!("{FLOWS}/{name}/status"));
    let (status, _, message) = condition(&st["status"], "InvalidSpec");
    assert_eq!(status, "True");
    assert!(message.starts_with("metadata.name:"), "{message}");
}

#[tokio::test]
async fn unchanged_status_is_not_written() {
    let flow = flow_json(spec(1));
    let world = world_with_flow(&flow);
    world.lock().unwrap().sts_status = Some(
        json!({"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1,
                    "currentRevision": "a", "updateRevision": "a"}),
    );
    let (ctx, _) = context(world.clone());
    reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert!(calls(&world).contains(&format!("PATCH {FLOWS}/orders/status")));

    // The worker reports in (its own field manager), twice with different heartbeats.
    for (hb, expect_write) in [(0, true), (5, false)] {
        let now = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10 - hb);
        {
            let mut w = world.lock().unwrap();
            let f = w.objects.get_mut(&format!("{FLOWS}/orders")).unwrap();
            f["status"]["workers"] = json!([{"id": "orders-worker-0", "state": "Running", "partitions": 2,
                                             "lastHeartbeatTime": now.to_string()}]);
            w.requests.clear();
        }
        let flow_now: Value = world.lock().unwrap().objects[&format!("{FLOWS}/orders")].clone();
        reconcile_flow(flow_of(&flow_now), ctx.clone())
            .await
            .unwrap();
        let wrote = calls(&world).contains(&format!("PATCH {FLOWS}/orders/status"));
        assert_eq!(wrote, expect_write, "heartbeat {hb}: {:?}", calls(&world));
        if expect_write {
            let st = patch_body(&world, &format!("{FLOWS}/orders/status"));
            assert_eq!(condition(&st["status"], "Ready").0, "True");
        }
    }
}

#[tokio::test]
async fn deletion_creates_nothing() {
    let mut flow = flow_json(spec(1));
    flow["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    let world = world_with_flow(&flow);
    let (ctx, _) = context(world.clone());
    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        requests(&world).len(),
        0,
        "children go with the flow through owner references"
    );

    let mut cp = checkpoint_json("groups", "orders", ".*");
    cp["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    let cp: OffsetCheckpoint = serde_json::from_value(cp).unwrap();
    assert_eq!(
        reconcile_checkpoint(Arc::new(cp), ctx).await.unwrap(),
        Action::await_change()
    );
    assert_eq!(requests(&world).len(), 0);
}

#[tokio::test]
async fn missing_flow_ref_is_a_condition_not_a_hot_loop() {
    let cp = checkpoint_json("groups", "nope", ".*");
    let world = Arc::new(Mutex::new(World::default()));
    world
        .lock()
        .unwrap()
        .objects
        .insert(format!("{CPS}/groups"), cp.clone());
    let (ctx, registry) = context(world.clone());
    let parsed: OffsetCheckpoint = serde_json::from_value(cp).unwrap();
    let action = reconcile_checkpoint(Arc::new(parsed), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
    assert_eq!(
        calls(&world),
        vec![
            format!("GET {FLOWS}/nope"),
            format!("PATCH {CPS}/groups/status")
        ]
    );
    let st = patch_body(&world, &format!("{CPS}/groups/status"));
    assert_eq!(st["kind"], "OffsetCheckpoint");
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FlowNotFound")
    );
    assert!(message.contains("\"nope\""), "{message}");
    let ev = events(&world);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1, "FlowNotFound");
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    assert!(
        text.contains("category=\"FlowNotFound\",resource=\"offsetcheckpoint\"} 1"),
        "{text}"
    );

    // Requeued: looks again, writes nothing new.
    let now: OffsetCheckpoint =
        serde_json::from_value(world.lock().unwrap().objects[&format!("{CPS}/groups")].clone())
            .unwrap();
    world.lock().unwrap().requests.clear();
    reconcile_checkpoint(Arc::new(now.clone()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(calls(&world), vec![format!("GET {FLOWS}/nope")]);
    assert_eq!(events(&world), vec![]);

    // The flow appears: Ready moves on (no checkpoint reports yet).
    world
        .lock()
        .unwrap()
        .objects
        .insert(format!("{FLOWS}/nope"), flow_json(spec(1)));
    reconcile_checkpoint(Arc::new(now), ctx).await.unwrap();
    let st = patch_body(&world, &format!("{CPS}/groups/status"));
    assert_eq!(condition(&st["status"], "Ready").1, "AwaitingCheckpoints");
}

#[tokio::test]
async fn invalid_checkpoint_does_not_look_up_its_flow() {
    let cp = checkpoint_json("groups", "orders", "(");
    let world = Arc::new(Mutex::new(World::default()));
    world
        .lock()
        .unwrap()
        .objects
        .insert(format!("{CPS}/groups"), cp.clone());
    let (ctx, _) = context(world.clone());
    let action = reconcile_checkpoint(Arc::new(serde_json::from_value(cp).unwrap()), ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(calls(&world), vec![format!("PATCH {CPS}/groups/status")]);
    let st = patch_body(&world, &format!("{CPS}/groups/status"));
    let (_, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("spec.groups.include[0]"), "{message}");
}

#[tokio::test]
async fn api_errors_are_categorised_and_retried() {
    let flow = flow_json(spec(1));
    let world = world_with_flow(&flow);
    world.lock().unwrap().fail_patch.insert(STS.into(), 403);
    let (ctx, registry) = context(world.clone());
    let f = flow_of(&flow);
    let err = reconcile_flow(f.clone(), ctx.clone()).await.unwrap_err();
    assert_eq!(err.category(), ErrorCategory::KubeApi);
    assert!(
        err.to_string().contains("StatefulSet kafka/orders-worker"),
        "{err}"
    );
    assert!(
        !calls(&world).contains(&format!("PATCH {FLOWS}/orders/status")),
        "no status from a failed apply"
    );
    assert_eq!(
        error_policy(f, &err, ctx),
        Action::requeue(Duration::from_secs(15))
    );
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap();
    let line = format!("mirrorflow_controller_reconcile_errors_total{{category=\"KubeApi\",resource=\"{FLOW}\"}} 1");
    assert!(text.contains(&line), "{text}");
}
