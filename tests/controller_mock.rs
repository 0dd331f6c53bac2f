//! Reconcile scenarios against the fake API server (`kube_mock`): create, nothing to do at
//! steady state, drift, update, resize, a foreign child, a refused apply, invalid specs and
//! names, deletion, checkpoints, leadership. Each asserts on what the controller asked for.

mod kube_mock;

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use kube::runtime::controller::Action;
use mirrorflow::api::{MirrorFlow, OffsetCheckpoint};
use mirrorflow::controller::build::{spec_hash, SPEC_HASH_ANNOTATION, WORKER_COUNT_ANNOTATION};
use mirrorflow::controller::diff::APPLIED_HASH_ANNOTATION;
use mirrorflow::controller::leader::{Leadership, LeaseSettings, LeaseState, LeaseThread};
use mirrorflow::controller::metrics::FLOW;
use mirrorflow::controller::reconcile::{
    error_policy, flow_trigger, next_check, reconcile_checkpoint, reconcile_flow, Context,
};
use serde_json::{json, Value};

use kube_mock::{
    checkpoint_json, condition, flow_json, metrics_text, spec, FakeApi, Scenario, CPS, FLOWS, NS,
    PODS, STS,
};

const CM: &str = "/api/v1/namespaces/kafka/configmaps/orders-worker-config";
const SA: &str = "/api/v1/namespaces/kafka/serviceaccounts/orders-worker";
const ROLE: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/kafka/roles/orders-worker";
const RB: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/kafka/rolebindings/orders-worker";
const SVC: &str = "/api/v1/namespaces/kafka/services/orders-worker";
const PDB: &str = "/apis/policy/v1/namespaces/kafka/poddisruptionbudgets/orders-worker";
const CHILDREN: [&str; 7] = [CM, SA, ROLE, RB, SVC, PDB, STS];

fn flow_of(v: &Value) -> Arc<MirrorFlow> {
    Arc::new(serde_json::from_value(v.clone()).unwrap())
}

fn status_path() -> String {
    format!("{FLOWS}/orders/status")
}

/// The flow as it is now in the fake's table.
fn current_flow(api: &FakeApi) -> Arc<MirrorFlow> {
    flow_of(&api.object(&format!("{FLOWS}/orders")).unwrap())
}

/// A world in which the flow was reconciled once (children and status exist).
async fn reconciled(flow: Value) -> Scenario {
    let s = Scenario::with_flow(flow.clone());
    let (ctx, _) = s.controller();
    reconcile_flow(flow_of(&flow), ctx).await.unwrap();
    s.api.clear_requests();
    s
}

#[tokio::test]
async fn create_applies_children_and_status() {
    let flow = flow_json(spec(3));
    let s = Scenario::with_flow(flow.clone()).with(checkpoint_json("groups", "orders", ".*"));
    let (ctx, _) = s.controller();

    let action = reconcile_flow(flow_of(&flow), ctx).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(300)),
        "no worker entry yet: nothing changes with time"
    );

    // Nothing cached: each child is read, then created; no pod listing without a StatefulSet.
    let mut want = vec![format!("GET {CPS}"), format!("GET {STS}")];
    want.extend(CHILDREN[..6].iter().map(|p| format!("GET {p}")));
    want.extend(CHILDREN.iter().map(|p| format!("PATCH {p}")));
    want.push(format!("PATCH {}", status_path()));
    assert_eq!(s.api.calls(), want);

    for p in CHILDREN {
        let q = s.api.patch_query(p);
        assert!(q.contains("fieldManager=mirrorflow-controller"), "{p} {q}");
        assert!(
            !q.contains("force=true"),
            "a new child is applied without force, so nobody's object is taken over: {p} {q}"
        );
        let body = s.api.patch_body(p);
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["uid"], "uid-1",
            "{p}"
        );
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["controller"], true,
            "{p}"
        );
        assert!(
            body["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].is_string(),
            "{p}"
        );
    }
    let sts = s.api.patch_body(STS);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["metadata"]["annotations"][WORKER_COUNT_ANNOTATION], "3");
    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["resources"],
        json!({"requests": {"cpu": "100m", "memory": "88Mi"}, "limits": {"memory": "176Mi"}}),
        "no BestEffort workers: defaults from inFlightMiB (45) when the flow sets none"
    );
    let volumes = sts["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["secret"]["secretName"] == "dc1-user"),
        "{volumes:?}"
    );
    let pdb = s.api.patch_body(PDB);
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        sts["spec"]["selector"]["matchLabels"]
    );

    let cm = s.api.patch_body(CM);
    let parsed =
        mirrorflow::api::parse_flow_file(cm["data"]["flow.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(parsed.checkpoints.len(), 1);

    let st = s.api.patch_body(&status_path());
    assert_eq!(
        (st["apiVersion"].as_str(), st["kind"].as_str()),
        (Some("mirrorflow.io/v1alpha1"), Some("MirrorFlow"))
    );
    assert!(
        st["status"].get("workers").is_none(),
        "the controller never writes worker entries"
    );
    assert_eq!(st["status"]["observedGeneration"], 1);
    assert_eq!(st["status"]["workersSummary"], "0/3");
    assert_eq!(condition(&st["status"], "Ready").1, "WorkersStarting");
    assert_eq!(condition(&st["status"], "Reconciling").1, "WorkersStarting");
    // Conditions of trouble appear once they turn True: a new flow has none.
    let types: Vec<&str> = st["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(types, vec!["Ready", "Reconciling", "Replicating"]);
    assert_eq!(s.api.events(), vec![]);
}

#[tokio::test]
async fn steady_state_costs_no_request() {
    let s = reconciled(flow_json(spec(2))).await;
    // The caches hold what the first reconcile applied (as after the watch events).
    let s = s.cached();
    let (ctx, _) = s.controller();
    reconcile_flow(current_flow(&s.api), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        s.api.requests().len(),
        0,
        "unchanged children are not applied, an unchanged status is not written: {:?}",
        s.api.calls()
    );

    // A worker's heartbeat is no trigger; a change of its state is.
    let entry = |state: &str, beat: i64, lag: i64| {
        json!({"id": "orders-worker-0", "state": state, "partitions": 2,
               "lastHeartbeatTime": Timestamp::from_second(1_700_000_000 + beat).unwrap().to_string(),
               "replicationLag": {"records": lag, "seconds": 0}})
    };
    let with = |e: Value| {
        let mut f = flow_json(spec(2));
        f["status"] = json!({"workers": [e]});
        serde_json::from_value::<MirrorFlow>(f).unwrap()
    };
    let base = flow_trigger(&with(entry("Running", 0, 0)));
    assert_eq!(
        flow_trigger(&with(entry("Running", 10, 0))),
        base,
        "heartbeat"
    );
    assert_eq!(flow_trigger(&with(entry("Running", 10, 500))), base, "lag");
    assert_ne!(flow_trigger(&with(entry("Degraded", 10, 0))), base, "state");
    let mut respec = with(entry("Running", 0, 0));
    respec.metadata.generation = Some(2);
    assert_ne!(flow_trigger(&respec), base, "spec change");
}

#[tokio::test]
async fn drift_is_repaired_and_only_there() {
    let s = reconciled(flow_json(spec(1))).await;
    s.api
        .edit(CM, |cm| cm["data"]["flow.yaml"] = json!("edited by hand"));
    s.api.edit(STS, |sts| {
        sts["metadata"]["labels"]["team"] = json!("someone else's label is left alone")
    });
    let s = s.cached();
    let (ctx, _) = s.controller();
    reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    assert_eq!(s.api.calls(), vec![format!("PATCH {CM}")]);
    assert!(
        s.api.patch_query(CM).contains("force=true"),
        "our own child: our fields win"
    );
}

#[tokio::test]
async fn update_rolls_on_spec_change_and_renders_only_valid_checkpoints() {
    let s = reconciled(flow_json(spec(3))).await;
    let mut new_spec = spec(3);
    new_spec["source"]["bootstrapServers"] = json!("c:9092");
    let mut flow = flow_json(new_spec);
    flow["metadata"]["generation"] = json!(2);
    s.api.insert(flow.clone());
    for cp in [
        checkpoint_json("b-valid", "orders", "team-.*"),
        checkpoint_json("a-invalid", "orders", "("),
        checkpoint_json("other", "payments", ".*"),
    ] {
        s.api.insert(cp);
    }
    s.api.edit(STS, |sts| {
        sts["status"] = json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1,
                               "observedGeneration": 1, "currentRevision": "a", "updateRevision": "b"})
    });
    let s = s.cached();
    let (ctx, _) = s.controller();
    let f = flow_of(&flow);
    reconcile_flow(f.clone(), ctx).await.unwrap();

    assert_eq!(
        s.api.calls(),
        vec![
            format!("PATCH {CM}"),
            format!("PATCH {STS}"),
            format!("PATCH {}", status_path())
        ],
        "the config and the pod template changed, nothing else; no pod listing at a steady count"
    );
    let sts = s.api.patch_body(STS);
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

    let cm = s.api.patch_body(CM);
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

    let st = s.api.patch_body(&status_path());
    assert_eq!(condition(&st["status"], "Ready").1, "RollingUpdate");
    assert_eq!(st["status"]["observedGeneration"], 2);
}

#[tokio::test]
async fn resize_drains_to_zero_first() {
    let s = reconciled(flow_json(spec(2))).await.pods(2);
    let flow = flow_json(spec(3));
    s.api.insert(flow.clone());
    let (ctx, _) = s.controller();
    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));
    assert!(
        s.api.calls().contains(&format!("GET {PODS}")),
        "the count changes: pods are counted"
    );
    let sts = s.api.patch_body(STS);
    assert_eq!(
        sts["spec"]["replicas"], 0,
        "old workers stop before the new count starts"
    );
    assert!(sts["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .windows(2)
        .any(|w| w[0] == "--worker-count" && w[1] == "2"));
    let st = s.api.patch_body(&status_path());
    let (_, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(reason, "Scaling");
    assert!(message.contains("from 2 to 3"), "{message}");

    // Pods still terminating: keep waiting.
    s.api.remove(&format!("{PODS}/orders-worker-1"));
    reconcile_flow(current_flow(&s.api), ctx.clone())
        .await
        .unwrap();
    assert_eq!(s.api.patch_body(STS)["spec"]["replicas"], 0);

    // No pod left: the new count.
    s.api.remove(&format!("{PODS}/orders-worker-0"));
    let action = reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    let sts = s.api.patch_body(STS);
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["metadata"]["annotations"][WORKER_COUNT_ANNOTATION], "3");
}

#[tokio::test]
async fn a_foreign_object_is_never_taken_over() {
    // Someone's own StatefulSet happens to be called orders-worker.
    let foreign = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                         "metadata": {"name": "orders-worker", "namespace": NS, "uid": "theirs"},
                         "spec": {"replicas": 5, "selector": {}, "template": {}}});
    let flow = flow_json(spec(1));
    let s = Scenario::with_flow(flow.clone()).with(foreign.clone());
    let (ctx, registry) = s.controller();
    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(15)));
    assert!(
        s.api
            .calls()
            .iter()
            .all(|c| !c.starts_with("PATCH") || c.ends_with("/status")),
        "no child at all is applied: {:?}",
        s.api.calls()
    );
    assert_eq!(s.api.object(STS).unwrap(), foreign);
    let st = s.api.patch_body(&status_path());
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ChildConflict")
    );
    assert!(
        message.contains("StatefulSet orders-worker already exists")
            && message.contains("does not take it over"),
        "{message}"
    );
    let ev = s.api.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Warning", "ChildConflict")
    );
    assert!(metrics_text(&registry).contains(
        "mirrorflow_controller_reconcile_errors_total{category=\"KubeApi\",resource=\"mirrorflow\"} 1"
    ));

    // Owned by another flow of the same name (a deleted one, not yet garbage collected).
    let mut previous = foreign;
    previous["metadata"]["ownerReferences"] = json!([{"apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "MirrorFlow", "name": "orders", "uid": "uid-0", "controller": true}]);
    s.api.insert(previous);
    reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    let st = s.api.patch_body(&status_path());
    assert!(
        condition(&st["status"], "Ready")
            .2
            .contains("controlled by MirrorFlow orders (uid uid-0)"),
        "{st}"
    );
}

#[tokio::test]
async fn a_refused_apply_is_a_condition_and_an_event_once() {
    let flow = flow_json(spec(1));
    let s = Scenario::with_flow(flow.clone());
    s.api.fail(
        "PATCH",
        STS,
        422,
        "StatefulSet.apps \"orders-worker\" is invalid: spec.template.spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
    );
    let (ctx, registry) = s.controller();
    let f = flow_of(&flow);
    let action = reconcile_flow(f.clone(), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(15)),
        "retried, not a hot loop"
    );
    let st = s.api.patch_body(&status_path());
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
    assert!(
        message.contains("applying StatefulSet orders-worker")
            && message.contains("spec.template.spec.containers[0].resources.requests"),
        "the API server's words, naming the field: {message}"
    );
    let ev = s.api.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1, "ApplyFailed");
    assert!(metrics_text(&registry).contains(&format!(
        "mirrorflow_controller_reconcile_errors_total{{category=\"KubeApi\",resource=\"{FLOW}\"}} 1"
    )));

    // The same refusal again: no new status, no new event.
    s.api.clear_requests();
    reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    assert!(!s.api.calls().contains(&format!("PATCH {}", status_path())));
    assert_eq!(s.api.events(), vec![]);
}

/// A record the target rejected, as worker 0 reports it: the flow's `RecordRejected`
/// condition, `status.failures` and `failedPartitions`, and one Warning Event (like
/// DataLoss), not repeated while nothing changes; the `SkipRecord` reset that clears it is
/// a Normal Event naming the record it skipped.
#[tokio::test]
async fn a_rejected_record_is_a_condition_and_an_event() {
    let s = reconciled(flow_json(spec(1))).await;
    let now = Timestamp::now().to_string();
    let rejected = json!({
        "type": "RecordRejected", "topic": "orders", "partition": 0, "requestedOffset": 5,
        "detectedAt": "2026-01-01T00:00:00Z",
        "reason": "MessageSizeTooLarge (Broker: Message size too large)",
        "message": "RecordRejected on source topic \"orders\" partition 0: ..."
    });
    let path = format!("{FLOWS}/orders");
    let worker = |failures: Value, reset: Value| {
        json!({"id": "orders-worker-0", "state": "Degraded", "partitions": 2,
               "lastHeartbeatTime": now, "failures": failures, "lastAppliedReset": reset})
    };
    s.api.edit(&path, |f| {
        f["status"]["workers"] = json!([worker(json!([rejected]), Value::Null)])
    });
    let (ctx, _) = s.controller();
    reconcile_flow(current_flow(&s.api), ctx.clone())
        .await
        .unwrap();
    let st = s.api.patch_body(&status_path());
    let (status, reason, message) = condition(&st["status"], "RecordRejected");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "TargetRefusedRecord")
    );
    assert!(
        message.contains("orders/0 at offset 5") && message.contains("SkipRecord"),
        "{message}"
    );
    assert!(
        !st["status"]["conditions"]
            .to_string()
            .contains("\"DataLoss\""),
        "no DataLoss condition before one is True: {st}"
    );
    assert_eq!(st["status"]["failedPartitions"], 1);
    assert_eq!(st["status"]["failures"][0]["type"], "RecordRejected");
    assert_eq!(
        st["status"]["failures"][0]["reason"],
        "MessageSizeTooLarge (Broker: Message size too large)"
    );
    let ev = s.api.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Warning", "RecordRejected")
    );
    assert!(ev[0].2.contains("orders/0 at offset 5"), "{ev:?}");

    // Nothing new: no new event.
    s.api.clear_requests();
    reconcile_flow(current_flow(&s.api), ctx.clone())
        .await
        .unwrap();
    assert_eq!(s.api.events(), vec![]);

    // The operator patches SkipRecord; the worker skipped offset 5 and cleared the failure.
    s.api.edit(&path, |f| {
        f["spec"]["reset"] = json!({"id": "skip-big", "strategy": "SkipRecord"});
        f["status"]["workers"] = json!([worker(
            json!([]),
            json!({"id": "skip-big", "time": "2026-01-01T00:01:00Z", "outcome": "Applied",
                   "partitions": [{"topic": "orders", "partition": 0}],
                   "skippedRecords": [{"topic": "orders", "partition": 0, "offset": 5}]})
        )]);
    });
    s.api.clear_requests();
    reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    let st = s.api.patch_body(&status_path());
    assert_eq!(condition(&st["status"], "RecordRejected").0, "False");
    assert_eq!(
        st["status"]["lastAppliedReset"]["skippedRecords"],
        json!([{"topic": "orders", "partition": 0, "offset": 5}])
    );
    let ev = s.api.events();
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Normal", "ResetApplied")
    );
    assert!(
        ev[0].2.contains("skipped record(s): orders/0 offset 5"),
        "{ev:?}"
    );
}

#[tokio::test]
async fn read_errors_are_conditions_too() {
    // E.g. a chart without the pods rule: a resize cannot count the old workers.
    let s = reconciled(flow_json(spec(2))).await;
    let flow = flow_json(spec(3));
    s.api.insert(flow.clone());
    s.api.fail(
        "GET",
        PODS,
        403,
        "pods is forbidden: User cannot list resource pods",
    );
    let (ctx, registry) = s.controller();
    let f = flow_of(&flow);
    let action = reconcile_flow(f.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(15)));
    assert!(
        !s.api.calls().contains(&format!("PATCH {STS}")),
        "nothing applied"
    );
    let st = s.api.patch_body(&status_path());
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ApplyFailed"));
    assert!(
        message.contains("list Pod kafka/orders-worker") && message.contains("forbidden"),
        "{message}"
    );
    assert_eq!(s.api.events()[0].1, "ApplyFailed");
    assert!(metrics_text(&registry).contains(&format!(
        "mirrorflow_controller_reconcile_errors_total{{category=\"KubeApi\",resource=\"{FLOW}\"}} 1"
    )));
    // Errors that are not about the flow (no status write possible) still go to the policy.
    let err = mirrorflow::controller::error::Error::MissingMetadata {
        kind: "MirrorFlow",
        name: "orders".into(),
        field: "metadata.uid",
    };
    assert_eq!(
        error_policy(f, &err, ctx),
        Action::requeue(Duration::from_secs(15))
    );
}

#[tokio::test]
async fn invalid_spec_sets_a_condition_and_touches_no_child() {
    let mut sp = spec(1);
    sp["topics"] = json!({"include": ["("]});
    let flow = flow_json(sp);
    let s = Scenario::with_flow(flow.clone());
    let (ctx, registry) = s.controller();

    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(
        action,
        Action::requeue(Duration::from_secs(300)),
        "long requeue, no hot loop"
    );
    assert_eq!(
        s.api.calls(),
        vec![format!("PATCH {}", status_path())],
        "no child read or written"
    );
    let st = s.api.patch_body(&status_path());
    let (status, reason, message) = condition(&st["status"], "InvalidSpec");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ValidationFailed")
    );
    assert!(message.contains("spec.topics.include[0]"), "{message}");
    assert_eq!(condition(&st["status"], "Ready").1, "InvalidSpec");
    let ev = s.api.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].0.as_str(), ev[0].1.as_str()),
        ("Warning", "InvalidSpec")
    );
    assert!(metrics_text(&registry).contains(
        "mirrorflow_controller_reconcile_errors_total{category=\"InvalidSpec\",resource=\"mirrorflow\"} 1"
    ));

    // The status write triggers another reconcile: it must change nothing and say nothing.
    s.api.clear_requests();
    reconcile_flow(current_flow(&s.api), ctx).await.unwrap();
    assert_eq!(
        s.api.requests().len(),
        0,
        "an unchanged invalid flow makes no request"
    );
}

#[tokio::test]
async fn names_that_cannot_form_children_are_an_invalid_spec() {
    for (name, want) in [
        ("x".repeat(46), "at most 45 characters"),
        ("1orders".to_string(), "DNS-1035"),
        ("a.b".to_string(), "DNS-1035"),
    ] {
        let mut flow = flow_json(spec(1));
        flow["metadata"]["name"] = json!(name);
        let s = Scenario::with_flow(flow.clone());
        let (ctx, _) = s.controller();
        reconcile_flow(flow_of(&flow), ctx).await.unwrap();
        let st = s.api.patch_body(&format!("{FLOWS}/{name}/status"));
        let (status, _, message) = condition(&st["status"], "InvalidSpec");
        assert_eq!(status, "True", "{name}");
        assert!(
            message.starts_with("metadata.name:") && message.contains(want),
            "{name}: {message}"
        );
        assert_eq!(s.api.calls().len(), 1, "{name}: only the status");
    }
}

#[tokio::test]
async fn deletion_creates_nothing() {
    let mut flow = flow_json(spec(1));
    flow["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    let s = Scenario::with_flow(flow.clone());
    let (ctx, _) = s.controller();
    let action = reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        s.api.requests().len(),
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
    assert_eq!(s.api.requests().len(), 0);
}

#[tokio::test]
async fn a_replica_that_lost_the_lease_writes_nothing() {
    let flow = flow_json(spec(1));
    let s = Scenario::with_flow(flow.clone());
    let (ctx, _) = s.controller();
    let ctx = Arc::try_unwrap(ctx).ok().unwrap();
    let lost = Leadership::elected();
    lost.renewed(std::time::Instant::now() - Duration::from_millis(1));
    let ctx: Arc<Context> = Arc::new(ctx.with_leadership(lost));
    reconcile_flow(flow_of(&flow), ctx.clone()).await.unwrap();
    let cp: OffsetCheckpoint =
        serde_json::from_value(checkpoint_json("groups", "orders", ".*")).unwrap();
    reconcile_checkpoint(Arc::new(cp), ctx).await.unwrap();
    assert_eq!(s.api.requests().len(), 0, "{:?}", s.api.calls());
}

#[test]
fn staleness_is_checked_just_in_time() {
    let now = Timestamp::from_second(1_700_000_100).unwrap();
    let stale_after = SignedDuration::from_secs(30);
    let with_beats = |beats: &[(i32, i64)], replicas: i32| {
        let mut f = flow_json(spec(replicas));
        let workers: Vec<Value> = beats
            .iter()
            .map(|(i, ago)| {
                json!({"id": format!("orders-worker-{i}"), "state": "Running",
                       "lastHeartbeatTime": (now - SignedDuration::from_secs(*ago)).to_string()})
            })
            .collect();
        f["status"] = json!({"workers": workers});
        serde_json::from_value::<MirrorFlow>(f).unwrap()
    };
    let rows: Vec<(&str, MirrorFlow, u64)> = vec![
        ("no entries: the safety net", with_beats(&[], 2), 300),
        (
            "fresh entry 10 s old: stale in 20 s",
            with_beats(&[(0, 10)], 1),
            21,
        ),
        (
            "the oldest fresh entry decides",
            with_beats(&[(0, 5), (1, 25)], 2),
            6,
        ),
        (
            "stale entries change nothing with time",
            with_beats(&[(0, 40), (1, 10)], 2),
            21,
        ),
        (
            "scaled-away entries do not count",
            with_beats(&[(0, 10), (5, 29)], 1),
            21,
        ),
        ("at the bound", with_beats(&[(0, 30)], 1), 2),
    ];
    for (name, flow, secs) in rows {
        assert_eq!(
            next_check(&flow, now, stale_after),
            Duration::from_secs(secs),
            "{name}"
        );
    }
}

#[tokio::test]
async fn missing_flow_ref_is_a_condition_not_a_hot_loop() {
    let cp = checkpoint_json("groups", "nope", ".*");
    let s = Scenario::empty().with(cp.clone());
    let (ctx, registry) = s.controller();
    let parsed: OffsetCheckpoint = serde_json::from_value(cp).unwrap();
    let action = reconcile_checkpoint(Arc::new(parsed), ctx.clone())
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
    assert_eq!(
        s.api.calls(),
        vec![
            format!("GET {FLOWS}/nope"),
            format!("PATCH {CPS}/groups/status")
        ]
    );
    let st = s.api.patch_body(&format!("{CPS}/groups/status"));
    assert_eq!(st["kind"], "OffsetCheckpoint");
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "FlowNotFound")
    );
    assert!(message.contains("\"nope\""), "{message}");
    let ev = s.api.events();
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].1, "FlowNotFound");
    assert!(metrics_text(&registry)
        .contains("category=\"FlowNotFound\",resource=\"offsetcheckpoint\"} 1"));

    // Requeued: looks again, writes nothing new.
    let now: OffsetCheckpoint =
        serde_json::from_value(s.api.object(&format!("{CPS}/groups")).unwrap()).unwrap();
    s.api.clear_requests();
    reconcile_checkpoint(Arc::new(now.clone()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(s.api.calls(), vec![format!("GET {FLOWS}/nope")]);
    assert_eq!(s.api.events(), vec![]);

    // The flow appears (in the watch cache: no GET at all): Ready moves on.
    let mut flow = flow_json(spec(1));
    flow["metadata"]["name"] = json!("nope");
    s.api.insert(flow);
    let s = s.cached();
    let (ctx, _) = s.controller();
    s.api.clear_requests();
    reconcile_checkpoint(Arc::new(now), ctx).await.unwrap();
    assert_eq!(s.api.calls(), vec![format!("PATCH {CPS}/groups/status")]);
    let st = s.api.patch_body(&format!("{CPS}/groups/status"));
    assert_eq!(condition(&st["status"], "Ready").1, "AwaitingCheckpoints");
}

/// Worker 0 reports that the checkpoint runner fails: the OffsetCheckpoint says why
/// (`CheckpointFailed`) with one Warning event, not one per wording of the error, and turns
/// Ready once the runner works again.
#[tokio::test]
async fn a_failing_checkpoint_runner_is_ready_false_with_its_error() {
    let s = reconciled(flow_json(spec(1))).await;
    s.api.insert(checkpoint_json("groups", "orders", ".*"));
    let (ctx, _) = s.controller();
    let now = Timestamp::now().to_string();
    let report = |report: Value| {
        s.api.edit(&format!("{FLOWS}/orders"), |f| {
            f["status"]["workers"] = json!([{"id": "orders-worker-0", "state": "Running",
                "lastHeartbeatTime": now, "checkpoints": [report]}])
        })
    };
    let reconcile = || async {
        let cp: OffsetCheckpoint =
            serde_json::from_value(s.api.object(&format!("{CPS}/groups")).unwrap()).unwrap();
        s.api.clear_requests();
        reconcile_checkpoint(Arc::new(cp), ctx.clone())
            .await
            .unwrap();
        let st = s.api.patch_body(&format!("{CPS}/groups/status"));
        (condition(&st["status"], "Ready"), s.api.events())
    };
    const DOWN: &str = "target cluster dc2: create topic dc1.checkpoints.internal: timed out";
    report(json!({"name": "groups", "error": DOWN}));
    let ((status, reason, message), events) = reconcile().await;
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        ("False", "CheckpointFailed", DOWN)
    );
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (
            events[0].0.as_str(),
            events[0].1.as_str(),
            events[0].2.as_str()
        ),
        ("Warning", "CheckpointFailed", DOWN)
    );

    report(json!({"name": "groups", "error": "target cluster dc2: connection refused"}));
    let ((_, reason, message), events) = reconcile().await;
    assert_eq!(
        (reason.as_str(), message.as_str()),
        ("CheckpointFailed", "target cluster dc2: connection refused")
    );
    assert_eq!(
        events,
        vec![],
        "the same failure in other words: no new event"
    );

    report(
        json!({"name": "groups", "groups": [{"group": "billing", "partitions": 2,
        "lastCheckpointTime": now, "synced": true}]}),
    );
    let ((status, reason, _), events) = reconcile().await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "Checkpointing")
    );
    assert_eq!(events, vec![]);
}

#[tokio::test]
async fn invalid_checkpoint_does_not_look_up_its_flow() {
    let cp = checkpoint_json("groups", "orders", "(");
    let s = Scenario::empty().with(cp.clone());
    let (ctx, _) = s.controller();
    let action = reconcile_checkpoint(Arc::new(serde_json::from_value(cp).unwrap()), ctx)
        .await
        .unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(s.api.calls(), vec![format!("PATCH {CPS}/groups/status")]);
    let st = s.api.patch_body(&format!("{CPS}/groups/status"));
    let (_, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(reason, "InvalidSpec");
    assert!(message.contains("spec.groups.include[0]"), "{message}");
}

/// A flow in another namespace, created at `created`, with `spec`.
fn other_flow(ns: &str, name: &str, created: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "MirrorFlow",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "generation": 1,
                     "resourceVersion": "11", "creationTimestamp": created},
        "spec": spec,
    })
}

#[tokio::test]
async fn a_later_flow_writing_the_same_target_topics_is_refused_and_runs_no_worker() {
    // `kafka/orders` (dc1 -> b:9092, Prefix, every topic) came first; `team-b/copy` reads
    // another cluster under the same alias dc1 and writes to the same target: both would
    // write dc1.<topic> on b:9092.
    let mut first = flow_json(spec(3));
    first["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut copy_spec = spec(2);
    copy_spec["source"] = json!({"alias": "dc1", "bootstrapServers": "elsewhere:9092"});
    copy_spec["target"]["bootstrapServers"] = json!("B:9092,c:9092");
    let second = other_flow("team-b", "copy", "2026-01-02T00:00:00Z", copy_spec);
    let s = Scenario::with_flow(first.clone())
        .with(second.clone())
        .cached();
    let (ctx, _) = s.controller();

    let action = reconcile_flow(flow_of(&second), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let sts = s
        .api
        .patch_body("/apis/apps/v1/namespaces/team-b/statefulsets/copy-worker");
    assert_eq!(sts["spec"]["replicas"], 0, "no worker may start: {sts}");
    let st = s
        .api
        .patch_body("/apis/mirrorflow.io/v1alpha1/namespaces/team-b/mirrorflows/copy/status");
    let (status, reason, message) = condition(&st["status"], "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "TargetOverlap")
    );
    assert!(
        message.starts_with("MirrorFlow kafka/orders (created earlier) writes to the same target cluster (b:9092) and both would write target topic \"dc1.a\""),
        "{message}"
    );
    let ev = s.api.events();
    assert!(
        ev.iter()
            .any(|(t, r, _)| t == "Warning" && r == "TargetOverlap"),
        "{ev:?}"
    );

    // The first flow runs as if the second did not exist.
    s.api.clear_requests();
    reconcile_flow(flow_of(&first), ctx).await.unwrap();
    assert_eq!(s.api.patch_body(STS)["spec"]["replicas"], 3);
    let (status, reason, _) = condition(&s.api.patch_body(&status_path())["status"], "Ready");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WorkersStarting")
    );
}

#[tokio::test]
async fn flows_whose_target_topics_cannot_meet_both_run() {
    // Fan-in: dc3 -> b:9092 writes dc3.<topic>, never dc1.<topic>. Another flow with the same
    // alias but another target cluster. A flow being deleted is not counted.
    let mut first = flow_json(spec(1));
    first["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut fan_in = spec(1);
    fan_in["source"] = json!({"alias": "dc3", "bootstrapServers": "c:9092"});
    let mut elsewhere = spec(1);
    elsewhere["target"]["bootstrapServers"] = json!("other:9092");
    let mut deleted = other_flow("team-a", "old", "2025-01-01T00:00:00Z", spec(1));
    deleted["metadata"]["deletionTimestamp"] = json!("2026-01-03T00:00:00Z");
    deleted["metadata"]["finalizers"] = json!(["x"]);
    let later = [
        other_flow("team-b", "fan-in", "2026-01-02T00:00:00Z", fan_in),
        other_flow("team-c", "elsewhere", "2026-01-02T00:00:00Z", elsewhere),
    ];
    let mut s = Scenario::with_flow(first.clone()).with(deleted);
    for f in &later {
        s = s.with(f.clone());
    }
    let s = s.cached();
    let (ctx, _) = s.controller();
    for f in later.iter().chain([&first]) {
        let ns = f["metadata"]["namespace"].as_str().unwrap();
        let name = f["metadata"]["name"].as_str().unwrap();
        reconcile_flow(flow_of(f), ctx.clone()).await.unwrap();
        let sts = s.api.patch_body(&format!(
            "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}-worker"
        ));
        assert_eq!(sts["spec"]["replicas"], 1, "{ns}/{name}");
        let st = s.api.patch_body(&format!(
            "/apis/mirrorflow.io/v1alpha1/namespaces/{ns}/mirrorflows/{name}/status"
        ));
        assert_ne!(
            condition(&st["status"], "Ready").1,
            "TargetOverlap",
            "{ns}/{name}"
        );
    }
}

const LEASE_COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/kafka/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/kafka/leases/mirrorflow-controller";

/// Waits on this (blocking) thread until `done`, at most a minute (a guard against hanging,
/// not a timing assertion).
fn block_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "gave up waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lease is held on a thread and runtime of its own with its own client: while the
/// controller's runtime cannot run anything (this thread blocked, its client's requests never
/// answered), renewals go on, a 504 on one renewal is retried, and leadership holds.
#[test]
fn the_lease_is_renewed_while_the_controller_runtime_is_stuck() {
    let lease_api = FakeApi::new();
    let mut settings = LeaseSettings::new("mirrorflow-controller", NS, "replica-a");
    settings.retry_period = Duration::from_millis(20);
    let leadership = Leadership::elected();
    let lease = {
        let api = lease_api.clone();
        LeaseThread::spawn(move || Ok(api.client()), settings, leadership.clone()).unwrap()
    };
    // The controller's runtime: one thread, blocked by what follows, so nothing spawned on it
    // (its client's request buffer included) ever runs.
    let controller_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let controller_api = FakeApi::new();
    let _client = controller_rt.block_on(async { controller_api.client() });

    block_until("the lease acquired", || {
        lease_api.count("POST", LEASE_COLLECTION) == 1
    });
    block_until("renewals", || lease_api.count("PUT", LEASE) >= 3);
    lease_api.fail_times("PUT", LEASE, 504, "request timed out", 1);
    let before = lease_api.count("PUT", LEASE);
    block_until("the 504 and two renewals after it", || {
        lease_api.count("PUT", LEASE) >= before + 3
    });
    assert!(leadership.holds(), "a 504 on one renewal is retried");
    assert!(controller_api.requests().is_empty());

    controller_rt.block_on(async {
        assert_eq!(lease.elected().await, LeaseState::Leader);
        lease.stop();
        assert_eq!(lease.settled().await, LeaseState::Stopped);
    });
    assert!(!leadership.holds(), "released");
    let released = lease_api.object(LEASE).unwrap();
    assert_eq!(
        released["spec"]["holderIdentity"],
        Value::Null,
        "{released}"
    );
}
