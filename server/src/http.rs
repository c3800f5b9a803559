//! The coordinator's plain-HTTP endpoint for probes and scraping:
//! `GET /healthz` (200 `ok`; 503 while shutting down), `GET /readyz` (200
//! once a worker has joined) and `GET /metrics` (Prometheus text format).
//!
//! Deliberately tiny (HTTP/1.0-style, one request per connection): it
//! serves load balancers and Kubernetes probes, not browsers.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::coordinator::Shared;

/// Serves until `shutdown`.
pub async fn run(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    tracing::info!(addr = ?listener.local_addr().ok(), "http endpoint listening");
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "http accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _ =
                tokio::time::timeout(Duration::from_secs(5), respond(stream, &shared, &shutdown))
                    .await;
        });
    }
}

async fn respond(
    mut stream: TcpStream,
    shared: &Shared,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 2048];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
        let n = stream.read(&mut buf[len..]).await?;
        if n == 0 {
            break;
        }
        len += n;
    }
    let request = String::from_utf8_lossy(&buf[..len]);
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let (status, body) = match path {
        "/healthz" if shutdown.is_cancelled() => {
            ("503 Service Unavailable", "shutting down\n".into())
        }
        "/healthz" => ("200 OK", "ok\n".to_string()),
        "/readyz" => {
            if shared.snapshot().0.workers > 0 && !shutdown.is_cancelled() {
                ("200 OK", "ready\n".to_string())
            } else {
                ("503 Service Unavailable", "no workers\n".to_string())
            }
        }
        "/metrics" => ("200 OK", metrics(shared)),
        _ => ("404 Not Found", "not found\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

fn metrics(shared: &Shared) -> String {
    let (s, cache) = shared.snapshot();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP colball_{name} {help}\n# TYPE colball_{name} gauge\ncolball_{name} {value}"
        );
    };
    gauge("workers", "Registered workers.", s.workers as u64);
    gauge("slots", "Solver slots over all workers.", s.slots);
    gauge("queued", "Puzzles waiting for a worker.", s.queued as u64);
    gauge("in_flight", "Puzzles held by workers.", s.in_flight as u64);
    gauge(
        "pending",
        "Puzzles admitted and not yet answered.",
        s.pending as u64,
    );
    gauge("batches", "Open requests.", s.batches as u64);
    gauge(
        "cache_entries",
        "Entries of the result cache.",
        cache as u64,
    );
    gauge(
        "solved_total",
        "Puzzles solved by workers.",
        s.counters.solved,
    );
    gauge(
        "failed_total",
        "Puzzles that got an error result from the cluster.",
        s.counters.failed,
    );
    gauge(
        "redispatched_total",
        "Puzzles re-dispatched after a worker was lost.",
        s.counters.redispatched,
    );
    gauge(
        "workers_lost_total",
        "Workers lost while holding work.",
        s.counters.workers_lost,
    );
    gauge(
        "cancelled_total",
        "Puzzles cancelled because their client went away.",
        s.counters.cancelled,
    );
    out
}
