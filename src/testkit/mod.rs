//! Local brokers (Apache Kafka, tansu, librdkafka mock) for the demo, tests and
//! benches, MirrorMaker 2 beside them, a Java program runner, a Kafka-aware fault proxy, and
//! the benches' statistics.
pub mod brokers;
pub mod java;
pub mod kafka;
pub mod local;
pub mod mirror_maker;
pub mod proxy;
pub mod stats;
