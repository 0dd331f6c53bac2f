//! The engine's side of discovery: start a refresh beside the loop, apply its plan; and
//! reconnecting when a cluster's mounted Secrets change.

use std::future::Future;
use std::time::Instant;

use rdkafka::consumer::Consumer;
use tracing::{debug, info, warn};

use super::super::clients::Clients;
use super::super::discovery::{self, apply_plan, Discovery, Owner, RefreshPlan};
use super::super::pipeline::{Event, Job};
use super::super::syncs::fresh_epoch;
use super::super::validate::TopicIds;
use super::{Engine, EngineError};

impl Engine {
    /// A cluster's Secrets changed: finish what is open and in flight with the current
    /// clients (bounded by the shutdown grace; what does not finish is read again), then
    /// replace every client with one built from the new Secrets and re-assign from the
    /// committed positions. New Secrets that do not load (a half-made update) keep the
    /// current clients until the next change. `Ok(false)`: shutdown came first.
    pub(super) async fn rotate<F: Future<Output = ()>>(
        &mut self,
        side: &'static str,
        shutdown: &mut std::pin::Pin<&mut F>,
    ) -> Result<bool, EngineError> {
        let clients = match Clients::connect(&self.settings, &self.spec, &self.out.health) {
            Ok(c) => c,
            Err(e) => {
                warn!(
                    cluster = side,
                    "the changed Secrets do not load; keeping the current clients: {e}"
                );
                return Ok(true);
            }
        };
        info!(
            cluster = side,
            "mounted Secrets changed: reconnecting with them"
        );
        if let Some(h) = self.refreshing.take() {
            h.abort();
        }
        let grace = self.settings.tuning.shutdown_grace;
        tokio::select! {
            biased;
            _ = shutdown.as_mut() => {
                self.shutdown_gracefully(false).await;
                return Ok(false);
            }
            // It does not fail (it logs).
            _ = self.pipeline.run(Job::Final { grace }, &mut self.table) => {}
        }
        self.on(Event::SecretsRotated);
        let _ = self.clients.consumer.unassign();
        let stored = self.discovery.stored.clone();
        self.topic_ids = TopicIds::new(
            clients.source_admin.clone(),
            &self.spec.source.alias,
            self.settings.tuning.validation_timeout,
            self.spec.offset_validation.enabled,
        );
        self.discovery = Discovery::new(
            &clients,
            &self.settings,
            &self.spec,
            self.topic_ids.clone(),
            &self.out.metrics,
        );
        self.discovery.stored = stored;
        self.clients = clients;
        self.on(Event::AssignmentChanged);
        self.next_refresh = Instant::now();
        Ok(true)
    }

    /// The table as a refresh starts from it.
    pub(super) fn refresh_input(&mut self) -> discovery::RefreshInput {
        self.next_refresh = Instant::now() + self.refresh_interval();
        discovery::snapshot(&mut self.table, &self.filter, &self.spec)
    }

    /// Starts a refresh beside the loop.
    pub(super) fn start_refresh(&mut self) {
        let input = self.refresh_input();
        let d = self.discovery.clone();
        self.refreshing = Some(tokio::spawn(async move { d.refresh(input).await }));
    }

    pub(super) fn owner(&self) -> Owner {
        self.discovery.owner
    }

    /// Whether applying `plan` would change the assignment (and so drop the open batch).
    pub(super) fn would_reassign(&self, plan: &RefreshPlan) -> bool {
        let a = apply_plan(
            &mut self.table.clone(),
            plan,
            self.owner(),
            self.spec.paused,
            || 0,
        );
        a.reassign || !a.detections.is_empty()
    }

    /// Applies a refresh: parks what vanished, takes and starts new partitions, records
    /// watermarks and validation results.
    pub(super) fn apply_refresh(&mut self, plan: RefreshPlan) {
        let paused = self.spec.paused;
        let owner = self.owner();
        let a = apply_plan(&mut self.table, &plan, owner, paused, fresh_epoch);
        if let Some(u) = &plan.unwritable {
            let now: Vec<String> = u.values().cloned().collect();
            if now != self.unwritable {
                for why in now.iter().filter(|w| !self.unwritable.contains(w)) {
                    warn!("{why}");
                }
                self.unwritable = now;
            }
            self.out
                .metrics
                .topics_unwritable
                .set(self.unwritable.len() as i64);
        }
        discovery::log_applied(&a, &self.table);
        if let Some(t) = &mut self.takeover {
            for (tp, start) in &a.started {
                t.started(&tp.topic, tp.partition, start);
            }
        }
        for tp in &a.gone {
            self.out.metrics.forget_partition(&tp.topic, tp.partition);
        }
        for d in a.detections {
            self.report_detection(d);
        }
        if a.reassign {
            self.on(Event::AssignmentChanged);
        }
        debug!(
            elapsed_ms = plan.elapsed.as_millis() as u64,
            owned = self.table.len(),
            "topics refreshed"
        );
        self.update_readiness();
        self.publish();
    }
}
