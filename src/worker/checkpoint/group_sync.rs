//! The group offset sync beside the checkpoint cycle, as pure decisions.
//!
//! Committing translated offsets to the target groups takes longer than the rest of a cycle
//! at scale (10,000 groups: about 10 s on one connection against 3-4 s for reading,
//! translating and writing the checkpoints), so it runs as its own loop and never delays
//! the next cycle. Each cycle hands its plans over through a [`Mailbox`]: one slot per
//! OffsetCheckpoint holding only the newest plans. A sync still running when newer plans
//! arrive is followed by a sync of the newest, never by a backlog of older ones, so a sync
//! is at most one plan behind and memory holds at most two plans per checkpoint.
//!
//! Safety is the same as when the sync ran inside the cycle: the plans are checkpoints in
//! force (safe translations, never past what was replicated), and right before committing
//! the sync lists the target's groups (active members: left alone) and reads their committed
//! offsets (never moved backwards; `plan::plan_group_sync`).
//!
//! Who reports what: a group's `NoOffsetSync` failure comes from the cycle, its
//! `ActiveOnTarget` and `CommitFailed` failures and its `synced` flag from the sync
//! ([`sync_owned`]); each side replaces only its own ([`merge_owned_failures`]).

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::api::GroupFailureReason;

use super::status::{merge_failures, FailureState};

/// The newest plans per OffsetCheckpoint waiting for the group sync (module docs).
#[derive(Debug)]
pub struct Mailbox<P> {
    /// Per checkpoint: when its oldest unsynced offer arrived (a counter), and the newest
    /// plans.
    pending: BTreeMap<String, (u64, P)>,
    arrivals: u64,
}

impl<P> Default for Mailbox<P> {
    fn default() -> Self {
        Self {
            pending: BTreeMap::new(),
            arrivals: 0,
        }
    }
}

impl<P> Mailbox<P> {
    /// Leaves `plans` as the newest of `checkpoint`. Returns `true` when it replaced plans
    /// that were never synced (superseded: the newer ones include everything they held).
    pub fn offer(&mut self, checkpoint: &str, plans: P) -> bool {
        self.arrivals += 1;
        match self.pending.get_mut(checkpoint) {
            // Keeps its place in line: a checkpoint whose cycles are frequent must not
            // starve one whose cycles are rare.
            Some((_, slot)) => {
                *slot = plans;
                true
            }
            None => {
                self.pending
                    .insert(checkpoint.to_string(), (self.arrivals, plans));
                false
            }
        }
    }

    /// The plans to sync next: those of the checkpoint that has waited longest.
    pub fn take(&mut self) -> Option<(String, P)> {
        let name = self
            .pending
            .iter()
            .min_by_key(|(_, (arrived, _))| *arrived)
            .map(|(n, _)| n.clone())?;
        let (_, plans) = self.pending.remove(&name)?;
        Some((name, plans))
    }

    /// Drops the pending plans of checkpoints that are no longer run.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.pending.retain(|n, _| keep(n));
    }
}

/// Whether the group sync (rather than the checkpoint cycle) reports failures of `reason`.
pub fn sync_owned(reason: GroupFailureReason) -> bool {
    match reason {
        GroupFailureReason::ActiveOnTarget | GroupFailureReason::CommitFailed => true,
        GroupFailureReason::NoOffsetSync => false,
    }
}

/// A group's failures after one side reports: the side that owns a reason (`owned(reason)`)
/// replaces its failures with `current` (keeping `since` for those that persist), the other
/// side's stay. The cycle's failures come first, then the sync's.
pub fn merge_owned_failures(
    previous: &[FailureState],
    current: Vec<(GroupFailureReason, String)>,
    owned: impl Fn(GroupFailureReason) -> bool,
    now: Timestamp,
) -> Vec<FailureState> {
    let current: Vec<_> = current.into_iter().filter(|(r, _)| owned(*r)).collect();
    let mut out: Vec<FailureState> = previous
        .iter()
        .filter(|f| !owned(f.reason))
        .cloned()
        .collect();
    out.extend(merge_failures(previous, current, now));
    out.sort_by_key(|f| sync_owned(f.reason));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    enum Op {
        Offer(&'static str, u32, bool),
        Take(Option<(&'static str, u32)>),
        Retain(&'static str),
    }
    use Op::*;

    #[test]
    fn mailbox_table() {
        let cases: Vec<(&str, Vec<Op>)> = vec![
            ("empty", vec![Take(None)]),
            (
                "one offer is taken once",
                vec![Offer("a", 1, false), Take(Some(("a", 1))), Take(None)],
            ),
            (
                "a sync still running: the next sync takes the newest plans, not a queue",
                vec![
                    Offer("a", 1, false),
                    Take(Some(("a", 1))),
                    Offer("a", 2, false),
                    Offer("a", 3, true),
                    Offer("a", 4, true),
                    Take(Some(("a", 4))),
                    Take(None),
                ],
            ),
            (
                "the checkpoint waiting longest goes first, even when offered again since",
                vec![
                    Offer("b", 1, false),
                    Offer("a", 1, false),
                    Offer("b", 2, true),
                    Take(Some(("b", 2))),
                    Offer("b", 3, false),
                    Take(Some(("a", 1))),
                    Take(Some(("b", 3))),
                    Take(None),
                ],
            ),
            (
                "a removed checkpoint's plans are dropped",
                vec![
                    Offer("a", 1, false),
                    Offer("b", 1, false),
                    Retain("b"),
                    Take(Some(("b", 1))),
                    Take(None),
                ],
            ),
        ];
        for (name, ops) in cases {
            let mut m: Mailbox<u32> = Mailbox::default();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Offer(cp, plans, superseded) => {
                        assert_eq!(m.offer(cp, plans), superseded, "{name}: step {i}")
                    }
                    Take(want) => assert_eq!(
                        m.take(),
                        want.map(|(n, p)| (n.to_string(), p)),
                        "{name}: step {i}"
                    ),
                    Retain(keep) => m.retain(|n| n == keep),
                }
            }
        }
    }

    #[allow(clippy::type_complexity)]
    #[test]
    fn owned_failures_table() {
        let t = |s: i64| Timestamp::from_second(s).unwrap();
        let f = |reason, message: &str, since| FailureState {
            reason,
            message: message.into(),
            since: t(since),
        };
        use GroupFailureReason::{ActiveOnTarget as Active, CommitFailed, NoOffsetSync};
        let cycle = |r| !sync_owned(r);
        let cases: Vec<(
            &str,
            Vec<FailureState>,
            Vec<(GroupFailureReason, &str)>,
            bool,
            Vec<FailureState>,
        )> = vec![
            (
                "the sync reports: the cycle's failure stays",
                vec![f(NoOffsetSync, "n", 1)],
                vec![(Active, "a")],
                true,
                vec![f(NoOffsetSync, "n", 1), f(Active, "a", 9)],
            ),
            (
                "the cycle reports: the sync's failure stays, order fixed",
                vec![f(Active, "a", 2)],
                vec![(NoOffsetSync, "n")],
                false,
                vec![f(NoOffsetSync, "n", 9), f(Active, "a", 2)],
            ),
            (
                "the sync clears its own failure, keeps the cycle's",
                vec![f(NoOffsetSync, "n", 1), f(CommitFailed, "c", 2)],
                vec![],
                true,
                vec![f(NoOffsetSync, "n", 1)],
            ),
            (
                "a persisting failure keeps its since, with the new message",
                vec![f(Active, "old", 2)],
                vec![(Active, "new")],
                true,
                vec![f(Active, "new", 2)],
            ),
            (
                "a side never reports the other's reasons",
                vec![],
                vec![(NoOffsetSync, "n"), (CommitFailed, "c")],
                true,
                vec![f(CommitFailed, "c", 9)],
            ),
        ];
        for (name, previous, current, by_sync, want) in cases {
            let current: Vec<_> = current
                .into_iter()
                .map(|(r, m)| (r, m.to_string()))
                .collect();
            let got = if by_sync {
                merge_owned_failures(&previous, current, sync_owned, t(9))
            } else {
                merge_owned_failures(&previous, current, cycle, t(9))
            };
            assert_eq!(got, want, "{name}");
        }
    }
}
