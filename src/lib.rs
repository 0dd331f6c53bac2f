//! mirrorflow: Kafka cross-cluster replication as a Kubernetes operator.
//!
//! Layout: `api` (CRD types and validation), `controller` (control plane),
//! `worker` (data plane: replicate, validate, checkpoint), `kafka` (client config,
//! wire formats, naming), `telemetry` (metrics, logs, HTTP), `testkit` (local brokers
//! for the demo, tests and benches).
pub mod api;
pub mod controller;
pub mod demo;
pub mod kafka;
pub mod telemetry;
pub mod testkit;
pub mod worker;
