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
//! - `GET /api/v1/jobs/ID/results?from=N&follow=1`: its results in input
//!   order (or, for `order=any`, the order they were stored) as NDJSON,
//!   the same objects as `colball solve --output jsonl`;
//! - `DELETE /api/v1/jobs/ID`: 204.
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
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{any, get};
use colball_proto::{egress, v1};
use colball_solver::format::{Read, Reader, jsonl};
use serde::Deserialize;
use serde_json::json;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::app::App;
use crate::jobs::{Entry, JobError, JobRow, StoreError, SubmitError};

/// Puzzles of an upload stored at a time.
const CHUNK: usize = 4096;

pub fn router(app: App) -> Router {
    Router::new()
        .route("/api/v1/jobs", get(list).post(submit))
        .route("/api/v1/jobs/{id}", get(one).delete(remove))
        .route("/api/v1/jobs/{id}/results", get(results))
        .route("/api/v1/{*rest}", any(no_such_route))
        .layer(middleware::map_response(json_errors))
        .with_state(app)
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({ "error": message.into() }))).into_response()
}

async fn no_such_route() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "no such route: the job API is /api/v1/jobs, /api/v1/jobs/ID and /api/v1/jobs/ID/results",
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
struct Caller(String);

impl FromRequestParts<App> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Caller, Response> {
        let check = crate::auth::check_clients(app.scheduler.tokens().clone());
        match check.verify(crate::http::token_of(&parts.headers, &parts.uri)) {
            Ok(Some(name)) => Ok(Caller(name.to_string())),
            Ok(None) => Ok(Caller(
                parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map_or_else(|| "unknown".to_string(), |c| c.0.ip().to_string()),
            )),
            Err(message) => Err(error(StatusCode::UNAUTHORIZED, message)),
        }
    }
}

fn job_json(row: &JobRow) -> serde_json::Value {
    let job = row.to_wire();
    let state = job.state_name();
    json!({
        "id": job.id, "name": job.name, "state": state, "puzzles": job.puzzles,
        "solved": job.solved, "errors": job.errors, "remaining": job.remaining,
        "created_unix_ms": job.created_unix_ms, "finished_unix_ms": job.finished_unix_ms,
        "failure": job.failure, "any_order": job.any_order,
    })
}

#[derive(Deserialize)]
struct SubmitQuery {
    priority: Option<String>,
    #[serde(default)]
    name: String,
    /// `any`: results in the order they are solved (`JobOptions.any_order`).
    order: Option<String>,
}

async fn submit(
    State(app): State<App>,
    Caller(client): Caller,
    Query(q): Query<SubmitQuery>,
    body: Body,
) -> Response {
    let priority = match q.priority.as_deref() {
        None | Some("bulk") => v1::Priority::Bulk,
        Some("normal") => v1::Priority::Normal,
        Some("interactive") => v1::Priority::Interactive,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("priority {other:?}: expected interactive, normal or bulk"),
            );
        }
    };
    let any_order = match q.order.as_deref() {
        None | Some("input") => false,
        Some("any") => true,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("order {other:?}: expected input or any"),
            );
        }
    };
    let options = v1::JobOptions {
        priority: priority as i32,
        name: q.name,
        fail_without_workers: false,
        any_order,
        key: String::new(),
        puzzles: 0,
    };
    match app.jobs.submit(&client, options, upload(body)).await {
        Ok(row) => (
            StatusCode::CREATED,
            Json(json!({ "id": row.id(), "puzzles": row.puzzles, "durable": app.jobs.durable() })),
        )
            .into_response(),
        Err(SubmitError::Job(e)) => e.into_response(),
        Err(SubmitError::Upload(response)) => response,
    }
}

/// An upload being read: the body, the reader (until the body ends), and
/// the puzzles read and not yet handed on.
struct Upload {
    body: axum::body::BodyDataStream,
    reader: Option<Reader>,
    read: Vec<Read>,
}

/// The puzzles of an uploaded file as they arrive, up to [`CHUNK`] at a
/// time; an error (what is wrong and on which line, or a body that broke
/// off) ends it.
fn upload(body: Body) -> impl Stream<Item = Result<Vec<Entry>, Response>> + Unpin {
    let upload = Upload {
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

async fn list(State(app): State<App>, Caller(client): Caller) -> Response {
    match app.jobs.list(&client).await {
        Ok(rows) => Json(rows.iter().map(job_json).collect::<Vec<_>>()).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn one(State(app): State<App>, Caller(client): Caller, Path(id): Path<String>) -> Response {
    match app.jobs.owned(&id, &client).await {
        Ok(row) => Json(job_json(&row)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn remove(
    State(app): State<App>,
    Caller(client): Caller,
    Path(id): Path<String>,
) -> Response {
    match app.jobs.delete(&id, &client).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
struct ResultsQuery {
    #[serde(default)]
    from: u64,
    #[serde(default)]
    follow: u8,
}

async fn results(
    State(app): State<App>,
    Caller(client): Caller,
    Path(id): Path<String>,
    Query(q): Query<ResultsQuery>,
) -> Response {
    let row = match app.jobs.owned(&id, &client).await {
        Ok(row) => row,
        Err(e) => return e.into_response(),
    };
    let rx = app.jobs.results(row, q.from, q.follow != 0);
    let lines = ReceiverStream::new(rx).map(|r| {
        let line = match r {
            Ok(r) => record(&r),
            Err(e) => json!({ "error": e.to_string() }).to_string(),
        };
        Ok::<_, std::convert::Infallible>(format!("{line}\n"))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}

/// A result as `colball solve --output jsonl` prints it.
fn record(r: &egress::PuzzleResult) -> String {
    match &r.outcome {
        Some(egress::Outcome::Solved(s)) => jsonl::to_line(&jsonl::SolvedRecord {
            id: r.id.to_string(),
            moves: s.moves,
            solution: s.solution.to_string(),
            strategy: s.strategy.to_string(),
            time_us: s.time_us,
        }),
        Some(egress::Outcome::Error(e)) => jsonl::to_line(&jsonl::ErrorRecord {
            id: Some(r.id.to_string()),
            line: r.index as usize + 1,
            error: e.message.clone(),
        }),
        None => json!({ "id": r.id.as_str(), "error": "no outcome" }).to_string(),
    }
}

#[cfg(test)]
mod tests {
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
