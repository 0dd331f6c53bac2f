//! Refresh planning and application: which topics a worker wants, what the target needs,
//! which partitions go, come back or start, and which checks still apply.

use super::*;
use crate::api::FailureType;
use crate::worker::replicate::status::{FailureKind, PartitionFailed};
use crate::worker::validation::classify::{RecordsLost, Signal};
use pretty_assertions::assert_eq;

fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
    TopicPartitionRef::new(topic, partition)
}

fn filter(include: &[&str]) -> TopicFilter {
    let spec: crate::api::MirrorFlowSpec = serde_json::from_value(serde_json::json!({
        "source": {"alias": "dc1", "bootstrapServers": "a:9092"},
        "target": {"alias": "dc2", "bootstrapServers": "b:9092"},
        "topics": {"include": include},
    }))
    .unwrap();
    TopicFilter::new(&spec).unwrap()
}

const ALONE: Owner = Owner { index: 0, count: 1 };

fn topics(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
    list.iter().map(|(t, n)| (t.to_string(), *n)).collect()
}

fn wanted(list: &[(&str, i32)]) -> BTreeMap<String, (i32, String)> {
    list.iter()
        .map(|(t, n)| (t.to_string(), (*n, format!("dc1.{t}"))))
        .collect()
}

#[test]
fn wanted_topics_follow_the_filter_and_ownership() {
    let source = topics(&[
        ("orders", 3),
        ("payments", 1),
        ("audit", 2),
        ("__consumer_offsets", 50),
        ("dc2.orders", 3),
        ("mm2-offset-syncs.dc2.internal", 1),
    ]);
    let got = wanted_topics(&source, &filter(&["orders", "payments", ".*"]), ALONE);
    assert_eq!(
        got,
        wanted(&[("audit", 2), ("orders", 3), ("payments", 1)]),
        "internal and target-born topics never"
    );
    let got = wanted_topics(&source, &filter(&["orders"]), ALONE);
    assert_eq!(got, wanted(&[("orders", 3)]));
    // With two workers, a one-partition topic belongs to exactly one of them.
    let mine = |index| {
        wanted_topics(
            &topics(&[("payments", 1)]),
            &filter(&[".*"]),
            Owner { index, count: 2 },
        )
        .len()
    };
    assert_eq!(mine(0) + mine(1), 1);
}

#[test]
fn target_actions_table() {
    let w = wanted(&[("a", 3), ("b", 4), ("c", 2)]);
    let target = topics(&[("dc1.a", 3), ("dc1.b", 2), ("dc1.c", 5)]);
    let got: Vec<(String, TargetTopicAction)> = target_actions(&w, &target)
        .into_iter()
        .map(|(_, t, _, a)| (t, a))
        .collect();
    assert_eq!(
        got,
        vec![
            ("dc1.a".into(), TargetTopicAction::Ready),
            ("dc1.b".into(), TargetTopicAction::Grow { from: 2, to: 4 }),
            ("dc1.c".into(), TargetTopicAction::Ready),
        ]
    );
    let got = target_actions(&wanted(&[("d", 1)]), &BTreeMap::new());
    assert_eq!(got[0].3, TargetTopicAction::Create);
}

fn start_fresh(table: &mut PartitionTable, tp: &TopicPartitionRef, pos: i64) {
    table.take(tp, &format!("dc1.{}", tp.topic), 1, false);
    table.start(tp, &Start::Fresh(pos), false);
    table.clear_pending(tp);
}

fn plan(wanted_list: &[(&str, i32)], ready: &[&str]) -> RefreshPlan {
    RefreshPlan {
        wanted: Some(wanted(wanted_list)),
        targets_listed: true,
        ready: ready.iter().map(|t| format!("dc1.{t}")).collect(),
        ..Default::default()
    }
}

#[test]
fn gone_partitions_park_and_come_back() {
    let mut t = PartitionTable::default();
    for p in 0..3 {
        start_fresh(&mut t, &tp("orders", p), 10 + i64::from(p));
    }
    start_fresh(&mut t, &tp("audit", 0), 0);
    // orders shrank to 2 partitions (recreated), audit vanished.
    let a = apply_plan(
        &mut t,
        &plan(&[("orders", 2)], &["orders"]),
        ALONE,
        false,
        || 5,
    );
    assert_eq!(a.gone, vec![tp("audit", 0), tp("orders", 2)]);
    assert!(a.reassign);
    assert_eq!(t.len(), 2);
    // Nothing to do: no re-assignment.
    let a = apply_plan(
        &mut t,
        &plan(&[("orders", 2)], &["orders"]),
        ALONE,
        false,
        || 5,
    );
    assert_eq!(a, Applied::default());
    // Back with its own position, paused with the flow.
    let a = apply_plan(
        &mut t,
        &plan(&[("orders", 3), ("audit", 1)], &["orders", "audit"]),
        ALONE,
        true,
        || 5,
    );
    assert_eq!(a.back, vec![tp("audit", 0), tp("orders", 2)]);
    assert!(
        a.started.is_empty(),
        "positions are kept, not started again"
    );
    assert_eq!(t.get(&tp("orders", 2)).unwrap().position, Some(12));
    assert!(matches!(
        t.get(&tp("orders", 2)).unwrap().state,
        PartitionState::Paused
    ));
}

#[test]
fn new_partitions_start_only_with_a_ready_target() {
    let mut t = PartitionTable::default();
    let mut p = plan(&[("orders", 2), ("audit", 1)], &["orders"]);
    p.starts.insert(tp("orders", 0), Start::Fresh(0));
    p.starts.insert(
        tp("orders", 1),
        Start::Resume(crate::kafka::wire::Progress {
            topic: "orders".into(),
            partition: 1,
            next_offset: 40,
            topic_id: "id".into(),
            reset_id: String::new(),
            failure: String::new(),
        }),
    );
    p.starts.insert(tp("audit", 0), Start::Fresh(0));
    p.marks.insert(tp("orders", 0), (0, 9));
    p.marks.insert(tp("audit", 0), (3, 4));
    let a = apply_plan(&mut t, &p, ALONE, false, || 5);
    let started: Vec<_> = a
        .started
        .iter()
        .map(|(k, s)| (k.clone(), s.position()))
        .collect();
    assert_eq!(started, vec![(tp("orders", 0), 0), (tp("orders", 1), 40)]);
    let audit = t.get(&tp("audit", 0)).unwrap();
    assert!(
        audit.position.is_none() && matches!(audit.state, PartitionState::Starting),
        "target not ready yet"
    );
    assert_eq!(
        (audit.low, audit.high),
        (Some(3), Some(4)),
        "watermarks are recorded anyway"
    );
    assert_eq!(t.pending().count(), 1, "only the fresh start is persisted");
    assert!(t.refreshed_once());
}

#[test]
fn unlisted_clusters_change_nothing_but_vanished_partitions() {
    let mut t = PartitionTable::default();
    start_fresh(&mut t, &tp("orders", 0), 1);
    let none = RefreshPlan::default();
    assert_eq!(
        apply_plan(&mut t, &none, ALONE, false, || 1),
        Applied::default()
    );
    assert!(!t.refreshed_once(), "startFrom: Latest still applies");
    let mut p = plan(&[("payments", 1)], &[]);
    p.targets_listed = false;
    let a = apply_plan(&mut t, &p, ALONE, false, || 1);
    assert_eq!(a.gone, vec![tp("orders", 0)]);
    assert!(
        t.get(&tp("payments", 0)).is_none(),
        "nothing is taken without the target"
    );
}

fn detection(partition: i32) -> Detection {
    Detection {
        tp: tp("orders", partition),
        type_: FailureType::DataLoss,
        requested_offset: 5,
        log_start: Some(9),
        high_watermark: Some(20),
        records_lost: RecordsLost::Exactly(4),
        signals: vec![Signal::LogStartPastPosition { log_start: 9 }],
    }
}

#[test]
fn checks_apply_only_to_the_version_they_saw() {
    let mut t = PartitionTable::default();
    for p in 0..4 {
        start_fresh(&mut t, &tp("orders", p), 5);
    }
    let healthy = PartitionObservation {
        topic_id: Some("id9".into()),
        log_start: 0,
        high_watermark: 30,
    };
    let check = |partition, version, outcome| Check {
        tp: tp("orders", partition),
        version,
        position: 5,
        outcome,
    };
    let mut p = plan(&[("orders", 4)], &["orders"]);
    p.checks = vec![
        check(0, 0, CheckOutcome::Healthy(healthy.clone())),
        check(1, 0, CheckOutcome::Failed(detection(1))),
        check(2, 0, CheckOutcome::Deferred(detection(2))),
        // Failed since the snapshot: the evidence is stale.
        check(3, 0, CheckOutcome::Failed(detection(3))),
    ];
    t.fail(
        &tp("orders", 3),
        PartitionFailed {
            kind: FailureKind::RecordRejected,
            offset: 5,
            message: "too large".into(),
            failure: None,
        },
    );
    let a = apply_plan(&mut t, &p, ALONE, false, || 1);
    assert_eq!(a.detections, vec![detection(1)]);
    assert_eq!(a.deferred, vec![detection(2)]);
    assert!(
        !a.reassign,
        "detections re-assign through the engine's failure path"
    );
    let p0 = t.get(&tp("orders", 0)).unwrap();
    assert_eq!(p0.topic_id, "id9", "a learned id is kept");
    assert_eq!(p0.max_high_watermark, Some(30));
    assert_eq!(
        t.pending().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![tp("orders", 0), tp("orders", 3)],
        "the learned id is persisted (and the failure of orders/3 before it)"
    );
}

#[test]
fn a_topic_reset_found_behind_the_position_names_the_position() {
    let reset = |requested_offset| Detection {
        type_: FailureType::TopicReset,
        requested_offset,
        records_lost: RecordsLost::Unknown,
        signals: vec![Signal::TopicIdChanged {
            previous: Some("AAA".into()),
            current: Some("BBB".into()),
        }],
        ..detection(0)
    };
    // (found, position when applied, requested offset reported)
    let cases = [
        (reset(5), Some(20), 20),
        (reset(5), Some(5), 5),
        (reset(5), None, 5),
        (detection(0), Some(20), 5),
    ];
    for (found, position, want) in cases {
        let d = at_position(&found, position);
        assert_eq!(d.requested_offset, want, "{found:?} at {position:?}");
        assert_eq!(d.signals, found.signals);
    }
}

#[test]
fn partitions_a_refresh_created_are_empty_without_asking() {
    // dc1.new was created (all partitions new), dc1.grown went from 4 to 8 partitions.
    let empty_from = topics(&[("dc1.new", 0), ("dc1.grown", 4)]);
    for (topic, partition, empty) in [
        ("dc1.new", 0, true),
        ("dc1.new", 999, true),
        ("dc1.grown", 3, false),
        ("dc1.grown", 4, true),
        ("dc1.grown", 7, true),
        ("dc1.old", 0, false),
    ] {
        assert_eq!(
            created_empty(&empty_from, topic, partition),
            empty,
            "{topic}/{partition}"
        );
    }
}
