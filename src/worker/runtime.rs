//! How many tokio worker threads a worker runs.

/// Most runtime threads a worker starts by default. tokio's default is one per CPU the
/// process sees, and a worker pod without a CPU limit (the default resources) sees the
/// node's: dozens of idle threads, each with its stack pages and malloc cache. The engine is
/// one select loop and librdkafka does the network and compression work on its own threads.
pub const MAX_THREADS: usize = 2;

/// The runtime's worker threads: the operator's `TOKIO_WORKER_THREADS` (tokio's own
/// variable) when it is a positive integer, else the CPUs available, at most
/// [`MAX_THREADS`].
pub fn threads(available: usize, env: Option<&str>) -> usize {
    env.and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or_else(|| available.clamp(1, MAX_THREADS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_cap_the_cpus_unless_the_operator_says() {
        let cases: &[(usize, Option<&str>, usize)] = &[
            (1, None, 1),
            (2, None, 2),
            (64, None, 2),
            // available_parallelism failed: one thread still runs the worker.
            (0, None, 1),
            (64, Some("8"), 8),
            (1, Some(" 4 "), 4),
            (64, Some("0"), 2),
            (64, Some("many"), 2),
            (64, Some(""), 2),
        ];
        for &(available, env, want) in cases {
            assert_eq!(
                threads(available, env),
                want,
                "{available} CPUs, env {env:?}"
            );
        }
    }
}
