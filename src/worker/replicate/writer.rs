//! The target producer: transactional (ExactlyOnce) or idempotent (AtLeastOnce), and what its
//! errors mean.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;

use crate::kafka::config::ClientProperties;
use crate::kafka::context::LogContext;
use crate::kafka::delivery::Tracker;
use crate::kafka::events::{DeliveryProducer, ProducerEvents};
use crate::kafka::produce::TopicId;
use crate::kafka::producer::{EventProducer, Refused, ToSend};

/// Producer tuning (its queue holds the batches' share of the window:
/// [`super::settings::WindowShares`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerLimits {
    /// `queue.buffering.max.kbytes`.
    pub queue_kbytes: u32,
    /// `queue.buffering.max.messages`.
    pub queue_messages: u32,
    /// `transaction.timeout.ms` and the bound of abort/init calls.
    pub transaction_timeout: Duration,
    /// Bound of one commit attempt (a commit that times out is retried, see
    /// `verdict::commit_action`).
    pub commit_timeout: Duration,
    /// `message.timeout.ms` (= `delivery.timeout.ms`): how long librdkafka retries a record.
    pub delivery_timeout: Duration,
}

impl Default for ProducerLimits {
    fn default() -> Self {
        Self {
            queue_kbytes: 32 * 1024,
            queue_messages: 100_000,
            transaction_timeout: Duration::from_secs(60),
            commit_timeout: Duration::from_secs(30),
            delivery_timeout: Duration::from_secs(60),
        }
    }
}

/// What a produce, commit or init error means for the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The target refuses this record for good; stop its partition.
    Rejected,
    /// Transient: retry the batch after a backoff.
    Retriable,
    /// The producer instance is unusable (fatal idempotence/transaction state): recreate it,
    /// then retry.
    ProducerBroken,
    /// Another producer with our transactional.id took over: this worker must stop.
    Fenced,
    /// The target cannot do what the spec asks (e.g. transactions): stop with a clear error.
    Unsupported,
}

/// Classifies an error code from a delivery report or a transactional call.
///
/// `Rejected` is what the target refuses about one record (or its produce batch) whatever
/// the retries, so the partition stops at that record (RecordRejected) instead of
/// retrying forever. librdkafka treats them as permanent (`rd_kafka_handle_Produce_error`
/// does not retry them; INVALID_MSG it retries itself, and reports it only once those
/// retries are spent):
/// - MSG_SIZE_TOO_LARGE (broker `max.message.bytes`, or the producer's own
///   `message.max.bytes` at enqueue), RECORD_LIST_TOO_LARGE (`MessageBatchTooLarge`);
/// - INVALID_MSG (corrupt, or a null key on a compacted topic with older brokers),
///   INVALID_RECORD (a null key on a compacted topic, a broker-side record check);
/// - INVALID_TIMESTAMP (outside `message.timestamp.*.ms` of the target topic);
/// - POLICY_VIOLATION (a broker's create/alter policy refusing the write);
/// - UNSUPPORTED_FOR_MESSAGE_FORMAT (headers on a topic kept in message format v0/v1).
///
/// Not here: TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PART and the like concern the
/// topic, not a record; they are retried until fixed, and skipping a record would not help.
pub fn classify_code(code: RDKafkaErrorCode, fatal: bool) -> ErrorClass {
    use RDKafkaErrorCode as C;
    match code {
        C::ProducerFenced | C::Fenced | C::TransactionalIdAuthorizationFailed => ErrorClass::Fenced,
        // A stale epoch is fencing only when librdkafka says so (fatal); otherwise the
        // coordinator aborted a transaction that took too long (a slow target): abort and
        // retry, never stop the worker.
        C::InvalidProducerEpoch if fatal => ErrorClass::Fenced,
        C::InvalidProducerEpoch => ErrorClass::Retriable,
        C::MessageSizeTooLarge
        | C::MessageBatchTooLarge
        | C::InvalidRecord
        | C::InvalidMessage
        | C::InvalidTimestamp
        | C::PolicyViolation
        | C::UnsupportedForMessageFormat => ErrorClass::Rejected,
        C::UnsupportedFeature | C::UnsupportedVersion | C::NotImplemented => {
            ErrorClass::Unsupported
        }
        _ if fatal => ErrorClass::ProducerBroken,
        C::Fatal => ErrorClass::ProducerBroken,
        _ => ErrorClass::Retriable,
    }
}

/// Classifies a [`KafkaError`].
pub fn classify_error(err: &KafkaError) -> ErrorClass {
    match err {
        KafkaError::Transaction(e) => classify_code(e.code(), e.is_fatal()),
        KafkaError::MessageProduction(code) => classify_code(*code, false),
        other => match other.rdkafka_error_code() {
            Some(code) => classify_code(code, false),
            None => ErrorClass::Retriable,
        },
    }
}

/// Human text of an error, including the broker's/librdkafka's explanation for transactional
/// calls.
pub fn describe_error(err: &KafkaError) -> String {
    match err {
        KafkaError::Transaction(e) => format!("{} ({})", e.string(), e.name()),
        // Displays as `MessageSizeTooLarge (Broker: Message size too large)`.
        KafkaError::MessageProduction(code) => code.to_string(),
        other => other.to_string(),
    }
}

/// The target producer's settings that `target.config` cannot change (the bench's bare loop
/// uses them too): idempotence, acknowledgements from all replicas, the queue and delivery
/// bounds, and the transactional id, or without transactions the gapless guarantee.
pub fn producer_properties(
    limits: &ProducerLimits,
    transactional_id: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("enable.idempotence", "true".to_string()),
        ("acks", "all".to_string()),
        (
            "queue.buffering.max.kbytes",
            limits.queue_kbytes.to_string(),
        ),
        (
            "queue.buffering.max.messages",
            limits.queue_messages.to_string(),
        ),
        (
            "message.timeout.ms",
            limits.delivery_timeout.as_millis().to_string(),
        ),
    ];
    match transactional_id {
        Some(id) => p.extend([
            ("transactional.id", id.to_string()),
            (
                "transaction.timeout.ms",
                limits.transaction_timeout.as_millis().to_string(),
            ),
        ]),
        // Without transactions, a batch the broker refuses for good (e.g. too large) must not
        // let librdkafka bump the epoch and deliver the records behind it first: that would
        // put r+1.. on the target before r is retried. The producer stops instead (a fatal
        // error); the engine recreates it and re-sends from the committed positions, so each
        // partition keeps its order of first appearance.
        None => p.push(("enable.gapless.guarantee", "true".to_string())),
    }
    p
}

/// The target producer's batching, which `target.config` may change (the bench's bare loop
/// uses it too). Batches are pipelined (AtLeastOnce), so a short linger costs no throughput
/// and fills produce requests: with 0 every record wakes the broker thread and requests stay
/// small (measured: about 12 % more records/s at 5 ms).
pub const PRODUCER_TUNING: [(&str, &str); 1] = [("linger.ms", "5")];

/// What the target producer gets beyond `target.config` (which wins): [`PRODUCER_TUNING`]
/// and, since it is polled, statistics (so that the connection health sees a broker come
/// back).
pub fn producer_defaults(props: &ClientProperties) -> Vec<(&'static str, &'static str)> {
    props.unless_set(
        PRODUCER_TUNING
            .into_iter()
            .chain(crate::kafka::health::STATS_PROPERTIES.iter().copied()),
    )
}

/// The target producer.
pub struct TargetWriter {
    inner: EventProducer,
    transactional: bool,
    limits: ProducerLimits,
    in_transaction: bool,
}

/// Fences transactional id `id` (of a worker that no longer runs): a producer with that id
/// runs `init_transactions`, which bumps its epoch and aborts the transaction it left open,
/// and is dropped.
pub async fn fence(
    props: &ClientProperties,
    ctx: LogContext,
    id: &str,
    limits: ProducerLimits,
) -> Result<(), KafkaError> {
    TargetWriter::create(props, ctx, Some(id), limits)
        .await
        .map(drop)
}

impl TargetWriter {
    /// Creates the producer; with `transactional_id`, also `init_transactions` (which fences
    /// an older instance with the same id and aborts its open transaction).
    pub async fn create(
        props: &ClientProperties,
        ctx: LogContext,
        transactional_id: Option<&str>,
        limits: ProducerLimits,
    ) -> Result<Self, KafkaError> {
        let mut config = props.to_client_config();
        for (k, v) in producer_properties(&limits, transactional_id) {
            config.set(k, v);
        }
        for (k, v) in producer_defaults(props) {
            config.set(k, v);
        }
        let inner = EventProducer::create(&config, ctx)?;
        if transactional_id.is_some() {
            let timeout = limits.transaction_timeout;
            inner
                .blocking(move |p| p.init_transactions(timeout))
                .await??;
        }
        Ok(Self {
            inner,
            transactional: transactional_id.is_some(),
            limits,
            in_transaction: false,
        })
    }

    /// The producer, to send records (delivery opaque: a ticket of [`TargetWriter::tracker`]).
    pub fn producer(&self) -> &Arc<DeliveryProducer> {
        self.inner.producer()
    }

    /// The id of target topic `name`, to send to it with [`TargetWriter::send`].
    pub fn topic(&mut self, name: &str) -> TopicId {
        self.inner.topic(name)
    }

    /// Hands a record to the producer, to `topic` (its target topic's id): the one place
    /// the replication engine's records (data, offset syncs, progress) reach the producer.
    /// On error the record (or the held event) comes back, as from rdkafka's `send`.
    #[allow(clippy::result_large_err)] // rdkafka's own signature: the record comes back
    pub fn send<'a>(
        &self,
        topic: TopicId,
        record: ToSend<'a>,
    ) -> Result<(), (KafkaError, Refused<'a>)> {
        self.inner.send(topic, record)
    }

    /// The producer's event signal.
    pub fn events(&self) -> &Arc<ProducerEvents> {
        self.inner.events()
    }

    /// Serves the producer's queued events.
    pub fn serve(&self) {
        self.events().serve();
    }

    /// Where the producer's delivery reports go.
    pub fn tracker(&self) -> &Tracker {
        self.inner.tracker()
    }

    /// The producer's fatal error, if it has one (e.g. fenced; then every later call fails
    /// and delivery reports only say "purged").
    pub fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        self.inner.producer().client().fatal_error()
    }

    /// Whether this writer uses transactions.
    pub fn is_transactional(&self) -> bool {
        self.transactional
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Opens a transaction (no-op without transactions).
    pub fn begin(&mut self) -> Result<(), KafkaError> {
        if self.transactional && !self.in_transaction {
            self.inner.producer().begin_transaction()?;
            self.in_transaction = true;
        }
        Ok(())
    }

    /// Why the open transaction can only be aborted, when librdkafka put it in its
    /// abortable-error state (e.g. the broker refused to add a partition to it: its records
    /// then fail only as purged). librdkafka returns that error to a call the state forbids;
    /// `begin_transaction` is such a call, and within a transaction that is not failed it
    /// only answers that one is open (no change).
    pub fn abortable_cause(&self) -> Option<KafkaError> {
        if !(self.transactional && self.in_transaction) {
            return None;
        }
        match self.inner.producer().begin_transaction() {
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                Some(KafkaError::Transaction(e))
            }
            _ => None,
        }
    }

    /// Commits the open transaction (flushing it first); without transactions, flushes.
    pub async fn commit(&mut self) -> Result<(), KafkaError> {
        let timeout = if self.transactional {
            self.limits.commit_timeout
        } else {
            self.limits.transaction_timeout
        };
        let transactional = self.transactional;
        let r = self
            .inner
            .blocking(move |p| {
                if transactional {
                    p.commit_transaction(timeout)
                } else {
                    crate::kafka::producer::flush(p, timeout)
                }
            })
            .await?;
        if r.is_ok() {
            self.in_transaction = false;
        }
        r
    }

    /// Aborts the open transaction, if any.
    pub async fn abort(&mut self) -> Result<(), KafkaError> {
        if !self.in_transaction {
            return Ok(());
        }
        let timeout = self.limits.transaction_timeout;
        let r = self
            .inner
            .blocking(move |p| p.abort_transaction(timeout))
            .await?;
        if r.is_ok() {
            self.in_transaction = false;
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RDKafkaErrorCode as C;

    #[test]
    fn the_producer_is_idempotent_and_gapless_without_transactions() {
        let l = ProducerLimits::default();
        // (transactional id, property, value)
        let cases = [
            (None, "enable.idempotence", Some("true")),
            (None, "acks", Some("all")),
            (None, "queue.buffering.max.kbytes", Some("32768")),
            (None, "queue.buffering.max.messages", Some("100000")),
            (None, "message.timeout.ms", Some("60000")),
            (None, "enable.gapless.guarantee", Some("true")),
            (None, "transactional.id", None),
            (Some("t-0"), "transactional.id", Some("t-0")),
            (Some("t-0"), "transaction.timeout.ms", Some("60000")),
            (Some("t-0"), "enable.gapless.guarantee", None),
            (Some("t-0"), "enable.idempotence", Some("true")),
        ];
        for (id, key, want) in cases {
            let got = producer_properties(&l, id);
            let got = got.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str());
            assert_eq!(got, want, "{id:?} {key}");
        }
    }

    #[test]
    fn the_producer_gets_linger_and_statistics_unless_target_config_sets_them() {
        let props = |kv: &[(&str, &str)]| kv.iter().copied().collect::<ClientProperties>();
        // (target.config, what the producer gets beyond it)
        type Case = (
            &'static [(&'static str, &'static str)],
            &'static [(&'static str, &'static str)],
        );
        let cases: [Case; 4] = [
            (
                &[],
                &[("linger.ms", "5"), ("statistics.interval.ms", "5000")],
            ),
            (&[("linger.ms", "0")], &[("statistics.interval.ms", "5000")]),
            (&[("statistics.interval.ms", "0")], &[("linger.ms", "5")]),
            (
                &[("linger.ms", "20"), ("statistics.interval.ms", "1000")],
                &[],
            ),
        ];
        for (target_config, want) in cases {
            assert_eq!(
                producer_defaults(&props(target_config)),
                want,
                "{target_config:?}"
            );
        }
    }

    #[test]
    fn classification_table() {
        let cases = [
            (C::MessageSizeTooLarge, false, ErrorClass::Rejected),
            (C::MessageBatchTooLarge, false, ErrorClass::Rejected),
            (C::InvalidRecord, false, ErrorClass::Rejected),
            (C::InvalidTimestamp, false, ErrorClass::Rejected),
            (C::PolicyViolation, false, ErrorClass::Rejected),
            (C::InvalidMessage, false, ErrorClass::Rejected),
            (C::UnsupportedForMessageFormat, false, ErrorClass::Rejected),
            // Not about the record: retried until the topic or permissions are fixed.
            (C::TopicAuthorizationFailed, false, ErrorClass::Retriable),
            (C::RequestTimedOut, false, ErrorClass::Retriable),
            (C::NotLeaderForPartition, false, ErrorClass::Retriable),
            (C::ProducerFenced, true, ErrorClass::Fenced),
            (C::Fenced, true, ErrorClass::Fenced),
            (C::InvalidProducerEpoch, false, ErrorClass::Retriable),
            (C::InvalidProducerEpoch, true, ErrorClass::Fenced),
            (C::UnsupportedFeature, false, ErrorClass::Unsupported),
            (C::UnsupportedVersion, true, ErrorClass::Unsupported),
            (C::MessageTimedOut, false, ErrorClass::Retriable),
            (C::BrokerTransportFailure, false, ErrorClass::Retriable),
            (C::NotEnoughReplicas, false, ErrorClass::Retriable),
            (C::UnknownTopicOrPartition, false, ErrorClass::Retriable),
            (
                C::OutOfOrderSequenceNumber,
                true,
                ErrorClass::ProducerBroken,
            ),
            (C::Fatal, false, ErrorClass::ProducerBroken),
        ];
        for (code, fatal, want) in cases {
            assert_eq!(classify_code(code, fatal), want, "{code:?} fatal={fatal}");
        }
        assert_eq!(
            classify_error(&KafkaError::MessageProduction(C::MessageSizeTooLarge)),
            ErrorClass::Rejected
        );
        assert_eq!(classify_error(&KafkaError::Canceled), ErrorClass::Retriable);
    }
}
