//! The bench's rounds: throughput per scenario (the contenders' order turning each round),
//! the scale curve over partition counts, peak RSS with many partitions, and the idle
//! worker's baseline.

use std::path::Path;
use std::time::{Duration, Instant};

use mirrorflow::testkit::brokers;

use crate::contender::{Contender, Measured, Run, Scenario};
use crate::kafka::{produce_source, produce_sync_history, TargetCounter};
use crate::report::{IDLE_TARGET_MIB, SYNC_HISTORY_TARGET_MIB};
use crate::Config;

/// An idle worker's peak RSS, largest RssAnon and RssFile, and last RSS sample (KiB).
pub type IdleRss = (u64, u64, u64, u64);

/// How often the target is polled during throughput runs.
const POLL: Duration = Duration::from_millis(50);

/// What the rounds measured, and what they could not.
#[derive(Default)]
pub struct Outcome {
    /// Throughput runs, every round.
    pub results: Vec<Measured>,
    /// Scale-curve runs (1 KB records over 1 … 1,000 partitions), every round.
    pub scale: Vec<Measured>,
    /// Peak RSS runs with many partitions, every round.
    pub rss: Vec<Measured>,
    /// Peak, heap and file-backed RSS (KiB) of idle workers, with what they read at start.
    /// What the worker had to do, its RSS, and how long it took to read its sync history.
    /// (what, target MiB, peak, offset syncs read in).
    pub idle_rss: Vec<(String, f64, IdleRss, Option<Duration>)>,
    /// Topic refresh runs (`refresh` scenario), with the scenario's knobs.
    pub refresh: Vec<crate::refresh::RefreshMeasured>,
    pub refresh_config: Option<crate::refresh::RefreshConfig>,
    /// Latency runs of the worker and MM2 at a fixed offered rate.
    pub latency: Vec<crate::live::LatencyMeasured>,
    /// Resume-after-SIGKILL runs of the worker and MM2.
    pub resume: Vec<crate::live::ResumeMeasured>,
    pub failures: Vec<String>,
}

/// What every run shares: the configuration, the brokers, the logs, the binaries.
pub struct Bench<'a> {
    pub cfg: &'a Config,
    pub src: &'a str,
    pub tgt: &'a str,
    pub broker_pids: &'a [u32],
    pub logs: &'a Path,
    pub kcat_libdir: Option<&'a Path>,
    pub mirrorflow_bin: &'a Path,
    pub rt: &'a tokio::runtime::Runtime,
}

impl Bench<'_> {
    /// A run of `topic` with the defaults: the throughput partitions, round 0, no records.
    pub(crate) fn run<'b>(&'b self, topic: &'b str) -> Run<'b> {
        Run {
            src: self.src,
            tgt: self.tgt,
            topic,
            partitions: self.cfg.partitions,
            records: 0,
            scenario: Scenario::plain(1024),
            round: 0,
            poll: POLL,
            timeout: self.cfg.timeout,
            brokers: self.broker_pids,
            logs: self.logs,
            kcat_libdir: self.kcat_libdir,
            mirrorflow_bin: self.mirrorflow_bin,
            rt: self.rt,
            alias_suffix: "",
            refresh_interval: None,
            checkpoint: false,
        }
    }

    /// Produces a source topic per scenario, then runs every contender on each, round after
    /// round.
    pub fn throughput(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let scenarios: Vec<(Scenario, u64)> = [
            (Scenario::plain(100), cfg.records_100),
            (Scenario::plain(1024), cfg.records_1k),
            (
                Scenario {
                    size: 1024,
                    lz4: true,
                },
                cfg.records_1k,
            ),
            (Scenario::plain(10240), cfg.records_10k),
        ]
        .into_iter()
        .filter(|(s, _)| cfg.wants(&s.tag()))
        .collect();
        for (scenario, n) in &scenarios {
            let topic = format!("src-{}", scenario.tag());
            self.produce(&topic, scenario, *n, cfg.partitions)?;
        }
        for round in 0..cfg.rounds {
            for (scenario, n) in &scenarios {
                let topic = format!("src-{}", scenario.tag());
                let run = Run {
                    records: *n,
                    scenario: *scenario,
                    round,
                    // MM2 checkpoints (and offset syncs): so does the worker.
                    checkpoint: true,
                    ..self.run(&topic)
                };
                out.results
                    .extend(self.round(&run, &cfg.contenders, &mut out.failures));
            }
        }
        Ok(())
    }

    /// The scale curve: 1 KB records over 1, 100 and 1,000 partitions, the worker beside the
    /// bare loop and MM2 (rate, CPU and peak RSS per partition count).
    pub fn scale(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let scenario = Scenario::plain(1024);
        for &parts in &cfg.scale_partitions {
            self.produce(
                &format!("scale-{parts}"),
                &scenario,
                cfg.scale_records,
                parts,
            )?;
        }
        for round in 0..cfg.rounds {
            for &parts in &cfg.scale_partitions {
                let topic = format!("scale-{parts}");
                let run = Run {
                    partitions: parts,
                    records: cfg.scale_records,
                    scenario,
                    round,
                    poll: if parts >= 100 {
                        Duration::from_millis(200)
                    } else {
                        POLL
                    },
                    checkpoint: true,
                    ..self.run(&topic)
                };
                let contenders: Vec<Contender> = cfg
                    .contenders
                    .iter()
                    .copied()
                    .filter(|c| *c != Contender::Kcat)
                    .collect();
                out.scale
                    .extend(self.round(&run, &contenders, &mut out.failures));
            }
        }
        Ok(())
    }

    /// Creates source topic `topic` with `partitions` and fills it with `n` records of
    /// `scenario`.
    fn produce(
        &self,
        topic: &str,
        scenario: &Scenario,
        n: u64,
        partitions: i32,
    ) -> anyhow::Result<()> {
        self.rt
            .block_on(brokers::create_topic(self.src, topic, partitions, &[]))?;
        let t = Instant::now();
        produce_source(
            self.src,
            topic,
            n,
            partitions,
            scenario.size,
            scenario.compression(),
        )?;
        println!(
            "  produced {n} × {} records to {topic} ({partitions} partitions) in {:.1} s",
            scenario.label(),
            t.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// One round of `run` for each of `contenders`, in an order that turns with the round: a
    /// run right after another contender's target topic was deleted may share the broker with
    /// that clean-up, and no contender should always be the one that does.
    fn round(
        &self,
        run: &Run<'_>,
        contenders: &[Contender],
        failures: &mut Vec<String>,
    ) -> Vec<Measured> {
        let mut order = contenders.to_vec();
        order.rotate_left(run.round % contenders.len());
        let mut measured = Vec::new();
        for c in order {
            if c == Contender::Kcat && self.kcat_libdir.is_none() {
                continue;
            }
            let what = format!(
                "{} {} {} partitions round {}",
                c.label(),
                run.scenario.label(),
                run.partitions,
                run.round
            );
            match run.measure(c) {
                Ok(m) => {
                    println!(
                        "  {what}: {:>9.0} records/s  wall {:>6.2} s",
                        m.steady_rate, m.wall
                    );
                    measured.push(m);
                }
                Err(e) => {
                    eprintln!("  FAILED {what}: {e:#}");
                    failures.push(format!("{what}: {e:#}"));
                }
            }
        }
        measured
    }

    /// Peak RSS with many partitions: a light run (per-partition cost) and a loaded one.
    pub fn rss(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let parts = self.cfg.rss_partitions;
        let runs = [
            (
                "rss-light",
                self.cfg.rss_light_records_per_partition,
                &[Contender::Mirrorflow][..],
            ),
            (
                "rss-loaded",
                self.cfg.rss_records_per_partition,
                &[Contender::Mirrorflow, Contender::Bare][..],
            ),
        ];
        for (topic, per_partition, contenders) in runs {
            let n = per_partition * parts as u64;
            let t = Instant::now();
            if let Err(e) = self
                .rt
                .block_on(brokers::create_topic(self.src, topic, parts, &[]))
            {
                out.failures.push(format!(
                    "RSS run: creating {topic} ({parts} partitions): {e}"
                ));
                continue;
            }
            let created_in = t.elapsed().as_secs_f64();
            let t = Instant::now();
            produce_source(self.src, topic, n, parts, 1024, "none")?;
            println!(
                "  created {topic} ({parts} partitions) in {created_in:.1} s, produced {n} × 1 KB records in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let run = Run {
                partitions: parts,
                records: n,
                poll: Duration::from_millis(200),
                ..self.run(topic)
            };
            // Peak RSS depends on how much data happens to be in flight: every round
            // counts, the worst is reported.
            for round in 0..self.cfg.rounds {
                let run = Run { round, ..run };
                for c in contenders {
                    match run.measure(*c) {
                        Ok(m) => out.rss.push(m),
                        Err(e) => out.failures.push(format!(
                            "RSS run {topic} round {round}, {}: {e:#}",
                            c.label()
                        )),
                    }
                }
            }
        }
        Ok(())
    }

    /// The baseline: an idle worker (flow selecting no topic) without an OffsetCheckpoint,
    /// with one, and with one and a history of offset syncs to read at start.
    pub fn idle(&self, out: &mut Outcome) {
        let idle = Run {
            partitions: 1,
            kcat_libdir: None,
            ..self.run("bench-no-such-topic")
        };
        // One row per baseline, judged against `target`; a failed measurement is reported.
        let mut record = |what: String,
                          target: f64,
                          measured: anyhow::Result<(IdleRss, Option<Duration>)>,
                          failure: &str| match measured {
            Ok((r, read_in)) => out.idle_rss.push((what, target, r, read_in)),
            Err(e) => out.failures.push(format!("{failure}: {e:#}")),
        };
        record(
            "no OffsetCheckpoint".to_string(),
            IDLE_TARGET_MIB,
            idle.idle_worker_rss(self.cfg.idle_settle, None),
            "idle worker RSS",
        );
        // With an OffsetCheckpoint the checkpoint runner connects (its clients, the
        // checkpoints topic) and reads the offset syncs at start.
        let checkpointing = Run {
            alias_suffix: "-cp",
            checkpoint: true,
            ..idle
        };
        record(
            "one OffsetCheckpoint, no offset syncs".to_string(),
            IDLE_TARGET_MIB,
            checkpointing.idle_worker_rss(self.cfg.idle_settle, None),
            "idle worker RSS with an OffsetCheckpoint",
        );
        // A restarted worker reads its offset-syncs topic whole (checkpoint side): the
        // same idle worker over a history of syncs.
        let history = Run {
            alias_suffix: "-hist",
            ..checkpointing
        };
        let syncs = self.cfg.rss_sync_history;
        let parts = self.cfg.rss_partitions;
        // Apache Kafka here creates no topic on produce: without this the history is never
        // written (its delivery reports fail after the flush returned).
        let syncs_topic = mirrorflow::kafka::wire::offset_syncs_topic(&history.alias());
        let produced = self
            .rt
            .block_on(brokers::create_topic(self.tgt, &syncs_topic, 1, &[]))
            .map_err(anyhow::Error::from)
            .and_then(|()| {
                produce_sync_history(self.tgt, &history.alias(), "rss-loaded", parts, syncs)
            })
            .and_then(|()| {
                let written = TargetCounter::new(self.tgt)?
                    .count(&syncs_topic, 1)
                    .unwrap_or(0);
                anyhow::ensure!(
                    written >= syncs,
                    "{written} of {syncs} syncs reached {syncs_topic}"
                );
                Ok(())
            });
        // Every partition has a sync once there are at least as many syncs as partitions.
        let synced = u64::try_from(parts).unwrap_or(0).min(syncs);
        record(
            format!("one OffsetCheckpoint, {syncs} offset syncs to read"),
            SYNC_HISTORY_TARGET_MIB,
            produced.and_then(|()| history.idle_worker_rss(Duration::from_secs(10), Some(synced))),
            "idle worker RSS with sync history",
        );
    }
}
