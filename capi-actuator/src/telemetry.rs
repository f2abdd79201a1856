//! Structured logs for managers: human-readable text or JSON lines, filtered by `RUST_LOG`
//! (default `info`).

use tracing_subscriber::EnvFilter;

/// The log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line, with the span fields (namespace, name) of each reconcile.
    Json,
}

/// Installs the global subscriber. Returns an error if one is already installed.
pub fn init_logging(format: LogFormat) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    }
}
