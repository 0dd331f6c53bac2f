//! The fault suite on Apache Kafka: real worker processes (`mirrorflow worker --flow`)
//! killed, partitioned from their target, their brokers crashed (SIGKILL of the JVM) and
//! restarted under load, partition leaders moved by controlled shutdowns in a three-node
//! cluster, the way users meet faults. Each scenario compares source and target record by
//! record (key, value, headers, timestamp, partition) and prints one `FAULT <scenario>: ...`
//! line with what it counted (`scripts/fault-suite.sh` collects them). No sleep is an
//! assertion: every wait is a bound.
//!
//! ExactlyOnce must show exactly the source records; AtLeastOnce every source record, each
//! partition in order of first appearance, and duplicates within the documented bound: a
//! failed batch or a crash re-sends at most one window, 40,000 records
//! ([`ALO_WINDOW`], `Tuning::batch`), so a scenario with `n` faults may repeat at most
//! `n` × 40,000.
//!
//! Outages last `MIRRORFLOW_FAULT_OUTAGE_SECS` (default 30).

mod fault_support;
mod replication_support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_support::*;
use mirrorflow::api::Delivery;
use mirrorflow::testkit::brokers::{
    kafka_or_skip, produce, proxied_broker_or_skip, BrokerKind, ConsumedRecord, LocalBroker,
};
use mirrorflow::testkit::kafka::KafkaConfig;
use mirrorflow::testkit::proxy::Faults;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;
use replication_support::*;

/// AtLeastOnce's re-send window with the default `spec.workers.inFlightMiB` (records).
const ALO_WINDOW: usize = 40_000;

const PARTITIONS: i32 = 4;

/// A source and a target Apache Kafka of one node each, started together.
async fn kafka_pair() -> Option<(LocalBroker, LocalBroker)> {
    let (s, t) = tokio::join!(
        kafka_or_skip(KafkaConfig::default()),
        kafka_or_skip(KafkaConfig::default())
    );
    Some((s?, t?))
}

/// Checks the copy as `delivery` promises, after `faults` faults; returns the duplicates
/// and the bound they were checked against (0 for ExactlyOnce).
fn check_delivery(
    delivery: Delivery,
    source: &[ConsumedRecord],
    target: &[ConsumedRecord],
    faults: usize,
    what: &str,
) -> (usize, usize) {
    match delivery {
        Delivery::ExactlyOnce => {
            let want = replication_support::content(source);
            let tally = exactness(&want, target, |_| false);
            assert!(tally.exact(), "{what}: {tally:?}");
            (0, 0)
        }
        Delivery::AtLeastOnce => {
            let dups = check_copy(source, target).unwrap_or_else(|e| panic!("{what}: {e}"));
            let total: usize = dups.values().sum();
            let bound = faults * ALO_WINDOW;
            assert!(
                total <= bound,
                "{what}: {total} duplicates, more than {bound} ({faults} faults)"
            );
            (total, bound)
        }
    }
}

/// The duplicates part of a `FAULT` line.
fn dups_text(delivery: Delivery, dups: usize, bound: usize) -> String {
    match delivery {
        Delivery::ExactlyOnce => "0 duplicates".to_owned(),
        Delivery::AtLeastOnce => format!(
            "{dups} duplicates (bound {bound}: one {ALO_WINDOW}-record window per fault), order \
             of first appearance kept"
        ),
    }
}

/// What the FAULT lines say of records the feeder's own retries (a producer without
/// idempotence, through the same faults) wrote twice to the source: the copy must hold both.
fn source_note(source: &[ConsumedRecord]) -> String {
    match repeated_in_source(source) {
        0 => String::new(),
        n => format!(" (the source holds {n} records twice: its producer's retries)"),
    }
}

fn delivery_name(d: Delivery) -> &'static str {
    match d {
        Delivery::ExactlyOnce => "ExactlyOnce",
        Delivery::AtLeastOnce => "AtLeastOnce",
    }
}

/// Source positions reached once every record of `records` is replicated.
fn next_offsets(records: &[ConsumedRecord]) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for r in records {
        out.insert(r.partition, r.offset + 1);
    }
    out
}

/// Produces `chunk` records to `topic` every `every` until stopped (load while a fault
/// happens); returns how many it wrote.
struct Feeder {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Feeder {
    fn start(bootstrap: &str, tag: &str, chunk: usize, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (b, tag, s) = (bootstrap.to_owned(), tag.to_owned(), Arc::clone(&stop));
        let task = tokio::spawn(async move {
            let mut n = 0;
            while !s.load(Ordering::SeqCst) {
                let recs = batch(&tag, PARTITIONS, n, chunk);
                produce(&b, "orders", &recs)
                    .await
                    .unwrap_or_else(|e| panic!("feeding the source: {e}"));
                n += chunk;
                tokio::time::sleep(every).await;
            }
            n
        });
        Self { stop, task }
    }

    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

/// kill -9 of the worker process every 2 s while 200,000 records are produced (AtLeastOnce):
/// nothing lost, each partition in order of first appearance, duplicates within one window
/// per kill. (ExactlyOnce through kills: `tests/exactly_once.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_kill9_during_a_long_flow_kafka() {
    let Some((source, target)) = kafka_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    const TOTAL: usize = 200_000;
    create(&source, "orders", PARTITIONS).await;
    let dir = WorkDir::new();
    let spec = include(
        flow_spec(&source, &target, Delivery::AtLeastOnce),
        &["orders"],
    );
    let mut w = WorkerProcess::start(dir.path(), "kill9", &spec);
    let producer = {
        let sb = sb.clone();
        tokio::spawn(async move {
            for chunk in 0..(TOTAL / 10_000) {
                let b = batch("k", PARTITIONS, chunk * 10_000, 10_000);
                produce(&sb, "orders", &b).await.unwrap();
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        })
    };
    let mut kills = 0;
    while !producer.is_finished() || kills < 8 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        w = w.kill9().restart(dir.path(), "kill9");
        kills += 1;
        assert!(kills < 100, "the producer never finished");
    }
    producer.await.unwrap();
    let src = read_to_end(&sb, "orders", Isolation::Committed).await;
    assert_eq!(src.len(), TOTAL);
    w.wait_positions("orders", &next_offsets(&src)).await;
    w.stop();
    let dst = read_to_end(&tb, "dc1.orders", Isolation::Committed).await;
    let (dups, bound) = check_delivery(
        Delivery::AtLeastOnce,
        &src,
        &dst,
        kills,
        &format!("after {kills} kills"),
    );
    println!(
        "FAULT kill9: {TOTAL} records, {kills} kill -9 of the worker process (AtLeastOnce, \
         Apache Kafka), 0 lost, {}",
        dups_text(Delivery::AtLeastOnce, dups, bound)
    );
}

/// One flow per delivery, side by side on the same brokers and through the same faults:
/// each its own worker process, source alias (`alo`, `eos`) and so target topic.
struct Flows {
    workers: Vec<(Delivery, WorkerProcess, u32)>,
}

impl Flows {
    fn start(
        dir: &std::path::Path,
        name: &str,
        source: &LocalBroker,
        target: &LocalBroker,
    ) -> Self {
        let workers = [Delivery::AtLeastOnce, Delivery::ExactlyOnce]
            .into_iter()
            .map(|d| {
                let mut spec = include(flow_spec(source, target, d), &["orders"]);
                spec.source.alias = alias(d).to_owned();
                let w = WorkerProcess::start(dir, &format!("{name}-{}", alias(d)), &spec);
                let pid = w.pid();
                (d, w, pid)
            })
            .collect();
        Self { workers }
    }

    async fn wait_positions(&mut self, want: &BTreeMap<i32, i64>) {
        for (_, w, _) in &mut self.workers {
            w.wait_positions("orders", want).await;
        }
    }

    /// Watches every worker for `span`: when each first went not ready, and what its status
    /// said then; panics for one that never did.
    async fn watch_unready(&self, span: Duration) -> Vec<(Duration, String)> {
        let begin = Instant::now();
        let mut seen: Vec<Option<(Duration, String)>> = vec![None; self.workers.len()];
        while begin.elapsed() < span {
            for (i, (_, w, _)) in self.workers.iter().enumerate() {
                if seen[i].is_none() && w.ready().await == Some(false) {
                    let said = w
                        .status()
                        .await
                        .and_then(|s| s["message"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    seen[i] = Some((begin.elapsed(), said));
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        seen.into_iter()
            .zip(&self.workers)
            .map(|(s, (d, w, _))| {
                s.unwrap_or_else(|| {
                    panic!(
                        "{}: readiness never went false during the fault:\n{}",
                        delivery_name(*d),
                        w.log_tail()
                    )
                })
            })
            .collect()
    }

    /// Waits (bounded) until every worker is ready.
    async fn wait_ready(&self) {
        let begin = Instant::now();
        for (d, w, _) in &self.workers {
            while w.ready().await != Some(true) {
                assert!(
                    begin.elapsed() < WAIT,
                    "{}: ready again:\n{}",
                    delivery_name(*d),
                    w.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }

    /// Stops every worker (each must be the process it started as), then checks each copy
    /// as its delivery promises; returns (delivery, duplicates, bound) per flow.
    async fn stop_and_check(
        self,
        source: &[ConsumedRecord],
        target_bootstrap: &str,
        faults: usize,
        what: &str,
    ) -> Vec<(Delivery, usize, usize)> {
        let mut out = Vec::new();
        for (d, mut w, pid) in self.workers {
            assert!(
                w.alive() && w.pid() == pid,
                "{what} ({}): the same process throughout:\n{}",
                delivery_name(d),
                w.log_tail()
            );
            w.stop();
            let topic = format!("{}.orders", alias(d));
            let dst = read_to_end(target_bootstrap, &topic, Isolation::Committed).await;
            let (dups, bound) = check_delivery(
                d,
                source,
                &dst,
                faults,
                &format!("{what} ({})", delivery_name(d)),
            );
            out.push((d, dups, bound));
        }
        out
    }
}

fn alias(d: Delivery) -> &'static str {
    match d {
        Delivery::ExactlyOnce => "eos",
        Delivery::AtLeastOnce => "alo",
    }
}

/// The network between worker and target goes silent for the outage (the proxy forwards
/// nothing and keeps connections open) while records wait: each worker process stays up
/// (same pid), turns not ready, recovers by itself when the network does, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_between_worker_and_target_kafka() {
    let Some(source) = kafka_or_skip(KafkaConfig::default()).await else {
        return;
    };
    let Some((target, proxy)) = proxied_broker_or_skip(BrokerKind::Kafka).await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, "orders", PARTITIONS).await;
    let first = batch("a", PARTITIONS, 0, 5_000);
    produce(&sb, "orders", &first).await.unwrap();
    let dir = WorkDir::new();
    let mut flows = Flows::start(dir.path(), "blackhole", &source, &target);
    flows.wait_positions(&ends_of(&first)).await;

    let feeder = Feeder::start(&sb, "b", 500, Duration::from_millis(200));
    tokio::time::sleep(Duration::from_secs(1)).await;
    proxy.set(Faults {
        blackhole: true,
        ..Faults::default()
    });
    let unready = flows.watch_unready(outage()).await;
    proxy.set(Faults::default());
    let healed = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fed = feeder.stop().await;
    let src = read_to_end(&sb, "orders", Isolation::Committed).await;
    flows.wait_positions(&next_offsets(&src)).await;
    flows.wait_ready().await;
    let recovered = healed.elapsed();
    let checked = flows.stop_and_check(&src, &tb, 1, "blackhole").await;
    for ((d, dups, bound), (unready, said)) in checked.into_iter().zip(unready) {
        println!(
            "FAULT blackhole ({}): target silent for {} s while {fed} records arrived, not \
             ready after {} s saying \"{said}\", caught up and ready {} s after the network \
             came back (both flows), same process, {} records{}, 0 lost, {}",
            delivery_name(d),
            outage().as_secs(),
            unready.as_secs(),
            recovered.as_secs(),
            src.len(),
            source_note(&src),
            dups_text(d, dups, bound)
        );
    }
}

/// The target broker's JVM is killed (SIGKILL) while records flow and stays down for the
/// outage, then starts again with what it had on disk; then the source's JVM is killed while
/// the workers read a backlog, and restarted. The same worker processes ride both out:
/// nothing lost, the flows recover by themselves, and their status said what happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_broker_restarts_kafka() {
    let Some((mut source, mut target)) = kafka_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, "orders", PARTITIONS).await;
    let first = batch("a", PARTITIONS, 0, 10_000);
    produce(&sb, "orders", &first).await.unwrap();
    let dir = WorkDir::new();
    let mut flows = Flows::start(dir.path(), "restarts", &source, &target);
    flows.wait_positions(&ends_of(&first)).await;

    let feeder = Feeder::start(&sb, "b", 500, Duration::from_millis(200));
    tokio::time::sleep(Duration::from_secs(2)).await;
    target.stop().unwrap();
    let unready = flows.watch_unready(outage()).await;
    target.restart().await.unwrap();
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fed = feeder.stop().await;
    let so_far = read_to_end(&sb, "orders", Isolation::Committed).await;
    flows.wait_positions(&next_offsets(&so_far)).await;
    let caught_up = back.elapsed();

    // The source crashes while the workers read a backlog.
    let backlog = batch("c", PARTITIONS, 0, 40_000);
    produce(&sb, "orders", &backlog).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    source.stop().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    source.restart().await.unwrap();
    let after = batch("d", PARTITIONS, 0, 5_000);
    produce(&sb, "orders", &after).await.unwrap();
    let src = read_to_end(&sb, "orders", Isolation::Committed).await;
    flows.wait_positions(&next_offsets(&src)).await;
    let checked = flows.stop_and_check(&src, &tb, 2, "broker restarts").await;
    for ((d, dups, bound), (unready, said)) in checked.into_iter().zip(unready) {
        println!(
            "FAULT broker-restarts ({}): target JVM killed (SIGKILL) under load ({fed} records \
             fed) and down {} s: not ready after {} s saying \"{said}\", both flows caught up \
             {} s after the target was back; then the source JVM killed while the workers read \
             a 40,000-record backlog, restarted; same process, {} records{}, 0 lost, {}",
            delivery_name(d),
            outage().as_secs(),
            unready.as_secs(),
            caught_up.as_secs(),
            src.len(),
            source_note(&src),
            dups_text(d, dups, bound)
        );
    }
}

/// Leader, replicas and in-sync replicas of each partition of `topic`.
async fn partition_leaders(bootstrap: &str, topic: &str) -> BTreeMap<i32, (i32, usize, usize)> {
    let (b, t) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &b)
            .create()
            .unwrap();
        let md = c
            .fetch_metadata(Some(&t), Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("metadata of {t}: {e}"));
        md.topics()
            .first()
            .map(|t| {
                t.partitions()
                    .iter()
                    .map(|p| (p.id(), (p.leader(), p.replicas().len(), p.isr().len())))
                    .collect()
            })
            .unwrap_or_default()
    })
    .await
    .unwrap()
}

/// Waits (bounded) until every partition of `topics` has all its replicas in sync.
async fn wait_in_sync(bootstrap: &str, topics: &[&str]) {
    let begin = Instant::now();
    for topic in topics {
        loop {
            let parts = partition_leaders(bootstrap, topic).await;
            if !parts.is_empty() && parts.values().all(|(l, r, isr)| *l >= 0 && r == isr) {
                break;
            }
            assert!(
                begin.elapsed() < WAIT * 2,
                "{topic} never got all replicas in sync: {parts:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// In a three-node cluster (source and target the same cluster, every topic on three
/// replicas), while records flow: the leader of a target partition is shut down (controlled:
/// its leaderships move), then started again; then another node that leads a target
/// partition. The worker processes ride both moves out: nothing lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_leader_moves_kafka() {
    let Some(mut cluster) = kafka_or_skip(KafkaConfig::three_nodes()).await else {
        return;
    };
    let b = cluster.bootstrap_servers();
    create(&cluster, "orders", PARTITIONS).await;
    let first = batch("a", PARTITIONS, 0, 10_000);
    produce(&b, "orders", &first).await.unwrap();
    let dir = WorkDir::new();
    let mut flows = Flows::start(dir.path(), "leaders", &cluster, &cluster);
    flows.wait_positions(&ends_of(&first)).await;
    let targets = ["alo.orders", "eos.orders"];
    wait_in_sync(&b, &["orders", targets[0], targets[1]]).await;

    let feeder = Feeder::start(&b, "b", 500, Duration::from_millis(200));
    let mut moves: Vec<(i32, Vec<String>)> = Vec::new();
    for round in 0..2 {
        let mut leaders = BTreeMap::new();
        for t in targets {
            for (p, (l, _, _)) in partition_leaders(&b, t).await {
                leaders.insert(format!("{t}/{p}"), l);
            }
        }
        // First the leader of alo.orders/0; then a node that leads some target partition and
        // was not shut down yet.
        let node = leaders
            .values()
            .copied()
            .find(|l| !moves.iter().any(|(n, _)| n == l))
            .expect("a leader not moved yet");
        let led: Vec<String> = leaders
            .iter()
            .filter(|(_, l)| **l == node)
            .map(|(tp, _)| tp.clone())
            .collect();
        let kafka = cluster.kafka_mut().unwrap();
        kafka
            .shut_down(usize::try_from(node).unwrap())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for t in targets {
            let after = partition_leaders(&b, t).await;
            assert!(
                after.values().all(|(l, _, _)| *l != node),
                "leadership of {t} moved off node {node}: {after:?}"
            );
        }
        // Replicating on the remaining two nodes for a while.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let kafka = cluster.kafka_mut().unwrap();
        kafka
            .start_node(usize::try_from(node).unwrap())
            .await
            .unwrap();
        wait_in_sync(
            &b,
            &["orders", targets[0], targets[1], "__transaction_state"],
        )
        .await;
        moves.push((node, led));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fed = feeder.stop().await;
    let src = read_to_end(&b, "orders", Isolation::Committed).await;
    flows.wait_positions(&next_offsets(&src)).await;
    let checked = flows
        .stop_and_check(&src, &b, moves.len(), "leader moves")
        .await;
    let moved: Vec<String> = moves
        .iter()
        .map(|(n, led)| format!("node {n} (leader of {})", led.join(" ")))
        .collect();
    for (d, dups, bound) in checked {
        println!(
            "FAULT leader-moves ({}): three nodes, controlled shutdown of {} while {fed} \
             records flowed, each started again; same process, {} records{}, 0 lost, {}",
            delivery_name(d),
            moved.join(", then "),
            src.len(),
            source_note(&src),
            dups_text(d, dups, bound)
        );
    }
}

#[test]
fn check_copy_wants_every_source_record_in_order_of_first_appearance() {
    let rec = |p: i32, k: &str| ConsumedRecord {
        partition: p,
        offset: 0,
        key: Some(k.as_bytes().to_vec()),
        value: None,
        headers: Vec::new(),
        timestamp_ms: Some(1),
    };
    let src = |keys: &[&str]| keys.iter().map(|k| rec(0, k)).collect::<Vec<_>>();
    type Case<'a> = (
        &'a str,
        &'a [&'a str],
        &'a [&'a str],
        Result<usize, &'a str>,
    );
    let cases: [Case; 7] = [
        ("exact", &["a", "b", "c"], &["a", "b", "c"], Ok(0)),
        (
            "a rewind",
            &["a", "b", "c"],
            &["a", "b", "a", "b", "c"],
            Ok(2),
        ),
        (
            "a gap",
            &["a", "b", "c"],
            &["a", "c", "b"],
            Err("before source record 1"),
        ),
        ("lost", &["a", "b", "c"], &["a", "b"], Err("never reached")),
        ("foreign", &["a"], &["a", "x"], Err("not from the source")),
        (
            "the source's own repeat",
            &["a", "b", "a", "c"],
            &["a", "b", "a", "c"],
            Ok(0),
        ),
        (
            "its repeat missing",
            &["a", "b", "a", "c"],
            &["a", "b", "c"],
            Err("before source"),
        ),
    ];
    for (name, s, t, want) in cases {
        let got = check_copy(&src(s), &src(t)).map(|d| d.values().sum::<usize>());
        match (got, want) {
            (Ok(n), Ok(w)) => assert_eq!(n, w, "{name}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{name}: {e}"),
            (got, want) => panic!("{name}: {got:?}, want {want:?}"),
        }
    }
    assert_eq!(repeated_in_source(&src(&["a", "b", "a", "a"])), 2);
}
