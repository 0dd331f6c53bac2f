//! Statistics of the benches, kept here so they are tested: a steady copy rate from polls,
//! medians, and ratios paired within a round.

/// The copy rate in its steady part: the least-squares slope of (time s, records on the
/// target) over the polls that saw between 10 % and 90 % of `n`. Two polls 50 ms apart at
/// both ends of a 1.3 s copy would put ±8 % on a first-to-last rate; the slope over ~20
/// polls does not depend on where the ends fall, nor on a first poll delayed by a topic
/// not created yet. `None` with fewer than 4 such polls, or no progress among them.
pub fn steady_rate(samples: &[(f64, u64)], n: u64) -> Option<f64> {
    let (lo, hi) = (n as f64 * 0.1, n as f64 * 0.9);
    let mid: Vec<(f64, f64)> = samples
        .iter()
        .map(|&(t, c)| (t, c as f64))
        .filter(|&(_, c)| c >= lo && c <= hi)
        .collect();
    if mid.len() < 4 {
        return None;
    }
    let k = mid.len() as f64;
    let (mt, mc) = (
        mid.iter().map(|p| p.0).sum::<f64>() / k,
        mid.iter().map(|p| p.1).sum::<f64>() / k,
    );
    let var: f64 = mid.iter().map(|p| (p.0 - mt).powi(2)).sum();
    let cov: f64 = mid.iter().map(|p| (p.0 - mt) * (p.1 - mc)).sum();
    (var > 0.0 && cov > 0.0).then(|| cov / var)
}

/// CPU seconds and records in the steady part: between the first poll that saw at least
/// 10 % of `n` and the last that saw at most 90 % (the window of [`steady_rate`]), from polls
/// `(records on the target, the contender's CPU seconds so far)`. Start-up and exit (a
/// flush, a shutdown) fall outside, as they do for the rate. `None` without records
/// between two such polls.
pub fn steady_cpu(polls: &[(u64, f64)], n: u64) -> Option<(f64, u64)> {
    let (lo, hi) = (n as f64 * 0.1, n as f64 * 0.9);
    let first = polls
        .iter()
        .find(|p| p.0 as f64 >= lo && p.0 as f64 <= hi)?;
    let last = polls.iter().rev().find(|p| p.0 as f64 <= hi)?;
    let records = last.0.checked_sub(first.0).filter(|r| *r > 0)?;
    Some((last.1 - first.1, records))
}

/// Median (mean of the middle two for an even count); `None` when empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Ratios `a / b` of the rounds in which both have a rate (`(round, rate)` pairs), in round
/// order. Pairing runs of one round keeps the host's drift between rounds out of the ratio.
pub fn paired_ratios(a: &[(usize, f64)], b: &[(usize, f64)]) -> Vec<f64> {
    let mut out: Vec<(usize, f64)> = a
        .iter()
        .filter_map(|&(round, x)| {
            let y = b.iter().find(|(r, _)| *r == round)?.1;
            let q = x / y;
            q.is_finite().then_some((round, q))
        })
        .collect();
    out.sort_by_key(|(r, _)| *r);
    out.into_iter().map(|(_, q)| q).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_table() {
        let cases: Vec<(&str, Vec<f64>, Option<f64>)> = vec![
            ("empty", vec![], None),
            ("one", vec![0.9], Some(0.9)),
            ("odd count, unsorted", vec![3.0, 1.0, 2.0], Some(2.0)),
            (
                "even count: mean of the middle two",
                vec![4.0, 1.0, 3.0, 2.0],
                Some(2.5),
            ),
            (
                "an outlier does not move it",
                vec![1.0, 1.0, 100.0],
                Some(1.0),
            ),
        ];
        for (name, xs, want) in cases {
            assert_eq!(median(&xs), want, "{name}");
        }
    }

    type Rates = Vec<(usize, f64)>;

    #[test]
    fn paired_ratios_table() {
        let cases: Vec<(&str, Rates, Rates, Vec<f64>)> = vec![
            (
                "same rounds",
                vec![(0, 9.0), (1, 8.0)],
                vec![(0, 10.0), (1, 10.0)],
                vec![0.9, 0.8],
            ),
            (
                "a round missing on one side is left out",
                vec![(0, 9.0), (1, 8.0)],
                vec![(1, 10.0)],
                vec![0.8],
            ),
            (
                "round order, not input order",
                vec![(2, 3.0), (0, 1.0)],
                vec![(0, 2.0), (2, 4.0)],
                vec![0.5, 0.75],
            ),
            (
                "a zero rate on the other side is left out",
                vec![(0, 1.0)],
                vec![(0, 0.0)],
                vec![],
            ),
            ("nothing to pair", vec![], vec![(0, 1.0)], vec![]),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(paired_ratios(&a, &b), want, "{name}");
        }
    }

    #[test]
    fn steady_rate_is_the_slope_between_10_and_90_percent() {
        // 1,000 records/s after a 0.5 s start; polls every 50 ms; a late flush at the end.
        let mut samples: Vec<(f64, u64)> = (0..=40)
            .map(|i| {
                let t = i as f64 * 0.05;
                (t, ((t - 0.5).max(0.0) * 1000.0) as u64)
            })
            .collect();
        samples.push((3.0, 1000));
        let r = steady_rate(&samples, 1000).expect("enough polls");
        assert!((r - 1000.0).abs() < 1.0, "{r}");
    }

    #[test]
    fn steady_rate_needs_four_polls_with_progress() {
        assert_eq!(
            steady_rate(&[(0.0, 0), (1.0, 1000)], 1000),
            None,
            "no poll in 10–90 %"
        );
        let flat = [(0.0, 500), (0.1, 500), (0.2, 500), (0.3, 500)];
        assert_eq!(steady_rate(&flat, 1000), None, "no progress");
        let three = [(0.0, 200), (0.1, 300), (0.2, 400)];
        assert_eq!(steady_rate(&three, 1000), None, "three polls");
    }

    #[test]
    fn steady_cpu_table() {
        type Polls = Vec<(u64, f64)>;
        type Cost = Option<(f64, u64)>;
        let cases: Vec<(&str, Polls, Cost)> = vec![
            (
                "start-up and exit left out",
                vec![(0, 0.5), (100, 0.6), (500, 1.0), (900, 1.4), (1000, 2.0)],
                Some((0.8, 800)),
            ),
            (
                "first poll inside the window, last one at its end",
                vec![(0, 0.1), (250, 0.3), (600, 0.6), (950, 1.0), (1000, 1.1)],
                Some((0.3, 350)),
            ),
            (
                "one poll inside: no records between two",
                vec![(0, 0.1), (500, 0.5), (1000, 1.0)],
                None,
            ),
            ("no poll inside", vec![(0, 0.1), (1000, 1.0)], None),
            ("nothing polled", vec![], None),
        ];
        for (name, polls, want) in cases {
            let got = steady_cpu(&polls, 1000);
            match (got, want) {
                (Some((c, r)), Some((wc, wr))) => {
                    assert!((c - wc).abs() < 1e-9 && r == wr, "{name}: {got:?}")
                }
                _ => assert_eq!(got, want, "{name}"),
            }
        }
    }
}
