//! Local brokers (Apache Kafka, nisshi, tansu, librdkafka mock) for the demo, tests and
//! benches, a Kafka-aware fault proxy, and the benches' statistics.
pub mod brokers;
pub mod kafka;
pub mod local;
pub mod proxy;
pub mod stats;
