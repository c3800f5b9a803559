//! Solving on a colball cluster: a typed client for the coordinator's
//! `colball.v1.Solver` service, and the blocking batch helper behind
//! `colball solve --connect URL`.
//!
//! Results are converted back into solver types (the move sequence is
//! parsed and checked against the puzzle's size), so the command prints
//! exactly what the in-process mode prints.

use std::path::PathBuf;
use std::time::Duration;

use colball_proto::auth::{Bearer, Secret};
use colball_proto::grade::{answer_to_wire, graded_from_wire};
use colball_proto::tls::TlsError;
use colball_proto::v1::solver_client::SolverClient;
use colball_proto::v1::{self, puzzle_result};
use colball_proto::{MAX_MESSAGE_BYTES, puzzle_to_wire};
use colball_solver::grade::{GivenAnswer, Graded};
use colball_solver::verify::check_answer;
use colball_solver::{Puzzle, Solution, parse_moves};
use thiserror::Error;
use tokio_stream::{Stream, StreamExt};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

pub use crate::{CONNECT_ENV, TOKEN_ENV};

/// Puzzles per request when a batch is larger: keeps each request well
/// under the message-size limit ([`MAX_MESSAGE_BYTES`]: 20,000 4x4 puzzles
/// with the longest ids encode to about 6.5 MiB of 16) and the
/// coordinator's per-request cap (`--max-batch`, 200,000 by default).
pub const REQUEST_CHUNK: usize = 20_000;

/// How to reach a coordinator that asks for a token or serves TLS.
/// `Security::default()`: no token, plaintext.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// The client token (the coordinator's `--client-token`).
    pub token: Option<Secret>,
    /// TLS settings for an `https://` URL (a private CA to trust, a name
    /// to check); without, an `https://` URL trusts the public
    /// certificate authorities.
    pub tls: Option<ClientTlsConfig>,
    /// The CA file the TLS settings came from, named in errors.
    pub ca_file: Option<PathBuf>,
}

/// What went wrong talking to the cluster. Each message is complete: no
/// error here has a `source` (whose text the message already holds), so a
/// chain printer (`{:#}` of anyhow) prints it once.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("bad cluster URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {url}: {reason}{hint}")]
    Connect {
        url: String,
        /// Why, from the transport error's chain.
        reason: String,
        /// What to try, or empty.
        hint: &'static str,
        /// The transport error itself (not a `source`: see above).
        error: tonic::transport::Error,
    },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{}", status_text(.0))]
    Status(tonic::Status),
    #[error("puzzle {id:?}: {message}")]
    Puzzle { id: String, message: String },
    #[error("the cluster sent a malformed result: {0}")]
    Protocol(String),
    /// The cluster's answer does not solve its puzzle: a coordinator (or a
    /// worker it trusted) is broken or hostile. Nothing of it is printed.
    #[error("puzzle {id:?}: the cluster's answer is wrong ({reason}); not printed")]
    WrongAnswer { id: String, reason: String },
    /// The connection broke mid-batch (the coordinator crashed, restarted
    /// or shut down, or the network failed) and could not be made again
    /// within `--reconnect-secs`; `advice` says what is kept.
    #[error(
        "lost the connection to the coordinator at {url} after {received} of {total} results ({reason}); {advice}"
    )]
    ConnectionLost {
        url: String,
        received: usize,
        total: usize,
        reason: String,
        advice: String,
    },
    /// The coordinator came back without the job: it keeps jobs in memory
    /// only and restarted, or someone deleted the job.
    #[error(
        "the coordinator at {url} no longer has job {job} ({received} of {total} results were received): {}",
        if *durable { "it was deleted; resubmit the batch" } else { "it keeps jobs in memory only (no --data-dir) and restarted, so the work was lost: resubmit it" }
    )]
    JobLost {
        url: String,
        job: String,
        durable: bool,
        received: usize,
        total: usize,
    },
    /// The job was cancelled (by `colball job cancel`) or failed on the
    /// coordinator before its last result.
    #[error("job {job} {state} after {received} of {total} results{}", if failure.is_empty() { String::new() } else { format!(": {failure}") })]
    JobEnded {
        job: String,
        /// `was cancelled` or `failed`.
        state: String,
        failure: String,
        received: usize,
        total: usize,
    },
    /// SIGINT: the run stopped and its job was cancelled.
    #[error("interrupted after {received} of {total} results{}", job.as_ref().map_or_else(String::new, |j| format!("; job {j} was cancelled")))]
    Interrupted {
        job: Option<String>,
        received: usize,
        total: usize,
    },
}

impl From<tonic::Status> for ClientError {
    fn from(status: tonic::Status) -> ClientError {
        ClientError::Status(status)
    }
}

impl ClientError {
    /// A failed connection to `url`; `private_ca` says whether a CA was
    /// given with `--ca` (for the hint on an untrusted certificate).
    fn connect(url: &str, error: tonic::transport::Error, private_ca: bool) -> ClientError {
        let reason = colball_proto::tls::error_chain(&error);
        let untrusted = reason.contains("invalid peer certificate");
        let hint = if untrusted && !private_ca {
            " (if the coordinator's certificate is signed by a private CA, pass that CA with --ca FILE)"
        } else {
            connect_hint(url)
        };
        ClientError::Connect {
            url: url.to_string(),
            reason,
            hint,
            error,
        }
    }
}

/// The coordinators' URLs in `list`: one, or several comma-separated
/// (coordinators sharing one job store; blanks around each ignored).
pub fn urls(list: &str) -> Result<Vec<String>, ClientError> {
    let urls = colball_proto::tls::url_list(list);
    if urls.is_empty() {
        return Err(ClientError::BadUrl {
            url: list.to_string(),
            reason: "no coordinator URL".into(),
        });
    }
    Ok(urls)
}

/// Whether a status says the connection to the coordinator is gone. A
/// status tonic made from a transport failure (reset, broken pipe, closed
/// connection) carries that failure as its `source`; a status the
/// coordinator sent does not, and of those only one with the reason
/// [`SHUTTING_DOWN`](colball_proto::reason::SHUTTING_DOWN) means the
/// coordinator is going away.
pub(crate) fn connection_gone(status: &tonic::Status) -> bool {
    use std::error::Error as _;
    status.source().is_some() || colball_proto::reason::is_shutting_down(status)
}

/// A status code as gRPC names it: `UNAVAILABLE`, `DEADLINE_EXCEEDED`.
pub fn code_name(code: tonic::Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The status's message and the transport failure beneath it, if any,
/// each once.
fn status_message(status: &tonic::Status) -> String {
    let mut texts = vec![status.message().to_string()];
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        texts.push(e.to_string());
        source = e.source();
    }
    colball_proto::tls::join_reasons(texts)
}

/// The status's code and message and the transport failure beneath it.
pub(crate) fn status_reason(status: &tonic::Status) -> String {
    format!("{}: {}", code_name(status.code()), status_message(status))
}

/// One result from the cluster.
#[derive(Clone, Debug)]
pub struct RemoteSolved {
    /// Position of the puzzle in its request.
    pub index: usize,
    pub id: String,
    pub solution: Solution,
    /// The strategy the worker used (`bidir`).
    pub strategy: String,
    /// The worker that solved it.
    pub worker: String,
    /// Solve time on the worker.
    pub elapsed: Duration,
    /// Answered from the coordinator's cache.
    pub cached: bool,
}

/// A status for people, one sentence: the code and message the
/// coordinator sent (`the cluster answered UNAVAILABLE: no worker has
/// joined ...`), or for a broken connection (which tonic reports as a
/// status with the transport failure as its source) its cause and a hint.
fn status_text(status: &tonic::Status) -> String {
    if std::error::Error::source(status).is_some() {
        format!(
            "the connection to the cluster failed: {} (check the URL; if the coordinator serves TLS, use an https:// URL)",
            status_message(status)
        )
    } else {
        format!(
            "the cluster answered {}: {}",
            code_name(status.code()),
            status.message()
        )
    }
}

/// A hint for a failed plaintext connection: the coordinator may serve TLS.
pub(crate) fn connect_hint(url: &str) -> &'static str {
    if url
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    {
        " (if the coordinator serves TLS, use an https:// URL)"
    } else {
        ""
    }
}

/// One HTTP/2 connection to the coordinator at `url` with `security`'s TLS
/// settings (the token is added per call, by [`Bearer`]).
pub async fn channel(url: &str, security: &Security) -> Result<Channel, ClientError> {
    colball_proto::tls::check_url(url)?;
    let endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| ClientError::BadUrl {
            url: url.to_string(),
            reason: e.to_string(),
        })?
        .connect_timeout(Duration::from_secs(10))
        // Small requests must not wait for a delayed ACK.
        .tcp_nodelay(true)
        // Without pings, a coordinator that vanishes without closing the
        // connection (its machine lost power, the network partitioned)
        // would leave a batch waiting forever. A ping every 10 s, and no
        // answer within 20 s, breaks the connection, which
        // `solve_in_order` reports as lost (the worker does the same).
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    let endpoint = colball_proto::tls::secure(
        endpoint,
        url,
        security.tls.as_ref(),
        security.ca_file.as_deref(),
    )?;
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| ClientError::connect(url, e, security.ca_file.is_some()))?;
    Ok(channel)
}

/// What each call to a coordinator carries: the token, when there is one
/// ([`Bearer`]), and, when spans are exported, the trace context of the
/// span it is made in (`traceparent` and `tracestate` metadata), so the
/// coordinator's spans join the caller's trace.
#[derive(Clone, Debug, Default)]
pub struct Outgoing {
    bearer: Bearer,
}

impl Outgoing {
    pub fn new(token: Option<&Secret>) -> Outgoing {
        Outgoing {
            bearer: Bearer::new(token),
        }
    }
}

impl tonic::service::Interceptor for Outgoing {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let mut request = self.bearer.call(request)?;
        colball_telemetry::context::inject(&tracing::Span::current(), |key, value| {
            if let Ok(value) = value.parse() {
                request.metadata_mut().insert(key, value);
            }
        });
        Ok(request)
    }
}

/// A connection to a coordinator. Cheap to clone (one HTTP/2 connection).
#[derive(Clone, Debug)]
pub struct Client {
    inner: SolverClient<InterceptedService<Channel, Outgoing>>,
    /// The priority class of its requests (`None`: each RPC's default).
    priority: Option<v1::Priority>,
}

impl Client {
    /// Connects to `url` (e.g. `http://127.0.0.1:50051`), without a token
    /// or TLS.
    pub async fn connect(url: &str) -> Result<Client, ClientError> {
        Client::connect_with(url, &Security::default()).await
    }

    /// Connects to `url` with a token and TLS settings (an `https://` URL
    /// needs `security.tls`).
    pub async fn connect_with(url: &str, security: &Security) -> Result<Client, ClientError> {
        let channel = channel(url, security).await?;
        let inner = SolverClient::with_interceptor(channel, Outgoing::new(security.token.as_ref()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Client {
            inner,
            priority: None,
        })
    }

    /// Sends later requests in this priority class (`None`: each RPC's
    /// default: interactive for one puzzle, normal for batches and
    /// grading).
    pub fn set_priority(&mut self, priority: Option<v1::Priority>) {
        self.priority = priority;
    }

    fn priority(&self) -> i32 {
        self.priority.unwrap_or(v1::Priority::Unspecified) as i32
    }

    /// Solves one puzzle.
    pub async fn solve_one(
        &mut self,
        id: &str,
        puzzle: &Puzzle,
    ) -> Result<RemoteSolved, ClientError> {
        let request = v1::SolveRequest {
            puzzle: Some(puzzle_to_wire(id, puzzle)),
            priority: self.priority(),
        };
        let result = self.inner.solve(request).await?.into_inner();
        convert(result, &[*puzzle])
    }

    /// Solves a batch; results arrive as they finish (or in input order
    /// with `ordered`). A per-puzzle failure is an `Err` item naming the
    /// puzzle; a broken stream is an `Err` item too, and the last one.
    pub async fn solve_stream(
        &mut self,
        puzzles: &[(String, Puzzle)],
        ordered: bool,
    ) -> Result<impl Stream<Item = Result<RemoteSolved, ClientError>> + use<>, ClientError> {
        let request = v1::SolveBatchRequest {
            puzzles: puzzles
                .iter()
                .map(|(id, p)| puzzle_to_wire(id.clone(), p))
                .collect(),
            ordered,
            priority: self.priority(),
        };
        let list: Vec<Puzzle> = puzzles.iter().map(|(_, p)| *p).collect();
        let stream = self.inner.solve_batch(request).await?.into_inner();
        Ok(stream.map(move |item| match item {
            Ok(result) => convert(result, &list),
            Err(status) => Err(ClientError::Status(status)),
        }))
    }
}

impl Client {
    /// Follows the cluster's events: from `from` (retained events first)
    /// or from now. A resume point the coordinator no longer retains is a
    /// `Status` error with code OUT_OF_RANGE.
    pub async fn watch(
        &mut self,
        from: Option<u64>,
    ) -> Result<tonic::Streaming<v1::ClusterEvent>, ClientError> {
        let request = v1::WatchRequest {
            from_sequence: from,
        };
        Ok(self.inner.watch(request).await?.into_inner())
    }
}

/// One verdict from the cluster's Grade RPC.
#[derive(Clone, Debug)]
pub struct RemoteGraded {
    /// Position of the case in its request.
    pub index: usize,
    pub id: String,
    pub graded: Graded,
}

impl Client {
    /// Grades a batch: each case is a puzzle with its id and the
    /// contestant's answer, if any. Verdicts arrive as the cluster decides
    /// them, not in input order; the stream ends after the last.
    pub async fn grade_stream(
        &mut self,
        cases: &[(String, Puzzle, Option<GivenAnswer>)],
    ) -> Result<impl Stream<Item = Result<RemoteGraded, ClientError>> + use<>, ClientError> {
        let request = v1::GradeRequest {
            cases: cases
                .iter()
                .map(|(id, puzzle, answer)| v1::GradeCase {
                    puzzle: Some(puzzle_to_wire(id.clone(), puzzle)),
                    answer: answer.as_ref().map(answer_to_wire),
                })
                .collect(),
            priority: self.priority(),
        };
        let total = cases.len();
        let stream = self.inner.grade(request).await?.into_inner();
        Ok(stream.map(move |item| {
            let result = item?;
            let index = result.index as usize;
            if index >= total {
                return Err(ClientError::Protocol(format!(
                    "verdict index {index} out of range"
                )));
            }
            let graded = graded_from_wire(&result).ok_or_else(|| {
                ClientError::Protocol(format!(
                    "verdict for case {} has unknown kind {}",
                    index + 1,
                    result.verdict
                ))
            })?;
            Ok(RemoteGraded {
                index,
                id: result.id,
                graded,
            })
        }))
    }
}

/// The client's one kind of runtime (every command that talks to a
/// coordinator builds it here): a single thread, with I/O and timers.
pub fn runtime() -> Result<tokio::runtime::Runtime, ClientError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Protocol(format!("cannot start the async runtime: {e}")))
}

/// Turns a wire result into solver types, checking it against the puzzle:
/// the sequence is replayed (and a `-1` confirmed), so a wrong answer from
/// the cluster is an error, never printed.
pub(crate) fn convert(
    result: v1::PuzzleResult,
    puzzles: &[Puzzle],
) -> Result<RemoteSolved, ClientError> {
    let index = result.index as usize;
    let id = result.id;
    let Some(puzzle) = puzzles.get(index) else {
        return Err(ClientError::Protocol(format!(
            "result index {index} out of range"
        )));
    };
    let solved = match result.outcome {
        Some(puzzle_result::Outcome::Solved(s)) => s,
        Some(puzzle_result::Outcome::Error(e)) => {
            return Err(ClientError::Puzzle {
                id,
                message: e.message,
            });
        }
        None => {
            return Err(ClientError::Protocol(format!(
                "result for {id:?} has no outcome"
            )));
        }
    };
    if let Err(rejection) = check_answer(puzzle, solved.moves, &solved.solution) {
        return Err(ClientError::WrongAnswer {
            id,
            reason: rejection.to_string(),
        });
    }
    let solution = if solved.moves < 0 {
        Solution::Unreachable
    } else {
        // Replayed above: it parses.
        let path = parse_moves(puzzle.size(), &solved.solution)
            .map_err(|e| ClientError::Protocol(format!("puzzle {id:?}: bad solution: {e}")))?;
        Solution::Solved(path)
    };
    Ok(RemoteSolved {
        index,
        id,
        solution,
        strategy: solved.strategy,
        worker: solved.worker,
        elapsed: Duration::from_micros(solved.time_us),
        cached: solved.cached,
    })
}

/// A failure of [`solve_in_order`]: the cluster's, or the consumer's.
#[derive(Debug, Error)]
pub enum SolveError<E> {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("{0}")]
    Output(E),
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_proto::MAX_ID_BYTES;
    use colball_proto::prost::Message;
    use colball_solver::Size;
    use colball_solver::generate::Generator;

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        assert_eq!(code_name(tonic::Code::Unavailable), "UNAVAILABLE");
        assert_eq!(
            code_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
        assert_eq!(code_name(tonic::Code::Ok), "OK");
        let status = tonic::Status::unavailable("no worker has joined the cluster");
        let e = ClientError::from(status);
        assert_eq!(
            e.to_string(),
            "the cluster answered UNAVAILABLE: no worker has joined the cluster"
        );
        assert!(std::error::Error::source(&e).is_none(), "printed once");
    }

    #[test]
    fn a_request_chunk_of_the_largest_puzzles_fits_the_message_limit() {
        let mut g = Generator::new(3);
        let four = Size::new(4, 4).unwrap();
        let p = g.uniform(four);
        let id = "x".repeat(MAX_ID_BYTES);
        let request = v1::SolveBatchRequest {
            puzzles: vec![puzzle_to_wire(id, &p); REQUEST_CHUNK],
            ordered: true,
            priority: 0,
        };
        let bytes = request.encoded_len();
        assert!(
            bytes < MAX_MESSAGE_BYTES / 2,
            "{bytes} bytes for {REQUEST_CHUNK} puzzles"
        );
        // The ids solve_in_order gives are far shorter than the longest.
        assert!((REQUEST_CHUNK * 1000).to_string().len() < MAX_ID_BYTES);
    }
}
