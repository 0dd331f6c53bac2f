//! The integrity audit (`mirrorflow audit`, `worker::audit`) on Apache Kafka: a flow runs
//! in-process on the shared source and target, then the audit compares what both hold.
//! Skipped (`SKIPPED ...` on stderr) when Kafka's jars are not fetched, unless
//! `MIRRORFLOW_REQUIRE_BROKERS=1`. Each test prints the audit's table (`--no-capture`).
//! The kill -9 tests run a real `mirrorflow worker --flow` process (`fault_support`).

mod fault_support;
mod replication_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fault_support::{batch, check_copy, now_ms, read_to_end, Isolation, WorkDir, WorkerProcess};
use mirrorflow::api::{Delivery, MirrorFlow, MirrorFlowSpec, ReplicationPolicyType};
use mirrorflow::cli::audit::{audit, render, AuditArgs, AuditOutput, AuditReport};
use mirrorflow::cli::flow_source::FlowSource;
use mirrorflow::testkit::brokers::{
    delete_records_before, delete_topic, produce, watermarks, LocalBroker, ProduceRecord,
};
use mirrorflow::worker::audit::compare::Kind;
use mirrorflow::worker::audit::runner::mismatch_text;
use replication_support::*;

fn spec_for(
    source: &LocalBroker,
    target: &LocalBroker,
    delivery: Delivery,
    topic: &str,
    p: ReplicationPolicyType,
) -> MirrorFlowSpec {
    policy(
        include(shared_flow_spec(source, target, delivery), &[topic]),
        p,
    )
}

/// Replicates until the flow's positions reach `want`, then stops the worker.
async fn replicate(name: &str, spec: &MirrorFlowSpec, topic: &str, want: &BTreeMap<i32, i64>) {
    let mut w = start_worker(name, spec.clone(), 0, 1, test_tuning(25));
    w.wait_positions(topic, want).await;
    w.stop().await.unwrap();
}

/// `mirrorflow audit --flow FILE` of flow `test/name`, printed.
async fn run_audit(name: &str, spec: &MirrorFlowSpec, topic: &str) -> AuditReport {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.yaml");
    let mut flow = MirrorFlow::new(name, spec.clone());
    flow.metadata.namespace = Some("test".into());
    std::fs::write(&path, serde_yaml::to_string(&flow).unwrap()).unwrap();
    let args = AuditArgs {
        source: FlowSource::file(path, dir.path()),
        topic: Some(topic.into()),
        partition: None,
        from: None,
        to: None,
        output: AuditOutput::Table,
        timeout_seconds: 60,
    };
    let report = audit(&args).await.expect("audit runs");
    eprintln!("{}", render(&report));
    // The first finding of each kind, as the Audited condition names it.
    for p in &report.partitions {
        let mut seen = Vec::new();
        for f in &p.outcome.findings {
            if !seen.contains(&f.kind) {
                seen.push(f.kind);
                eprintln!("  {}", mismatch_text(&p.topic, p.partition, f));
            }
        }
    }
    report
}

fn total(r: &AuditReport, kind: Kind) -> u64 {
    r.partitions.iter().map(|p| p.outcome.count(kind)).sum()
}

/// `n` records per partition of `partitions` plus `records`' tombstone and null key on 0.
fn want(partitions: i32, n: i64) -> BTreeMap<i32, i64> {
    (0..partitions)
        .map(|p| (p, if p == 0 { n + 2 } else { n }))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clean_flow_audits_clean_under_prefix_and_identity() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    for (p, delivery, tag) in [
        (
            ReplicationPolicyType::Prefix,
            Delivery::ExactlyOnce,
            "clean-prefix",
        ),
        (
            ReplicationPolicyType::Identity,
            Delivery::AtLeastOnce,
            "clean-identity",
        ),
    ] {
        let topic = unique(tag);
        source.create_topic(&topic, 3, &[]).await.unwrap();
        produce(&sb, &topic, &records("c", 3, 60)).await.unwrap();
        let spec = spec_for(&source, &target, delivery, &topic, p);
        let name = unique(tag);
        replicate(&name, &spec, &topic, &want(3, 60)).await;
        let report = run_audit(&name, &spec, &topic).await;
        assert!(report.clean, "{tag}: {report:?}");
        assert_eq!(report.partitions.len(), 3, "{tag}: every partition audited");
        assert_eq!(total(&report, Kind::Matched), 182, "{tag}");
        for k in [
            Kind::Missing,
            Kind::Extra,
            Kind::Different,
            Kind::Duplicated,
        ] {
            assert_eq!(total(&report, k), 0, "{tag}: {k:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreign_writer_on_the_target_is_found_as_extra() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique("foreign");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    produce(&sb, &topic, &records("a", 1, 30)).await.unwrap();
    let spec = spec_for(
        &source,
        &target,
        Delivery::AtLeastOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    let name = unique("foreign");
    replicate(&name, &spec, &topic, &want(1, 30)).await;
    let target_topic = format!("dc1.{topic}");
    let (_, at) = watermarks(&tb, &target_topic, 0).await.unwrap();
    let foreign = vec![
        ProduceRecord::new("intruder", "one").partition(0),
        ProduceRecord::new("intruder", "two").partition(0),
    ];
    produce(&tb, &target_topic, &foreign).await.unwrap();
    // Replication goes on after them.
    produce(&sb, &topic, &records("b", 1, 10)).await.unwrap();
    replicate(&name, &spec, &topic, &[(0, 32 + 12)].into()).await;

    let report = run_audit(&name, &spec, &topic).await;
    assert!(!report.clean);
    let p = &report.partitions[0].outcome;
    assert_eq!((p.extra, p.missing, p.different), (2, 0, 0), "{p:?}");
    assert_eq!(p.matched, 44);
    let offsets: Vec<Option<i64>> = p.findings.iter().map(|f| f.target_offset).collect();
    assert_eq!(offsets, vec![Some(at), Some(at + 1)]);
    assert!(p.findings.iter().all(|f| f.kind == Kind::Extra));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_recreated_and_refilled_by_another_writer_is_different_and_missing() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique("refilled");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    produce(&sb, &topic, &records("r", 1, 20)).await.unwrap();
    let spec = spec_for(
        &source,
        &target,
        Delivery::AtLeastOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    let name = unique("refilled");
    replicate(&name, &spec, &topic, &want(1, 20)).await;
    // The flow is stopped; someone recreates the target topic and writes 15 records of theirs.
    let target_topic = format!("dc1.{topic}");
    delete_topic(&tb, &target_topic).await.unwrap();
    let deadline = Instant::now() + WAIT;
    while let Err(e) = target.create_topic(&target_topic, 1, &[]).await {
        assert!(Instant::now() < deadline, "recreating {target_topic}: {e}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let theirs: Vec<ProduceRecord> = (0..15)
        .map(|i| ProduceRecord::new(format!("x{i}"), format!("theirs-{i}")).partition(0))
        .collect();
    produce(&tb, &target_topic, &theirs).await.unwrap();

    let report = run_audit(&name, &spec, &topic).await;
    assert!(!report.clean);
    let p = &report.partitions[0].outcome;
    assert_eq!(
        (p.matched, p.different, p.missing, p.extra),
        (0, 15, 7, 0),
        "{p:?}"
    );
    let first = p.first_mismatch().unwrap();
    assert_eq!(
        (first.kind, first.source_offset, first.target_offset),
        (Kind::Different, Some(0), Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_past_the_source_retention_are_skipped_not_reported() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let topic = unique("retained");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    produce(&sb, &topic, &records("t", 1, 40)).await.unwrap();
    let spec = spec_for(
        &source,
        &target,
        Delivery::ExactlyOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    let name = unique("retained");
    replicate(&name, &spec, &topic, &want(1, 40)).await;
    // Retention (DeleteRecords) removes the first 30 source records after replication.
    assert_eq!(delete_records_before(&sb, &topic, 0, 30).await.unwrap(), 30);

    let report = run_audit(&name, &spec, &topic).await;
    assert!(report.clean, "{report:?}");
    let p = &report.partitions[0].outcome;
    assert_eq!(p.matched, 12, "{p:?}");
    assert_eq!(
        p.skipped, 30,
        "the target copies of what the source no longer holds"
    );
    assert_eq!((p.missing, p.extra, p.different), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn copies_written_twice_are_duplicates_flagged_under_exactly_once() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique("twice");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    produce(&sb, &topic, &records("d", 1, 20)).await.unwrap();
    let spec = spec_for(
        &source,
        &target,
        Delivery::ExactlyOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    let name = unique("twice");
    replicate(&name, &spec, &topic, &want(1, 20)).await;
    // Someone re-sends the copies of source records 15..20 (a replay a transaction would
    // have prevented), then replication goes on.
    let target_topic = format!("dc1.{topic}");
    let (_, at) = watermarks(&tb, &target_topic, 0).await.unwrap();
    let again: Vec<ProduceRecord> = read_n(&sb, &topic, 22).await[15..20]
        .iter()
        .map(|r| ProduceRecord {
            partition: Some(0),
            key: r.key.clone(),
            value: r.value.clone(),
            headers: r.headers.clone(),
            timestamp_ms: r.timestamp_ms,
        })
        .collect();
    produce(&tb, &target_topic, &again).await.unwrap();
    produce(&sb, &topic, &records("e", 1, 5)).await.unwrap();
    replicate(&name, &spec, &topic, &[(0, 22 + 7)].into()).await;

    let report = run_audit(&name, &spec, &topic).await;
    assert!(!report.clean, "duplicates under ExactlyOnce are a mismatch");
    let p = &report.partitions[0].outcome;
    assert_eq!((p.duplicated, p.matched), (5, 29), "{p:?}");
    assert_eq!((p.missing, p.extra, p.different), (0, 0, 0));
    assert!(p.duplicates_flagged);
    assert_eq!(p.findings[0].target_offset, Some(at));
}

/// The worker's continuous audit (`spec.audit`, every 10 s here): clean at first; a foreign
/// record written into the target between replicated ones shows in the worker's entry as
/// an extra naming topic, partition and offset, and in the metric, while replication goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_continuous_audit_reports_a_foreign_record_and_replication_goes_on() {
    use std::sync::Arc;

    use mirrorflow::telemetry::http::get_text;
    use mirrorflow::worker::process::sinks::WorkerSink;
    use mirrorflow::worker::replicate::WorkerSnapshot;

    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique("continuous");
    source.create_topic(&topic, 1, &[]).await.unwrap();
    produce(&sb, &topic, &records("a", 1, 30)).await.unwrap();
    let mut spec = spec_for(
        &source,
        &target,
        Delivery::ExactlyOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    spec.audit.interval_seconds = 10;
    let name = unique("continuous");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.yaml");
    let mut flow = MirrorFlow::new(&name, spec);
    flow.metadata.namespace = Some("test".into());
    std::fs::write(&path, serde_yaml::to_string(&flow).unwrap()).unwrap();
    let (tx, mut rx) = tokio::sync::watch::channel(WorkerSnapshot::starting(
        "test",
        &name,
        0,
        1,
        Delivery::ExactlyOnce,
    ));
    let sinks: Vec<Arc<dyn WorkerSink>> = vec![Arc::new(tx)];
    let args = standalone_args(&path, dir.path());
    let w = Standalone::start(&args, sinks);
    let deadline = Instant::now() + WAIT;
    let mut wait = async |what: &str, pred: &dyn Fn(&WorkerSnapshot) -> bool| loop {
        if pred(&rx.borrow_and_update()) {
            return rx.borrow().clone();
        }
        assert!(Instant::now() < deadline, "{what}: {:?}", rx.borrow().audit);
        let _ = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
    };
    let snap = wait("a clean run over the 32 records", &|s| {
        s.audit
            .as_ref()
            .is_some_and(|a| a.last_run_time.is_some() && a.records.compared >= 32)
    })
    .await;
    let a = snap.audit.unwrap();
    assert!(a.mismatches.is_empty() && a.last_error.is_none(), "{a:?}");

    let target_topic = format!("dc1.{topic}");
    let (_, at) = watermarks(&tb, &target_topic, 0).await.unwrap();
    produce(
        &tb,
        &target_topic,
        &[ProduceRecord::new("intruder", "x").partition(0)],
    )
    .await
    .unwrap();
    produce(&sb, &topic, &records("b", 1, 5)).await.unwrap();
    let want = format!("extra in {topic}/0: target offset {at}");
    let snap = wait("the foreign record reported", &|s| {
        s.audit
            .as_ref()
            .is_some_and(|a| a.mismatches.iter().any(|m| m == &want))
    })
    .await;
    eprintln!("worker entry audit: {:?}", snap.audit);
    let replicated = snap
        .partitions
        .iter()
        .find(|p| p.topic == topic)
        .and_then(|p| p.position);
    assert_eq!(replicated, Some(32 + 7), "replication went on");
    let (_, metrics) = get_text(args.listen, "/metrics").await.unwrap();
    let extra = metrics
        .lines()
        .find(|l| l.starts_with("mirrorflow_worker_audit_records_total{result=\"extra\"}"))
        .expect("the audit metric");
    assert!(!extra.ends_with(" 0"), "{extra}");
    w.stop().await;
}

/// Source records produced while the flow's worker process is killed with SIGKILL after lives
/// of 2 to 3.5 s (long enough to be copying, not only starting; at least `min_kills` times),
/// then replicated to the end; with `until_duplicates`, more rounds of the same (up to
/// [`KILL_ROUNDS`]) until a kill landed between a send and its progress. Returns the audit of
/// the target, the duplicates per partition a record-by-record reading of both topics finds,
/// and how many records the source holds.
async fn audit_after_kills(
    delivery: Delivery,
    tag: &str,
    min_kills: usize,
    until_duplicates: bool,
) -> Option<(AuditReport, BTreeMap<i32, usize>, u64)> {
    const PARTITIONS: i32 = 2;
    // Small chunks often: records are being copied whenever a kill lands.
    const CHUNK: usize = 500;
    const CHUNKS: usize = 40;
    const LIVES_MS: [u64; 3] = [2_000, 3_500, 2_500];
    let (source, target) = shared_pair().await?;
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    let topic = unique(tag);
    source.create_topic(&topic, PARTITIONS, &[]).await.unwrap();
    let spec = spec_for(
        &source,
        &target,
        delivery,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    let name = unique(tag);
    let dir = WorkDir::new();
    let mut w = WorkerProcess::start(dir.path(), &name, &spec);
    let mut kills = 0;
    for round in 0..KILL_ROUNDS {
        let producer = {
            let (sb, topic) = (sb.clone(), topic.clone());
            tokio::spawn(async move {
                for chunk in round * CHUNKS..(round + 1) * CHUNKS {
                    let b = batch(&topic, PARTITIONS, chunk * CHUNK, CHUNK);
                    produce(&sb, &topic, &b).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        };
        let mut round_kills = 0;
        while !producer.is_finished() || round_kills < min_kills {
            tokio::time::sleep(Duration::from_millis(LIVES_MS[kills % LIVES_MS.len()])).await;
            assert!(w.alive(), "the worker died by itself:\n{}", w.log_tail());
            w = w.kill9().restart(dir.path(), &name);
            kills += 1;
            round_kills += 1;
            assert!(round_kills < 100, "the producer never finished");
        }
        producer.await.unwrap();
        let src = read_to_end(&sb, &topic, Isolation::Committed).await;
        assert_eq!(src.len(), CHUNK * CHUNKS * (round + 1));
        let ends: BTreeMap<i32, i64> = src.iter().map(|r| (r.partition, r.offset + 1)).collect();
        w.wait_positions(&topic, &ends).await;
        let dst = read_to_end(&tb, &format!("dc1.{topic}"), Isolation::Committed).await;
        let dups = check_copy(&src, &dst).unwrap_or_else(|e| panic!("after {kills} kills: {e}"));
        eprintln!("{tag}: {kills} kill -9 of the worker, duplicates on the target: {dups:?}");
        let last = round + 1 == KILL_ROUNDS;
        if !until_duplicates || dups.values().sum::<usize>() > 0 || last {
            w.stop();
            let report = run_audit(&name, &spec, &topic).await;
            return Some((report, dups, src.len() as u64));
        }
    }
    unreachable!("the last round returns")
}

/// Rounds of [`audit_after_kills`] at most.
const KILL_ROUNDS: usize = 3;

/// AtLeastOnce re-sends after a kill -9 that lands between a send and its progress (records
/// flow all along, and rounds of kills go on until one did: a run of 8 kills had none): the
/// audit counts every duplicate the target holds (as a reading of both topics does) and, each
/// run within the duplicate bound (one window per kill), flags none and finds nothing
/// missing, extra or different.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_least_once_through_kill9_duplicates_are_counted_not_flagged() {
    let Some((report, dups, records)) =
        audit_after_kills(Delivery::AtLeastOnce, "alo-kill9", 4, true).await
    else {
        return;
    };
    assert!(report.clean, "{report:?}");
    assert_eq!(report.partitions.len(), 2);
    for p in &report.partitions {
        let o = &p.outcome;
        assert_eq!(
            o.duplicated, dups[&p.partition] as u64,
            "partition {}: the audit's duplicates are the target's",
            p.partition
        );
        assert!(!o.duplicates_flagged, "{o:?}");
        assert_eq!((o.missing, o.extra, o.different), (0, 0, 0), "{o:?}");
        assert!(o.findings.is_empty(), "{o:?}");
    }
    let duplicated = total(&report, Kind::Duplicated);
    assert!(
        duplicated > 0,
        "the kills made no re-send in {KILL_ROUNDS} rounds: the test proves nothing"
    );
    assert_eq!(total(&report, Kind::Matched), records);
}

/// ExactlyOnce through kill -9: the audit finds every record once, nothing of any other kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_once_through_kill9_audits_with_nothing_of_any_kind() {
    let Some((report, dups, records)) =
        audit_after_kills(Delivery::ExactlyOnce, "eos-kill9", 4, false).await
    else {
        return;
    };
    assert!(dups.values().all(|d| *d == 0), "{dups:?}");
    assert!(report.clean, "{report:?}");
    assert_eq!(report.partitions.len(), 2);
    assert_eq!(total(&report, Kind::Matched), records);
    for k in [
        Kind::Missing,
        Kind::Extra,
        Kind::Different,
        Kind::Duplicated,
        Kind::Skipped,
    ] {
        assert_eq!(total(&report, k), 0, "{k:?}");
    }
}

/// A compacted source topic whose log cleaner removed overwritten records after they were
/// replicated: their copies on the target are skipped and counted, never a mismatch. (The
/// target topic is compacted too but keeps every copy: the settings that make the source's
/// cleaner run early do not travel.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_a_compacted_source_removed_are_skipped_not_reported() {
    let Some((source, target)) = shared_pair().await else {
        return;
    };
    let sb = source.bootstrap_servers();
    let topic = unique("compacted");
    source
        .create_topic(
            &topic,
            1,
            &[
                ("cleanup.policy", "compact"),
                ("segment.ms", "100"),
                ("min.cleanable.dirty.ratio", "0.001"),
                ("min.compaction.lag.ms", "0"),
            ],
        )
        .await
        .unwrap();
    // Ten keys written three times: the cleaner keeps the last round only.
    let round = |r: usize| -> Vec<ProduceRecord> {
        (0..10)
            .map(|k| {
                ProduceRecord::new(format!("key-{k}"), format!("round-{r}-{k}"))
                    .partition(0)
                    .timestamp(now_ms())
            })
            .collect()
    };
    for r in 0..3 {
        produce(&sb, &topic, &round(r)).await.unwrap();
    }
    let mut spec = spec_for(
        &source,
        &target,
        Delivery::AtLeastOnce,
        &topic,
        ReplicationPolicyType::Prefix,
    );
    spec.topic_configs.exclude = vec![
        "segment\\.ms".into(),
        "min\\.cleanable\\.dirty\\.ratio".into(),
    ];
    let name = unique("compacted");
    replicate(&name, &spec, &topic, &[(0, 30)].into()).await;
    // New keys after segment.ms roll the segment, so the first three rounds can be cleaned.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fresh: Vec<ProduceRecord> = (0..5)
        .map(|i| {
            ProduceRecord::new(format!("fresh-{i}"), "v")
                .partition(0)
                .timestamp(now_ms())
        })
        .collect();
    produce(&sb, &topic, &fresh).await.unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let held = read_to_end(&sb, &topic, Isolation::Committed).await;
        if held.len() == 15 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner never compacted {topic}: {} records held",
            held.len()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    replicate(&name, &spec, &topic, &[(0, 35)].into()).await;

    let report = run_audit(&name, &spec, &topic).await;
    assert!(report.clean, "{report:?}");
    let p = &report.partitions[0].outcome;
    // A segment the cleaner emptied may be deleted, moving the log start past its offsets:
    // those are outside what the source holds, not skipped. The target topic is compacted
    // too (its cleanup.policy is synced): copies its own cleaner removed are held by neither
    // side and not counted either.
    let (low, _) = watermarks(&sb, &topic, 0).await.unwrap();
    let held = read_to_end(
        &target.bootstrap_servers(),
        &format!("dc1.{topic}"),
        Isolation::Committed,
    )
    .await
    .len() as u64;
    assert_eq!(
        (
            p.matched,
            p.skipped + u64::try_from(low).unwrap() + 35u64.saturating_sub(held)
        ),
        (15, 20),
        "the copies of the 20 overwritten records are skipped (source log start {low}, {held} \
         copies held by the target): {p:?}"
    );
    assert_eq!(
        (p.missing, p.extra, p.different, p.duplicated),
        (0, 0, 0, 0)
    );
}
