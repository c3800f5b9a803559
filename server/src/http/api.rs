//! The job API's contract: the JSON bodies it takes and gives, and the
//! OpenAPI 3.1 document generated from them and from the handlers'
//! `#[utoipa::path]` attributes (served at `/api/v1/openapi.json`).
//!
//! The handlers build their answers from these types, so the document
//! cannot say one thing while the API does another; CI validates the
//! document and runs Schemathesis against a live coordinator from it.

use serde::{Deserialize, Deserializer, Serialize};

use crate::jobs::JobView;
use crate::jobs::store::JobState;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, IntoResponses, Modify, OpenApi, ToSchema};

/// The document's description, above the operations.
const ABOUT: &str = "Durable colball jobs over plain HTTP: submit a puzzle file, \
read its status and progress, stream its results (NDJSON or CSV), delete it. \
The same jobs as the gRPC `colball.v1.Jobs` service. With client tokens \
configured every call needs `Authorization: Bearer TOKEN` (or `?token=TOKEN`) \
and the token's name owns the jobs; without tokens the caller's IP address \
does. Every error is `{\"error\": \"...\"}` with a fitting status.";

#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "colball job API",
        description = ABOUT,
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    modifiers(&Auth),
    security((), ("bearer" = []), ("token" = [])),
    tags((name = "jobs", description = "Durable puzzle jobs")),
)]
pub struct ApiDoc;

/// The two ways to send a client token.
struct Auth;

impl Modify for Auth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A client token (`--client-tokens-file`)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "The same token as a query parameter, for clients that cannot set headers",
            ))),
        );
    }
}

/// An error: what was wrong, in words.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"error": "no job j9-0123456789ab"}))]
#[serde(deny_unknown_fields)]
pub struct ApiError {
    pub error: String,
}

/// The refusals of a call on one job.
#[derive(Debug, IntoResponses)]
#[allow(dead_code)] // a description for the document, never built
pub enum JobRefusals {
    /// A query parameter that does not parse
    #[response(status = 400)]
    BadQuery(ApiError),
    /// A client token is needed and was missing or wrong
    #[response(status = 401)]
    Unauthorized(ApiError),
    /// No such job of the caller's
    #[response(status = 404)]
    NotFound(ApiError),
    /// The job store is unavailable
    #[response(status = 503)]
    Unavailable(ApiError),
}

/// The refusals of the list of jobs.
#[derive(Debug, IntoResponses)]
#[allow(dead_code)] // a description for the document, never built
pub enum ListRefusals {
    /// A query parameter that does not parse
    #[response(status = 400)]
    BadQuery(ApiError),
    /// A client token is needed and was missing or wrong
    #[response(status = 401)]
    Unauthorized(ApiError),
    /// The job store is unavailable
    #[response(status = 503)]
    Unavailable(ApiError),
}

/// A job's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Stored, not started.
    Queued,
    Running,
    /// Every puzzle has a result (an answer or an error).
    Done,
    Cancelled,
    /// The coordinator could not go on with it (`failure` says why).
    Failed,
}

impl From<JobState> for State {
    fn from(state: JobState) -> State {
        match state {
            // (A job is shown only once acknowledged: never while its
            // puzzles are still arriving.)
            JobState::Receiving | JobState::Queued => State::Queued,
            JobState::Running => State::Running,
            JobState::Done => State::Done,
            JobState::Cancelled => State::Cancelled,
            JobState::Failed => State::Failed,
        }
    }
}

/// A job: its counts, its times and its pace.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({
    "id": "j7-5f3a9c21d0b4", "name": "round 2", "state": "running",
    "puzzles": 400000, "solved": 120000, "errors": 0, "remaining": 280000,
    "created_unix_ms": 1796400000000_i64, "finished_unix_ms": 0,
    "failure": "", "any_order": false,
    "rate": 45000.0, "eta_unix_ms": 1796400009000_i64
}))]
pub struct Job {
    pub id: String,
    /// The name given at submission, for people.
    pub name: String,
    pub state: State,
    pub puzzles: u64,
    /// Results with an answer.
    pub solved: u64,
    /// Error results (a puzzle that does not parse, or no worker could
    /// answer).
    pub errors: u64,
    /// Puzzles without a result yet.
    pub remaining: u64,
    /// Milliseconds since the Unix epoch.
    pub created_unix_ms: i64,
    /// Milliseconds since the Unix epoch; 0 until it finishes.
    pub finished_unix_ms: i64,
    /// Why it failed; empty otherwise.
    pub failure: String,
    /// Results come in the order they are solved (`order=any`).
    pub any_order: bool,
    /// Results per second over about the last 20 s of status reads (the
    /// average since submission until two reads a second apart, and over
    /// its life once finished).
    pub rate: f64,
    /// When it should end at that rate (once finished, when it did), in
    /// milliseconds since the Unix epoch; 0 when unknown.
    pub eta_unix_ms: i64,
    /// Its webhook, if it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookStatus>,
}

/// How the call to a job's webhook stands.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookStatus {
    pub url: String,
    /// Calls made so far.
    pub attempts: u32,
    /// A call was answered with a 2xx status.
    pub delivered: bool,
    /// When the next call is due, in milliseconds since the Unix epoch; 0
    /// when none is (the job has not finished, or the call was delivered
    /// or given up).
    pub next_unix_ms: i64,
}

impl From<JobView> for Job {
    fn from(view: JobView) -> Job {
        let next_unix_ms = view.webhook_next_ms();
        let JobView { row, pace } = view;
        Job {
            state: State::from(row.state),
            remaining: row.remaining(),
            id: row.id,
            name: row.name,
            puzzles: row.puzzles,
            solved: row.solved,
            errors: row.errors,
            created_unix_ms: row.created_ms,
            finished_unix_ms: row.finished_ms,
            failure: row.failure,
            any_order: row.any_order,
            rate: pace.rate,
            eta_unix_ms: pace.eta_unix_ms,
            webhook: row.webhook.map(|w| WebhookStatus {
                url: w.url,
                attempts: w.attempts,
                delivered: w.delivered,
                next_unix_ms,
            }),
        }
    }
}

/// A job submitted as one JSON document: its puzzles and its options. The
/// document is read as it arrives (its members in any order), so a job of
/// millions of puzzles costs the coordinator no more memory than a small
/// one; the job starts once the document has ended.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct JobSubmission {
    /// The puzzles, in order: a result names its puzzle's index (from 0)
    /// and id.
    pub puzzles: Vec<PuzzleRecord>,
    /// The job's priority class (default bulk).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// A name for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    pub name: Option<String>,
    /// Results are read in the order they are solved and stored, each
    /// naming its puzzle, rather than in input order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any_order: Option<bool>,
    /// A URL to call (POST, a signed JSON body) once the job finishes;
    /// it must match one of the coordinator's `--webhook-allow` patterns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2048)]
    pub webhook: Option<String>,
}

/// One puzzle: the start and target boards, a row of letters (R, B, G) a
/// string, both of the same size (up to 4x4).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "p1", "start": ["RGB", "BBR"], "target": ["GRB", "BBR"]}))]
pub struct PuzzleRecord {
    /// The puzzle's id (a whole number is taken too); its 1-based
    /// place in the list when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub start: Vec<String>,
    pub target: Vec<String>,
}

/// A job accepted: every puzzle is stored.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "j7-5f3a9c21d0b4", "puzzles": 400000, "durable": true}))]
pub struct Submitted {
    pub id: String,
    pub puzzles: u64,
    /// Whether the job outlives the coordinator (its store is on disk or
    /// in a database).
    pub durable: bool,
}

/// A priority class: interactive work is served before normal, normal
/// before bulk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    Interactive,
    Normal,
    #[default]
    Bulk,
}

impl From<Priority> for colball_core::Priority {
    fn from(p: Priority) -> colball_core::Priority {
        match p {
            Priority::Interactive => colball_core::Priority::Interactive,
            Priority::Normal => colball_core::Priority::Normal,
            Priority::Bulk => colball_core::Priority::Bulk,
        }
    }
}

/// The order a job's results are read in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// Input order.
    #[default]
    Input,
    /// The order they were solved and stored (each names its puzzle).
    Any,
}

/// How a submission is run.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SubmitQuery {
    /// The job's priority class.
    #[serde(default)]
    #[param(inline)]
    pub priority: Priority,
    /// A name for people.
    #[serde(default)]
    #[param(max_length = 256)]
    pub name: String,
    /// `any`: results in the order they are solved.
    #[serde(default)]
    #[param(inline)]
    pub order: Order,
    /// A URL to call (POST, a signed JSON body) once the job finishes;
    /// it must match one of the coordinator's `--webhook-allow` patterns.
    #[serde(default)]
    #[param(max_length = 2048, example = "https://hooks.example.com/colball")]
    pub webhook: String,
    /// A client token (instead of the `Authorization` header).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub token: Option<String>,
}

/// The formats results are read in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line (`colball solve --output jsonl`).
    #[default]
    Ndjson,
    /// A header row, then one row per puzzle.
    Csv,
}

/// Which results, and how.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ResultsQuery {
    /// The first result to read (0 is the first).
    #[serde(default, deserialize_with = "index")]
    #[param(value_type = Option<i64>, minimum = 0)]
    pub from: u64,
    /// Keep the response open and send each result as it is stored, until
    /// the job ends (`1` or `true`; `0` or `false`, the default, sends what
    /// is stored and ends).
    #[serde(default, deserialize_with = "flag")]
    #[param(value_type = Option<bool>)]
    pub follow: bool,
    /// `ndjson` (the default) or `csv`.
    #[serde(default)]
    #[param(inline)]
    pub format: Format,
    /// A client token (instead of the `Authorization` header).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub token: Option<String>,
}

/// Only the token, on the calls that take nothing else.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TokenQuery {
    /// A client token (instead of the `Authorization` header).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    pub token: Option<String>,
}

/// A result's number: 0 to `i64::MAX` (what the document says, an
/// `int64` of at least 0).
fn index<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let text = String::deserialize(d)?;
    match text.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => Err(serde::de::Error::custom(format!(
            "{text:?}: expected a result number, 0 to {}",
            i64::MAX
        ))),
    }
}

/// `true`/`1` or `false`/`0`.
fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    match String::deserialize(d)?.as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(serde::de::Error::custom(format!(
            "{other:?}: expected true, false, 1 or 0"
        ))),
    }
}

/// A line of a job's results: the answer to one puzzle, why it has none,
/// or (last) why the stream ended early (the job was deleted, say).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ResultRecord {
    Solved(SolvedResult),
    Failed(ErrorResult),
    Broken(ApiError),
}

/// A puzzle's answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "1", "moves": 3, "solution": "r12 c21 r22", "strategy": "bidir", "time_us": 41}))]
#[serde(deny_unknown_fields)]
pub struct SolvedResult {
    /// The puzzle's id.
    pub id: String,
    /// The minimum number of moves; -1 when the target cannot be reached.
    #[schema(minimum = -1)]
    pub moves: i64,
    /// One optimal move sequence (`r22 c34 ...`); empty when there is
    /// none.
    pub solution: String,
    /// What answered it: `cache`, `bidir`, `idastar` or `table`.
    pub strategy: String,
    /// Time spent solving it, in microseconds.
    pub time_us: u64,
}

/// A puzzle without an answer.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"id": "7", "line": 7, "error": "line 7: start has 3 rows, expected 4"}))]
#[serde(deny_unknown_fields)]
pub struct ErrorResult {
    /// The puzzle's id, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The puzzle's number in the job, from 1.
    #[schema(minimum = 1)]
    pub line: u64,
    /// What went wrong.
    pub error: String,
}
