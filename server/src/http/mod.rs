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

pub mod jobs;
pub mod process;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
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
use crate::coordinator::events::{History, MovesCount, Recent};
use crate::coordinator::policy::Priority;
use crate::coordinator::state::{REJECT_LABELS, WorkerView};

/// How often the dashboard's stream sends a status.
const STREAM_EVERY: Duration = Duration::from_millis(500);

const DASHBOARD: &str = include_str!("dashboard.html");

/// Serves until `shutdown`; open dashboard streams end then too.
pub async fn run(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let addr = crate::telemetry::addr(listener.local_addr().ok());
    tracing::info!(%addr, "http endpoint listening");
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
    let jobs = jobs::router(shared.clone());
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

fn current(shared: &Shared) -> Status {
    let (s, _) = shared.snapshot();
    let t = shared.traffic();
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
        history: shared.events().history(),
        sequence: t.newest_sequence,
    }
}

async fn status(State(app): State<App>) -> Json<Status> {
    Json(current(&app.shared))
}

async fn stream(State(app): State<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut ticks = tokio::time::interval(STREAM_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = app.shutdown.clone();
    let events = tokio_stream::wrappers::IntervalStream::new(ticks)
        .take_while(move |_| !shutdown.is_cancelled())
        .map(move |_| {
            let status = current(&app.shared);
            Ok(Event::default()
                .event("status")
                .json_data(&status)
                .unwrap_or_else(|_| Event::default().event("status").data("{}")))
        });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// Label sets of the metric families.
type Labels = Vec<(String, String)>;

/// One label; the value escaped as both text formats want (prometheus-client
/// writes label values as given).
fn label(key: &str, value: &str) -> Labels {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    vec![(key.to_string(), escaped)]
}

/// The two text formats `/metrics` speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsFormat {
    /// The Prometheus text format 0.0.4: what a plain scrape gets, and
    /// what `promtool check metrics` reads.
    Prometheus,
    /// OpenMetrics 1.0.0: for a scraper that asks for it
    /// (`Accept: application/openmetrics-text`), as Prometheus does.
    OpenMetrics,
}

impl MetricsFormat {
    /// Picks the format from an `Accept` header: OpenMetrics when it is
    /// accepted (a quality above 0) at least as much as plain text.
    pub fn negotiate(accept: Option<&str>) -> MetricsFormat {
        let Some(accept) = accept else {
            return MetricsFormat::Prometheus;
        };
        let mut open = 0.0f64;
        let mut plain = 0.0f64;
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => open = open.max(q),
                "text/plain" => plain = plain.max(q),
                _ => {}
            }
        }
        if open > 0.0 && open >= plain {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Prometheus
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            MetricsFormat::OpenMetrics => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }
}

async fn metrics(State(app): State<App>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = MetricsFormat::negotiate(accept);
    match encode_metrics(&app.shared, format) {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Everything `/metrics` serves, in `format`. Help texts carry no final
/// full stop: prometheus-client adds one.
pub fn encode_metrics(shared: &Shared, format: MetricsFormat) -> Result<String, std::fmt::Error> {
    let mut root = Registry::default();
    register_process(&mut root, &process::read());
    colball_metrics(shared, root.sub_registry_with_prefix("colball"));
    let mut body = String::new();
    encode(&mut body, &root)?;
    Ok(match format {
        MetricsFormat::OpenMetrics => body,
        MetricsFormat::Prometheus => openmetrics_to_prometheus(&body),
    })
}

/// The standard `process_*` families, those that could be read.
fn register_process(registry: &mut Registry, p: &process::ProcessStats) {
    if let Some(v) = p.cpu_seconds {
        let c = Counter::<f64, AtomicU64>::default();
        c.inc_by(v);
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            c,
        );
    }
    let mut gauge = |name: &str, help: &str, value: Option<f64>| {
        if let Some(v) = value {
            let g = Gauge::<f64, AtomicU64>::default();
            g.set(v);
            registry.register(name, help, g);
        }
    };
    gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes",
        p.resident_bytes.map(|b| b as f64),
    );
    gauge(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes",
        p.virtual_bytes.map(|b| b as f64),
    );
    gauge(
        "process_open_fds",
        "Number of open file descriptors",
        p.open_fds.map(|n| n as f64),
    );
    gauge(
        "process_max_fds",
        "Maximum number of open file descriptors",
        p.max_fds.map(|n| n as f64),
    );
    gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds",
        p.start_time_seconds,
    );
}

/// Rewrites OpenMetrics text as Prometheus text 0.0.4: a counter's `HELP`
/// and `TYPE` name its samples (`x_total`) rather than its family (`x`),
/// `unknown` is `untyped`, and there is no `UNIT` line nor `# EOF`.
pub fn openmetrics_to_prometheus(open: &str) -> String {
    let typed: std::collections::HashMap<&str, &str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    let mut out = String::with_capacity(open.len() + 256);
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once(' ')?;
            let kind = typed.get(name).copied().unwrap_or("");
            let (name, rest) = match (kind, *prefix) {
                ("counter", _) => (format!("{name}_total"), rest),
                ("unknown", "# TYPE ") => (name.to_string(), "untyped"),
                _ => (name.to_string(), rest),
            };
            Some(format!("{prefix}{name} {rest}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

fn colball_metrics(shared: &Shared, registry: &mut Registry) {
    let (s, cache_entries) = shared.snapshot();
    let traffic = shared.traffic();
    let build = Family::<Labels, Gauge>::default();
    build
        .get_or_create(&label("version", env!("CARGO_PKG_VERSION")))
        .set(1);
    registry.register(
        "build_info",
        "The coordinator's version (the value is always 1)",
        build,
    );
    let mut gauge = |name: &str, help: &str, value: u64| {
        let g: Gauge = Gauge::default();
        g.set(value as i64);
        registry.register(name, help, g);
    };
    gauge("workers", "Connected workers", s.workers as u64);
    gauge("slots", "Solver slots over all workers", s.slots);
    gauge("queued", "Puzzles waiting for a worker", s.queued as u64);
    gauge("in_flight", "Puzzles held by workers", s.in_flight as u64);
    gauge(
        "pending",
        "Puzzles admitted and not yet answered",
        s.pending as u64,
    );
    gauge("batches", "Open requests", s.batches as u64);
    gauge(
        "held",
        "Results admitted and not yet read by their clients (bounded by --max-pending)",
        s.held as u64,
    );

    gauge(
        "result_cache_entries",
        "Entries of the coordinator's result cache",
        cache_entries as u64,
    );
    let mut counter = |name: &str, help: &str, value: u64| {
        let c: Counter = Counter::default();
        c.inc_by(value);
        registry.register(name, help, c);
    };
    counter("solved", "Puzzles solved by workers", s.counters.solved);
    counter(
        "failed",
        "Puzzles that got an error result from the cluster",
        s.counters.failed,
    );
    counter(
        "redispatched",
        "Puzzles re-dispatched after a worker was lost",
        s.counters.redispatched,
    );
    counter(
        "workers_lost",
        "Workers lost while holding work or without leaving cleanly",
        s.counters.workers_lost,
    );
    counter(
        "cancelled",
        "Puzzles cancelled because their client went away",
        s.counters.cancelled,
    );
    counter(
        "result_errors",
        "Error results sent to clients (invalid puzzles, puzzles given up on)",
        traffic.errors,
    );
    counter(
        "workers_quarantined",
        "Workers quarantined because an answer of theirs failed the check",
        s.counters.quarantined,
    );
    counter(
        "tasks_timed_out",
        "Workers lost for holding a task past --task-timeout-secs",
        s.counters.timed_out,
    );
    counter(
        "audits_passed",
        "Audited answers another worker confirmed",
        s.counters.audits_passed,
    );
    let (hits, misses) = shared.cache().counts();
    counter(
        "result_cache_hits",
        "Puzzles answered from the coordinator's result cache",
        hits,
    );
    counter(
        "result_cache_misses",
        "Puzzles looked up in the result cache and dispatched",
        misses,
    );
    let answered = Family::<Labels, Counter>::default();
    for (how, n) in &traffic.by_strategy {
        answered.get_or_create(&label("strategy", how)).inc_by(*n);
    }
    registry.register(
        "answered",
        "Answers sent to clients, by strategy (`result_cache`: the coordinator's cache; `cache`: a worker's)",
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
        "Puzzles waiting for a worker, by priority class",
        depth,
    );
    let rejected = Family::<Labels, Counter>::default();
    for (reason, n) in REJECT_LABELS.iter().zip(s.counters.rejected) {
        rejected.get_or_create(&label("reason", reason)).inc_by(n);
    }
    registry.register(
        "results_rejected",
        "Worker answers refused (never delivered nor cached), by reason",
        rejected,
    );
    registry.register(
        "solve_latency_seconds",
        "Time workers spent on each puzzle they solved",
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
        registry,
        "worker_cache_hits",
        "Puzzles a worker answered from its solver cache",
        &|w| w.cache_hits,
    );
    per_worker(
        registry,
        "worker_cache_misses",
        "Solver cache lookups that missed, by worker",
        &|w| w.cache_misses,
    );
    per_worker(
        registry,
        "worker_cache_evictions",
        "Entries evicted from a worker's solver cache",
        &|w| w.cache_evictions,
    );
    per_worker(
        registry,
        "worker_table_builds",
        "Distance tables a worker built",
        &|w| w.table_builds,
    );
    per_worker(
        registry,
        "worker_table_hits",
        "Puzzles a worker answered from a distance table",
        &|w| w.table_hits,
    );
    let load = Family::<Labels, Gauge>::default();
    for w in &s.worker_list {
        load.get_or_create(&label("worker", &w.name))
            .set(w.in_flight as i64);
    }
    registry.register("worker_in_flight", "Puzzles a worker holds", load);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_asked_for_and_plain_text_is_the_default() {
        use MetricsFormat::*;
        assert_eq!(MetricsFormat::negotiate(None), Prometheus);
        assert_eq!(MetricsFormat::negotiate(Some("*/*")), Prometheus);
        assert_eq!(MetricsFormat::negotiate(Some("text/plain")), Prometheus);
        // What Prometheus 2.x sends.
        let prometheus = "application/openmetrics-text;version=1.0.0,\
            application/openmetrics-text;version=0.0.1;q=0.75,\
            text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(MetricsFormat::negotiate(Some(prometheus)), OpenMetrics);
        assert_eq!(
            MetricsFormat::negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Prometheus
        );
        assert_eq!(
            MetricsFormat::negotiate(Some("application/openmetrics-text;q=0")),
            Prometheus
        );
    }

    #[test]
    fn counters_are_named_by_their_samples_in_prometheus_text() {
        let open = "# HELP x_answered Answers.\n# TYPE x_answered counter\n\
                    x_answered_total{s=\"a\"} 3\n\
                    # HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n\
                    # HELP x_t_seconds Time.\n# TYPE x_t_seconds histogram\n# UNIT x_t_seconds seconds\n\
                    # HELP x_odd Odd.\n# TYPE x_odd unknown\nx_odd 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_prometheus(open),
            "# HELP x_answered_total Answers.\n# TYPE x_answered_total counter\n\
             x_answered_total{s=\"a\"} 3\n\
             # HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n\
             # HELP x_t_seconds Time.\n# TYPE x_t_seconds histogram\n\
             # HELP x_odd Odd.\n# TYPE x_odd untyped\nx_odd 2\n"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            label("worker", "a\"b\\c\nd"),
            vec![("worker".to_string(), "a\\\"b\\\\c\\nd".to_string())]
        );
    }
}
