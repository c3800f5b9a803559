//! Tracing setup for the binary: `RUST_LOG` filters the log lines (default
//! `info`), human-readable or JSON on standard error; and, when the
//! standard OpenTelemetry variables ask for it, the spans exported over
//! OTLP.
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, unless
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`; off, no span
//! leaves the process and nothing is built for it.
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) picks `grpc` or
//! `http/protobuf` (the default); `OTEL_SERVICE_NAME` overrides the
//! service's name (`colball-coordinator`, `colball-worker`);
//! `OTEL_TRACES_SAMPLER` and the batch processor's `OTEL_BSP_*` variables
//! are read by the SDK as the specification says. Spans are exported at
//! `info` whatever `RUST_LOG` says of the log: a span a request, a job, a
//! window of results read, a worker session and a batch of tasks, never
//! one a puzzle.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The shape of log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// An address for a log field: `127.0.0.1:50051`, or `unknown` when there
/// is none (rather than `Some(127.0.0.1:50051)`).
pub fn addr(addr: Option<std::net::SocketAddr>) -> String {
    addr.map_or_else(|| "unknown".to_string(), |a| a.to_string())
}

/// The spans' export, while it lives: dropping it sends what is left (call
/// [`Export::finish`] from a thread that may block, with the runtime it
/// was made in still running).
#[derive(Debug)]
pub struct Export {
    provider: Option<SdkTracerProvider>,
}

impl Export {
    /// Whether spans are exported.
    pub fn on(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans not sent yet and stops the export.
    pub fn finish(mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("the spans' export did not end cleanly: {e}");
        }
    }
}

/// Installs the global subscriber for service `service`; with the OTLP
/// variables set, exports its spans (the gRPC exporter is made in
/// `runtime`, whose tasks carry its calls). Call once, from `main`.
pub fn init(
    format: LogFormat,
    service: &'static str,
    runtime: &tokio::runtime::Runtime,
) -> Result<Export, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let provider = provider(service, runtime)?;
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            .with_filter(LevelFilter::INFO)
    });
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let lines = match format {
        LogFormat::Text => lines.with_filter(filter).boxed(),
        LogFormat::Json => lines.json().with_filter(filter).boxed(),
    };
    tracing_subscriber::registry()
        .with(lines)
        .with(spans)
        .try_init()
        .map_err(|e| format!("tracing: {e}"))?;
    Ok(Export { provider })
}

/// The tracer provider the OTLP variables ask for, if any.
fn provider(
    service: &'static str,
    runtime: &tokio::runtime::Runtime,
) -> Result<Option<SdkTracerProvider>, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or(var("OTEL_EXPORTER_OTLP_ENDPOINT"));
    if disabled || endpoint.is_none() {
        return Ok(None);
    }
    let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or(var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_else(|| "http/protobuf".into());
    let exporter = match protocol.trim() {
        // The gRPC client lives on the runtime.
        "grpc" => {
            let _in = runtime.enter();
            SpanExporter::builder().with_tonic().build()
        }
        "http/protobuf" => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build(),
        other => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other}: spans are exported over grpc or http/protobuf"
            ));
        }
    }
    .map_err(|e| format!("the OTLP span exporter: {e}"))?;
    let mut resource = Resource::builder();
    if var("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service);
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}
