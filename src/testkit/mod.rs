//! Local brokers (nisshi, tansu, librdkafka mock) for the demo, tests and benches.
pub mod brokers;
