//! What the replication loop does next, and which of its deadlines are due, as pure
//! functions of its state.

use std::time::Instant;

/// The loop's state at the top of a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoopState {
    /// The open batch is full or its linger time passed.
    pub batch_due: bool,
    /// Positions (or the reset marker) wait to be persisted and the open batch is empty.
    pub progress_due: bool,
    /// A producer exists, no retry is pending, and nothing is fatal.
    pub can_write: bool,
    /// Batches may be dispatched before the previous ones finished (AtLeastOnce).
    pub pipelined: bool,
    /// Another batch may be dispatched now.
    pub has_room: bool,
    /// The consumer reported an out-of-range position, not handled yet.
    pub out_of_range: bool,
    /// The consumer must be re-assigned at the committed positions.
    pub reassign_needed: bool,
    /// The open batch holds no record.
    pub open_empty: bool,
    /// No dispatched batch awaits its delivery reports.
    pub none_in_flight: bool,
    /// The retry delay (if any) passed.
    pub retry_due: bool,
}

/// The next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Seal the open batch and send it without waiting (AtLeastOnce).
    Dispatch,
    /// Write the open batch (after every dispatched one) and pending progress, then handle
    /// an out-of-range error if one arrived.
    Write,
    /// Wait for the next event; re-assign the consumer first (`reassign`). A due batch
    /// waiting for room in the pipeline waits here too.
    Wait { reassign: bool },
}

/// Decides the next step. Invariants it keeps: an out-of-range error is handled only after
/// the open batch is written (never dispatched past it); the consumer is re-assigned only
/// when nothing is open or in flight (positions are final then) and no retry is pending.
pub fn next_step(s: &LoopState) -> Step {
    let writable = s.batch_due || s.progress_due || s.out_of_range;
    if s.batch_due && s.can_write && s.pipelined && !s.out_of_range {
        if s.has_room {
            return Step::Dispatch;
        }
    } else if writable && s.can_write {
        return Step::Write;
    }
    Step::Wait {
        reassign: s.reassign_needed && s.open_empty && s.none_in_flight && s.retry_due,
    }
}

/// The loop's deadlines at the top of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The next topic refresh; `None` while one runs.
    pub refresh: Option<Instant>,
    /// The next status publication.
    pub status: Instant,
    /// When the open batch must be written; `None` while it is empty.
    pub batch: Option<Instant>,
    /// The end of the retry delay, if one is pending.
    pub retry: Option<Instant>,
}

/// The timed work due at a turn. A due batch needs nothing here: [`LoopState::batch_due`]
/// reads its deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Due {
    pub refresh: bool,
    pub status: bool,
    /// The retry delay passed: clear it.
    pub retry: bool,
}

/// Which deadlines have passed at `now`. The loop checks them at every turn, so no timer
/// needs to be armed while records keep it busy.
pub fn due(d: &Deadlines, now: Instant) -> Due {
    let passed = |t: Option<Instant>| t.is_some_and(|t| t <= now);
    Due {
        refresh: passed(d.refresh),
        status: d.status <= now,
        retry: passed(d.retry),
    }
}

/// When the loop's one timer must wake it if nothing else does: the earliest deadline still
/// ahead of `now`. A due batch waiting for room in the pipeline is not ahead: it must not
/// wake the loop again at once (its delivery reports will).
pub fn wake_at(d: &Deadlines, now: Instant) -> Option<Instant> {
    [d.refresh, Some(d.status), d.batch, d.retry]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min()
}

/// Result of writing a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    Committed,
    /// Rewound; retry after a backoff.
    Retry,
    /// The commit's outcome is unknown: positions are read back from the progress topic
    /// (with a new producer) before anything is written again.
    Uncertain,
    /// Rewound because a partition stopped; replay the others at once.
    Replay,
}

/// What a write's outcome asks of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AfterWrite {
    /// `mirrorflow_worker_batches_total{outcome}`.
    pub label: &'static str,
    /// The target acknowledged: backoff delays start over, a refusal shown is over.
    pub acknowledged: bool,
    /// Nothing is written for a backoff delay (and the consumer re-reads from the
    /// committed positions), for this reason.
    pub retry: Option<&'static str>,
    /// Positions are read back from the progress topic before anything is written.
    pub reload: bool,
}

/// What `outcome` asks of the pipeline.
pub fn after_write(outcome: WriteOutcome) -> AfterWrite {
    let retried = AfterWrite {
        label: "retried",
        acknowledged: false,
        retry: None,
        reload: false,
    };
    match outcome {
        WriteOutcome::Committed => AfterWrite {
            label: "committed",
            acknowledged: true,
            ..retried
        },
        WriteOutcome::Retry => AfterWrite {
            retry: Some("writing a batch to the target failed"),
            ..retried
        },
        WriteOutcome::Replay => retried,
        WriteOutcome::Uncertain => AfterWrite {
            retry: Some("the outcome of a commit is unknown"),
            reload: true,
            ..retried
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDLE: LoopState = LoopState {
        batch_due: false,
        progress_due: false,
        can_write: true,
        pipelined: true,
        has_room: true,
        out_of_range: false,
        reassign_needed: false,
        open_empty: true,
        none_in_flight: true,
        retry_due: true,
    };

    #[test]
    fn steps() {
        let wait = Step::Wait { reassign: false };
        let cases: Vec<(&str, LoopState, Step)> = vec![
            ("idle", IDLE, wait),
            (
                "due, pipelined, room: dispatch",
                LoopState {
                    batch_due: true,
                    open_empty: false,
                    ..IDLE
                },
                Step::Dispatch,
            ),
            (
                "due, pipeline full: wait for the oldest",
                LoopState {
                    batch_due: true,
                    has_room: false,
                    open_empty: false,
                    ..IDLE
                },
                wait,
            ),
            (
                "due, one at a time: write",
                LoopState {
                    batch_due: true,
                    pipelined: false,
                    ..IDLE
                },
                Step::Write,
            ),
            (
                "progress only: write",
                LoopState {
                    progress_due: true,
                    ..IDLE
                },
                Step::Write,
            ),
            (
                "out of range: write first, never dispatch",
                LoopState {
                    batch_due: true,
                    out_of_range: true,
                    ..IDLE
                },
                Step::Write,
            ),
            (
                "out of range, empty batch: write (then handle it)",
                LoopState {
                    out_of_range: true,
                    ..IDLE
                },
                Step::Write,
            ),
            (
                "cannot write: wait",
                LoopState {
                    batch_due: true,
                    can_write: false,
                    ..IDLE
                },
                wait,
            ),
            (
                "re-assign when all is written",
                LoopState {
                    reassign_needed: true,
                    ..IDLE
                },
                Step::Wait { reassign: true },
            ),
            (
                "not while a batch is open",
                LoopState {
                    reassign_needed: true,
                    open_empty: false,
                    ..IDLE
                },
                wait,
            ),
            (
                "not while batches are in flight",
                LoopState {
                    reassign_needed: true,
                    none_in_flight: false,
                    ..IDLE
                },
                wait,
            ),
            (
                "not before the retry delay",
                LoopState {
                    reassign_needed: true,
                    retry_due: false,
                    can_write: false,
                    ..IDLE
                },
                wait,
            ),
        ];
        for (name, state, want) in cases {
            assert_eq!(next_step(&state), want, "{name}");
        }
    }

    #[test]
    fn deadlines() {
        let now = Instant::now();
        let ms = |n: u64| now + std::time::Duration::from_millis(n);
        let ago = |n: u64| now - std::time::Duration::from_millis(n);
        let quiet = Deadlines {
            refresh: Some(ms(10_000)),
            status: ms(2_000),
            batch: None,
            retry: None,
        };
        let cases: Vec<(&str, Deadlines, Due, Option<Instant>)> = vec![
            (
                "nothing due: the status is first",
                quiet,
                Due::default(),
                Some(ms(2_000)),
            ),
            (
                "an open batch wakes the loop at its deadline",
                Deadlines {
                    batch: Some(ms(100)),
                    ..quiet
                },
                Due::default(),
                Some(ms(100)),
            ),
            (
                "a due batch does not wake the loop again",
                Deadlines {
                    batch: Some(ago(1)),
                    ..quiet
                },
                Due::default(),
                Some(ms(2_000)),
            ),
            (
                "a deadline at now is due, not ahead",
                Deadlines {
                    status: now,
                    ..quiet
                },
                Due {
                    status: true,
                    ..Due::default()
                },
                Some(ms(10_000)),
            ),
            (
                "a refresh that runs has no deadline",
                Deadlines {
                    refresh: None,
                    status: ms(5_000),
                    ..quiet
                },
                Due::default(),
                Some(ms(5_000)),
            ),
            (
                "everything passed",
                Deadlines {
                    refresh: Some(ago(5)),
                    status: ago(1),
                    batch: Some(ago(2)),
                    retry: Some(ago(3)),
                },
                Due {
                    refresh: true,
                    status: true,
                    retry: true,
                },
                None,
            ),
            (
                "a retry ahead is the earliest",
                Deadlines {
                    retry: Some(ms(50)),
                    batch: Some(ms(100)),
                    ..quiet
                },
                Due::default(),
                Some(ms(50)),
            ),
        ];
        for (name, d, want_due, want_wake) in cases {
            assert_eq!(due(&d, now), want_due, "{name}: due");
            assert_eq!(wake_at(&d, now), want_wake, "{name}: wake_at");
        }
    }

    #[test]
    fn after_writes() {
        // (outcome, label, acknowledged, retries, reloads)
        let cases = [
            (WriteOutcome::Committed, "committed", true, false, false),
            (WriteOutcome::Retry, "retried", false, true, false),
            (WriteOutcome::Replay, "retried", false, false, false),
            (WriteOutcome::Uncertain, "retried", false, true, true),
        ];
        for (outcome, label, acknowledged, retries, reload) in cases {
            let a = after_write(outcome);
            assert_eq!(a.label, label, "{outcome:?}");
            assert_eq!(a.acknowledged, acknowledged, "{outcome:?}");
            assert_eq!(a.retry.is_some(), retries, "{outcome:?}");
            assert_eq!(a.reload, reload, "{outcome:?}");
        }
    }
}
