//! Golden run: the progress and offset-sync records an ExactlyOnce flow writes on tansu must
//! equal `tests/golden/eos-tansu.txt`, byte for byte, in order (recorded before the engine
//! was split into modules; `MIRRORFLOW_GOLDEN_WRITE=1` records it again).
//!
//! Deterministic by construction: one source partition receives records at a time, batches
//! close only when full (linger 60 s, counts that are multiples of the batch), topics are
//! listed once. Two values differ between runs and are replaced by their rank before
//! comparing: the sync writer epoch in the `mirrorflow.sync.seq` header (clock based) and the
//! source topic ids inside progress values (chosen by the broker).

mod replication_support;

use std::collections::BTreeMap;
use std::time::Duration;

use mirrorflow::api::Delivery;
use mirrorflow::kafka::wire::{Progress, SyncSequence, SYNC_SEQUENCE_HEADER};
use mirrorflow::testkit::brokers::{produce, BrokerKind, ConsumedRecord, ProduceRecord};
use replication_support::*;

const GOLDEN: &str = "tests/golden/eos-tansu.txt";

fn hex(b: Option<&[u8]>) -> String {
    match b {
        None => "null".into(),
        Some(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
    }
}

/// Stable rank of each distinct value, in order of first appearance.
#[derive(Default)]
struct Ranks<T: Ord>(BTreeMap<T, usize>);

impl<T: Ord> Ranks<T> {
    fn of(&mut self, v: T) -> usize {
        let n = self.0.len();
        *self.0.entry(v).or_insert(n)
    }
}

fn render(progress: &[ConsumedRecord], syncs: &[ConsumedRecord]) -> String {
    let mut out = String::new();
    let mut ids = Ranks::default();
    for r in progress {
        let key = r.key.as_deref().expect("progress key");
        let value = r.value.as_deref().map(|v| {
            let mut p = Progress::decode(key, v).expect("progress decodes");
            if !p.topic_id.is_empty() {
                p.topic_id = format!("topic-id-{}", ids.of(p.topic_id.clone()));
            }
            p.encode_value().expect("progress encodes")
        });
        out.push_str(&format!(
            "progress p{} @{} key={} value={}\n",
            r.partition,
            r.offset,
            hex(Some(key)),
            hex(value.as_deref())
        ));
    }
    let mut epochs = Ranks::default();
    for r in syncs {
        let headers: Vec<String> = r
            .headers
            .iter()
            .map(|(k, v)| {
                let v = match (k.as_str(), v.as_deref()) {
                    (SYNC_SEQUENCE_HEADER, Some(b)) => {
                        let mut s = SyncSequence::decode(b).expect("sequence decodes");
                        s.writer_epoch = epochs.of(s.writer_epoch) as i64;
                        Some(s.encode())
                    }
                    (_, v) => v.map(<[u8]>::to_vec),
                };
                format!("{k}={}", hex(v.as_deref()))
            })
            .collect();
        out.push_str(&format!(
            "sync p{} @{} key={} value={} headers=[{}]\n",
            r.partition,
            r.offset,
            hex(r.key.as_deref()),
            hex(r.value.as_deref()),
            headers.join(",")
        ));
    }
    out
}

fn phase(partition: i32, tag: &str, n: i32) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| {
            ProduceRecord::new(
                format!("{tag}-k{i}"),
                format!("{tag}-v{i}-{}", "x".repeat(i as usize % 7)),
            )
            .partition(partition)
            .header("i", Some(i.to_string().as_bytes()))
            .timestamp(BASE_TS + i64::from(i))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eos_progress_and_syncs_match_the_golden_run_tansu() {
    let Some((source, target)) = broker_pair(BrokerKind::Tansu).await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    for (topic, partitions) in [("alpha", 1), ("beta", 1), ("gamma", 2)] {
        source.create_topic(topic, partitions, &[]).await.unwrap();
    }
    let mut spec = flow_spec(&source, &target, Delivery::ExactlyOnce);
    spec.topics.refresh_interval_seconds = 3600;
    // ExactlyOnce batches take half the window: 250 records, closed only when full.
    let mut tuning = test_tuning(500);
    tuning.batch.linger = Duration::from_secs(60);
    let mut w = start_worker("golden", spec, 0, 1, tuning);
    for (topic, partition, tag, n) in [
        ("alpha", 0, "a", 1000),
        ("beta", 0, "b", 500),
        ("gamma", 0, "g0", 250),
        ("gamma", 1, "g1", 750),
    ] {
        produce(&sb, topic, &phase(partition, tag, n))
            .await
            .unwrap();
        w.wait_positions(topic, &[(partition, i64::from(n))].into())
            .await;
    }
    w.stop().await.unwrap();
    let progress = read_idle(
        &tb,
        "mirrorflow-progress.test.golden.internal",
        Duration::from_secs(2),
    )
    .await;
    let syncs = read_idle(&tb, "mm2-offset-syncs.dc1.internal", Duration::from_secs(2)).await;
    let got = render(&progress, &syncs);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    if std::env::var_os("MIRRORFLOW_GOLDEN_WRITE").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let want = std::fs::read_to_string(&path).expect("golden file");
    pretty_assertions::assert_eq!(want, got, "progress and offset syncs differ from {GOLDEN}");
}
