//! Failing back's reads for the checkpoints: the failover's report (its store on this flow's
//! source, the new primary), this flow's failback outcome (its store on the target) and the
//! failed-over flow's offset syncs (`mm2-offset-syncs.<this flow's target alias>.internal`
//! on the source: the failed-over flow's source alias is this flow's target alias, as
//! `mirrorflow failback` writes the reverse flow). Read once, when the outcome exists; until
//! then groups translate with the flow's own syncs only (it has none before the outcome).

use rdkafka::{ClientConfig, Message as _};

use super::failback::Back;
use super::io;
use super::store::SYNC_SEQUENCE_HEADER;
use crate::api::{AfterFailoverStart, FailbackReport, FailoverReport, MirrorFlowSpec};
use crate::kafka::tail::TopicTail;
use crate::kafka::wire;
use crate::worker::replicate::failback::{points, store_key};
use crate::worker::replicate::failback_io::failback_store;
use crate::worker::replicate::store::{
    blocking, failover_store, read_store, StoreError, IO_TIMEOUT,
};
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// A flow failing back, as its checkpoints see it.
pub struct FailingBack {
    source: ClientConfig,
    target: ClientConfig,
    /// The failed-over flow's offset-syncs topic on the source.
    syncs_topic: String,
    /// This flow's failback store on the target.
    store: String,
    start: AfterFailoverStart,
    filter: TopicFilter,
    back: Option<Back>,
}

impl FailingBack {
    /// `None` unless `flow` starts after a failover.
    pub fn of(
        flow: &MirrorFlowSpec,
        namespace: &str,
        name: &str,
        source: &ClientConfig,
        target: &ClientConfig,
        filter: TopicFilter,
    ) -> Option<Self> {
        let start = flow.source.start_from.as_ref()?.after_failover.clone()?;
        Some(Self {
            source: source.clone(),
            target: target.clone(),
            syncs_topic: wire::offset_syncs_topic(&flow.target.alias),
            store: failback_store(namespace, name),
            start,
            filter,
            back: None,
        })
    }

    /// What is known, once read.
    pub fn back(&self) -> Option<&Back> {
        self.back.as_ref()
    }

    /// Reads everything once the flow's failback outcome is stored; a failed read is
    /// logged and tried again at the next cycle.
    pub async fn refresh(&mut self) {
        if self.back.is_some() {
            return;
        }
        match self.load().await {
            Ok(Some(back)) => {
                tracing::info!(flow = %self.start.flow, id = %self.start.id, partitions = back.partitions(), syncs = back.retained(), "groups translate back across the failover");
                self.back = Some(back);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "failing back: groups below where the flow started do not translate yet")
            }
        }
    }

    async fn load(&self) -> Result<Option<Back>, StoreError> {
        let key = store_key(&self.start.flow, &self.start.id);
        let mut outcomes: std::collections::BTreeMap<String, FailbackReport> =
            read_store(self.target.clone(), self.store.clone(), "target cluster").await?;
        let Some(outcome) = outcomes.remove(&key) else {
            return Ok(None);
        };
        let Some((ns, name)) = self.start.flow_ref() else {
            return Ok(None);
        };
        let mut reports: std::collections::BTreeMap<String, FailoverReport> = read_store(
            self.source.clone(),
            failover_store(ns, name),
            "source cluster",
        )
        .await?;
        let Some(failover) = reports.remove(&self.start.id) else {
            return Ok(None);
        };
        let selected = |t: &str| self.filter.decide(t) == TopicDecision::Replicate;
        let Ok(points) = points(&self.start.flow, &failover, selected) else {
            return Ok(None);
        };
        let filter = self.filter.clone();
        let mut back = Back::new(&points, &outcome, |t| {
            (filter.decide(t) == TopicDecision::Replicate).then(|| filter.target_topic(t))
        });
        let (config, topic) = (self.source.clone(), self.syncs_topic.clone());
        let back = blocking(move || {
            let mut tail = TopicTail::new(&config, &topic, "source cluster")?;
            tail.catch_up(IO_TIMEOUT, |m| {
                let header = io::header(m, SYNC_SEQUENCE_HEADER);
                if let Err(e) = back.apply_forward(m.key(), m.payload(), header) {
                    tracing::warn!(topic = %topic, partition = m.partition(), offset = m.offset(), error = %e, "offset sync does not decode; skipped");
                }
            })?;
            Ok(back)
        })
        .await?;
        Ok(Some(back))
    }
}
