//! Kafka edges: client configuration and context, MM2 wire formats, topic naming, topic
//! admin calls and reading a topic to its end. The librdkafka calls rust-rdkafka does not
//! wrap (group offsets, topic ids, ACLs, configs) or wraps at a cost on the hot path are the
//! crate's only unsafe code, in `sys` (its README states what each relies on). Knows nothing
//! of the worker: it serves it.
pub mod acl;
pub mod admin;
pub mod config;
pub mod context;
pub mod delivery;
pub mod error;
mod group_client;
pub mod group_offset;
pub mod health;
pub mod naming;
pub mod producer;
pub mod protocol;
mod scram;
pub mod secrets;
#[allow(unsafe_code)]
mod sys;
pub mod tail;
pub mod topic_config;
pub mod topics;
mod transport;
pub mod wire;

pub use error::{Code, Error, ErrorKind};
pub use sys::{consume, events, produce, topic_id};

/// Runs a blocking librdkafka call on tokio's blocking pool.
pub async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task(e.to_string()).context("blocking task failed"))
}

/// [`run_blocking`] with its failure as text, for the callers that still report errors as
/// text (the audit and the test kit, which other work is changing).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    run_blocking(f).await.map_err(String::from)
}
