//! Deterministic, stable partition ownership between the workers of a flow.
//!
//! `owner(topic, partition, N) = (fnv1a64(topic) + partition) mod N`. It depends only on the
//! partition itself, so the same inputs always give the same owner on every worker and
//! release, and the owner of a partition never changes when other topics or partitions
//! appear (no rebalancing). Consecutive partitions of one topic go to consecutive workers,
//! and the hash spreads the first partition of each topic.

/// 64-bit FNV-1a of `bytes` (hand-written so the assignment never depends on a library's
/// hasher, which may change between releases).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(PRIME)
    })
}

/// The index of the worker (of `worker_count`) that owns `topic`/`partition`.
/// `worker_count` 0 is treated as 1; a negative partition (never valid) counts as 0.
pub fn owner(topic: &str, partition: i32, worker_count: u32) -> u32 {
    let n = u64::from(worker_count.max(1));
    let p = u64::try_from(partition).unwrap_or(0);
    // Reduce first so the sum cannot overflow.
    ((fnv1a64(topic.as_bytes()) % n + p % n) % n) as u32
}

/// Whether worker `index` of `worker_count` owns `topic`/`partition`.
pub fn is_owned(topic: &str, partition: i32, index: u32, worker_count: u32) -> bool {
    owner(topic, partition, worker_count) == index
}

/// The trailing ordinal of a StatefulSet pod name (`orders-worker-3` → 3).
pub fn ordinal_from_pod_name(pod_name: &str) -> Option<u32> {
    let (_, ordinal) = pod_name.trim().rsplit_once('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    ordinal.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_vectors() {
        // Reference values of the FNV-1a 64-bit test suite.
        let cases: [(&[u8], u64); 3] = [
            (b"", 0xcbf2_9ce4_8422_2325),
            (b"a", 0xaf63_dc4c_8601_ec8c),
            (b"foobar", 0x8594_4171_f739_67e8),
        ];
        for (input, want) in cases {
            assert_eq!(fnv1a64(input), want, "{input:?}");
        }
    }

    #[test]
    fn owner_table() {
        let h = |t: &str| fnv1a64(t.as_bytes());
        let cases = [
            ("orders", 0, 1, 0),
            ("orders", 7, 1, 0),
            ("orders", 0, 0, 0),
            ("orders", 0, 3, (h("orders") % 3) as u32),
            ("orders", 1, 3, ((h("orders") + 1) % 3) as u32),
            ("orders", 5, 4, ((h("orders") + 5) % 4) as u32),
            ("payments", 2, 5, ((h("payments") + 2) % 5) as u32),
        ];
        for (topic, partition, n, want) in cases {
            assert_eq!(
                owner(topic, partition, n),
                want,
                "{topic}/{partition} of {n}"
            );
        }
    }

    #[test]
    fn owners_do_not_move_when_other_topics_appear() {
        let before: Vec<(String, i32)> = (0..20)
            .flat_map(|t| (0..6).map(move |p| (format!("topic-{t}"), p)))
            .collect();
        let owners: Vec<u32> = before.iter().map(|(t, p)| owner(t, *p, 4)).collect();
        // New topics and more partitions of existing topics appear...
        let mut after = before.clone();
        after.extend((20..40).flat_map(|t| (0..3).map(move |p| (format!("topic-{t}"), p))));
        after.extend((0..20).map(|t| (format!("topic-{t}"), 6)));
        // ...and every old partition keeps its owner.
        for ((t, p), o) in before.iter().zip(&owners) {
            assert_eq!(owner(t, *p, 4), *o, "{t}/{p}");
        }
        // Every partition has exactly one owner among the workers.
        for (t, p) in &after {
            let n = (0..4).filter(|i| is_owned(t, *p, *i, 4)).count();
            assert_eq!(n, 1, "{t}/{p}");
        }
    }

    #[test]
    fn partitions_of_a_topic_spread_over_workers() {
        for n in 1..=8u32 {
            let owners: std::collections::BTreeSet<u32> =
                (0..n as i32).map(|p| owner("orders", p, n)).collect();
            assert_eq!(owners.len(), n as usize, "{n} partitions over {n} workers");
        }
    }

    #[test]
    fn pod_ordinal_table() {
        let cases = [
            ("orders-worker-0", Some(0)),
            ("orders-worker-12", Some(12)),
            ("orders-worker-", None),
            ("orders-worker-x1", None),
            ("orders", None),
            ("", None),
            ("a-+1", None),
        ];
        for (name, want) in cases {
            assert_eq!(ordinal_from_pod_name(name), want, "{name}");
        }
    }
}
