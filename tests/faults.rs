//! The fault suite: real worker processes (`mirrorflow worker --flow`) against real brokers,
//! killed, partitioned from their target and made to wait, the way users meet faults. Each
//! scenario compares source and target record by record (key, value, headers, timestamp,
//! partition) and prints one `FAULT <scenario>: ...` line with what it counted
//! (`scripts/fault-suite.sh` collects them). No sleep is an assertion: every wait is a bound.
//!
//! Outages last `MIRRORFLOW_FAULT_OUTAGE_SECS` (default 30).

mod replication_support;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mirrorflow::api::{Delivery, MirrorFlow, MirrorFlowSpec};
use mirrorflow::telemetry::http::get_text;
use mirrorflow::testkit::brokers::{
    broker_or_skip, produce, proxied_broker_or_skip, secured_broker_or_skip, BrokerKind,
    BrokerSecurity, ConsumedRecord, ProduceRecord,
};
use mirrorflow::testkit::proxy::Faults;
use replication_support::*;

fn outage() -> Duration {
    let secs = std::env::var("MIRRORFLOW_FAULT_OUTAGE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// A `mirrorflow worker --flow` process of flow `name`.
struct WorkerProcess {
    child: Child,
    addr: SocketAddr,
    flow: PathBuf,
    secrets: tempfile::TempDir,
    log: PathBuf,
}

impl WorkerProcess {
    fn start(dir: &Path, name: &str, spec: &MirrorFlowSpec) -> Self {
        let mut flow = MirrorFlow::new(name, spec.clone());
        flow.metadata.namespace = Some("test".into());
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, serde_yaml::to_string(&flow).unwrap()).unwrap();
        Self::spawn(path, dir, name)
    }

    fn spawn(flow: PathBuf, dir: &Path, name: &str) -> Self {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let secrets = tempfile::tempdir().unwrap();
        let log = dir.join(format!("{name}-{}.log", addr.port()));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mirrorflow"))
            .args(["worker", "--flow"])
            .arg(&flow)
            .args(["--listen", &addr.to_string(), "--secrets-dir"])
            .arg(secrets.path())
            .args(["--flow-reload-seconds", "1"])
            .env("RUST_LOG", "mirrorflow=info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("mirrorflow worker starts");
        Self {
            child,
            addr,
            flow,
            secrets,
            log,
        }
    }

    /// The same worker again (after a kill).
    fn restart(self, dir: &Path, name: &str) -> Self {
        let _ = self.secrets;
        Self::spawn(self.flow.clone(), dir, name)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: no flush, no abort.
    fn kill9(mut self) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self
    }

    /// SIGTERM, and the exit.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let begin = Instant::now();
        while self.alive() {
            assert!(begin.elapsed() < WAIT, "the worker exits on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last lines of its log (for failure messages).
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    async fn status(&self) -> Option<serde_json::Value> {
        match get_text(self.addr, "/status").await {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    async fn ready(&self) -> Option<bool> {
        get_text(self.addr, "/readyz")
            .await
            .ok()
            .map(|(c, _)| c == 200)
    }

    /// Sum of the positions of `topic`'s partitions, if the worker answers.
    async fn positions(&self, topic: &str) -> Option<BTreeMap<i64, i64>> {
        let s = self.status().await?;
        let parts = s["partitions"].as_array()?;
        Some(
            parts
                .iter()
                .filter(|p| p["topic"] == topic)
                .filter_map(|p| Some((p["partition"].as_i64()?, p["position"].as_i64()?)))
                .collect(),
        )
    }

    async fn wait_positions(&mut self, topic: &str, want: &BTreeMap<i32, i64>) {
        let begin = Instant::now();
        loop {
            if let Some(pos) = self.positions(topic).await {
                if want
                    .iter()
                    .all(|(p, n)| pos.get(&i64::from(*p)).is_some_and(|x| x >= n))
                {
                    return;
                }
            }
            assert!(self.alive(), "worker exited:\n{}", self.log_tail());
            assert!(
                begin.elapsed() < WAIT * 2,
                "positions of {topic} never reached {want:?}:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Per partition: the target holds every source record, each first appearance in source
/// order (duplicates only repeat records that appeared before). Returns the duplicates per
/// partition, or what is wrong.
fn check_copy(
    source: &[ConsumedRecord],
    target: &[ConsumedRecord],
) -> Result<BTreeMap<i32, usize>, String> {
    let mut out = BTreeMap::new();
    let parts: std::collections::BTreeSet<i32> = source.iter().map(|r| r.partition).collect();
    for p in parts {
        let s: Vec<Content> = content(
            &source
                .iter()
                .filter(|r| r.partition == p)
                .cloned()
                .collect::<Vec<_>>(),
        );
        let index: HashMap<&Content, usize> = s.iter().enumerate().map(|(i, c)| (c, i)).collect();
        let (mut next, mut dups) = (0usize, 0usize);
        for (n, t) in content(
            &target
                .iter()
                .filter(|r| r.partition == p)
                .cloned()
                .collect::<Vec<_>>(),
        )
        .iter()
        .enumerate()
        {
            match index.get(t) {
                Some(&i) if i == next => next += 1,
                Some(&i) if i < next => dups += 1,
                Some(&i) => {
                    return Err(format!(
                        "partition {p}: target record #{n} is source record {i}, before source \
                         record {next} ever appeared (order of first appearance broken)"
                    ))
                }
                None => {
                    return Err(format!(
                        "partition {p}: target record #{n} is not from the source"
                    ))
                }
            }
        }
        if next != s.len() {
            return Err(format!(
                "partition {p}: {} of {} source records never reached the target (first: #{next})",
                s.len() - next,
                s.len()
            ));
        }
        out.insert(p, dups);
    }
    Ok(out)
}

fn batch(tag: &str, partitions: i32, from: usize, n: usize) -> Vec<ProduceRecord> {
    (from..from + n)
        .map(|i| {
            ProduceRecord::new(
                format!("{tag}-{i}"),
                format!("v{i:08}-{}", "x".repeat(i % 50)),
            )
            .partition(i32::try_from(i).unwrap() % partitions)
            .header("i", Some(i.to_string().as_bytes()))
            // Current times: a broker with file storage applies retention at restart.
            .timestamp(now_ms() + i64::try_from(i).unwrap())
        })
        .collect()
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn ends_of(records: &[ProduceRecord]) -> BTreeMap<i32, i64> {
    let mut e = BTreeMap::new();
    for r in records {
        *e.entry(r.partition.unwrap()).or_insert(0) += 1;
    }
    e
}

/// kill -9 of the worker process every few seconds while 200,000 records are produced
/// (AtLeastOnce on nisshi): nothing lost, each partition in order of first appearance,
/// duplicates within the documented bound (one window, 40,000 records, per kill).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_kill9_during_a_long_flow_nisshi() {
    let Some((source, target)) = broker_pair(BrokerKind::Nisshi).await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    const PARTITIONS: i32 = 4;
    const TOTAL: usize = 200_000;
    create(&source, "orders", PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = include(
        flow_spec(&source, &target, Delivery::AtLeastOnce),
        &["orders"],
    );
    let mut w = WorkerProcess::start(dir.path(), "kill9", &spec);
    let producer = {
        let sb = sb.clone();
        tokio::spawn(async move {
            let mut all = Vec::new();
            for chunk in 0..(TOTAL / 10_000) {
                let b = batch("k", PARTITIONS, chunk * 10_000, 10_000);
                produce(&sb, "orders", &b).await.unwrap();
                all.extend(b);
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
            all
        })
    };
    let mut kills = 0;
    while !producer.is_finished() || kills < 8 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        w = w.kill9().restart(dir.path(), "kill9");
        kills += 1;
        assert!(kills < 60, "the producer never finished");
    }
    let all = producer.await.unwrap();
    w.wait_positions("orders", &ends_of(&all)).await;
    w.stop();
    let src = read_n(&sb, "orders", TOTAL).await;
    let dst = read_idle(&tb, "dc1.orders", Duration::from_secs(3)).await;
    let dups = check_copy(&src, &dst).unwrap_or_else(|e| panic!("after {kills} kills: {e}"));
    let total_dups: usize = dups.values().sum();
    let bound = kills * 40_000;
    assert!(
        total_dups <= bound,
        "{total_dups} duplicates after {kills} kills"
    );
    println!(
        "FAULT kill9: {TOTAL} records, {kills} kill -9 of the worker process, 0 lost, \
         {total_dups} duplicates (bound {bound}: one 40,000-record window per kill), order of \
         first appearance kept per partition"
    );
}

/// The network between worker and target goes silent for the outage (the proxy forwards
/// nothing and keeps connections open): the worker process stays up (same pid), turns not
/// ready while records wait, recovers by itself when the network does, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_blackhole_between_worker_and_target_nisshi() {
    let Some(source) = broker_or_skip(BrokerKind::Nisshi).await else {
        return;
    };
    let Some((target, proxy)) = proxied_broker_or_skip(BrokerKind::Nisshi).await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, "orders", 2).await;
    let first = batch("a", 2, 0, 5_000);
    produce(&sb, "orders", &first).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = include(
        flow_spec(&source, &target, Delivery::AtLeastOnce),
        &["orders"],
    );
    let mut w = WorkerProcess::start(dir.path(), "blackhole", &spec);
    w.wait_positions("orders", &ends_of(&first)).await;
    let pid = w.pid();

    proxy.set(Faults {
        blackhole: true,
        ..Faults::default()
    });
    let cut = Instant::now();
    let second = batch("b", 2, 5_000, 5_000);
    produce(&sb, "orders", &second).await.unwrap();
    let mut went_unready = None;
    while cut.elapsed() < outage() {
        if went_unready.is_none() && w.ready().await == Some(false) {
            went_unready = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    proxy.set(Faults::default());
    let healed = Instant::now();
    let unready = went_unready.expect("readiness went false while the target was silent");
    let all: Vec<ProduceRecord> = first.iter().chain(&second).cloned().collect();
    w.wait_positions("orders", &ends_of(&all)).await;
    let begin = Instant::now();
    while w.ready().await != Some(true) {
        assert!(begin.elapsed() < WAIT, "ready again:\n{}", w.log_tail());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let recovered = healed.elapsed();
    assert!(w.alive() && w.pid() == pid, "no restart, no crash loop");
    w.stop();
    let src = read_n(&sb, "orders", all.len()).await;
    let dst = read_idle(&tb, "dc1.orders", Duration::from_secs(3)).await;
    let dups = check_copy(&src, &dst).unwrap();
    let total_dups: usize = dups.values().sum();
    println!(
        "FAULT blackhole: target silent for {} s, not ready after {} s, caught up and ready \
         {} s after the network came back, same process, {} records, 0 lost, {total_dups} \
         duplicates",
        outage().as_secs(),
        unready.as_secs(),
        recovered.as_secs(),
        all.len()
    );
}

/// The target broker process stops for the outage and comes back (nisshi with SQLite file
/// storage, so it keeps what it had), then the source broker restarts: nothing lost, the flow
/// recovers by itself, and its status said what happened meanwhile (not ready, why).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_broker_restarts_nisshi() {
    let persistent = BrokerSecurity {
        persistent: true,
        ..BrokerSecurity::default()
    };
    let Some(mut source) = secured_broker_or_skip(BrokerKind::Nisshi, persistent.clone()).await
    else {
        return;
    };
    let Some(mut target) = secured_broker_or_skip(BrokerKind::Nisshi, persistent).await else {
        return;
    };
    let (sb, tb) = (source.bootstrap_servers(), target.bootstrap_servers());
    create(&source, "orders", 2).await;
    let first = batch("a", 2, 0, 5_000);
    produce(&sb, "orders", &first).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = include(
        flow_spec(&source, &target, Delivery::AtLeastOnce),
        &["orders"],
    );
    let mut w = WorkerProcess::start(dir.path(), "restarts", &spec);
    w.wait_positions("orders", &ends_of(&first)).await;
    let pid = w.pid();

    target.stop().unwrap();
    let down = Instant::now();
    let second = batch("b", 2, 5_000, 5_000);
    produce(&sb, "orders", &second).await.unwrap();
    let mut said = None;
    while down.elapsed() < outage() {
        if said.is_none() && w.ready().await == Some(false) {
            said = w
                .status()
                .await
                .and_then(|s| s["message"].as_str().map(str::to_string));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    target.restart().await.unwrap();
    let back = Instant::now();
    let two: Vec<ProduceRecord> = first.iter().chain(&second).cloned().collect();
    w.wait_positions("orders", &ends_of(&two)).await;
    let caught_up = back.elapsed();

    source.stop().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    source.restart().await.unwrap();
    let third = batch("c", 2, 10_000, 5_000);
    produce(&sb, "orders", &third).await.unwrap();
    let all: Vec<ProduceRecord> = two.iter().chain(&third).cloned().collect();
    w.wait_positions("orders", &ends_of(&all)).await;
    assert!(w.alive() && w.pid() == pid, "the same process throughout");
    w.stop();
    let src = read_n(&sb, "orders", all.len()).await;
    let dst = read_idle(&tb, "dc1.orders", Duration::from_secs(3)).await;
    let dups = check_copy(&src, &dst).unwrap();
    let said = said.expect("the worker said it was not ready while the target was down");
    println!(
        "FAULT broker-restarts: target broker down {} s (SQLite storage, same port) then the \
         source restarted: status said \"{said}\", caught up {} s after the target was back, \
         same process, {} records, 0 lost, {} duplicates",
        outage().as_secs(),
        caught_up.as_secs(),
        all.len(),
        dups.values().sum::<usize>()
    );
}
