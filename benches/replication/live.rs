//! The scenarios on a running copier (the worker and MM2): end-to-end latency at a fixed
//! offered rate below both tools' maximum, and the time to resume after SIGKILL.
//!
//! Latency: each run has a fresh source topic holding one record per partition; the copier
//! starts, and once those are on the target (its start to first record), a producer in this
//! process offers `rate` 1 KB records/s for `seconds`, each with a header holding its produce
//! time (µs since the epoch), and a consumer of the target reads them: latency = arrival −
//! produce time, same host clock.
//! Resume: the copier copies a topic; at `kill_at` of it, SIGKILL; it starts again at once
//! (the same flow, the same MM2 config); resume = restart → the target grows again. The
//! records beyond the source's after the copy ends are the duplicates the crash cost.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use mirrorflow::testkit::brokers;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::contender::{Contender, Run, Scenario};
use crate::kafka::{produce_source, send_waiting, TargetCounter};
use crate::process::{kill, stop, Proc};
use crate::rounds::{Bench, Outcome};
use crate::{env_u64, mm2};

/// The header holding a record's produce time.
const TS_HEADER: &str = "bench-produced-us";

#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Offered 1 KB records/s in the latency runs.
    pub rate: u64,
    pub seconds: u64,
    /// 1 KB records of the resume runs' topic.
    pub resume_records: u64,
    /// Share of them on the target when the copier is killed.
    pub kill_at: f64,
}

impl LiveConfig {
    pub fn from_env(quick: bool) -> Self {
        Self {
            rate: env_u64("MIRRORFLOW_BENCH_LATENCY_RATE", 2000).max(1),
            seconds: env_u64(
                "MIRRORFLOW_BENCH_LATENCY_SECONDS",
                if quick { 10 } else { 20 },
            )
            .max(1),
            resume_records: env_u64(
                "MIRRORFLOW_BENCH_RESUME_RECORDS",
                if quick { 100_000 } else { 200_000 },
            )
            .max(10),
            kill_at: 0.3,
        }
    }
}

#[derive(Debug, Clone)]
pub struct LatencyMeasured {
    pub contender: Contender,
    pub round: usize,
    /// Spawn → the first record on the target (a source of one record per partition).
    pub startup: f64,
    /// Sorted latencies, ms.
    pub latencies_ms: Vec<f64>,
    pub offered: u64,
    pub peak_rss_kib: u64,
    /// CPU seconds of the copier while the load was offered.
    pub cpu_under_load: f64,
}

impl LatencyMeasured {
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let v = &self.latencies_ms;
        if v.is_empty() {
            return None;
        }
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v.get(i).copied()
    }
}

#[derive(Debug, Clone)]
pub struct ResumeMeasured {
    pub contender: Contender,
    /// Restart → the target grows again, s.
    pub resume: f64,
    /// Records beyond the source's on the target after the copy.
    pub duplicates: u64,
    pub records: u64,
}

/// The copiers these scenarios run: the worker and MM2 (the bare loop and kcat have no
/// progress to resume from and stop at the source's end).
fn live_contenders(cfg: &crate::Config) -> Vec<Contender> {
    cfg.contenders
        .iter()
        .copied()
        .filter(|c| matches!(c, Contender::Mirrorflow | Contender::Mm2(_)))
        .collect()
}

/// Starts `c` on `run`; `again` names the log of a restart. The worker's port is kept in
/// `port` (the same port is the same flow).
fn start(run: &Run<'_>, c: Contender, port: &mut Option<u16>, again: bool) -> anyhow::Result<Proc> {
    let name = if again { "restart" } else { "first" };
    match c {
        Contender::Mirrorflow => match *port {
            Some(p) => run.spawn_worker_on(p, &format!("mirrorflow-{name}")),
            None => {
                let (proc_, p) = run.spawn_worker()?;
                *port = Some(p);
                Ok(proc_)
            }
        },
        Contender::Mm2(tasks) => mm2::spawn(run, tasks, &format!("mm2-{name}")),
        other => bail!("{} does not run in the live scenarios", other.label()),
    }
}

/// Deletes `c`'s target topic (and MM2's own topics) after a run.
fn clean_up(run: &Run<'_>, c: Contender) {
    let _ = run
        .rt
        .block_on(brokers::delete_topic(run.tgt, &run.target_topic(c)));
    if let Contender::Mm2(tasks) = c {
        mm2::clean_up(run, tasks);
    }
}

/// Polls the target until it holds `n` records; samples `procs`; fails past `timeout` or
/// when a process exits. Returns the count seen.
fn wait_for(
    counter: &mut TargetCounter,
    run: &Run<'_>,
    topic: &str,
    n: u64,
    procs: &mut [&mut Proc],
    timeout: Duration,
) -> anyhow::Result<u64> {
    let t = Instant::now();
    loop {
        for p in procs.iter_mut() {
            p.sample();
            if let Some(status) = p.exit {
                bail!("{} exited with {status}:\n{}", p.name, p.log_tail());
            }
        }
        let count = counter.count(topic, run.partitions).unwrap_or(0);
        if count >= n {
            return Ok(count);
        }
        if t.elapsed() > timeout {
            bail!("{count} of {n} records on {topic} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Offers `n` 1 KB records at `rate`/s to `topic`, round-robin over `partitions`, each with
/// its produce time in [`TS_HEADER`].
fn offer(bootstrap: &str, topic: &str, partitions: i32, rate: u64, n: u64) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "0")
        .create()
        .context("creating the latency producer")?;
    let value = vec![b'x'; 1024 - 12];
    let t0 = Instant::now();
    for i in 0..n {
        // Paced: record i leaves at i / rate s (in bursts of a millisecond at most).
        let due = Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_sub(t0.elapsed()) {
            if wait > Duration::from_micros(500) {
                producer.poll(Duration::ZERO);
                std::thread::sleep(wait);
            }
        }
        let key = format!("{i:012}");
        let ts = now_us().to_be_bytes();
        let record = BaseRecord::to(topic)
            .key(key.as_str())
            .payload(value.as_slice())
            .partition((i % partitions as u64) as i32)
            .headers(OwnedHeaders::new().insert(Header {
                key: TS_HEADER,
                value: Some(&ts[..]),
            }));
        send_waiting(&producer, record, Duration::from_millis(1))
            .with_context(|| format!("offering record {i}"))?;
    }
    producer
        .flush(Duration::from_secs(60))
        .context("flushing the offered records")?;
    Ok(())
}

impl Bench<'_> {
    /// End-to-end latency of each live contender, round after round (order turning).
    pub fn latency(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let live = &self.cfg.live;
        let contenders = live_contenders(self.cfg);
        for round in 0..self.cfg.rounds {
            let mut order = contenders.clone();
            order.rotate_left(round % contenders.len().max(1));
            for c in order {
                let topic = format!("lat-{}-r{round}", c.tag());
                let run = Run {
                    partitions: self.cfg.partitions,
                    records: self.cfg.partitions as u64,
                    scenario: Scenario::plain(1024),
                    round,
                    checkpoint: true,
                    ..self.run(&topic)
                };
                let what = format!("latency {} round {round}", c.label());
                match self.latency_run(&run, c, live) {
                    Ok(m) => {
                        println!(
                            "  {what}: start {:.2} s, p50 {:.1} ms, p99 {:.1} ms ({} of {})",
                            m.startup,
                            m.percentile(0.5).unwrap_or(f64::NAN),
                            m.percentile(0.99).unwrap_or(f64::NAN),
                            m.latencies_ms.len(),
                            m.offered
                        );
                        out.latency.push(m);
                    }
                    Err(e) => {
                        eprintln!("  FAILED {what}: {e:#}");
                        out.failures.push(format!("{what}: {e:#}"));
                    }
                }
                clean_up(&run, c);
                let _ = self.rt.block_on(brokers::delete_topic(self.src, &topic));
            }
        }
        Ok(())
    }

    fn latency_run(
        &self,
        run: &Run<'_>,
        c: Contender,
        live: &LiveConfig,
    ) -> anyhow::Result<LatencyMeasured> {
        self.rt.block_on(brokers::create_topic(
            self.src,
            run.topic,
            run.partitions,
            &[],
        ))?;
        produce_source(
            self.src,
            run.topic,
            run.records,
            run.partitions,
            1024,
            "none",
        )?;
        let target = run.target_topic(c);
        let mut counter = TargetCounter::new(self.tgt)?;
        let mut port = None;
        let t0 = Instant::now();
        let mut p = start(run, c, &mut port, false)?;
        let result = (|| -> anyhow::Result<LatencyMeasured> {
            wait_for(
                &mut counter,
                run,
                &target,
                run.records,
                &mut [&mut p],
                self.cfg.timeout,
            )?;
            let startup = t0.elapsed().as_secs_f64();
            let consumer: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", self.tgt)
                .set("group.id", "mirrorflow-bench-latency")
                .set("enable.auto.commit", "false")
                .set("fetch.wait.max.ms", "5")
                .create()?;
            let mut tpl = TopicPartitionList::new();
            for part in 0..run.partitions {
                tpl.add_partition_offset(&target, part, Offset::Beginning)?;
            }
            consumer.assign(&tpl)?;
            let n = live.rate * live.seconds;
            let (src, topic, parts, rate) = (
                self.src.to_string(),
                run.topic.to_string(),
                run.partitions,
                live.rate,
            );
            let cpu0 = p.cpu;
            let producer = std::thread::spawn(move || offer(&src, &topic, parts, rate, n));
            let mut latencies = Vec::with_capacity(n as usize);
            let deadline = Instant::now() + Duration::from_secs(live.seconds + 30);
            let mut next_sample = Instant::now();
            while (latencies.len() as u64) < n && Instant::now() < deadline {
                if Instant::now() >= next_sample {
                    p.sample();
                    next_sample += Duration::from_millis(200);
                }
                let Some(m) = consumer.poll(Duration::from_millis(50)) else {
                    continue;
                };
                let m = m?;
                let arrived = now_us();
                let produced = m.headers().and_then(|h| {
                    h.iter()
                        .find(|h| h.key == TS_HEADER)
                        .and_then(|h| Some(i64::from_be_bytes(h.value?.try_into().ok()?)))
                });
                if let Some(at) = produced {
                    latencies.push((arrived - at) as f64 / 1000.0);
                }
            }
            p.sample();
            producer
                .join()
                .map_err(|_| anyhow::anyhow!("the latency producer panicked"))??;
            latencies.sort_by(f64::total_cmp);
            Ok(LatencyMeasured {
                contender: c,
                round: run.round,
                startup,
                latencies_ms: latencies,
                offered: n,
                peak_rss_kib: p.hwm_kib,
                cpu_under_load: p.cpu - cpu0,
            })
        })();
        stop(&mut p);
        if result.is_ok() && std::env::var_os("MIRRORFLOW_BENCH_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&p.log);
        }
        result
    }

    /// Time to resume after SIGKILL of each live contender, round after round.
    pub fn resume(&self, out: &mut Outcome) -> anyhow::Result<()> {
        let live = &self.cfg.live;
        let topic = "resume";
        let n = live.resume_records;
        self.rt.block_on(brokers::create_topic(
            self.src,
            topic,
            self.cfg.partitions,
            &[],
        ))?;
        produce_source(self.src, topic, n, self.cfg.partitions, 1024, "none")?;
        let contenders = live_contenders(self.cfg);
        for round in 0..self.cfg.rounds {
            let mut order = contenders.clone();
            order.rotate_left(round % contenders.len().max(1));
            for c in order {
                let run = Run {
                    records: n,
                    scenario: Scenario::plain(1024),
                    round,
                    checkpoint: true,
                    ..self.run(topic)
                };
                let what = format!("resume {} round {round}", c.label());
                match self.resume_run(&run, c, live) {
                    Ok(m) => {
                        println!(
                            "  {what}: resumed {:.2} s after the restart, {} duplicates",
                            m.resume, m.duplicates
                        );
                        out.resume.push(m);
                    }
                    Err(e) => {
                        eprintln!("  FAILED {what}: {e:#}");
                        out.failures.push(format!("{what}: {e:#}"));
                    }
                }
                clean_up(&run, c);
            }
        }
        Ok(())
    }

    fn resume_run(
        &self,
        run: &Run<'_>,
        c: Contender,
        live: &LiveConfig,
    ) -> anyhow::Result<ResumeMeasured> {
        let target = run.target_topic(c);
        let mut counter = TargetCounter::new(self.tgt)?;
        let mut port = None;
        let n = run.records;
        let mut first = start(run, c, &mut port, false)?;
        let at_kill = ((n as f64) * live.kill_at) as u64;
        let copied = wait_for(
            &mut counter,
            run,
            &target,
            at_kill,
            &mut [&mut first],
            self.cfg.timeout,
        );
        kill(&mut first);
        copied?;
        // Whatever the killed process had sent lands first.
        std::thread::sleep(Duration::from_millis(500));
        let before = counter.count(&target, run.partitions).unwrap_or(0);
        let t1 = Instant::now();
        let mut again = start(run, c, &mut port, true)?;
        let result = (|| -> anyhow::Result<ResumeMeasured> {
            wait_for(
                &mut counter,
                run,
                &target,
                before + 1,
                &mut [&mut again],
                self.cfg.timeout,
            )?;
            let resume = t1.elapsed().as_secs_f64();
            wait_for(
                &mut counter,
                run,
                &target,
                n,
                &mut [&mut again],
                self.cfg.timeout,
            )?;
            // Let a last flush land before counting duplicates.
            std::thread::sleep(Duration::from_secs(2));
            let total = counter.count(&target, run.partitions).unwrap_or(n);
            Ok(ResumeMeasured {
                contender: c,
                resume,
                duplicates: total.saturating_sub(n),
                records: n,
            })
        })();
        stop(&mut again);
        if result.is_ok() && std::env::var_os("MIRRORFLOW_BENCH_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_file(&first.log);
            let _ = std::fs::remove_file(&again.log);
        }
        result
    }
}
