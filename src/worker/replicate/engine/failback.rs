//! Failing back (`spec.source.startFrom.afterFailover`): the positions the failover recorded,
//! read (and the divergence measured) before anything is written.

use std::collections::HashSet;
use std::sync::Arc;

use tracing::info;

use super::Engine;
use crate::worker::error::Error as WorkerError;
use crate::worker::replicate::failback::starts;
use crate::worker::replicate::failback_io::{FailbackIo, Prepared};

impl Engine {
    /// Reads where failing back starts, once. Until the failover's report exists and is
    /// Done (and worker 0 has measured what diverged), the worker waits and says why:
    /// starting without it would copy the whole history back or skip records.
    pub(super) async fn load_failback(&mut self) -> Result<bool, super::EngineError> {
        let start = self
            .spec
            .source
            .start_from
            .as_ref()
            .and_then(|s| s.after_failover.clone());
        let Some(start) = start else {
            self.failback_loaded = true;
            return Ok(true);
        };
        let io = FailbackIo {
            source: self.clients.source_props.to_client_config(),
            source_alias: self.spec.source.alias.clone(),
            target: self.clients.target_props.to_client_config(),
            namespace: self.settings.namespace.clone(),
            flow: self.settings.flow_name.clone(),
            start,
            filter: self.filter.clone(),
            store_replication_factor: self.spec.internal_topics.replication_factor,
            replication_factor: self.spec.target.replication_factor,
            worker_index: self.settings.worker_index,
        };
        let replicated: HashSet<(String, i32)> = self.discovery.stored.keys().cloned().collect();
        match io.prepare(replicated).await {
            Ok(Prepared::Ready(report)) => {
                info!(flow = %report.flow, id = %report.id, partitions = report.partitions_started, diverged = report.diverged_records, "failing back from the failover's positions");
                self.discovery.after_failover = Arc::new(starts(&report));
                if self.settings.worker_index == 0 {
                    self.failback = Some(report);
                }
                self.failback_loaded = true;
                Ok(true)
            }
            Ok(Prepared::Wait(why)) => {
                // The spec names a failover that is not usable (yet).
                let why = WorkerError::Spec(format!("spec.source.startFrom.afterFailover: {why}"));
                self.start_problem(why.to_string(), &why);
                Ok(false)
            }
            Err(e) => {
                self.start_problem(format!("spec.source.startFrom.afterFailover: {e}"), &e);
                Ok(false)
            }
        }
    }
}
