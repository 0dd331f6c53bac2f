//! The bench's rounds: throughput per record size (the contenders' order turning each
//! round), peak RSS with many partitions, and the idle worker's baseline.

use std::path::Path;
use std::time::{Duration, Instant};

use mirrorflow::testkit::brokers;

use crate::contender::{Contender, Measured, Run};
use crate::kafka::{produce_source, produce_sync_history};
use crate::Config;

/// How often the target is polled during throughput runs.
const POLL: Duration = Duration::from_millis(50);

/// What the rounds measured, and what they could not.
#[derive(Default)]
pub struct Outcome {
    /// Throughput runs, every round.
    pub results: Vec<Measured>,
    /// Peak RSS runs with many partitions, every round.
    pub rss: Vec<Measured>,
    /// Peak, heap and file-backed RSS (KiB) of idle workers, with what they read at start.
    pub idle_rss: Vec<(String, (u64, u64, u64))>,
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
    fn run<'b>(&'b self, topic: &'b str) -> Run<'b> {
        Run {
            src: self.src,
            tgt: self.tgt,
            topic,
            partitions: self.cfg.partitions,
            records: 0,
            size: 0,
            round: 0,
            poll: POLL,
            timeout: self.cfg.timeout,
            brokers: self.broker_pids,
            logs: self.logs,
            kcat_libdir: self.kcat_libdir,
            mirrorflow_bin: self.mirrorflow_bin,
            rt: self.rt,
            alias_suffix: "",
        }
    }

    /// Produces a source topic per record size, then runs every contender on each, round
    /// after round.
    pub fn throughput(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let cfg = self.cfg;
        let sizes: Vec<(usize, u64)> = [(100usize, cfg.records_100), (1024, cfg.records_1k)]
            .into_iter()
            .filter(|(size, _)| cfg.wants(&size.to_string()))
            .collect();
        for (size, n) in &sizes {
            let topic = format!("src-{size}");
            self.rt
                .block_on(brokers::create_topic(self.src, &topic, cfg.partitions, &[]))?;
            let t = Instant::now();
            produce_source(self.src, &topic, *n, cfg.partitions, *size)?;
            println!(
                "  produced {n} × {size} B records to {topic} ({} partitions) in {:.1} s",
                cfg.partitions,
                t.elapsed().as_secs_f64()
            );
        }
        for round in 0..cfg.rounds {
            for (size, n) in &sizes {
                let topic = format!("src-{size}");
                let run = Run {
                    records: *n,
                    size: *size,
                    round,
                    ..self.run(&topic)
                };
                // The order turns each round: a run right after another contender's target
                // topic was deleted may share the broker with that clean-up, and no
                // contender should always be the one that does.
                let mut order = [Contender::Bare, Contender::Mirrorflow, Contender::Kcat];
                order.rotate_left(round % 3);
                for c in order {
                    if c == Contender::Kcat && self.kcat_libdir.is_none() {
                        continue;
                    }
                    match run.measure(c) {
                        Ok(m) => {
                            println!(
                                "  round {round}: {:<26} {size:>5} B  {:>9.0} records/s  wall {:>6.2} s",
                                c.label(),
                                m.steady_rate,
                                m.wall
                            );
                            out.results.push(m);
                        }
                        Err(e) => {
                            let msg = format!("{} {size} B round {round}: {e:#}", c.label());
                            eprintln!("  FAILED {msg}");
                            out.failures.push(msg);
                        }
                    }
                }
            }
        }
        Ok(())
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
            produce_source(self.src, topic, n, parts, 1024)?;
            println!(
                "  created {topic} ({parts} partitions) in {created_in:.1} s, produced {n} × 1 KB records in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let run = Run {
                partitions: parts,
                records: n,
                size: 1024,
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

    /// The baseline: an idle worker (flow selecting no topic), with an empty offset-syncs
    /// topic and with a history of syncs to read at start.
    pub fn idle(&self, out: &mut Outcome) {
        let idle = Run {
            partitions: 1,
            kcat_libdir: None,
            ..self.run("bench-no-such-topic")
        };
        match idle.idle_worker_rss(Duration::from_secs(6)) {
            Ok(r) => out.idle_rss.push(("no offset syncs".to_string(), r)),
            Err(e) => out.failures.push(format!("idle worker RSS: {e:#}")),
        }
        // A restarted worker reads its offset-syncs topic whole (checkpoint side): the
        // same idle worker over a history of syncs.
        let history = Run {
            alias_suffix: "-hist",
            ..idle
        };
        let syncs = self.cfg.rss_sync_history;
        let parts = self.cfg.rss_partitions;
        let produced = produce_sync_history(self.tgt, &history.alias(), "rss-loaded", parts, syncs);
        match produced.and_then(|()| history.idle_worker_rss(Duration::from_secs(10))) {
            Ok(r) => out
                .idle_rss
                .push((format!("{syncs} offset syncs to read"), r)),
            Err(e) => out
                .failures
                .push(format!("idle worker RSS with sync history: {e:#}")),
        }
    }
}
