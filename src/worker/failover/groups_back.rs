//! Failing back's reads for the checkpoints ([`crate::worker::checkpoint::failback`]): the
//! failover's report (its store on the flow's source, the new primary), the flow's failback
//! outcome (its store on the target) and the failed-over flow's offset syncs
//! (`mm2-offset-syncs.<the flow's target alias>.internal` on the source: the failed-over
//! flow's source alias is the reverse flow's target alias, as `mirrorflow failback` writes
//! it).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rdkafka::{ClientConfig, Message as _};

use crate::api::{AfterFailoverStart, FailbackReport, FailoverReport, MirrorFlow};
use crate::kafka::tail::TopicTail;
use crate::kafka::wire;
use crate::worker::checkpoint::failback::{Back, LoadBack, Point};
use crate::worker::checkpoint::io;
use crate::worker::checkpoint::store::SYNC_SEQUENCE_HEADER;
use crate::worker::replicate::failback::{points, store_key};
use crate::worker::replicate::failback_io::failback_store;
use crate::worker::replicate::store::{
    blocking, failover_store, read_store, StoreError, IO_TIMEOUT,
};
use crate::worker::topic_filter::{TopicDecision, TopicFilter};

/// What a flow failing back reads for its checkpoints.
#[derive(Clone)]
struct GroupsBack {
    /// The failed-over flow's offset-syncs topic on the source.
    syncs_topic: String,
    /// The flow's failback store on the target.
    store: String,
    start: AfterFailoverStart,
    filter: TopicFilter,
}

/// The loader for `flow`'s checkpoints; `None` unless it starts after a failover.
pub fn loader(flow: &MirrorFlow) -> Option<Arc<dyn LoadBack>> {
    let spec = &flow.spec;
    let start = spec.source.start_from.as_ref()?.after_failover.clone()?;
    let namespace = flow.metadata.namespace.as_deref().unwrap_or_default();
    let name = flow.metadata.name.as_deref()?;
    Some(Arc::new(GroupsBack {
        syncs_topic: wire::offset_syncs_topic(&spec.target.alias),
        store: failback_store(namespace, name),
        start,
        filter: TopicFilter::new(spec).ok()?,
    }))
}

impl LoadBack for GroupsBack {
    fn load(
        &self,
        source: &ClientConfig,
        target: &ClientConfig,
    ) -> Pin<Box<dyn Future<Output = Option<Back>> + Send>> {
        let (me, source, target) = (self.clone(), source.clone(), target.clone());
        Box::pin(async move {
            match me.read(source, target).await {
                Ok(Some(back)) => {
                    tracing::info!(flow = %me.start.flow, id = %me.start.id, partitions = back.partitions(), syncs = back.retained(), "groups translate back across the failover");
                    Some(back)
                }
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "failing back: groups below where the flow started do not translate yet");
                    None
                }
            }
        })
    }
}

impl GroupsBack {
    async fn read(
        &self,
        source: ClientConfig,
        target: ClientConfig,
    ) -> Result<Option<Back>, StoreError> {
        let key = store_key(&self.start.flow, &self.start.id);
        let mut outcomes: std::collections::BTreeMap<String, FailbackReport> =
            read_store(target, self.store.clone(), "target cluster").await?;
        let Some(outcome) = outcomes.remove(&key) else {
            return Ok(None);
        };
        let Some((ns, name)) = self.start.flow_ref() else {
            return Ok(None);
        };
        let mut reports: std::collections::BTreeMap<String, FailoverReport> =
            read_store(source.clone(), failover_store(ns, name), "source cluster").await?;
        let Some(failover) = reports.remove(&self.start.id) else {
            return Ok(None);
        };
        let selected = |t: &str| self.filter.decide(t) == TopicDecision::Replicate;
        let Ok(points) = points(&self.start.flow, &failover, selected) else {
            return Ok(None);
        };
        let points: Vec<Point> = points
            .into_iter()
            .map(|p| Point {
                source: p.source,
                old: p.old,
                holds: p.holds,
            })
            .collect();
        let filter = self.filter.clone();
        let mut back = Back::new(&points, &outcome, |t| {
            (filter.decide(t) == TopicDecision::Replicate).then(|| filter.target_topic(t))
        });
        let topic = self.syncs_topic.clone();
        let back = blocking(move || {
            let mut tail = TopicTail::new(&source, &topic, "source cluster")?;
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
