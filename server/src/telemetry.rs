//! Tracing setup for the binary: `RUST_LOG` filters (default `info`), and
//! human-readable or JSON lines on standard error.

use tracing_subscriber::EnvFilter;

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

/// Installs the global subscriber. Call once, from `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
