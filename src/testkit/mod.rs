//! Local brokers (nisshi, tansu, librdkafka mock) for the demo, tests and benches, and the
//! benches' statistics.
pub mod brokers;
pub mod stats;
