//! Logs and traces (OPS-4, BEY-5): what the process writes about itself, and where.
//!
//! - Log lines go to stderr as text or, by option, one JSON object per line. A model call's
//!   lines are written inside its `call` span, so each carries the call's `request_id`. No field
//!   anywhere holds a secret, a prompt or a body: the spans and events name ids, codes and
//!   statuses only.
//! - Traces are exported over OTLP/HTTP when a collector is configured: one span per call with
//!   the request id as an attribute, and child spans for the queue wait, the upstream call and
//!   the record handed to the writer. Those child spans are `debug` spans that only the trace
//!   exporter asks for, so without it they cost nothing beyond a disabled callsite check.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::{
    EnvFilter, Layer as _, Registry,
    filter::{LevelFilter, filter_fn},
    fmt::MakeWriter,
    layer::SubscriberExt as _,
};

use crate::config::{LogFormat, Observability};

/// Why logging or tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("OTLP trace exporter: {0}")]
    Exporter(String),
}

/// The trace pipeline, when there is one: flushed and stopped by [`Telemetry::shutdown`].
#[derive(Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered (blocks: call it off the async runtime's threads).
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }

    /// Flushes and stops the exporter (blocks).
    pub fn shutdown(self) {
        if let Some(p) = self.provider {
            let _ = p.shutdown();
        }
    }
}

/// The URL traces are posted to: the collector's base URL with `/v1/traces`, unless the
/// configured URL already names a path.
fn traces_url(endpoint: &url::Url) -> String {
    if endpoint.path().trim_end_matches('/').is_empty() {
        format!("{}/v1/traces", endpoint.as_str().trim_end_matches('/'))
    } else {
        endpoint.to_string()
    }
}

/// The process's subscriber: `filter` (from `RUST_LOG`, `info` by default) decides which lines
/// are written to `writer` in the configured format; the trace exporter, if configured, gets
/// SubLane's spans whatever the filter.
pub fn subscriber<W>(
    o: &Observability,
    filter: EnvFilter,
    writer: W,
) -> Result<(Box<dyn Subscriber + Send + Sync>, Telemetry), TelemetryError>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let lines = match o.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer().with_writer(writer).boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(writer)
            .boxed(),
    }
    .with_filter(filter);
    let Some(endpoint) = &o.otlp_endpoint else {
        return Ok((Box::new(Registry::default().with(lines)), Telemetry::default()));
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("sublane").build())
        .build();
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("sublane"))
        .with_filter(LevelFilter::DEBUG)
        .with_filter(filter_fn(|m| m.is_span() && m.target().starts_with("sublane")));
    let subscriber = Registry::default().with(lines).with(spans);
    Ok((Box::new(subscriber), Telemetry { provider: Some(provider) }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_go_to_the_collectors_v1_traces_unless_a_path_is_given() {
        let url = |s: &str| traces_url(&s.parse().unwrap());
        assert_eq!(url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(url("http://collector:4318/"), "http://collector:4318/v1/traces");
        assert_eq!(url("https://otel.example/custom/traces"), "https://otel.example/custom/traces");
    }
}
