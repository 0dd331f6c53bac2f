//! Which OffsetCheckpoints the runner runs and when: the loop of cycles, the specs taken
//! live, the source's groups listed and assigned, each cycle's outcome recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use jiff::Timestamp;

use crate::api::OffsetCheckpoint;
use crate::kafka::secrets::FlowSecrets;
use crate::worker::error::Error;

use super::super::group_sync::{Handoff, SyncOffer};
use super::super::groups::{assign_groups, GroupSelection};
use super::startup::Worker;
use super::{selection, CheckpointRunner, Ended};

impl CheckpointRunner {
    /// The cycles of the OffsetCheckpoints ([`CheckpointRunner`]), handing each cycle's plans to the
    /// group sync.
    pub(super) async fn run_cycles<F: Future<Output = ()>>(
        &self,
        mut worker: Worker,
        shutdown: &mut std::pin::Pin<&mut F>,
        secrets: &mut Option<FlowSecrets>,
        handoff: &Handoff,
    ) -> anyhow::Result<Ended> {
        let mut shutdown = shutdown.as_mut();
        let mut specs_rx = self.specs_tx.subscribe();
        // Set when the wait below saw a change: `changed()` marks the value seen, so
        // `has_changed()` alone would miss every change that arrives while the runner waits.
        let mut specs_changed = true;
        let mut c = Cycles::default();
        loop {
            if std::mem::take(&mut specs_changed) || specs_rx.has_changed().unwrap_or(false) {
                let specs = specs_rx.borrow_and_update().clone();
                self.take_specs(&mut c, specs, handoff);
                if c.active.is_empty() {
                    return Ok(Ended::Unused);
                }
            }
            let refresh = refresh_interval(c.active.values());
            if c.groups_listed.is_none_or(|t| t.elapsed() >= refresh) {
                self.list_groups(&worker, &mut c, refresh).await;
            }
            for name in due(&c.schedule, Instant::now()) {
                let Some(cp) = c.active.get(&name) else {
                    continue;
                };
                let started = Instant::now();
                let groups: Vec<String> = c
                    .assignment
                    .get(&name)
                    .map(|g| g.iter().cloned().collect())
                    .unwrap_or_default();
                // A cycle stopped half-way is harmless: written checkpoints are reloaded
                // at the next start, and commits never move a group backwards.
                let mut offer = None;
                // Secrets that change mid-cycle cut it short too: against a cluster that
                // refuses the old ones, each of its calls would wait out its timeout first.
                let outcome = tokio::select! {
                    _ = &mut shutdown => return Ok(Ended::Shutdown),
                    _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                    r = worker.cycle(self, &name, cp, &groups, &mut offer) => r,
                };
                let interval = secs(cp.spec.interval_seconds);
                c.schedule.insert(name.clone(), started + interval);
                self.record_cycle(&worker, &name, started.elapsed(), outcome, offer, handoff);
            }
            let wake = next_wake(&c.schedule, c.groups_listed, refresh, Instant::now());
            tokio::select! {
                _ = &mut shutdown => return Ok(Ended::Shutdown),
                _ = crate::kafka::secrets::rotated(secrets) => return Ok(Ended::Rotated),
                _ = tokio::time::sleep_until(wake.into()) => {}
                r = specs_rx.changed() => {
                    if r.is_err() {
                        // Every sender is gone, which cannot happen while `self` holds one.
                        return Ok(Ended::Shutdown);
                    }
                    specs_changed = true;
                }
            }
        }
    }

    /// Takes a new list of OffsetCheckpoints: those gone lose their metrics, schedule and
    /// waiting plans; new ones are due at once; groups are listed again for the selections.
    fn take_specs(&self, c: &mut Cycles, specs: Vec<OffsetCheckpoint>, handoff: &Handoff) {
        let (next, selections) = self.accept_specs(specs);
        for gone in c.active.keys().filter(|n| !next.contains_key(*n)) {
            self.metrics.forget_checkpoint(gone);
        }
        reschedule(&mut c.schedule, next.keys(), Instant::now());
        for name in next.keys() {
            self.metrics.init_checkpoint(name);
        }
        self.state_tx.send_modify(|s| {
            s.specs.retain(|n, _| next.contains_key(n));
            for (n, cp) in &next {
                let st = s.specs.entry(n.clone()).or_default();
                st.interval_seconds = cp.spec.interval_seconds;
                st.generation = cp.metadata.generation;
            }
        });
        handoff.retain(|n| next.contains_key(n));
        c.active = next;
        c.selections = selections;
        c.groups_listed = None; // new selections see new groups at once
    }

    /// Lists the source's groups and assigns them to the OffsetCheckpoints' selections; a
    /// failed listing is retried a second later, at the next due cycle.
    async fn list_groups(&self, worker: &Worker, c: &mut Cycles, refresh: Duration) {
        match worker.list_source_groups().await {
            Ok(groups) => {
                let next = assign_groups(&c.selections, groups.iter().map(String::as_str));
                if next != c.assignment {
                    for (name, matched) in &next {
                        tracing::info!(flow = %self.flow_name, checkpoint = %name, listed = groups.len(), matched = matched.len(), groups = ?matched.iter().take(10).collect::<Vec<_>>(), "consumer groups selected");
                    }
                }
                c.assignment = next;
                c.groups_listed = Some(Instant::now());
            }
            Err(e) => {
                tracing::warn!(flow = %self.flow_name, error = %e, "listing source groups failed");
                // Retry at the next due cycle rather than spinning.
                c.groups_listed = Some(Instant::now() - refresh + secs(1));
            }
        }
    }

    /// A finished cycle in the metrics and the state; its plans go to the group sync.
    fn record_cycle(
        &self,
        worker: &Worker,
        name: &str,
        took: Duration,
        outcome: Result<(), Error>,
        offer: Option<SyncOffer>,
        handoff: &Handoff,
    ) {
        self.metrics
            .cycle_seconds
            .with_label_values(&[name])
            .set(took.as_secs_f64());
        if let Err(e) = &outcome {
            self.metrics.cycle_errors.with_label_values(&[name]).inc();
            tracing::warn!(flow = %self.flow_name, checkpoint = %name, reason = e.reason(), error = %e, "checkpoint cycle failed");
        }
        let at = Timestamp::now();
        self.state_tx.send_modify(|s| {
            let st = s.specs.entry(name.to_string()).or_default();
            st.cycles += 1;
            st.last_cycle = Some(at);
            st.last_cycle_duration = Some(took);
            st.last_error = outcome.err().map(|e| e.to_string());
        });
        worker.publish_store_state(&self.state_tx);
        if let Some(offer) = offer {
            if handoff.offer(name, offer) {
                self.metrics
                    .group_syncs_superseded
                    .with_label_values(&[name])
                    .inc();
            }
        }
    }

    /// Keeps this flow's valid OffsetCheckpoints, by name. Invalid group patterns are
    /// reported in the checkpoint's state instead of stopping the others.
    fn accept_specs(
        &self,
        specs: Vec<OffsetCheckpoint>,
    ) -> (
        BTreeMap<String, OffsetCheckpoint>,
        Vec<(String, GroupSelection)>,
    ) {
        let mut out = BTreeMap::new();
        let mut selections = Vec::new();
        for cp in specs {
            let name = cp.metadata.name.clone().unwrap_or_default();
            let Some(selection) = selection(&self.flow_name, &cp) else {
                tracing::warn!(checkpoint = %name, flow_ref = %cp.spec.flow_ref.name, flow = %self.flow_name, "OffsetCheckpoint names another flow; ignored");
                continue;
            };
            match selection {
                Ok(sel) => {
                    selections.push((name.clone(), sel));
                    out.insert(name, cp);
                }
                Err(e) => {
                    tracing::warn!(checkpoint = %name, error = %e, "invalid group selection; not run");
                    self.state_tx.send_modify(|s| {
                        let st = s.specs.entry(name.clone()).or_default();
                        st.last_error = Some(e.to_string());
                    });
                }
            }
        }
        (out, selections)
    }
}

fn secs(s: i32) -> Duration {
    Duration::from_secs(u64::try_from(s.max(1)).unwrap_or(1))
}

/// What the cycles keep from one turn to the next.
#[derive(Default)]
struct Cycles {
    /// The OffsetCheckpoints run, by name.
    active: BTreeMap<String, OffsetCheckpoint>,
    selections: Vec<(String, GroupSelection)>,
    /// When each one's next cycle is due.
    schedule: BTreeMap<String, Instant>,
    /// When the source's groups were last listed (`None`: list them now).
    groups_listed: Option<Instant>,
    /// The groups each one checkpoints.
    assignment: BTreeMap<String, BTreeSet<String>>,
}

/// How often the source's groups are listed: the smallest `groups.refreshIntervalSeconds`
/// of the OffsetCheckpoints run (30 s without one).
fn refresh_interval<'a>(active: impl Iterator<Item = &'a OffsetCheckpoint>) -> Duration {
    active
        .map(|c| secs(c.spec.groups.refresh_interval_seconds))
        .min()
        .unwrap_or(Duration::from_secs(30))
}

/// Keeps the schedule of the checkpoints still run; those new are due at `now`.
fn reschedule<'a>(
    schedule: &mut BTreeMap<String, Instant>,
    names: impl Iterator<Item = &'a String> + Clone,
    now: Instant,
) {
    let keep: BTreeSet<&String> = names.clone().collect();
    schedule.retain(|n, _| keep.contains(n));
    for name in names {
        schedule.entry(name.clone()).or_insert(now);
    }
}

/// The checkpoints whose cycle is due at `now`, by name.
fn due(schedule: &BTreeMap<String, Instant>, now: Instant) -> Vec<String> {
    schedule
        .iter()
        .filter(|(_, t)| **t <= now)
        .map(|(n, _)| n.clone())
        .collect()
}

/// When the cycles wake next: the first cycle due or the next group listing, whichever is
/// first (a minute after `now` when there is neither).
fn next_wake(
    schedule: &BTreeMap<String, Instant>,
    groups_listed: Option<Instant>,
    refresh: Duration,
    now: Instant,
) -> Instant {
    let next_due = schedule.values().min().copied();
    let next_refresh = groups_listed.map(|t| t + refresh);
    [next_due, next_refresh]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{cp, names};
    use super::*;

    #[test]
    fn schedule_table() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut schedule: BTreeMap<String, Instant> =
            [("a".to_string(), at(5)), ("b".to_string(), at(10))].into();
        let next = names(&["b", "c"]);
        reschedule(&mut schedule, next.iter(), at(1));
        assert_eq!(
            schedule,
            [("b".to_string(), at(10)), ("c".to_string(), at(1))].into(),
            "a gone, b keeps its time, c due at once"
        );
        assert_eq!(due(&schedule, at(0)), Vec::<String>::new());
        assert_eq!(due(&schedule, at(1)), names(&["c"]));
        assert_eq!(due(&schedule, at(10)), names(&["b", "c"]));

        let refresh = Duration::from_secs(30);
        let cases = [
            ("the first due cycle", Some(at(0)), at(1)),
            ("never listed", None, at(1)),
            (
                "a listing due before the cycles",
                Some(at(0) - refresh),
                at(0),
            ),
        ];
        for (name, listed, want) in cases {
            assert_eq!(next_wake(&schedule, listed, refresh, at(0)), want, "{name}");
        }
        assert_eq!(
            next_wake(&BTreeMap::new(), None, refresh, at(0)),
            at(60),
            "nothing scheduled: a minute"
        );
    }

    #[test]
    fn refresh_interval_is_the_smallest() {
        let with = |s: i32| {
            let mut c = cp("f", ".*");
            c.spec.groups.refresh_interval_seconds = s;
            c
        };
        let cases = [
            (vec![], 30),
            (vec![with(120)], 120),
            (vec![with(120), with(15), with(60)], 15),
            (vec![with(0)], 1),
        ];
        for (specs, want) in cases {
            assert_eq!(
                refresh_interval(specs.iter()),
                Duration::from_secs(want),
                "{specs:?}"
            );
        }
    }
}
