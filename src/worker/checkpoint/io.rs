//! Cluster I/O of the checkpoint side: writing checkpoint records, reading a record's
//! header. Reading topics to their end is `kafka::tail`, creating the checkpoints topic
//! `kafka::topics`.

use std::time::Duration;

use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Message};

use crate::kafka::context::LogContext;
use crate::kafka::producer::{EventProducer, Outgoing};
use crate::kafka::wire;

/// Value of header `name` of a message, if present.
pub fn header<'a>(msg: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a [u8]> {
    msg.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// A producer for checkpoint records (idempotent, acks=all).
pub fn checkpoint_producer(config: &ClientConfig) -> Result<EventProducer, String> {
    let mut config = config.clone();
    config
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    EventProducer::create(&config, LogContext::new("target"))
        .map_err(|e| format!("target cluster: create checkpoint producer: {e}"))
}

/// Writes checkpoint records to partition 0 of `topic`, pipelined. Returns, per input
/// record, whether it was acknowledged (with the error text if not).
pub async fn write_checkpoints(
    producer: &EventProducer,
    topic: &str,
    records: &[wire::Checkpoint],
    timeout: Duration,
) -> Vec<Result<(), String>> {
    type KeyValue = (Vec<u8>, Vec<u8>);
    let encoded: Vec<Result<KeyValue, String>> = records
        .iter()
        .map(|c| {
            let key = c
                .encode_key()
                .map_err(|e| format!("group {:?}: {e}", c.group))?;
            let value = c
                .encode_value()
                .map_err(|e| format!("group {:?}: {e}", c.group))?;
            Ok((key, value))
        })
        .collect();
    let outgoing: Vec<Outgoing<'_>> = encoded
        .iter()
        .flatten()
        .map(|(key, value)| Outgoing {
            topic,
            partition: Some(0),
            key: Some(key),
            value: Some(value),
            timestamp: None,
        })
        .collect();
    let mut reports = producer.send_all(&outgoing, timeout).await.into_iter();
    encoded
        .iter()
        .map(|e| {
            e.as_ref().map_err(Clone::clone)?;
            match reports.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(format!("write checkpoint to {topic}: {e}")),
                None => Err(format!("write checkpoint to {topic}: no delivery report")),
            }
        })
        .collect()
}
