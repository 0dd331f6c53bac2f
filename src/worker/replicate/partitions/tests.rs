//! Partition table transitions.
use super::*;
use crate::worker::replicate::status::FailureKind;
use pretty_assertions::assert_eq;

fn tp(topic: &str, partition: i32) -> TopicPartitionRef {
    TopicPartitionRef::new(topic, partition)
}

fn failed(offset: i64) -> PartitionFailed {
    PartitionFailed {
        kind: FailureKind::DataLoss,
        offset,
        message: "gone".into(),
        failure: Some(crate::api::PartitionFailure {
            type_: crate::api::FailureType::DataLoss,
            topic: "orders".into(),
            partition: 0,
            requested_offset: offset,
            log_start_offset: Some(offset + 5),
            records_lost: Some(5),
            detected_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::from_second(1_700_000_000).unwrap(),
            ),
            reason: None,
            message: Some("gone".into()),
        }),
    }
}

fn progress(topic: &str, partition: i32, next: i64) -> Progress {
    Progress {
        topic: topic.into(),
        partition,
        next_offset: next,
        topic_id: "id1".into(),
        reset_id: "r1".into(),
        failure: String::new(),
    }
}

/// A table owning `orders/0..n`, replicating from `positions`.
fn table(positions: &[i64]) -> PartitionTable {
    let mut t = PartitionTable::default();
    for (i, pos) in positions.iter().enumerate() {
        let k = tp("orders", i as i32);
        assert_eq!(t.take(&k, "dc1.orders", 1, false), Taken::New);
        assert!(t.start(&k, &Start::Fresh(*pos), false));
    }
    t
}

#[test]
fn start_positions() {
    let stored = progress("orders", 0, 42);
    // (name, stored progress, MM2's next offset, marks, startFrom, first refresh, start)
    let cases = [
        (
            "stored wins",
            Some(&stored),
            None,
            Some((5, 9)),
            StartFrom::Latest,
            true,
            Some(Start::Resume(stored.clone())),
        ),
        (
            "stored wins over MM2's position (a restart after migrating never goes back)",
            Some(&stored),
            Some(7),
            Some((5, 9)),
            StartFrom::Earliest,
            true,
            Some(Start::Resume(stored.clone())),
        ),
        (
            "MM2's position over earliest",
            None,
            Some(7),
            Some((5, 9)),
            StartFrom::Earliest,
            true,
            Some(Start::MirrorMaker2(7)),
        ),
        (
            "MM2's position over latest",
            None,
            Some(7),
            Some((5, 9)),
            StartFrom::Latest,
            true,
            Some(Start::MirrorMaker2(7)),
        ),
        (
            "MM2's position needs no watermarks",
            None,
            Some(7),
            None,
            StartFrom::Earliest,
            false,
            Some(Start::MirrorMaker2(7)),
        ),
        (
            "earliest",
            None,
            None,
            Some((5, 9)),
            StartFrom::Earliest,
            true,
            Some(Start::Fresh(5)),
        ),
        (
            "latest at first refresh",
            None,
            None,
            Some((5, 9)),
            StartFrom::Latest,
            true,
            Some(Start::Fresh(9)),
        ),
        (
            "latest only on the first refresh",
            None,
            None,
            Some((5, 9)),
            StartFrom::Latest,
            false,
            Some(Start::Fresh(5)),
        ),
        (
            "no watermarks: later",
            None,
            None,
            None,
            StartFrom::Earliest,
            true,
            None,
        ),
    ];
    for (name, stored, mm2, marks, from, first, want) in cases {
        assert_eq!(
            start_position(stored, mm2.map(Start::MirrorMaker2), marks, from, first),
            want,
            "{name}"
        );
    }
}

#[test]
fn take_start_and_assign() {
    let mut t = PartitionTable::default();
    let a = tp("orders", 0);
    let b = tp("orders", 1);
    assert_eq!(t.take(&a, "dc1.orders", 1, false), Taken::New);
    assert_eq!(t.take(&a, "dc1.orders", 2, false), Taken::Known);
    assert_eq!(t.take(&b, "dc1.orders", 1, false), Taken::New);
    assert!(matches!(t.get(&a).unwrap().state, PartitionState::Starting));
    assert_eq!(t.assignment(), vec![], "no position, nothing to fetch");
    assert!(t.start(&a, &Start::Resume(progress("orders", 0, 42)), false));
    assert!(
        !t.start(&a, &Start::Fresh(0), false),
        "a position is never replaced"
    );
    assert!(t.start(&b, &Start::Fresh(7), true));
    let pa = t.get(&a).unwrap();
    assert_eq!((pa.topic_id.as_str(), pa.reset_id.as_str()), ("id1", "r1"));
    assert!(matches!(t.get(&b).unwrap().state, PartitionState::Paused));
    // Resumed progress is persisted already; a fresh start is not.
    assert_eq!(
        t.pending().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![b.clone()]
    );
    assert_eq!(
        t.assignment(),
        vec![(a.clone(), 42)],
        "paused partitions are not fetched"
    );
    assert_eq!(t.get(&a).unwrap().fetched, Some(42));
}

#[test]
fn accept_drops_stale_halted_and_stopped_records() {
    let mut t = table(&[10, 20]);
    t.assignment();
    let cases = [
        ("expected", "orders", 0, 10, true),
        ("next", "orders", 0, 11, true),
        ("stale (before a re-assign)", "orders", 0, 5, false),
        ("other partition", "orders", 1, 20, true),
        ("unknown partition", "orders", 9, 0, false),
        ("unknown topic", "other", 0, 0, false),
    ];
    for (name, topic, p, offset, want) in cases {
        assert_eq!(t.accept(topic, p, offset), want, "{name}");
    }
    assert!(t.get(&tp("orders", 0)).unwrap().fetched_since_check);
    t.halt(&tp("orders", 0));
    assert!(!t.accept("orders", 0, 12), "halted until re-assigned");
    assert!(t.accept("orders", 1, 21), "only the halted partition");
    t.assignment();
    assert!(t.accept("orders", 0, 10), "re-assigning lifts the halt");
    assert!(t.fail(&tp("orders", 1), failed(20)));
    assert!(
        !t.accept("orders", 1, 22),
        "a failed partition takes nothing"
    );
}

#[test]
fn accept_finds_each_partition_while_entries_are_added_in_between() {
    // Entries are kept in key order and the last record's partition is remembered by
    // position: partitions added before it shift it, and each record must still go to its
    // own partition's entry.
    let mut t = PartitionTable::default();
    let start = |t: &mut PartitionTable, topic: &str, p: i32, pos: i64| {
        let k = tp(topic, p);
        assert_eq!(t.take(&k, "x", 1, false), Taken::New);
        assert!(t.start(&k, &Start::Fresh(pos), false));
        t.assignment();
    };
    start(&mut t, "orders", 1, 100);
    let steps: [(&str, &str, i32, i64, bool); 8] = [
        ("first record", "orders", 1, 100, true),
        ("same partition", "orders", 1, 101, true),
        ("a partition added before it", "add", 0, 0, false),
        ("same partition, moved", "orders", 1, 102, true),
        ("its earlier offset is stale", "orders", 1, 101, false),
        ("another topic added first", "add", 0, 0, false),
        ("the new partition", "aaa", 0, 0, true),
        ("back to the first", "orders", 1, 103, true),
    ];
    let mut added = 0;
    for (name, topic, p, offset, want) in steps {
        if topic == "add" {
            // "orders"/0 then "aaa"/0: both sort before "orders"/1.
            let (topic, p, pos) = [("orders", 0, 500), ("aaa", 0, 0)][added];
            start(&mut t, topic, p, pos);
            added += 1;
            continue;
        }
        assert_eq!(t.accept(topic, p, offset), want, "{name}");
    }
    let fetched = |t: &PartitionTable, topic, p| t.get(&tp(topic, p)).unwrap().fetched;
    assert_eq!(fetched(&t, "orders", 1), Some(104));
    assert_eq!(fetched(&t, "orders", 0), Some(500), "never given a record");
    assert_eq!(fetched(&t, "aaa", 0), Some(1));
    let keys: Vec<_> = t.owned().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys,
        vec![tp("aaa", 0), tp("orders", 0), tp("orders", 1)],
        "key order"
    );
}

#[test]
fn pause_and_unpause() {
    let mut t = table(&[0, 0]);
    assert!(t.fail(&tp("orders", 1), failed(0)));
    assert!(t.set_paused(true));
    assert!(!t.set_paused(true), "nothing changes twice");
    assert!(matches!(
        t.get(&tp("orders", 0)).unwrap().state,
        PartitionState::Paused
    ));
    assert!(
        t.get(&tp("orders", 1)).unwrap().state.is_failed(),
        "failure kept"
    );
    assert!(t.set_paused(false));
    assert!(t.get(&tp("orders", 0)).unwrap().replicating());
    assert!(t.get(&tp("orders", 1)).unwrap().state.is_failed());
}

#[test]
fn parking_keeps_position_failure_and_pending() {
    let mut t = table(&[5, 6, 7]);
    let (a, b, c) = (tp("orders", 0), tp("orders", 1), tp("orders", 2));
    t.clear_pending(&a);
    assert!(t.fail(&b, failed(6)));
    assert_eq!(t.pending().count(), 2);
    assert!(t.park(&a) && t.park(&b) && t.park(&c));
    assert!(!t.park(&a), "parked once");
    assert_eq!(t.len(), 0);
    assert!(!t.has_pending(), "parked positions wait for their topic");
    assert!(t.get(&a).is_none() && !t.accept("orders", 0, 5));
    assert_eq!(t.assignment(), vec![]);
    let v = t.entries().find(|(k, _, _)| **k == b).unwrap().1.version;
    assert!(v > 1, "parking makes evidence about it stale");
    // Back: own position, failure, and pending flag; a paused flow resumes paused.
    assert_eq!(t.take(&a, "dc1.orders.v2", 2, true), Taken::Back);
    assert_eq!(t.take(&b, "dc1.orders", 2, false), Taken::Back);
    assert_eq!(t.take(&c, "dc1.orders", 2, false), Taken::Back);
    let pa = t.get(&a).unwrap();
    assert_eq!(
        (pa.position, pa.target_topic.as_str()),
        (Some(5), "dc1.orders.v2")
    );
    assert!(matches!(pa.state, PartitionState::Paused));
    assert!(
        t.get(&b).unwrap().state.is_failed(),
        "parking keeps a failure"
    );
    assert_eq!(
        t.get(&b).unwrap().version,
        v,
        "a refresh that saw it parked may apply"
    );
    assert_eq!(
        t.pending().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![b, c]
    );
}

#[test]
fn pending_positions_and_marker() {
    let mut t = table(&[0, 0]);
    assert!(t.has_pending());
    t.clear_pending(&tp("orders", 0));
    t.clear_pending(&tp("orders", 0));
    t.clear_pending(&tp("orders", 1));
    assert!(!t.has_pending());
    t.mark_pending(&tp("orders", 9));
    assert!(!t.has_pending(), "only owned partitions");
    t.set_pending_marker("r1");
    assert!(t.has_pending());
    t.set_pending_marker("r2");
    t.marker_persisted("r1");
    assert_eq!(t.pending_marker(), Some("r2"), "a newer marker stays");
    t.marker_persisted("r2");
    t.marker_lost("r2".into());
    assert_eq!(t.pending_marker(), Some("r2"), "written again");
    t.set_pending_marker("r3");
    t.marker_lost("r2".into());
    assert_eq!(
        t.pending_marker(),
        Some("r3"),
        "never replaced by an older one"
    );
}

#[test]
fn reset_sets_a_new_baseline() {
    let mut t = table(&[10]);
    let a = tp("orders", 0);
    t.clear_pending(&a);
    {
        let p = t.get_mut(&a).unwrap();
        p.topic_id = "old".into();
        p.max_high_watermark = Some(500);
    }
    assert!(t.fail(&a, failed(10)));
    let v = t.get(&a).unwrap().version;
    assert!(t.reset(&a, 0, "r9", None, (0, 3), 7, false));
    let p = t.get(&a).unwrap();
    assert_eq!(p.position, Some(0));
    assert_eq!(p.reset_id, "r9");
    assert_eq!(p.topic_id, "", "learned at the next check");
    assert_eq!((p.max_log_start, p.max_high_watermark), (Some(0), Some(3)));
    assert!(p.replicating() && p.version > v);
    assert!(t.has_pending());
    assert!(!t.reset(&tp("orders", 5), 0, "r9", None, (0, 0), 7, false));
}

#[test]
fn record_learns_the_topic_id_once() {
    let mut t = table(&[10]);
    let a = tp("orders", 0);
    let obs = PartitionObservation {
        topic_id: Some("id7".into()),
        log_start: 2,
        high_watermark: 40,
    };
    let p = t.get_mut(&a).unwrap();
    assert!(p.record(&a, 10, &obs), "learned: persist it");
    assert!(!p.record(&a, 10, &obs));
    assert_eq!((p.max_log_start, p.max_high_watermark), (Some(2), Some(40)));
}

#[test]
fn failures_are_persisted_and_restored() {
    let mut t = table(&[10]);
    let a = tp("orders", 0);
    t.clear_pending(&a);
    assert!(t.fail(&a, failed(10)));
    assert_eq!(
        t.pending().count(),
        1,
        "a failure is persisted with the position"
    );
    let stored = t.get(&a).unwrap().progress(&a, 10);
    assert!(!stored.failure.is_empty());
    // After a restart the partition starts stopped, with the same failure.
    let mut restarted = PartitionTable::default();
    restarted.take(&a, "dc1.orders", 1, false);
    assert!(restarted.start(&a, &Start::Resume(stored.clone()), false));
    assert_eq!(
        restarted.get(&a).unwrap().state,
        PartitionState::Failed(failed(10))
    );
    assert_eq!(restarted.assignment(), vec![], "never fetched");
    assert!(
        restarted.pending().next().is_none(),
        "nothing new to persist"
    );
    // A reset clears it; the next progress has no failure.
    assert!(restarted.reset(&a, 0, "r1", None, (0, 5), 2, false));
    assert_eq!(restarted.get(&a).unwrap().progress(&a, 0).failure, "");
    // Text this build cannot read still stops the partition, saying why.
    let garbled = Progress {
        failure: "{not json".into(),
        ..stored
    };
    let mut t = PartitionTable::default();
    t.take(&a, "dc1.orders", 1, false);
    t.start(&a, &Start::Resume(garbled), false);
    let PartitionState::Failed(f) = &t.get(&a).unwrap().state else {
        panic!("stays stopped");
    };
    assert!(f.message.contains("cannot be read"), "{}", f.message);
}

/// A record the target rejected at `offset` of orders/0, as the pipeline reports it.
fn rejected(offset: i64) -> PartitionFailed {
    use crate::worker::validation::classify::{record_rejected, FlowRef};
    let f = record_rejected(
        tp("orders", 0),
        offset,
        "dc1.orders",
        "Broker: Message size too large (MessageSizeTooLarge)",
    )
    .to_failure(
        FlowRef {
            namespace: "kafka",
            name: "orders",
        },
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::from_second(1_700_000_000).unwrap(),
        ),
    );
    PartitionFailed {
        kind: FailureKind::RecordRejected,
        offset,
        message: f.message.clone().unwrap_or_default(),
        failure: Some(f),
    }
}

#[test]
fn a_rejected_record_is_persisted_and_a_restart_keeps_it_stopped() {
    let a = tp("orders", 0);
    let mut t = table(&[2]);
    assert!(t.fail_at(&a, rejected(2)), "owned");
    assert_eq!(
        t.get(&a).unwrap().state,
        PartitionState::Failed(rejected(2)),
        "the position is at the record: stopped at once"
    );
    assert_eq!(t.pending().count(), 1, "persisted with its position");
    let stored = t.get(&a).unwrap().progress(&a, 2);
    assert_eq!(stored.next_offset, 2, "resumes at the rejected record");
    let mut restarted = PartitionTable::default();
    restarted.take(&a, "dc1.orders", 1, false);
    assert!(restarted.start(&a, &Start::Resume(stored), false));
    let PartitionState::Failed(f) = &restarted.get(&a).unwrap().state else {
        panic!("a restart keeps it stopped");
    };
    let pf = f.failure.as_ref().unwrap();
    assert_eq!(
        (pf.type_, pf.requested_offset, pf.reason.as_deref()),
        (
            crate::api::FailureType::RecordRejected,
            2,
            Some("Broker: Message size too large (MessageSizeTooLarge)")
        )
    );
    assert_eq!(restarted.assignment(), vec![], "never fetched");
}

#[test]
fn a_rejected_record_past_the_position_stops_the_partition_when_reached() {
    let a = tp("orders", 0);
    let b = tp("orders", 1);
    // Record 3 rejected in a batch that did not commit (retried, or its transaction
    // aborted): orders/0 is still at 0.
    let mut t = table(&[0, 0]);
    assert!(t.fail_at(&a, rejected(3)));
    let p = t.get(&a).unwrap();
    assert!(p.replicating(), "records 0..3 are replicated first");
    assert_eq!(p.stops_at(), Some(3));
    assert_eq!(p.progress(&a, 2).failure, "", "not yet at the record");
    assert_ne!(
        p.progress(&a, 3).failure,
        "",
        "a commit reaching it persists it"
    );
    assert_eq!(t.assignment(), vec![(a.clone(), 0), (b.clone(), 0)]);
    // (offset, taken): nothing from the rejected record on.
    for (offset, want) in [(0, true), (1, true), (2, true), (3, false), (4, false)] {
        assert_eq!(t.accept("orders", 0, offset), want, "offset {offset}");
    }
    assert!(t.accept("orders", 1, 0), "the other partition goes on");
    // A commit of 0..2 and of orders/1's 0..5.
    let slots = vec![
        BatchPartition {
            tp: a.clone(),
            first: 0,
            last: 2,
            count: 3,
        },
        BatchPartition {
            tp: b.clone(),
            first: 0,
            last: 4,
            count: 5,
        },
    ];
    let outcomes: Vec<PartitionOutcome<()>> = vec![
        PartitionOutcome {
            delivered: vec![(0, 0), (1, 1), (2, 2)],
            failure: None,
            next_offset: 3,
        },
        PartitionOutcome {
            delivered: (0..5).map(|o| (o, o)).collect(),
            failure: None,
            next_offset: 5,
        },
    ];
    let refetch = t.apply_commit(&slots, &outcomes, vec![None, None], &[None, None], 0);
    assert!(refetch, "the stopped partition leaves the assignment");
    assert_eq!(
        t.get(&a).unwrap().state,
        PartitionState::Failed(rejected(3))
    );
    assert_eq!(t.get(&a).unwrap().position, Some(3));
    assert_eq!(t.get(&a).unwrap().stops_at(), None);
    assert!(t.get(&b).unwrap().replicating());
    assert_eq!(t.assignment(), vec![(b.clone(), 5)]);
    // SkipRecord's reset: resumes at 4, nothing else skipped, no stop left.
    assert!(t.reset(&a, 4, "skip", None, (0, 10), 2, false));
    assert_eq!(t.get(&a).unwrap().progress(&a, 4).failure, "");
    assert_eq!(t.assignment(), vec![(a.clone(), 4), (b, 5)]);
    assert!(t.accept("orders", 0, 4));
}

#[test]
fn a_reset_before_the_record_is_reached_lifts_the_stop() {
    let a = tp("orders", 0);
    let mut t = table(&[0]);
    assert!(t.fail_at(&a, rejected(3)));
    assert!(t.reset(&a, 10, "latest", None, (0, 10), 2, false));
    assert_eq!(t.get(&a).unwrap().stops_at(), None);
    t.assignment();
    assert!(t.accept("orders", 0, 10));
}

#[test]
fn long_failures_are_shortened() {
    let mut f = failed(3);
    f.message = "x".repeat(100_000);
    let text = persisted_failure(&f);
    assert!(text.len() < 4096, "{}", text.len());
    assert_eq!(restored_failure(&text).offset, 3);
}

#[test]
fn reload_takes_stored_positions_after_an_unknown_commit() {
    let mut t = table(&[10, 20, 30]);
    let stored: std::collections::HashMap<(String, i32), Progress> = [
        (("orders".to_string(), 0), progress("orders", 0, 15)),
        (("orders".to_string(), 1), progress("orders", 1, 20)),
    ]
    .into();
    let moved = t.reload(&stored);
    assert_eq!(
        moved,
        vec![(tp("orders", 0), 15)],
        "the commit had happened for orders/0"
    );
    assert_eq!(
        t.get(&tp("orders", 2)).unwrap().position,
        Some(30),
        "no progress: kept"
    );
}
