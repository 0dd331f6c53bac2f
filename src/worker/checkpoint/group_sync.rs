//! The group sync: commits the checkpoints in force to the target groups, in a loop beside
//! the checkpoint cycles (`run_group_syncs`, in the runner's task), so that committing
//! thousands of groups never delays the next cycle. Right before committing it lists the
//! target's groups (active members: left alone, retried with the next plans) and reads their
//! committed offsets (never moved backwards; `plan::plan_group_sync`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;
use tokio::sync::watch;

use crate::api::GroupFailureReason;
use crate::kafka::admin::{GroupAdmin, GroupOffset};
use crate::kafka::run_blocking as blocking;
use crate::kafka::Error as KafkaError;

use super::metrics::CheckpointMetrics;
use super::plan::{classify_commit_error, plan_group_sync, GroupPlan, SyncPlan};
use super::status::{merge_failures, FailureState, RunnerState};
use super::translate::PartitionMap;

/// The newest plans per OffsetCheckpoint waiting for the group sync: each cycle hands its
/// plans over here, one slot per OffsetCheckpoint holding only the newest plans, so a sync is
/// at most one plan behind (never a backlog) and memory holds at most two plans per checkpoint.
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

/// Commits the checkpoints in force to the target groups that have no active members.
/// Per group: `Ok(true)` synced (committed or already there), `Ok(false)` nothing to do,
/// `Err` refused or failed.
async fn sync_groups(
    target: &Arc<GroupAdmin>,
    metrics: &CheckpointMetrics,
    name: &str,
    plans: &[GroupPlan],
    skip: &BTreeSet<String>,
) -> Result<SyncResults, KafkaError> {
    let mut out = HashMap::new();
    if !plans
        .iter()
        .any(|p| !skip.contains(&p.group) && p.checkpointed() > 0)
    {
        return Ok(out);
    }
    let admin = target;
    let target = admin.clone();
    let listing = blocking(move || target.list_groups()).await??;
    let members: HashMap<String, u32> = listing.into_iter().map(|g| (g.group, g.members)).collect();
    let mut candidates: Vec<&GroupPlan> = Vec::new();
    for plan in plans {
        if skip.contains(&plan.group) || plan.checkpointed() == 0 {
            continue;
        }
        match members.get(&plan.group) {
            Some(&m) if m > 0 => {
                runner_refused(metrics, name);
                out.insert(
                        plan.group.clone(),
                        Err((
                            GroupFailureReason::ActiveOnTarget,
                            format!("the group has {m} active member(s) on the target; its offsets are left alone (retried next interval)"),
                        )),
                    );
            }
            _ => candidates.push(plan),
        }
    }
    let target = admin.clone();
    let names: Vec<String> = candidates.iter().map(|p| p.group.clone()).collect();
    let committed = blocking(move || target.list_offsets(&names)).await?;
    let mut commits: Vec<(String, Vec<GroupOffset>)> = Vec::new();
    for (plan, c) in candidates.iter().zip(committed) {
        let committed: PartitionMap<i64> = match c {
            Ok(offs) => offs
                .into_iter()
                .map(|o| ((o.topic, o.partition), o.offset))
                .collect(),
            Err(e) => {
                out.insert(
                    plan.group.clone(),
                    Err((GroupFailureReason::CommitFailed, e.to_string())),
                );
                continue;
            }
        };
        match plan_group_sync(plan, members.get(&plan.group).copied(), &committed) {
            SyncPlan::Commit(offsets) => commits.push((plan.group.clone(), offsets)),
            SyncPlan::UpToDate => {
                out.insert(plan.group.clone(), Ok(true));
            }
            SyncPlan::Nothing => {
                out.insert(plan.group.clone(), Ok(false));
            }
            SyncPlan::Refused { members } => {
                runner_refused(metrics, name);
                out.insert(
                        plan.group.clone(),
                        Err((
                            GroupFailureReason::ActiveOnTarget,
                            format!("the group has {members} active member(s) on the target; its offsets are left alone (retried next interval)"),
                        )),
                    );
            }
        }
    }
    let target = admin.clone();
    let to_commit = commits.clone();
    let results = blocking(move || target.alter_offsets(&to_commit)).await?;
    let mut synced = 0u64;
    for ((group, _), r) in commits.iter().zip(results) {
        match r {
            Ok(()) => {
                synced += 1;
                out.insert(group.clone(), Ok(true));
            }
            Err(e) => {
                let reason = classify_commit_error(&e);
                if reason == GroupFailureReason::ActiveOnTarget {
                    runner_refused(metrics, name);
                } else {
                    metrics.commit_failures.with_label_values(&[name]).inc();
                }
                out.insert(group.clone(), Err((reason, e.to_string())));
            }
        }
    }
    metrics
        .groups_synced
        .with_label_values(&[name])
        .inc_by(synced);
    Ok(out)
}

/// Per group: `Ok(synced)`, or the refusal or failure.
type SyncResults = HashMap<String, Result<bool, (GroupFailureReason, String)>>;

/// One cycle's plans for the group sync.
pub(super) struct SyncOffer {
    pub(super) plans: Vec<GroupPlan>,
    /// Groups whose checkpoints were not written this cycle: not synced from these plans.
    pub(super) skip: BTreeSet<String>,
}

/// Where cycles leave their plans for the group sync (a [`Mailbox`]).
#[derive(Default)]
pub(super) struct Handoff {
    mailbox: std::sync::Mutex<Mailbox<SyncOffer>>,
    arrived: tokio::sync::Notify,
}

impl Handoff {
    fn lock(&self) -> std::sync::MutexGuard<'_, Mailbox<SyncOffer>> {
        self.mailbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns whether unsynced plans were superseded.
    pub(super) fn offer(&self, checkpoint: &str, offer: SyncOffer) -> bool {
        let superseded = self.lock().offer(checkpoint, offer);
        // Stores a permit when the sync is busy, so it looks again when done.
        self.arrived.notify_one();
        superseded
    }

    pub(super) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(keep);
    }

    async fn next(&self) -> (String, SyncOffer) {
        loop {
            if let Some(next) = self.lock().take() {
                return next;
            }
            self.arrived.notified().await;
        }
    }
}

/// The group sync, beside the cycles: syncs the newest plans of each checkpoint, one
/// checkpoint at a time, and reports per group in `state`. Never returns.
///
/// Who reports what: a group's `NoOffsetSync` failure comes from the cycle, its
/// `ActiveOnTarget` and `CommitFailed` failures and its `synced` flag from the sync
/// ([`sync_owned`]); each side replaces only its own ([`merge_owned_failures`]).
pub(super) async fn run_group_syncs(
    flow_name: &str,
    target: Arc<GroupAdmin>,
    handoff: &Handoff,
    metrics: &CheckpointMetrics,
    state: &watch::Sender<RunnerState>,
) -> Infallible {
    loop {
        let (name, offer) = handoff.next().await;
        let t0 = Instant::now();
        let result = sync_groups(&target, metrics, &name, &offer.plans, &offer.skip).await;
        let took = t0.elapsed();
        metrics
            .group_sync_seconds
            .with_label_values(&[&name])
            .set(took.as_secs_f64());
        tracing::debug!(checkpoint = %name, groups = offer.plans.len(), group_sync_ms = took.as_millis() as u64, "group sync");
        if let Err(e) = &result {
            tracing::warn!(flow = %flow_name, checkpoint = %name, reason = e.reason(), error = %e, "group sync failed");
        }
        let now = Timestamp::now();
        state.send_modify(|s| {
            // A checkpoint removed meanwhile is not brought back.
            let Some(st) = s.specs.get_mut(&name) else {
                return;
            };
            st.group_syncs += 1;
            st.last_group_sync = Some(now);
            st.last_group_sync_duration = Some(took);
            let results = match &result {
                Ok(r) => {
                    st.last_sync_error = None;
                    r
                }
                Err(e) => {
                    st.last_sync_error = Some(e.to_string());
                    return;
                }
            };
            for plan in &offer.plans {
                let Some(g) = st.groups.get_mut(&plan.group) else {
                    continue;
                };
                let failures = match results.get(&plan.group) {
                    Some(Ok(synced)) => {
                        g.synced = *synced;
                        vec![]
                    }
                    Some(Err(f)) => {
                        g.synced = false;
                        vec![f.clone()]
                    }
                    None => {
                        g.synced = false;
                        vec![]
                    }
                };
                g.failures = merge_owned_failures(&g.failures, failures, sync_owned, now);
            }
        });
    }
}

fn runner_refused(metrics: &CheckpointMetrics, name: &str) {
    metrics.groups_refused.with_label_values(&[name]).inc();
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
