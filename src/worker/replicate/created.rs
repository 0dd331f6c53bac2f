//! Which target topics this flow created: the record that lets the config sync (and the
//! replication-factor check) touch only its own topics, never one that was on the target
//! before.
//!
//! Kafka topics carry no owner (and brokers refuse unknown topic configs, so none can be
//! tagged), so the flow remembers them, as the ACL sync remembers its bindings: in a
//! compacted topic on the target, `mirrorflow-topics.<namespace>.<flow>.internal`, key the
//! target topic name, value `{"topicId": ...}` (the id the topic got, KIP-516). The worker
//! whose CreateTopics succeeded records the topic *after* creating it: a crash in between
//! leaves a topic the flow created but does not know (its configs are then only set at
//! creation: the safe side), never a record of someone else's topic. With the id, a topic
//! deleted and recreated by someone else is not taken for the flow's. Each refresh reads
//! what other workers recorded since (incrementally).

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};

use crate::kafka::error::{Context as _, Error as KafkaError};
use crate::kafka::tail::TopicTail;
use crate::worker::error::Error;

/// The store topic of a flow (on the target).
pub fn created_topics_store(namespace: &str, flow: &str) -> String {
    format!("mirrorflow-topics.{namespace}.{flow}.internal")
}

/// The value of a store record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTopic {
    /// The topic's id when it was created; `None` on a broker without topic ids.
    pub topic_id: Option<String>,
}

/// Whether the target topic whose id is `current` now (`None`: unknown) is the one the flow
/// recorded as created (`recorded`). Pure.
pub fn created_by_flow(recorded: Option<&CreatedTopic>, current: Option<&str>) -> bool {
    match recorded {
        None => false,
        // Created on a broker without ids: the name is all there is.
        Some(CreatedTopic { topic_id: None }) => true,
        // Recreated by someone else (or the id cannot be read now): not ours.
        Some(CreatedTopic { topic_id: Some(id) }) => current == Some(id.as_str()),
    }
}

/// The store: what it holds, and its reader and writer. Blocking.
pub struct CreatedTopics {
    topic: String,
    tail: TopicTail,
    /// The target's client config; the producer is made on the first record (most workers
    /// never write one).
    config: ClientConfig,
    producer: Option<BaseProducer>,
    timeout: Duration,
    known: BTreeMap<String, CreatedTopic>,
    /// The store topic is known to exist (so records may be written).
    pub exists: bool,
}

impl CreatedTopics {
    /// A store in `topic` with the target's client config.
    pub fn new(target: &ClientConfig, topic: &str, timeout: Duration) -> Result<Self, KafkaError> {
        Ok(Self {
            topic: topic.to_string(),
            tail: TopicTail::new(target, topic, "target cluster")?,
            config: target.clone(),
            producer: None,
            timeout,
            known: BTreeMap::new(),
            exists: false,
        })
    }

    /// Blocking: reads what was recorded since the last call (a missing store reads as
    /// empty). A record that does not decode fails the read: guessing could touch a topic
    /// that is not the flow's.
    pub fn catch_up(&mut self) -> Result<&BTreeMap<String, CreatedTopic>, Error> {
        let mut bad = None;
        let known = &mut self.known;
        let store = &self.topic;
        let read = self.tail.catch_up(self.timeout, |m| {
            if let Some(e) = super::store::apply_keyed(known, m) {
                bad = Some(format!("{store} {e}"));
            }
        })?;
        if read > 0 {
            self.exists = true;
        }
        if let Some(e) = bad {
            return Err(Error::Record(format!(
                "created-topics store record does not decode: {e}"
            )));
        }
        Ok(&self.known)
    }

    /// Blocking: records that the flow created `topic` (the store topic must exist),
    /// durably (acknowledged) before returning.
    pub fn record(&mut self, topic: &str, value: CreatedTopic) -> Result<(), Error> {
        let payload = serde_json::to_vec(&value).map_err(|e| Error::Record(e.to_string()))?;
        if self.producer.is_none() {
            let mut c = self.config.clone();
            // Not idempotent: a fresh idempotent producer waits 500 ms for its producer id
            // when no connection is up yet, and the first target topic a worker creates
            // waited for it before replication started. One record is in flight at a time
            // (each is flushed), so a retry cannot reorder; a duplicate of a keyed record
            // in a compacted store changes nothing.
            c.set("acks", "all").set("enable.idempotence", "false");
            let p = c
                .create()
                .context("target cluster: created-topics store producer")?;
            self.producer = Some(p);
        }
        let producer = self.producer.as_ref().expect("made above");
        producer
            .send(
                BaseRecord::<'_, [u8], [u8]>::to(&self.topic)
                    .key(topic.as_bytes())
                    .payload(&payload),
            )
            .map_err(|(e, _)| e)
            .context_with(|| format!("write created-topics store {}", self.topic))?;
        crate::kafka::producer::flush(producer, self.timeout)
            .context_with(|| format!("write created-topics store {}", self.topic))?;
        self.known.insert(topic.to_string(), value);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_by_flow_table() {
        let with = |id: &str| CreatedTopic {
            topic_id: Some(id.into()),
        };
        let no_ids = CreatedTopic { topic_id: None };
        let cases = [
            (None, Some("A"), false, "never recorded: someone else's"),
            (Some(with("A")), Some("A"), true, "the topic it created"),
            (
                Some(with("A")),
                Some("B"),
                false,
                "deleted and recreated since",
            ),
            (Some(with("A")), None, false, "id unknown now: wait"),
            (Some(no_ids.clone()), None, true, "broker without ids"),
            (
                Some(no_ids),
                Some("B"),
                true,
                "ids appeared after an upgrade",
            ),
        ];
        for (recorded, current, want, what) in cases {
            assert_eq!(created_by_flow(recorded.as_ref(), current), want, "{what}");
        }
    }

    #[test]
    fn store_name_is_per_namespace_and_flow_and_internal() {
        let t = created_topics_store("team-a", "orders");
        assert_eq!(t, "mirrorflow-topics.team-a.orders.internal");
        assert!(crate::kafka::naming::is_internal_topic(&t));
    }
}
