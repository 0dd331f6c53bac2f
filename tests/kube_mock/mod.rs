//! One fake Kubernetes API server and one scenario builder for the mock tests of the
//! controller (`tests/controller_mock.rs`) and of the worker's Kubernetes edge
//! (`tests/worker_k8s_mock.rs`), on `tower_test::mock` (kube's documented approach).
//!
//! The fake keeps objects by path and answers by method and path: GET of an object or of a
//! collection (label and field selectors), watches held open without events, server-side
//! apply as PATCH (the body becomes the object; a status PATCH replaces the parent's status
//! but keeps `status.workers` when the patch has none, as the workers' field managers own
//! them), JSON merge patches (RFC 7386) of an object, POST of events. It records every request, and fails chosen requests with a
//! chosen code and message. It accepts whatever the real server would refuse: what the real
//! server does is the end-to-end suite's business (`tests/e2e_kube.rs`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::Client;
use mirrorflow::controller::build::BuildSettings;
use mirrorflow::controller::metrics::Metrics;
use mirrorflow::controller::reconcile::{Context, Stores};
use prometheus::Registry;
use serde_json::{json, Value};

pub const NS: &str = "kafka";
pub const FLOWS: &str = "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/mirrorflows";
pub const CPS: &str = "/apis/mirrorflow.io/v1alpha1/namespaces/kafka/offsetcheckpoints";
pub const STS: &str = "/apis/apps/v1/namespaces/kafka/statefulsets/orders-worker";
pub const PODS: &str = "/api/v1/namespaces/kafka/pods";

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// The request's Content-Type (empty without one).
    pub content_type: String,
    pub path: String,
    pub query: String,
    pub body: Value,
}

#[derive(Default)]
struct World {
    objects: BTreeMap<String, Value>,
    /// `(method, path)` → (code, message) of a forced failure.
    fail: BTreeMap<(String, String), (u16, String)>,
    /// `(method, path)` → (code, message, times left) of failures that pass.
    fail_times: BTreeMap<(String, String), (u16, String, usize)>,
    requests: Vec<Recorded>,
    version: u64,
}

/// The fake API server.
#[derive(Clone, Default)]
pub struct FakeApi {
    world: Arc<Mutex<World>>,
}

/// `(collection path, object path)` of an object from its apiVersion, kind, namespace, name.
pub fn path_of(obj: &Value) -> (String, String) {
    let api_version = obj["apiVersion"].as_str().expect("apiVersion");
    let kind = obj["kind"].as_str().expect("kind");
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or(NS);
    let name = obj["metadata"]["name"].as_str().expect("metadata.name");
    let plural = match kind {
        "MirrorFlow" => "mirrorflows".to_string(),
        "OffsetCheckpoint" => "offsetcheckpoints".to_string(),
        "PodDisruptionBudget" => "poddisruptionbudgets".to_string(),
        k => format!("{}s", k.to_ascii_lowercase()),
    };
    let prefix = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    let collection = format!("{prefix}/namespaces/{ns}/{plural}");
    let object = format!("{collection}/{name}");
    (collection, object)
}

fn status_error(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// `k=v,k=v` label selector (equality only) matches `obj`'s labels.
fn selected(obj: &Value, query: &str) -> bool {
    let params: Vec<(String, String)> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), urldecode(v)))
        .collect();
    params.iter().all(|(k, v)| match k.as_str() {
        "labelSelector" => v.split(',').all(|term| match term.split_once('=') {
            Some((lk, lv)) => obj["metadata"]["labels"][lk] == lv,
            None => true,
        }),
        "fieldSelector" => v.split(',').all(|term| match term.split_once('=') {
            Some(("metadata.name", n)) => obj["metadata"]["name"] == n,
            _ => true,
        }),
        _ => true,
    })
}

fn urldecode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

/// RFC 7386: `patch` merged into `target` (null removes a member).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let obj = target.as_object_mut().expect("an object");
    for (k, v) in members {
        if v.is_null() {
            obj.remove(k);
        } else {
            merge(obj.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

impl World {
    fn answer(&mut self, req: &Recorded) -> (u16, Value) {
        let (method, path, query, body) = (&*req.method, &*req.path, &*req.query, &req.body);
        if let Some((code, message)) = self.fail.get(&(method.to_string(), path.to_string())) {
            return (*code, status_error(*code, "Forbidden", message));
        }
        if let Some((code, message, left)) = self
            .fail_times
            .get_mut(&(method.to_string(), path.to_string()))
            .filter(|f| f.2 > 0)
        {
            *left -= 1;
            return (*code, status_error(*code, "Timeout", message));
        }
        if method == "PATCH" && req.content_type == "application/merge-patch+json" {
            let Some(mut obj) = self.objects.get(path).cloned() else {
                return (404, status_error(404, "NotFound", "not found"));
            };
            merge(&mut obj, body);
            self.version += 1;
            obj["metadata"]["resourceVersion"] = self.version.to_string().into();
            self.objects.insert(path.to_string(), obj.clone());
            return (200, obj);
        }
        match method {
            "GET" => {
                if let Some(o) = self.objects.get(path) {
                    return (200, o.clone());
                }
                const COLLECTIONS: [&str; 12] = [
                    "configmaps",
                    "services",
                    "serviceaccounts",
                    "roles",
                    "rolebindings",
                    "statefulsets",
                    "poddisruptionbudgets",
                    "pods",
                    "secrets",
                    "events",
                    "mirrorflows",
                    "offsetcheckpoints",
                ];
                if !path
                    .rsplit('/')
                    .next()
                    .is_some_and(|l| COLLECTIONS.contains(&l))
                {
                    return (404, status_error(404, "NotFound", "not found"));
                }
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|(p, _)| p.rsplit_once('/').map(|(c, _)| c) == Some(path))
                    .map(|(_, o)| o.clone())
                    .filter(|o| selected(o, query))
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "List",
                           "metadata": {"resourceVersion": self.version.to_string()}, "items": items}),
                )
            }
            "POST" if path.ends_with("/events") => (201, body.clone()),
            // Create (leases): the object at the collection's path plus its name.
            "POST" => {
                let name = body["metadata"]["name"].as_str().expect("metadata.name");
                let object = format!("{path}/{name}");
                if self.objects.contains_key(&object) {
                    return (409, status_error(409, "AlreadyExists", "already exists"));
                }
                self.version += 1;
                let mut obj = body.clone();
                obj["metadata"]["resourceVersion"] = self.version.to_string().into();
                self.objects.insert(object, obj.clone());
                (201, obj)
            }
            // Replace (leases), with optimistic concurrency on resourceVersion.
            "PUT" => {
                let Some(old) = self.objects.get(path) else {
                    return (404, status_error(404, "NotFound", "not found"));
                };
                if body["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"] {
                    return (
                        409,
                        status_error(409, "Conflict", "the object has been modified"),
                    );
                }
                self.version += 1;
                let mut obj = body.clone();
                obj["metadata"]["resourceVersion"] = self.version.to_string().into();
                self.objects.insert(path.to_string(), obj.clone());
                (200, obj)
            }
            "PATCH" => {
                self.version += 1;
                let rv = self.version.to_string();
                if let Some(parent) = path.strip_suffix("/status") {
                    let Some(mut obj) = self.objects.get(parent).cloned() else {
                        return (404, status_error(404, "NotFound", "not found"));
                    };
                    let mut status = body["status"].clone();
                    if status.get("workers").is_none() {
                        if let Some(w) = obj["status"].get("workers") {
                            status["workers"] = w.clone();
                        }
                    }
                    obj["status"] = status;
                    obj["metadata"]["resourceVersion"] = rv.into();
                    self.objects.insert(parent.to_string(), obj.clone());
                    return (200, obj);
                }
                let mut obj = body.clone();
                let old = self.objects.get(path).cloned().unwrap_or(Value::Null);
                obj["metadata"]["resourceVersion"] = rv.into();
                obj["metadata"]["uid"] = old["metadata"]["uid"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| format!("uid-{}", self.version))
                    .into();
                if let Some(st) = old.get("status") {
                    obj["status"] = st.clone();
                }
                self.objects.insert(path.to_string(), obj.clone());
                (200, obj)
            }
            _ => panic!("the fake API server does not expect {method} {path}"),
        }
    }
}

impl FakeApi {
    pub fn new() -> Self {
        Self::default()
    }

    /// A client talking to this fake (default namespace `kafka`).
    pub fn client(&self) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let world = self.world.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let method = req.method().to_string();
                let content_type = req
                    .headers()
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let path = req.uri().path().to_string();
                let query = req.uri().query().unwrap_or_default().to_string();
                let bytes = req.into_body().collect_bytes().await.unwrap();
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).unwrap()
                };
                let watch = query.contains("watch=true");
                let (code, resp) = {
                    let mut w = world.lock().unwrap();
                    let recorded = Recorded {
                        method,
                        content_type,
                        path,
                        query,
                        body,
                    };
                    w.requests.push(recorded.clone());
                    if watch {
                        (0, Value::Null)
                    } else {
                        w.answer(&recorded)
                    }
                };
                if watch {
                    // Held open without events, without blocking other requests.
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        drop(send);
                    });
                    continue;
                }
                send.send_response(
                    Response::builder()
                        .status(StatusCode::from_u16(code).unwrap())
                        .body(Body::from(serde_json::to_vec(&resp).unwrap()))
                        .unwrap(),
                );
            }
        });
        Client::new(service, NS)
    }

    /// Stores `obj` at its path.
    pub fn insert(&self, obj: Value) {
        let (_, path) = path_of(&obj);
        self.world.lock().unwrap().objects.insert(path, obj);
    }

    /// The object at `path`.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.world.lock().unwrap().objects.get(path).cloned()
    }

    /// Every object (to fill a controller's caches from).
    pub fn objects(&self) -> Vec<Value> {
        self.world
            .lock()
            .unwrap()
            .objects
            .values()
            .cloned()
            .collect()
    }

    /// Edits the object at `path`.
    pub fn edit(&self, path: &str, f: impl FnOnce(&mut Value)) {
        let mut w = self.world.lock().unwrap();
        f(w.objects
            .get_mut(path)
            .unwrap_or_else(|| panic!("no object at {path}")));
    }

    /// Removes the object at `path`.
    pub fn remove(&self, path: &str) {
        self.world.lock().unwrap().objects.remove(path);
    }

    /// Makes `method path` fail with `code` and `message`.
    pub fn fail(&self, method: &str, path: &str, code: u16, message: &str) {
        self.world
            .lock()
            .unwrap()
            .fail
            .insert((method.into(), path.into()), (code, message.into()));
    }

    /// Makes the next `times` requests `method path` fail with `code` and `message`.
    pub fn fail_times(&self, method: &str, path: &str, code: u16, message: &str, times: usize) {
        self.world
            .lock()
            .unwrap()
            .fail_times
            .insert((method.into(), path.into()), (code, message.into(), times));
    }

    /// How many `method path` requests the fake answered (or failed) so far.
    pub fn count(&self, method: &str, path: &str) -> usize {
        self.world
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.method == method && r.path == path)
            .count()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.world.lock().unwrap().requests.clone()
    }

    pub fn clear_requests(&self) {
        self.world.lock().unwrap().requests.clear();
    }

    /// `METHOD path` of every request except event posts and watches.
    pub fn calls(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| !r.path.ends_with("/events") && !r.query.contains("watch=true"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect()
    }

    /// `(type, reason, note)` of every event posted.
    pub fn events(&self) -> Vec<(String, String, String)> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/events"))
            .map(|r| {
                let s = |k: &str| r.body[k].as_str().unwrap_or_default().to_string();
                (s("type"), s("reason"), s("note"))
            })
            .collect()
    }

    /// The body of the last PATCH of `path`.
    pub fn patch_body(&self, path: &str) -> Value {
        self.requests()
            .into_iter()
            .rev()
            .find(|r| r.method == "PATCH" && r.path == path)
            .unwrap_or_else(|| panic!("no PATCH {path}"))
            .body
    }

    /// The query of the last PATCH of `path`.
    pub fn patch_query(&self, path: &str) -> String {
        self.requests()
            .into_iter()
            .rev()
            .find(|r| r.method == "PATCH" && r.path == path)
            .unwrap_or_else(|| panic!("no PATCH {path}"))
            .query
    }
}

// ---------------------------------------------------------------------------------------------
// Scenario builder
// ---------------------------------------------------------------------------------------------

/// A flow spec from `a:9092` (dc1) to `b:9092` (dc2) with `replicas` workers; `sasl` adds
/// SCRAM credentials from Secret `dc1-user` on the source.
pub fn spec(replicas: i32) -> Value {
    json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092",
                   "sasl": {"mechanism": "SCRAM-SHA-512", "credentials": {"secretName": "dc1-user"}}},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "workers": {"replicas": replicas}
    })
}

/// MirrorFlow `orders` in `kafka` (uid `uid-1`, generation 1) with `spec`.
pub fn flow_json(spec: Value) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "MirrorFlow",
        "metadata": {"name": "orders", "namespace": NS, "uid": "uid-1", "generation": 1, "resourceVersion": "10"},
        "spec": spec,
    })
}

/// OffsetCheckpoint `name` of flow `flow`, checkpointing groups matching `include`.
pub fn checkpoint_json(name: &str, flow: &str, include: &str) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "OffsetCheckpoint",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {"flowRef": {"name": flow}, "groups": {"include": [include]}},
    })
}

/// Worker pod `i` of flow `orders`.
pub fn pod_json(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": format!("orders-worker-{i}"), "namespace": NS,
                        "labels": {"app.kubernetes.io/name": "mirrorflow",
                                   "app.kubernetes.io/instance": "orders",
                                   "app.kubernetes.io/component": "worker"}}})
}

/// Builds a world, then the controller context over it.
pub struct Scenario {
    pub api: FakeApi,
    cached: bool,
}

impl Scenario {
    /// A world with flow `orders` (see [`flow_json`]).
    pub fn with_flow(flow: Value) -> Self {
        let api = FakeApi::new();
        api.insert(flow);
        Scenario { api, cached: false }
    }

    /// An empty world.
    pub fn empty() -> Self {
        Scenario {
            api: FakeApi::new(),
            cached: false,
        }
    }

    /// Adds an object.
    pub fn with(self, obj: Value) -> Self {
        self.api.insert(obj);
        self
    }

    /// Adds `n` worker pods.
    pub fn pods(self, n: usize) -> Self {
        for i in 0..n {
            self.api.insert(pod_json(i));
        }
        self
    }

    /// The controller reads from watch caches holding the world's objects when the context is
    /// built (as after the caches synced); without, every read goes to the API.
    pub fn cached(mut self) -> Self {
        self.cached = true;
        self
    }

    /// The controller context and its metrics registry.
    pub fn controller(&self) -> (Arc<Context>, Registry) {
        let registry = Registry::new();
        let metrics = Metrics::new(&registry).unwrap();
        let mut ctx = Context::new(
            self.api.client(),
            BuildSettings {
                worker_image: "mirrorflow:test".into(),
                image_allowlist: Vec::new(),
            },
            metrics,
            Reporter {
                controller: "mirrorflow-controller".into(),
                instance: Some("test".into()),
            },
        );
        if self.cached {
            ctx = ctx.with_stores(Stores::with_objects(&self.api.objects()));
        }
        (Arc::new(ctx), registry)
    }
}

/// `(status, reason, message)` of condition `type_` in a status JSON.
pub fn condition(status: &Value, type_: &str) -> (String, String, String) {
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

/// The Prometheus text of `registry`.
pub fn metrics_text(registry: &Registry) -> String {
    prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .unwrap()
}
