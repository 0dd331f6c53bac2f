//! Status folding: every condition transition, staleness, bounds, lastTransitionTime, and the
//! OffsetCheckpoint fold. Its fixtures also serve the controller's event tests.

use super::*;
use crate::api::*;
use pretty_assertions::assert_eq;
use serde_json::json;

const STALE_AFTER: SignedDuration = DEFAULT_STALE_AFTER;

pub(crate) fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn flow(replicas: i32) -> MirrorFlow {
    let spec = serde_json::from_value(json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "workers": {"replicas": replicas}
    }))
    .unwrap();
    let mut f = MirrorFlow::new("orders", spec);
    f.metadata.namespace = Some("kafka".into());
    f.metadata.generation = Some(2);
    f
}

fn worker(i: i32, state: WorkerState, heartbeat: i64) -> WorkerStatus {
    WorkerStatus {
        id: format!("orders-worker-{i}"),
        partitions: 4,
        state,
        last_heartbeat_time: Some(Time(t(heartbeat))),
        message: None,
        observed_generation: Some(2),
        failures: vec![],
        stopped_partitions: vec![],
        replication_lag: None,
        last_applied_reset: None,
        checkpoints: vec![],
        connection_problems: vec![],
        topic_acls: None,
        unwritable_topics: vec![],
        replication_latency: None,
        audit: None,
        failover: None,
        mirror_maker2_takeover: None,
        failback: None,
    }
}

fn failure(type_: FailureType, topic: &str, partition: i32) -> PartitionFailure {
    PartitionFailure {
        type_,
        topic: topic.into(),
        partition,
        requested_offset: 10,
        log_start_offset: Some(50),
        records_lost: Some(40),
        detected_at: Time(t(0)),
        reason: None,
        message: None,
    }
}

fn rejected(topic: &str, partition: i32, offset: i64) -> PartitionFailure {
    PartitionFailure {
        requested_offset: offset,
        log_start_offset: None,
        records_lost: None,
        reason: Some("Broker: Message size too large (MessageSizeTooLarge)".into()),
        ..failure(FailureType::RecordRejected, topic, partition)
    }
}

fn applied(
    id: &str,
    outcome: ResetOutcome,
    at: i64,
    partitions: &[(&str, i32)],
    msg: Option<&str>,
) -> AppliedReset {
    AppliedReset {
        id: id.into(),
        time: Time(t(at)),
        outcome,
        message: msg.map(Into::into),
        partitions: partitions
            .iter()
            .map(|(topic, partition)| TopicPartitionRef {
                topic: topic.to_string(),
                partition: *partition,
            })
            .collect(),
        skipped_records: vec![],
    }
}

fn with_workers(mut f: MirrorFlow, workers: Vec<WorkerStatus>) -> MirrorFlow {
    let mut st = f.status.take().unwrap_or_default();
    st.workers = workers;
    f.status = Some(st);
    f
}

fn sts(replicas: i32, ready: i32) -> StatefulSetView {
    StatefulSetView {
        generation: Some(1),
        observed_generation: Some(1),
        replicas,
        ready_replicas: ready,
        updated_replicas: replicas,
        current_revision: Some("r1".into()),
        update_revision: Some("r1".into()),
    }
}

pub(crate) struct Case {
    pub(crate) name: &'static str,
    flow: MirrorFlow,
    invalid: Option<ValidationErrors>,
    sts: Option<StatefulSetView>,
    draining: Option<(i32, i32)>,
    /// (type, status, reason) of Ready, Replicating, DataLoss, TopicReset, InvalidSpec.
    want: [(&'static str, &'static str); 5],
    summary: &'static str,
    failed: i32,
}

pub(crate) fn fold(c: &Case, now: Timestamp) -> MirrorFlowStatus {
    fold_flow_status(&FlowObservation {
        flow: &c.flow,
        invalid: c.invalid.as_ref(),
        statefulset: c.sts.as_ref(),
        draining: c.draining,
        children: None,
        now,
        stale_after: STALE_AFTER,
    })
}

const OK_REST: [(&str, &str); 3] = [
    ("False", "NoDataLoss"),
    ("False", "NoTopicReset"),
    ("False", "Valid"),
];

fn want(
    ready: (&'static str, &'static str),
    rep: (&'static str, &'static str),
) -> [(&'static str, &'static str); 5] {
    [ready, rep, OK_REST[0], OK_REST[1], OK_REST[2]]
}

fn reset_flow(id: &str) -> MirrorFlow {
    let mut f = flow(2);
    f.spec.reset =
        Some(serde_json::from_value(json!({"id": id, "strategy": "ResumeFromLogStart"})).unwrap());
    f
}

pub(crate) fn cases() -> Vec<Case> {
    use WorkerState::*;
    let running2 = || vec![worker(0, Running, 95), worker(1, Running, 95)];
    let degraded_with = |f: PartitionFailure| {
        let mut w = worker(1, Degraded, 95);
        w.failures = vec![f];
        vec![worker(0, Running, 95), w]
    };
    let invalid = ValidationErrors(vec![FieldError {
        field: "spec.topics.include[0]".into(),
        value: "(".into(),
        message: "is not a valid regular expression".into(),
    }]);
    let mut failed_worker = worker(1, Failed, 95);
    failed_worker.message = Some("target refuses transactions".into());
    let mut paused = flow(2);
    paused.spec.paused = true;
    let mut rolling = sts(2, 2);
    rolling.updated_replicas = 1;
    rolling.update_revision = Some("r2".into());

    let mut w0 = worker(0, Degraded, 95);
    w0.failures = vec![failure(FailureType::DataLoss, "orders", 0)];
    w0.last_applied_reset = Some(applied(
        "r1",
        ResetOutcome::Applied,
        90,
        &[("orders", 0)],
        None,
    ));
    let in_progress = with_workers(reset_flow("r1"), vec![w0.clone(), worker(1, Running, 95)]);
    let mut w1 = worker(1, Running, 95);
    // Worker 1 owns nothing the request concerns.
    w1.last_applied_reset = Some(applied("r1", ResetOutcome::NotOwned, 92, &[], None));
    let mut w0_done = worker(0, Running, 95);
    w0_done.last_applied_reset = w0.last_applied_reset.clone();
    let reset_applied = with_workers(reset_flow("r1"), vec![w0_done, w1.clone()]);
    let mut w0_refused = w0.clone();
    w0_refused.last_applied_reset = Some(applied(
        "r1",
        ResetOutcome::Refused,
        91,
        &[],
        Some("orders/3 is not failed"),
    ));
    let reset_refused = with_workers(reset_flow("r1"), vec![w0_refused, w1]);

    vec![
        Case {
            name: "fresh flow",
            flow: flow(2),
            invalid: None,
            sts: None,
            draining: None,
            want: want(
                ("False", "WorkersStarting"),
                ("False", "NoWorkerReplicating"),
            ),
            summary: "0/2",
            failed: 0,
        },
        Case {
            name: "workers starting",
            flow: with_workers(flow(2), vec![worker(0, Starting, 95)]),
            invalid: None,
            sts: Some(sts(2, 0)),
            draining: None,
            want: want(
                ("False", "WorkersStarting"),
                ("False", "NoWorkerReplicating"),
            ),
            summary: "0/2",
            failed: 0,
        },
        Case {
            name: "all running",
            flow: with_workers(flow(2), running2()),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "all entries running but a pod fails its readiness probe",
            flow: with_workers(flow(2), running2()),
            invalid: None,
            sts: Some(sts(2, 1)),
            draining: None,
            want: want(("False", "WorkersNotReady"), ("True", "Replicating")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "one worker failed",
            flow: with_workers(flow(2), vec![worker(0, Running, 95), failed_worker]),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("False", "WorkerFailed"), ("True", "PartiallyReplicating")),
            summary: "1/2",
            failed: 0,
        },
        Case {
            name: "DataLoss on a partition",
            flow: with_workers(
                flow(2),
                degraded_with(failure(FailureType::DataLoss, "orders", 3)),
            ),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: [
                ("False", "PartitionsFailed"),
                ("True", "PartiallyReplicating"),
                ("True", "RecordsDeleted"),
                OK_REST[1],
                OK_REST[2],
            ],
            summary: "2/2",
            failed: 1,
        },
        Case {
            name: "TopicReset on a partition",
            flow: with_workers(
                flow(2),
                degraded_with(failure(FailureType::TopicReset, "payments", 0)),
            ),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: [
                ("False", "PartitionsFailed"),
                ("True", "PartiallyReplicating"),
                OK_REST[0],
                ("True", "TopicRecreated"),
                OK_REST[2],
            ],
            summary: "2/2",
            failed: 1,
        },
        Case {
            name: "RecordRejected on a partition",
            flow: with_workers(flow(2), degraded_with(rejected("orders", 0, 2))),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            // DataLoss and TopicReset stay False: the RecordRejected condition says it.
            want: want(
                ("False", "PartitionsFailed"),
                ("True", "PartiallyReplicating"),
            ),
            summary: "2/2",
            failed: 1,
        },
        Case {
            name: "reset in progress",
            flow: in_progress,
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: [
                ("False", "ResetInProgress"),
                ("True", "PartiallyReplicating"),
                ("True", "RecordsDeleted"),
                OK_REST[1],
                OK_REST[2],
            ],
            summary: "2/2",
            failed: 1,
        },
        Case {
            name: "reset applied by every worker",
            flow: reset_applied,
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "reset refused",
            flow: reset_refused,
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: [
                ("False", "PartitionsFailed"),
                ("True", "PartiallyReplicating"),
                ("True", "RecordsDeleted"),
                OK_REST[1],
                OK_REST[2],
            ],
            summary: "2/2",
            failed: 1,
        },
        Case {
            name: "invalid spec",
            flow: with_workers(flow(2), running2()),
            invalid: Some(invalid),
            sts: None,
            draining: None,
            want: [
                ("False", "InvalidSpec"),
                ("True", "Replicating"),
                OK_REST[0],
                OK_REST[1],
                ("True", "ValidationFailed"),
            ],
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "stale worker heartbeat",
            flow: with_workers(
                flow(2),
                vec![worker(0, Running, 95), worker(1, Running, 100 - 31)],
            ),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(
                ("False", "WorkersNotReady"),
                ("True", "PartiallyReplicating"),
            ),
            summary: "1/2",
            failed: 0,
        },
        Case {
            name: "heartbeat exactly at the bound is fresh",
            flow: with_workers(
                flow(2),
                vec![worker(0, Running, 95), worker(1, Running, 100 - 30)],
            ),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "paused",
            flow: with_workers(
                paused.clone(),
                vec![worker(0, Paused, 95), worker(1, Paused, 95)],
            ),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("True", "Paused"), ("False", "Paused")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "pause requested, one worker still running",
            flow: with_workers(paused, vec![worker(0, Paused, 95), worker(1, Running, 95)]),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("False", "WorkersNotReady"), ("True", "Pausing")),
            summary: "1/2",
            failed: 0,
        },
        Case {
            name: "rolling update",
            flow: with_workers(flow(2), running2()),
            invalid: None,
            sts: Some(rolling),
            draining: None,
            want: want(("False", "RollingUpdate"), ("True", "Replicating")),
            summary: "2/2",
            failed: 0,
        },
        Case {
            name: "draining before a resize",
            flow: with_workers(flow(3), running2()),
            invalid: None,
            sts: Some(sts(0, 0)),
            draining: Some((2, 3)),
            want: want(("False", "Scaling"), ("True", "PartiallyReplicating")),
            summary: "2/3",
            failed: 0,
        },
        Case {
            name: "entries of workers scaled away are ignored",
            flow: with_workers(flow(1), vec![worker(0, Running, 95), worker(1, Failed, 95)]),
            invalid: None,
            sts: Some(sts(1, 1)),
            draining: None,
            want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
            summary: "1/1",
            failed: 0,
        },
    ]
}

#[test]
fn condition_table() {
    for c in cases() {
        let st = fold(&c, t(100));
        let types = [READY, REPLICATING, DATA_LOSS, TOPIC_RESET, INVALID_SPEC];
        // ConnectionFailed and InsecureTls have their own test.
        let got: Vec<(String, String, String)> = st
            .conditions
            .iter()
            .filter(|k| types.contains(&k.type_.as_str()))
            .map(|k| (k.type_.clone(), k.status.clone(), k.reason.clone()))
            .collect();
        // Conditions of trouble appear once they turn True (a first fold: only then).
        let pm = st.conditions.iter().find(|k| k.type_ == PROGRESS_MISSING);
        assert_eq!(pm, None, "{}", c.name);
        let rr = st.conditions.iter().find(|k| k.type_ == RECORD_REJECTED);
        let want_rr =
            (c.name == "RecordRejected on a partition").then_some(("True", "TargetRefusedRecord"));
        assert_eq!(
            rr.map(|k| (k.status.as_str(), k.reason.as_str())),
            want_rr,
            "{}",
            c.name
        );
        let want: Vec<(String, String, String)> = types
            .iter()
            .zip(c.want)
            .enumerate()
            .filter(|(i, (_, (s, _)))| *i < 2 || *s == "True")
            .map(|(_, (ty, (s, r)))| (ty.to_string(), s.to_string(), r.to_string()))
            .collect();
        // kstatus: Stalled while something stops the flow, Reconciling while it gets there,
        // with Ready's reason; neither otherwise.
        let ready = cond(&st, READY);
        let phase = match ready.reason.as_str() {
            "AllWorkersRunning" | "Paused" => None,
            "ResetInProgress" | "Scaling" | "RollingUpdate" | "WorkersStarting"
            | "WorkersNotReady" => Some(RECONCILING),
            _ => Some(STALLED),
        };
        let kstatus: Vec<(&str, &str, &str)> = st
            .conditions
            .iter()
            .filter(|k| k.type_ == RECONCILING || k.type_ == STALLED)
            .map(|k| (k.type_.as_str(), k.status.as_str(), k.reason.as_str()))
            .collect();
        assert_eq!(
            kstatus,
            phase
                .map(|p| vec![(p, "True", ready.reason.as_str())])
                .unwrap_or_default(),
            "{}",
            c.name
        );
        assert_eq!(got, want, "{}", c.name);
        assert_eq!(st.workers_summary.as_deref(), Some(c.summary), "{}", c.name);
        assert_eq!(st.failed_partitions, c.failed, "{}", c.name);
        assert_eq!(st.observed_generation, Some(2), "{}", c.name);
        for k in &st.conditions {
            assert_eq!(k.observed_generation, Some(2), "{}", c.name);
            assert_eq!(
                k.last_transition_time,
                Time(t(100)),
                "{}: first fold sets the time",
                c.name
            );
        }
        assert_eq!(
            st.workers,
            c.flow.status.clone().unwrap_or_default().workers,
            "worker entries untouched"
        );
    }
}

fn ready_message(st: &MirrorFlowStatus) -> &str {
    &st.conditions
        .iter()
        .find(|c| c.type_ == READY)
        .unwrap()
        .message
}

fn cond<'a>(st: &'a MirrorFlowStatus, ty: &str) -> &'a Condition {
    st.conditions.iter().find(|c| c.type_ == ty).unwrap()
}

#[test]
fn messages_name_what_is_wrong() {
    let by_name = |n: &str| cases().into_iter().find(|c| c.name == n).unwrap();
    let st = fold(&by_name("invalid spec"), t(100));
    assert!(
        ready_message(&st).contains("spec.topics.include[0]"),
        "{}",
        ready_message(&st)
    );
    assert!(cond(&st, INVALID_SPEC)
        .message
        .contains("spec.topics.include[0]"));
    let st = fold(&by_name("stale worker heartbeat"), t(100));
    assert!(
        ready_message(&st).contains("orders-worker-1: no heartbeat for more than 30s"),
        "{}",
        ready_message(&st)
    );
    let st = fold(&by_name("one worker failed"), t(100));
    assert!(ready_message(&st).contains("target refuses transactions"));
    let st = fold(&by_name("DataLoss on a partition"), t(100));
    assert!(
        cond(&st, DATA_LOSS).message.contains("orders/3"),
        "{}",
        cond(&st, DATA_LOSS).message
    );
    assert!(cond(&st, DATA_LOSS).message.contains("ResumeFromLogStart"));
    let st = fold(&by_name("reset in progress"), t(100));
    assert_eq!(ready_message(&st), "reset \"r1\": 1/2 workers applied it");
    let st = fold(&by_name("workers starting"), t(100));
    assert!(
        ready_message(&st).contains("orders-worker-1: no status yet"),
        "{}",
        ready_message(&st)
    );
}

#[test]
fn a_rejected_record_is_folded_like_dataloss() {
    let c = cases()
        .into_iter()
        .find(|c| c.name == "RecordRejected on a partition")
        .unwrap();
    let st = fold(&c, t(100));
    let k = cond(&st, RECORD_REJECTED);
    assert!(
        k.message
            .starts_with("1 partition(s) stopped: orders/0 at offset 2;"),
        "names the record: {}",
        k.message
    );
    assert!(
        k.message.contains("SkipRecord") && k.message.contains("RetryRecord"),
        "{}",
        k.message
    );
    assert_eq!(st.failed_partitions, 1);
    assert_eq!(
        st.failures,
        vec![rejected("orders", 0, 2)],
        "with its reason"
    );
    // Like DataLoss: the message changes with the record, so a new rejection is a new event.
    let mut again = c.flow.clone();
    again.status = Some(st.clone());
    again.status.as_mut().unwrap().workers[1].failures = vec![rejected("orders", 0, 9)];
    let c2 = Case { flow: again, ..c };
    let st2 = fold(&c2, t(200));
    assert!(cond(&st2, RECORD_REJECTED)
        .message
        .contains("orders/0 at offset 9"));
    assert_eq!(
        cond(&st2, RECORD_REJECTED).last_transition_time,
        Time(t(100)),
        "still True: the transition time stays"
    );
}

#[test]
fn skipped_records_of_every_worker_are_folded() {
    let mut req_flow = reset_flow("skip");
    req_flow.spec.reset.as_mut().unwrap().strategy = crate::api::ResetStrategy::SkipRecord;
    let req = req_flow.spec.reset.clone().unwrap();
    let skipped = |p: i32, offset: i64| crate::api::SkippedRecord {
        topic: "orders".into(),
        partition: p,
        offset,
    };
    let mut w0 = worker(0, WorkerState::Running, 95);
    let mut a0 = applied("skip", ResetOutcome::Applied, 90, &[("orders", 0)], None);
    a0.skipped_records = vec![skipped(0, 2)];
    w0.last_applied_reset = Some(a0);
    let mut w1 = worker(1, WorkerState::Running, 95);
    let mut a1 = applied("skip", ResetOutcome::Applied, 91, &[("orders", 1)], None);
    a1.skipped_records = vec![skipped(1, 7)];
    w1.last_applied_reset = Some(a1);
    let ws = vec![
        ("w-0".to_string(), Some(&w0)),
        ("w-1".to_string(), Some(&w1)),
    ];
    let ResetProgress::Done(r) = fold_reset(Some(&req), None, &ws) else {
        panic!("both answered")
    };
    assert_eq!(r.outcome, ResetOutcome::Applied);
    assert_eq!(r.skipped_records, vec![skipped(0, 2), skipped(1, 7)]);
}

#[test]
fn reset_outcomes_are_folded() {
    let by_name = |n: &str| cases().into_iter().find(|c| c.name == n).unwrap();
    let st = fold(&by_name("reset in progress"), t(100));
    assert_eq!(
        st.last_applied_reset, None,
        "in progress: the last finished outcome stays"
    );
    let st = fold(&by_name("reset applied by every worker"), t(100));
    assert_eq!(
        st.last_applied_reset,
        Some(applied(
            "r1",
            ResetOutcome::Applied,
            92,
            &[("orders", 0)],
            None
        ))
    );
    let st = fold(&by_name("reset refused"), t(100));
    let r = st.last_applied_reset.unwrap();
    assert_eq!(r.outcome, ResetOutcome::Refused);
    assert_eq!(
        r.message.as_deref(),
        Some("orders-worker-0: orders/3 is not failed")
    );
}

#[test]
fn reset_fold_table() {
    let req: ResetRequest =
        serde_json::from_value(json!({"id": "r2", "strategy": "SkipToLatest"})).unwrap();
    let with = |r: Option<AppliedReset>| {
        let mut w = worker(0, WorkerState::Running, 0);
        w.last_applied_reset = r;
        w
    };
    let a = with(Some(applied(
        "r2",
        ResetOutcome::Applied,
        5,
        &[("t", 1)],
        None,
    )));
    let f = with(Some(applied(
        "r2",
        ResetOutcome::Failed,
        3,
        &[],
        Some("commit failed"),
    )));
    let r = with(Some(applied(
        "r2",
        ResetOutcome::Refused,
        4,
        &[],
        Some("t/9 healthy"),
    )));
    let old = with(Some(applied("r1", ResetOutcome::Applied, 1, &[], None)));
    let n = with(Some(applied(
        "r2",
        ResetOutcome::NotOwned,
        6,
        &[],
        Some("owns none"),
    )));
    let prev_failed = applied("r2", ResetOutcome::Failed, 3, &[], None);
    let prev = applied("r1", ResetOutcome::Applied, 1, &[], None);
    fn ids(ws: Vec<Option<&WorkerStatus>>) -> Vec<(String, Option<&WorkerStatus>)> {
        ws.into_iter()
            .enumerate()
            .map(|(i, w)| (format!("w-{i}"), w))
            .collect()
    }
    let prev_r2 = applied("r2", ResetOutcome::Applied, 5, &[], None);
    let outcome = |p: ResetProgress| match p {
        ResetProgress::Done(r) => format!("Done {:?} {:?}", r.outcome, r.message),
        ResetProgress::InProgress {
            applied, desired, ..
        } => format!("InProgress {applied}/{desired}"),
        ResetProgress::Idle(r) => format!("Idle {:?}", r.map(|r| r.id)),
    };
    type ResetCase<'a> = (
        &'a str,
        Option<&'a ResetRequest>,
        Option<&'a AppliedReset>,
        Vec<Option<&'a WorkerStatus>>,
        &'a str,
    );
    let cases: Vec<ResetCase> = vec![
        (
            "no request",
            None,
            Some(&prev),
            ids_vec(&[Some(&a)]),
            "Idle Some(\"r1\")",
        ),
        (
            "nobody applied yet",
            Some(&req),
            Some(&prev),
            ids_vec(&[Some(&old), None]),
            "InProgress 0/2",
        ),
        (
            "half applied",
            Some(&req),
            None,
            ids_vec(&[Some(&a), Some(&old)]),
            "InProgress 1/2",
        ),
        (
            "all applied",
            Some(&req),
            None,
            ids_vec(&[Some(&a), Some(&a)]),
            "Done Applied None",
        ),
        (
            "applied wins over refused (what applies is applied)",
            Some(&req),
            None,
            ids_vec(&[Some(&a), Some(&r)]),
            "Done Applied Some(\"w-1: t/9 healthy\")",
        ),
        (
            "workers owning nothing do not decide",
            Some(&req),
            None,
            ids_vec(&[Some(&a), Some(&n)]),
            "Done Applied Some(\"w-1: owns none\")",
        ),
        (
            "nobody owns it: refused",
            Some(&req),
            None,
            ids_vec(&[Some(&n), Some(&n)]),
            "Done Refused Some(\"w-0: owns none; w-1: owns none\")",
        ),
        (
            "a failed id is folded again once retried",
            Some(&req),
            Some(&prev_failed),
            ids_vec(&[Some(&a), Some(&n)]),
            "Done Applied Some(\"w-1: owns none\")",
        ),
        (
            "failed wins over refused",
            Some(&req),
            None,
            ids_vec(&[Some(&r), Some(&f)]),
            "Done Failed Some(\"w-1: commit failed; w-0: t/9 healthy\")",
        ),
        (
            "already folded stays done",
            Some(&req),
            Some(&prev_r2),
            ids_vec(&[None]),
            "Idle Some(\"r2\")",
        ),
        ("no workers", Some(&req), None, vec![], "InProgress 0/0"),
    ];
    fn ids_vec<'a>(ws: &[Option<&'a WorkerStatus>]) -> Vec<Option<&'a WorkerStatus>> {
        ws.to_vec()
    }
    for (name, request, previous, ws, want) in cases {
        assert_eq!(
            outcome(fold_reset(request, previous, &ids(ws))),
            want,
            "{name}"
        );
    }
}

#[test]
fn last_transition_time_moves_only_on_status_change() {
    use WorkerState::*;
    let first_case = Case {
        name: "running",
        flow: with_workers(
            flow(2),
            vec![worker(0, Running, 95), worker(1, Running, 95)],
        ),
        invalid: None,
        sts: Some(sts(2, 2)),
        draining: None,
        want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
        summary: "2/2",
        failed: 0,
    };
    let first = fold(&first_case, t(100));

    // Same facts later (fresh heartbeats): identical status, so nothing to write.
    let mut again = first_case.flow.clone();
    again.status = Some(first.clone());
    let mut st = again.status.take().unwrap();
    st.workers = vec![worker(0, Running, 150), worker(1, Running, 150)];
    again.status = Some(st);
    let c2 = Case {
        flow: again.clone(),
        ..first_case
    };
    let second = fold(&c2, t(155));
    assert_eq!(
        second,
        again.status.clone().unwrap(),
        "unchanged facts fold to the stored status"
    );

    // Worker 1 fails: Ready flips (new time), Replicating stays True (old time) but its
    // reason changes.
    let mut failed = again.clone();
    let mut st = failed.status.take().unwrap();
    st.workers[1].state = Failed;
    failed.status = Some(st);
    let c3 = Case { flow: failed, ..c2 };
    let third = fold(&c3, t(160));
    assert_eq!(cond(&third, READY).status, "False");
    assert_eq!(cond(&third, READY).last_transition_time, Time(t(160)));
    assert_eq!(cond(&third, REPLICATING).reason, "PartiallyReplicating");
    assert_eq!(cond(&third, REPLICATING).last_transition_time, Time(t(100)));
    assert_eq!(cond(&third, STALLED).last_transition_time, Time(t(160)));

    // A DataLoss appears, then is reset: the condition stays, False, and Stalled goes.
    let mut lost = again.clone();
    let mut st = lost.status.take().unwrap();
    st.workers[1].state = Degraded;
    st.workers[1].failures = vec![failure(FailureType::DataLoss, "orders", 0)];
    lost.status = Some(st);
    let fourth = fold(
        &Case {
            flow: lost.clone(),
            ..c3
        },
        t(170),
    );
    assert_eq!(cond(&fourth, DATA_LOSS).status, "True");
    assert_eq!(cond(&fourth, STALLED).reason, "PartitionsFailed");
    let mut cleared = lost;
    let mut st = fourth.clone();
    st.workers = vec![worker(0, Running, 175), worker(1, Running, 175)];
    cleared.status = Some(st);
    let fifth = fold(
        &Case {
            flow: cleared,
            ..first_case_again()
        },
        t(180),
    );
    assert_eq!(cond(&fifth, DATA_LOSS).status, "False");
    assert_eq!(cond(&fifth, DATA_LOSS).last_transition_time, Time(t(180)));
    assert!(fifth
        .conditions
        .iter()
        .all(|c| c.type_ != STALLED && c.type_ != RECONCILING));
    assert!(
        fifth.conditions.iter().all(|c| c.type_ != TOPIC_RESET),
        "never True, never shown"
    );
}

fn first_case_again() -> Case {
    Case {
        name: "running",
        flow: with_workers(flow(2), vec![]),
        invalid: None,
        sts: Some(sts(2, 2)),
        draining: None,
        want: want(("True", "AllWorkersRunning"), ("True", "Replicating")),
        summary: "2/2",
        failed: 0,
    }
}

#[test]
fn sub_second_now_is_stored_in_seconds() {
    let c = cases().into_iter().next().unwrap();
    let st = fold(&c, t(100) + SignedDuration::from_millis(750));
    assert_eq!(cond(&st, READY).last_transition_time, Time(t(100)));
}

#[test]
fn failures_are_bounded_and_counted() {
    let mut w = worker(0, WorkerState::Degraded, 95);
    w.failures = (0..150)
        .map(|p| failure(FailureType::DataLoss, "big", p))
        .collect();
    let mut w1 = worker(1, WorkerState::Degraded, 95);
    // The same partition reported twice (e.g. by a worker's previous incarnation) counts once.
    w1.failures = vec![
        failure(FailureType::TopicReset, "other", 0),
        failure(FailureType::TopicReset, "other", 0),
    ];
    let c = Case {
        name: "many failures",
        flow: with_workers(flow(2), vec![w, w1]),
        invalid: None,
        sts: Some(sts(2, 2)),
        draining: None,
        want: want(("", ""), ("", "")),
        summary: "2/2",
        failed: 151,
    };
    let st = fold(&c, t(100));
    assert_eq!(st.failed_partitions, 151);
    assert_eq!(st.failures.len(), MAX_FAILURES);
    assert!(
        cond(&st, DATA_LOSS).message.starts_with(
            "150 partition(s) stopped: big/0, big/1, big/2, big/3, big/4 and 145 more"
        ),
        "{}",
        cond(&st, DATA_LOSS).message
    );
    assert_eq!(cond(&st, TOPIC_RESET).status, "True");
}

#[test]
fn replication_lag_is_summed() {
    let mut a = worker(0, WorkerState::Running, 95);
    a.replication_lag = Some(ReplicationLag {
        records: 10,
        seconds: 3,
    });
    let mut b = worker(1, WorkerState::Running, 95);
    b.replication_lag = Some(ReplicationLag {
        records: 5,
        seconds: 9,
    });
    let c = Case {
        name: "lag",
        flow: with_workers(flow(2), vec![a, b]),
        invalid: None,
        sts: Some(sts(2, 2)),
        draining: None,
        want: want(("", ""), ("", "")),
        summary: "2/2",
        failed: 0,
    };
    assert_eq!(
        fold(&c, t(100)).replication_lag,
        Some(ReplicationLag {
            records: 15,
            seconds: 9
        })
    );
    let c = Case {
        flow: with_workers(flow(2), vec![worker(0, WorkerState::Running, 95)]),
        ..c
    };
    assert_eq!(fold(&c, t(100)).replication_lag, None);
}

#[test]
fn replication_latency_is_the_worst_reported() {
    let lat = |last: Option<i64>, p99: Option<i64>| ReplicationLatency {
        last_millis: last,
        p99_millis: p99,
        ..Default::default()
    };
    let cases = [
        ("nobody measures", vec![None, None], None),
        (
            "worker 0 measures",
            vec![Some(lat(Some(250), Some(900))), None],
            Some(lat(Some(250), Some(900))),
        ),
        (
            "the higher latest value wins",
            vec![Some(lat(Some(250), None)), Some(lat(Some(4_000), None))],
            Some(lat(Some(4_000), None)),
        ),
        (
            "a measurement wins over an entry with only an error",
            vec![
                Some(ReplicationLatency {
                    last_error: Some("no WRITE on heartbeats".into()),
                    ..Default::default()
                }),
                Some(lat(Some(10), None)),
            ],
            Some(lat(Some(10), None)),
        ),
    ];
    for (name, per_worker, expected) in cases {
        let entries: Vec<WorkerStatus> = per_worker
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let mut w = worker(i as i32, WorkerState::Running, 95);
                w.replication_latency = l;
                w
            })
            .collect();
        assert_eq!(fold_latency(entries.iter()), expected, "{name}");
        let c = Case {
            name: "latency",
            flow: with_workers(flow(2), entries),
            invalid: None,
            sts: Some(sts(2, 2)),
            draining: None,
            want: want(("", ""), ("", "")),
            summary: "2/2",
            failed: 0,
        };
        assert_eq!(
            fold(&c, t(100)).replication_latency,
            expected,
            "{name}: folded"
        );
    }
    // Latency changes on every report: never a reason to reconcile.
    let mut w = worker(0, WorkerState::Running, 95);
    w.replication_latency = Some(lat(Some(1), Some(2)));
    assert_eq!(material(&w), material(&worker(0, WorkerState::Running, 95)));
}

#[test]
fn rollout_detection() {
    let ok = sts(2, 2);
    assert!(!ok.rollout_in_progress());
    let cases: Vec<(&str, StatefulSetView)> = vec![
        (
            "generation not observed",
            StatefulSetView {
                generation: Some(2),
                ..ok.clone()
            },
        ),
        (
            "pods not updated",
            StatefulSetView {
                updated_replicas: 1,
                ..ok.clone()
            },
        ),
        (
            "revisions differ",
            StatefulSetView {
                update_revision: Some("r2".into()),
                ..ok.clone()
            },
        ),
    ];
    for (name, v) in cases {
        assert!(v.rollout_in_progress(), "{name}");
    }
    assert!(!StatefulSetView {
        replicas: 0,
        updated_replicas: 0,
        update_revision: Some("r2".into()),
        ..ok
    }
    .rollout_in_progress());
    let created = StatefulSetView {
        replicas: 2,
        generation: Some(1),
        ..Default::default()
    };
    assert!(
        !created.rollout_in_progress(),
        "a new StatefulSet is starting, not rolling"
    );
}

// ---- OffsetCheckpoint ----

fn cp() -> OffsetCheckpoint {
    let spec = serde_json::from_value(json!({"flowRef": {"name": "orders"}, "intervalSeconds": 5}))
        .unwrap();
    let mut c = OffsetCheckpoint::new("groups", spec);
    c.metadata.namespace = Some("kafka".into());
    c.metadata.generation = Some(1);
    c
}

fn group(name: &str, last: Option<i64>) -> GroupSummary {
    GroupSummary {
        group: name.into(),
        partitions: 3,
        last_checkpoint_time: last.map(|s| Time(t(s))),
        synced: true,
        target_lag: Some(0),
    }
}

pub(crate) fn fold_cp(
    flow: FlowRefState,
    invalid: Option<&ValidationErrors>,
    reports: Option<&CheckpointReports>,
) -> OffsetCheckpointStatus {
    fold_checkpoint_status(&CheckpointObservation {
        checkpoint: &cp(),
        flow,
        invalid,
        reports,
        now: t(100),
    })
}

/// Ready and Stale; the kstatus conditions are checked against Ready on the way.
fn cp_conds(st: &OffsetCheckpointStatus) -> Vec<(String, String, String)> {
    let ready = st.conditions.iter().find(|c| c.type_ == READY).unwrap();
    let phase = match (ready.status.as_str(), ready.reason.as_str()) {
        ("True", _) => None,
        (_, "AwaitingCheckpoints") => Some(RECONCILING),
        _ => Some(STALLED),
    };
    let kstatus: Vec<(&str, &str, &str)> = st
        .conditions
        .iter()
        .filter(|c| c.type_ == RECONCILING || c.type_ == STALLED)
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        kstatus,
        phase
            .map(|p| vec![(p, "True", ready.reason.as_str())])
            .unwrap_or_default()
    );
    st.conditions
        .iter()
        .filter(|c| c.type_ != RECONCILING && c.type_ != STALLED)
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn triple(ready: (&str, &str), stale: (&str, &str)) -> Vec<(String, String, String)> {
    vec![
        ("Ready".into(), ready.0.into(), ready.1.into()),
        ("Stale".into(), stale.0.into(), stale.1.into()),
    ]
}

#[test]
fn checkpoint_condition_table() {
    let found = FlowRefState::Found { invalid: false };
    let invalid = ValidationErrors(vec![FieldError {
        field: "spec.groups.include[0]".into(),
        value: "[".into(),
        message: "bad".into(),
    }]);
    let fresh = CheckpointReports {
        groups: vec![group("g1", Some(95)), group("g2", Some(90))],
        ..Default::default()
    };
    let stale = CheckpointReports {
        groups: vec![group("g1", Some(95)), group("old", Some(84))],
        ..Default::default()
    };
    let at_bound = CheckpointReports {
        groups: vec![group("g1", Some(85))],
        ..Default::default()
    };
    let none = CheckpointReports::default();
    let failing = |groups: &CheckpointReports| CheckpointReports {
        error: Some("target cluster dc2: list consumer groups: timed out".into()),
        ..groups.clone()
    };
    let (starting_fails, fresh_fails, stale_fails) =
        (failing(&none), failing(&fresh), failing(&stale));
    type CpCase<'a> = (
        &'a str,
        FlowRefState,
        Option<&'a ValidationErrors>,
        Option<&'a CheckpointReports>,
        Vec<(String, String, String)>,
    );
    let cases: Vec<CpCase> = vec![
        (
            "invalid spec",
            found,
            Some(&invalid),
            Some(&fresh),
            triple(("False", "InvalidSpec"), ("Unknown", "InvalidSpec")),
        ),
        (
            "flow not found",
            FlowRefState::NotFound,
            None,
            None,
            triple(("False", "FlowNotFound"), ("Unknown", "FlowNotFound")),
        ),
        (
            "flow invalid",
            FlowRefState::Found { invalid: true },
            None,
            None,
            triple(("False", "FlowInvalid"), ("Unknown", "FlowInvalid")),
        ),
        (
            "no reports yet",
            found,
            None,
            None,
            triple(
                ("False", "AwaitingCheckpoints"),
                ("Unknown", "AwaitingCheckpoints"),
            ),
        ),
        (
            "fresh",
            found,
            None,
            Some(&fresh),
            triple(("True", "Checkpointing"), ("False", "Fresh")),
        ),
        (
            "at the 3-interval bound",
            found,
            None,
            Some(&at_bound),
            triple(("True", "Checkpointing"), ("False", "Fresh")),
        ),
        (
            "one group stale",
            found,
            None,
            Some(&stale),
            triple(("False", "CheckpointsStale"), ("True", "CheckpointsStale")),
        ),
        (
            "no group matches",
            found,
            None,
            Some(&none),
            triple(("True", "NoGroupsMatched"), ("False", "Fresh")),
        ),
        (
            "the runner fails before any checkpoint",
            found,
            None,
            Some(&starting_fails),
            triple(
                ("False", "CheckpointFailed"),
                ("Unknown", "CheckpointFailed"),
            ),
        ),
        (
            "the runner fails, groups still fresh",
            found,
            None,
            Some(&fresh_fails),
            triple(("False", "CheckpointFailed"), ("False", "Fresh")),
        ),
        (
            "the runner fails, a group stale",
            found,
            None,
            Some(&stale_fails),
            triple(("False", "CheckpointFailed"), ("True", "CheckpointsStale")),
        ),
    ];
    for (name, flow, inv, reports, want) in cases {
        let st = fold_cp(flow, inv, reports);
        assert_eq!(cp_conds(&st), want, "{name}");
        if let Some(error) = reports.and_then(|r| r.error.as_ref()) {
            let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
            assert_eq!(&ready.message, error, "{name}: Ready says why");
        }
        assert_eq!(st.observed_generation, Some(1), "{name}");
    }
}

#[test]
fn checkpoint_summaries() {
    let mut groups: Vec<GroupSummary> = (0..60)
        .map(|i| group(&format!("g{i:02}"), Some(40 + i)))
        .collect();
    groups.push(group("never", None));
    let failures = vec![GroupFailure {
        group: "active".into(),
        reason: GroupFailureReason::ActiveOnTarget,
        message: "3 members".into(),
        since: Time(t(0)),
    }];
    let reports = CheckpointReports {
        groups,
        failures,
        error: None,
    };
    let st = fold_cp(FlowRefState::Found { invalid: false }, None, Some(&reports));
    assert_eq!(st.groups_checkpointed, 60);
    assert_eq!(st.last_checkpoint_time, Some(Time(t(99))));
    assert_eq!(st.oldest_checkpoint_age_seconds, Some(60));
    assert_eq!(st.groups.len(), MAX_GROUPS);
    assert_eq!(
        st.groups[0].group, "never",
        "never-checkpointed groups first"
    );
    assert_eq!(st.groups[1].group, "g00", "then the stalest");
    assert_eq!(st.failures.len(), 1);
    let stale = st.conditions.iter().find(|c| c.type_ == STALE).unwrap();
    assert!(
        stale.message.contains("g00") && stale.message.contains("(15s)"),
        "{}",
        stale.message
    );
}

#[test]
fn checkpoint_flow_not_found_names_the_ref() {
    let st = fold_cp(FlowRefState::NotFound, None, None);
    assert_eq!(
        st.conditions[0].message,
        "MirrorFlow \"orders\" (spec.flowRef.name) not found in namespace \"kafka\""
    );
}

fn problem(reason: ConnectionProblemReason, msg: &str, since: i64) -> ConnectionProblem {
    ConnectionProblem {
        cluster: ClusterRole::Target,
        alias: "dc2".into(),
        reason,
        message: msg.into(),
        since: Time(t(since)),
    }
}

#[test]
fn connection_problems_and_insecure_tls() {
    use ConnectionProblemReason::*;
    let auth = "target cluster dc2: authentication failed: SASL authentication error";
    let tls = "target cluster dc2: TLS verification failed: certificate has expired";
    let cond = |st: &MirrorFlowStatus, ty: &str| {
        let c = st
            .conditions
            .iter()
            .find(|c| c.type_ == ty)
            .unwrap_or_else(|| panic!("no {ty} condition"));
        (c.status.clone(), c.reason.clone(), c.message.clone())
    };
    let has = |st: &MirrorFlowStatus, ty: &str| st.conditions.iter().any(|c| c.type_ == ty);
    let mut w0 = worker(0, WorkerState::Starting, 95);
    w0.connection_problems = vec![problem(AuthenticationFailed, auth, 90)];
    let mut w1 = worker(1, WorkerState::Running, 95);
    w1.connection_problems = vec![problem(TlsVerificationFailed, tls, 91)];
    let c = Case {
        name: "auth and tls",
        flow: with_workers(flow(2), vec![w0.clone(), w1]),
        invalid: None,
        sts: Some(sts(2, 1)),
        draining: None,
        want: want(("False", "x"), ("False", "x")),
        summary: "",
        failed: 0,
    };
    let st = fold(&c, t(100));
    let (s, r, m) = cond(&st, CONNECTION_FAILED);
    assert_eq!((s.as_str(), r.as_str()), ("True", "AuthenticationFailed"));
    assert!(m.contains(&format!("orders-worker-0: {auth}")), "{m}");
    assert!(m.contains(&format!("orders-worker-1: {tls}")), "{m}");
    let (s, r, m2) = cond(&st, READY);
    assert_eq!(
        (s.as_str(), r.as_str(), m2.as_str()),
        ("False", "AuthenticationFailed", m.as_str())
    );
    assert!(
        !has(&st, INSECURE_TLS),
        "absent until a cluster skips verification"
    );

    // A fixed problem leaves the condition False; a stale entry's problem does not count.
    let fixed = Case {
        flow: {
            let mut f = with_workers(flow(2), vec![worker(0, WorkerState::Running, 95)]);
            f.status.as_mut().unwrap().conditions = st.conditions.clone();
            f
        },
        sts: Some(sts(2, 2)),
        ..c
    };
    let after = fold(&fixed, t(100));
    assert_eq!(cond(&after, CONNECTION_FAILED).1, "Connected");
    let mut stale = w0.clone();
    stale.last_heartbeat_time = Some(Time(t(0)));
    let c = Case {
        flow: with_workers(flow(1), vec![stale]),
        sts: Some(sts(1, 0)),
        ..fixed
    };
    let st = fold(&c, t(100));
    assert!(!has(&st, CONNECTION_FAILED), "stale entries do not count");

    // insecureSkipVerify: a warning condition; Ready stays as the workers say.
    let mut f = with_workers(flow(1), vec![worker(0, WorkerState::Running, 95)]);
    f.spec.target.tls = Some(TlsSpec {
        insecure_skip_verify: true,
        ..TlsSpec::default()
    });
    let c = Case {
        flow: f,
        sts: Some(sts(1, 1)),
        ..c
    };
    let st = fold(&c, t(100));
    let (s, r, m) = cond(&st, INSECURE_TLS);
    assert_eq!((s.as_str(), r.as_str()), ("True", "InsecureSkipVerify"));
    assert!(
        m.contains("spec.target.tls.insecureSkipVerify (cluster dc2)"),
        "{m}"
    );
    assert_eq!(cond(&st, READY).0, "True");
}

#[test]
fn retired_workers_table() {
    let rows: &[(&[&str], u32, &[u32])] = &[
        (&[], 1, &[]),
        (&["f-worker-0"], 1, &[]),
        (&["f-worker-0", "f-worker-1", "f-worker-2"], 1, &[1, 2]),
        (&["f-worker-2", "f-worker-0", "f-worker-2"], 2, &[2]),
        // Another flow's entries and ids that are no worker's are not ours to fence.
        (
            &["g-worker-3", "f-worker-x", "f-worker-", "f-worker-1-2"],
            1,
            &[],
        ),
        (&["ff-worker-4", "f-worker-10"], 3, &[10]),
    ];
    for (ids, count, want) in rows {
        assert_eq!(
            retired_workers("f", ids.iter().copied(), *count),
            *want,
            "{ids:?} with {count} workers"
        );
    }
}

#[test]
fn unwritable_topics_condition() {
    let cond = |st: &MirrorFlowStatus| {
        st.conditions
            .iter()
            .find(|c| c.type_ == TOPIC_UNWRITABLE)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let why = "topic dc1.orders has replication factor 1 but min.insync.replicas=2: ...";
    let mut w0 = worker(0, WorkerState::Degraded, 95);
    w0.unwritable_topics = vec![why.into()];
    let c = Case {
        name: "unwritable",
        flow: with_workers(flow(1), vec![w0.clone()]),
        invalid: None,
        sts: Some(sts(1, 1)),
        draining: None,
        want: want(("False", "x"), ("False", "x")),
        summary: "",
        failed: 0,
    };
    let st = fold(&c, t(100));
    let (s, r, m) = cond(&st).expect("condition");
    assert_eq!((s.as_str(), r.as_str()), ("True", "TargetTopicsUnwritable"));
    assert!(m.contains(why), "{m}");
    // Fixed: False once it was shown; never shown on a flow that never had it.
    let fixed = Case {
        flow: {
            let mut f = with_workers(flow(1), vec![worker(0, WorkerState::Running, 95)]);
            f.status.as_mut().unwrap().conditions = st.conditions.clone();
            f
        },
        ..c
    };
    let after = fold(&fixed, t(100));
    assert_eq!(cond(&after).map(|c| c.1).as_deref(), Some("TopicsWritable"));
    let never = Case {
        flow: with_workers(flow(1), vec![worker(0, WorkerState::Running, 95)]),
        ..fixed
    };
    assert_eq!(cond(&fold(&never, t(100))), None);
    // A stale entry's report does not count.
    let mut stale = w0;
    stale.last_heartbeat_time = Some(Time(t(0)));
    let c = Case {
        flow: with_workers(flow(1), vec![stale]),
        ..never
    };
    assert_eq!(cond(&fold(&c, t(100))), None);
}

#[test]
fn a_done_failover_is_ready_false_failed_over_and_its_report_is_copied() {
    use crate::api::{FailoverGroup, FailoverMode, FailoverPhase, FailoverReport, FailoverRequest};
    let report = |id: &str, phase: FailoverPhase| FailoverReport {
        not_replicated: Some(0),
        groups: vec![
            FailoverGroup {
                group: "billing".into(),
                committed: vec!["dc1.orders/0@7".into()],
                records_read_again: Some(0),
                skipped: None,
            },
            FailoverGroup {
                group: "live".into(),
                committed: vec![],
                records_read_again: None,
                skipped: Some("1 active member(s) on the target".into()),
            },
        ],
        ..FailoverReport::new(id, FailoverMode::Planned, phase)
    };
    let observe = |requested: Option<&str>, phase: FailoverPhase, state: WorkerState| {
        let mut f = flow(2);
        f.spec.failover = requested.map(|id| FailoverRequest {
            id: id.into(),
            mode: FailoverMode::Planned,
            drain_timeout_seconds: 300,
        });
        let mut w0 = worker(0, state, 95);
        w0.failover = Some(report("move-1", phase));
        let f = with_workers(f, vec![w0, worker(1, state, 95)]);
        fold_flow_status(&FlowObservation {
            flow: &f,
            invalid: None,
            statefulset: Some(&sts(2, 2)),
            draining: None,
            children: None,
            now: t(100),
            stale_after: STALE_AFTER,
        })
    };
    // Done: Ready False, reason FailedOver, naming what was committed and what was not.
    let st = observe(Some("move-1"), FailoverPhase::Done, WorkerState::Paused);
    let ready = cond(&st, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "FailedOver")
    );
    assert_eq!(
        ready.message,
        "failover \"move-1\" (Planned) done: replication stopped, 1 group(s) at their translated \
         offsets on the target, not touched: live; see status.failover (remove spec.failover to replicate again)"
    );
    assert!(
        st.conditions.iter().all(|c| c.type_ != "Stalled"),
        "not an error"
    );
    assert_eq!(st.failover, Some(report("move-1", FailoverPhase::Done)));
    // Draining: reported, Ready as the workers say.
    let st = observe(
        Some("move-1"),
        FailoverPhase::Draining,
        WorkerState::Running,
    );
    assert_eq!(cond(&st, READY).status, "True");
    assert_eq!(st.failover.map(|f| f.phase), Some(FailoverPhase::Draining));
    // A report of another id (or none asked for) is not shown.
    let st = observe(Some("move-2"), FailoverPhase::Done, WorkerState::Running);
    assert_eq!(
        (cond(&st, READY).status.as_str(), st.failover.clone()),
        ("True", None)
    );
    let st = observe(None, FailoverPhase::Done, WorkerState::Running);
    assert_eq!(
        (cond(&st, READY).status.as_str(), st.failover.clone()),
        ("True", None)
    );
}
