//! The client context of every mirrorflow Kafka client: librdkafka's logs and errors as
//! `tracing` events tagged with the cluster alias. A context made by
//! [`ClusterHealth::context`] also feeds that cluster's connection health (authentication
//! and TLS failures, and their recovery); `kafka::health` knows nothing of contexts.

use std::sync::Arc;

use crate::kafka::health::{BrokerStates, ClientSlot, ClusterHealth};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// librdkafka logs and client errors as `tracing` events tagged with the cluster alias.
/// Client errors (broker down, ...) are warnings: librdkafka retries them itself, and the
/// engine reports what they cause.
#[derive(Clone, Debug)]
pub struct LogContext {
    cluster: Arc<str>,
    health: Option<Arc<ClientSlot>>,
}

impl LogContext {
    /// A context for clients of the cluster `alias` (logs only, no health reports).
    pub fn new(alias: &str) -> Self {
        Self {
            cluster: Arc::from(alias),
            health: None,
        }
    }

    /// A context reporting into `slot` (see [`ClusterHealth::context`]).
    fn with_slot(alias: &str, slot: Arc<ClientSlot>) -> Self {
        Self {
            cluster: Arc::from(alias),
            health: Some(slot),
        }
    }

    /// The health slot this context reports into, if any.
    pub fn slot(&self) -> Option<&ClientSlot> {
        self.health.as_deref()
    }
}

impl ClusterHealth {
    /// A context for one new client of this cluster, reporting into this health.
    pub fn context(&self) -> LogContext {
        LogContext::with_slot(self.alias(), self.new_slot())
    }
}

impl ClientContext for LogContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        let cluster = &*self.cluster;
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            // We set enable.gapless.guarantee on purpose (AtLeastOnce ordering): librdkafka's
            // warning that it is experimental would greet every user at every start.
            RDKafkaLogLevel::Warning
                if fac == "CONFWARN" && log_message.contains("enable.gapless.guarantee") =>
            {
                tracing::debug!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", cluster, "{fac}: {log_message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let cluster = &*self.cluster;
        match error {
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF) => {}
            e => {
                if let (Some(slot), Some(code)) = (&self.health, e.rdkafka_error_code()) {
                    slot.on_error(code, reason, jiff::Timestamp::now());
                }
                tracing::warn!(target: "librdkafka", cluster, "{e}: {reason}")
            }
        }
    }

    fn stats_raw(&self, statistics: &[u8]) {
        // Only broker states are read (for recovery); the rest of the report is skipped.
        if let (Some(slot), Some(states)) = (&self.health, BrokerStates::parse(statistics)) {
            slot.on_stats(&states);
        }
    }
}

impl ConsumerContext for LogContext {}
