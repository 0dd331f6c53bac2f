//! Where a worker process reports, and what it adds to the engine's snapshots: the
//! clusters' connection health, the topic ACL sync and the heartbeat latency.
//! [`WithExtras`] adds them to every snapshot on its way to `/status` and the status entry,
//! so the engine need not know about them; a [`WorkerSink`] also takes the checkpoint side's
//! reports ([`CheckpointReportSource`]).

use std::sync::Arc;

use tokio::sync::watch;

use crate::api::{OffsetCheckpoint, ReplicationLatency, TopicAclSync, WorkerCheckpointReport};
use crate::kafka::health::FlowHealth;
use crate::worker::checkpoint::status::{worker_reports, RunnerState};
use crate::worker::replicate::{StatusSink, WorkerSnapshot};

/// The sources of the extra reports.
#[derive(Clone)]
pub struct Extras {
    pub health: FlowHealth,
    pub topic_acls: watch::Receiver<Option<TopicAclSync>>,
    /// The heartbeat latency (worker 0, `worker::heartbeats`).
    pub replication_latency: watch::Receiver<Option<ReplicationLatency>>,
    /// The continuous integrity audit (`worker::audit`).
    pub audit: watch::Receiver<Option<crate::api::AuditReport>>,
    /// The failover (worker 0, `worker::failover`).
    pub failover: watch::Receiver<Option<crate::api::FailoverReport>>,
}

impl Extras {
    /// Adds the current reports to `snap`. A connection problem becomes the worker's
    /// message when the engine has none (e.g. while it is starting).
    pub fn apply(&self, snap: &mut WorkerSnapshot) {
        snap.connection_problems = self.health.problems();
        if snap.message.is_none() {
            snap.message = snap.connection_problems.first().map(|p| p.message.clone());
        }
        // A sync with nothing to copy and no error says nothing (the metrics still count).
        snap.topic_acls = self
            .topic_acls
            .borrow()
            .clone()
            .filter(|t| t.synced + t.created_by_flow + t.skipped > 0 || t.last_error.is_some());
        snap.replication_latency = self.replication_latency.borrow().clone();
        snap.audit = self.audit.borrow().clone();
        snap.failover = self.failover.borrow().clone();
    }
}

/// A sink that adds [`Extras`] to each snapshot before passing it on.
pub struct WithExtras {
    pub inner: Arc<dyn StatusSink>,
    pub extras: Extras,
}

impl StatusSink for WithExtras {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        let mut snap = snapshot.clone();
        self.extras.apply(&mut snap);
        self.inner.publish(&snap);
    }
}

/// A sink of the worker process: the engine's snapshots and, on worker 0 once its
/// checkpoint runner runs, where the checkpoint side's reports can be read.
pub trait WorkerSink: StatusSink {
    /// Where the checkpoint side's reports can be read (worker 0 only); sinks that write
    /// `status.workers[].checkpoints` keep it. Called once, before the first snapshot.
    fn attach_checkpoints(&self, _source: CheckpointReportSource) {}
}

impl WorkerSink for watch::Sender<WorkerSnapshot> {}

/// Publishes to several sinks.
pub struct Fanout(pub Vec<Arc<dyn StatusSink>>);

impl StatusSink for Fanout {
    fn publish(&self, snapshot: &WorkerSnapshot) {
        for s in &self.0 {
            s.publish(snapshot);
        }
    }
}

/// The checkpoint side's state, for `/status` and the Kubernetes status entry.
pub type CheckpointReportSource = watch::Receiver<CheckpointReport>;

/// The runner's state and the OffsetCheckpoints it serves, once it runs.
pub type CheckpointReport = Option<(
    watch::Receiver<RunnerState>,
    watch::Receiver<Vec<OffsetCheckpoint>>,
)>;

/// What the checkpoint runner reports, per OffsetCheckpoint, now.
pub fn checkpoint_reports(source: &CheckpointReportSource) -> Vec<WorkerCheckpointReport> {
    let Some((state, cps)) = source.borrow().clone() else {
        return Vec::new();
    };
    let state = state.borrow().clone();
    let cps = cps.borrow().clone();
    worker_reports(&state, &cps, jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Delivery;
    use rdkafka::types::RDKafkaErrorCode;

    #[test]
    fn extras_are_added_to_snapshots() {
        let health = FlowHealth::new("dc1", "dc2");
        let (acl_tx, acl_rx) = watch::channel(None);
        let (latency_tx, latency_rx) = watch::channel(None);
        let (tx, rx) = watch::channel(WorkerSnapshot::starting(
            "ns",
            "f",
            0,
            1,
            Delivery::AtLeastOnce,
        ));
        let sink = WithExtras {
            inner: Arc::new(tx),
            extras: Extras {
                health: health.clone(),
                topic_acls: acl_rx,
                replication_latency: latency_rx,
                audit: watch::channel(None).1,
                failover: watch::channel(None).1,
            },
        };
        let ctx = health.target.context();
        ctx.slot().unwrap().on_error(
            RDKafkaErrorCode::Authentication,
            "sasl_ssl://h:1/bootstrap: SASL authentication error: bad",
            jiff::Timestamp::now(),
        );
        latency_tx.send_replace(Some(ReplicationLatency {
            last_millis: Some(120),
            ..Default::default()
        }));
        acl_tx.send_replace(Some(TopicAclSync {
            synced: 2,
            ..Default::default()
        }));
        sink.publish(&WorkerSnapshot::starting(
            "ns",
            "f",
            0,
            1,
            Delivery::AtLeastOnce,
        ));
        let got = rx.borrow().clone();
        assert_eq!(got.connection_problems.len(), 1);
        assert!(
            got.message
                .as_deref()
                .unwrap()
                .starts_with("target cluster dc2: authentication failed"),
            "{:?}",
            got.message
        );
        assert_eq!(got.topic_acls.as_ref().map(|t| t.synced), Some(2));
        let entry = got.to_worker_status(Some(1));
        assert_eq!(entry.connection_problems, got.connection_problems);
        assert_eq!(entry.topic_acls, got.topic_acls);
        assert_eq!(
            entry.replication_latency.and_then(|l| l.last_millis),
            Some(120)
        );
        let json = serde_json::to_string(&got).unwrap();
        assert!(json.contains("\"connectionProblems\""), "{json}");
        drop(ctx);
    }
}
