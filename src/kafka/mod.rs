//! Kafka edges: client configuration, MM2 wire formats, topic naming.
pub mod wire;
pub mod config;
pub mod naming;
