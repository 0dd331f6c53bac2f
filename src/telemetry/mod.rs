//! Metrics, logging and the HTTP endpoints.
pub mod http;
pub mod logging;
pub mod metrics;
