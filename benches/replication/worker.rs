//! The mirrorflow worker as a contender: its command line, its flow, its /status and
//! /metrics after a copy, and the peak RSS of an idle worker.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use crate::contender::Run;
use crate::env_u64;
use crate::kafka::TargetCounter;
use crate::process::{stop, Proc};

impl Run<'_> {
    /// Starts a worker copying this run's topic (its own flow file and port); returns it
    /// with the port of its /status and /metrics.
    pub fn spawn_worker(&self) -> anyhow::Result<(Proc, u16)> {
        self.spawn_worker_with("")
    }

    /// [`Run::spawn_worker`] with `spec_lines` (YAML indented under `spec:`) added to the
    /// flow's spec.
    pub fn spawn_worker_with(&self, spec_lines: &str) -> anyhow::Result<(Proc, u16)> {
        let port = free_port()?;
        Ok((
            self.spawn_worker_on_with(port, "mirrorflow", spec_lines)?,
            port,
        ))
    }

    /// Starts a worker on `port`, its log named `name`: the same port is the same flow (its
    /// name holds the port), so a worker started again on it resumes from its progress.
    pub fn spawn_worker_on(&self, port: u16, name: &str) -> anyhow::Result<Proc> {
        self.spawn_worker_on_with(port, name, "")
    }

    /// [`Run::spawn_worker_on`] with `spec_lines` added to the flow's spec.
    fn spawn_worker_on_with(
        &self,
        port: u16,
        name: &str,
        spec_lines: &str,
    ) -> anyhow::Result<Proc> {
        let flow = self.logs.join(format!(
            "flow-{}-r{}{}.yaml",
            self.topic, self.round, self.alias_suffix
        ));
        let yaml = flow_yaml(self, port);
        // The spec ends where the OffsetCheckpoint's document (if any) begins.
        let yaml = match yaml.split_once("---\n") {
            Some((flow, rest)) => format!("{flow}{spec_lines}---\n{rest}"),
            None => format!("{yaml}{spec_lines}"),
        };
        std::fs::write(&flow, yaml)?;
        let mut cmd = self.worker_command(&flow, port);
        let mut p = self.spawn(name, &mut cmd, Stdio::null())?;
        p.exits_by_itself = false;
        Ok(p)
    }

    /// `mirrorflow worker --flow FLOW --listen 127.0.0.1:PORT`.
    fn worker_command(&self, flow: &Path, port: u16) -> Command {
        let mut cmd = Command::new(self.mirrorflow_bin);
        if let Some(filter) = std::env::var_os("MIRRORFLOW_BENCH_WORKER_RUST_LOG") {
            cmd.env("RUST_LOG", filter);
        }
        cmd.arg("worker")
            .arg("--flow")
            .arg(flow)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--worker-index")
            .arg("0")
            .arg("--secrets-dir")
            .arg(self.logs);
        cmd
    }

    /// Peak RSS, largest RssAnon and RssFile, and the last RSS sample (KiB) of a worker whose
    /// flow selects no topic, sampled for `settle`: the baseline under the per-partition and
    /// record-data costs. With `sync_partitions`, sampled also until the worker's checkpoint
    /// side has read the offset syncs of that many partitions
    /// (`mirrorflow_checkpoint_sync_partitions`, read every 500 ms) and a second after, and
    /// how long the read took: a peak taken before the history is read measures nothing.
    pub fn idle_worker_rss(
        &self,
        settle: Duration,
        sync_partitions: Option<u64>,
    ) -> anyhow::Result<(crate::rounds::IdleRss, Option<Duration>)> {
        let port = free_port()?;
        let flow = self.logs.join("flow-idle.yaml");
        std::fs::write(&flow, flow_yaml(self, port))?;
        let mut p = self.spawn(
            "mirrorflow-idle",
            &mut self.worker_command(&flow, port),
            Stdio::null(),
        )?;
        p.exits_by_itself = false;
        let t = Instant::now();
        let limit = settle.max(HISTORY_READ_LIMIT);
        let mut read_in = None;
        let mut next_check = t;
        while p.exit.is_none() {
            let done = match (sync_partitions, read_in) {
                (None, _) => t.elapsed() >= settle,
                (Some(_), Some(r)) => t.elapsed() >= settle.max(r + Duration::from_secs(1)),
                (Some(_), None) => t.elapsed() >= limit,
            };
            if done {
                break;
            }
            p.sample();
            if let (Some(want), None) = (sync_partitions, read_in) {
                if Instant::now() >= next_check {
                    next_check += Duration::from_millis(500);
                    let read = http_get(port, "/metrics")
                        .map(|m| metric_sum(&m, "mirrorflow_checkpoint_sync_partitions"))
                        .unwrap_or(0.0);
                    if read >= want as f64 {
                        read_in = Some(t.elapsed());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let exited = p.exit;
        stop(&mut p);
        if let Some(status) = exited {
            bail!("the idle worker exited with {status}:\n{}", p.log_tail());
        }
        if let (Some(want), None) = (sync_partitions, read_in) {
            bail!(
                "the idle worker had not read the offset syncs of {want} partitions after {} s \
                 (mirrorflow_checkpoint_sync_partitions), so its peak would not cover them:\n{}",
                limit.as_secs(),
                p.log_tail()
            );
        }
        let _ = std::fs::remove_file(&p.log);
        Ok(((p.hwm_kib, p.anon_kib, p.file_kib, p.rss_kib), read_in))
    }
}

/// How long an idle worker may take to read an offset-syncs history at start.
const HISTORY_READ_LIMIT: Duration = Duration::from_secs(120);

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> anyhow::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a free port")?;
    Ok(l.local_addr()?.port())
}

/// `GET path` on `127.0.0.1:port` (HTTP/1.0, whole body).
pub fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("GET {path}: malformed answer"))?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("GET {path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// Sum of the samples of a Prometheus metric (all label sets) whose line starts with
/// `prefix`.
pub fn metric_sum(metrics: &str, prefix: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `extra`, then `key=value,key=value` from `var`, as a YAML `config:` block (empty when
/// there is none).
fn config_block(var: &str, extra: &[(&str, &str)]) -> String {
    let from_env = std::env::var(var).unwrap_or_default();
    let entries: String = extra
        .iter()
        .copied()
        .chain(from_env.split(',').filter_map(|kv| kv.split_once('=')))
        .map(|(k, v)| format!("\n      {}: \"{}\"", k.trim(), v.trim()))
        .collect();
    if entries.is_empty() {
        String::new()
    } else {
        format!("\n    config:{entries}")
    }
}

/// The flow's `spec.offsetSyncs.lagMax` (`MIRRORFLOW_BENCH_LAG_MAX`, default 100: MM2's
/// default).
pub fn lag_max() -> u64 {
    env_u64("MIRRORFLOW_BENCH_LAG_MAX", 100).max(1)
}

/// The flow's `spec.workers.inFlightMiB` (`MIRRORFLOW_BENCH_IN_FLIGHT_MIB`, default the
/// API's default).
pub fn in_flight_mib() -> u64 {
    let default = u64::from(mirrorflow::api::defaults::in_flight_mib().unsigned_abs());
    env_u64("MIRRORFLOW_BENCH_IN_FLIGHT_MIB", default).clamp(1, 1024)
}

/// The flow the worker runs (one per topic and round, so progress starts empty);
/// `MIRRORFLOW_BENCH_HEARTBEAT_SECONDS` sets `spec.heartbeats.intervalSeconds` (what the
/// heartbeat runner's clients cost: `0` turns it off).
fn flow_yaml(run: &Run<'_>, port: u16) -> String {
    // Tuning experiments: `MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG=key=value,key=value` lands
    // in `spec.source.config` (the worker's consumer), e.g. `queued.max.messages.kbytes=4096`;
    // `MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG` in `spec.target.config` (its producer).
    let source_config = config_block("MIRRORFLOW_BENCH_WORKER_SOURCE_CONFIG", &[]);
    // The compressed scenario: the worker writes lz4 like the bare loop and kcat.
    let compression: &[(&str, &str)] = if run.scenario.lz4 {
        &[("compression.type", "lz4")]
    } else {
        &[]
    };
    let target_config = config_block("MIRRORFLOW_BENCH_WORKER_TARGET_CONFIG", compression);
    format!(
        "apiVersion: mirrorflow.io/v1alpha1
kind: MirrorFlow
metadata:
  name: bench-{topic}-r{round}-{port}
spec:
  source:
    alias: {alias}
    bootstrapServers: \"{src}\"{source_config}
  target:
    alias: dc2
    bootstrapServers: \"{tgt}\"{target_config}
  topics:
    include: [\"{topic}\"]{refresh}
  # As the bare loop and kcat copy: without transactions.
  delivery: AtLeastOnce
  offsetValidation:
    enabled: true
  offsetSyncs:
    lagMax: {lag}
  workers:
    inFlightMiB: {in_flight}{heartbeats}
{checkpoint}",
        checkpoint = if run.checkpoint {
            format!(
                "---
apiVersion: mirrorflow.io/v1alpha1
kind: OffsetCheckpoint
metadata:
  name: bench-groups
spec:
  flowRef:
    name: bench-{topic}-r{round}-{port}
  groups:
    include: [\"bench-.*\"]
",
                topic = run.topic,
                round = run.round,
            )
        } else {
            String::new()
        },
        heartbeats = match std::env::var("MIRRORFLOW_BENCH_HEARTBEAT_SECONDS") {
            Ok(s) => format!("\n  heartbeats:\n    intervalSeconds: {}", s.trim()),
            Err(_) => String::new(),
        },
        refresh = match run.refresh_interval {
            Some(s) => format!("\n    refreshIntervalSeconds: {s}"),
            None => String::new(),
        },
        lag = lag_max(),
        in_flight = in_flight_mib(),
        topic = run.topic,
        round = run.round,
        alias = run.alias(),
        src = run.src,
        tgt = run.tgt,
    )
}

/// After the copy: waits until the worker's status shows every partition at the source end
/// (progress committed), and reads batch and sync counts from /metrics.
pub fn worker_report(run: &Run<'_>, port: u16) -> anyhow::Result<Vec<String>> {
    let mut counter = TargetCounter::new(run.src)?;
    let ends = counter
        .ends(run.topic, run.partitions)
        .context("source high watermarks")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut notes = Vec::new();
    loop {
        let status: serde_json::Value = serde_json::from_str(&http_get(port, "/status")?)?;
        let positions: BTreeMap<i64, i64> = status["partitions"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| Some((p["partition"].as_i64()?, p["position"].as_i64()?)))
                    .collect()
            })
            .unwrap_or_default();
        let done = ends
            .iter()
            .enumerate()
            .all(|(p, end)| positions.get(&(p as i64)) == Some(end));
        if done {
            break;
        }
        if Instant::now() > deadline {
            notes.push(format!(
                "worker status did not show every position at the source end within 20 s (state {})",
                status["state"]
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let metrics = http_get(port, "/metrics")?;
    let batches = metric_sum(
        &metrics,
        "mirrorflow_worker_batches_total{outcome=\"committed\"}",
    );
    let retried = metric_sum(
        &metrics,
        "mirrorflow_worker_batches_total{outcome=\"retried\"}",
    );
    let syncs = metric_sum(&metrics, "mirrorflow_worker_offset_syncs_total");
    let errors = metric_sum(&metrics, "mirrorflow_worker_errors_total");
    if batches > 0.0 {
        notes.push(format!(
            "{batches:.0} batches committed ({:.0} records/batch), {retried:.0} retried, {syncs:.0} offset syncs, {errors:.0} errors",
            run.records as f64 / batches
        ));
    }
    Ok(notes)
}
