//! One contender run: spawn the contender, poll its target topic until every record is
//! there, and sample its processes' CPU and memory meanwhile.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use mirrorflow::testkit::brokers;
use mirrorflow::testkit::stats;

use crate::kafka::TargetCounter;
use crate::process::{stop, wait_for_exits, Proc};
use crate::worker::worker_report;
use crate::{bare, kcat, procfs};

/// The copiers compared (see the bench's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contender {
    Bare,
    Mirrorflow,
    Kcat,
    /// MirrorMaker 2 with this `tasks.max`.
    Mm2(u32),
}

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::Bare => "bare rdkafka loop",
            Contender::Mirrorflow => "mirrorflow (AtLeastOnce)",
            Contender::Kcat => "kcat -C | kcat -P",
            Contender::Mm2(1) => "MirrorMaker 2 (tasks.max 1)",
            Contender::Mm2(2) => "MirrorMaker 2 (tasks.max 2)",
            Contender::Mm2(_) => "MirrorMaker 2",
        }
    }

    /// Short name in tables (`mm2 t1`).
    pub fn short(self) -> String {
        match self {
            Contender::Bare => "bare".to_string(),
            Contender::Mirrorflow => "mirrorflow".to_string(),
            Contender::Kcat => "kcat".to_string(),
            Contender::Mm2(t) => format!("mm2 t{t}"),
        }
    }

    pub fn tag(self) -> String {
        self.short().replace(' ', "")
    }
}

/// A throughput scenario: the record size, and whether the source topic's records and every
/// contender's writes are lz4-compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Scenario {
    pub size: usize,
    pub lz4: bool,
}

impl Scenario {
    pub const fn plain(size: usize) -> Self {
        Self { size, lz4: false }
    }

    /// `100 B`, `1 KB`, `1 KB lz4`, `10 KB`.
    pub fn label(self) -> String {
        let size = if self.size >= 1024 && self.size.is_multiple_of(1024) {
            format!("{} KB", self.size / 1024)
        } else {
            format!("{} B", self.size)
        };
        if self.lz4 {
            format!("{size} lz4")
        } else {
            size
        }
    }

    /// Its name in `MIRRORFLOW_BENCH_SCENARIOS` and in its source topic: `1024-lz4`.
    pub fn tag(self) -> String {
        format!("{}{}", self.size, if self.lz4 { "-lz4" } else { "" })
    }

    /// librdkafka's `compression.type` of the producers.
    pub fn compression(self) -> &'static str {
        if self.lz4 {
            "lz4"
        } else {
            "none"
        }
    }
}

/// What one contender run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    pub contender: Contender,
    pub scenario: Scenario,
    pub partitions: i32,
    /// Round of the run (ratios pair contenders of the same round).
    pub round: usize,
    pub records: u64,
    /// Spawn → every record on the target.
    pub wall: f64,
    /// Spawn → first records on the target.
    pub startup: f64,
    /// Records/s between the first and the last poll.
    pub steady_rate: f64,
    /// CPU seconds of the contender's processes, spawn to the end.
    pub cpu: f64,
    /// CPU seconds and records while 10-90 % of the records arrived ([`stats::steady_cpu`]).
    pub steady_cpu: Option<(f64, u64)>,
    pub broker_cpu: f64,
    pub peak_rss_kib: u64,
    /// Largest sampled heap (`RssAnon`) and file-backed (`RssFile`) RSS, summed over processes.
    pub peak_anon_kib: u64,
    pub peak_file_kib: u64,
    /// Records on the target beyond the source's (duplicates).
    pub extra: u64,
    pub notes: Vec<String>,
}

impl Measured {
    /// Megabytes copied (uncompressed record sizes).
    pub fn mb(&self) -> f64 {
        self.records as f64 * self.scenario.size as f64 / 1e6
    }

    /// CPU ms per MB in the steady part (the window of the steady rate), or over the whole
    /// run when too few polls fell in it. Shown beside the whole run's figure, not judged.
    pub fn steady_cpu_ms_per_mb(&self) -> f64 {
        match self.steady_cpu {
            Some((cpu, records)) => {
                1000.0 * cpu / (records as f64 * self.scenario.size as f64 / 1e6)
            }
            None => 1000.0 * self.cpu / self.mb(),
        }
    }

    pub fn end_to_end_rate(&self) -> f64 {
        self.records as f64 / self.wall
    }
}

/// Everything a contender run needs.
pub struct Run<'a> {
    pub src: &'a str,
    pub tgt: &'a str,
    pub topic: &'a str,
    pub partitions: i32,
    pub records: u64,
    pub scenario: Scenario,
    pub round: usize,
    pub poll: Duration,
    pub timeout: Duration,
    pub brokers: &'a [u32],
    pub logs: &'a Path,
    pub kcat_libdir: Option<&'a Path>,
    pub mirrorflow_bin: &'a Path,
    pub rt: &'a tokio::runtime::Runtime,
    /// Appended to the worker's source alias (see [`Run::alias`]).
    pub alias_suffix: &'a str,
    /// The worker flow's `spec.topics.refreshIntervalSeconds` (`None`: the API's default).
    pub refresh_interval: Option<u64>,
    /// The worker's flow file also holds an OffsetCheckpoint (the checkpoint runner connects
    /// and reads the offset syncs only when one names the flow).
    pub checkpoint: bool,
}

impl Run<'_> {
    /// The worker's source alias: its own per run, so every worker starts with an empty
    /// offset-syncs topic (`mm2-offset-syncs.<alias>.internal`, read whole at start by the
    /// checkpoint side) instead of the history of the runs before it.
    pub fn alias(&self) -> String {
        format!("{}-r{}{}", self.topic, self.round, self.alias_suffix)
    }

    pub fn target_topic(&self, c: Contender) -> String {
        match c {
            // The worker names it: `<sourceAlias>.<topic>` (default policy).
            Contender::Mirrorflow => format!("{}.{}", self.alias(), self.topic),
            // MM2 names it too, after its source alias.
            Contender::Mm2(tasks) => crate::mm2::target_topic(self, tasks),
            _ => format!("{}.{}", c.tag(), self.topic),
        }
    }

    pub fn log_file(&self, name: &str) -> anyhow::Result<(PathBuf, File)> {
        let path = self
            .logs
            .join(format!("{name}-{}-r{}.log", self.topic, self.round));
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok((path, file))
    }

    pub fn spawn(&self, name: &str, cmd: &mut Command, stdout: Stdio) -> anyhow::Result<Proc> {
        let (log, file) = self.log_file(name)?;
        let child = cmd
            .stdout(stdout)
            .stderr(file)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("spawning {name}"))?;
        Ok(Proc::new(name, child, log))
    }

    /// Runs contender `c` and measures it; the target topic is deleted afterwards.
    pub fn measure(&self, c: Contender) -> anyhow::Result<Measured> {
        let target_topic = self.target_topic(c);
        if matches!(c, Contender::Bare | Contender::Kcat) {
            self.rt
                .block_on(brokers::create_topic(
                    self.tgt,
                    &target_topic,
                    self.partitions,
                    &[],
                ))
                .with_context(|| format!("creating {target_topic}"))?;
        }
        let mut counter = TargetCounter::new(self.tgt)?;
        let result = self.measure_inner(c, &target_topic, &mut counter);
        // Free the brokers' memory for the next contender (memory storage).
        if let Err(e) = self
            .rt
            .block_on(brokers::delete_topic(self.tgt, &target_topic))
        {
            eprintln!("  note: could not delete {target_topic}: {e}");
        }
        if let Contender::Mm2(tasks) = c {
            crate::mm2::clean_up(self, tasks);
        }
        result
    }

    fn measure_inner(
        &self,
        c: Contender,
        target_topic: &str,
        counter: &mut TargetCounter,
    ) -> anyhow::Result<Measured> {
        let mut notes = Vec::new();
        let mut worker_port = None;
        let broker_cpu0 = procfs::cpu_of(self.brokers);
        let t0 = Instant::now();
        let mut procs = match c {
            Contender::Bare => vec![bare::spawn(self, target_topic)?],
            Contender::Mirrorflow => {
                let (p, port) = self.spawn_worker()?;
                worker_port = Some(port);
                vec![p]
            }
            Contender::Kcat => kcat::spawn_pipe(self, target_topic)?,
            Contender::Mm2(tasks) => vec![crate::mm2::spawn(self, tasks, "mm2")?],
        };
        let outcome = self.watch(c, &mut procs, target_topic, counter, t0, broker_cpu0);
        if let (Some(port), Ok(_)) = (worker_port, &outcome) {
            match worker_report(self, port) {
                Ok(report) => notes.extend(report),
                Err(e) => notes.push(format!("worker status/metrics unavailable: {e:#}")),
            }
        }
        // Stop whatever still runs (the worker; anything left after a failure).
        for p in &mut procs {
            stop(p);
        }
        let keep = std::env::var_os("MIRRORFLOW_BENCH_KEEP_LOGS").is_some();
        let mut m = match outcome {
            Ok(m) => m,
            Err(e) => {
                let tails: Vec<String> = procs
                    .iter()
                    .map(|p| format!("--- {} ({}):\n{}", p.name, p.log.display(), p.log_tail()))
                    .collect();
                return Err(e.context(tails.join("\n")));
            }
        };
        if !keep {
            for p in &procs {
                let _ = std::fs::remove_file(&p.log);
            }
        }
        m.notes.extend(notes);
        Ok(m)
    }

    /// Polls the target until every record is there; samples CPU and RSS meanwhile.
    fn watch(
        &self,
        c: Contender,
        procs: &mut [Proc],
        target_topic: &str,
        counter: &mut TargetCounter,
        t0: Instant,
        broker_cpu0: f64,
    ) -> anyhow::Result<Measured> {
        let n = self.records;
        let mut progress = Progress::new(t0);
        loop {
            for p in procs.iter_mut() {
                p.sample();
            }
            let count = counter.count(target_topic, self.partitions).unwrap_or(0);
            let at = progress.record(count, procs.iter().map(|p| p.cpu).sum());
            if count >= n {
                let broker_cpu = procfs::cpu_of(self.brokers) - broker_cpu0;
                // Processes that end by themselves are measured to their exit (flush
                // included); the worker as it is now.
                wait_for_exits(procs)?;
                // A final count: anything beyond `n` is a duplicate.
                let final_count = counter
                    .count(target_topic, self.partitions)
                    .unwrap_or(count);
                return Ok(Measured {
                    contender: c,
                    scenario: self.scenario,
                    partitions: self.partitions,
                    round: self.round,
                    records: n,
                    wall: at,
                    startup: progress.startup(),
                    steady_rate: progress.steady_rate(n),
                    cpu: procs.iter().map(|p| p.cpu).sum(),
                    steady_cpu: stats::steady_cpu(&progress.cpu, n),
                    broker_cpu,
                    peak_rss_kib: procs.iter().map(|p| p.hwm_kib).sum(),
                    peak_anon_kib: procs.iter().map(|p| p.anon_kib).sum(),
                    peak_file_kib: procs.iter().map(|p| p.file_kib).sum(),
                    extra: final_count.saturating_sub(n),
                    notes: Vec::new(),
                });
            }
            self.check_running(c, procs, &progress)?;
            std::thread::sleep(self.poll);
        }
    }

    /// Fails when a process exited before the copy was complete (or failed), when all
    /// exited and nothing arrived for 5 s, or when the run's timeout has passed.
    fn check_running(
        &self,
        c: Contender,
        procs: &[Proc],
        progress: &Progress,
    ) -> anyhow::Result<()> {
        let (n, last_count) = (self.records, progress.last_count);
        for p in procs.iter() {
            if let Some(status) = p.exit {
                if !status.success() || !p.exits_by_itself {
                    bail!(
                        "{} exited with {status} after {last_count} of {n} records reached the target",
                        p.name
                    );
                }
            }
        }
        if procs.iter().all(|p| p.exit.is_some())
            && progress.last_progress.elapsed() > Duration::from_secs(5)
        {
            bail!("{c:?} exited, but only {last_count} of {n} records reached the target");
        }
        if progress.t0.elapsed() > self.timeout {
            bail!(
                "{c:?} did not copy {n} records within {:?} ({last_count} arrived)",
                self.timeout
            );
        }
        Ok(())
    }
}

/// What the poller has seen of the target so far.
struct Progress {
    /// When the contender was spawned.
    t0: Instant,
    /// Seconds since `t0` and count of the first poll that saw records.
    first: Option<(f64, u64)>,
    /// `(seconds since t0, records on the target)` of every poll.
    samples: Vec<(f64, u64)>,
    /// `(records on the target, the contender's CPU seconds)` of every poll.
    cpu: Vec<(u64, f64)>,
    last_count: u64,
    /// When the count last grew.
    last_progress: Instant,
}

impl Progress {
    fn new(t0: Instant) -> Self {
        Self {
            t0,
            first: None,
            samples: Vec::new(),
            cpu: Vec::new(),
            last_count: 0,
            last_progress: Instant::now(),
        }
    }

    /// Records a poll that saw `count` records on the target after the contender had used
    /// `cpu` seconds; returns its time since `t0`.
    fn record(&mut self, count: u64, cpu: f64) -> f64 {
        let at = self.t0.elapsed().as_secs_f64();
        if count > self.last_count {
            self.last_count = count;
            self.last_progress = Instant::now();
        }
        if count > 0 && self.first.is_none() {
            self.first = Some((at, count));
        }
        self.samples.push((at, count));
        self.cpu.push((count, cpu));
        at
    }

    /// The first poll that saw records (the last poll if none did).
    fn first_or_last(&self) -> (f64, u64) {
        self.first
            .or_else(|| self.samples.last().copied())
            .unwrap_or_default()
    }

    /// Spawn → first records on the target (s).
    fn startup(&self) -> f64 {
        self.first_or_last().0
    }

    /// The steady rate of `n` records ([`stats::steady_rate`]); from the first poll that saw
    /// records to the last one, or over the whole run, when there are too few polls.
    fn steady_rate(&self, n: u64) -> f64 {
        let (at, _) = self.samples.last().copied().unwrap_or_default();
        let (t_first, n_first) = self.first_or_last();
        stats::steady_rate(&self.samples, n).unwrap_or(if at - t_first > 0.2 && n > n_first {
            (n - n_first) as f64 / (at - t_first)
        } else {
            n as f64 / at
        })
    }
}
