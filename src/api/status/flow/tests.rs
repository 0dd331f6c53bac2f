//! One table per decision of the flow fold: each condition's verdict and the worker roll-up
//! they are decided from. The whole fold is tested in `status/tests.rs`.

use super::*;
use crate::api::{ClusterRole, FieldError, ResetOutcome, TopicAclSync};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use serde_json::json;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

fn entry(i: u32, state: WorkerState) -> WorkerStatus {
    WorkerStatus {
        id: worker_id("orders", i),
        partitions: 1,
        state,
        last_heartbeat_time: Some(Time(t(0))),
        message: None,
        observed_generation: Some(1),
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

fn failure(type_: FailureType, topic: &str, partition: i32, offset: i64) -> PartitionFailure {
    PartitionFailure {
        type_,
        topic: topic.into(),
        partition,
        requested_offset: offset,
        log_start_offset: None,
        records_lost: None,
        detected_at: Time(t(0)),
        reason: None,
        message: None,
    }
}

fn problem(reason: ConnectionProblemReason, message: &str) -> ConnectionProblem {
    ConnectionProblem {
        cluster: ClusterRole::Target,
        alias: "dc2".into(),
        reason,
        message: message.into(),
        since: Time(t(0)),
    }
}

fn ids<'a>(entries: &[Option<&'a WorkerStatus>]) -> Vec<(String, Option<&'a WorkerStatus>)> {
    (0u32..)
        .zip(entries)
        .map(|(i, e)| (worker_id("orders", i), *e))
        .collect()
}

fn rollup(desired: i32, up: usize) -> WorkerRollup {
    WorkerRollup {
        desired,
        up,
        replicating: up,
        paused: false,
        failed: vec![],
        degraded: vec![],
        not_ready: vec![],
        only_starting: true,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn failure_verdict_table() {
    let dl = |topic: &str, p: i32| failure(FailureType::DataLoss, topic, p, 10);
    let rr = |topic: &str, p: i32, o: i64| failure(FailureType::RecordRejected, topic, p, o);
    let six: Vec<PartitionFailure> = (0..6).map(|p| dl("a", p)).collect();
    let cases: Vec<(&str, Vec<PartitionFailure>, FailureType, Verdict)> = vec![
        (
            "no failure",
            vec![],
            FailureType::DataLoss,
            Verdict::no("NoDataLoss", ""),
        ),
        (
            "another type's failure",
            vec![dl("a", 0)],
            FailureType::TopicReset,
            Verdict::no("NoTopicReset", ""),
        ),
        (
            "data loss names the partition and the reset",
            vec![dl("a", 0), rr("b", 1, 7)],
            FailureType::DataLoss,
            Verdict::yes(
                "RecordsDeleted",
                "1 partition(s) stopped: a/0; records were deleted on the source before they \
                 were replicated; patch spec.reset (strategy ResumeFromLogStart) to accept the gap",
            ),
        ),
        (
            "a rejected record names its offset",
            vec![dl("a", 0), rr("b", 1, 7)],
            FailureType::RecordRejected,
            Verdict::yes(
                "TargetRefusedRecord",
                "1 partition(s) stopped: b/1 at offset 7; the target refused a record for good \
                 (too large, invalid, policy); fix the target topic and patch spec.reset \
                 (strategy RetryRecord), or skip exactly that record (strategy SkipRecord)",
            ),
        ),
        (
            "a topic recreated",
            vec![failure(FailureType::TopicReset, "c", 2, 0)],
            FailureType::TopicReset,
            Verdict::yes(
                "TopicRecreated",
                "1 partition(s) stopped: c/2; the source topic was deleted and recreated; patch \
                 spec.reset (strategy RestartFromEarliest or SkipToLatest) to resume",
            ),
        ),
        (
            "no progress recorded",
            vec![failure(FailureType::ProgressMissing, "d", 0, 0)],
            FailureType::ProgressMissing,
            Verdict::yes(
                "TargetHoldsRecords",
                "1 partition(s) stopped: d/0; no progress is recorded but the target topic \
                 already holds records; patch spec.reset (strategy ResumeFromTarget, \
                 RestartFromEarliest or SkipToLatest) to choose where to resume",
            ),
        ),
        (
            "many partitions: the first five and how many more",
            six,
            FailureType::DataLoss,
            Verdict::yes(
                "RecordsDeleted",
                "6 partition(s) stopped: a/0, a/1, a/2, a/3, a/4 and 1 more; records were \
                 deleted on the source before they were replicated; patch spec.reset (strategy \
                 ResumeFromLogStart) to accept the gap",
            ),
        ),
    ];
    for (name, failures, type_, want) in cases {
        assert_eq!(failure_verdict(&failures, type_), want, "{name}");
    }
    let conditions: Vec<&str> = FAILURE_TYPES
        .iter()
        .map(|t| failure_texts(*t).condition)
        .collect();
    assert_eq!(
        conditions,
        [DATA_LOSS, TOPIC_RESET, PROGRESS_MISSING, RECORD_REJECTED]
    );
}

#[test]
fn desired_workers_are_the_spec_replicas_by_id() {
    let mut flow = MirrorFlow::new(
        "orders",
        serde_json::from_value(json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
            "workers": {"replicas": 3}
        }))
        .unwrap(),
    );
    // Worker 1 never reported; worker 5 was scaled away.
    let entries = vec![
        entry(5, WorkerState::Running),
        entry(2, WorkerState::Failed),
        entry(0, WorkerState::Running),
    ];
    let got: Vec<(String, Option<WorkerState>)> = desired_workers(&flow, &entries)
        .into_iter()
        .map(|(id, e)| (id, e.map(|e| e.state)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("orders-worker-0".into(), Some(WorkerState::Running)),
            ("orders-worker-1".into(), None),
            ("orders-worker-2".into(), Some(WorkerState::Failed)),
        ]
    );
    flow.spec.workers.replicas = -1;
    assert_eq!(desired_workers(&flow, &entries), vec![]);
}

#[test]
fn fresh_entries_leave_out_stale_and_missing_workers() {
    let (a, b) = (
        entry(0, WorkerState::Running),
        entry(1, WorkerState::Failed),
    );
    let workers = ids(&[Some(&a), Some(&b), None]);
    let cases = [
        (
            [
                WorkerHealth::Fresh(WorkerState::Running),
                WorkerHealth::Fresh(WorkerState::Failed),
                WorkerHealth::Missing,
            ],
            vec!["orders-worker-0", "orders-worker-1"],
        ),
        (
            [
                WorkerHealth::Stale,
                WorkerHealth::Fresh(WorkerState::Failed),
                WorkerHealth::Missing,
            ],
            vec!["orders-worker-1"],
        ),
    ];
    for (health, want) in cases {
        let got: Vec<&str> = fresh_entries(&workers, &health)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(got, want, "{health:?}");
    }
}

#[test]
fn failures_are_one_per_partition_and_completed_from_the_status() {
    let mut a = entry(0, WorkerState::Degraded);
    let mut b = entry(1, WorkerState::Degraded);
    let detected = failure(FailureType::DataLoss, "t", 0, 10);
    a.failures = vec![
        failure(FailureType::TopicReset, "u", 1, 0),
        detected.clone(),
    ];
    // The same partition seen by another worker (after a rebalance) counts once: the first.
    b.failures = vec![failure(FailureType::RecordRejected, "t", 0, 99)];
    let known = PartitionFailure {
        message: Some("40 records deleted".into()),
        records_lost: Some(40),
        ..detected.clone()
    };

    let got = fold_failures(&ids(&[Some(&a), Some(&b)]), std::slice::from_ref(&known));
    assert_eq!(
        got,
        (
            vec![known.clone(), failure(FailureType::TopicReset, "u", 1, 0)],
            2
        ),
        "sorted by partition, explanation filled in"
    );
    assert_eq!(fold_failures(&ids(&[None, None]), &[]), (vec![], 0));

    // A partition an entry names is the failure the status explains; one the status no
    // longer holds (beyond its bound) still counts as stopped.
    let mut c = entry(0, WorkerState::Degraded);
    c.stopped_partitions = strings(&["t/0", "v/3", "no-partition", "w/x"]);
    assert_eq!(
        fold_failures(&ids(&[Some(&c)]), std::slice::from_ref(&known)),
        (vec![known], 2)
    );
}

#[test]
fn partition_refs_round_trip() {
    assert_eq!(partition_ref("orders.eu", 12), "orders.eu/12");
    let rows = [
        ("orders.eu/12", Some(("orders.eu", 12))),
        ("a/b/3", Some(("a/b", 3))),
        ("/3", None),
        ("orders", None),
        ("orders/x", None),
    ];
    for (r, want) in rows {
        assert_eq!(
            parse_partition_ref(r),
            want.map(|(t, p)| (t.to_string(), p)),
            "{r}"
        );
    }
}

#[test]
fn lag_sums_records_and_takes_the_worst_seconds() {
    let lag = |records, seconds| ReplicationLag { records, seconds };
    let mut a = entry(0, WorkerState::Running);
    let mut b = entry(1, WorkerState::Running);
    let c = entry(2, WorkerState::Running);
    assert_eq!(sum_lag(&ids(&[Some(&a), Some(&b), Some(&c)])), None);
    a.replication_lag = Some(lag(100, 3));
    b.replication_lag = Some(lag(5, 9));
    assert_eq!(
        sum_lag(&ids(&[Some(&a), Some(&b), Some(&c), None])),
        Some(lag(105, 9))
    );
}

#[test]
fn last_applied_reset_table() {
    let reset = |id: &str| AppliedReset {
        id: id.into(),
        time: Time(t(0)),
        outcome: ResetOutcome::Applied,
        message: None,
        partitions: vec![],
        skipped_records: vec![],
    };
    let (old, new) = (reset("r1"), reset("r2"));
    let in_progress = ResetProgress::InProgress {
        id: "r2".into(),
        applied: 1,
        desired: 2,
    };
    let cases = [
        (ResetProgress::Idle(None), Some(&old), None),
        (ResetProgress::Idle(Some(old.clone())), None, Some(&old)),
        (in_progress, Some(&old), Some(&old)),
        (ResetProgress::Done(new.clone()), Some(&old), Some(&new)),
    ];
    for (progress, previous, want) in cases {
        assert_eq!(
            last_applied_reset(&progress, previous),
            want.cloned(),
            "{progress:?}"
        );
    }
}

#[test]
fn roll_up_workers_table() {
    use WorkerHealth::{Fresh, Missing, Stale};
    use WorkerState::*;
    let stale_after = SignedDuration::from_secs(30);
    let mut failed = entry(1, Failed);
    failed.message = Some("target refuses transactions".into());
    let workers = ids(&[None, Some(&failed), None]);
    struct Case {
        name: &'static str,
        health: [WorkerHealth; 3],
        paused: bool,
        want: WorkerRollup,
    }
    let cases = [
        Case {
            name: "all running",
            health: [Fresh(Running); 3],
            paused: false,
            want: rollup(3, 3),
        },
        Case {
            name: "missing and starting workers are only starting",
            health: [Missing, Fresh(Starting), Fresh(Running)],
            paused: false,
            want: WorkerRollup {
                up: 1,
                replicating: 1,
                not_ready: strings(&[
                    "orders-worker-0: no status yet",
                    "orders-worker-1: Starting",
                ]),
                ..rollup(3, 0)
            },
        },
        Case {
            name: "a stale worker is not ready and not just starting; a degraded one replicates",
            health: [Stale, Fresh(Degraded), Fresh(Running)],
            paused: false,
            want: WorkerRollup {
                up: 2,
                replicating: 2,
                degraded: strings(&["orders-worker-1: target refuses transactions"]),
                not_ready: strings(&["orders-worker-0: no heartbeat for more than 30s"]),
                only_starting: false,
                ..rollup(3, 0)
            },
        },
        Case {
            name: "a failed worker is named with its message",
            health: [Fresh(Running), Fresh(Failed), Fresh(Running)],
            paused: false,
            want: WorkerRollup {
                up: 2,
                replicating: 2,
                failed: strings(&["orders-worker-1: target refuses transactions"]),
                not_ready: strings(&["orders-worker-1: Failed"]),
                only_starting: false,
                ..rollup(3, 0)
            },
        },
        Case {
            name: "paused: paused workers are ready, running ones still replicate",
            health: [Fresh(Paused), Fresh(Running), Fresh(Paused)],
            paused: true,
            want: WorkerRollup {
                up: 2,
                replicating: 1,
                paused: true,
                not_ready: strings(&["orders-worker-1: Running"]),
                only_starting: false,
                ..rollup(3, 0)
            },
        },
    ];
    for c in cases {
        assert_eq!(
            roll_up_workers(&workers, &c.health, c.paused, stale_after),
            c.want,
            "{}",
            c.name
        );
    }
    let none = roll_up_workers(&[], &[], false, stale_after);
    assert_eq!(none, rollup(0, 0), "no worker desired");
    assert_eq!(rollup(3, 2).summary(), "2/3");
    assert_eq!(rollup(3, 2).phrase(), "2/3 workers replicating");
    let paused = WorkerRollup {
        paused: true,
        ..rollup(3, 2)
    };
    assert_eq!(paused.phrase(), "2/3 workers paused");
}

#[test]
fn connection_trouble_table() {
    use ConnectionProblemReason::*;
    let mut a = entry(0, WorkerState::Running);
    let mut b = entry(1, WorkerState::Running);
    let c = entry(2, WorkerState::Running);
    assert_eq!(connection_trouble(&[("w0", &a), ("w2", &c)]), None);

    a.connection_problems = vec![problem(TlsFailed, "target dc2: handshake refused")];
    assert_eq!(
        connection_trouble(&[("w0", &a)]),
        Some(ConnectionTrouble {
            reason: "TlsFailed",
            message: "w0: target dc2: handshake refused".into(),
        })
    );
    // The most serious reason leads; a message two workers report is listed once.
    b.connection_problems = vec![
        problem(TlsFailed, "target dc2: handshake refused"),
        problem(AuthenticationFailed, "source dc1: bad password"),
    ];
    assert_eq!(
        connection_trouble(&[("w0", &a), ("w1", &b), ("w2", &c)]),
        Some(ConnectionTrouble {
            reason: "AuthenticationFailed",
            message: "w0: target dc2: handshake refused, w1: source dc1: bad password".into(),
        })
    );
}

#[test]
fn ready_verdict_table() {
    let invalid = ValidationErrors(vec![FieldError {
        field: "spec.topics".into(),
        value: "[".into(),
        message: "not a regex".into(),
    }]);
    let child = ChildProblem {
        reason: CHILD_CONFLICT,
        message: "ConfigMap orders-worker is not ours".into(),
    };
    let idle = ResetProgress::Idle(None);
    let resetting = ResetProgress::InProgress {
        id: "r1".into(),
        applied: 1,
        desired: 3,
    };
    let trouble = ConnectionTrouble {
        reason: "AuthenticationFailed",
        message: "w0: source dc1: bad password".into(),
    };
    let (all, nobody) = (rollup(3, 3), rollup(0, 0));
    let failed = WorkerRollup {
        failed: strings(&["orders-worker-1: boom"]),
        ..rollup(3, 2)
    };
    let starting = WorkerRollup {
        not_ready: strings(&["orders-worker-2: no status yet"]),
        ..rollup(3, 2)
    };
    let not_ready = WorkerRollup {
        only_starting: false,
        ..starting.clone()
    };
    let sts = |replicas, ready| StatefulSetView {
        replicas,
        ready_replicas: ready,
        updated_replicas: replicas,
        ..Default::default()
    };
    let (settled, unready_pods) = (sts(3, 3), sts(3, 1));
    let rolling = StatefulSetView {
        current_revision: Some("a".into()),
        update_revision: Some("b".into()),
        updated_replicas: 1,
        ..sts(3, 3)
    };
    let base = ReadyInputs {
        invalid: None,
        children: None,
        reset: &idle,
        failed_partitions: 0,
        connection: None,
        workers: &all,
        draining: None,
        statefulset: Some(&settled),
    };
    let paused = WorkerRollup {
        paused: true,
        ..all.clone()
    };
    let degraded = WorkerRollup {
        degraded: strings(&["orders-worker-1"]),
        ..all.clone()
    };
    use Phase::*;
    let cases: Vec<(&str, ReadyInputs, Verdict, Phase)> = vec![
        (
            "all running",
            base,
            Verdict::yes("AllWorkersRunning", "3/3 workers replicating"),
            Current,
        ),
        (
            "paused",
            ReadyInputs {
                workers: &paused,
                ..base
            },
            Verdict::yes("Paused", "3/3 workers paused; paused by spec.paused"),
            Current,
        ),
        (
            "an invalid spec comes before everything",
            ReadyInputs {
                invalid: Some(&invalid),
                children: Some(&child),
                reset: &resetting,
                failed_partitions: 2,
                ..base
            },
            Verdict::no("InvalidSpec", "spec.topics: not a regex (got \"[\")"),
            Stalled,
        ),
        (
            "a child that cannot be applied",
            ReadyInputs {
                children: Some(&child),
                reset: &resetting,
                ..base
            },
            Verdict::no("ChildConflict", "ConfigMap orders-worker is not ours"),
            Stalled,
        ),
        (
            "a reset in progress comes before the failures it clears",
            ReadyInputs {
                reset: &resetting,
                failed_partitions: 2,
                ..base
            },
            Verdict::no("ResetInProgress", "reset \"r1\": 1/3 workers applied it"),
            Reconciling,
        ),
        (
            "stopped partitions",
            ReadyInputs {
                failed_partitions: 2,
                connection: Some(&trouble),
                ..base
            },
            Verdict::no(
                "PartitionsFailed",
                "2 partition(s) stopped; see status.failures and patch spec.reset to clear them",
            ),
            Stalled,
        ),
        (
            "a connection problem",
            ReadyInputs {
                connection: Some(&trouble),
                workers: &failed,
                ..base
            },
            Verdict::no("AuthenticationFailed", "w0: source dc1: bad password"),
            Stalled,
        ),
        (
            "a failed worker",
            ReadyInputs {
                workers: &failed,
                draining: Some((3, 2)),
                ..base
            },
            Verdict::no("WorkerFailed", "orders-worker-1: boom"),
            Stalled,
        ),
        (
            "a degraded worker without stopped partitions",
            ReadyInputs {
                workers: &degraded,
                ..base
            },
            Verdict::no("WorkersDegraded", "orders-worker-1"),
            Stalled,
        ),
        (
            "draining before a resize",
            ReadyInputs {
                draining: Some((3, 2)),
                statefulset: Some(&rolling),
                ..base
            },
            Verdict::no(
                "Scaling",
                "scaling from 3 to 2 workers: waiting until every old worker has stopped",
            ),
            Reconciling,
        ),
        (
            "a rolling update",
            ReadyInputs {
                statefulset: Some(&rolling),
                workers: &not_ready,
                ..base
            },
            Verdict::no(
                "RollingUpdate",
                "1/3 worker pods updated to the current spec",
            ),
            Reconciling,
        ),
        (
            "workers starting",
            ReadyInputs {
                workers: &starting,
                statefulset: Some(&unready_pods),
                ..base
            },
            Verdict::no(
                "WorkersStarting",
                "2/3 workers replicating; orders-worker-2: no status yet",
            ),
            Reconciling,
        ),
        (
            "workers not ready",
            ReadyInputs {
                workers: &not_ready,
                ..base
            },
            Verdict::no(
                "WorkersNotReady",
                "2/3 workers replicating; orders-worker-2: no status yet",
            ),
            Reconciling,
        ),
        (
            "pods failing their readiness probe",
            ReadyInputs {
                statefulset: Some(&unready_pods),
                ..base
            },
            Verdict::no(
                "WorkersNotReady",
                "1/3 worker pods pass their readiness probe",
            ),
            Reconciling,
        ),
        (
            "no StatefulSet yet",
            ReadyInputs {
                statefulset: None,
                ..base
            },
            Verdict::no(
                "WorkersStarting",
                "the worker StatefulSet does not exist yet",
            ),
            Reconciling,
        ),
        (
            "no StatefulSet and no worker desired",
            ReadyInputs {
                statefulset: None,
                workers: &nobody,
                ..base
            },
            Verdict::yes("AllWorkersRunning", "0/0 workers replicating"),
            Current,
        ),
    ];
    for (name, inputs, want, phase) in cases {
        assert_eq!(ready_verdict(&inputs), (want, phase), "{name}");
    }
}

#[test]
fn replicating_verdict_table() {
    let some = |replicating, paused| WorkerRollup {
        replicating,
        up: if paused { 0 } else { replicating },
        paused,
        ..rollup(3, 0)
    };
    let cases = [
        (
            some(0, false),
            0,
            Verdict::no("NoWorkerReplicating", "0/3 workers replicating"),
        ),
        (
            some(0, true),
            0,
            Verdict::no("Paused", "replication paused by spec.paused"),
        ),
        (
            some(1, true),
            0,
            Verdict::yes("Pausing", "1/3 workers still replicating; pause requested"),
        ),
        (
            some(3, false),
            0,
            Verdict::yes("Replicating", "3/3 workers replicating"),
        ),
        (
            some(3, false),
            2,
            Verdict::yes(
                "PartiallyReplicating",
                "3/3 workers replicating; 2 partition(s) stopped",
            ),
        ),
        (
            some(2, false),
            0,
            Verdict::yes("PartiallyReplicating", "2/3 workers replicating"),
        ),
    ];
    for (workers, failed, want) in cases {
        assert_eq!(
            replicating_verdict(&workers, failed),
            want,
            "{workers:?} failed={failed}"
        );
    }
}

#[test]
fn invalid_spec_verdict_table() {
    let errs = ValidationErrors(vec![
        FieldError {
            field: "spec.workers.replicas".into(),
            value: "0".into(),
            message: "must be at least 1".into(),
        },
        FieldError {
            field: "metadata.name".into(),
            value: "X".into(),
            message: "must be a DNS label".into(),
        },
    ]);
    assert_eq!(invalid_spec_verdict(None), Verdict::no("Valid", ""));
    assert_eq!(
        invalid_spec_verdict(Some(&errs)),
        Verdict::yes(
            "ValidationFailed",
            "spec.workers.replicas: must be at least 1 (got \"0\"); metadata.name: must be a \
             DNS label (got \"X\")"
        )
    );
}

#[test]
fn connection_failed_verdict_table() {
    let trouble = ConnectionTrouble {
        reason: "TlsVerificationFailed",
        message: "w0: target dc2: certificate expired".into(),
    };
    assert_eq!(
        connection_failed_verdict(None),
        Verdict::no("Connected", "")
    );
    assert_eq!(
        connection_failed_verdict(Some(&trouble)),
        Verdict::yes(
            "TlsVerificationFailed",
            "w0: target dc2: certificate expired"
        )
    );
}

#[test]
fn insecure_tls_verdict_table() {
    let spec = |source_insecure: bool, target_insecure: bool| -> MirrorFlowSpec {
        serde_json::from_value(json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9093",
                       "tls": {"insecureSkipVerify": source_insecure}},
            "target": {"alias": "dc2", "bootstrapServers": "b:9093",
                       "tls": {"insecureSkipVerify": target_insecure}},
        }))
        .unwrap()
    };
    let warning = " is true: the brokers' certificates and host names are not verified, so \
                   anyone on the network path can impersonate them and read credentials and \
                   records; for test clusters only";
    let cases = [
        (false, false, Verdict::no("CertificatesVerified", "")),
        (
            false,
            true,
            Verdict::yes(
                "InsecureSkipVerify",
                format!("spec.target.tls.insecureSkipVerify (cluster dc2){warning}"),
            ),
        ),
        (
            true,
            true,
            Verdict::yes(
                "InsecureSkipVerify",
                format!(
                    "spec.source.tls.insecureSkipVerify (cluster dc1) and \
                     spec.target.tls.insecureSkipVerify (cluster dc2){warning}"
                ),
            ),
        ),
    ];
    for (source, target, want) in cases {
        assert_eq!(
            insecure_tls_verdict(&spec(source, target)),
            want,
            "{source} {target}"
        );
    }
}

#[test]
fn topic_unwritable_verdict_table() {
    let mut a = entry(0, WorkerState::Running);
    let mut b = entry(1, WorkerState::Running);
    a.unwritable_topics = strings(&["dc1.b: replication factor 3 > 1 broker", "dc1.a: x"]);
    b.unwritable_topics = strings(&["dc1.a: x"]);
    let topics = unwritable_topics(&[("w0", &a), ("w1", &b)]);
    assert_eq!(
        topics,
        strings(&["dc1.a: x", "dc1.b: replication factor 3 > 1 broker"]),
        "sorted, each once"
    );
    assert_eq!(
        topic_unwritable_verdict(&topics),
        Verdict::yes(
            "TargetTopicsUnwritable",
            "dc1.a: x, dc1.b: replication factor 3 > 1 broker"
        )
    );
    assert_eq!(
        topic_unwritable_verdict(&[]),
        Verdict::no("TopicsWritable", "")
    );
}

#[test]
fn shown_once_table() {
    let on = Verdict::yes("InsecureSkipVerify", "x");
    let off = Verdict::no("CertificatesVerified", "");
    let cases = [
        (on.clone(), false, Some(on.clone())),
        (on.clone(), true, Some(on)),
        (off.clone(), true, Some(off.clone())),
        (off, false, None),
    ];
    for (v, had, want) in cases {
        assert_eq!(shown_once(v.clone(), had), want, "{v:?} had={had}");
    }
}

#[test]
fn topic_acls_are_worker_zeros() {
    // The fold reads the ACL sync from worker 0's entry only (it runs the sync).
    let mut flow = MirrorFlow::new(
        "orders",
        serde_json::from_value(json!({
            "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
            "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
            "workers": {"replicas": 2}
        }))
        .unwrap(),
    );
    let mut w0 = entry(0, WorkerState::Running);
    let mut w1 = entry(1, WorkerState::Running);
    w1.topic_acls = Some(TopicAclSync {
        synced: 9,
        ..Default::default()
    });
    let fold = |flow: &MirrorFlow| {
        fold_flow_status(&FlowObservation {
            flow,
            invalid: None,
            statefulset: None,
            draining: None,
            children: None,
            now: t(1),
            stale_after: SignedDuration::from_secs(30),
        })
        .topic_acls
    };
    flow.status = Some(MirrorFlowStatus {
        workers: vec![w0.clone(), w1.clone()],
        ..Default::default()
    });
    assert_eq!(fold(&flow), None);
    w0.topic_acls = Some(TopicAclSync {
        synced: 2,
        ..Default::default()
    });
    flow.status = Some(MirrorFlowStatus {
        workers: vec![w0, w1],
        ..Default::default()
    });
    assert_eq!(fold(&flow).map(|a| a.synced), Some(2));
}
