//! Errors of the data plane: a Kafka call's failure (with its category and code) or one of
//! the worker's own, in the words shown in status and logs. [`Error::reason`] names the
//! category for metric labels and condition reasons.

use crate::kafka;

/// A worker failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A Kafka call failed.
    #[error(transparent)]
    Kafka(#[from] kafka::Error),
    /// The flow's spec cannot be used as it is (the text names the field and value).
    #[error("{0}")]
    Spec(String),
    /// A cluster's client properties could not be built (a Secret, a property).
    #[error("{0}")]
    ClientConfig(String),
    /// A record of the worker's own topics (stores, checkpoints) that does not encode or
    /// decode.
    #[error("{0}")]
    Record(String),
    /// What was asked cannot be done as asked (e.g. a reset whose records are gone); the
    /// text says why and what to choose instead.
    #[error("{0}")]
    Refused(String),
    /// The worker's own state failed (a poisoned lock).
    #[error("{0}")]
    Internal(String),
    /// Some of a batch of changes failed (the text lists each).
    #[error("{0}")]
    Partial(String),
    /// What was being done when `source` failed (cluster, topic, group).
    #[error("{context}: {source}")]
    Context {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: Box<Error>,
    },
}

impl Error {
    /// This error with what was being done in front (`"{context}: {self}"`).
    pub fn context(self, context: impl Into<String>) -> Self {
        Self::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    /// The cause under all context.
    pub fn root(&self) -> &Error {
        match self {
            Self::Context { source, .. } => source.root(),
            e => e,
        }
    }

    /// The Kafka error under all context, if the cause is one.
    pub fn kafka(&self) -> Option<&kafka::Error> {
        match self.root() {
            Self::Kafka(e) => Some(e),
            _ => None,
        }
    }

    /// The category: a Kafka error's kind (`Broker`, `Timeout`, ...) or `InvalidSpec`,
    /// `ClientConfig`, `Record`, `Refused`, `Internal`, `Partial`. For metric labels and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self.root() {
            Self::Kafka(e) => e.reason(),
            Self::Spec(_) => "InvalidSpec",
            Self::ClientConfig(_) => "ClientConfig",
            Self::Record(_) => "Record",
            Self::Partial(_) => "Partial",
            Self::Refused(_) => "Refused",
            Self::Internal(_) => "Internal",
            Self::Context { .. } => unreachable!("root() is never a context"),
        }
    }
}

impl From<kafka::config::ConfigError> for Error {
    fn from(e: kafka::config::ConfigError) -> Self {
        // Its I/O cause is neither Clone nor Eq; the text names cluster, field and Secret.
        Self::ClientConfig(e.to_string())
    }
}

/// Callers that still report errors as text (and `?` into `String`) keep working.
impl From<Error> for String {
    fn from(e: Error) -> Self {
        e.to_string()
    }
}

/// Adds context to the error of a result.
pub trait Context<T> {
    /// `Err(e)` becomes `Err(e.context(context()))`.
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, Error>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stage + error -> the labels of `errors_total`: the kind is the stage, the reason the
    /// error's own category.
    #[test]
    fn error_labels_are_the_stage_and_the_error_category() {
        use crate::telemetry::metrics::{error_labels, ErrorKind::*};
        use rdkafka::error::KafkaError;
        use rdkafka::types::RDKafkaErrorCode as C;
        let timeout = kafka::Error::Timeout(std::time::Duration::from_secs(1));
        let cases: Vec<(_, Box<dyn crate::telemetry::metrics::Categorized>, _)> = vec![
            (
                Source,
                Box::new(KafkaError::MessageConsumption(C::UnknownTopicOrPartition)),
                ["source", "Broker"],
            ),
            (
                OffsetValidation,
                Box::new(KafkaError::MessageConsumption(C::OffsetOutOfRange)),
                ["offset_validation", "Broker"],
            ),
            (
                TargetRetriable,
                Box::new(KafkaError::MessageProduction(C::RequestTimedOut)),
                ["target_retriable", "Timeout"],
            ),
            (
                TargetRetriable,
                Box::new(KafkaError::Canceled),
                ["target_retriable", "Client"],
            ),
            (
                TopicSync,
                Box::new(timeout.clone()),
                ["topic_sync", "Timeout"],
            ),
            (
                Progress,
                Box::new(Error::from(timeout.clone()).context("progress topic p/0")),
                ["progress", "Timeout"],
            ),
            (
                Fatal,
                Box::new(Error::Spec("spec.topics: bad".into())),
                ["fatal", "InvalidSpec"],
            ),
            (
                Fatal,
                Box::new(Error::Refused("fenced".into())),
                ["fatal", "Refused"],
            ),
            (
                Fatal,
                Box::new(Error::Record("encoding".into())),
                ["fatal", "Record"],
            ),
        ];
        for (kind, cause, want) in cases {
            assert_eq!(error_labels(kind, &*cause), want, "{kind:?}");
        }
    }

    #[test]
    fn reasons_come_from_the_cause() {
        let e = Error::from(kafka::Error::Timeout(std::time::Duration::from_secs(1)))
            .context("target cluster dc2");
        assert_eq!(e.reason(), "Timeout");
        assert_eq!(e.to_string(), "target cluster dc2: no answer within 1s");
        assert!(e.kafka().is_some());
        assert_eq!(
            Error::Spec("spec.topics.include[0]".into()).reason(),
            "InvalidSpec"
        );
        assert_eq!(
            Error::Record("x".into()).context("a").context("b").reason(),
            "Record"
        );
    }
}
