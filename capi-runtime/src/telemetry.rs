//! Structured logs for managers: human-readable text or JSON lines, filtered by `RUST_LOG`
//! (default `info`).

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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
    init_logging_without_bodies(format, &[])
}

/// Installs the global subscriber, with the DEBUG and TRACE events of `body_targets` (and of the
/// targets under them) dropped whatever `RUST_LOG` says: cloud SDKs log whole request and response
/// bodies at TRACE level and request settings at DEBUG level, and those carry passwords, tokens,
/// credentials' identifiers and user data. Returns an error if
/// a subscriber is already installed.
pub fn init_logging_without_bodies(
    format: LogFormat,
    body_targets: &[&'static str],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let bodies = without_body_traces(body_targets.to_vec());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.finish().with(bodies).try_init()?,
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .finish()
            .with(bodies)
            .try_init()?,
    }
    Ok(())
}

/// A filter that drops the DEBUG and TRACE events of `body_targets` and of the targets under
/// them (`openstack_sdk` covers `openstack_sdk_core::…`), and lets everything else through; for
/// a subscriber of one's own, as [`init_logging_without_bodies`] installs it. A cloud SDK's
/// TRACE events print request and response bodies; its DEBUG events print the request's
/// configuration, credentials' identifiers included (the AWS SDK's endpoint resolution does).
pub fn without_body_traces(
    body_targets: Vec<&'static str>,
) -> tracing_subscriber::filter::FilterFn<impl Fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(move |meta| {
        *meta.level() < tracing::Level::DEBUG
            || !body_targets.iter().any(|t| meta.target().starts_with(t))
    })
}
