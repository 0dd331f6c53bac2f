//! Errors of the Kafka calls: the words shown to users (which cluster, topic, group, call)
//! as context around a typed cause, whose category and broker error code callers decide on:
//! rewording a message never changes what the code does.

use std::ffi::NulError;
use std::time::Duration;

use rdkafka::types::RDKafkaErrorCode;

/// A Kafka error code: the broker's (0 and up, Kafka's `Errors` table) or librdkafka's own
/// (negative, e.g. a local timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Code(pub i32);

impl Code {
    /// UNKNOWN_TOPIC_OR_PARTITION.
    pub const UNKNOWN_TOPIC_OR_PARTITION: Code = Code(3);
    /// COORDINATOR_LOAD_IN_PROGRESS: retry.
    pub const COORDINATOR_LOAD_IN_PROGRESS: Code = Code(14);
    /// COORDINATOR_NOT_AVAILABLE: find the coordinator again.
    pub const COORDINATOR_NOT_AVAILABLE: Code = Code(15);
    /// NOT_COORDINATOR: find the coordinator again.
    pub const NOT_COORDINATOR: Code = Code(16);
    /// ILLEGAL_GENERATION: a commit from outside the group's current generation.
    pub const ILLEGAL_GENERATION: Code = Code(22);
    /// UNKNOWN_MEMBER_ID: a commit from outside an active group.
    pub const UNKNOWN_MEMBER_ID: Code = Code(25);
    /// REBALANCE_IN_PROGRESS.
    pub const REBALANCE_IN_PROGRESS: Code = Code(27);
    /// TOPIC_ALREADY_EXISTS.
    pub const TOPIC_ALREADY_EXISTS: Code = Code(36);
    /// NON_EMPTY_GROUP.
    pub const NON_EMPTY_GROUP: Code = Code(68);
    /// librdkafka's `RD_KAFKA_RESP_ERR__NOENT` (e.g. ListOffsets found no partition leader in
    /// the client's metadata cache).
    pub const LOCAL_NOENT: Code = Code(-156);

    /// Whether the broker refused a group commit because the group has active members (it
    /// answers these to commits from outside an active group).
    pub fn is_active_group(self) -> bool {
        matches!(
            self,
            Self::UNKNOWN_MEMBER_ID
                | Self::ILLEGAL_GENERATION
                | Self::REBALANCE_IN_PROGRESS
                | Self::NON_EMPTY_GROUP
        )
    }
}

impl From<RDKafkaErrorCode> for Code {
    fn from(c: RDKafkaErrorCode) -> Self {
        Code(c as i32)
    }
}

/// A Kafka answer that does not decode (the many-group client): what was read and
/// where. Here rather than in `protocol` so that the room's error type imports nothing of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: truncated or malformed at byte {offset}")]
pub struct DecodeError {
    /// Which message and field.
    pub what: &'static str,
    /// Byte offset in the response body.
    pub offset: usize,
}

/// What kind of failure: one vocabulary for conditions, events and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The broker (or librdkafka for it) answered with an error code.
    Broker,
    /// No answer in time.
    Timeout,
    /// The client failed: connection, configuration, or librdkafka locally.
    Client,
    /// An answer could not be decoded, or did not answer what was asked.
    Protocol,
    /// A name or value that cannot be sent (e.g. a NUL byte in a group id).
    InvalidInput,
    /// A cluster's state that forbids the call (e.g. a topic that cannot take writes).
    Cluster,
    /// Our own runtime failed (a blocking task panicked).
    Internal,
}

impl ErrorKind {
    /// PascalCase name: a metric label value or an event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Broker => "Broker",
            Self::Timeout => "Timeout",
            Self::Client => "Client",
            Self::Protocol => "Protocol",
            Self::InvalidInput => "InvalidInput",
            Self::Cluster => "Cluster",
            Self::Internal => "Internal",
        }
    }
}

/// A failed Kafka call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// An error code with its text (the broker's name and meaning, or librdkafka's).
    #[error("{text}")]
    Code {
        /// The code.
        code: Code,
        /// Its text as shown.
        text: String,
    },
    /// An answer that does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A failure rust-rdkafka reported.
    #[error(transparent)]
    Rdkafka(#[from] rdkafka::error::KafkaError),
    /// No answer within the call's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A topic not read to its end in time.
    #[error("topic {topic} not read to its end within {within:?} ({behind} partition(s) behind)")]
    NotAtEnd {
        /// The topic.
        topic: String,
        /// The time it had.
        within: Duration,
        /// Partitions not at their end.
        behind: usize,
    },
    /// librdkafka or a connection failed without an error code.
    #[error("{0}")]
    Client(String),
    /// An answer that does not decode, or does not answer what was asked.
    #[error("{0}")]
    Protocol(String),
    /// A name or value that cannot cross into C.
    #[error("{}{value:?}: {source}", word(what))]
    Nul {
        /// What the value is (e.g. `group id`; empty when the context says it).
        what: &'static str,
        /// The value.
        value: String,
        /// Where its NUL byte is.
        source: NulError,
    },
    /// A cluster's state that forbids what was asked (the text says which and why).
    #[error("{0}")]
    Cluster(String),
    /// A blocking task that did not finish (its panic or cancellation).
    #[error("{0}")]
    Task(String),
    /// What was being done when `source` failed (cluster, call, topic, group).
    #[error("{context}: {source}")]
    Context {
        /// What was being done.
        context: String,
        /// Why it failed.
        source: Box<Error>,
    },
}

impl Error {
    /// An error code with its text.
    pub fn code(code: impl Into<Code>, text: impl Into<String>) -> Self {
        Self::Code {
            code: code.into(),
            text: text.into(),
        }
    }

    /// A `group id`, `topic` or other name that holds a NUL byte.
    pub fn nul(what: &'static str, value: &str, source: NulError) -> Self {
        Self::Nul {
            what,
            value: value.to_string(),
            source,
        }
    }

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

    /// The error code, if the cause has one.
    pub fn error_code(&self) -> Option<Code> {
        match self.root() {
            Self::Code { code, .. } => Some(*code),
            Self::Rdkafka(e) => e.rdkafka_error_code().map(Code::from),
            _ => None,
        }
    }

    /// The category.
    pub fn kind(&self) -> ErrorKind {
        match self.root() {
            Self::Code { code, .. } if code.0 == RDKafkaErrorCode::OperationTimedOut as i32 => {
                ErrorKind::Timeout
            }
            Self::Code { code, .. } if code.0 < 0 => ErrorKind::Client,
            Self::Code { .. } => ErrorKind::Broker,
            Self::Rdkafka(e) => match e.rdkafka_error_code() {
                Some(RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::RequestTimedOut) => {
                    ErrorKind::Timeout
                }
                Some(c) if (c as i32) > 0 => ErrorKind::Broker,
                _ => ErrorKind::Client,
            },
            Self::Timeout(_) | Self::NotAtEnd { .. } => ErrorKind::Timeout,
            Self::Client(_) => ErrorKind::Client,
            Self::Protocol(_) | Self::Decode(_) => ErrorKind::Protocol,
            Self::Nul { .. } => ErrorKind::InvalidInput,
            Self::Cluster(_) => ErrorKind::Cluster,
            Self::Task(_) => ErrorKind::Internal,
            Self::Context { .. } => unreachable!("root() is never a context"),
        }
    }

    /// The category's name, for metric labels and event reasons.
    pub fn reason(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// `what` followed by a space, or nothing.
fn word(what: &str) -> String {
    if what.is_empty() {
        String::new()
    } else {
        format!("{what} ")
    }
}

/// Adds context to the error of a result.
pub trait Context<T> {
    /// `Err(e)` becomes `Err(e.context(context()))`.
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, Error>;
    /// `Err(e)` becomes `Err(e.context(context))`.
    fn context(self, context: impl Into<String>) -> Result<T, Error>;
}

impl<T, E: Into<Error>> Context<T> for Result<T, E> {
    fn context_with<C: Into<String>>(self, context: impl FnOnce() -> C) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context()))
    }
    fn context(self, context: impl Into<String>) -> Result<T, Error> {
        self.map_err(|e| e.into().context(context))
    }
}

/// Callers that still report errors as text (and `?` into `String`) keep working.
impl From<Error> for String {
    fn from(e: Error) -> Self {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_reads_outside_in_and_keeps_the_code() {
        let e = Error::code(Code::UNKNOWN_MEMBER_ID, "Broker: Unknown member")
            .context("orders/0")
            .context("group \"g\"")
            .context("target cluster dc2");
        assert_eq!(
            e.to_string(),
            "target cluster dc2: group \"g\": orders/0: Broker: Unknown member"
        );
        assert_eq!(e.error_code(), Some(Code::UNKNOWN_MEMBER_ID));
        assert!(e.error_code().unwrap().is_active_group());
        assert_eq!(e.kind(), ErrorKind::Broker);
    }

    #[test]
    fn kinds() {
        let cases = [
            (Error::Timeout(Duration::from_secs(1)), ErrorKind::Timeout),
            (
                Error::code(RDKafkaErrorCode::OperationTimedOut, "Local: Timed out"),
                ErrorKind::Timeout,
            ),
            (
                Error::code(Code::LOCAL_NOENT, "No leaders found"),
                ErrorKind::Client,
            ),
            (
                Error::Rdkafka(rdkafka::error::KafkaError::MetadataFetch(
                    RDKafkaErrorCode::BrokerTransportFailure,
                )),
                ErrorKind::Client,
            ),
            (
                Error::nul(
                    "group id",
                    "a\0b",
                    std::ffi::CString::new("a\0b").unwrap_err(),
                ),
                ErrorKind::InvalidInput,
            ),
            (
                Error::Task("panicked".into()).context("x"),
                ErrorKind::Internal,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.kind(), want, "{e}");
        }
        assert_eq!(
            Error::nul(
                "group id",
                "a\0b",
                std::ffi::CString::new("a\0b").unwrap_err()
            )
            .to_string(),
            "group id \"a\\0b\": nul byte found in provided data at position: 1"
        );
    }

    #[test]
    fn active_group_codes() {
        for c in [22, 25, 27, 68] {
            assert!(Code(c).is_active_group(), "{c}");
        }
        for c in [3, 14, 16, 29, 30, -185] {
            assert!(!Code(c).is_active_group(), "{c}");
        }
    }
}
