//! Metrics, logging and the HTTP endpoints.
pub mod logging;
