//! MirrorMaker 2's `MirrorCheckpointConnector` on the same groups at the same interval: MM2
//! in dedicated mode replicating a topic of its own (`mbench`, produced to all along so its
//! offset syncs stay near the groups' offsets), the groups committing on it, and the
//! checkpoints read from the target's `msrc.checkpoints.internal`.
//!
//! MM2 emits a checkpoint only when the translated (downstream) offset advanced, and it
//! translates to the newest offset sync at or below the group's offset (+1): so each round
//! every group commits near the source's end, at least `2 × offset.lag.max` records past the
//! round before, where MM2 has a newer sync. A checkpoint counts when its upstream offset is
//! the one committed; RPO = the group's commit call → the record timestamp of the last of its
//! partitions' checkpoints, as for mirrorflow.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mirrorflow::kafka::admin::GroupOffset;
use mirrorflow::kafka::tail::TopicTail;
use mirrorflow::kafka::wire;
use mirrorflow::testkit::brokers::{create_topic, watermarks};
use mirrorflow::testkit::mirror_maker::{MirrorMaker, MirrorMakerConfig, Mm2Flow, Periodic};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message as _};

use crate::{admin, blocking, percentile, procfs, sorted};

const TOPIC: &str = "mbench";
/// The checkpoints topic MM2 writes for source alias `msrc`.
const CHECKPOINTS: &str = "msrc.checkpoints.internal";

/// What MM2 did.
pub struct Mm2Figures {
    pub version: String,
    /// MM2 spawn → every group of round 0 checkpointed (s).
    pub startup: Option<f64>,
    /// Groups checkpointed at the offsets committed before MM2 started, of `groups`.
    pub first_groups: (usize, usize),
    /// RPO samples (commit → checkpoint written), every round, sorted.
    pub rpo: Vec<f64>,
    /// Per round: the worst sample, infinite when a group was not checkpointed in time.
    pub round_max: Vec<f64>,
    /// Per round: groups not checkpointed within the round's limit.
    pub missing: Vec<usize>,
    pub round_limit: f64,
    /// JVM CPU (% of one core) while nothing moves, and during the rounds.
    pub cpu_idle_pct: f64,
    pub cpu_busy_pct: f64,
    pub peak_rss_mib: f64,
}

/// Seconds to print: an infinite figure (a checkpoint that never came) as `> limit`.
fn seconds(v: f64, limit: f64) -> String {
    if v.is_infinite() {
        format!("> {limit:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Offsets of group `g` in a round: near the source's end (`ends`), apart per group.
fn offsets(ends: &[i64], g: usize) -> Vec<i64> {
    ends.iter()
        .enumerate()
        .map(|(p, e)| (e - ((g * 7 + p * 13) % 50) as i64).max(1))
        .collect()
}

async fn ends(src: &str, partitions: i32) -> Vec<i64> {
    let mut v = Vec::new();
    for p in 0..partitions {
        v.push(watermarks(src, TOPIC, p).await.map_or(0, |w| w.1));
    }
    v
}

/// Commits every group at `offsets(ends, g)`; returns per group when its call was sent
/// (s after `t0`) and what it committed.
async fn commit(
    src: &str,
    groups: &[String],
    ends: &[i64],
    t0: Instant,
) -> (Vec<f64>, Vec<Vec<i64>>) {
    let a = Arc::new(admin(src));
    let expected: Vec<Vec<i64>> = (0..groups.len()).map(|g| offsets(ends, g)).collect();
    let mut sent = Vec::with_capacity(groups.len());
    for chunk in (0..groups.len())
        .collect::<Vec<_>>()
        .chunks(crate::COMMIT_CHUNK)
    {
        let commits: Vec<(String, Vec<GroupOffset>)> = chunk
            .iter()
            .map(|&g| {
                let o = expected[g]
                    .iter()
                    .enumerate()
                    .map(|(p, &offset)| GroupOffset {
                        topic: TOPIC.to_string(),
                        partition: p as i32,
                        offset,
                        metadata: String::new(),
                    })
                    .collect();
                (groups[g].clone(), o)
            })
            .collect();
        let at = t0.elapsed().as_secs_f64();
        sent.extend(std::iter::repeat_n(at, chunk.len()));
        let a = a.clone();
        let results = blocking(move || a.alter_offsets(&commits)).await;
        let failed = results.iter().filter(|r| r.is_err()).count();
        assert_eq!(
            failed,
            0,
            "source commits failed: {:?}",
            results.iter().find(|r| r.is_err())
        );
    }
    (sent, expected)
}

/// A producer writing `rate` 100 B records/s round-robin to `mbench` until `stop`.
fn spawn_producer(
    src: &str,
    partitions: i32,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let src = src.to_string();
    std::thread::spawn(move || {
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &src)
            .set("linger.ms", "5")
            .create()
            .expect("mbench producer");
        let value = vec![0u8; 100];
        let t0 = Instant::now();
        let mut i: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            let due = Duration::from_secs_f64(i as f64 / rate as f64);
            if let Some(w) = due.checked_sub(t0.elapsed()) {
                producer.poll(Duration::ZERO);
                std::thread::sleep(w.min(Duration::from_millis(100)));
                continue;
            }
            let key = format!("k{i}");
            let _ = producer.send(
                BaseRecord::to(TOPIC)
                    .key(key.as_str())
                    .payload(value.as_slice())
                    .partition((i % partitions as u64) as i32),
            );
            i += 1;
        }
        let _ = producer.flush(Duration::from_secs(10));
    })
}

/// The checkpoints topic's reader and, per (group, partition), the latest checkpoint's
/// upstream offset and record timestamp.
type Written = Arc<std::sync::Mutex<(TopicTail, HashMap<(String, i32), (i64, i64)>)>>;

/// Reads the checkpoints topic until every group's checkpoints (all partitions) carry the
/// offsets committed, or `limit` passes; per group, when its last partition's checkpoint was
/// written (s after `t0`, from record timestamps).
async fn wait_checkpoints(
    tail: Written,
    groups: &[String],
    expected: &[Vec<i64>],
    t0: Instant,
    limit: Duration,
    mut sample: impl FnMut(),
) -> HashMap<usize, f64> {
    let groups = Arc::new(groups.to_vec());
    let expected = Arc::new(expected.to_vec());
    let mut done: HashMap<usize, f64> = HashMap::new();
    while done.len() < groups.len() && t0.elapsed() < limit {
        sample();
        let (tail, groups, expected) = (tail.clone(), groups.clone(), expected.clone());
        let t0_ms = jiff::Timestamp::now().as_millisecond() - t0.elapsed().as_millis() as i64;
        let seen: Vec<(usize, f64)> = blocking(move || {
            let mut guard = tail.lock().unwrap();
            let (tail, latest) = &mut *guard;
            let _ = tail.catch_up(Duration::from_secs(30), |m| {
                if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                    if let Ok(c) = wire::Checkpoint::decode(k, v) {
                        let ts = m.timestamp().to_millis().unwrap_or(0);
                        latest.insert((c.group, c.partition), (c.upstream_offset, ts));
                    }
                }
            });
            (0..groups.len())
                .filter_map(|g| {
                    let ts: Option<Vec<i64>> = expected[g]
                        .iter()
                        .enumerate()
                        .map(
                            |(p, want)| match latest.get(&(groups[g].clone(), p as i32)) {
                                Some((o, ts)) if o == want => Some(*ts),
                                _ => None,
                            },
                        )
                        .collect();
                    let last = ts?.into_iter().max()?;
                    Some((g, (last - t0_ms).max(0) as f64 / 1000.0))
                })
                .collect()
        })
        .await;
        for (g, at) in seen {
            done.entry(g).or_insert(at);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    done
}

/// Runs MM2's checkpoints over `groups` (`partitions` each) at `interval`, `rounds` rounds
/// after a first one, with an idle window of `idle_secs`.
pub async fn run(
    src: &str,
    dst: &str,
    groups: &[String],
    partitions: i32,
    interval: u64,
    rounds: usize,
    idle_secs: u64,
) -> Result<Mm2Figures, String> {
    let rate = 200 * partitions.max(1) as u64;
    create_topic(src, TOPIC, partitions, &[])
        .await
        .map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let producer = spawn_producer(src, partitions, rate, stop.clone());
    // Some history first, then round 0's commits before MM2 starts (as the groups had
    // committed before mirrorflow's runner started).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let e0 = ends(src, partitions).await;
    let (_, expected0) = commit(src, groups, &e0, Instant::now()).await;

    let mut config = MirrorMakerConfig::pair(("msrc", src), ("mdst", dst), &[TOPIC]);
    config.flows[0].groups = vec!["bench-.*".to_string()];
    config.flows.push(Mm2Flow {
        enabled: false,
        emit_heartbeats: Some(false),
        ..Mm2Flow::new("mdst", "msrc", &[])
    });
    config.checkpoints = Periodic::on(interval);
    // As mirrorflow's OffsetCheckpoint in this bench (`groups.refreshIntervalSeconds: 30`).
    config.refresh_groups_seconds = 30;
    let mut mm = MirrorMaker::start(config)
        .await
        .map_err(|e| e.to_string())?;
    let pid = mm.pid().ok_or("MM2 is not running")?;
    let mut peak_kib = 0u64;
    let mut sample = || {
        if let Some(k) = procfs::status_kib(pid, "VmHWM") {
            peak_kib = peak_kib.max(k);
        }
    };
    let mut tail_config = ClientConfig::new();
    tail_config.set("bootstrap.servers", dst);
    // The checkpoints topic exists once the connector started.
    let tail = loop {
        match TopicTail::new(&tail_config, CHECKPOINTS, "mm2-bench") {
            Ok(t) => break t,
            Err(e) if mm.spawned_at().elapsed() > Duration::from_secs(120) => {
                return Err(format!("{CHECKPOINTS}: {e}"))
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    };
    let tail = Arc::new(std::sync::Mutex::new((tail, HashMap::new())));
    let round_limit = Duration::from_secs(interval * 6 + 120);
    let first = wait_checkpoints(
        tail.clone(),
        groups,
        &expected0,
        mm.spawned_at(),
        round_limit + Duration::from_secs(60),
        &mut sample,
    )
    .await;
    let first_groups = (first.len(), groups.len());
    let startup =
        (first.len() == groups.len()).then(|| first.values().copied().fold(0.0, f64::max));

    let cpu1 = procfs::cpu_of(&[pid]);
    let busy_start = Instant::now();
    let (mut rpo, mut round_max, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=rounds {
        let phase = interval * 1000 * (r as u64 - 1) / rounds as u64;
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let t0 = Instant::now();
        let e = ends(src, partitions).await;
        let (sent, expected) = commit(src, groups, &e, t0).await;
        let done = wait_checkpoints(
            tail.clone(),
            groups,
            &expected,
            t0,
            round_limit,
            &mut sample,
        )
        .await;
        let mut v: Vec<f64> = done.iter().map(|(g, at)| at - sent[*g]).collect();
        v = sorted(v);
        let missed = groups.len() - done.len();
        missing.push(missed);
        // A group without the round's checkpoint is older than the limit and still aging:
        // the round's worst is beyond it (shown as "> limit", compared as infinite).
        if missed > 0 {
            round_max.push(f64::INFINITY);
        } else if let Some(m) = v.last() {
            round_max.push(*m);
        }
        rpo.append(&mut v);
        println!(
            "  MM2 round {r}: {} of {} groups checkpointed, worst {} s",
            done.len(),
            groups.len(),
            seconds(
                round_max.last().copied().unwrap_or(f64::NAN),
                round_limit.as_secs_f64()
            )
        );
    }
    let cpu_busy_pct = 100.0 * (procfs::cpu_of(&[pid]) - cpu1) / busy_start.elapsed().as_secs_f64();
    // Idle: the producer stops, nothing commits.
    stop.store(true, Ordering::Relaxed);
    let _ = producer.join();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu0 = procfs::cpu_of(&[pid]);
    let idle_start = Instant::now();
    while idle_start.elapsed() < Duration::from_secs(idle_secs) {
        sample();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu_idle_pct = 100.0 * (procfs::cpu_of(&[pid]) - cpu0) / idle_start.elapsed().as_secs_f64();
    sample();
    let version = mm.version().to_string();
    let _ = mm.kill();
    Ok(Mm2Figures {
        version,
        startup,
        first_groups,
        rpo: sorted(rpo),
        round_max: sorted(round_max),
        missing,
        round_limit: round_limit.as_secs_f64(),
        cpu_idle_pct,
        cpu_busy_pct,
        peak_rss_mib: procfs::mib(peak_kib),
    })
}

/// The side-by-side rows: mirrorflow's figures against MM2's, with the goal (RPO ≤ MM2's at
/// ≤ 1/3 of its CPU).
pub fn print(
    mf_rpo_p50: f64,
    mf_rpo_max: f64,
    mf_round_max_median: f64,
    mf_cpu_busy: f64,
    mf_cpu_idle: f64,
    mm2: &Result<Mm2Figures, String>,
) {
    println!();
    let m = match mm2 {
        Ok(m) => m,
        Err(e) => {
            println!("MirrorMaker 2 checkpoints: NOT MEASURED: {e}");
            return;
        }
    };
    println!(
        "Checkpoints beside MirrorMaker 2 {} (MirrorCheckpointConnector, tasks.max 1, the same groups and interval)",
        m.version
    );
    let p = |v: &[f64], q: f64| percentile(v, q);
    println!("{:<58} {:>12} {:>12}", "", "mirrorflow", "MM2");
    let row = |k: &str, a: String, b: String| println!("{k:<58} {a:>12} {b:>12}");
    // A group-round without its checkpoint counts as a sample beyond the round's limit.
    let missed: usize = m.missing.iter().sum();
    let mut all = m.rpo.clone();
    all.extend(std::iter::repeat_n(f64::INFINITY, missed));
    row(
        "RPO: commit → checkpoint written, p50 (s)",
        format!("{mf_rpo_p50:.2}"),
        seconds(p(&all, 0.5), m.round_limit),
    );
    let mm2_worst = if missed > 0 {
        f64::INFINITY
    } else {
        p(&m.rpo, 1.0)
    };
    let mm2_round_max = p(&m.round_max, 0.5);
    row(
        "RPO: median of round maxima (s)",
        format!("{mf_round_max_median:.2}"),
        seconds(mm2_round_max, m.round_limit),
    );
    row(
        "RPO: worst sample (s)",
        format!("{mf_rpo_max:.2}"),
        seconds(mm2_worst, m.round_limit),
    );
    row(
        "groups not checkpointed within the round's limit, per round",
        "0".to_string(),
        m.missing
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" "),
    );
    row(
        "CPU during the rounds (% of one core)",
        format!("{mf_cpu_busy:.1}"),
        format!("{:.1}", m.cpu_busy_pct),
    );
    row(
        "CPU, nothing moving (% of one core)",
        format!("{mf_cpu_idle:.1}"),
        format!("{:.1}", m.cpu_idle_pct),
    );
    row(
        "start → every group checkpointed (s)",
        "-".to_string(),
        m.startup
            .map_or(format!("> {:.0}", m.round_limit + 60.0), |s| {
                format!("{s:.1}")
            }),
    );
    row(
        "groups checkpointed at their first offsets after start",
        "all".to_string(),
        format!("{} of {}", m.first_groups.0, m.first_groups.1),
    );
    row(
        "MM2 peak RSS (MiB)",
        "-".to_string(),
        format!("{:.0}", m.peak_rss_mib),
    );
    let rpo_ok = mf_round_max_median <= mm2_round_max && mf_rpo_max <= mm2_worst;
    println!(
        "goal: RPO ≤ MM2's (median of round maxima and worst)          {}",
        if rpo_ok { "PASS" } else { "MISS" }
    );
    if missed > 0 {
        println!(
            "  (MM2 left {missed} group-rounds without the committed offset's checkpoint after {:.0} s: their age is beyond it)",
            m.round_limit
        );
    }
    let cpu_ok = mf_cpu_busy <= m.cpu_busy_pct / 3.0;
    println!(
        "goal: CPU during the rounds ≤ 1/3 of MM2's ({:.2}×)            {}",
        mf_cpu_busy / m.cpu_busy_pct,
        if cpu_ok { "PASS" } else { "MISS" }
    );
    println!(
        "  (MM2's CPU includes replicating its topic, 200 × 100 B records/s per partition, during the rounds: its offset syncs need it; mirrorflow's runner reads prepared syncs)"
    );
}
