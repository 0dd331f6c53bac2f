//! Kafka edges: client configuration, MM2 wire formats, topic naming, topic ids.
pub mod config;
pub mod naming;
pub mod topic_id;
pub mod wire;
