//! Start-up: connect to both clusters, create and reload the checkpoints topic (the
//! checkpoints in force) and read the offset syncs (MM2's first after a handover) to their
//! end; the connected state the cycles work on.

use std::sync::Arc;

use rdkafka::{ClientConfig, Message as _};
use tokio::sync::watch;

use crate::kafka::admin::GroupAdmin;
use crate::kafka::producer::EventProducer;
use crate::kafka::tail::TopicTail;
use crate::kafka::topics::ensure_store_topic;
use crate::kafka::wire;
use crate::kafka::Error as KafkaError;
use crate::worker::error::Error;
use crate::worker::topic_filter::TopicFilter;

use super::super::failback::FailingBack;
use super::super::io;
use super::super::metrics::CheckpointMetrics;
use super::super::status::RunnerState;
use super::super::store::{SyncStore, SYNC_SEQUENCE_HEADER};
use super::super::translate::{reload_checkpoints, InForce};
use super::{
    checkpoints_topic, mm2_offset_syncs_topic, offset_syncs_topic, CheckpointRunner,
    REQUEST_TIMEOUT, STARTUP_READ_TIMEOUT,
};

impl CheckpointRunner {
    /// Connects, creates and reloads the checkpoints topic, and reads the offset syncs to
    /// their end.
    pub(super) async fn start(&self) -> Result<Worker, Error> {
        let source = Arc::new(GroupAdmin::new(
            &self.source,
            &format!("source cluster {}", self.flow.source.alias),
            REQUEST_TIMEOUT,
        )?);
        let target = Arc::new(GroupAdmin::new(
            &self.target,
            &format!("target cluster {}", self.flow.target.alias),
            REQUEST_TIMEOUT,
        )?);
        let checkpoints_topic = checkpoints_topic(&self.flow);
        let rf = self.flow.internal_topics.replication_factor;
        if ensure_store_topic(&self.target, &checkpoints_topic, rf, REQUEST_TIMEOUT).await? {
            tracing::info!(topic = %checkpoints_topic, "created the checkpoints topic");
        }
        let in_force = reload(&self.target, &checkpoints_topic).await?;
        let syncs_topic = offset_syncs_topic(&self.flow);
        let mut tail = TopicTail::new(
            &self.target,
            &syncs_topic,
            &format!("target cluster {}", self.flow.target.alias),
        )?;
        let mm2 = match mm2_offset_syncs_topic(&self.flow) {
            Some(t) => Some(TopicTail::new(
                &self.source,
                &t,
                &format!("source cluster {}", self.flow.source.alias),
            )?),
            None => None,
        };
        let (tail, store, read) = tokio::task::spawn_blocking(move || {
            let mut store = SyncStore::new();
            // MM2's syncs first: they precede the flow's in every partition (MM2 stopped
            // where the flow started). Without them only groups past the handover
            // translate, so a failure to read them is logged, not fatal.
            if let Some(mut mm2) = mm2 {
                match mm2.catch_up(STARTUP_READ_TIMEOUT, |m| apply_sync(&mut store, m)) {
                    Ok(n) => tracing::info!(syncs_read = n, "MirrorMaker 2 offset syncs read"),
                    Err(e) => tracing::warn!(error = %e, "MirrorMaker 2 offset syncs not read: groups behind the handover do not translate"),
                }
            }
            let read = tail.catch_up(STARTUP_READ_TIMEOUT, |m| apply_sync(&mut store, m))?;
            Ok::<_, KafkaError>((tail, store, read))
        })
        .await
        .map_err(|e| KafkaError::Task(e.to_string()).context("offset syncs reader failed"))??;
        tracing::info!(
            flow = %self.flow_name,
            syncs_read = read,
            partitions = store.partitions(),
            checkpoints_reloaded = in_force.len(),
            "checkpoint runner started"
        );
        Ok(Worker {
            source,
            target,
            producer: io::checkpoint_producer(&self.target)?,
            checkpoints_topic,
            tail: Some(tail),
            store,
            in_force,
            filter: TopicFilter::new(&self.flow)?,
            metrics: self.metrics.clone(),
            failback: self.failback.clone().map(FailingBack::new),
        })
    }
}

/// Reads the checkpoints topic to its end: the checkpoints in force.
async fn reload(target: &ClientConfig, topic: &str) -> Result<InForce, KafkaError> {
    let mut tail = TopicTail::new(target, topic, "target cluster")?;
    tokio::task::spawn_blocking(move || {
        let mut records = Vec::new();
        let mut bad = 0usize;
        tail.catch_up(STARTUP_READ_TIMEOUT, |m| {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                match wire::Checkpoint::decode(k, v) {
                    Ok(c) => records.push(c),
                    Err(_) => bad += 1,
                }
            }
        })?;
        if bad > 0 {
            tracing::warn!(
                skipped = bad,
                "checkpoint records that do not decode were skipped"
            );
        }
        Ok(reload_checkpoints(records))
    })
    .await
    .map_err(|e| KafkaError::Task(e.to_string()).context("checkpoints reader failed"))?
}

pub(super) fn apply_sync(store: &mut SyncStore, m: &rdkafka::message::BorrowedMessage<'_>) {
    let header = io::header(m, SYNC_SEQUENCE_HEADER);
    if let Err(e) = store.apply(m.key(), m.payload(), header) {
        tracing::warn!(partition = m.partition(), offset = m.offset(), error = %e, "offset sync does not decode; skipped");
    }
}

/// Connected state of a started runner.
pub(super) struct Worker {
    pub(super) source: Arc<GroupAdmin>,
    pub(super) target: Arc<GroupAdmin>,
    pub(super) producer: EventProducer,
    pub(super) checkpoints_topic: String,
    /// Taken while a blocking read runs.
    pub(super) tail: Option<TopicTail>,
    pub(super) store: SyncStore,
    pub(super) in_force: InForce,
    pub(super) filter: TopicFilter,
    pub(super) metrics: CheckpointMetrics,
    /// With `spec.source.startFrom.afterFailover`: groups translate across the failover.
    pub(super) failback: Option<FailingBack>,
}

impl Worker {
    pub(super) fn publish_store_state(&self, state: &watch::Sender<RunnerState>) {
        self.metrics
            .sync_partitions
            .set(i64::try_from(self.store.partitions()).unwrap_or(i64::MAX));
        let (p, r, c) = (
            self.store.partitions(),
            self.store.retained(),
            self.in_force.len(),
        );
        state.send_modify(|s| {
            s.sync_partitions = p;
            s.syncs_retained = r;
            s.checkpoints_in_force = c;
        });
    }
}
