//! Structured logs via `tracing`: human-readable by default, JSON for log pipelines.

use clap::ValueEnum;
use tracing_subscriber::{fmt, EnvFilter};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Install the global subscriber. The filter comes from `RUST_LOG` (default `info`); librdkafka
/// and HTTP internals are kept at `warn` unless asked for.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,rdkafka=warn,hyper=warn,kube=warn,tower=warn"));
    let builder = fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // try_init: tests and the demo may call this more than once.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
}
