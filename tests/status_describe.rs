//! `kubectl describe mirrorflow` in one screen: the status of a flow with two workers, one of
//! which stopped a partition for DataLoss, built by the worker's and the controller's own code
//! (worker snapshot → status entry → fold → entry again once the worker sees the fold),
//! rendered as YAML and compared with `tests/golden/describe-dataloss.yaml`
//! (`UPDATE_GENERATED=1` writes it again).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use mirrorflow::api::status::{
    fold_flow_status, FlowObservation, StatefulSetView, DEFAULT_STALE_AFTER,
};
use mirrorflow::api::{
    Delivery, MirrorFlow, MirrorFlowStatus, ReplicationLag, TopicPartitionRef, WorkerState,
};
use mirrorflow::worker::process::k8s::compact_entry;
use mirrorflow::worker::replicate::status::{FailureKind, PartitionFailed, PartitionSnapshot};
use mirrorflow::worker::replicate::{PartitionState, WorkerSnapshot};
use mirrorflow::worker::validation::classify::{classify_out_of_range, FlowRef};
use serde_json::json;

const GOLDEN: &str = "tests/golden/describe-dataloss.yaml";
/// One screen, counted from `status:` (as `kubectl describe` from `Status:`).
const SCREEN: usize = 60;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_765_000_000 + s).unwrap()
}

fn flow() -> MirrorFlow {
    let spec = serde_json::from_value(json!({
        "source": {"alias": "dc1", "bootstrapServers": "kafka-dc1:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "kafka-dc2:9092"},
        "topics": {"include": ["orders"]},
        "workers": {"replicas": 2}
    }))
    .unwrap();
    let mut f = MirrorFlow::new("orders-dr", spec);
    f.metadata.namespace = Some("kafka".into());
    f.metadata.generation = Some(1);
    f
}

/// Worker `index`'s snapshot at `now`: it owns `partitions` of `orders`, and `lost` (if any)
/// lost offsets 120 to 499 to retention before they were replicated.
fn snapshot(index: u32, partitions: &[i32], lost: Option<i32>, now: Timestamp) -> WorkerSnapshot {
    let mut s = WorkerSnapshot::starting("kafka", "orders-dr", index, 2, Delivery::AtLeastOnce);
    s.time = Time(now);
    s.state = WorkerState::Running;
    for p in partitions {
        let state = if Some(*p) == lost {
            let detection =
                classify_out_of_range(TopicPartitionRef::new("orders", *p), 120, Ok(500), None);
            let flow = FlowRef {
                namespace: "kafka",
                name: "orders-dr",
            };
            let f = detection.to_failure(flow, Time(t(0)));
            s.failures.push(f.clone());
            s.state = WorkerState::Degraded;
            PartitionState::Failed(PartitionFailed {
                kind: FailureKind::DataLoss,
                offset: 120,
                message: f.message.clone().unwrap(),
                failure: Some(f),
            })
        } else {
            PartitionState::Replicating
        };
        s.partitions.push(PartitionSnapshot {
            topic: "orders".into(),
            partition: *p,
            target_topic: "dc1.orders".into(),
            position: Some(1000),
            high_watermark: Some(1000),
            lag_records: Some(0),
            lag_seconds: Some(0.0),
            state,
        });
    }
    s.replication_lag = ReplicationLag {
        records: 0,
        seconds: 0,
    };
    s
}

/// The controller's fold of `f` at `now` (StatefulSet settled, both pods ready).
fn fold(f: &MirrorFlow, now: Timestamp) -> MirrorFlowStatus {
    let sts = StatefulSetView {
        generation: Some(1),
        observed_generation: Some(1),
        replicas: 2,
        ready_replicas: 2,
        updated_replicas: 2,
        current_revision: Some("r1".into()),
        update_revision: Some("r1".into()),
    };
    fold_flow_status(&FlowObservation {
        flow: f,
        invalid: None,
        statefulset: Some(&sts),
        draining: None,
        children: None,
        now,
        stale_after: DEFAULT_STALE_AFTER,
    })
}

/// The status at each step: the worker reports the failure, the controller folds it (the
/// Warning Event goes out), the worker sees the fold and names the partition instead.
fn steps() -> (MirrorFlowStatus, MirrorFlowStatus) {
    let mut f = flow();
    let now = t(2);
    let (s0, s1) = (
        snapshot(0, &[0, 2], Some(0), now),
        snapshot(1, &[1, 3], None, now),
    );
    let entries = |folded: &[_]| {
        vec![
            compact_entry(s0.to_worker_status(Some(1)), &s0, folded),
            compact_entry(s1.to_worker_status(Some(1)), &s1, folded),
        ]
    };
    f.status = Some(MirrorFlowStatus {
        workers: entries(&[]),
        ..Default::default()
    });
    let as_the_event_arrives = fold(&f, now);
    let mut st = as_the_event_arrives.clone();
    st.workers = entries(&as_the_event_arrives.failures);
    f.status = Some(st);
    let settled = fold(&f, now);
    (as_the_event_arrives, settled)
}

fn yaml(st: &MirrorFlowStatus) -> String {
    serde_yaml::to_string(&json!({ "status": st })).unwrap()
}

#[test]
fn a_dataloss_with_two_workers_fits_one_screen() {
    let (arriving, settled) = steps();
    let text = settled.failures[0].message.clone().expect("explained");
    let rendered = yaml(&settled);
    let lines = rendered.lines().count();
    eprintln!(
        "status lines: {} as the event arrives, {lines} once the worker saw the fold",
        yaml(&arriving).lines().count()
    );
    assert!(lines <= SCREEN, "{lines} lines:\n{rendered}");
    let once = |needle: &str| rendered.matches(needle).count();
    assert_eq!(once(&text[..60]), 1, "the explanation once:\n{rendered}");
    assert_eq!(
        once("records (offsets 120 to 499) are lost"),
        1,
        "{rendered}"
    );
    assert_eq!(
        once("kubectl -n kafka patch mirrorflow orders-dr"),
        1,
        "{rendered}"
    );
    assert_eq!(once("failures: []"), 0, "empty lists omitted:\n{rendered}");
    // Worker 0 names the partition the status explains.
    assert_eq!(settled.workers[0].stopped_partitions, vec!["orders/0"]);
    assert!(settled.workers[0].failures.is_empty());
    // The summaries agree: `workersSummary`, Ready and Replicating count the same workers.
    assert_eq!(settled.workers_summary.as_deref(), Some("2/2"));
    for c in &settled.conditions {
        assert!(
            !c.message.contains("workers") || c.message.starts_with("2/2 workers"),
            "{c:?}"
        );
    }
    assert_eq!(
        settled
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("Ready", "False", "PartitionsFailed"),
            ("Stalled", "True", "PartitionsFailed"),
            ("Replicating", "True", "PartiallyReplicating"),
            ("DataLoss", "True", "RecordsDeleted"),
        ]
    );
    // The worker's next entry changes nothing the controller writes.
    let mut again = flow();
    again.status = Some(settled.clone());
    assert_eq!(fold(&again, t(3)), settled, "a fixed point");

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    pretty_assertions::assert_eq!(
        golden,
        rendered,
        "{GOLDEN} is stale: run with UPDATE_GENERATED=1 and review the difference"
    );
}
