//! The bench's report: the throughput table (median round of each contender), peak RSS
//! with many partitions, and the targets with PASS/MISS.

use std::collections::BTreeMap;

use mirrorflow::testkit::stats::{self, median};

use crate::contender::{Contender, Measured};
use crate::procfs::mib;
use crate::rounds::Outcome;
use crate::worker::{in_flight_mib, lag_max};
use crate::Config;

/// The RSS target of the issue.
const RSS_TARGET_MIB: f64 = 64.0;

/// Prints the whole report: throughput, peak RSS (if measured), targets.
pub fn print(cfg: &Config, out: &Outcome) {
    let med = medians(&out.results);
    print_throughput(cfg, &out.results, &med);
    if !out.rss.is_empty() {
        print_rss(cfg, &out.rss, &out.idle_rss);
    }
    print_targets(cfg, &out.results, &out.rss, &med, &out.failures);
}

/// Steady-rate ratios `a / b` of the rounds where both ran at `size` (see
/// [`stats::paired_ratios`]: the host's speed moves by ±15 % over minutes here).
fn paired_ratios(results: &[Measured], size: usize, a: Contender, b: Contender) -> Vec<f64> {
    let rates = |c: Contender| -> Vec<(usize, f64)> {
        results
            .iter()
            .filter(|m| m.size == size && m.contender == c)
            .map(|m| (m.round, m.steady_rate))
            .collect()
    };
    stats::paired_ratios(&rates(a), &rates(b))
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

/// The median run (by steady records/s) of each (size, contender).
fn medians(results: &[Measured]) -> BTreeMap<(usize, Contender), Measured> {
    let mut by: BTreeMap<(usize, Contender), Vec<&Measured>> = BTreeMap::new();
    for m in results {
        by.entry((m.size, m.contender)).or_default().push(m);
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

/// `1 KB` for 1,024-byte records, `<size> B` otherwise.
fn size_label(size: usize) -> String {
    if size == 1024 {
        "1 KB".to_string()
    } else {
        format!("{size} B")
    }
}

/// The throughput table: the median run of each (size, contender), with its notes.
fn print_throughput(
    cfg: &Config,
    results: &[Measured],
    med: &BTreeMap<(usize, Contender), Measured>,
) {
    println!();
    println!(
        "Replication throughput — {} partitions, nisshi → nisshi on one host, {} round(s){}",
        cfg.partitions,
        cfg.rounds,
        if cfg.rounds > 1 {
            " (median shown)"
        } else {
            ""
        }
    );
    println!(
        "mirrorflow: delivery AtLeastOnce (nisshi refuses transactions), offset validation on, offset syncs every {} records, {} MiB in flight",
        lag_max(),
        in_flight_mib()
    );
    println!(
        "{:<26} {:>6} {:>9} {:>7} {:>7} {:>10} {:>7} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "contender",
        "size",
        "records",
        "wall s",
        "start s",
        "records/s",
        "MB/s",
        "CPU ms/MB",
        "brk ms/MB",
        "peak RSS",
        "vs bare",
        "vs kcat"
    );
    for ((size, c), m) in med {
        let ratio = |other: Contender| {
            median(&paired_ratios(results, *size, *c, other))
                .map(|r| format!("{r:.2}×"))
                .unwrap_or_else(|| "-".to_string())
        };
        println!(
            "{:<26} {:>6} {:>9} {:>7.2} {:>7.2} {:>10.0} {:>7.1} {:>9.2} {:>9.2} {:>5.1} MiB {:>7} {:>7}",
            c.label(),
            size_label(*size),
            m.records,
            m.wall,
            m.startup,
            m.steady_rate,
            m.steady_rate * *size as f64 / 1e6,
            1000.0 * m.cpu / m.mb(),
            1000.0 * m.broker_cpu / m.mb(),
            mib(m.peak_rss_kib),
            ratio(Contender::Bare),
            ratio(Contender::Kcat),
        );
    }
    for ((size, c), m) in med {
        if m.extra > 0 {
            println!(
                "  {} {size} B: {} duplicate records on the target",
                c.label(),
                m.extra
            );
        }
        for note in &m.notes {
            println!("  {} {size} B: {note}", c.label());
        }
        if *c == Contender::Mirrorflow {
            println!(
                "  {} {size} B: end-to-end (start-up included) {:.0} records/s",
                c.label(),
                m.end_to_end_rate()
            );
        }
    }
    println!(
        "records/s and MB/s: steady rate: slope of records on the target over time while 10-90 % of them arrived;"
    );
    println!(
        "CPU ms/MB: the contender's processes only; brk ms/MB: both brokers; peak RSS: VmHWM (kcat: both processes);"
    );
    println!(
        "vs bare, vs kcat: median over rounds of the ratio within a round (the contenders' order turns each round)."
    );
}

/// Peak RSS with many partitions: the worst run of each (load, contender), and the idle
/// worker's baselines.
fn print_rss(cfg: &Config, rss: &[Measured], idle_rss: &[(String, (u64, u64, u64))]) {
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
    for (what, (hwm, anon, file)) in idle_rss {
        println!(
            "{:<26} {:>4} partitions:    peak RSS {:>6.1} MiB (heap ≤ {:.1}, file-backed ≤ {:.1}); flow selecting no topic, {what}",
            "mirrorflow idle worker",
            0,
            mib(*hwm),
            mib(*anon),
            mib(*file)
        );
    }
}

/// The targets of the issue, PASS/MISS, and what could not be measured.
fn print_targets(
    cfg: &Config,
    results: &[Measured],
    rss: &[Measured],
    med: &BTreeMap<(usize, Contender), Measured>,
    failures: &[String],
) {
    println!();
    println!("Targets");
    for (size, _) in med.keys().filter(|(_, c)| *c == Contender::Mirrorflow) {
        let label = size_label(*size);
        let vs_bare = paired_ratios(results, *size, Contender::Mirrorflow, Contender::Bare);
        match median(&vs_bare) {
            Some(r) => println!(
                "  {:<52} {:>8.1} %   {}   {}",
                format!("mirrorflow ≥ 90 % of the bare loop, {label}"),
                r * 100.0,
                verdict(r >= 0.9),
                spread(&vs_bare, |x| format!("{:.1} %", x * 100.0))
            ),
            None => println!("  mirrorflow vs bare loop, {label}: bare loop not measured"),
        }
        let vs_kcat = paired_ratios(results, *size, Contender::Mirrorflow, Contender::Kcat);
        match median(&vs_kcat) {
            Some(r) => println!(
                "  {:<52} {:>8.2} ×   {}   {}",
                format!("mirrorflow ≥ 2× the kcat pipe, {label}"),
                r,
                verdict(r >= 2.0),
                spread(&vs_kcat, |x| format!("{x:.2}×"))
            ),
            None => println!("  mirrorflow vs kcat pipe, {label}: kcat not measured"),
        }
        if let Some(r) = median(&paired_ratios(
            results,
            *size,
            Contender::Bare,
            Contender::Kcat,
        )) {
            println!(
                "  {:<52} {:>8.2} ×   (reference: what the kcat target asks of a copy loop here)",
                format!("bare loop vs the kcat pipe, {label}"),
                r
            );
        }
    }
    // Judged on the worst loaded run (the most records per partition).
    let loaded = rss.iter().map(|m| m.records).max().unwrap_or(0);
    if let Some(m) = rss
        .iter()
        .filter(|m| m.contender == Contender::Mirrorflow && m.records == loaded)
        .max_by_key(|m| m.peak_rss_kib)
    {
        let peak = mib(m.peak_rss_kib);
        println!(
            "  {:<52} {:>6.1} MiB   {}",
            format!(
                "worker peak RSS ≤ 64 MiB, {} partitions",
                cfg.rss_partitions
            ),
            peak,
            verdict(peak <= RSS_TARGET_MIB)
        );
    }
    for f in failures {
        println!("  NOT MEASURED: {f}");
    }
}
