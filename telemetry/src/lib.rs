//! What the colball processes say about themselves: log lines on standard
//! error, spans exported over OTLP when the standard OpenTelemetry
//! variables ask for it ([`init`]), and the trace context that crosses
//! each hop so that one trace holds a job's submit, its windows, the tasks
//! on each worker and the results written ([`context`]).
//!
//! Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, unless
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`; off, no span
//! leaves the process, nothing is built for it and no trace context is
//! passed on. `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`)
//! picks `grpc` or `http/protobuf` (the default); `OTEL_SERVICE_NAME`
//! overrides the service's name (`colball-coordinator`, `colball-worker`,
//! `colball`); `OTEL_TRACES_SAMPLER` and the batch processor's `OTEL_BSP_*`
//! variables are read by the SDK as the specification says. Spans are
//! exported at `info` whatever `RUST_LOG` says of the log lines.

pub mod context;

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// Whether this process exports its spans (set once, by [`init`]).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports its spans: work done only for them (a
/// span kept per batch of tasks, per group of results written) is skipped
/// when it does not.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The shape of log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The spans' export, while it lives. Dropping it (or [`Export::finish`])
/// sends what is left and waits for it: do it from a thread that may
/// block.
#[derive(Debug)]
pub struct Export {
    provider: Option<SdkTracerProvider>,
    /// Carries the gRPC exporter's calls (one thread, made only for it).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Export {
    /// Whether spans are exported.
    pub fn on(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans not sent yet and stops the export.
    pub fn finish(self) {}
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("the spans' export did not end cleanly: {e}");
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Installs the global subscriber for service `service`: log lines in
/// `lines`' format filtered by `RUST_LOG` (default `info`), none when
/// `None`; and, with the OTLP variables set, the spans' export. Call once,
/// from `main`.
pub fn init(service: &'static str, lines: Option<LogFormat>) -> Result<Export, String> {
    let (provider, runtime) = match provider(service)? {
        Some((provider, runtime)) => (Some(provider), runtime),
        None => (None, None),
    };
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer(service))
            .with_filter(LevelFilter::INFO)
    });
    let lines = lines.map(|format| {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let lines = tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr);
        match format {
            LogFormat::Text => lines.with_filter(filter).boxed(),
            LogFormat::Json => lines.json().with_filter(filter).boxed(),
        }
    });
    let on = spans.is_some();
    if lines.is_some() || on {
        tracing_subscriber::registry()
            .with(lines)
            .with(spans)
            .try_init()
            .map_err(|e| format!("tracing: {e}"))?;
    }
    EXPORTING.store(on, Ordering::Relaxed);
    Ok(Export { provider, runtime })
}

/// The tracer provider the OTLP variables ask for, if any, and the runtime
/// its gRPC exporter runs on.
fn provider(
    service: &'static str,
) -> Result<Option<(SdkTracerProvider, Option<tokio::runtime::Runtime>)>, String> {
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
    let mut runtime = None;
    let exporter = match protocol.trim() {
        // The gRPC client's connection lives on a runtime of its own,
        // whatever runtime (if any) the process runs its work on.
        "grpc" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("otlp-export")
                .enable_all()
                .build()
                .map_err(|e| format!("the OTLP exporter's runtime: {e}"))?;
            let exporter = {
                let _in = rt.enter();
                SpanExporter::builder().with_tonic().build()
            };
            runtime = Some(rt);
            exporter
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
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    Ok(Some((provider, runtime)))
}
