//! The Argo CD health checks of `charts/mirrorflow/health/` over the statuses the controller
//! writes (its own folds, and the golden `kubectl describe` status), plus statuses an older
//! controller wrote (no Reconciling/Stalled): Healthy, Progressing, Degraded and Suspended as
//! Argo CD defines them.

#[path = "kube_support/argo.rs"]
mod argo;

use jiff::Timestamp;
use mirrorflow::api::status::{
    fold_checkpoint_status, fold_flow_status, CheckpointObservation, CheckpointReports,
    FlowObservation, FlowRefState, StatefulSetView, DEFAULT_STALE_AFTER,
};
use mirrorflow::api::{MirrorFlow, MirrorFlowStatus, OffsetCheckpoint, WorkerStatus};
use serde_json::{json, Value};

fn now() -> Timestamp {
    Timestamp::from_second(1_765_000_000).unwrap()
}

fn flow(paused: bool) -> MirrorFlow {
    let spec = serde_json::from_value(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "workers": {"replicas": 2},
        "paused": paused
    }))
    .unwrap();
    let mut f = MirrorFlow::new("orders-dr", spec);
    f.metadata.namespace = Some("kafka".into());
    f.metadata.generation = Some(3);
    f
}

fn entry(i: u32, state: &str, extra: Value) -> WorkerStatus {
    let mut v = json!({
        "id": format!("orders-dr-worker-{i}"),
        "partitions": 2,
        "state": state,
        "lastHeartbeatTime": now().to_string(),
        "observedGeneration": 3,
    });
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    serde_json::from_value(v).unwrap()
}

/// The flow as the API server returns it after the controller's fold over `workers`.
fn folded(mut f: MirrorFlow, workers: Vec<WorkerStatus>, sts: Option<StatefulSetView>) -> Value {
    f.status = Some(MirrorFlowStatus {
        workers,
        ..Default::default()
    });
    let st = fold_flow_status(&FlowObservation {
        flow: &f,
        invalid: None,
        statefulset: sts.as_ref(),
        draining: None,
        children: None,
        now: now(),
        stale_after: DEFAULT_STALE_AFTER,
    });
    f.status = Some(st);
    serde_json::to_value(&f).unwrap()
}

fn settled() -> Option<StatefulSetView> {
    Some(StatefulSetView {
        generation: Some(1),
        observed_generation: Some(1),
        replicas: 2,
        ready_replicas: 2,
        updated_replicas: 2,
        current_revision: Some("r1".into()),
        update_revision: Some("r1".into()),
    })
}

fn golden_dataloss() -> Value {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/describe-dataloss.yaml"),
    )
    .unwrap();
    let status: Value = serde_yaml::from_str::<Value>(&text).unwrap()["status"].clone();
    let mut f = serde_json::to_value(flow(false)).unwrap();
    f["metadata"]["generation"] = json!(1);
    f["status"] = status;
    f
}

#[test]
fn mirrorflow_health() {
    let running = || {
        vec![
            entry(0, "Running", json!({})),
            entry(1, "Running", json!({})),
        ]
    };
    let paused = vec![entry(0, "Paused", json!({})), entry(1, "Paused", json!({}))];
    let mut ahead = folded(flow(false), running(), settled());
    ahead["metadata"]["generation"] = json!(4);
    let bare = serde_json::to_value(flow(false)).unwrap();
    // Statuses of a controller before Reconciling/Stalled: Ready alone decides.
    let older = |reason: &str| {
        let mut f = serde_json::to_value(flow(false)).unwrap();
        f["status"] = json!({"observedGeneration": 3, "conditions": [{
            "type": "Ready", "status": "False", "reason": reason, "message": "m",
            "lastTransitionTime": "2025-12-06T00:00:00Z"}]});
        f
    };
    let rows: Vec<(&str, Value, &str, &str)> = vec![
        (
            "every worker replicating",
            folded(flow(false), running(), settled()),
            "Healthy",
            "AllWorkersRunning: 2/2 workers replicating",
        ),
        (
            "paused by spec.paused",
            folded(flow(true), paused, settled()),
            "Suspended",
            "Paused: 2/2 workers paused; paused by spec.paused",
        ),
        (
            "a DataLoss (the one-screen describe)",
            golden_dataloss(),
            "Degraded",
            "PartitionsFailed: 1 partition(s) stopped; see status.failures",
        ),
        (
            "a failed worker",
            folded(
                flow(false),
                vec![
                    entry(0, "Running", json!({})),
                    entry(
                        1,
                        "Failed",
                        json!({"message": "target refuses transactions"}),
                    ),
                ],
                settled(),
            ),
            "Degraded",
            "WorkerFailed: orders-dr-worker-1: target refuses transactions",
        ),
        (
            "workers starting",
            folded(flow(false), vec![], None),
            "Progressing",
            "WorkersStarting: 0/2 workers replicating",
        ),
        (
            "a spec the controller has not seen yet",
            ahead,
            "Progressing",
            "Waiting for the controller to observe generation 4",
        ),
        (
            "no status yet",
            bare,
            "Progressing",
            "Waiting for the controller",
        ),
        (
            "older controller, workers starting",
            older("WorkersStarting"),
            "Progressing",
            "WorkersStarting: m",
        ),
        (
            "older controller, stopped partitions",
            older("PartitionsFailed"),
            "Degraded",
            "PartitionsFailed: m",
        ),
    ];
    for (name, obj, status, message) in rows {
        let (got, said) = argo::health(&obj);
        assert_eq!(got, status, "{name}: {said}");
        assert!(said.starts_with(message), "{name}: {said:?}");
    }
}

fn checkpoint() -> OffsetCheckpoint {
    let mut cp: OffsetCheckpoint = serde_json::from_value(json!({
        "apiVersion": "mirrorflow.io/v1alpha1",
        "kind": "OffsetCheckpoint",
        "metadata": {"name": "orders-groups", "namespace": "kafka", "generation": 1},
        "spec": {"flowRef": {"name": "orders-dr"}, "groups": {"include": [".*"]}, "intervalSeconds": 60}
    }))
    .unwrap();
    cp.metadata.generation = Some(1);
    cp
}

fn cp_folded(flow: FlowRefState, reports: Option<CheckpointReports>) -> Value {
    let mut cp = checkpoint();
    let st = fold_checkpoint_status(&CheckpointObservation {
        checkpoint: &cp,
        flow,
        invalid: None,
        reports: reports.as_ref(),
        now: now(),
    });
    cp.status = Some(st);
    serde_json::to_value(&cp).unwrap()
}

fn groups(age_seconds: i64) -> CheckpointReports {
    let at = now() - jiff::SignedDuration::from_secs(age_seconds);
    CheckpointReports {
        groups: vec![serde_json::from_value(json!({
            "group": "billing", "partitions": 3, "lastCheckpointTime": at.to_string(), "synced": true
        }))
        .unwrap()],
        ..Default::default()
    }
}

#[test]
fn offsetcheckpoint_health() {
    let found = FlowRefState::Found { invalid: false };
    let failing = CheckpointReports {
        error: Some("checkpoints topic not writable".into()),
        ..Default::default()
    };
    let rows: Vec<(&str, Value, &str, &str)> = vec![
        (
            "checkpointing",
            cp_folded(found, Some(groups(10))),
            "Healthy",
            "Checkpointing: 1 group(s) checkpointed",
        ),
        (
            "no worker reported yet",
            cp_folded(found, None),
            "Progressing",
            "AwaitingCheckpoints",
        ),
        (
            "its flow is missing",
            cp_folded(FlowRefState::NotFound, None),
            "Degraded",
            "FlowNotFound",
        ),
        (
            "the runner fails",
            cp_folded(found, Some(failing)),
            "Degraded",
            "CheckpointFailed: checkpoints topic not writable",
        ),
        (
            "a stale group",
            cp_folded(found, Some(groups(3600))),
            "Degraded",
            "CheckpointsStale",
        ),
    ];
    for (name, obj, status, message) in rows {
        let (got, said) = argo::health(&obj);
        assert_eq!(got, status, "{name}: {said}");
        assert!(said.starts_with(message), "{name}: {said:?}");
    }
}
