//! mirrorflow: Kafka cross-cluster replication as a Kubernetes operator.
//!
//! Layout: `api` (CRD types and validation), `controller` (control plane),
//! `worker` (data plane: replicate, validate, checkpoint), `cli` (operator tools that read
//! flows through the API), `kafka` (client config,
//! wire formats, naming), `telemetry` (metrics, logs, HTTP); with the `testkit` feature (on
//! by default, off in the operator image) `testkit` (local brokers for the demo, tests and
//! benches) and `demo`.
// Unsafe code lives in `kafka::sys` only (its README says what it relies on).
#![deny(unsafe_code)]

pub mod api;
pub mod cli;
pub mod controller;
#[cfg(feature = "testkit")]
pub mod demo;
pub mod kafka;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod worker;
