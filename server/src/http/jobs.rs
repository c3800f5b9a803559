//! The job API over plain HTTP, on the coordinator's `--http` endpoint, for
//! dashboards and scripts that do not speak gRPC. The same jobs as
//! `colball.v1.Jobs` (same store, same ownership):
//!
//! - `POST /api/v1/jobs?priority=bulk&name=NAME&order=input|any`: the
//!   body is a puzzle file (classic or JSON Lines, as `colball solve`
//!   reads), read as it arrives and stored a chunk at a time, so an upload
//!   of any size holds one chunk in memory (its size is bounded by
//!   `--max-job-puzzles`); a line that does not parse ends it with 400
//!   naming the line, and nothing of it is kept; `order=any` lets results
//!   come as they are solved; 201 with `{"id": ..., "puzzles": N,
//!   "durable": B}` once every puzzle is stored;
//! - `GET /api/v1/jobs`: the caller's jobs, newest first;
//! - `GET /api/v1/jobs/ID`: one job;
//! - `GET /api/v1/jobs/ID/results?from=N&follow=1&format=ndjson|csv`: its
//!   results in input order (or, for `order=any`, the order they were
//!   stored) as NDJSON, the same objects as `colball solve --output
//!   jsonl`, or as CSV with a header row;
//! - `POST /api/v1/jobs/ID/cancel`: the job, cancelled unless it had
//!   finished;
//! - `DELETE /api/v1/jobs/ID`: 204;
//! - `GET /api/v1/openapi.json`: the OpenAPI 3.1 document of all of it
//!   ([`api`](super::api)), without a token.
//!
//! With client tokens configured every call needs `Authorization: Bearer
//! TOKEN` or `?token=TOKEN` (401 otherwise) and the token's name is the job's owner; without
//! tokens the owner is the caller's IP address. Every error is a JSON
//! object `{"error": "..."}` with a fitting status (the gRPC one's, where
//! there is one), the framework's own refusals included.

use std::net::SocketAddr;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{any, get};
use colball_proto::egress;
use colball_solver::format::{Read, Reader};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tracing::Instrument as _;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{
    ApiDoc, ApiError, ErrorResult, Format, Job, JobRefusals, JobSubmission, ListRefusals, Order,
    ResultRecord, ResultsQuery, SolvedResult, SubmitQuery, Submitted, TokenQuery,
};
use super::submission;
use crate::app::App;
use crate::jobs::webhooks::allow::MAX_URL;
use crate::jobs::{Entry, JobError, JobSpec, NAME_CHARS, StoreError, SubmitError};

/// Puzzles of an upload stored at a time.
const CHUNK: usize = 4096;

/// The job API's routes and its OpenAPI document, made together from the
/// handlers' attributes.
fn routes() -> (Router<App>, utoipa::openapi::OpenApi) {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(list, submit))
        .routes(routes!(one, remove))
        .routes(routes!(cancel))
        .routes(routes!(results))
        .split_for_parts()
}

/// The job API's OpenAPI document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    routes().1
}

pub fn router(app: App) -> Router {
    let (routes, document) = routes();
    let document = document
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    routes
        .route(
            "/api/v1/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], document) }),
        )
        .route("/api/v1/{*rest}", any(no_such_route))
        .route_layer(middleware::from_fn(traced))
        .layer(middleware::map_response(json_errors))
        .with_state(app)
}

/// Each call in a span (`request`, named after its method and route), in
/// the trace its `traceparent` header names, if any: a job submitted here
/// runs in its submit's trace. (A download's span ends when its body
/// starts.)
async fn traced(request: axum::extract::Request, next: middleware::Next) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("", |p| p.as_str());
    let span = tracing::info_span!(
        "request",
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        http.route = route,
        http.response.status_code = tracing::field::Empty,
    );
    crate::telemetry::adopt_headers(&span, request.headers());
    let response = next.run(request).instrument(span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    response
}

pub(super) fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (
        code,
        Json(ApiError {
            error: message.into(),
        }),
    )
        .into_response()
}

async fn no_such_route() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route: the job API is /api/v1/jobs, /api/v1/jobs/ID, /api/v1/jobs/ID/cancel and /api/v1/jobs/ID/results (described in /api/v1/openapi.json)",
    )
}

/// Gives every error of the job API one shape, `{"error": "..."}`: those
/// the handlers write already have it; the others (a query or path that
/// does not parse, a method the route does not take) come from the HTTP
/// framework as plain text, or empty, and are
/// rewritten with the same status and headers.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_string()
    } else {
        text
    };
    let rewritten = error(status, message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    let (new_parts, body) = rewritten.into_parts();
    parts.headers.extend(new_parts.headers);
    Response::from_parts(parts, body)
}

impl IntoResponse for JobError {
    fn into_response(self) -> Response {
        let code = match &self {
            JobError::Invalid(_) => StatusCode::BAD_REQUEST,
            JobError::TooBig(_) => StatusCode::PAYLOAD_TOO_LARGE,
            JobError::StoreLimit { .. } | JobError::Store(StoreError::Full(_)) => {
                StatusCode::INSUFFICIENT_STORAGE
            }
            JobError::KeyTaken(_) | JobError::Incomplete(_) => StatusCode::CONFLICT,
            JobError::NotFound(_) => StatusCode::NOT_FOUND,
            JobError::OverQuota(over) => {
                let mut response = error(StatusCode::TOO_MANY_REQUESTS, over.message.clone());
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, over.retry_after.as_secs().into());
                return response;
            }
            JobError::ShuttingDown
            | JobError::Store(StoreError::Unavailable(_) | StoreError::Conflict(_)) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            JobError::Store(e) => {
                tracing::error!(error = %e, "job store");
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        error(code, self.to_string())
    }
}

/// Who calls: the name of the client token it sent, or its IP address
/// without tokens (as `client_of` for gRPC calls). The token comes as
/// `Authorization: Bearer` or `?token=`; a missing or wrong one is refused
/// with 401 before the handler runs.
struct Client(String);

impl FromRequestParts<App> for Client {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Client, Response> {
        let check = crate::auth::check_clients(app.access.tokens().clone());
        match check.verify(crate::http::token_of(&parts.headers, &parts.uri)) {
            Ok(Some(name)) => Ok(Client(name.to_string())),
            Ok(None) => Ok(Client(
                parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string()),
            )),
            Err(message) => Err(error(StatusCode::UNAUTHORIZED, message)),
        }
    }
}

/// Submit puzzles as a job.
///
/// The body is either a puzzle file (`text/plain`, or any type but JSON:
/// classic or JSON Lines, as `colball solve` reads), read as it arrives and
/// stored a chunk at a time, the job running while it arrives; or one JSON
/// document (`application/json`, a `JobSubmission`: the puzzles and the
/// options), read as it arrives and stored once it has ended. A line or
/// record that does not parse is answered with 400 naming its line, or its
/// index and field, and nothing of the job is kept. The query's options
/// apply to both; a JSON document's own options come before them. The
/// answer comes once every puzzle is stored.
#[utoipa::path(
    post,
    path = "/api/v1/jobs",
    tag = "jobs",
    operation_id = "submit",
    params(SubmitQuery),
    request_body(
        description = "The puzzles: a puzzle file (classic or JSON Lines), or a JSON document with the job's options",
        content(
            (String = "text/plain", example = "2 2\nBB\nBR\nBB\nRR\n"),
            (JobSubmission = "application/json", example = json!({
                "puzzles": [{"id": "p1", "start": ["BB", "BR"], "target": ["BB", "RR"]}],
                "priority": "bulk", "name": "round 2", "any_order": false
            })),
        ),
    ),
    responses(
        (status = 201, description = "Every puzzle is stored", body = Submitted),
        (status = 400, description = "A line, a record or a query parameter that does not parse, or a webhook URL no `--webhook-allow` pattern allows", body = ApiError),
        (status = 401, description = "A client token is needed and was missing or wrong", body = ApiError),
        (status = 413, description = "More puzzles than `--max-job-puzzles`", body = ApiError),
        (status = 503, description = "The coordinator is shutting down or its store is unavailable", body = ApiError),
        (status = 507, description = "The job store is full (`--max-store-mib`)", body = ApiError),
    ),
)]
async fn submit(
    State(app): State<App>,
    Client(client): Client,
    Query(q): Query<SubmitQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut spec = JobSpec {
        name: q.name,
        any_order: q.order == Order::Any,
        webhook: (!q.webhook.is_empty()).then_some(q.webhook),
        ..JobSpec::new(q.priority.into())
    };
    if !is_json(&headers) {
        return stored(&app, app.jobs.submit(&client, spec, upload(body)).await);
    }
    // The query's options are checked even where the document's own
    // options stand in for them: each part of a request holds to the
    // contract on its own.
    if spec.name.chars().count() > NAME_CHARS {
        let message = format!("query parameter name: at most {NAME_CHARS} characters");
        return error(StatusCode::BAD_REQUEST, message);
    }
    if spec.webhook.as_ref().is_some_and(|w| w.len() > MAX_URL) {
        let message = format!("query parameter webhook: at most {MAX_URL} bytes");
        return error(StatusCode::BAD_REQUEST, message);
    }
    let (options, chunks) = match submission::read(body, app.jobs.max_job_puzzles()).await {
        Ok(read) => read,
        Err((code, message)) => return error(code, message),
    };
    if let Some(priority) = options.priority {
        spec.priority = priority.into();
    }
    if let Some(name) = options.name {
        spec.name = name;
    }
    if let Some(any_order) = options.any_order {
        spec.any_order = any_order;
    }
    if let Some(webhook) = options.webhook.filter(|w| !w.is_empty()) {
        spec.webhook = Some(webhook);
    }
    stored(&app, app.jobs.submit(&client, spec, chunks).await)
}

/// Whether a request's body is JSON (`application/json`, with or without
/// parameters).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The answer to a submission.
fn stored<E: IntoResponse>(
    app: &App,
    submitted: Result<crate::jobs::JobRow, SubmitError<E>>,
) -> Response {
    match submitted {
        Ok(row) => (
            StatusCode::CREATED,
            Json(Submitted {
                id: row.id(),
                puzzles: row.puzzles,
                durable: app.jobs.durable(),
            }),
        )
            .into_response(),
        Err(SubmitError::Job(e)) => e.into_response(),
        Err(SubmitError::Upload(refused)) => refused.into_response(),
    }
}

/// An upload being read: the body, the reader (until the body ends), and
/// the puzzles read and not yet handed on.
struct UploadReader {
    body: axum::body::BodyDataStream,
    reader: Option<Reader>,
    read: Vec<Read>,
}

/// The puzzles of an uploaded file as they arrive, up to [`CHUNK`] at a
/// time; an error (what is wrong and on which line, or a body that broke
/// off) ends it.
fn upload(body: Body) -> impl Stream<Item = Result<Vec<Entry>, Response>> + Unpin {
    let upload = UploadReader {
        body: body.into_data_stream(),
        reader: Some(Reader::new()),
        read: Vec::new(),
    };
    Box::pin(futures_util::stream::unfold(upload, |mut up| async move {
        loop {
            if up.read.len() >= CHUNK || (up.reader.is_none() && !up.read.is_empty()) {
                let n = up.read.len().min(CHUNK);
                let chunk = up
                    .read
                    .drain(..n)
                    .map(|r| Entry::Puzzle {
                        id: r.id.into(),
                        puzzle: r.puzzle,
                    })
                    .collect();
                return Some((Ok(chunk), up));
            }
            let reader = up.reader.as_mut()?;
            let outcome = match up.body.next().await {
                Some(Ok(piece)) => reader.push(&piece, &mut up.read).map_err(|e| e.to_string()),
                Some(Err(e)) => Err(format!("the request body broke off: {e}")),
                None => up
                    .reader
                    .take()
                    .map_or(Ok(()), |reader| reader.finish(&mut up.read))
                    .map_err(|e| e.to_string()),
            };
            if let Err(message) = outcome {
                up.reader = None;
                up.read.clear();
                return Some((Err(error(StatusCode::BAD_REQUEST, message)), up));
            }
        }
    }))
}

/// The caller's jobs, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    tag = "jobs",
    operation_id = "list",
    params(TokenQuery),
    responses(
        (status = 200, description = "The caller's jobs", body = Vec<Job>),
        ListRefusals,
    ),
)]
async fn list(
    State(app): State<App>,
    Client(client): Client,
    Query(_): Query<TokenQuery>,
) -> Response {
    match app.jobs.list(&client).await {
        Ok(rows) => Json(
            rows.into_iter()
                .map(|r| Job::from(app.jobs.status(r)))
                .collect::<Vec<_>>(),
        )
        .into_response(),
        Err(e) => e.into_response(),
    }
}

/// One job: its state, counts and pace.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}",
    tag = "jobs",
    operation_id = "status",
    params(("id" = String, Path, description = "The job's id"), TokenQuery),
    responses(
        (status = 200, description = "The job", body = Job),
        JobRefusals,
    ),
)]
async fn one(
    State(app): State<App>,
    Client(client): Client,
    Path(id): Path<String>,
    Query(_): Query<TokenQuery>,
) -> Response {
    match app.jobs.owned(&id, &client).await {
        Ok(row) => Json(Job::from(app.jobs.status(row))).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Cancel a job unless it has finished; the job as it is now.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{id}/cancel",
    tag = "jobs",
    operation_id = "cancel",
    params(("id" = String, Path, description = "The job's id"), TokenQuery),
    responses(
        (status = 200, description = "The job", body = Job),
        JobRefusals,
    ),
)]
async fn cancel(
    State(app): State<App>,
    Client(client): Client,
    Path(id): Path<String>,
    Query(_): Query<TokenQuery>,
) -> Response {
    match app.jobs.cancel(&id, &client).await {
        Ok(row) => Json(Job::from(app.jobs.status(row))).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Delete a job (cancelling it first if it runs), with its results.
#[utoipa::path(
    delete,
    path = "/api/v1/jobs/{id}",
    tag = "jobs",
    operation_id = "delete",
    params(("id" = String, Path, description = "The job's id"), TokenQuery),
    responses(
        (status = 204, description = "Deleted"),
        JobRefusals,
    ),
)]
async fn remove(
    State(app): State<App>,
    Client(client): Client,
    Path(id): Path<String>,
    Query(_): Query<TokenQuery>,
) -> Response {
    match app.jobs.delete(&id, &client).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

/// The CSV header row.
const CSV_HEADER: &str = "id,moves,solution,strategy,time_us,error\n";

/// A job's results, from `from` on: in input order (or, for a job
/// submitted with `order=any`, the order they were stored).
///
/// NDJSON gives one JSON object per line, as `colball solve --output
/// jsonl` prints them; CSV a header row (`id,moves,solution,strategy,
/// time_us,error`) and one row per puzzle. With `follow`, the response
/// stays open until the job ends. If the stream ends early (the job was
/// deleted), its last NDJSON line is `{"error": ...}` (for CSV, a row
/// with only the error).
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{id}/results",
    tag = "jobs",
    operation_id = "results",
    params(("id" = String, Path, description = "The job's id"), ResultsQuery),
    responses(
        (status = 200, description = "The results, one per line", content(
            (ResultRecord = "application/x-ndjson"),
            (String = "text/csv", example = "id,moves,solution,strategy,time_us,error\n1,3,r12 c21 r22,bidir,41,\n"),
        )),
        JobRefusals,
    ),
)]
async fn results(
    State(app): State<App>,
    Client(client): Client,
    Path(id): Path<String>,
    Query(q): Query<ResultsQuery>,
) -> Response {
    let job = match app.jobs.followed(&id, &client).await {
        Ok(job) => job,
        Err(e) => return e.into_response(),
    };
    let rx = app.jobs.results(job, q.from, q.follow);
    let format = q.format;
    let records = ReceiverStream::new(rx).map(move |r| {
        let record = match r {
            Ok(r) => record(&r),
            Err(e) => ResultRecord::Broken(ApiError {
                error: e.to_string(),
            }),
        };
        Ok::<_, std::convert::Infallible>(match format {
            Format::Ndjson => {
                let mut line = serde_json::to_string(&record).expect("a record serializes");
                line.push('\n');
                line
            }
            Format::Csv => csv_row(&record),
        })
    });
    let (content_type, body) = match format {
        Format::Ndjson => ("application/x-ndjson", Body::from_stream(records)),
        Format::Csv => (
            "text/csv; charset=utf-8; header=present",
            Body::from_stream(
                futures_util::stream::once(async { Ok(CSV_HEADER.to_string()) }).chain(records),
            ),
        ),
    };
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// A result as `colball solve --output jsonl` prints it.
fn record(r: &egress::PuzzleResult) -> ResultRecord {
    match &r.outcome {
        Some(egress::Outcome::Solved(s)) => ResultRecord::Solved(SolvedResult {
            id: r.id.to_string(),
            moves: s.moves,
            solution: s.solution.to_string(),
            strategy: s.strategy.to_string(),
            time_us: s.time_us,
        }),
        Some(egress::Outcome::Error(e)) => ResultRecord::Failed(ErrorResult {
            id: Some(r.id.to_string()),
            line: r.index + 1,
            error: e.message.clone(),
        }),
        None => ResultRecord::Failed(ErrorResult {
            id: Some(r.id.to_string()),
            line: r.index + 1,
            error: "no outcome".into(),
        }),
    }
}

/// A result as a CSV row (`CSV_HEADER`'s columns).
fn csv_row(record: &ResultRecord) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let row = match record {
        ResultRecord::Solved(s) => [
            s.id.clone(),
            s.moves.to_string(),
            s.solution.clone(),
            s.strategy.clone(),
            s.time_us.to_string(),
            String::new(),
        ],
        ResultRecord::Failed(e) => [
            e.id.clone().unwrap_or_default(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            e.error.clone(),
        ],
        ResultRecord::Broken(e) => [
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            e.error.clone(),
        ],
    };
    // Writing to memory does not fail.
    let _ = writer.write_record(&row);
    String::from_utf8(writer.into_inner().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn body_of(response: Response) -> (StatusCode, serde_json::Value) {
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn the_framework_s_plain_errors_become_json_with_their_status() {
        let limit = (
            StatusCode::PAYLOAD_TOO_LARGE,
            "Failed to buffer the request body: length limit exceeded",
        )
            .into_response();
        assert_eq!(
            body_of(json_errors(limit).await).await,
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({ "error": "Failed to buffer the request body: length limit exceeded" })
            )
        );
        let query = (
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        )
            .into_response();
        assert_eq!(
            body_of(json_errors(query).await).await,
            (
                StatusCode::BAD_REQUEST,
                json!({ "error": "Failed to deserialize query string" })
            )
        );
        let mut method = StatusCode::METHOD_NOT_ALLOWED.into_response();
        method
            .headers_mut()
            .insert(header::ALLOW, "GET,POST".parse().unwrap());
        let rewritten = json_errors(method).await;
        assert_eq!(rewritten.headers()[header::ALLOW], "GET,POST");
        assert_eq!(
            body_of(rewritten).await,
            (
                StatusCode::METHOD_NOT_ALLOWED,
                json!({ "error": "Method Not Allowed" })
            )
        );
        // JSON errors and successes pass as they are.
        let own = error(StatusCode::NOT_FOUND, "no job");
        assert_eq!(
            body_of(json_errors(own).await).await,
            (StatusCode::NOT_FOUND, json!({ "error": "no job" }))
        );
        let ok = json_errors(StatusCode::NO_CONTENT.into_response()).await;
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
    }
}
