//! Cluster I/O of the checkpoint side: writing checkpoint records, reading a record's
//! header. Reading topics to their end is `kafka::tail`, creating the checkpoints topic
//! `kafka::topics`.

use std::time::Duration;

use rdkafka::message::{BorrowedMessage, Headers};
use rdkafka::{ClientConfig, Message};

use crate::kafka::context::LogContext;
use crate::kafka::error::{Context, Error as KafkaError};
use crate::kafka::producer::{EventProducer, Outgoing};
use crate::kafka::wire;
use crate::worker::error::Error;

/// Value of header `name` of a message, if present.
pub fn header<'a>(msg: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a [u8]> {
    msg.headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// A producer for checkpoint records (idempotent, acks=all).
pub fn checkpoint_producer(config: &ClientConfig) -> Result<EventProducer, KafkaError> {
    let mut config = config.clone();
    config
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    EventProducer::create(&config, LogContext::new("target"))
        .context("target cluster: create checkpoint producer")
}

/// Writes checkpoint records to partition 0 of `topic`, pipelined. Returns, per input
/// record, whether it was acknowledged (with the error text if not).
pub async fn write_checkpoints(
    producer: &EventProducer,
    topic: &str,
    records: &[wire::Checkpoint],
    timeout: Duration,
) -> Vec<Result<(), Error>> {
    type KeyValue = (Vec<u8>, Vec<u8>);
    let encoded: Vec<Result<KeyValue, Error>> = records
        .iter()
        .map(|c| {
            let bad = |e: wire::WireError| Error::Record(format!("group {:?}: {e}", c.group));
            let key = c.encode_key().map_err(bad)?;
            let value = c.encode_value().map_err(bad)?;
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
            headers: None,
        })
        .collect();
    let mut reports = producer.send_all(&outgoing, timeout).await.into_iter();
    encoded
        .iter()
        .map(|e| {
            e.as_ref().map_err(Clone::clone)?;
            match reports.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(KafkaError::from(e)
                    .context(format!("write checkpoint to {topic}"))
                    .into()),
                None => Err(KafkaError::Client("no delivery report".into())
                    .context(format!("write checkpoint to {topic}"))
                    .into()),
            }
        })
        .collect()
}
