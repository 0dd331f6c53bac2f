//! The integrity audit's cost (`audit` scenario): the same 1 KB records copied by a worker with
//! `spec.audit.enabled: false` and by one with the audit on every `intervalSeconds: 10`
//! (the API's minimum, so runs fall in a short window; `recordsPerPartition` at its default),
//! each then left running for a window after the copy. The audit's CPU per run is the
//! difference of the two workers' CPU in that window divided by the runs it finished
//! (`mirrorflow_worker_audit_runs_total`); its share of the worker's CPU at the default
//! interval (300 s) is that cost every 300 s against the worker's CPU while it copies at the
//! bench's full rate (the audit-off copy). Its memory: the largest heap (`RssAnon`) in the
//! window, audit on minus audit off, beside the bound of the data it holds (its clients' own
//! memory comes on top).
//! Printed, never judged. `MIRRORFLOW_BENCH_AUDIT_RECORDS` (default 100,000),
//! `MIRRORFLOW_BENCH_AUDIT_WINDOW_SECONDS` (default 40).

use std::time::{Duration, Instant};

use anyhow::bail;
use mirrorflow::testkit::brokers;

use crate::contender::{Run, Scenario};
use crate::kafka::{produce_source, TargetCounter};
use crate::process::stop;
use crate::rounds::Bench;
use crate::worker::{http_get, metric_sum};
use crate::{env_u64, procfs};

/// The API's defaults (`spec.audit`).
const DEFAULT_INTERVAL_SECONDS: f64 = 300.0;
const RECORDS_PER_PARTITION: f64 = 1_000.0;
/// The interval of the measured runs.
const MEASURED_INTERVAL_SECONDS: u64 = 10;
/// What the audit's range readers may buffer each (`queued.max.messages.kbytes` 4 MiB and
/// `fetch.max.bytes` 1 MiB in `worker::audit::read`), one source and one target reader.
const READER_BUFFER_MIB: f64 = 5.0;
/// About what one record compared holds while its range is compared (`compare::Rec`, its
/// state and index entry), per side.
const BYTES_PER_RECORD: f64 = 60.0;
/// Offset syncs kept per partition (`read::MAX_SYNCS_KEPT` × 16 B).
const SYNC_BYTES_PER_PARTITION: f64 = 1_024.0 * 16.0;

/// One worker's run: its copy, then the window after it.
struct Measured {
    copy_cpu: f64,
    copy_secs: f64,
    window_cpu: f64,
    window_anon_kib: u64,
    /// Records the audit compared in the window.
    compared: f64,
    /// Runs the audit finished in the window.
    runs: f64,
}

/// Whether the `audit` scenario runs (`MIRRORFLOW_BENCH_SCENARIOS` names it, or is unset).
pub fn wanted() -> bool {
    std::env::var("MIRRORFLOW_BENCH_SCENARIOS")
        .map(|s| s.split(',').any(|s| s.trim() == "audit"))
        .unwrap_or(true)
}

/// Measures and prints the audit's cost.
pub fn audit_cost(bench: &Bench<'_>) -> anyhow::Result<()> {
    let records = env_u64("MIRRORFLOW_BENCH_AUDIT_RECORDS", 100_000).max(1);
    let window = Duration::from_secs(env_u64("MIRRORFLOW_BENCH_AUDIT_WINDOW_SECONDS", 40).max(15));
    let topic = "src-audit";
    let partitions = bench.cfg.partitions;
    let scenario = Scenario::plain(1024);
    bench
        .rt
        .block_on(brokers::create_topic(bench.src, topic, partitions, &[]))?;
    produce_source(
        bench.src,
        topic,
        records,
        partitions,
        scenario.size,
        scenario.compression(),
    )?;
    let run = |suffix: &'static str| Run {
        records,
        scenario,
        alias_suffix: suffix,
        ..bench.run(topic)
    };
    let off = measure(&run("-audit-off"), "  audit:\n    enabled: false\n", window)?;
    let on = measure(
        &run("-audit-on"),
        &format!("  audit:\n    intervalSeconds: {MEASURED_INTERVAL_SECONDS}\n"),
        window,
    )?;
    let runs = on.runs;
    if runs < 1.0 {
        bail!(
            "the audit compared {} records in the {} s window: not one run",
            on.compared,
            window.as_secs()
        );
    }
    let per_run = ((on.window_cpu - off.window_cpu) / runs).max(0.0);
    let worker_rate = off.copy_cpu / off.copy_secs;
    let share = per_run / DEFAULT_INTERVAL_SECONDS / worker_rate;
    let bound_mib = 2.0 * READER_BUFFER_MIB
        + (2.0 * RECORDS_PER_PARTITION * BYTES_PER_RECORD
            + SYNC_BYTES_PER_PARTITION * f64::from(partitions))
            / (1024.0 * 1024.0);
    println!();
    println!(
        "Integrity audit cost ({records} × 1 KB records over {partitions} partitions; audit off, \
         then on every {MEASURED_INTERVAL_SECONDS} s with {RECORDS_PER_PARTITION} records per \
         partition; {} s window after each copy)",
        window.as_secs()
    );
    println!(
        "  copy:   audit off {:.2} s CPU in {:.1} s ({:.0} % of a core), audit on {:.2} s CPU in {:.1} s",
        off.copy_cpu,
        off.copy_secs,
        100.0 * worker_rate,
        on.copy_cpu,
        on.copy_secs
    );
    println!(
        "  window: audit off {:.3} s CPU, audit on {:.3} s CPU over {runs:.1} runs ({:.0} records \
         compared): {:.1} ms CPU per run ({:.2} µs per record compared)",
        off.window_cpu,
        on.window_cpu,
        on.compared,
        1000.0 * per_run,
        1e6 * per_run * runs / on.compared
    );
    println!(
        "  at the default interval ({DEFAULT_INTERVAL_SECONDS} s): {:.3} % of the worker's CPU \
         while it copies at the bench's full rate (issue #49's target: ≤ 3 %)",
        100.0 * share
    );
    println!(
        "  memory: largest heap in the window {:.1} MiB audit on, {:.1} MiB audit off ({:+.1} \
         MiB): the data it holds is bounded by {:.1} MiB (two range readers' buffers, 2 × \
         {READER_BUFFER_MIB} MiB; one range at a time, 2 × {RECORDS_PER_PARTITION} records × \
         ~{BYTES_PER_RECORD} B; {} offset syncs per partition), the rest is its four \
         librdkafka clients' own (two range readers, a metadata client per cluster)",
        procfs::mib(on.window_anon_kib),
        procfs::mib(off.window_anon_kib),
        procfs::mib(on.window_anon_kib) - procfs::mib(off.window_anon_kib),
        bound_mib,
        SYNC_BYTES_PER_PARTITION / 16.0
    );
    Ok(())
}

/// Runs a worker with `spec_lines` until it copied every record, then for `window`.
fn measure(run: &Run<'_>, spec_lines: &str, window: Duration) -> anyhow::Result<Measured> {
    let target_topic = format!("{}.{}", run.alias(), run.topic);
    let mut counter = TargetCounter::new(run.tgt)?;
    let t0 = Instant::now();
    let (mut p, port) = run.spawn_worker_with(spec_lines)?;
    let result = (|| -> anyhow::Result<Measured> {
        loop {
            p.sample();
            if p.exit.is_some() {
                bail!("the worker exited:\n{}", p.log_tail());
            }
            if counter.count(&target_topic, run.partitions).unwrap_or(0) >= run.records {
                break;
            }
            if t0.elapsed() > run.timeout {
                bail!("the worker did not copy {} records in time", run.records);
            }
            std::thread::sleep(run.poll);
        }
        let (copy_cpu, copy_secs) = (p.cpu, t0.elapsed().as_secs_f64());
        let metric = |name: &str| {
            http_get(port, "/metrics")
                .map(|m| metric_sum(&m, name))
                .unwrap_or(0.0)
        };
        let compared = || metric("mirrorflow_worker_audit_records_total");
        let finished = || metric("mirrorflow_worker_audit_runs_total{outcome=\"finished\"}");
        let (compared0, runs0) = (compared(), finished());
        let w0 = Instant::now();
        let mut anon = 0;
        while w0.elapsed() < window {
            std::thread::sleep(Duration::from_millis(200));
            p.sample();
            anon = anon.max(procfs::status_kib(p.pid(), "RssAnon").unwrap_or(0));
        }
        Ok(Measured {
            copy_cpu,
            copy_secs,
            window_cpu: p.cpu - copy_cpu,
            window_anon_kib: anon,
            compared: compared() - compared0,
            runs: finished() - runs0,
        })
    })();
    stop(&mut p);
    if let Err(e) = run
        .rt
        .block_on(brokers::delete_topic(run.tgt, &target_topic))
    {
        eprintln!("  note: could not delete {target_topic}: {e}");
    }
    result
}
