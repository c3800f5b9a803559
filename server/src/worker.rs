//! The worker: dials the coordinator, registers, and solves what it is
//! assigned on a dedicated pool of solver threads.
//!
//! The async side only moves messages: assignments go to the pool through a
//! bounded channel, results come back through another, and heartbeats are
//! sent from the async loop, which never waits on a search, so a busy CPU
//! cannot delay them. The connection is retried with exponential backoff;
//! a refusal (protocol-version mismatch, a missing or wrong worker token)
//! is final. On shutdown the worker
//! tells the coordinator it is draining, finishes and reports what it
//! holds, then leaves.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use colball_proto::auth::{Bearer, Secret};
use colball_proto::v1::workers_client::WorkersClient;
use colball_proto::v1::{self, coordinator_message, task_result, worker_message};
use colball_proto::work::{method_to_wire, path_to_wire, task_puzzle};
use colball_proto::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use colball_solver::cache::CacheConfig;
use colball_solver::{Engine, EngineConfig, Method, Puzzle, Solution, Solver, Strategy};
// Task ids are the coordinator's numbers: foldhash, as the coordinator's
// books, rather than SipHash.
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use thiserror::Error;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tracing::Instrument;

use crate::telemetry;

/// Worker settings. `WorkerConfig::new(url)` gives defaults that suit one machine.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The coordinator's URL, e.g. `http://127.0.0.1:50051`; or several,
    /// comma-separated, tried in turn (see [`urls`]).
    pub coordinator: String,
    /// Solver threads; also the slots the worker registers with.
    pub threads: usize,
    /// A name for logs and results.
    pub name: String,
    /// How long one connection attempt may take.
    pub connect_timeout: Duration,
    /// First wait after a failed connection; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// How long a draining worker waits for its tasks before leaving anyway.
    pub drain_timeout: Duration,
    /// How the solver threads solve (default `auto`).
    pub strategy: Strategy,
    /// Entries of the solution cache the solver threads share (0 turns it
    /// off); the cache also holds distance tables, bounded by `table_bytes`.
    pub cache_capacity: usize,
    pub table_bytes: usize,
    /// The protocol version to register with; only tests change it.
    pub protocol_version: u32,
    /// The coordinator's worker token, sent with the session; `None`: none.
    pub token: Option<Secret>,
    /// TLS settings for an `https://` coordinator URL (the CA to trust).
    pub tls: Option<ClientTlsConfig>,
}

impl WorkerConfig {
    pub fn new(coordinator: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            coordinator: coordinator.into(),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            name: default_name(),
            connect_timeout: Duration::from_secs(5),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            drain_timeout: Duration::from_secs(60),
            strategy: Strategy::Auto,
            cache_capacity: 1_000_000,
            table_bytes: 64 << 20,
            protocol_version: PROTOCOL_VERSION,
            token: None,
            tls: None,
        }
    }

    /// Checks the settings (the one place: the binary only converts its
    /// flags); [`run`] refuses a config that fails, before dialling.
    pub fn validate(&self) -> Result<(), WorkerError> {
        let bad = |problem: String| Err(WorkerError::Config(problem));
        if self.threads == 0 {
            return bad("--threads (WorkerConfig::threads): must be at least 1".into());
        }
        if self.name.trim().is_empty() {
            return bad("--name (WorkerConfig::name): must not be empty".into());
        }
        if self.connect_timeout.is_zero() {
            return bad("WorkerConfig::connect_timeout: must be more than 0".into());
        }
        if self.backoff_initial.is_zero() || self.backoff_initial > self.backoff_max {
            return bad(format!(
                "WorkerConfig::backoff_initial: must be more than 0 and at most backoff_max ({:?}), not {:?}",
                self.backoff_max, self.backoff_initial
            ));
        }
        Ok(())
    }
}

/// `HOSTNAME-PID`, or `worker-PID`.
pub fn default_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".to_string());
    format!("{host}-{}", std::process::id())
}

/// Why a worker stopped for good.
#[derive(Debug, Error)]
pub enum WorkerError {
    #[error("bad coordinator URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the coordinator refused this worker: {0}")]
    Refused(String),
    #[error("TLS: {0}")]
    Tls(#[from] colball_proto::tls::TlsError),
    #[error("bad worker setting: {0}")]
    Config(String),
}

/// Why one session ended.
enum SessionEnd {
    /// Draining finished (or was cut short): leave.
    Drained,
    /// The connection failed or broke: retry.
    Retry(String),
    /// The coordinator refused us: stop.
    Refused(Status),
}

/// The one place the worker calls the solver (the puzzle was announced to
/// the engine when its task arrived: see [`submit`]). Returns the solution
/// and what answered it.
fn solve_puzzle(solver: &mut Solver, puzzle: &Puzzle) -> (Solution, Method) {
    let answer = solver.solve(puzzle);
    (answer.solution, answer.method)
}

/// A task for the solver threads, from the session numbered `session`
/// (a task of an ended session is dropped unsolved).
struct ToSolve {
    session: u64,
    task_id: u64,
    puzzle: Puzzle,
}

/// A task's result, for the session that gave it.
struct Done {
    session: u64,
    result: v1::TaskResult,
}

/// The most tasks a session queues, whatever the coordinator says (its
/// `max_tasks` is normally far lower): 64 bytes each.
const MAX_HELD: usize = 1 << 20;

/// The most results one message carries.
const RESULTS_PER_MESSAGE: usize = 1024;

/// The solver threads: one solver each, one shared engine (solution cache
/// and distance tables), fed by a channel that the session bounds: it
/// queues no more than the coordinator's `max_tasks` (and at most
/// [`MAX_HELD`]).
struct Pool {
    queue: std::sync::mpsc::Sender<ToSolve>,
    cancelled: Arc<Mutex<HashSet<u64>>>,
    session: Arc<AtomicU64>,
    engine: Arc<Engine>,
}

impl Pool {
    fn start(config: &WorkerConfig, threads: usize, done: mpsc::Sender<Vec<Done>>) -> Pool {
        let (queue, rx) = std::sync::mpsc::channel::<ToSolve>();
        let rx = Arc::new(Mutex::new(rx));
        let cancelled = Arc::new(Mutex::new(HashSet::new()));
        let session = Arc::new(AtomicU64::new(0));
        let engine = Engine::new(EngineConfig {
            strategy: config.strategy,
            cache: CacheConfig {
                max_entries: config.cache_capacity,
                max_table_bytes: config.table_bytes,
                ..CacheConfig::default()
            },
            // The threads waiting for a table help build it.
            table_threads: threads,
            ..EngineConfig::default()
        });
        for i in 0..threads {
            let (rx, cancelled, session, engine, done) = (
                rx.clone(),
                cancelled.clone(),
                session.clone(),
                engine.clone(),
                done.clone(),
            );
            let spawned = std::thread::Builder::new()
                .name(format!("solver-{i}"))
                .spawn(move || solver_thread(&rx, &cancelled, &session, engine, &done));
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a solver thread");
            }
        }
        Pool {
            queue,
            cancelled,
            session,
            engine,
        }
    }

    /// The shared cache's counters, as heartbeats report them.
    fn cache_stats(&self) -> v1::WorkerCacheStats {
        let s = self.engine.stats();
        v1::WorkerCacheStats {
            hits: s.hits,
            misses: s.misses,
            evictions: s.evictions,
            entries: s.entries,
            table_builds: s.table_builds,
            table_hits: s.table_hits,
        }
    }

    fn cancelled(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Results a solver thread keeps before it hands them on while more work
/// is queued, and how long it keeps the oldest.
const HAND_ON_AFTER: usize = 64;
const HAND_ON_WITHIN: Duration = Duration::from_millis(1);

fn solver_thread(
    rx: &Mutex<std::sync::mpsc::Receiver<ToSolve>>,
    cancelled: &Mutex<HashSet<u64>>,
    session: &AtomicU64,
    engine: Arc<Engine>,
    done: &mpsc::Sender<Vec<Done>>,
) {
    let mut solver = Solver::new(engine.clone());
    // Finished results wait here while more work is queued (one wake-up of
    // the session for many results); the thread hands them on before it
    // waits for work, so a lone result is never held back.
    let mut finished: Vec<Done> = Vec::new();
    let mut oldest = Instant::now();
    let hand_on = |finished: &mut Vec<Done>| {
        finished.is_empty() || done.blocking_send(std::mem::take(finished)).is_ok()
    };
    loop {
        // The receiver is held by a thread that waits for work when none
        // is queued: then this one must not wait for the lock with results
        // in hand (nothing may come until they are reported).
        let queued = match rx.try_lock() {
            Ok(rx) => match rx.try_recv() {
                Ok(work) => Some(work),
                Err(std::sync::mpsc::TryRecvError::Empty) => None,
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            },
            Err(std::sync::TryLockError::WouldBlock) => None,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().try_recv().ok(),
        };
        let work = match queued {
            Some(work) => work,
            None => {
                if !hand_on(&mut finished) {
                    return;
                }
                let rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
                match rx.recv() {
                    Ok(work) => work,
                    Err(_) => return, // the pool is gone
                }
            }
        };
        if work.session != session.load(Ordering::Acquire) {
            continue; // from a broken session: the coordinator re-dispatched it
        }
        // A 4x4 search can take milliseconds: what is finished goes first.
        if work.puzzle.size().cells() > 12 && !hand_on(&mut finished) {
            return;
        }
        let was_cancelled = cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&work.task_id);
        let outcome = if was_cancelled {
            task_result::Outcome::Cancelled(v1::Cancelled {})
        } else {
            solve_guarded(&mut solver, &engine, &work.puzzle)
        };
        let result = v1::TaskResult {
            task_id: work.task_id,
            outcome: Some(outcome),
        };
        if finished.is_empty() {
            oldest = Instant::now();
        }
        finished.push(Done {
            session: work.session,
            result,
        });
        if (finished.len() >= HAND_ON_AFTER || oldest.elapsed() >= HAND_ON_WITHIN)
            && !hand_on(&mut finished)
        {
            return;
        }
    }
}

/// Solves one puzzle; a panic in the solver becomes an error result for
/// that puzzle instead of taking the thread down.
fn solve_guarded(
    solver: &mut Solver,
    engine: &Arc<Engine>,
    puzzle: &Puzzle,
) -> task_result::Outcome {
    let began = Instant::now();
    match std::panic::catch_unwind(AssertUnwindSafe(|| solve_puzzle(solver, puzzle))) {
        Ok((solution, method)) => task_result::Outcome::Solved(v1::TaskSolved {
            moves: solution.answer(),
            path: solution
                .path()
                .map(|p| path_to_wire(puzzle.size(), p))
                .unwrap_or_default()
                .into(),
            method: method_to_wire(method) as i32,
            time_us: began.elapsed().as_micros() as u64,
        }),
        Err(_) => {
            tracing::error!(?puzzle, "the solver panicked");
            // The search's buffers may be inconsistent now: start afresh.
            *solver = Solver::new(engine.clone());
            task_result::Outcome::Error("internal solver error".into())
        }
    }
}

/// The coordinators' URLs in `list` (comma-separated, blanks around
/// each ignored), each checked: a scheme that is not `http://` or
/// `https://`, a URL that does not parse or a TLS setting that cannot work
/// is final, before anything is dialled.
pub fn urls(list: &str, tls: Option<&ClientTlsConfig>) -> Result<Vec<String>, WorkerError> {
    let urls = colball_proto::tls::url_list(list);
    if urls.is_empty() {
        return Err(WorkerError::BadUrl {
            url: list.to_string(),
            reason: "no coordinator URL".into(),
        });
    }
    for url in &urls {
        colball_proto::tls::check_url(url)?;
        let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| WorkerError::BadUrl {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        colball_proto::tls::secure(endpoint, url, tls, None)?;
    }
    Ok(urls)
}

/// Runs the worker until `shutdown` (then drains) or a refusal. With
/// several coordinators, a broken session is followed by one with the
/// next (the first try at once; backoff once each was tried).
pub async fn run(config: WorkerConfig, shutdown: CancellationToken) -> Result<(), WorkerError> {
    config.validate()?;
    let urls = urls(&config.coordinator, config.tls.as_ref())?;
    let mut at = 0;
    let threads = config.threads;
    let (done_tx, mut done_rx) = mpsc::channel(threads * 4 + 16);
    let pool = Pool::start(&config, threads, done_tx);
    let mut backoff = config.backoff_initial;
    let mut session_id = 0u64;
    loop {
        if shutdown.is_cancelled() {
            return Ok(());
        }
        session_id += 1;
        pool.session.store(session_id, Ordering::Release);
        pool.cancelled().clear();
        let began = Instant::now();
        let url = &urls[at];
        let span = tracing::info_span!("session", coordinator = %url, session = session_id);
        let ended = session(&config, url, &pool, &mut done_rx, session_id, &shutdown)
            .instrument(span)
            .await;
        match ended {
            SessionEnd::Drained => return Ok(()),
            SessionEnd::Refused(status) => {
                tracing::error!(message = status.message(), "refused by the coordinator");
                return Err(WorkerError::Refused(status.message().to_string()));
            }
            SessionEnd::Retry(reason) => {
                if began.elapsed() > Duration::from_secs(10) {
                    backoff = config.backoff_initial; // it worked for a while
                }
                at = (at + 1) % urls.len();
                if at != 0 || urls.len() == 1 {
                    tracing::warn!(%reason, coordinator = %url, next = %urls[at], "no session with the coordinator");
                }
                if at != 0 {
                    // The next coordinator at once.
                    continue;
                }
                tracing::warn!(%reason, retry_in = ?backoff, "no session with the coordinator");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = shutdown.cancelled() => return Ok(()),
                }
                backoff = (backoff * 2).min(config.backoff_max);
            }
        }
    }
}

async fn session(
    config: &WorkerConfig,
    url: &str,
    pool: &Pool,
    done_rx: &mut mpsc::Receiver<Vec<Done>>,
    session_id: u64,
    shutdown: &CancellationToken,
) -> SessionEnd {
    let endpoint = match Endpoint::from_shared(url.to_string()).map(|e| {
        let e = e
            .connect_timeout(config.connect_timeout)
            // tonic's default, stated: small results must not wait for a
            // delayed ACK.
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true);
        colball_proto::tls::secure(e, url, config.tls.as_ref(), None)
    }) {
        Ok(Ok(e)) => e,
        Ok(Err(e)) => return SessionEnd::Retry(e.to_string()),
        Err(e) => return SessionEnd::Retry(e.to_string()),
    };
    let channel = tokio::select! {
        c = endpoint.connect() => match c {
            Ok(c) => c,
            Err(e) => return SessionEnd::Retry(format!(
                "cannot connect to {}: {}",
                url,
                colball_proto::tls::error_chain(&e)
            )),
        },
        () = shutdown.cancelled() => return SessionEnd::Drained,
    };
    let threads = config.threads.max(1);
    let (out, out_rx) = mpsc::channel(threads * 8 + 64);
    let register = v1::WorkerMessage {
        kind: Some(worker_message::Kind::Register(v1::Register {
            protocol_version: config.protocol_version,
            name: config.name.clone(),
            slots: threads as u32,
        })),
    };
    if out.try_send(register).is_err() {
        return SessionEnd::Retry("cannot queue register".into());
    }
    let mut inbound =
        match WorkersClient::with_interceptor(channel, Bearer::new(config.token.as_ref()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
            .session(ReceiverStream::new(out_rx))
            .await
        {
            Ok(r) => r.into_inner(),
            Err(s)
                if matches!(
                    s.code(),
                    Code::FailedPrecondition | Code::InvalidArgument | Code::Unauthenticated
                ) =>
            {
                return SessionEnd::Refused(s);
            }
            Err(s) => return SessionEnd::Retry(format!("session refused: {s}")),
        };
    tracing::info!(coordinator = %url, slots = threads, "registered");

    let mut held: HashSet<u64> = HashSet::new();
    // When spans are exported: the span of the batch each held task came
    // in (see `batch_spans`).
    let mut traced: HashMap<u64, tracing::Span> = HashMap::new();
    // Until the coordinator says how many tasks it will send at most.
    let mut max_held = MAX_HELD;
    let mut draining: Option<tokio::time::Instant> = None;
    let mut heartbeat = tokio::time::interval(Duration::from_secs(1));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut finished = Vec::with_capacity(RESULTS_PER_MESSAGE / HAND_ON_AFTER);
    loop {
        // A draining worker leaves when the coordinator closes the session
        // (it does once the worker holds nothing), or at the deadline.
        if let Some(deadline) = draining {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    tasks = held.len(),
                    "drain timeout; leaving with tasks unfinished"
                );
                return SessionEnd::Drained;
            }
        }
        let drain_deadline = async {
            match draining {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = inbound.message() => {
                let message = match message {
                    Ok(Some(m)) => m,
                    Ok(None) if draining.is_some() => {
                        tracing::info!(unreported = held.len(), "drained; leaving");
                        return SessionEnd::Drained;
                    }
                    Ok(None) => return ended(draining, "the coordinator closed the session"),
                    Err(s) => return ended(draining, &format!("session broken: {s}")),
                };
                match message.kind {
                    Some(coordinator_message::Kind::Registered(r)) => {
                        let every = Duration::from_millis(u64::from(r.heartbeat_interval_ms).max(10));
                        heartbeat = tokio::time::interval(every);
                        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        if r.max_tasks > 0 {
                            max_held = (r.max_tasks as usize).min(MAX_HELD);
                        }
                        tracing::info!(worker_id = %r.worker_id, max_tasks = r.max_tasks, "registered");
                    }
                    Some(coordinator_message::Kind::Assign(assign)) => {
                        // Tasks that cannot be queued go back at once, in
                        // one message.
                        let spans = batch_spans(&assign);
                        let mut back = Vec::new();
                        for task in assign.tasks {
                            if held.len() >= max_held {
                                back.push(given_back(task.task_id, "over the session's max_tasks"));
                                continue;
                            }
                            held.insert(task.task_id);
                            if let Some(result) = submit(pool, session_id, &task) {
                                held.remove(&result.task_id);
                                back.push(result);
                            } else if let Some(span) = spans.get(batch_of(&task, spans.len().saturating_sub(1))) {
                                traced.insert(task.task_id, span.clone());
                            }
                        }
                        if !back.is_empty() && out.send(results_message(back)).await.is_err() {
                            return ended(draining, "session closed");
                        }
                    }
                    Some(coordinator_message::Kind::Cancel(cancel)) => {
                        let mut cancelled = pool.cancelled();
                        for id in cancel.task_ids {
                            if held.contains(&id) {
                                cancelled.insert(id);
                            }
                        }
                    }
                    None => {}
                }
            }
            n = done_rx.recv_many(&mut finished, RESULTS_PER_MESSAGE / HAND_ON_AFTER) => {
                if n == 0 {
                    return ended(draining, "the solver threads stopped");
                }
                // Whatever the solver threads have finished goes in one
                // message: a lone result at once, results under load
                // together, with no timer in between.
                let results: Vec<v1::TaskResult> = finished
                    .drain(..)
                    .flatten()
                    .filter(|done| done.session == session_id && held.remove(&done.result.task_id))
                    .map(|done| done.result)
                    .collect();
                if results.is_empty() {
                    continue;
                }
                // A batch's span ends with its last task reported.
                if !traced.is_empty() {
                    for r in &results {
                        traced.remove(&r.task_id);
                    }
                }
                {
                    let mut cancelled = pool.cancelled();
                    if !cancelled.is_empty() {
                        for r in &results {
                            cancelled.remove(&r.task_id);
                        }
                    }
                }
                if out.send(results_message(results)).await.is_err() {
                    return ended(draining, "session closed");
                }
            }
            _ = heartbeat.tick() => {
                let beat = v1::WorkerMessage {
                    kind: Some(worker_message::Kind::Heartbeat(v1::Heartbeat {
                        cache: Some(pool.cache_stats()),
                    })),
                };
                // A full queue means results are flowing, which the
                // coordinator also counts as a sign of life.
                let _ = out.try_send(beat);
            }
            () = shutdown.cancelled(), if draining.is_none() => {
                tracing::info!(tasks = held.len(), "draining: finishing held tasks, taking no more");
                let message = v1::WorkerMessage { kind: Some(worker_message::Kind::Draining(v1::Draining {})) };
                if out.send(message).await.is_err() {
                    return SessionEnd::Drained;
                }
                draining = Some(tokio::time::Instant::now() + config.drain_timeout);
            }
            () = drain_deadline => {}
        }
    }
}

fn ended(draining: Option<tokio::time::Instant>, reason: &str) -> SessionEnd {
    if draining.is_some() {
        SessionEnd::Drained
    } else {
        SessionEnd::Retry(reason.to_string())
    }
}

/// When spans are exported, a span `tasks` for each batch of an
/// assignment's tasks that belong to one trace context (`[0]`: those
/// without one), in that context's trace: a task of batch `i` names
/// `spans[i]`, and a span ends once its last task is reported. A
/// `traceparent` that is not valid starts a trace of its own. Nothing when
/// spans are not exported.
fn batch_spans(assign: &v1::Assign) -> Vec<tracing::Span> {
    if !colball_telemetry::exporting() {
        return Vec::new();
    }
    // (At most a context per task is looked at.)
    let contexts = assign.traceparents.len().min(assign.tasks.len());
    let mut counts = vec![0usize; contexts + 1];
    for task in &assign.tasks {
        counts[batch_of(task, contexts)] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(at, &count)| {
            if count == 0 {
                return tracing::Span::none();
            }
            let span = tracing::info_span!(parent: None, "tasks", count);
            if at > 0 {
                telemetry::context::adopt_traceparent(&span, &assign.traceparents[at - 1]);
            }
            span
        })
        .collect()
}

/// The batch of its assignment `task` belongs to (see [`batch_spans`]):
/// the context it names, counted from 1, or 0 for none or a number past
/// the `contexts` looked at.
fn batch_of(task: &v1::Task, contexts: usize) -> usize {
    let at = task.trace as usize;
    if at <= contexts { at } else { 0 }
}

/// Results in one message.
fn results_message(results: Vec<v1::TaskResult>) -> v1::WorkerMessage {
    v1::WorkerMessage {
        kind: Some(worker_message::Kind::Results(v1::Results { results })),
    }
}

/// A task given back unsolved (the coordinator queues it again).
fn given_back(task_id: u64, why: &str) -> v1::TaskResult {
    tracing::debug!(task_id, why, "task given back");
    v1::TaskResult {
        task_id,
        outcome: Some(task_result::Outcome::Cancelled(v1::Cancelled {})),
    }
}

/// Hands a task to the pool; returns a result to send at once when the
/// task cannot be queued (malformed, or the pool is gone).
fn submit(pool: &Pool, session: u64, task: &v1::Task) -> Option<v1::TaskResult> {
    let task_id = task.task_id;
    let puzzle = match task_puzzle(task) {
        Ok(p) => p,
        Err(e) => {
            return Some(v1::TaskResult {
                task_id,
                outcome: Some(task_result::Outcome::Error(e.to_string())),
            });
        }
    };
    // Announced as it arrives, so that `auto` sees targets that many
    // assigned puzzles share and builds a distance table once they pay for
    // one; `target_share` says how many the coordinator saw of this target
    // (more than we will at once).
    pool.engine.announce_hinted(&puzzle, task.target_share);
    match pool.queue.send(ToSolve {
        session,
        task_id,
        puzzle,
    }) {
        Ok(()) => None,
        Err(_) => Some(given_back(task_id, "the solver threads are gone")),
    }
}
