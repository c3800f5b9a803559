//! The coordinator's HTTP endpoint (`--http ADDR`), served with axum:
//!
//! - `GET /`: the live dashboard (one HTML page with its script, served
//!   from the binary; no front-end build);
//! - `GET /api/status`: the dashboard's data as one JSON object;
//! - `GET /api/stream`: the same object every half second as server-sent
//!   events (`event: status`), which the dashboard follows;
//! - `GET /metrics`: Prometheus metrics (OpenMetrics text format);
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

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::coordinator::Shared;
use crate::coordinator::events::Recent;
use crate::coordinator::policy::Priority;
use crate::coordinator::state::{REJECT_LABELS, WorkerView};

/// How often the dashboard's stream sends a status.
const STREAM_EVERY: Duration = Duration::from_millis(500);

const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves until `shutdown`; open dashboard streams end then too.
pub async fn run(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    tracing::info!(addr = ?listener.local_addr().ok(), "http endpoint listening");
    let app = router(shared, shutdown.clone());
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

#[derive(Clone)]
struct App {
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

fn router(shared: Arc<Shared>, shutdown: CancellationToken) -> Router {
    let jobs = crate::http_jobs::router(shared.clone());
    let app = App { shared, shutdown };
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
async fn require_token(State(app): State<App>, request: Request, next: Next) -> Response {
    let check = crate::auth::check_clients(app.shared.tokens().clone());
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix(crate::auth::SCHEME));
    let query = request
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("token=")));
    match check.verify(header.or(query)) {
        Ok(_) => next.run(request).await,
        Err(message) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            format!("{message}\n"),
        )
            .into_response(),
    }
}

async fn dashboard() -> Html<&'static str> {
    Html(DASHBOARD)
}

async fn healthz(State(app): State<App>) -> (StatusCode, &'static str) {
    if app.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else {
        (StatusCode::OK, "ok\n")
    }
}

async fn readyz(State(app): State<App>) -> (StatusCode, &'static str) {
    if app.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    } else if app.shared.snapshot().0.workers == 0 {
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
    /// Answers per second over the last interval (0 for `/api/status`).
    throughput: f64,
    /// Answers from a cache (the coordinator's or a worker's) over all
    /// answers.
    cache_hit_rate: f64,
    by_strategy: std::collections::BTreeMap<String, u64>,
    errors: u64,
    redispatched: u64,
    workers_lost: u64,
    p50_us: u64,
    p99_us: u64,
    recent_results: Vec<Recent>,
    recent_failures: Vec<Recent>,
    sequence: u64,
}

fn current(shared: &Shared) -> Status {
    let (s, _) = shared.snapshot();
    let t = shared.traffic();
    let answered: u64 = t.by_strategy.values().sum();
    let cached: u64 = ["cache", "result_cache"]
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
        throughput: 0.0,
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
        sequence: t.newest_sequence,
    }
}

async fn status(State(app): State<App>) -> Json<Status> {
    Json(current(&app.shared))
}

async fn stream(State(app): State<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut ticks = tokio::time::interval(STREAM_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Instant, u64)> = None;
    let shutdown = app.shutdown.clone();
    let events = tokio_stream::wrappers::IntervalStream::new(ticks)
        .take_while(move |_| !shutdown.is_cancelled())
        .map(move |_| {
            let mut status = current(&app.shared);
            let now = Instant::now();
            if let Some((then, answered)) = last {
                let secs = now.duration_since(then).as_secs_f64();
                if secs > 0.0 {
                    status.throughput = status.answered.saturating_sub(answered) as f64 / secs;
                }
            }
            last = Some((now, status.answered));
            Ok(Event::default()
                .event("status")
                .json_data(&status)
                .unwrap_or_else(|_| Event::default().event("status").data("{}")))
        });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// Label sets of the metric families.
type Labels = Vec<(String, String)>;

fn label(key: &str, value: &str) -> Labels {
    vec![(key.to_string(), value.to_string())]
}

async fn metrics(State(app): State<App>) -> Response {
    let shared = &app.shared;
    let (s, cache_entries) = shared.snapshot();
    let traffic = shared.traffic();
    let mut registry = Registry::with_prefix("colball");
    let mut gauge = |name: &str, help: &str, value: u64| {
        let g: Gauge = Gauge::default();
        g.set(value as i64);
        registry.register(name, help, g);
    };
    gauge("workers", "Connected workers.", s.workers as u64);
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
        "held",
        "Results admitted and not yet read by their clients (bounded by --max-pending).",
        s.held as u64,
    );

    gauge(
        "result_cache_entries",
        "Entries of the coordinator's result cache.",
        cache_entries as u64,
    );
    let mut counter = |name: &str, help: &str, value: u64| {
        let c: Counter = Counter::default();
        c.inc_by(value);
        registry.register(name, help, c);
    };
    counter("solved", "Puzzles solved by workers.", s.counters.solved);
    counter(
        "failed",
        "Puzzles that got an error result from the cluster.",
        s.counters.failed,
    );
    counter(
        "redispatched",
        "Puzzles re-dispatched after a worker was lost.",
        s.counters.redispatched,
    );
    counter(
        "workers_lost",
        "Workers lost while holding work or without leaving cleanly.",
        s.counters.workers_lost,
    );
    counter(
        "cancelled",
        "Puzzles cancelled because their client went away.",
        s.counters.cancelled,
    );
    counter(
        "result_errors",
        "Error results sent to clients (invalid puzzles, puzzles given up on).",
        traffic.errors,
    );
    counter(
        "workers_quarantined",
        "Workers quarantined because an answer of theirs failed the check.",
        s.counters.quarantined,
    );
    counter(
        "tasks_timed_out",
        "Workers lost for holding a task past --task-timeout-secs.",
        s.counters.timed_out,
    );
    counter(
        "audits_passed",
        "Audited answers another worker confirmed.",
        s.counters.audits_passed,
    );
    let (hits, misses) = shared.cache().counts();
    counter(
        "result_cache_hits",
        "Puzzles answered from the coordinator's result cache.",
        hits,
    );
    counter(
        "result_cache_misses",
        "Puzzles looked up in the result cache and dispatched.",
        misses,
    );
    let answered = Family::<Labels, Counter>::default();
    for (how, n) in &traffic.by_strategy {
        answered.get_or_create(&label("strategy", how)).inc_by(*n);
    }
    registry.register(
        "answered",
        "Answers sent to clients, by strategy (`result_cache`: the coordinator's cache; `cache`: a worker's).",
        answered,
    );
    let depth = Family::<Labels, Gauge>::default();
    for (class, n) in Priority::ALL.iter().zip(s.queued_by_class) {
        depth
            .get_or_create(&label("class", class.name()))
            .set(n as i64);
    }
    registry.register(
        "queue_depth",
        "Puzzles waiting for a worker, by priority class.",
        depth,
    );
    let rejected = Family::<Labels, Counter>::default();
    for (reason, n) in REJECT_LABELS.iter().zip(s.counters.rejected) {
        rejected.get_or_create(&label("reason", reason)).inc_by(n);
    }
    registry.register(
        "results_rejected",
        "Worker answers refused (never delivered nor cached), by reason.",
        rejected,
    );
    registry.register(
        "solve_latency_seconds",
        "Time workers spent on each puzzle they solved.",
        shared.events().latency(),
    );
    let per_worker =
        |registry: &mut Registry, name: &str, help: &str, value: &dyn Fn(&WorkerView) -> u64| {
            let family = Family::<Labels, Counter>::default();
            for w in &s.worker_list {
                family
                    .get_or_create(&label("worker", &w.name))
                    .inc_by(value(w));
            }
            registry.register(name, help, family);
        };
    per_worker(
        &mut registry,
        "worker_cache_hits",
        "Puzzles a worker answered from its solver cache.",
        &|w| w.cache_hits,
    );
    per_worker(
        &mut registry,
        "worker_cache_misses",
        "Solver cache lookups that missed, by worker.",
        &|w| w.cache_misses,
    );
    per_worker(
        &mut registry,
        "worker_cache_evictions",
        "Entries evicted from a worker's solver cache.",
        &|w| w.cache_evictions,
    );
    per_worker(
        &mut registry,
        "worker_table_builds",
        "Distance tables a worker built.",
        &|w| w.table_builds,
    );
    let load = Family::<Labels, Gauge>::default();
    for w in &s.worker_list {
        load.get_or_create(&label("worker", &w.name))
            .set(w.in_flight as i64);
    }
    registry.register("worker_in_flight", "Puzzles a worker holds.", load);
    let mut body = String::new();
    if let Err(e) = encode(&mut body, &registry) {
        tracing::error!(error = %e, "cannot encode metrics");
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
