//! What the engine tells the outside: readiness and the status snapshot.

use std::time::{Duration, Instant};

use super::super::report::{self, Lifecycle};
use super::super::status::WorkerSnapshot;
use super::{Engine, EngineOutputs};

impl Engine {
    pub(super) fn update_readiness(&mut self) {
        let now = Instant::now();
        let v = self.pipeline.view();
        self.waiting = report::waiting_since(self.waiting, v.pending_work(), v.last_ack, now);
        self.stalled = report::stall_reason(
            self.waiting,
            now,
            self.settings.tuning.stall_after,
            &self.spec.target.alias,
        );
        (self.refused, self.refused_shown) = report::refusal_now(self.refused.take(), &self.table);
        let problem = self.out.health.problems().into_iter().next();
        let fatal = self.fatal.as_ref().map(ToString::to_string);
        report::update_readiness(
            &self.out.readiness,
            &self.out.metrics,
            fatal.as_deref(),
            self.started,
            problem.as_ref().map(|p| p.message.as_str()),
            self.stalled.as_deref(),
        );
    }

    /// Builds and publishes the status snapshot.
    pub(super) fn publish(&self) {
        report::update_gauges(&self.table, &self.out.metrics);
        self.out.sink.publish(&self.snapshot());
    }

    /// The status snapshot.
    pub(super) fn snapshot(&self) -> WorkerSnapshot {
        let not_ready = self.out.readiness.not_ready_reason();
        let fatal = self.fatal.as_ref().map(ToString::to_string);
        let mut snap = report::snapshot(
            &self.table,
            &Lifecycle {
                namespace: &self.settings.namespace,
                flow: &self.settings.flow_name,
                index: self.settings.worker_index,
                count: self.settings.worker_count,
                delivery: self.spec.delivery,
                fatal: fatal.as_deref(),
                started: self.started,
                paused: self.spec.paused,
                not_ready: not_ready.as_deref(),
                stalled: self.stalled.as_deref(),
                last_applied_reset: self.resets.last_applied.as_ref(),
                unwritable: &self.unwritable,
            },
        );
        let refused = self.refused.as_ref().filter(|_| self.refused_shown);
        report::degrade_if_stalled(&mut snap, refused.map(|r| r.why.as_str()));
        report::degrade_if_stalled(&mut snap, self.pipeline.write_refused());
        snap.mirror_maker2_takeover = self.takeover.as_ref().and_then(|t| t.report());
        snap.failback = self.failback.clone();
        snap
    }
}

/// While a write holds the pipeline and the partition table (an ExactlyOnce transaction
/// waits for a silent target up to its delivery and commit timeouts): once the records it
/// carries have waited since `waiting` for `stall_after`, the worker turns not ready and
/// Degraded, saying why, from `before` (the snapshot when the write began). Returns why.
pub(super) fn report_stall_during_write(
    out: &EngineOutputs,
    target_alias: &str,
    stall_after: Duration,
    waiting: Option<Instant>,
    before: &WorkerSnapshot,
) -> Option<String> {
    let stalled = report::stall_reason(waiting, Instant::now(), stall_after, target_alias)?;
    let problem = out.health.problems().into_iter().next();
    report::update_readiness(
        &out.readiness,
        &out.metrics,
        None,
        true,
        problem.as_ref().map(|p| p.message.as_str()),
        Some(&stalled),
    );
    let mut snap = before.clone();
    report::degrade_if_stalled(&mut snap, Some(&stalled));
    out.sink.publish(&snap);
    Some(stalled)
}
