//! Kafka edges: client configuration and context, MM2 wire formats, topic naming, topic
//! admin calls and reading a topic to its end, and the librdkafka admin calls rust-rdkafka
//! does not wrap (group offsets, topic ids, incremental config changes). Knows nothing of
//! the worker: it serves it.
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
pub mod tail;
pub mod topic_config;
pub mod topic_id;
pub mod topics;
pub mod wire;

/// Runs a blocking librdkafka call on tokio's blocking pool.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("blocking task failed: {e}"))
}
