//! The coordinator's HTTP endpoint (`--http ADDR`), served with axum:
//!
//! - `GET /`: the live dashboard (one HTML page with its script, served
//!   from the binary; no front-end build);
//! - `GET /api/status`: the dashboard's data as one JSON object;
//! - `GET /api/stream`: the same object every half second as server-sent
//!   events (`event: status`), which the dashboard follows;
//! - `GET /metrics`: Prometheus metrics: the Prometheus text format
//!   0.0.4, or OpenMetrics when the scraper asks for it (`Accept`);
//! - `GET /healthz`: 200 while the process serves (503 once shutting
//!   down), for liveness probes;
//! - `GET /readyz`: 200 only while at least one worker is connected, for
//!   readiness probes and load balancers.
//!
//! `/api/*` shows puzzle ids and answers, so when client tokens are
//! configured it asks for one, as the gRPC API does: `Authorization:
//! Bearer TOKEN`, or `?token=TOKEN` (which the dashboard page passes on
//! from its own address, since a browser's event stream cannot set
//! headers). `/`, `/metrics`, `/healthz` and `/readyz` stay open: they
//! carry no puzzle data.

pub mod api;
pub mod jobs;
pub mod metrics;
pub mod process;
mod submission;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::access::Access;
use crate::app::App;
use crate::coordinator::Scheduler;
use crate::coordinator::traffic::{History, MovesCount, Recent};
use colball_core::WorkerView;
use metrics::{Metrics, MetricsFormat};

/// How often the dashboard's stream sends a status.
const STREAM_EVERY: Duration = Duration::from_millis(500);

const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves until `shutdown`; open dashboard streams end then too.
pub async fn run(listener: TcpListener, app: App, shutdown: CancellationToken) {
    let addr = crate::telemetry::addr(listener.local_addr().ok());
    tracing::info!(%addr, "http endpoint listening");
    let app = router(app, shutdown.clone());
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { shutdown.cancelled().await })
    .await;
    if let Err(e) = served {
        tracing::warn!(error = %e, "http endpoint failed");
    }
}

/// What the endpoint's handlers (all but the job API's) share.
#[derive(Clone)]
struct Endpoint {
    scheduler: Arc<Scheduler>,
    access: Arc<Access>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

fn router(app: App, shutdown: CancellationToken) -> Router {
    let jobs = jobs::router(app.clone());
    let scheduler = app.scheduler;
    let app = Endpoint {
        metrics: Arc::new(Metrics::new(scheduler.clone(), Some(app.jobs))),
        scheduler,
        access: app.access,
        shutdown,
    };
    let api = Router::new()
        .route("/api/status", get(status))
        .route("/api/stream", get(stream))
        .route_layer(middleware::from_fn_with_state(app.clone(), require_token));
    Router::new()
        .route("/", get(dashboard))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(api)
        .with_state(app)
        .merge(jobs)
}

/// Refuses an `/api` call without a valid client token (when tokens are
/// configured) with 401 and the same message the gRPC API gives.
async fn require_token(State(app): State<Endpoint>, request: Request, next: Next) -> Response {
    let check = crate::auth::check_clients(app.access.tokens().clone());
    match check.verify(token_of(request.headers(), request.uri())) {
        Ok(_) => next.run(request).await,
        Err(message) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{message}\n"),
        )
            .into_response(),
    }
}

/// The client token an HTTP request carries: `Authorization: Bearer T`,
/// or `?token=T` (for a browser's page and its `EventSource`, which
/// cannot send headers).
pub(crate) fn token_of<'a>(headers: &'a HeaderMap, uri: &'a axum::http::Uri) -> Option<&'a str> {
    bearer(headers).or_else(|| {
        uri.query()
            .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("token=")))
    })
}

/// The bearer token an HTTP request carries (`Authorization: Bearer T`).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix(crate::auth::SCHEME))
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

async fn healthz(State(app): State<Endpoint>) -> (StatusCode, &'static str) {
    if app.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

async fn readyz(State(app): State<Endpoint>) -> (StatusCode, &'static str) {
    if app.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if app.scheduler.snapshot().0.workers == 0 {
        (StatusCode::SERVICE_UNAVAILABLE, "no workers\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}

#[derive(Debug, Serialize)]
struct ByClass {
    interactive: usize,
    normal: usize,
    bulk: usize,
}

/// What the dashboard shows.
#[derive(Debug, Serialize)]
struct Status {
    unix_ms: u128,
    workers: Vec<WorkerView>,
    slots: u64,
    queued: usize,
    /// Queued puzzles by priority class.
    queued_by_class: ByClass,
    in_flight: usize,
    pending: usize,
    batches: usize,
    /// Worker answers refused by the replay check or an audit, and workers
    /// quarantined for them.
    rejected: u64,
    quarantined: u64,
    /// Results with an answer, over all requests.
    answered: u64,
    /// Answers per second over the last five seconds.
    throughput: f64,
    /// Answers given without a search (from the coordinator's result
    /// cache, a worker's solver cache, or a solve shared with another
    /// request) over all answers.
    cache_hit_rate: f64,
    by_strategy: std::collections::BTreeMap<String, u64>,
    errors: u64,
    redispatched: u64,
    workers_lost: u64,
    p50_us: u64,
    p99_us: u64,
    recent_results: Vec<Recent>,
    recent_failures: Vec<Recent>,
    /// Answers by number of moves (-1: unreachable), over all answers.
    by_moves: Vec<MovesCount>,
    /// The last minutes, second by second, for the dashboard's charts.
    history: History,
    sequence: u64,
}

fn current(scheduler: &Scheduler) -> Status {
    let (s, _) = scheduler.snapshot();
    let t = scheduler.traffic();
    let answered: u64 = t.by_strategy.values().sum();
    let cached: u64 = ["cache", "result_cache", "shared"]
        .iter()
        .filter_map(|k| t.by_strategy.get(*k))
        .sum();
    Status {
        unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
        workers: s.worker_list,
        slots: s.slots,
        queued: s.queued,
        queued_by_class: ByClass {
            interactive: s.queued_by_class[0],
            normal: s.queued_by_class[1],
            bulk: s.queued_by_class[2],
        },
        in_flight: s.in_flight,
        pending: s.pending,
        batches: s.batches,
        rejected: s.counters.rejected.iter().sum(),
        quarantined: s.counters.quarantined,
        answered,
        throughput: t.throughput,
        cache_hit_rate: if answered == 0 {
            0.0
        } else {
            cached as f64 / answered as f64
        },
        by_strategy: t.by_strategy,
        errors: t.errors,
        redispatched: s.counters.redispatched,
        workers_lost: s.counters.workers_lost,
        p50_us: t.p50_us,
        p99_us: t.p99_us,
        recent_results: t.results,
        recent_failures: t.failures,
        by_moves: t.by_moves,
        history: scheduler.events().history(),
        sequence: t.newest_sequence,
    }
}

async fn status(State(app): State<Endpoint>) -> Json<Status> {
    Json(current(&app.scheduler))
}

async fn stream(State(app): State<Endpoint>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut ticks = tokio::time::interval(STREAM_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = app.shutdown.clone();
    let events = tokio_stream::wrappers::IntervalStream::new(ticks)
        .take_while(move |_| !shutdown.is_cancelled())
        .map(move |_| {
            let status = current(&app.scheduler);
            Ok(Event::default()
                .event("status")
                .json_data(&status)
                .unwrap_or_else(|_| Event::default().event("status").data("{}")))
        });
    Sse::new(events).keep_alive(KeepAlive::default())
}

async fn metrics(State(app): State<Endpoint>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = MetricsFormat::negotiate(accept);
    match app.metrics.encode(format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
