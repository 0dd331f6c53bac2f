//! What the engine tells the outside: readiness and the status snapshot.

use std::time::Instant;

use super::super::report::{self, Lifecycle};
use super::Engine;

impl Engine {
    pub(super) fn update_readiness(&mut self) {
        let now = Instant::now();
        self.waiting = report::waiting_since(
            self.waiting,
            self.pipeline.pending_work(),
            self.pipeline.last_ack(),
            now,
        );
        let stall_after = self.settings.tuning.stall_after;
        self.stalled = self
            .waiting
            .map(|t| now - t)
            .filter(|d| *d >= stall_after)
            .map(|d| {
                format!(
                    "target cluster {} has acknowledged nothing for {} s while records wait",
                    self.spec.target.alias,
                    d.as_secs()
                )
            });
        let problem = self.out.health.problems().into_iter().next();
        report::update_readiness(
            &self.out.readiness,
            &self.out.metrics,
            self.fatal.as_deref(),
            self.started,
            problem.as_ref().map(|p| p.message.as_str()),
            self.stalled.as_deref(),
        );
    }

    /// Builds and publishes the status snapshot.
    pub(super) fn publish(&self) {
        report::update_gauges(&self.table, &self.out.metrics);
        let not_ready = self.out.readiness.not_ready_reason();
        let snap = report::snapshot(
            &self.table,
            &Lifecycle {
                namespace: &self.settings.namespace,
                flow: &self.settings.flow_name,
                index: self.settings.worker_index,
                count: self.settings.worker_count,
                delivery: self.spec.delivery,
                fatal: self.fatal.as_deref(),
                started: self.started,
                paused: self.spec.paused,
                not_ready: not_ready.as_deref(),
                stalled: self.stalled.as_deref(),
                last_applied_reset: self.resets.last_applied.as_ref(),
                unwritable: &self.unwritable,
            },
        );
        self.out.sink.publish(&snap);
    }
}
