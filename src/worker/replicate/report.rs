//! What the engine reports: the status snapshot (pure), lag gauges and readiness.

use rdkafka::types::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::partitions::PartitionTable;
use super::status::{
    total_lag, validation_failures, worker_state, PartitionSnapshot, WorkerSnapshot,
};
use crate::api::TopicPartitionRef;
use crate::api::{AppliedReset, Delivery, WorkerState};
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::WorkerMetrics;

/// The worker's lifecycle, as the snapshot shows it.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle<'a> {
    pub namespace: &'a str,
    pub flow: &'a str,
    pub index: u32,
    pub count: u32,
    pub delivery: Delivery,
    /// Why the worker cannot replicate at all.
    pub fatal: Option<&'a str>,
    /// Positions are known and the consumer runs.
    pub started: bool,
    pub paused: bool,
    /// Why it is not ready yet (shown while starting).
    pub not_ready: Option<&'a str>,
    /// Records wait and the target acknowledged nothing for too long: why (the worker is
    /// Degraded meanwhile).
    pub stalled: Option<&'a str>,
    pub last_applied_reset: Option<&'a AppliedReset>,
    /// Target topics that cannot take a write, why (the worker is Degraded meanwhile).
    pub unwritable: &'a [String],
}

/// The status snapshot of the owned partitions (sorted by topic and partition).
pub fn snapshot(table: &PartitionTable, life: &Lifecycle<'_>) -> WorkerSnapshot {
    let partitions: Vec<PartitionSnapshot> = table
        .owned()
        .map(|(tp, o)| PartitionSnapshot {
            topic: tp.topic.clone(),
            partition: tp.partition,
            target_topic: o.target_topic.clone(),
            position: o.position,
            high_watermark: o.high,
            lag_records: o.high.zip(o.position).map(|(h, p)| (h - p).max(0)),
            lag_seconds: o.lag_seconds,
            state: o.state.clone(),
        })
        .collect();
    let (state, message) = worker_state(life.fatal, life.started, life.paused, &partitions);
    let mut snap = WorkerSnapshot::starting(
        life.namespace,
        life.flow,
        life.index,
        life.count,
        life.delivery,
    );
    snap.state = state;
    degrade_if_stalled(&mut snap, life.stalled);
    if let (WorkerState::Running, Some(why)) = (snap.state, life.unwritable.first()) {
        snap.state = WorkerState::Degraded;
        snap.message = Some(why.clone());
    }
    snap.unwritable_topics = life.unwritable.to_vec();
    snap.message = snap.message.or(message).or_else(|| {
        (state == WorkerState::Starting)
            .then(|| life.not_ready.map(str::to_string))
            .flatten()
    });
    snap.replication_lag = total_lag(&partitions);
    snap.failures = validation_failures(&partitions);
    snap.partitions = partitions;
    snap.last_applied_reset = life.last_applied_reset.cloned();
    snap
}

/// Lag gauges per partition, owned and failed counts.
pub fn update_gauges(table: &PartitionTable, m: &WorkerMetrics) {
    let mut owned = 0;
    let mut failed = 0;
    for (tp, o) in table.owned() {
        owned += 1;
        if o.state.is_failed() {
            failed += 1;
        }
        let p = tp.partition.to_string();
        if let (Some(high), Some(pos)) = (o.high, o.position) {
            m.lag_records
                .with_label_values(&[&tp.topic, &p])
                .set((high - pos).max(0));
        }
        if let Some(s) = o.lag_seconds {
            m.lag_seconds.with_label_values(&[&tp.topic, &p]).set(s);
        }
    }
    m.partitions_owned.set(owned);
    m.partitions_failed.set(failed);
}

/// A running worker whose records wait for an unanswering target is Degraded, saying why.
pub fn degrade_if_stalled(snap: &mut WorkerSnapshot, stalled: Option<&str>) {
    if let (WorkerState::Running, Some(why)) = (snap.state, stalled) {
        snap.state = WorkerState::Degraded;
        snap.message = Some(why.to_string());
    }
}

/// Why the worker is stalled: records have waited since `waiting` without an
/// acknowledgement from target `target_alias` for at least `stall_after`. Pure.
pub fn stall_reason(
    waiting: Option<Instant>,
    now: Instant,
    stall_after: Duration,
    target_alias: &str,
) -> Option<String> {
    waiting
        .map(|t| now.saturating_duration_since(t))
        .filter(|d| *d >= stall_after)
        .map(|d| {
            format!(
                "target cluster {target_alias} has acknowledged nothing for {} s while records \
                 wait",
                d.as_secs()
            )
        })
}

/// Why the source refuses the worker's reads, from a consumer's authorization error `e`
/// on the source `alias`: what to grant. Pure.
pub fn refusal_reason(alias: &str, e: &dyn std::fmt::Display) -> String {
    format!(
        "source cluster {alias} refuses to let this worker read ({e}): its principal needs \
         Read and Describe on every replicated topic (kafka-acls --add --allow-principal \
         <principal> --operation Read --operation Describe --topic <topic>; docs/SECURITY.md)"
    )
}

/// Why the target refuses the worker's writes, from the authorizer's error `code` (`e`, its
/// text) on the target `alias`: what to grant; `None` for other codes. Pure.
pub fn write_refusal(alias: &str, code: RDKafkaErrorCode, e: &str) -> Option<String> {
    let grant = match code {
        RDKafkaErrorCode::TopicAuthorizationFailed => {
            "Write and Describe on every target topic (kafka-acls --add --allow-principal \
             <principal> --operation Write --operation Describe --topic <target topic>"
        }
        RDKafkaErrorCode::ClusterAuthorizationFailed => {
            "IdempotentWrite on the cluster (brokers before Kafka 3.0; kafka-acls --add \
             --allow-principal <principal> --operation IdempotentWrite --cluster"
        }
        _ => return None,
    };
    Some(format!(
        "target cluster {alias} refuses to let this worker write ({e}): its principal needs \
         {grant}; docs/SECURITY.md)"
    ))
}

/// A read the source refused (a consumer's authorization error; librdkafka reports it once
/// per partition, then retries quietly, and does not say which partition here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: String,
    /// Each owned partition's position when it came.
    pub at: BTreeMap<TopicPartitionRef, i64>,
    /// A partition with records waiting has been seen stuck since.
    pub seen_stuck: bool,
}

impl Refusal {
    pub fn new(why: String, table: &PartitionTable) -> Self {
        let at = table
            .owned()
            .filter_map(|(tp, p)| Some((tp.clone(), p.position?)))
            .collect();
        Self {
            why,
            at,
            seen_stuck: false,
        }
    }
}

/// A refusal after a look at `table`, and whether the worker shows it (Degraded): shown
/// while a partition with records waiting (position below its high watermark) has not moved
/// since the refusal; forgotten once, after that was seen, none is stuck any more. Before
/// the high watermarks show waiting records it is kept but not shown. Pure.
pub fn refusal_now(refused: Option<Refusal>, table: &PartitionTable) -> (Option<Refusal>, bool) {
    let Some(mut r) = refused else {
        return (None, false);
    };
    let stuck = table.owned().any(|(tp, p)| {
        matches!((p.position, p.high, r.at.get(tp)), (Some(pos), Some(high), Some(at)) if pos < high && pos <= *at)
    });
    if stuck {
        r.seen_stuck = true;
        (Some(r), true)
    } else if r.seen_stuck {
        (None, false)
    } else {
        (Some(r), false)
    }
}

/// Since when the worker has waited for the target without an acknowledgement: `None`
/// while nothing is pending; every acknowledgement starts the wait again. Pure.
pub fn waiting_since(
    prev: Option<Instant>,
    pending: bool,
    last_ack: Instant,
    now: Instant,
) -> Option<Instant> {
    if !pending {
        return None;
    }
    match prev {
        Some(t) if last_ack <= t => Some(t),
        _ => Some(now),
    }
}

/// `/readyz` and the `ready` gauge: ready once started, unless fatal or `stalled` (records
/// wait and the target acknowledged nothing for too long: the reason).
pub fn update_readiness(
    readiness: &Readiness,
    m: &WorkerMetrics,
    fatal: Option<&str>,
    started: bool,
    connection_problem: Option<&str>,
    stalled: Option<&str>,
) {
    let ready = started && fatal.is_none() && connection_problem.is_none() && stalled.is_none();
    if let Some(msg) = fatal {
        readiness.set_not_ready(msg.to_string());
    } else if let Some(msg) = connection_problem {
        // Authentication or TLS verification fails: nothing replicates until it is fixed.
        readiness.set_not_ready(msg.to_string());
    } else if !started {
        readiness.set_not_ready("starting");
    } else if let Some(why) = stalled {
        readiness.set_not_ready(why.to_string());
    } else {
        readiness.set_ready();
    }
    m.ready.set(if ready { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::replicate::partitions::Start;
    use crate::worker::replicate::status::{FailureKind, PartitionFailed, PartitionState};
    use pretty_assertions::assert_eq;

    #[test]
    fn a_refused_write_names_what_to_grant() {
        use RDKafkaErrorCode as C;
        // (code, what the reason must say; None: not a refusal)
        let cases: [(C, Option<&[&str]>); 4] = [
            (
                C::TopicAuthorizationFailed,
                Some(&["target cluster dc2", "(E)", "--operation Write", "--topic"]),
            ),
            (
                C::ClusterAuthorizationFailed,
                Some(&[
                    "target cluster dc2",
                    "--operation IdempotentWrite --cluster",
                ]),
            ),
            (C::NotEnoughReplicas, None),
            (C::PurgeQueue, None),
        ];
        for (code, want) in cases {
            let got = write_refusal("dc2", code, "E");
            match (want, &got) {
                (Some(words), Some(why)) => {
                    for w in words {
                        assert!(why.contains(w), "{code:?}: {w} in {why}");
                    }
                }
                (None, None) => {}
                _ => panic!("{code:?}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_refusal_shows_while_a_waiting_partition_is_stuck() {
        let why = refusal_reason(
            "dc1",
            &"Message consumption error: TopicAuthorizationFailed",
        );
        for want in [
            "source cluster dc1",
            "TopicAuthorizationFailed",
            "--operation Read",
        ] {
            assert!(why.contains(want), "{want}: {why}");
        }
        let tp = |topic: &str| TopicPartitionRef {
            topic: topic.into(),
            partition: 0,
        };
        // (position, high) of `orders` (refused) and `heartbeats` (read on).
        let table = |orders: (i64, Option<i64>), beats: (i64, Option<i64>)| {
            let mut t = PartitionTable::default();
            for (name, (pos, high)) in [("orders", orders), ("heartbeats", beats)] {
                t.take(&tp(name), &format!("dc1.{name}"), 1, false);
                t.start(&tp(name), &Start::Fresh(pos), false);
                t.get_mut(&tp(name)).unwrap().high = high;
            }
            t
        };
        let refused = Refusal::new(why.clone(), &table((50, Some(50)), (7, Some(7))));
        assert_eq!(refused.at.len(), 2);
        let seen = Refusal {
            seen_stuck: true,
            ..refused.clone()
        };
        let cases = [
            (
                "nothing refused",
                None,
                table((50, Some(70)), (7, Some(7))),
                (None, false),
            ),
            (
                "high watermarks not known to have moved: kept, not shown",
                Some(refused.clone()),
                table((50, Some(50)), (9, Some(9))),
                (Some(refused.clone()), false),
            ),
            (
                "records wait on a stuck partition, another moves: shown",
                Some(refused.clone()),
                table((50, Some(70)), (9, Some(10))),
                (Some(seen.clone()), true),
            ),
            (
                "the stuck partition moved (READ given back): forgotten",
                Some(seen.clone()),
                table((60, Some(70)), (9, Some(10))),
                (None, false),
            ),
            (
                "still stuck",
                Some(seen.clone()),
                table((50, Some(90)), (12, Some(12))),
                (Some(seen.clone()), true),
            ),
        ];
        for (name, refused, table, want) in cases {
            assert_eq!(refusal_now(refused, &table), want, "{name}");
        }
    }

    fn life<'a>(
        fatal: Option<&'a str>,
        started: bool,
        not_ready: Option<&'a str>,
    ) -> Lifecycle<'a> {
        Lifecycle {
            namespace: "ns",
            flow: "orders",
            index: 1,
            count: 2,
            delivery: Delivery::AtLeastOnce,
            fatal,
            started,
            paused: false,
            not_ready,
            stalled: None,
            last_applied_reset: None,
            unwritable: &[],
        }
    }

    #[test]
    fn waiting_for_the_target() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + std::time::Duration::from_secs(s);
        let cases = [
            ("idle", None, false, at(0), at(10), None),
            ("work arrives", None, true, at(0), at(10), Some(at(10))),
            (
                "still waiting",
                Some(at(10)),
                true,
                at(0),
                at(30),
                Some(at(10)),
            ),
            (
                "an ack restarts the wait",
                Some(at(10)),
                true,
                at(20),
                at(30),
                Some(at(30)),
            ),
            ("done", Some(at(10)), false, at(20), at(30), None),
        ];
        for (name, prev, pending, ack, now, want) in cases {
            assert_eq!(waiting_since(prev, pending, ack, now), want, "{name}");
        }
    }

    #[test]
    fn stalled_after_the_bound() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let bound = Duration::from_secs(20);
        let cases = [
            ("nothing waits", None, at(100), None),
            ("waiting, within the bound", Some(at(0)), at(19), None),
            (
                "waiting for the bound",
                Some(at(0)),
                at(20),
                Some("target cluster dc2 has acknowledged nothing for 20 s while records wait"),
            ),
            (
                "longer",
                Some(at(5)),
                at(50),
                Some("target cluster dc2 has acknowledged nothing for 45 s while records wait"),
            ),
        ];
        for (name, waiting, now, want) in cases {
            assert_eq!(
                stall_reason(waiting, now, bound, "dc2").as_deref(),
                want,
                "{name}"
            );
        }
        let mut running = WorkerSnapshot::starting("ns", "f", 0, 1, Delivery::ExactlyOnce);
        running.state = WorkerState::Running;
        let mut failed = running.clone();
        failed.state = WorkerState::Failed;
        failed.message = Some("fenced".into());
        for (mut snap, stalled, want) in [
            (running.clone(), None, (WorkerState::Running, None)),
            (
                running.clone(),
                Some("slow"),
                (WorkerState::Degraded, Some("slow")),
            ),
            (failed, Some("slow"), (WorkerState::Failed, Some("fenced"))),
        ] {
            degrade_if_stalled(&mut snap, stalled);
            assert_eq!((snap.state, snap.message.as_deref()), want);
        }
    }

    #[test]
    fn snapshots() {
        let mut t = PartitionTable::default();
        for (p, pos) in [(0, 10), (1, 20)] {
            let tp = TopicPartitionRef {
                topic: "orders".into(),
                partition: p,
            };
            t.take(&tp, "dc1.orders", 1, false);
            t.start(&tp, &Start::Fresh(pos), false);
            t.get_mut(&tp).unwrap().high = Some(25);
        }
        let parked = TopicPartitionRef {
            topic: "gone".into(),
            partition: 0,
        };
        t.take(&parked, "dc1.gone", 1, false);
        t.park(&parked);
        let s = snapshot(&t, &life(None, true, None));
        assert_eq!(s.worker_id, "orders-worker-1");
        assert_eq!(s.state, WorkerState::Running);
        assert_eq!(s.partitions.len(), 2, "parked partitions are not reported");
        assert_eq!(s.replication_lag.records, 15 + 5);
        let starting = snapshot(&t, &life(None, false, Some("target cluster dc2: down")));
        assert_eq!(starting.state, WorkerState::Starting);
        assert_eq!(
            starting.message.as_deref(),
            Some("target cluster dc2: down")
        );
        let fatal = snapshot(&t, &life(Some("fenced"), true, Some("x")));
        assert_eq!(
            (fatal.state, fatal.message.as_deref()),
            (WorkerState::Failed, Some("fenced"))
        );
        let why =
            ["topic dc1.orders has replication factor 1 but min.insync.replicas=2".to_string()];
        let unwritable = snapshot(
            &t,
            &Lifecycle {
                unwritable: &why,
                ..life(None, true, None)
            },
        );
        assert_eq!(
            (unwritable.state, unwritable.message.as_deref()),
            (WorkerState::Degraded, Some(why[0].as_str()))
        );
        assert_eq!(unwritable.unwritable_topics, why);
        assert_eq!(
            unwritable.to_worker_status(None).unwritable_topics,
            why,
            "in the status entry"
        );
        t.fail(
            &TopicPartitionRef {
                topic: "orders".into(),
                partition: 1,
            },
            PartitionFailed {
                kind: FailureKind::RecordRejected,
                offset: 20,
                message: "too large".into(),
                failure: None,
            },
        );
        let degraded = snapshot(&t, &life(None, true, None));
        assert_eq!(degraded.state, WorkerState::Degraded);
        assert!(matches!(
            degraded.partitions[1].state,
            PartitionState::Failed(_)
        ));
    }
}
