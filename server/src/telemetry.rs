//! Log lines and spans: set up by [`colball_telemetry`] (its variables,
//! the OTLP export, the trace context carried across the hops); here, how
//! the server's log fields read.

pub use colball_telemetry::{Export, LogFormat, context, init};

/// Makes `span` a child of the span an incoming call's `traceparent`
/// header (or gRPC metadata, which travels as headers) names, if any.
pub fn adopt_headers(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    context::adopt(span, |key| headers.get(key).and_then(|v| v.to_str().ok()));
}

/// An address for a log field: `127.0.0.1:50051`, or `unknown` when there
/// is none (rather than `Some(127.0.0.1:50051)`).
pub fn addr(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(|| "unknown".to_string(), |a| a.to_string())
}
