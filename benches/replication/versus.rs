//! mirrorflow beside MirrorMaker 2: one table per scenario (mirrorflow, MM2 at each
//! `tasks.max`, the bare loop), the latency and resume tables, and the goals of issue #50 as
//! ratios of the same run (medians of per-round ratios) with PASS/MISS.

use mirrorflow::testkit::stats::{self, median};

use crate::contender::{Contender, Measured};
use crate::live::{LatencyMeasured, ResumeMeasured};
use crate::procfs::mib;
use crate::rounds::Outcome;

/// Goals, mirrorflow against MM2 with `tasks.max` = the worker count (1).
const CPU_GOAL: f64 = 3.0;
const RATE_GOAL: f64 = 2.0;
const RSS_GOAL: f64 = 1.0 / 5.0;
const P99_GOAL: f64 = 1.0;
const START_GOAL: f64 = 1.0 / 3.0;

/// MM2 as judged: `tasks.max` = 1, the worker count of the bench's mirrorflow.
const MM2: Contender = Contender::Mm2(1);

/// A table row: its name, its figure, its digits.
type Row<'a> = (&'a str, &'a dyn Fn(&Measured) -> f64, usize);

/// A scenario and partition count of the throughput or scale runs.
type Case = (crate::contender::Scenario, i32);

fn cases(runs: &[&Measured]) -> Vec<Case> {
    let mut v: Vec<Case> = runs.iter().map(|m| (m.scenario, m.partitions)).collect();
    v.sort();
    v.dedup();
    v
}

fn contenders_of(runs: &[&Measured]) -> Vec<Contender> {
    let mut v: Vec<Contender> = runs.iter().map(|m| m.contender).collect();
    v.sort();
    v.dedup();
    // mirrorflow first, then MM2, the bare loop last (the ceiling).
    v.sort_by_key(|c| match c {
        Contender::Mirrorflow => (0, 0),
        Contender::Mm2(t) => (1, *t),
        Contender::Kcat => (2, 0),
        Contender::Bare => (3, 0),
    });
    v
}

/// Per-round `(round, figure)` of `c` in `case`.
fn per_round(
    runs: &[&Measured],
    case: Case,
    c: Contender,
    f: impl Fn(&Measured) -> f64,
) -> Vec<(usize, f64)> {
    runs.iter()
        .filter(|m| (m.scenario, m.partitions) == case && m.contender == c)
        .map(|m| (m.round, f(m)))
        .collect()
}

fn med_of(xs: &[(usize, f64)]) -> Option<f64> {
    median(&xs.iter().map(|(_, x)| *x).collect::<Vec<_>>())
}

fn mb_s(m: &Measured) -> f64 {
    m.steady_rate * m.scenario.size as f64 / 1e6
}

/// CPU s per GB, whole run (spawn to the last record).
fn cpu_s_gb(m: &Measured) -> f64 {
    m.cpu / (m.mb() / 1000.0)
}

/// CPU s per GB while 10-90 % of the records arrived.
fn steady_cpu_s_gb(m: &Measured) -> f64 {
    m.steady_cpu_ms_per_mb()
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

fn spread(xs: &[f64], fmt: impl Fn(f64) -> String) -> String {
    if xs.len() < 2 {
        return String::new();
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("rounds {}–{}", fmt(lo), fmt(hi))
}

/// Prints the side-by-side tables and the goals; nothing when MM2 did not run.
pub fn print(out: &Outcome) {
    let runs: Vec<&Measured> = out.results.iter().chain(out.scale.iter()).collect();
    let has_mm2 = runs
        .iter()
        .any(|m| matches!(m.contender, Contender::Mm2(_)))
        || out
            .latency
            .iter()
            .any(|m| matches!(m.contender, Contender::Mm2(_)));
    if !has_mm2 {
        return;
    }
    println!();
    println!(
        "mirrorflow beside MirrorMaker 2 (median of rounds; one worker, MM2 in dedicated mode)"
    );
    let contenders = contenders_of(&runs);
    for case in cases(&runs) {
        print_case(&runs, case, &contenders);
    }
    print_latency(&out.latency);
    print_resume(&out.resume);
    print_goals(&runs, &out.latency);
}

fn print_case(runs: &[&Measured], case: Case, contenders: &[Contender]) {
    let (scenario, parts) = case;
    let records = runs
        .iter()
        .find(|m| (m.scenario, m.partitions) == case)
        .map_or(0, |m| m.records);
    println!();
    println!(
        "{}, {parts} partitions, {records} records",
        scenario.label()
    );
    print!("{:<28}", "");
    for c in contenders {
        print!(" {:>12}", c.short());
    }
    println!();
    let rows: [Row; 5] = [
        ("MB/s", &mb_s, 1),
        ("CPU s per GB (10-90 %)", &steady_cpu_s_gb, 1),
        ("CPU s per GB (whole run)", &cpu_s_gb, 1),
        ("peak RSS MiB", &|m: &Measured| mib(m.peak_rss_kib), 0),
        ("start to first record s", &|m: &Measured| m.startup, 2),
    ];
    for (name, f, digits) in rows {
        print!("{name:<28}");
        for c in contenders {
            let v = med_of(&per_round(runs, case, *c, f));
            print!(
                " {:>12}",
                v.map_or("-".to_string(), |v| format!("{v:.digits$}"))
            );
        }
        println!();
    }
}

fn latency_of(lat: &[LatencyMeasured], c: Contender, p: f64) -> Vec<(usize, f64)> {
    lat.iter()
        .filter(|m| m.contender == c)
        .filter_map(|m| Some((m.round, m.percentile(p)?)))
        .collect()
}

fn print_latency(lat: &[LatencyMeasured]) {
    if lat.is_empty() {
        return;
    }
    let mut cs: Vec<Contender> = lat.iter().map(|m| m.contender).collect();
    cs.sort();
    cs.dedup();
    let offered = lat[0].offered;
    println!();
    println!(
        "End-to-end latency, {offered} × 1 KB records offered at a fixed rate (produce-time header → arrival on the target), median of rounds"
    );
    for c in cs {
        let f = |p| med_of(&latency_of(lat, c, p)).unwrap_or(f64::NAN);
        let runs: Vec<&LatencyMeasured> = lat.iter().filter(|m| m.contender == c).collect();
        let start = median(&runs.iter().map(|m| m.startup).collect::<Vec<_>>()).unwrap_or(f64::NAN);
        let received = runs.iter().map(|m| m.latencies_ms.len()).min().unwrap_or(0);
        let rss = runs.iter().map(|m| m.peak_rss_kib).max().unwrap_or(0);
        let cpu =
            median(&runs.iter().map(|m| m.cpu_under_load).collect::<Vec<_>>()).unwrap_or(f64::NAN);
        println!(
            "  {:<28} p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms  start (empty topic) {:>5.2} s  CPU under load {:.2} s  peak RSS {:.0} MiB  received ≥ {received}",
            c.label(),
            f(0.5),
            f(0.99),
            f(1.0),
            start,
            cpu,
            mib(rss),
        );
    }
}

fn print_resume(res: &[ResumeMeasured]) {
    if res.is_empty() {
        return;
    }
    let mut cs: Vec<Contender> = res.iter().map(|m| m.contender).collect();
    cs.sort();
    cs.dedup();
    println!();
    println!(
        "Resume after SIGKILL at 30 % of {} × 1 KB records: restart → the target grows again; duplicates after the copy",
        res[0].records
    );
    for c in cs {
        let runs: Vec<&ResumeMeasured> = res.iter().filter(|m| m.contender == c).collect();
        let resume = median(&runs.iter().map(|m| m.resume).collect::<Vec<_>>()).unwrap_or(f64::NAN);
        let dups: Vec<String> = runs.iter().map(|m| m.duplicates.to_string()).collect();
        println!(
            "  {:<28} resume {:>6.2} s (median of {})  duplicates per round: {}",
            c.label(),
            resume,
            runs.len(),
            dups.join(", ")
        );
    }
}

fn print_goals(runs: &[&Measured], lat: &[LatencyMeasured]) {
    println!();
    println!(
        "Goals, mirrorflow against {} (median of per-round ratios of the same run)",
        MM2.label()
    );
    let line =
        |what: String, ratios: &[f64], goal: f64, higher: bool, fmt: &dyn Fn(f64) -> String| {
            match median(ratios) {
                Some(r) => {
                    let ok = if higher { r >= goal } else { r <= goal };
                    println!(
                        "  {what:<58} {:>9}   {}   {}",
                        fmt(r),
                        verdict(ok),
                        spread(ratios, fmt)
                    );
                }
                None => println!("  {what:<58} {:>9}   not measured", "-"),
            }
        };
    let x = |r: f64| format!("{r:.2}×");
    for case in cases(runs) {
        let label = format!("{}, {} partitions", case.0.label(), case.1);
        let ratio = |f: &dyn Fn(&Measured) -> f64, invert: bool| {
            let (a, b) = (
                per_round(runs, case, Contender::Mirrorflow, f),
                per_round(runs, case, MM2, f),
            );
            if invert {
                stats::paired_ratios(&b, &a)
            } else {
                stats::paired_ratios(&a, &b)
            }
        };
        line(
            format!("MB per CPU s ≥ 3× MM2's (10-90 %), {label}"),
            &ratio(&steady_cpu_s_gb, true),
            CPU_GOAL,
            true,
            &x,
        );
        let whole = ratio(&cpu_s_gb, true);
        if let Some(r) = median(&whole) {
            println!(
                "  {:<58} {:>9}   (not judged: JVM start-up included)",
                format!("MB per CPU s vs MM2's, whole run, {label}"),
                x(r)
            );
        }
        line(
            format!("throughput ≥ 2× MM2's, {label}"),
            &ratio(&mb_s, false),
            RATE_GOAL,
            true,
            &x,
        );
        line(
            format!("peak RSS ≤ 1/5 of MM2's, {label}"),
            &ratio(&|m: &Measured| m.peak_rss_kib as f64, false),
            RSS_GOAL,
            false,
            &x,
        );
        line(
            format!("start to first record ≤ 1/3 of MM2's, {label}"),
            &ratio(&|m: &Measured| m.startup, false),
            START_GOAL,
            false,
            &x,
        );
    }
    if !lat.is_empty() {
        let p99 = stats::paired_ratios(
            &latency_of(lat, Contender::Mirrorflow, 0.99),
            &latency_of(lat, MM2, 0.99),
        );
        line("p99 latency ≤ MM2's".to_string(), &p99, P99_GOAL, false, &x);
        let start = |c| -> Vec<(usize, f64)> {
            lat.iter()
                .filter(|m| m.contender == c)
                .map(|m| (m.round, m.startup))
                .collect()
        };
        line(
            "start to first record ≤ 1/3 of MM2's, empty topic".to_string(),
            &stats::paired_ratios(&start(Contender::Mirrorflow), &start(MM2)),
            START_GOAL,
            false,
            &x,
        );
    }
}
