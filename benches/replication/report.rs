//! The bench's report: the throughput table (median round of each contender), the scale
//! curve, peak RSS with many partitions, and the targets with PASS/MISS.

use std::collections::BTreeMap;
use std::time::Duration;

use mirrorflow::testkit::stats::{self, median};

use crate::contender::{Contender, Measured, Scenario};
use crate::procfs::mib;
use crate::rounds::{IdleRss, Outcome};
use crate::worker::{in_flight_mib, lag_max};
use crate::Config;

/// Memory targets: peak RSS at 1,000 partitions ≤ the window (`workers.inFlightMiB`) plus
/// this overhead; an idle worker; an idle worker reading a long offset-syncs history.
const RSS_OVERHEAD_MIB: f64 = 32.0;
pub const IDLE_TARGET_MIB: f64 = 24.0;
pub const SYNC_HISTORY_TARGET_MIB: f64 = 32.0;

/// Prints the whole report: throughput, peak RSS (if measured), targets.
pub fn print(cfg: &Config, out: &Outcome) {
    let med = medians(&out.results);
    // `MIRRORFLOW_BENCH_SCENARIOS=refresh` alone has no throughput table to print.
    if !out.results.is_empty() {
        print_throughput(cfg, &out.results, &med);
    }
    if !out.scale.is_empty() {
        print_scale(&out.scale);
    }
    // The idle runs alone (`MIRRORFLOW_BENCH_SCENARIOS=idle`) print too.
    if !out.rss.is_empty() || !out.idle_rss.is_empty() {
        print_rss(cfg, &out.rss, &out.idle_rss);
    }
    if let Some(rc) = &out.refresh_config {
        crate::refresh::print(rc, &out.refresh);
    }
    print_targets(cfg, out, &med);
    crate::versus::print(out);
}

/// How long the idle worker took to read its offset-syncs history.
fn read_note(d: Duration) -> String {
    format!("read in {:.1} s", d.as_secs_f64())
}

/// Steady-rate ratios `a / b` of the rounds where both ran `scenario` (see
/// [`stats::paired_ratios`]: the host's speed moves by ±15 % over minutes here).
fn paired_ratios(results: &[Measured], scenario: Scenario, a: Contender, b: Contender) -> Vec<f64> {
    paired_by(results, scenario, a, b, |m| m.steady_rate)
}

/// CPU-per-MB ratios `a / b` of the rounds where both ran `scenario`: in the steady part
/// (the window of the rate), or over the whole run (start-up and exit included).
fn paired_cpu_ratios(
    results: &[Measured],
    scenario: Scenario,
    a: Contender,
    b: Contender,
    steady: bool,
) -> Vec<f64> {
    if steady {
        paired_by(results, scenario, a, b, Measured::steady_cpu_ms_per_mb)
    } else {
        paired_by(results, scenario, a, b, |m| m.cpu / m.mb())
    }
}

fn paired_by(
    results: &[Measured],
    scenario: Scenario,
    a: Contender,
    b: Contender,
    figure: impl Fn(&Measured) -> f64,
) -> Vec<f64> {
    let of = |c: Contender| -> Vec<(usize, f64)> {
        results
            .iter()
            .filter(|m| m.scenario == scenario && m.contender == c)
            .map(|m| (m.round, figure(m)))
            .collect()
    };
    stats::paired_ratios(&of(a), &of(b))
}

/// `median (min–max of n rounds)` of ratios, formatted with `fmt`.
fn spread(xs: &[f64], fmt: impl Fn(f64) -> String) -> String {
    match median(xs) {
        None => "-".to_string(),
        Some(m) if xs.len() == 1 => fmt(m),
        Some(m) => {
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{} (rounds {}–{})", fmt(m), fmt(lo), fmt(hi))
        }
    }
}

/// The median run (by steady records/s) of each (scenario, contender).
fn medians(results: &[Measured]) -> BTreeMap<(Scenario, Contender), Measured> {
    let mut by: BTreeMap<(Scenario, Contender), Vec<&Measured>> = BTreeMap::new();
    for m in results {
        by.entry((m.scenario, m.contender)).or_default().push(m);
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.steady_rate.total_cmp(&b.steady_rate));
            (k, v[v.len() / 2].clone())
        })
        .collect()
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// The throughput table: the median run of each (size, contender), with its notes.
fn print_throughput(
    cfg: &Config,
    results: &[Measured],
    med: &BTreeMap<(Scenario, Contender), Measured>,
) {
    println!();
    println!(
        "Replication throughput — {} partitions, Apache Kafka → Apache Kafka on one host, {} round(s){}",
        cfg.partitions,
        cfg.rounds,
        if cfg.rounds > 1 {
            " (median shown)"
        } else {
            ""
        }
    );
    println!(
        "mirrorflow: delivery AtLeastOnce (as the bare loop and kcat: no transactions), offset validation on, offset syncs every {} records, {} MiB in flight",
        lag_max(),
        in_flight_mib()
    );
    println!(
        "{:<26} {:>9} {:>9} {:>7} {:>7} {:>10} {:>7} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "contender",
        "scenario",
        "records",
        "wall s",
        "start s",
        "records/s",
        "MB/s",
        "CPU ms/MB",
        "10-90 %",
        "brk ms/MB",
        "peak RSS",
        "vs bare",
        "vs kcat"
    );
    for ((scenario, c), m) in med {
        let ratio = |other: Contender| {
            median(&paired_ratios(results, *scenario, *c, other))
                .map(|r| format!("{r:.2}×"))
                .unwrap_or_else(|| "-".to_string())
        };
        println!(
            "{:<26} {:>9} {:>9} {:>7.2} {:>7.2} {:>10.0} {:>7.1} {:>9.2} {:>9.2} {:>9.2} {:>5.1} MiB {:>7} {:>7}",
            c.label(),
            scenario.label(),
            m.records,
            m.wall,
            m.startup,
            m.steady_rate,
            m.steady_rate * scenario.size as f64 / 1e6,
            1000.0 * m.cpu / m.mb(),
            m.steady_cpu_ms_per_mb(),
            1000.0 * m.broker_cpu / m.mb(),
            mib(m.peak_rss_kib),
            ratio(Contender::Bare),
            ratio(Contender::Kcat),
        );
    }
    for ((scenario, c), m) in med {
        let what = format!("{} {}", c.label(), scenario.label());
        if m.extra > 0 {
            println!("  {what}: {} duplicate records on the target", m.extra);
        }
        for note in &m.notes {
            println!("  {what}: {note}");
        }
        if *c == Contender::Mirrorflow {
            println!(
                "  {what}: end-to-end (start-up included) {:.0} records/s",
                m.end_to_end_rate()
            );
        }
    }
    println!(
        "records/s and MB/s: steady rate: slope of records on the target over time while 10-90 % of them arrived;"
    );
    println!(
        "CPU ms/MB: the contender's processes, spawn to end; 10-90 %: CPU ms/MB while 10-90 % of the records arrived (the rate's window);"
    );
    println!("brk ms/MB: both brokers, whole run; peak RSS: VmHWM (kcat: both processes);");
    println!(
        "vs bare, vs kcat: median over rounds of the ratio within a round (the contenders' order turns each round)."
    );
}

/// The scale curve: per partition count, the median rate of the worker and the bare loop,
/// the paired ratio, CPU per MB and the worst peak RSS of each.
fn print_scale(scale: &[Measured]) {
    println!();
    println!("Scale curve — 1 KB records, the worker beside the bare loop (median of rounds; RSS: worst round)");
    println!(
        "{:>10} {:>9} {:>12} {:>12} {:>16} {:>16} {:>16}",
        "partitions",
        "records",
        "worker rec/s",
        "bare rec/s",
        "worker/bare",
        "CPU ms/MB w / b",
        "peak RSS w / b"
    );
    let mut parts: Vec<i32> = Vec::new();
    for m in scale {
        if !parts.contains(&m.partitions) {
            parts.push(m.partitions);
        }
    }
    parts.sort_unstable();
    for p in parts {
        let of = |c: Contender| -> Vec<&Measured> {
            scale
                .iter()
                .filter(|m| m.partitions == p && m.contender == c)
                .collect()
        };
        let (w, b) = (of(Contender::Mirrorflow), of(Contender::Bare));
        let med = |runs: &[&Measured], f: &dyn Fn(&Measured) -> f64| {
            median(&runs.iter().map(|m| f(m)).collect::<Vec<_>>())
        };
        let fmt =
            |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |x| format!("{x:.digits$}"));
        let peak = |runs: &[&Measured]| runs.iter().map(|m| m.peak_rss_kib).max();
        let ratios = stats::paired_ratios(
            &w.iter()
                .map(|m| (m.round, m.steady_rate))
                .collect::<Vec<_>>(),
            &b.iter()
                .map(|m| (m.round, m.steady_rate))
                .collect::<Vec<_>>(),
        );
        println!(
            "{:>10} {:>9} {:>12} {:>12} {:>16} {:>16} {:>16}",
            p,
            w.first().or(b.first()).map_or(0, |m| m.records),
            fmt(med(&w, &|m| m.steady_rate), 0),
            fmt(med(&b, &|m| m.steady_rate), 0),
            spread(&ratios, |x| format!("{:.0} %", x * 100.0)),
            format!(
                "{} / {}",
                fmt(med(&w, &Measured::steady_cpu_ms_per_mb), 2),
                fmt(med(&b, &Measured::steady_cpu_ms_per_mb), 2)
            ),
            format!(
                "{} / {} MiB",
                fmt(peak(&w).map(mib), 1),
                fmt(peak(&b).map(mib), 1)
            ),
        );
    }
}

/// Peak RSS with many partitions: the worst run of each (load, contender), and the idle
/// worker's baselines.
fn print_rss(
    cfg: &Config,
    rss: &[Measured],
    idle_rss: &[(String, f64, IdleRss, Option<Duration>)],
) {
    println!();
    println!(
        "Peak RSS with {} partitions, 1 KB records (heap = sampled RssAnon, file-backed = sampled RssFile)",
        cfg.rss_partitions
    );
    // The worst run of each (load, contender), with every run's peak.
    let mut groups: BTreeMap<(u64, Contender), Vec<&Measured>> = BTreeMap::new();
    for m in rss {
        groups.entry((m.records, m.contender)).or_default().push(m);
    }
    for ((records, contender), runs) in &groups {
        let Some(m) = runs.iter().max_by_key(|m| m.peak_rss_kib) else {
            continue;
        };
        let peaks: Vec<String> = runs
            .iter()
            .map(|m| format!("{:.1}", mib(m.peak_rss_kib)))
            .collect();
        println!(
            "{:<26} {:>4} rec/partition: peak RSS {:>6.1} MiB (heap ≤ {:.1}, file-backed ≤ {:.1}); {} records in {:.1} s ({:.0} records/s end to end), CPU {:.2} s; peaks of {} run(s): {} MiB",
            contender.label(),
            records / cfg.rss_partitions.max(1) as u64,
            mib(m.peak_rss_kib),
            mib(m.peak_anon_kib),
            mib(m.peak_file_kib),
            m.records,
            m.wall,
            m.end_to_end_rate(),
            m.cpu,
            runs.len(),
            peaks.join(", ")
        );
        for note in &m.notes {
            println!("  {note}");
        }
    }
    for (what, _, (hwm, anon, file, last), read_in) in idle_rss {
        let read = read_in.map_or(String::new(), |d| format!(", {}", read_note(d)));
        println!(
            "{:<26} {:>4} partitions:    peak RSS {:>6.1} MiB (heap ≤ {:.1}, file-backed ≤ {:.1}), settled {:.1}; flow selecting no topic, {what}{read}",
            "mirrorflow idle worker",
            0,
            mib(*hwm),
            mib(*anon),
            mib(*file),
            mib(*last)
        );
    }
}

/// The targets of the issue, PASS/MISS, and what could not be measured.
fn print_targets(cfg: &Config, out: &Outcome, med: &BTreeMap<(Scenario, Contender), Measured>) {
    let results = &out.results;
    println!();
    println!("Targets (median of paired rounds; range in parentheses)");
    let line = |what: String, figure: String, ok: bool, range: String| {
        println!("  {what:<60} {figure:>10}   {}   {range}", verdict(ok));
    };
    // The bare loop is the ceiling, no longer a target (#50).
    let reference = |what: String, figure: String, range: String| {
        println!("  {what:<60} {figure:>10}   (ceiling, not a target)   {range}");
    };
    for (scenario, _) in med.keys().filter(|(_, c)| *c == Contender::Mirrorflow) {
        let label = scenario.label();
        let vs_bare = paired_ratios(results, *scenario, Contender::Mirrorflow, Contender::Bare);
        match median(&vs_bare) {
            Some(r) => reference(
                format!("mirrorflow rate, of the bare loop's, {label}"),
                format!("{:.1} %", r * 100.0),
                spread(&vs_bare, |x| format!("{:.1} %", x * 100.0)),
            ),
            None => println!("  mirrorflow vs bare loop, {label}: bare loop not measured"),
        }
        let cpu = |steady| {
            paired_cpu_ratios(
                results,
                *scenario,
                Contender::Mirrorflow,
                Contender::Bare,
                steady,
            )
        };
        if let Some(r) = median(&cpu(false)) {
            reference(
                format!("mirrorflow CPU ms/MB, to the bare loop's, {label}"),
                format!("{r:.2}×"),
                spread(&cpu(false), |x| format!("{x:.2}×")),
            );
        }
        // Without start-up and exit; noisier: records in flight at the window's ends are
        // paid for on one side of the line and counted on the other.
        let steady = cpu(true);
        if let Some(r) = median(&steady) {
            println!(
                "  {:<60} {:>10}   (not judged)   {}",
                format!("mirrorflow CPU ms/MB vs the bare loop's, 10-90 % window, {label}"),
                format!("{r:.2}×"),
                spread(&steady, |x| format!("{x:.2}×"))
            );
        }
        let vs_kcat = paired_ratios(results, *scenario, Contender::Mirrorflow, Contender::Kcat);
        if let Some(r) = median(&vs_kcat) {
            println!(
                "  {:<60} {:>10}   (reference, not a target)   {}",
                format!("mirrorflow vs the kcat pipe, {label}"),
                format!("{r:.2}×"),
                spread(&vs_kcat, |x| format!("{x:.2}×"))
            );
        }
    }
    let window = in_flight_mib() as f64;
    // Judged on the worst loaded run (the most records per partition).
    let loaded = out.rss.iter().map(|m| m.records).max().unwrap_or(0);
    if let Some(m) = out
        .rss
        .iter()
        .filter(|m| m.contender == Contender::Mirrorflow && m.records == loaded)
        .max_by_key(|m| m.peak_rss_kib)
    {
        let peak = mib(m.peak_rss_kib);
        line(
            format!(
                "worker peak RSS ≤ window {window:.0} + {RSS_OVERHEAD_MIB:.0} MiB, {} partitions",
                cfg.rss_partitions
            ),
            format!("{peak:.1} MiB"),
            peak <= window + RSS_OVERHEAD_MIB,
            format!("overhead {:.1} MiB", peak - window),
        );
    }
    for (what, target, (hwm, _, _, _), read_in) in &out.idle_rss {
        // The idle bounds are retired (#50; the history's is the idle one plus its syncs):
        // shown against the figure they had.
        reference(
            format!("idle worker peak RSS (was ≤ {target:.0} MiB), {what}"),
            format!("{:.1} MiB", mib(*hwm)),
            read_in.map_or(String::new(), read_note),
        );
    }
    if let Some(rc) = &out.refresh_config {
        crate::refresh::print_targets(rc, &out.refresh);
    }
    for f in &out.failures {
        println!("  NOT MEASURED: {f}");
    }
}
