//! Helpers of the fault suite (`tests/faults.rs`) and the exactly-once proof
//! (`tests/exactly_once.rs`): real `mirrorflow worker --flow` processes, a reader that sees a
//! topic to its end under either isolation level, and record-by-record comparisons. Needs
//! `mod replication_support;` beside it.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mirrorflow::api::{MirrorFlow, MirrorFlowSpec};
use mirrorflow::telemetry::http::get_text;
use mirrorflow::testkit::brokers::{ConsumedRecord, ProduceRecord};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::replication_support::{content, Content, WAIT};

/// How long outages last: `MIRRORFLOW_FAULT_OUTAGE_SECS` (default 30).
pub fn outage() -> Duration {
    Duration::from_secs(env_or("MIRRORFLOW_FAULT_OUTAGE_SECS", 30))
}

/// `name` parsed from the environment, else `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A test's directory (flow files, worker logs): removed at the end, kept (and named on
/// stderr) when the test fails or `MIRRORFLOW_KEEP_BROKER_LOGS` is set.
pub struct WorkDir(tempfile::TempDir);

impl WorkDir {
    pub fn new() -> Self {
        Self(
            tempfile::Builder::new()
                .prefix("mirrorflow-faults-")
                .tempdir()
                .unwrap(),
        )
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let keep = std::env::var_os(mirrorflow::testkit::brokers::KEEP_LOGS_ENV).is_some();
        if std::thread::panicking() || keep {
            self.0.disable_cleanup(true);
            eprintln!("worker logs kept in {}", self.0.path().display());
        }
    }
}

/// A `mirrorflow worker --flow` process of flow `name` (namespace `test`).
pub struct WorkerProcess {
    child: Child,
    addr: SocketAddr,
    flow: PathBuf,
    secrets: PathBuf,
    /// The secrets directory when the test gave none (removed with the last restart).
    own_secrets: Option<std::sync::Arc<tempfile::TempDir>>,
    log: PathBuf,
}

impl WorkerProcess {
    pub fn start(dir: &Path, name: &str, spec: &MirrorFlowSpec) -> Self {
        let secrets = std::sync::Arc::new(tempfile::tempdir().unwrap());
        let mut w = Self::start_with_secrets(dir, name, spec, secrets.path());
        w.own_secrets = Some(secrets);
        w
    }

    /// [`WorkerProcess::start`] reading the cluster Secrets from `secrets` (kubelet layout).
    pub fn start_with_secrets(
        dir: &Path,
        name: &str,
        spec: &MirrorFlowSpec,
        secrets: &Path,
    ) -> Self {
        let mut flow = MirrorFlow::new(name, spec.clone());
        flow.metadata.namespace = Some("test".into());
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, serde_yaml::to_string(&flow).unwrap()).unwrap();
        Self::spawn(path, dir, name, secrets.to_path_buf(), None)
    }

    fn spawn(
        flow: PathBuf,
        dir: &Path,
        name: &str,
        secrets: PathBuf,
        own_secrets: Option<std::sync::Arc<tempfile::TempDir>>,
    ) -> Self {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let log = dir.join(format!("{name}-{}.log", addr.port()));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_mirrorflow"))
            .args(["worker", "--flow"])
            .arg(&flow)
            .args(["--listen", &addr.to_string(), "--secrets-dir"])
            .arg(&secrets)
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
            own_secrets,
            log,
        }
    }

    /// The same worker again (after a kill).
    pub fn restart(self, dir: &Path, name: &str) -> Self {
        Self::spawn(
            self.flow.clone(),
            dir,
            name,
            self.secrets.clone(),
            self.own_secrets.clone(),
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its exit status, once it exited (waits at most `bound`).
    pub fn wait_exit(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let begin = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if begin.elapsed() > bound {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILL: no flush, no abort.
    pub fn kill9(mut self) -> Self {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self
    }

    /// SIGTERM, and the exit.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let begin = Instant::now();
        while self.alive() {
            assert!(begin.elapsed() < WAIT, "the worker exits on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last lines of its log (for failure messages).
    pub fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    pub async fn status(&self) -> Option<serde_json::Value> {
        match get_text(self.addr, "/status").await {
            Ok((200, body)) => serde_json::from_str(&body).ok(),
            _ => None,
        }
    }

    pub async fn ready(&self) -> Option<bool> {
        get_text(self.addr, "/readyz")
            .await
            .ok()
            .map(|(c, _)| c == 200)
    }

    /// The positions of `topic`'s partitions, if the worker answers.
    pub async fn positions(&self, topic: &str) -> Option<BTreeMap<i64, i64>> {
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

    pub async fn wait_positions(&mut self, topic: &str, want: &BTreeMap<i32, i64>) {
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
/// order (duplicates only repeat records that appeared before). The source may itself hold
/// a record twice (a producer's retry): each of its copies must then appear. Returns the
/// duplicates per partition, or what is wrong.
pub fn check_copy(
    source: &[ConsumedRecord],
    target: &[ConsumedRecord],
) -> Result<BTreeMap<i32, usize>, String> {
    let mut out = BTreeMap::new();
    let mut targets = by_partition(target);
    for (p, s) in by_partition(source) {
        let mut index: HashMap<&Content, Vec<usize>> = HashMap::new();
        for (i, c) in s.iter().enumerate() {
            index.entry(c).or_default().push(i);
        }
        let (mut next, mut dups) = (0usize, 0usize);
        let t = targets.remove(&p).unwrap_or_default();
        for (n, c) in t.iter().enumerate() {
            if s.get(next) == Some(c) {
                next += 1;
                continue;
            }
            match index.get(c) {
                Some(at) if at[0] < next => dups += 1,
                Some(at) => {
                    let later = t[n..].iter().position(|c| *c == s[next]);
                    return Err(format!(
                        "partition {p}: target record #{n} is source record {}, before source \
                         record {next} ever appeared (order of first appearance broken; source \
                         record {next} is {})",
                        at[0],
                        match later {
                            Some(k) => format!("target record #{}", n + k),
                            None => "nowhere after it on the target: lost".to_owned(),
                        }
                    ));
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
    if let Some((p, t)) = targets.into_iter().find(|(_, t)| !t.is_empty()) {
        return Err(format!(
            "partition {p}: {} target records, none in the source",
            t.len()
        ));
    }
    Ok(out)
}

/// Records the source itself holds more than once (its producer retried), all partitions.
pub fn repeated_in_source(source: &[ConsumedRecord]) -> usize {
    by_partition(source)
        .values()
        .map(|s| {
            let distinct: std::collections::HashSet<&Content> = s.iter().collect();
            s.len() - distinct.len()
        })
        .sum()
}

/// What an exactly-once copy must show: the target equals the expected records, partition
/// by partition, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Exactness {
    /// Expected records missing from the target.
    pub lost: usize,
    /// Copies of expected records beyond the first.
    pub duplicates: usize,
    /// Target records that are `forbidden` (e.g. records of aborted source transactions).
    pub forbidden: usize,
    /// Target records that are neither expected nor forbidden.
    pub foreign: usize,
    /// Partitions whose records are the expected ones but not in their order.
    pub out_of_order: Vec<i32>,
}

impl Exactness {
    pub fn exact(&self) -> bool {
        *self == Exactness::default()
    }
}

/// Compares `target` with `expected` (records as multisets and sequences, per partition);
/// `forbidden` tells a record that must never appear.
pub fn exactness(
    expected: &[Content],
    target: &[ConsumedRecord],
    forbidden: impl Fn(&Content) -> bool,
) -> Exactness {
    let mut out = Exactness::default();
    let mut want: BTreeMap<i32, Vec<Content>> = BTreeMap::new();
    for c in expected {
        want.entry(c.0).or_default().push(c.clone());
    }
    let mut got = by_partition(target);
    let parts: BTreeSet<i32> = want.keys().chain(got.keys()).copied().collect();
    for p in parts {
        let s = want.remove(&p).unwrap_or_default();
        let t = got.remove(&p).unwrap_or_default();
        let mut counts: HashMap<&Content, i64> = HashMap::new();
        for c in &s {
            *counts.entry(c).or_insert(0) += 1;
        }
        let mut clean = true;
        for c in &t {
            match counts.get_mut(c) {
                Some(n) => {
                    *n -= 1;
                    if *n < 0 {
                        out.duplicates += 1;
                        clean = false;
                    }
                }
                None if forbidden(c) => {
                    out.forbidden += 1;
                    clean = false;
                }
                None => {
                    out.foreign += 1;
                    clean = false;
                }
            }
        }
        let lost: i64 = counts.values().filter(|n| **n > 0).sum();
        out.lost += usize::try_from(lost).unwrap();
        if clean && lost == 0 && s != t {
            out.out_of_order.push(p);
        }
    }
    out
}

/// Records' contents per partition, in order.
pub fn by_partition(records: &[ConsumedRecord]) -> BTreeMap<i32, Vec<Content>> {
    let mut out: BTreeMap<i32, Vec<Content>> = BTreeMap::new();
    for c in content(records) {
        out.entry(c.0).or_default().push(c);
    }
    out
}

/// A produced record's content (what the target must hold).
pub fn produced_content(r: &ProduceRecord) -> Content {
    (
        r.partition.expect("a partition"),
        r.key.clone(),
        r.value.clone(),
        r.headers.clone(),
        r.timestamp_ms,
    )
}

pub fn batch(tag: &str, partitions: i32, from: usize, n: usize) -> Vec<ProduceRecord> {
    (from..from + n)
        .map(|i| {
            ProduceRecord::new(
                format!("{tag}-{i}"),
                format!("v{i:08}-{}", "x".repeat(i % 50)),
            )
            .partition(i32::try_from(i).unwrap() % partitions)
            .header("i", Some(i.to_string().as_bytes()))
            // Current times: Kafka applies retention to what it keeps on disk (and warns
            // about times in the future).
            .timestamp(now_ms())
        })
        .collect()
}

pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

pub fn ends_of(records: &[ProduceRecord]) -> BTreeMap<i32, i64> {
    let mut e = BTreeMap::new();
    for r in records {
        *e.entry(r.partition.unwrap()).or_insert(0) += 1;
    }
    e
}

/// Which records a reader sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Committed transactions and records written without one (what a target's users read).
    Committed,
    /// Everything in the log, aborted transactions included.
    Uncommitted,
}

/// Reads every partition of `topic` from its start until the reader reached the end of each
/// (no writer may be running), sorted by (partition, offset). The end is the broker's: under
/// [`Isolation::Committed`] a transaction left open would end the read before it.
pub async fn read_to_end(
    bootstrap: &str,
    topic: &str,
    isolation: Isolation,
) -> Vec<ConsumedRecord> {
    let (b, t) = (bootstrap.to_owned(), topic.to_owned());
    tokio::task::spawn_blocking(move || read_to_end_blocking(&b, &t, isolation))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("reading {topic} to its end: {e}"))
}

fn read_to_end_blocking(
    bootstrap: &str,
    topic: &str,
    isolation: Isolation,
) -> Result<Vec<ConsumedRecord>, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "mirrorflow-fault-suite-reader")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set(
            "isolation.level",
            match isolation {
                Isolation::Committed => "read_committed",
                Isolation::Uncommitted => "read_uncommitted",
            },
        )
        .create()
        .map_err(|e| e.to_string())?;
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(|e| format!("metadata: {e}"))?;
    let partitions = md
        .topics()
        .first()
        .map(|t| t.partitions().len())
        .filter(|n| *n > 0)
        .ok_or_else(|| "the topic does not exist".to_owned())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, i32::try_from(p).unwrap(), Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut at_end = vec![false; partitions];
    let mut records = Vec::new();
    let begin = Instant::now();
    while !at_end.iter().all(|e| *e) {
        if begin.elapsed() > WAIT * 2 {
            return Err(format!(
                "not at the end after {:?} ({} records, partitions at the end: {at_end:?})",
                begin.elapsed(),
                records.len()
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => at_end[usize::try_from(p).unwrap()] = true,
            Some(Err(e)) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) => {}
            Some(Err(e)) => return Err(e.to_string()),
            Some(Ok(m)) => {
                at_end[usize::try_from(m.partition()).unwrap()] = false;
                records.push(ConsumedRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers: m
                        .headers()
                        .map(|hs| {
                            hs.iter()
                                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                                .collect()
                        })
                        .unwrap_or_default(),
                    timestamp_ms: m.timestamp().to_millis(),
                });
            }
        }
    }
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}
