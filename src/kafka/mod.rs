//! Kafka edges: client configuration and context, MM2 wire formats, topic naming, and the
//! librdkafka admin calls rust-rdkafka does not wrap (group offsets, topic ids).
pub mod acl;
pub mod admin;
pub mod config;
pub mod consume;
pub mod context;
pub mod delivery;
pub mod events;
mod ffi;
mod group_client;
pub mod health;
pub mod naming;
pub mod produce;
pub mod producer;
pub mod protocol;
pub mod secrets;
pub mod topic_config;
pub mod topic_id;
pub mod wire;

/// Runs a blocking librdkafka call on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task failed: {e}"))
}
