//! Kafka edges: client configuration and context, MM2 wire formats, topic naming, and the
//! librdkafka calls rust-rdkafka does not wrap (group offsets, topic ids, ACLs, configs) or
//! wraps at a cost on the hot path (the consumer's queue, topic handles, records sent without
//! a copy, the producer's events). Those calls are the only unsafe code of the crate, in
//! `sys` (its README states what each relies on); everything else calls its safe API.
pub mod acl;
pub mod admin;
pub mod config;
pub mod context;
pub mod delivery;
mod group_client;
pub mod health;
pub mod naming;
pub mod producer;
pub mod protocol;
pub mod secrets;
#[allow(unsafe_code)]
mod sys;
pub mod topic_config;
pub mod wire;

pub use sys::{consume, events, produce, topic_id};

/// Runs a blocking librdkafka call on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task failed: {e}"))
}
