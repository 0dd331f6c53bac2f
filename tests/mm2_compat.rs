//! MirrorMaker 2 compatibility, both ways, with MM2's own Java code on Apache Kafka: two
//! clusters per test, `dc1` the source and `dc2` the target.
//!
//! - MM2's `RemoteClusterUtils.translateOffsets` reads mirrorflow's checkpoints, and MM2's
//!   `OffsetSync` reads mirrorflow's offset syncs;
//! - MM2 itself (dedicated mode) writes offset syncs and checkpoints that mirrorflow's
//!   `translate` and its offset-sync store read to MM2's own answer, never past a record a
//!   group has not consumed;
//! - `MirrorClient` reads mirrorflow's heartbeats, and mirrorflow replicates MM2's.
//!
//! MM2's classes run in `tests/java/Mm2Compat.java`, compiled by the test. Prints MM2's start
//! time and memory. Skipped with a `SKIPPED` line when the jars are not fetched, unless
//! `MIRRORFLOW_REQUIRE_BROKERS=1`.

mod replication_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mirrorflow::kafka::wire::{Checkpoint, Heartbeat, OffsetSync};
use mirrorflow::testkit::brokers::{
    consume_all, create_topic, kafka_or_skip, produce, topic_partitions, watermarks, ConsumeUntil,
    ConsumedRecord, LocalBroker, ProduceRecord,
};
use mirrorflow::testkit::java::JavaProgram;
use mirrorflow::testkit::kafka::KafkaConfig;
use mirrorflow::testkit::mirror_maker::{
    mirror_maker_install_or_skip, mirror_maker_or_skip, MirrorMaker, MirrorMakerConfig, Mm2Flow,
    Periodic,
};
use mirrorflow::worker::checkpoint::store::SyncStore;
use mirrorflow::worker::checkpoint::translate::clamp_to_target_end;
use mirrorflow::worker::replicate::migrate::Mm2Positions;
use pretty_assertions::assert_eq;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use replication_support::{standalone_args, Standalone};

/// Bound of every wait (the machine is shared and JVMs start slowly there).
const WAIT: Duration = Duration::from_secs(180);
const PARTITIONS: i32 = 3;
const GROUPS: [&str; 3] = ["billing", "audit", "search"];

/// `(group, target topic, partition)` → target offset.
type Offsets = BTreeMap<(String, String, i32), i64>;

struct Clusters {
    dc1: LocalBroker,
    dc2: LocalBroker,
    dir: tempfile::TempDir,
    /// `tests/java/Mm2Compat.java` compiled against MM2's jars.
    java: JavaProgram,
}

impl Clusters {
    /// Two one-node clusters and the Java program, started and compiled side by side.
    async fn start() -> Option<Clusters> {
        let classpath = mirror_maker_install_or_skip()?.classpath();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/Mm2Compat.java");
        let (dc1, dc2, java) = tokio::join!(
            kafka_or_skip(KafkaConfig::default()),
            kafka_or_skip(KafkaConfig::default()),
            JavaProgram::compile(&source, &classpath)
        );
        let (dc1, dc2, java) = (dc1?, dc2?, java.unwrap());
        eprintln!(
            "two Apache Kafka {} clusters started in {:?} and {:?} (Mm2Compat.java compiled beside them)",
            dc1.kafka().unwrap().version(),
            dc1.started_in(),
            dc2.started_in()
        );
        Some(Clusters {
            dc1,
            dc2,
            dir: tempfile::tempdir().unwrap(),
            java,
        })
    }

    fn src(&self) -> String {
        self.dc1.bootstrap_servers()
    }

    fn dst(&self) -> String {
        self.dc2.bootstrap_servers()
    }

    /// Writes the flow file: dc1 → dc2 of `orders`, heartbeats every `heartbeat_seconds`,
    /// and the `extra` YAML documents.
    fn flow_file(&self, heartbeat_seconds: u32, extra: &str) -> PathBuf {
        let path = self.dir.path().join("flow.yaml");
        std::fs::write(
            &path,
            format!(
                "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: compat}}
spec:
  source: {{alias: dc1, bootstrapServers: '{}'}}
  target: {{alias: dc2, bootstrapServers: '{}'}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
  heartbeats: {{intervalSeconds: {heartbeat_seconds}}}
{extra}",
                self.src(),
                self.dst()
            ),
        )
        .unwrap();
        path
    }

    fn secrets(&self) -> PathBuf {
        self.dir.path().join("secrets")
    }
}

/// The records at source offsets `range` in each of the 3 partitions of `orders` on dc1
/// (created with the first); a record's value names its source position
/// (`orders-<partition>-<offset>`).
async fn produce_orders(c: &Clusters, range: std::ops::Range<i64>) {
    produce_orders_to(&c.src(), range).await;
}

/// [`produce_orders`] to the cluster at `bootstrap`.
async fn produce_orders_to(bootstrap: &str, range: std::ops::Range<i64>) {
    if range.start == 0 {
        create_topic(bootstrap, "orders", PARTITIONS, &[])
            .await
            .unwrap();
    }
    let records: Vec<ProduceRecord> = range
        .clone()
        .flat_map(|i| {
            (0..PARTITIONS).map(move |p| {
                ProduceRecord::new(format!("k{i}"), format!("orders-{p}-{i}")).partition(p)
            })
        })
        .collect();
    let delivered = produce(bootstrap, "orders", &records).await.unwrap();
    assert!(delivered.iter().all(|d| range.contains(&d.offset)));
}

/// Commits each group's offsets of `orders` on dc1, as one of its consumers would, with
/// metadata `<group>:<partition>` (checkpoints carry it).
async fn commit_groups(c: &Clusters, groups: &[(&str, &[(i32, i64)])]) {
    for (group, at) in groups {
        let (bootstrap, group, at) = (c.src(), (*group).to_owned(), at.to_vec());
        tokio::task::spawn_blocking(move || {
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &bootstrap)
                .set("group.id", &group)
                .set("enable.auto.commit", "false")
                .create()
                .unwrap();
            let mut tpl = TopicPartitionList::new();
            for (p, o) in at {
                tpl.add_partition_offset("orders", p, Offset::Offset(o))
                    .unwrap();
                tpl.find_partition("orders", p)
                    .unwrap()
                    .set_metadata(metadata(&group, p));
            }
            // A fresh cluster's group coordinator may still be loading: retry, bounded.
            let deadline = Instant::now() + WAIT;
            while let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
                assert!(Instant::now() < deadline, "commit group {group}: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
        })
        .await
        .unwrap();
    }
}

fn metadata(group: &str, partition: i32) -> String {
    format!("{group}:{partition}")
}

/// The source position a replicated record of `orders` carries in its value.
fn source_position(r: &ConsumedRecord) -> (i32, i64) {
    let v = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
    let mut parts = v
        .strip_prefix("orders-")
        .expect("an orders record")
        .split('-');
    let p = parts.next().unwrap().parse().unwrap();
    let o = parts.next().unwrap().parse().unwrap();
    (p, o)
}

/// What `mirrorflow translate -o json` prints for `group`: `(topic, partition)` →
/// `(sourceOffset, targetOffset)`; `Err` with its stderr while it has nothing to say.
async fn mirrorflow_translate(
    flow: &Path,
    secrets: &Path,
    group: &str,
) -> Result<BTreeMap<(String, i32), (i64, i64)>, String> {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_mirrorflow"))
        .arg("translate")
        .arg("--flow")
        .arg(flow)
        .arg("--secrets-dir")
        .arg(secrets)
        .args(["--group", group, "-o", "json", "--timeout-seconds", "30"])
        .output()
        .await
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Ok(report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                (
                    row["topic"].as_str().unwrap().to_owned(),
                    i32::try_from(row["partition"].as_i64().unwrap()).unwrap(),
                ),
                (
                    row["sourceOffset"].as_i64().unwrap(),
                    row["targetOffset"].as_i64().unwrap(),
                ),
            )
        })
        .collect())
}

/// `mirrorflow translate` for every group of [`GROUPS`]: the target offsets and the source
/// offsets they translate.
async fn translate_all(
    flow: &Path,
    secrets: &Path,
) -> Result<(Offsets, BTreeMap<(String, String, i32), i64>), String> {
    let (mut target, mut source) = (Offsets::new(), BTreeMap::new());
    for group in GROUPS {
        for ((topic, p), (up, down)) in mirrorflow_translate(flow, secrets, group).await? {
            target.insert((group.to_owned(), topic.clone(), p), down);
            source.insert((group.to_owned(), topic, p), up);
        }
    }
    Ok((target, source))
}

/// Polls the translated offsets once a second until `poll` accepts what it read (`Ok`), and
/// returns that: they improve as offset syncs and checkpoints arrive. After [`WAIT`] it fails
/// with `failure` of what the last poll saw.
async fn wait_translated<T, S, F>(
    mut poll: impl FnMut() -> F,
    failure: impl FnOnce(S) -> String,
) -> T
where
    F: std::future::Future<Output = Result<T, S>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        match poll().await {
            Ok(done) => return done,
            Err(seen) if Instant::now() >= deadline => panic!("{}", failure(seen)),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// MM2's `RemoteClusterUtils.translateOffsets` on `bootstrap` for the groups of `remote`:
/// the offsets, and the metadata they carry.
async fn mm2_translate(
    java: &JavaProgram,
    bootstrap: &str,
    remote: &str,
) -> (Offsets, BTreeMap<(String, String, i32), String>) {
    let mut args = vec!["translate", bootstrap, remote];
    args.extend(GROUPS);
    let out = java.run(&args, WAIT).await.unwrap();
    let (mut offsets, mut metadata) = (Offsets::new(), BTreeMap::new());
    for line in out.lines() {
        let f: Vec<&str> = line.splitn(6, ' ').collect();
        assert_eq!((f.len(), f[0]), (6, "offset"), "{line}");
        let key = (f[1].to_owned(), f[2].to_owned(), f[3].parse().unwrap());
        offsets.insert(key.clone(), f[4].parse().unwrap());
        let m = f[5].strip_prefix('[').and_then(|m| m.strip_suffix(']'));
        metadata.insert(key, m.unwrap_or_else(|| panic!("{line}")).to_owned());
    }
    (offsets, metadata)
}

/// The metadata each committed partition carries.
fn committed_metadata(
    committed: &BTreeMap<(String, String, i32), i64>,
) -> BTreeMap<(String, String, i32), String> {
    committed
        .keys()
        .map(|k| (k.clone(), metadata(&k.0, k.2)))
        .collect()
}

/// The committed source offsets as `(group, target topic, partition)` → offset.
fn committed(
    groups: &[(&str, &[(i32, i64)])],
    target_topic: &str,
) -> BTreeMap<(String, String, i32), i64> {
    groups
        .iter()
        .flat_map(|(g, at)| {
            at.iter()
                .map(move |(p, o)| (((*g).to_owned(), target_topic.to_owned(), *p), *o))
        })
        .collect()
}

/// Every target offset `translated` gives is safe: no record below it on the target has a
/// source offset at or past the group's (nothing unconsumed is skipped). Returns, per
/// partition, the records the group reads again from there.
fn check_never_past(
    translated: &Offsets,
    committed: &BTreeMap<(String, String, i32), i64>,
    target: &[ConsumedRecord],
) -> BTreeMap<(String, String, i32), usize> {
    let mut rereads = BTreeMap::new();
    for (key, &at) in translated {
        let o = committed[key];
        let (_, _, p) = key;
        let mut again = 0;
        for r in target.iter().filter(|r| r.partition == *p) {
            let (sp, so) = source_position(r);
            assert_eq!(sp, *p, "replicated to the same partition");
            if r.offset < at {
                assert!(
                    so < o,
                    "{key:?}: target offset {at} skips source offset {so} (target offset {}) the group, at {o}, has not consumed",
                    r.offset
                );
            } else if so < o {
                again += 1;
            }
        }
        rereads.insert(key.clone(), again);
    }
    rereads
}

/// MM2's answer and mirrorflow's `translate` on mirrorflow's checkpoints: three groups, the
/// flow ExactlyOnce (transaction markers on the target move its offsets off the source's),
/// and mirrorflow's offset syncs read by MM2's `OffsetSync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mm2_translates_offsets_from_mirrorflow_checkpoints() {
    let begin = Instant::now();
    let Some(c) = Clusters::start().await else {
        return;
    };
    produce_orders(&c, 0..100).await;
    let java = &c.java;
    let flow = c.flow_file(
        1,
        "---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {name: groups}
spec:
  flowRef: {name: compat}
  groups: {include: [billing, audit, search], refreshIntervalSeconds: 1}
  intervalSeconds: 1
",
    );
    let started = Instant::now();
    let worker = Standalone::start(&standalone_args(&flow, &c.secrets()), Vec::new());
    let first = wait_first_record(started, &c.dst(), "dc1.orders", String::new).await;
    // In two rounds, so the target holds a transaction's markers between them: target
    // offsets drift from the source's.
    consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::count(300).timeout(WAIT),
    )
    .await
    .unwrap();
    produce_orders(&c, 100..200).await;
    let groups: [(&str, &[(i32, i64)]); 3] = [
        ("billing", &[(0, 0), (1, 120), (2, 200)]),
        ("audit", &[(0, 200), (1, 199), (2, 1)]),
        ("search", &[(0, 77), (2, 150)]),
    ];
    commit_groups(&c, &groups).await;

    // Exact answers, from the target: where each source position landed (past the last
    // record for a group that consumed everything).
    let target = consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::count(600).timeout(WAIT),
    )
    .await
    .unwrap();
    assert_eq!(target.len(), 600, "every record replicated once");
    let landed: BTreeMap<(i32, i64), i64> = target
        .iter()
        .map(|r| (source_position(r), r.offset))
        .collect();
    let committed = committed(&groups, "dc1.orders");
    let exact: Offsets = committed
        .iter()
        .map(|(k, &o)| {
            let at = landed
                .get(&(k.2, o))
                .copied()
                .unwrap_or_else(|| landed[&(k.2, o - 1)] + 1);
            (k.clone(), at)
        })
        .collect();

    // The checkpoints improve as offset syncs arrive; wait until they are exact.
    let (flow_path, secrets, exact_ref, committed_ref) =
        (flow.as_path(), &c.secrets(), &exact, &committed);
    let printed = wait_translated(
        || async move {
            match translate_all(flow_path, secrets).await {
                Ok((target_offsets, source_offsets))
                    if target_offsets == *exact_ref && source_offsets == *committed_ref =>
                {
                    Ok(target_offsets)
                }
                last => Err(last),
            }
        },
        |last| {
            format!(
                "mirrorflow's checkpoints not exact in time: translate says {last:?}, exact is {exact:?}"
            )
        },
    )
    .await;
    worker.stop().await;

    let (mm2, mm2_metadata) = mm2_translate(java, &c.dst(), "dc1").await;
    assert_eq!(
        mm2, printed,
        "RemoteClusterUtils.translateOffsets and `mirrorflow translate` on mirrorflow's checkpoints"
    );
    assert_eq!(
        mm2_metadata,
        committed_metadata(&committed),
        "the groups' commit metadata, through mirrorflow's checkpoints"
    );
    let rereads = check_never_past(&mm2, &committed, &target);
    assert!(rereads.values().all(|n| *n == 0), "{rereads:?}");
    assert!(
        mm2.iter().any(|(k, at)| committed[k] != *at),
        "the markers moved some target offsets off the source's: {mm2:?}"
    );
    eprintln!("(a) committed on dc1 {committed:?}");
    eprintln!("(a) RemoteClusterUtils.translateOffsets = mirrorflow translate = {mm2:?}");

    // MM2's OffsetSync reads mirrorflow's offset syncs as mirrorflow's own decoder does.
    let syncs_topic = "mm2-offset-syncs.dc1.internal";
    let ours: Vec<String> = consume_all(
        &c.dst(),
        syncs_topic,
        ConsumeUntil::idle(Duration::from_secs(2)),
    )
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let s = OffsetSync::decode(r.key.as_deref().unwrap(), r.value.as_deref().unwrap()).unwrap();
        format!(
            "sync {} {} {} {} {}",
            r.offset, s.topic, s.partition, s.upstream_offset, s.downstream_offset
        )
    })
    .collect();
    let theirs: Vec<String> = java
        .run(&["syncs", &c.dst(), syncs_topic], WAIT)
        .await
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(!ours.is_empty());
    assert_eq!(
        theirs, ours,
        "MM2's OffsetSync on mirrorflow's offset syncs"
    );
    eprintln!(
        "(a) {} offset syncs decoded alike by MM2 and mirrorflow; the in-process worker's \
         first record on dc2 after {first:?}; test took {:?}",
        ours.len(),
        begin.elapsed()
    );
}

/// MM2 in dedicated mode replicates `orders` with its defaults (offset syncs on the source
/// every 100 records, checkpoints), three groups committed on dc1: mirrorflow's `translate`
/// reads MM2's checkpoints, and mirrorflow's offset-sync store reads MM2's offset syncs, both
/// to exactly MM2's own answer; none skips a record a group has not consumed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mirrorflow_reads_mm2_offset_syncs_and_checkpoints() {
    let begin = Instant::now();
    let Some(c) = Clusters::start().await else {
        return;
    };
    const PER_PARTITION: i64 = 250;
    produce_orders(&c, 0..PER_PARTITION).await;
    let java = &c.java;
    // At MM2's syncs (0, 101, 202, 249 with offset.lag.max 100), between them, and at the end.
    let groups: [(&str, &[(i32, i64)]); 3] = [
        ("billing", &[(0, 0), (1, 101), (2, 250)]),
        ("audit", &[(0, 150), (1, 249), (2, 5)]),
        ("search", &[(0, 202), (2, 203)]),
    ];
    commit_groups(&c, &groups).await;

    let mut config = MirrorMakerConfig::pair(("dc1", &c.src()), ("dc2", &c.dst()), &["orders"]);
    config.checkpoints = Periodic::on(1);
    config.refresh_topics_seconds = 5;
    config.refresh_groups_seconds = 5;
    // Held-back offset syncs go out when a task commits: every second, not every minute.
    config.offset_flush_interval_ms = Some(1000);
    let Some(mut mm2) = mirror_maker_or_skip(config).await else {
        return;
    };
    let first = wait_first_record(mm2.spawned_at(), &c.dst(), "dc1.orders", || {
        mm2.problems(30)
    })
    .await;
    let target = consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::count(750).timeout(WAIT),
    )
    .await
    .unwrap();
    let all = mm2.spawned_at().elapsed();
    assert_eq!(target.len(), 750, "MM2 replicated every record once");

    // mirrorflow's store fed MM2's offset syncs (on the source, MM2's default), and the
    // checkpoints MM2 wrote as `mirrorflow translate` prints them, until MM2 has used its
    // last syncs.
    let flow = c.flow_file(0, "");
    let committed = committed(&groups, "dc1.orders");
    let (flow_path, c_ref, secrets, committed_ref) = (flow.as_path(), &c, &c.secrets(), &committed);
    let (from_syncs, printed, syncs) = wait_translated(
        || async move {
            let (from_syncs, syncs) = translate_from_mm2_syncs(c_ref, committed_ref).await;
            let last = translate_all(flow_path, secrets).await;
            if let Ok((target_offsets, source_offsets)) = &last {
                let ends_synced = (0..PARTITIONS).all(|p| {
                    syncs
                        .iter()
                        .any(|s| s.partition == p && s.upstream_offset == PER_PARTITION - 1)
                });
                if ends_synced && *target_offsets == from_syncs && source_offsets == committed_ref {
                    return Ok((from_syncs, target_offsets.clone(), syncs));
                }
            }
            Err((last, from_syncs))
        },
        |(last, from_syncs)| {
            format!(
                "MM2's checkpoints and offset syncs do not agree in time: translate says {last:?}, \
                 MM2's syncs translate to {from_syncs:?}; {}",
                mm2.problems(20)
            )
        },
    )
    .await;
    let (mm2_answer, mm2_metadata) = mm2_translate(java, &c.dst(), "dc1").await;
    let decoded = mirrorflow_checkpoints(&c.dst(), "dc1.checkpoints.internal").await;
    let (rss, peak) = (mm2.rss_kib(), mm2.peak_rss_kib());
    let stopping = Instant::now();
    let status = mm2.stop().await.unwrap();
    let stopped_in = stopping.elapsed();

    assert_eq!(
        printed, mm2_answer,
        "`mirrorflow translate` on MM2's checkpoints is RemoteClusterUtils.translateOffsets"
    );
    assert_eq!(
        from_syncs, mm2_answer,
        "mirrorflow's store on MM2's offset syncs translates as MM2 did"
    );
    assert_eq!(
        mm2_metadata,
        committed_metadata(&committed),
        "the groups' commit metadata, through MM2's checkpoints"
    );
    let want: BTreeMap<_, _> = mm2_answer
        .iter()
        .map(|(k, o)| (k.clone(), (*o, mm2_metadata[k].clone())))
        .collect();
    assert_eq!(
        decoded, want,
        "mirrorflow's checkpoint decoder on MM2's checkpoints (the last one per key)"
    );
    let rereads = check_never_past(&mm2_answer, &committed, &target);
    // Where MM2 would resume (what a migration from MM2 starts after): its Connect offsets
    // on the target, the last replicated source offset per partition (MirrorSourceTask
    // resumes at the next). It also replicated dc1's `heartbeats` (its dc2->dc1 herder's).
    let mut positions = mm2_positions(&c.dst(), "mm2-offsets.dc1.internal").await;
    positions.retain(|(topic, _), _| topic == "orders");
    assert_eq!(
        positions,
        (0..PARTITIONS)
            .map(|p| (("orders".to_owned(), p), PER_PARTITION - 1))
            .collect::<BTreeMap<_, _>>(),
        "MM2's source positions after SIGTERM"
    );
    let mut syncs_seen: Vec<(i32, i64, i64)> = syncs
        .iter()
        .map(|s| (s.partition, s.upstream_offset, s.downstream_offset))
        .collect();
    syncs_seen.sort_unstable();
    syncs_seen.dedup();
    eprintln!("(b) MM2's offset syncs (partition, upstream, downstream): {syncs_seen:?}");
    eprintln!("(b) committed on dc1 {committed:?}");
    eprintln!("(b) MM2's answer = mirrorflow translate = mirrorflow's store: {mm2_answer:?}");
    eprintln!("(b) records each group reads again on dc2 (MM2's d + 1 rule): {rereads:?}");
    eprintln!(
        "(b) MirrorMaker 2 {}: 'started' logged after {:?}, first record on dc2 after {first:?}, \
         all 750 after {all:?}; RSS {} MiB, peak {} MiB; stopped by SIGTERM in {stopped_in:?} \
         ({status}); test took {:?}",
        mm2.version(),
        mm2.started_in(),
        rss.unwrap_or(0) / 1024,
        peak.unwrap_or(0) / 1024,
        begin.elapsed()
    );
}

/// MM2's source positions for dc1 in its Connect offsets topic, as mirrorflow's migration
/// reads them (`worker::replicate::migrate`): the last replicated source offset per
/// partition.
async fn mm2_positions(bootstrap: &str, topic: &str) -> BTreeMap<(String, i32), i64> {
    let records = consume_all(bootstrap, topic, ConsumeUntil::idle(Duration::from_secs(2)))
        .await
        .unwrap();
    let mut positions = Mm2Positions::new("dc1");
    for r in &records {
        positions
            .apply(r.key.as_deref(), r.value.as_deref())
            .unwrap_or_else(|e| panic!("{topic} offset {}: {e}", r.offset));
    }
    assert!(
        positions.other_clusters().is_empty(),
        "{:?}",
        positions.other_clusters()
    );
    let sample = records.iter().rev().find(|r| {
        r.key
            .as_deref()
            .is_some_and(|k| k.starts_with(b"[\"MirrorSourceConnector\""))
    });
    if let Some(r) = sample {
        eprintln!(
            "a record of {topic}: key {} value {}",
            String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()),
            String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
        );
    }
    positions
        .next_offsets()
        .into_iter()
        .map(|(k, next)| (k, next - 1))
        .collect()
}

/// The checkpoints in `topic` on `bootstrap`, decoded by mirrorflow's wire decoder, the last
/// one per key: `(group, topic, partition)` → (downstream offset, metadata).
async fn mirrorflow_checkpoints(
    bootstrap: &str,
    topic: &str,
) -> BTreeMap<(String, String, i32), (i64, String)> {
    consume_all(bootstrap, topic, ConsumeUntil::idle(Duration::from_secs(2)))
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let c = Checkpoint::decode(r.key.as_deref().unwrap(), r.value.as_deref().unwrap())
                .unwrap_or_else(|e| panic!("{topic} offset {}: {e}", r.offset));
            (
                (c.group, c.topic, c.partition),
                (c.downstream_offset, c.metadata),
            )
        })
        .collect()
}

/// MM2's offset syncs for `orders` on dc1, and what mirrorflow's sync store (MM2's contract:
/// no sequence header) translates the committed offsets to, clamped to the target's end.
async fn translate_from_mm2_syncs(
    c: &Clusters,
    committed: &BTreeMap<(String, String, i32), i64>,
) -> (Offsets, Vec<OffsetSync>) {
    let records = consume_all(
        &c.src(),
        "mm2-offset-syncs.dc2.internal",
        ConsumeUntil::idle(Duration::from_secs(1)).timeout(WAIT),
    )
    .await
    .unwrap_or_default();
    let mut store = SyncStore::new();
    let mut syncs = Vec::new();
    for r in &records {
        let header = r
            .headers
            .iter()
            .find(|(k, _)| k == mirrorflow::worker::checkpoint::store::SYNC_SEQUENCE_HEADER)
            .and_then(|(_, v)| v.as_deref());
        assert_eq!(header, None, "MM2 writes no sequence header");
        store
            .apply(r.key.as_deref(), r.value.as_deref(), header)
            .unwrap();
        syncs.push(
            OffsetSync::decode(r.key.as_deref().unwrap(), r.value.as_deref().unwrap()).unwrap(),
        );
    }
    let mut out = Offsets::new();
    for (key, &o) in committed {
        let (_, _, p) = key;
        let end = watermarks(&c.dst(), "dc1.orders", *p)
            .await
            .map_or(0, |(_, high)| high);
        if let Some(d) = clamp_to_target_end(store.translate("orders", *p, o), end).downstream() {
            out.insert(key.clone(), d);
        }
    }
    (out, syncs)
}

/// Waits until `topic` on `bootstrap` holds a record; the time since `since`. `why`: what to
/// say if it never does.
async fn wait_first_record(
    since: Instant,
    bootstrap: &str,
    topic: &str,
    why: impl Fn() -> String,
) -> Duration {
    loop {
        for p in 0..PARTITIONS {
            if watermarks(bootstrap, topic, p)
                .await
                .is_ok_and(|(_, high)| high > 0)
            {
                return since.elapsed();
            }
        }
        assert!(
            since.elapsed() < WAIT,
            "nothing replicated to {topic} in {WAIT:?}: {}",
            why()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The records of `topic` on `bootstrap` that `until` reads (none while the topic does not
/// exist), decoded as heartbeats with mirrorflow's decoder.
async fn heartbeats(
    bootstrap: &str,
    topic: &str,
    until: ConsumeUntil,
) -> Vec<(Heartbeat, ConsumedRecord)> {
    if topic_partitions(bootstrap, topic).await.unwrap().is_none() {
        return Vec::new();
    }
    consume_all(bootstrap, topic, until.timeout(WAIT))
        .await
        .unwrap()
        .into_iter()
        .map(|r| {
            let h = Heartbeat::decode(r.key.as_deref().unwrap(), r.value.as_deref().unwrap())
                .unwrap_or_else(|e| panic!("{topic} offset {}: {e}", r.offset));
            (h, r)
        })
        .collect()
}

/// Every record of `topic` while nothing writes to it.
async fn quiet_heartbeats(bootstrap: &str, topic: &str) -> Vec<(Heartbeat, ConsumedRecord)> {
    heartbeats(bootstrap, topic, ConsumeUntil::idle(Duration::from_secs(3))).await
}

/// MM2's `Heartbeat.deserializeRecord` on every record of `topic`: `(source, target,
/// timestamp)` in order.
async fn mm2_heartbeats(
    java: &JavaProgram,
    bootstrap: &str,
    topic: &str,
) -> Vec<(String, String, i64)> {
    java.run(&["heartbeats", bootstrap, topic], WAIT)
        .await
        .unwrap()
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!((f.len(), f[0]), (6, "heartbeat"), "{line}");
            (f[3].to_owned(), f[4].to_owned(), f[5].parse().unwrap())
        })
        .collect()
}

/// `MirrorClient`'s view of `bootstrap`: its lines, by their first word.
async fn mirror_client(
    java: &JavaProgram,
    bootstrap: &str,
    aliases: &[&str],
) -> BTreeMap<String, String> {
    let mut args = vec!["client", bootstrap];
    args.extend(aliases);
    java.run(&args, WAIT)
        .await
        .unwrap()
        .lines()
        .map(|line| {
            let (what, rest) = line.split_once(' ').unwrap_or((line, ""));
            let what = match what {
                "replicationHops" => format!("replicationHops {}", rest.split(' ').next().unwrap()),
                w => w.to_owned(),
            };
            (what, rest.rsplit(' ').next().unwrap_or("").to_owned())
        })
        .collect()
}

/// A record's key, value and timestamp.
type Raw<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>);

fn raw(records: &[(Heartbeat, ConsumedRecord)]) -> Vec<Raw<'_>> {
    records
        .iter()
        .map(|(_, r)| (r.key.as_deref(), r.value.as_deref(), r.timestamp_ms))
        .collect()
}

/// Waits until `topic` on `bootstrap` holds at least `n` records: the first `n`.
async fn wait_records(bootstrap: &str, topic: &str, n: usize) -> Vec<(Heartbeat, ConsumedRecord)> {
    let deadline = Instant::now() + WAIT;
    while topic_partitions(bootstrap, topic).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "no topic {topic}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    heartbeats(bootstrap, topic, ConsumeUntil::count(n)).await
}

/// The high watermark of partition 0 of `topic`, once it stays the same for 3 s.
async fn settled_end(bootstrap: &str, topic: &str) -> i64 {
    let deadline = Instant::now() + WAIT;
    let mut last = watermarks(bootstrap, topic, 0).await.unwrap().1;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = watermarks(bootstrap, topic, 0).await.unwrap().1;
        if now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "{topic} keeps growing");
        last = now;
    }
}

/// `MirrorClient` reads mirrorflow's heartbeats (two hops through a `dc0.heartbeats` topic
/// on dc1) and MM2's `Heartbeat` decodes them; then MM2's own heartbeats, written into dc1
/// by its `MirrorHeartbeatConnector`, are replicated by mirrorflow byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeats_both_ways() {
    let begin = Instant::now();
    let Some(c) = Clusters::start().await else {
        return;
    };
    create_topic(&c.src(), "orders", 1, &[]).await.unwrap();
    // Heartbeats a flow dc0 → dc1 would have brought to dc1.
    create_topic(&c.src(), "dc0.heartbeats", 1, &[])
        .await
        .unwrap();
    let from_dc0 = Heartbeat {
        source_alias: "dc0".into(),
        target_alias: "dc1".into(),
        timestamp_ms: 1_700_000_000_000,
    };
    produce(
        &c.src(),
        "dc0.heartbeats",
        &[ProduceRecord::new(
            from_dc0.encode_key().unwrap(),
            from_dc0.encode_value().unwrap(),
        )],
    )
    .await
    .unwrap();
    let java = &c.java;

    // 1. mirrorflow's heartbeats, every second.
    let flow = c.flow_file(1, "");
    let worker = Standalone::start(&standalone_args(&flow, &c.secrets()), Vec::new());
    let on_target = wait_records(&c.dst(), "heartbeats", 3).await;
    wait_records(&c.dst(), "dc1.heartbeats", 3).await;
    wait_records(&c.dst(), "dc1.dc0.heartbeats", 1).await;
    let view = mirror_client(java, &c.dst(), &["dc1", "dc0", "dc9"]).await;
    let want: BTreeMap<String, String> = [
        (
            "heartbeatTopics",
            "dc1.dc0.heartbeats,dc1.heartbeats,heartbeats",
        ),
        ("upstreamClusters", "dc0,dc1"),
        ("checkpointTopics", ""),
        ("replicationHops dc1", "1"),
        ("replicationHops dc0", "2"),
        ("replicationHops dc9", "-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(
        view, want,
        "MirrorClient on dc2 with mirrorflow's heartbeats"
    );
    let decoded = mm2_heartbeats(java, &c.dst(), "heartbeats").await;
    let ours: Vec<(String, String, i64)> = on_target
        .iter()
        .map(|(h, _)| {
            (
                h.source_alias.clone(),
                h.target_alias.clone(),
                h.timestamp_ms,
            )
        })
        .collect();
    assert_eq!(
        decoded[..ours.len()],
        ours[..],
        "MM2's Heartbeat on the heartbeats mirrorflow writes into dc2"
    );
    assert!(ours
        .iter()
        .all(|(s, t, _)| (s.as_str(), t.as_str()) == ("dc1", "dc2")));
    let replicated = mm2_heartbeats(java, &c.dst(), "dc1.heartbeats").await;
    assert!(
        replicated
            .iter()
            .all(|(s, t, _)| (s.as_str(), t.as_str()) == ("dc2", "dc1")),
        "{replicated:?}"
    );
    eprintln!(
        "(c) MirrorClient on dc2: {view:?}; MM2's Heartbeat decoded {} of mirrorflow's heartbeats on dc2 and {} replicated from dc1",
        decoded.len(),
        replicated.len()
    );

    // 2. mirrorflow's heartbeats off; MM2 emits dc2 → dc1 heartbeats only (no replication).
    c.flow_file(0, "");
    settled_end(&c.src(), "heartbeats").await;
    let before = quiet_heartbeats(&c.src(), "heartbeats").await.len();
    let mut config = MirrorMakerConfig::pair(("dc1", &c.src()), ("dc2", &c.dst()), &[]);
    config.flows = vec![Mm2Flow {
        enabled: false,
        emit_heartbeats: Some(true),
        ..Mm2Flow::new("dc2", "dc1", &[])
    }];
    config.heartbeats = Periodic::off(1);
    let spawned = jiff::Timestamp::now().as_millisecond();
    let Some(mut mm2) = mirror_maker_or_skip(config).await else {
        return;
    };
    wait_records(&c.src(), "heartbeats", before + 3).await;
    mm2.stop().await.unwrap();
    let stopped = jiff::Timestamp::now().as_millisecond();
    let source = quiet_heartbeats(&c.src(), "heartbeats").await;
    let from_mm2 = &source[before..];
    assert!(
        from_mm2
            .iter()
            .all(
                |(h, _)| (h.source_alias.as_str(), h.target_alias.as_str()) == ("dc2", "dc1")
                    && (spawned..=stopped).contains(&h.timestamp_ms)
            ),
        "the heartbeats written into dc1 while MM2 ran are MM2's: {from_mm2:?}"
    );
    wait_records(&c.dst(), "dc1.heartbeats", source.len()).await;
    let replicas = quiet_heartbeats(&c.dst(), "dc1.heartbeats").await;
    worker.stop().await;
    assert_eq!(
        raw(&replicas),
        raw(&source),
        "dc1's heartbeats (mirrorflow's, then MM2's) on dc2 as dc1.heartbeats: same keys, values, timestamps, order"
    );
    let decoded = mm2_heartbeats(java, &c.dst(), "dc1.heartbeats").await;
    assert_eq!(decoded.len(), source.len());
    assert!(decoded[before..]
        .iter()
        .zip(from_mm2)
        .all(|((s, t, ts), (h, _))| (s, t, *ts)
            == (&h.source_alias, &h.target_alias, h.timestamp_ms)));
    let view = mirror_client(java, &c.dst(), &["dc1"]).await;
    assert_eq!(view["upstreamClusters"], "dc0,dc1");
    eprintln!(
        "(c) {} MM2 heartbeats replicated by mirrorflow byte for byte (of {} in dc1's heartbeats); MM2 started in {:?}; test took {:?}",
        from_mm2.len(),
        source.len(),
        mm2.started_in(),
        begin.elapsed()
    );
}

/// A MirrorMaker 2 that exits at start (no flow and no heartbeats: MM2 refuses to run with
/// nothing to do) is an error naming MM2's own reason, not a wait that times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_maker_that_cannot_start_says_why() {
    if mirror_maker_install_or_skip().is_none() {
        return;
    }
    let mut config = MirrorMakerConfig::pair(("dc1", "127.0.0.1:1"), ("dc2", "127.0.0.1:2"), &[]);
    config.flows[0].enabled = false;
    config.heartbeats = Periodic::off(1);
    let err = MirrorMaker::start(config).await.unwrap_err().to_string();
    assert!(
        err.contains("the JVM exited") && err.contains("No source->target replication flows"),
        "{err}"
    );
    eprintln!("{err}");
    let log = err.split_once("mm2.log").unwrap().0;
    let dir = log.rsplit_once(' ').unwrap().1;
    assert!(
        Path::new(dir).join("mm2.log").is_file(),
        "the log is kept: {err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Migration from a running MirrorMaker 2 (`spec.source.startFrom.mirrorMaker2`): MM2
/// replicates `orders` while a producer writes 100,002 records (33,334 per partition) in
/// chunks; MM2 is stopped (SIGTERM) mid-stream, and mirrorflow takes over from MM2's Connect
/// offsets. Every source record is on the target exactly once, in order; groups committed on
/// dc1 before the handover (checkpointed by MM2), after it, and after it but still behind it
/// (translated by MM2's offset syncs, which mirrorflow reads) translate to target offsets that
/// skip nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn migration_from_mm2_mid_stream_copies_nothing_twice_and_skips_nothing() {
    let begin = Instant::now();
    let Some(c) = Clusters::start().await else {
        return;
    };
    const PER_PARTITION: i64 = 33_334;
    const CHUNK: i64 = 500;
    produce_orders(&c, 0..CHUNK).await;
    let mut config = MirrorMakerConfig::pair(("dc1", &c.src()), ("dc2", &c.dst()), &["orders"]);
    config.checkpoints = Periodic::on(1);
    config.refresh_topics_seconds = 5;
    config.refresh_groups_seconds = 5;
    config.offset_flush_interval_ms = Some(1000);
    let Some(mut mm2) = mirror_maker_or_skip(config).await else {
        return;
    };
    // Chunks of 1,500 records until all are written; the last tenth waits for MM2 to stop
    // (however slowly MM2 starts on a busy machine, it stops mid-stream).
    let src = c.src();
    let (stopped_tx, mut stopped_rx) = tokio::sync::watch::channel(false);
    let producer = tokio::spawn(async move {
        let mut at = CHUNK;
        while at < PER_PARTITION {
            if at >= PER_PARTITION * 9 / 10 {
                stopped_rx.wait_for(|s| *s).await.unwrap();
            }
            let end = (at + CHUNK).min(PER_PARTITION);
            produce_orders_to(&src, at..end).await;
            at = end;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let mm2_first = wait_first_record(mm2.spawned_at(), &c.dst(), "dc1.orders", || {
        mm2.problems(30)
    })
    .await;
    // A group that committed while MM2 ran (MM2 may checkpoint it).
    let before: [(&str, &[(i32, i64)]); 1] = [("billing", &[(0, 150), (1, 301), (2, 499)])];
    commit_groups(&c, &before).await;
    let deadline = Instant::now() + WAIT;
    while target_end_sum(&c.dst()).await < 20_000 {
        assert!(
            Instant::now() < deadline,
            "MM2 copied too little: {}",
            mm2.problems(20)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mm2_checkpoints = mirrorflow_checkpoints(&c.dst(), "dc1.checkpoints.internal").await;
    assert!(!producer.is_finished(), "MM2 stops mid-stream");
    let stopping = Instant::now();
    let status = mm2.stop().await.unwrap();
    let stopped_in = stopping.elapsed();
    let mm2_stopped = Instant::now();
    stopped_tx.send(true).unwrap();
    let mut positions = mm2_positions(&c.dst(), "mm2-offsets.dc1.internal").await;
    positions.retain(|(topic, _), _| topic == "orders");
    let mut mm2_ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let (_, end) = watermarks(&c.dst(), "dc1.orders", p).await.unwrap();
        mm2_ends.insert(p, end);
    }
    let mm2_copied: i64 = mm2_ends.values().sum();
    eprintln!("(m) MM2 stopped ({status}) in {stopped_in:?}: positions {positions:?}, dc1.orders ends on dc2 {mm2_ends:?}; MM2's checkpoints {mm2_checkpoints:?}");
    assert_eq!(
        positions.len(),
        3,
        "MM2 left a position for every partition"
    );

    // mirrorflow takes over.
    let path = c.dir.path().join("migrate.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata: {{name: compat}}
spec:
  source:
    alias: dc1
    bootstrapServers: '{}'
    startFrom: {{mirrorMaker2: {{}}}}
  target: {{alias: dc2, bootstrapServers: '{}'}}
  topics: {{include: [orders], refreshIntervalSeconds: 1}}
---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata: {{name: groups}}
spec:
  flowRef: {{name: compat}}
  groups: {{include: [billing, audit, search], refreshIntervalSeconds: 1}}
  intervalSeconds: 1
",
            c.src(),
            c.dst()
        ),
    )
    .unwrap();
    let (status_tx, status_rx) =
        tokio::sync::watch::channel(mirrorflow::worker::replicate::WorkerSnapshot::starting(
            "default",
            "compat",
            0,
            1,
            Default::default(),
        ));
    let worker = Standalone::start(
        &standalone_args(&path, &c.secrets()),
        vec![std::sync::Arc::new(status_tx)],
    );
    let took_over = loop {
        let mut grew = false;
        for p in 0..PARTITIONS {
            let (_, end) = watermarks(&c.dst(), "dc1.orders", p).await.unwrap();
            grew |= end > mm2_ends[&p];
        }
        if grew {
            break mm2_stopped.elapsed();
        }
        assert!(mm2_stopped.elapsed() < WAIT, "mirrorflow copied nothing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Groups committed after the handover: one past it, one still behind it.
    let handover: BTreeMap<i32, i64> = positions.iter().map(|((_, p), o)| (*p, o + 1)).collect();
    let after_at: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, handover[&p] + 40)).collect();
    let behind_at: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, handover[&p] - 37)).collect();
    let after: [(&str, &[(i32, i64)]); 2] = [("audit", &after_at), ("search", &behind_at)];
    commit_groups(&c, &after).await;
    producer.await.unwrap();
    let total = usize::try_from(PER_PARTITION * i64::from(PARTITIONS)).unwrap();
    let target = consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::count(total).timeout(WAIT),
    )
    .await
    .unwrap();
    let all_in = mm2_stopped.elapsed();
    // Record by record: each source position once, in source order per partition.
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    let mut out_of_order = 0;
    for r in &target {
        let (p, o) = source_position(r);
        *seen.entry((p, o)).or_default() += 1;
        if last.get(&p).is_some_and(|l| *l >= o) {
            out_of_order += 1;
        }
        last.insert(p, o);
    }
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    let lost = (0..PARTITIONS)
        .flat_map(|p| (0..PER_PARTITION).map(move |o| (p, o)))
        .filter(|k| !seen.contains_key(k))
        .count();
    let mirrorflow_copied = i64::try_from(target.len()).unwrap() - mm2_copied;
    eprintln!(
        "(m) {} records on dc2: MM2 copied {mm2_copied}, mirrorflow {mirrorflow_copied}; \
         {duplicates} duplicates, {lost} lost, {out_of_order} out of order; mirrorflow's first \
         record {took_over:?} after MM2 stopped, all in {all_in:?}",
        target.len()
    );
    assert_eq!((duplicates, lost, out_of_order), (0, 0, 0));
    assert_eq!(target.len(), total);

    // The worker reports where its partitions started: MM2 also replicated dc1's
    // heartbeats, and mirrorflow goes on from there too.
    let takeover = status_rx.borrow().mirror_maker2_takeover.clone();
    let takeover = takeover.expect("the worker reports the takeover");
    assert_eq!(
        (
            takeover.partitions,
            takeover.topics.clone(),
            takeover.fell_back
        ),
        (
            4,
            vec!["heartbeats: 0".to_owned(), "orders: 0-2".to_owned()],
            0
        ),
        "{takeover:?}"
    );

    // Every group translates, none past a record it has not consumed.
    let mut groups: Vec<(&str, &[(i32, i64)])> = before.to_vec();
    groups.extend(after);
    let committed = committed(&groups, "dc1.orders");
    let (flow_path, secrets, committed_ref) = (path.as_path(), &c.secrets(), &committed);
    let translated = wait_translated(
        || async move {
            match translate_all(flow_path, secrets).await {
                Ok((offsets, sources)) if sources == *committed_ref => Ok(offsets),
                last => Err(last),
            }
        },
        |last| format!("not every group translates: {last:?}, committed {committed:?}"),
    )
    .await;
    worker.stop().await;
    let rereads = check_never_past(&translated, &committed, &target);

    // A restart goes on from the flow's own progress, never back to MM2's positions.
    let worker = Standalone::start(&standalone_args(&path, &c.secrets()), Vec::new());
    produce_orders(&c, PER_PARTITION..PER_PARTITION + 100).await;
    consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::count(total + 300).timeout(WAIT),
    )
    .await
    .unwrap();
    worker.stop().await;
    let everything = consume_all(
        &c.dst(),
        "dc1.orders",
        ConsumeUntil::idle(Duration::from_secs(3)).timeout(WAIT),
    )
    .await
    .unwrap();
    let distinct: std::collections::BTreeSet<(i32, i64)> =
        everything.iter().map(source_position).collect();
    assert_eq!(
        (everything.len(), distinct.len()),
        (total + 300, total + 300),
        "after a restart: each record once"
    );
    eprintln!("(m) committed on dc1 {committed:?}");
    eprintln!("(m) translated {translated:?}");
    eprintln!("(m) records each group reads again: {rereads:?}");
    eprintln!(
        "(m) MirrorMaker 2 {}: first record on dc2 after {mm2_first:?}; test took {:?}",
        mm2.version(),
        begin.elapsed()
    );
}

/// Records on dc2's `dc1.orders`, by its end offsets.
async fn target_end_sum(bootstrap: &str) -> i64 {
    let mut sum = 0;
    for p in 0..PARTITIONS {
        sum += watermarks(bootstrap, "dc1.orders", p)
            .await
            .map_or(0, |(_, end)| end);
    }
    sum
}
