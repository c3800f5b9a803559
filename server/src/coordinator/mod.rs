//! The coordinator: serves clients (`colball.v1.Solver`) and workers
//! (`colball.v1.Workers`) on one gRPC listener.
//!
//! The scheduling core is [`state::State`], a pure state machine (with its
//! policies in [`policy`]); this module is its thin async driver. Every
//! call into the state happens under one mutex and returns
//! [`state::Effect`]s, which [`Shared::apply`] carries out after the lock
//! is released: messages to workers' session streams, results to requests'
//! streams, events to the log, answers to the result cache.
//!
//! A request is parsed (bad puzzles become error results at once),
//! answered from the result cache where possible, and the rest admitted
//! into the state. Its stream ([`RequestStream`]) reads results as they are
//! delivered and tells the state how far its client has read (so a client
//! that stops reading stops its work, and unread results count against
//! `--max-pending`); when the client goes away or its deadline passes,
//! dropping the stream ends the request and cancels its remaining work.
//!
//! Workers are lost when their stream breaks, after `missed_heartbeats`
//! heartbeat intervals of silence, or when they hold a task past the task
//! timeout; their tasks go back to the front of their class (at most
//! `max_attempts` dispatches per task). A worker whose answer fails the
//! replay check is quarantined.

pub mod events;
mod grade;
pub mod jobs;
pub mod per_client;
pub mod policy;
pub mod state;
mod tasks;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use colball_proto::v1::solver_server::{Solver, SolverServer};
use colball_proto::v1::workers_server::{Workers, WorkersServer};
use colball_proto::v1::{self, coordinator_message, worker_message};
use colball_proto::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION, Secret, batch_from_wire};
use dashmap::DashMap;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream, UnboundedReceiverStream};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::auth::{self, Identity, Role, TokenSet};
use crate::cache::ResultCache;
use crate::error::ServerError;
use events::{BatchEvents, EventLog, Traffic};
use per_client::{PerClient, Slot};
use policy::{Credit, Priority};
use state::{Effect, Effects, Limits, LossReason, NewTask, RequestSpec, Snapshot, State};

/// What a request's stream receives: a result, or the status that ends it.
pub type BatchEvent = Result<v1::PuzzleResult, Status>;
/// What a worker's session stream sends.
type WorkerTx = mpsc::UnboundedSender<Result<v1::CoordinatorMessage, Status>>;

/// Coordinator settings. `Config::default()` suits one machine.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most results admitted and not yet read by their clients, over all
    /// clients (queued, in flight, solved and unread).
    pub max_pending: usize,
    /// Most puzzles in one request.
    pub max_batch: usize,
    /// Results one request may leave unread before its remaining tasks
    /// wait for its client to read.
    pub max_unread: usize,
    /// Dispatches of one puzzle before it gets an error result.
    pub max_attempts: u32,
    /// Tasks a worker may hold per slot: 2 lets each solver thread have the
    /// next puzzle at hand while it solves one, so no thread idles for a
    /// network round trip; a slow worker still holds only twice its slots.
    pub credit_per_slot: u32,
    /// Most slots one worker may register.
    pub max_worker_slots: u32,
    /// Most tasks in one assignment message.
    pub max_chunk: usize,
    /// How often workers send heartbeats.
    pub heartbeat_interval: Duration,
    /// Heartbeat intervals of silence after which a worker is lost.
    pub missed_heartbeats: u32,
    /// Longest a worker may hold one task before it counts as stuck.
    pub task_timeout: Duration,
    /// How long a request waits for a first worker before UNAVAILABLE.
    pub worker_grace: Duration,
    /// How long a worker whose answer failed the check may not register
    /// again.
    pub quarantine: Duration,
    /// Fraction of answers re-solved on another worker to catch answers
    /// that replay but are not optimal (0: none; 1: every puzzle twice).
    pub audit_rate: f64,
    /// Entries of the result cache (0 turns it off).
    pub cache_capacity: usize,
    /// Time for in-flight requests to finish after shutdown begins.
    pub drain_timeout: Duration,
    /// Cluster events kept for watchers that resume from a sequence number.
    pub events_retained: usize,
    /// Most requests (batches or single puzzles) in flight per client
    /// (0: no limit); see [`per_client`].
    pub max_batches_per_client: usize,
    /// The token clients must send (`Solver`), named `default`; `None`
    /// (and no tokens file): anyone may call.
    pub client_token: Option<Secret>,
    /// A file of `name token` lines: more client tokens, each naming its
    /// client for fair sharing and limits. Read again on
    /// [`Shared::reload_tokens`] (SIGHUP in the binary).
    pub client_tokens_file: Option<std::path::PathBuf>,
    /// The token workers must send (`Workers`); `None`: anyone may join.
    pub worker_token: Option<Secret>,
    /// TLS for the gRPC port; `None`: plaintext.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// Where the job store lives (`None`: in memory, lost on restart).
    pub data_dir: Option<std::path::PathBuf>,
    /// Most puzzles in one job.
    pub max_job_puzzles: usize,
    /// Finished jobs are deleted this long after they finished.
    pub job_retention: Duration,
    /// Most bytes the job store may take before `Submit` is refused
    /// (`None`: no limit).
    pub max_store_bytes: Option<u64>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_pending: 1_000_000,
            max_batch: 200_000,
            max_unread: 16_384,
            max_attempts: 3,
            credit_per_slot: 2,
            max_worker_slots: 256,
            max_chunk: 1024,
            heartbeat_interval: Duration::from_secs(1),
            missed_heartbeats: 3,
            task_timeout: Duration::from_secs(30),
            worker_grace: Duration::from_secs(10),
            quarantine: Duration::from_secs(600),
            audit_rate: 0.01,
            cache_capacity: 1_000_000,
            drain_timeout: Duration::from_secs(10),
            events_retained: events::DEFAULT_RETAINED,
            max_batches_per_client: 64,
            client_token: None,
            client_tokens_file: None,
            worker_token: None,
            tls: None,
            data_dir: None,
            max_job_puzzles: 10_000_000,
            job_retention: Duration::from_secs(168 * 3600),
            max_store_bytes: None,
        }
    }
}

/// A setting out of its range: what is wrong, naming the setting (and the
/// command-line flag that sets it).
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub field: &'static str,
    /// The flag of `colball-server coordinator` ("" for a setting that has
    /// none).
    pub flag: &'static str,
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.flag.is_empty() {
            write!(f, "Config::{}: {}", self.field, self.problem)
        } else {
            write!(
                f,
                "{} (Config::{}): {}",
                self.flag, self.field, self.problem
            )
        }
    }
}

impl Config {
    /// Checks every setting's range; the one place the coordinator's
    /// settings are checked (the binary only converts its flags).
    /// [`Shared::new`] refuses a config that fails.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, flag, problem: String| {
            Err(ConfigError {
                field,
                flag,
                problem,
            })
        };
        let at_least_one = [
            (self.max_batch, "max_batch", "--max-batch"),
            (self.max_pending, "max_pending", "--max-pending"),
            (self.max_unread, "max_unread", "--max-unread"),
            (self.max_chunk, "max_chunk", ""),
            (self.max_job_puzzles, "max_job_puzzles", "--max-job-puzzles"),
            (self.credit_per_slot as usize, "credit_per_slot", ""),
            (
                self.max_worker_slots as usize,
                "max_worker_slots",
                "--max-worker-slots",
            ),
            (self.missed_heartbeats as usize, "missed_heartbeats", ""),
        ];
        for (value, field, flag) in at_least_one {
            if value == 0 {
                return bad(field, flag, "must be at least 1, not 0".into());
            }
        }
        if !(1..=state::MAX_ATTEMPTS).contains(&self.max_attempts) {
            return bad(
                "max_attempts",
                "--max-attempts",
                format!(
                    "must be 1 to {}, not {}",
                    state::MAX_ATTEMPTS,
                    self.max_attempts
                ),
            );
        }
        if self.heartbeat_interval < Duration::from_millis(10) {
            return bad(
                "heartbeat_interval",
                "--heartbeat-ms",
                format!(
                    "must be at least 10 ms, not {} ms",
                    self.heartbeat_interval.as_millis()
                ),
            );
        }
        if self.task_timeout.is_zero() {
            return bad(
                "task_timeout",
                "--task-timeout-secs",
                "must be more than 0".into(),
            );
        }
        if !(0.0..=1.0).contains(&self.audit_rate) {
            return bad(
                "audit_rate",
                "--audit-rate",
                format!("must be between 0 and 1, not {}", self.audit_rate),
            );
        }
        Ok(())
    }

    /// The state machine's limits (from a validated config).
    fn limits(&self) -> Limits {
        Limits {
            max_pending: self.max_pending,
            max_attempts: self.max_attempts,
            credit: Credit::new(self.credit_per_slot),
            max_chunk: self.max_chunk,
            max_unread: self.max_unread,
            max_worker_slots: self.max_worker_slots,
            task_timeout: self.task_timeout,
            silence_timeout: self.heartbeat_interval * self.missed_heartbeats,
            worker_grace: self.worker_grace,
            quarantine: self.quarantine,
            audit_rate: self.audit_rate,
            max_audits: 10_000,
            cache_results: self.cache_capacity > 0,
        }
    }
}

/// One worker's session as the driver holds it.
#[derive(Debug)]
struct Link {
    tx: WorkerTx,
    /// Stops the session's reader when the state closes it.
    stop: CancellationToken,
}

/// State shared by both services and the housekeeping task.
#[derive(Debug)]
pub struct Shared {
    config: Config,
    state: Mutex<State>,
    cache: ResultCache,
    per_client: Arc<PerClient>,
    tokens: Arc<TokenSet>,
    workers: watch::Sender<usize>,
    events: Arc<EventLog>,
    shutdown: CancellationToken,
    /// Numbers for requests and workers (the state takes them as inputs).
    next_id: AtomicU64,
    /// Numbers for workers, apart, so that worker names read `w1#1`,
    /// `w2#2` in joining order.
    next_worker: AtomicU64,
    outboxes: DashMap<u64, mpsc::UnboundedSender<BatchEvent>, foldhash::fast::RandomState>,
    links: DashMap<u64, Link, foldhash::fast::RandomState>,
    /// The job store, the jobs running now, and the store's writer.
    store: Arc<crate::store::Store>,
    runs: DashMap<i64, jobs::Run>,
    writer: mpsc::UnboundedSender<jobs::ToWrite>,
    writer_rx: Mutex<Option<mpsc::UnboundedReceiver<jobs::ToWrite>>>,
    /// Every task a request, a job, a watcher or a worker session runs
    /// ([`Shared::spawn`]): shutdown waits for them, up to its deadline.
    tasks: TaskTracker,
}

/// Why the coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokens(#[from] auth::TokenFileError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl Shared {
    /// Builds the coordinator's shared state (opening the job store and
    /// reading the client tokens file), for [`serve`] and the HTTP
    /// endpoint; nothing runs until they do.
    pub fn new(config: Config, shutdown: CancellationToken) -> Result<Arc<Shared>, StartError> {
        config.validate()?;
        let tokens = TokenSet::new(
            config.client_token.clone(),
            config.client_tokens_file.clone(),
        )?;
        let events = Arc::new(EventLog::new(config.events_retained));
        let store = jobs::open_store(config.data_dir.as_deref(), config.max_store_bytes)?;
        let (writer, writer_rx) = mpsc::unbounded_channel();
        Ok(Arc::new(Shared {
            store,
            runs: DashMap::new(),
            tasks: TaskTracker::new(),
            writer,
            writer_rx: Mutex::new(Some(writer_rx)),
            state: Mutex::new(State::new(config.limits(), Instant::now())),
            events,
            cache: ResultCache::new(config.cache_capacity),
            per_client: PerClient::new(config.max_batches_per_client),
            tokens,
            workers: watch::channel(0).0,
            next_id: AtomicU64::new(1),
            next_worker: AtomicU64::new(1),
            outboxes: DashMap::default(),
            links: DashMap::default(),
            config,
            shutdown,
        }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock would leave the books half-written; there
        // is no safe way on, so stop loudly rather than serve wrong results.
        self.state.lock().unwrap_or_else(|_| {
            tracing::error!("coordinator state poisoned; aborting");
            std::process::abort()
        })
    }

    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs `task` for a request, a job, a watcher or a worker session, in
    /// `span` (which names it: one grep of the logs for the span's id
    /// follows it); shutdown waits for it up to its deadline.
    fn spawn(&self, span: tracing::Span, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task.instrument(span));
    }

    /// Tasks of requests, jobs, watchers and sessions still running.
    pub fn running_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Runs one operation on the state and applies its effects after the
    /// lock is released.
    fn run<T>(&self, op: impl FnOnce(&mut State) -> (T, Effects)) -> T {
        let (value, effects, workers) = {
            let mut state = self.state();
            let (value, effects) = op(&mut state);
            // Answers reach the cache before the lock is let go: a puzzle
            // is then always pending, cached or not yet seen by the state,
            // and an admission that finds it neither pending nor cached
            // under the lock knows it is not solved (`admit_request`).
            // (Collected in place: the vector is reused.)
            let effects: Effects = effects
                .into_iter()
                .filter_map(|effect| match effect {
                    Effect::Cache { puzzle, answer } => {
                        self.cache.insert(puzzle, answer);
                        None
                    }
                    other => Some(other),
                })
                .collect();
            (value, effects, state.worker_count())
        };
        self.apply(effects);
        if *self.workers.borrow() != workers {
            self.workers.send_replace(workers);
        }
        value
    }

    /// Carries out the state's effects.
    fn apply(&self, effects: Effects) {
        for effect in effects {
            match effect {
                Effect::Assign { worker, tasks } => self.send(
                    worker,
                    coordinator_message::Kind::Assign(v1::Assign { tasks }),
                ),
                Effect::Cancel { worker, tasks } => self.send(
                    worker,
                    coordinator_message::Kind::Cancel(v1::Cancel { task_ids: tasks }),
                ),
                Effect::Close { worker, reason } => {
                    if let Some((_, link)) = self.links.remove(&worker) {
                        if let Some(status) = close_status(&reason) {
                            let _ = link.tx.send(Err(status));
                        }
                        link.stop.cancel();
                    }
                }
                Effect::Deliver { request, result } => {
                    if let Some(tx) = self.outboxes.get(&request) {
                        let _ = tx.send(Ok(result));
                    }
                }
                Effect::Fail { request, failure } => {
                    if let Some(tx) = self.outboxes.get(&request) {
                        let _ = tx.send(Err(ServerError::from(failure).into()));
                    }
                }
                Effect::Publish(mut kind) => {
                    if let v1::cluster_event::Kind::WorkerQuarantined(q) = &mut kind {
                        q.until_unix_ms =
                            events::unix_ms() + self.config.quarantine.as_millis() as i64;
                    }
                    self.events.publish(kind);
                }
                // (`run` applies these under the lock; any other caller's
                // here.)
                Effect::Cache { puzzle, answer } => self.cache.insert(puzzle, answer),
                Effect::Evict { worker } => {
                    let n = self.cache.evict_worker(&worker);
                    tracing::warn!(%worker, evicted = n, "cached answers of a quarantined worker evicted");
                }
            }
        }
    }

    fn send(&self, worker: u64, kind: coordinator_message::Kind) {
        if let Some(link) = self.links.get(&worker) {
            // A closed stream means the session is ending; its reader
            // reports the loss.
            let _ = link
                .tx
                .send(Ok(v1::CoordinatorMessage { kind: Some(kind) }));
        }
    }

    /// A metrics snapshot (also used by the HTTP endpoint).
    pub fn snapshot(&self) -> (Snapshot, usize) {
        (self.state().snapshot(), self.cache.len())
    }

    /// Totals and recent traffic from the event log.
    pub fn traffic(&self) -> Traffic {
        self.events.traffic()
    }

    /// The event log (for the dashboard's live updates and `/metrics`).
    pub fn events(&self) -> &Arc<EventLog> {
        &self.events
    }

    /// The coordinator's result cache.
    pub fn cache(&self) -> &ResultCache {
        &self.cache
    }

    /// The job store.
    pub fn store(&self) -> &Arc<crate::store::Store> {
        &self.store
    }

    /// The client tokens (the HTTP endpoint's `/api` checks them too).
    pub fn tokens(&self) -> &Arc<TokenSet> {
        &self.tokens
    }

    /// Reads the client tokens file again (SIGHUP); on an error the tokens
    /// in use stay.
    pub fn reload_tokens(&self) -> Result<usize, auth::TokenFileError> {
        self.tokens.reload()
    }

    /// True once shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// The status a worker's stream ends with, when it should say why.
fn close_status(reason: &LossReason) -> Option<Status> {
    match reason {
        LossReason::Quarantined(r) => Some(Status::permission_denied(format!(
            "quarantined: {r}; this worker's answers are refused for --quarantine-secs"
        ))),
        LossReason::Protocol(e) => Some(Status::invalid_argument(format!("protocol error: {e}"))),
        LossReason::Stuck => Some(Status::deadline_exceeded(
            "a task was held past the coordinator's --task-timeout-secs; reconnect",
        )),
        LossReason::Silent => Some(Status::deadline_exceeded("heartbeats missed; reconnect")),
        LossReason::Left | LossReason::Disconnected | LossReason::Shutdown => None,
    }
}

/// Serves until `shutdown` is cancelled, then ends every stream and waits
/// up to `drain_timeout` for connections to close.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let shared = Shared::new(config, shutdown.clone())?;
    serve(listener, shared, shutdown).await?;
    Ok(())
}

/// Why the coordinator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// Serves the services of `shared` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "coordinator listening");
    }
    let housekeeping = tokio::spawn(housekeeping(shared.clone()));
    let writer_rx = shared
        .writer_rx
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(rx) = writer_rx {
        // The writer ends with the process (its sender lives in `shared`).
        tokio::spawn(jobs::writer(shared.clone(), rx));
        shared.spawn(tracing::info_span!("jobs"), jobs::resume(shared.clone()));
        shared.spawn(tracing::info_span!("jobs"), jobs::retention(shared.clone()));
    }
    let drain_timeout = shared.config.drain_timeout;
    // When the drain ends: `drain_timeout` after the shutdown began.
    let drain_until = Arc::new(std::sync::OnceLock::new());
    let closer = {
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let drain_until = drain_until.clone();
        async move {
            shutdown.cancelled().await;
            let _ = drain_until.set(tokio::time::Instant::now() + drain_timeout);
            tracing::info!("coordinator shutting down");
            shared.run(|s| ((), s.shutdown()));
            shared.workers.send_replace(0);
        }
    };
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = shared.config.tls.clone() {
        builder = builder.tls_config(tls)?;
    }
    let client_auth = auth::check_clients(shared.tokens.clone());
    let worker_auth = auth::check(shared.config.worker_token.clone(), Role::Worker);
    let solver = SolverServer::new(SolverService {
        shared: shared.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let job_service = v1::jobs_server::JobsServer::new(jobs::JobsService {
        shared: shared.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let workers = WorkersServer::new(WorkersService {
        shared: shared.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Health stays open (probes carry no token); reflection describes the
    // client API, so it asks for the client token like the API itself.
    let (health, health_service) = tonic_health::server::health_reporter();
    health_initial(&health).await;
    let health_task = tokio::spawn(report_health(shared.clone(), health));
    let (reflection_v1, reflection_v1alpha) = reflection();
    let server = builder
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(InterceptedService::new(solver, client_auth.clone()))
        .add_service(InterceptedService::new(job_service, client_auth.clone()))
        .add_service(InterceptedService::new(workers, worker_auth))
        .add_service(health_service)
        .add_optional_service(
            reflection_v1.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .add_optional_service(
            reflection_v1alpha.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener).map(|s| {
                s.inspect(|s| {
                    // Small replies must not wait for a delayed ACK.
                    let _ = s.set_nodelay(true);
                })
            }),
            closer,
        );
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(drain_timeout).await;
        } => {
            tracing::warn!("drain timeout passed; closing remaining connections");
            Ok(())
        }
    };
    // The requests', jobs' and sessions' own tasks end with their streams;
    // what is still running at the deadline is dropped with the runtime.
    shared.tasks.close();
    let until = drain_until
        .get()
        .copied()
        .unwrap_or_else(|| tokio::time::Instant::now() + drain_timeout);
    if tokio::time::timeout_at(until, shared.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = shared.tasks.len(),
            "drain timeout passed with tasks still running"
        );
    }
    housekeeping.abort();
    health_task.abort();
    result
}

/// gRPC server reflection (v1, and v1alpha for older tools) over the
/// colball and health services, so grpcurl and other generic clients can
/// list and call them without the `.proto` files.
fn reflection() -> (
    Option<
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
    >,
    Option<
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    >,
) {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(colball_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let warn = |e: tonic_reflection::server::Error| {
        tracing::error!(error = %e, "server reflection disabled: bad descriptor set");
    };
    (
        builder().build_v1().map_err(warn).ok(),
        builder().build_v1alpha().map_err(warn).ok(),
    )
}

fn service_names() -> (&'static str, &'static str) {
    (
        <SolverServer<SolverService> as tonic::server::NamedService>::NAME,
        <WorkersServer<WorkersService> as tonic::server::NamedService>::NAME,
    )
}

/// The statuses before the first worker: set before serving, so no early
/// health check finds a service unknown.
async fn health_initial(health: &tonic_health::server::HealthReporter) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let (solver, workers) = service_names();
    health.set_service_status(workers, Serving).await;
    health.set_service_status(solver, NotServing).await;
}

/// Keeps `grpc.health.v1` in step with the cluster: the server (service
/// `""`) and `colball.v1.Workers` serve while the coordinator runs;
/// `colball.v1.Solver` serves only while at least one worker is connected
/// (like `/readyz`). Everything turns NOT_SERVING at shutdown.
async fn report_health(shared: Arc<Shared>, mut health: tonic_health::server::HealthReporter) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let (solver, workers) = service_names();
    let mut count = shared.workers.subscribe();
    let mut last = None;
    loop {
        let ready = *count.borrow_and_update() > 0 && !shared.shutdown.is_cancelled();
        // The count is republished on every housekeeping tick; health
        // watchers hear only real changes.
        if last != Some(ready) {
            last = Some(ready);
            health
                .set_service_status(solver, if ready { Serving } else { NotServing })
                .await;
        }
        tokio::select! {
            changed = count.changed() => if changed.is_err() { break },
            () = shared.shutdown.cancelled() => break,
        }
    }
    for service in ["", solver, workers] {
        health.set_service_status(service, NotServing).await;
    }
    // Dropping the statuses ends every health Watch stream, so health
    // watchers do not hold the shutdown up until the drain timeout.
    for service in ["", solver, workers] {
        health.clear_service_status(service).await;
    }
}

/// Declares silent and stuck workers lost, fails requests left without
/// workers, and publishes queue depths.
async fn housekeeping(shared: Arc<Shared>) {
    let interval = shared.config.heartbeat_interval;
    let mut tick = tokio::time::interval((interval / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        shared.run(|s| ((), s.tick(Instant::now())));
    }
}

type ResultStream = Pin<Box<dyn Stream<Item = Result<v1::PuzzleResult, Status>> + Send>>;
type EventStream = Pin<Box<dyn Stream<Item = Result<v1::ClusterEvent, Status>> + Send>>;
type SessionStream = Pin<Box<dyn Stream<Item = Result<v1::CoordinatorMessage, Status>> + Send>>;

/// The client-facing service.
#[derive(Debug)]
struct SolverService {
    shared: Arc<Shared>,
}

/// The client a call counts for: its token's name, or its IP address.
fn client_of<T>(request: &Request<T>) -> String {
    if let Some(Identity(name)) = request.extensions().get::<Identity>() {
        return name.to_string();
    }
    request
        .remote_addr()
        .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string())
}

/// The results of one admitted request as they are delivered. Reading
/// tells the state how far the client got (so it can hold back the work of
/// a client that does not read); dropping it ends the request, cancelling
/// what is left of its work.
struct RequestStream {
    shared: Arc<Shared>,
    id: u64,
    rx: mpsc::UnboundedReceiver<BatchEvent>,
    buffer: std::collections::VecDeque<BatchEvent>,
    /// Results taken from the channel (answered-at-once ones included), and
    /// results passed on to the client.
    received: usize,
    sent: usize,
    acked: (usize, usize),
}

impl RequestStream {
    /// The next result, or `None` when the coordinator dropped the request
    /// (shutting down).
    async fn next(&mut self) -> Option<BatchEvent> {
        if let Some(event) = self.buffer.pop_front() {
            return Some(event);
        }
        self.ack();
        let mut batch = Vec::new();
        if self.rx.recv_many(&mut batch, 256).await == 0 {
            return None;
        }
        self.received += batch.len();
        self.buffer.extend(batch);
        self.buffer.pop_front()
    }

    /// Every result that has arrived, at least one (waiting for it), into
    /// `out`; `false` when the coordinator dropped the request.
    async fn next_batch(&mut self, out: &mut Vec<BatchEvent>) -> bool {
        if self.buffer.is_empty() {
            self.ack();
            let got = self.rx.recv_many(out, 1024).await;
            self.received += got;
            return got > 0;
        }
        out.extend(self.buffer.drain(..));
        true
    }

    /// Counts results passed on to the client.
    fn sent(&mut self, n: usize) {
        self.sent += n;
    }

    fn ack(&mut self) {
        if self.acked != (self.received, self.sent) {
            self.acked = (self.received, self.sent);
            let (id, received, sent) = (self.id, self.received, self.sent);
            self.shared
                .run(|s| ((), s.ack(id, received, sent, Instant::now())));
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        let id = self.id;
        self.shared.run(|s| ((), s.end_request(id, Instant::now())));
        self.shared.outboxes.remove(&id);
    }
}

/// A request after parsing and the cache: results known now, and the
/// stream the rest arrive on.
struct Admitted {
    ready: Vec<v1::PuzzleResult>,
    stream: RequestStream,
    total: usize,
    /// Reports the request's results and end to watchers.
    events: BatchEvents,
    /// The request's place among its client's requests in flight.
    slot: Slot,
}

impl Shared {
    /// Admits a request into the state: its results arrive on the stream
    /// returned (which ends the request when dropped), except those of
    /// tasks solved since the caller looked in the result cache, which are
    /// returned beside it (counted as received).
    fn admit_request(
        self: &Arc<Self>,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
    ) -> Result<(RequestStream, Vec<v1::PuzzleResult>), ServerError> {
        let id = self.fresh_id();
        let (tx, rx) = mpsc::unbounded_channel();
        // The outbox exists before the state can deliver to it.
        self.outboxes.insert(id, tx);
        let cache = &self.cache;
        let admitted = self.run(|s| {
            // A puzzle solved between the caller's look in the cache and
            // this lock is in the cache now (see `run`): solve it once.
            let on = cache.is_on();
            let known = |t: &NewTask| {
                if !on {
                    return None;
                }
                let answer = cache.recheck(&t.puzzle)?;
                Some(answer.to_result(t.id.clone(), t.index))
            };
            match s.admit_known(id, spec, tasks, Instant::now(), known) {
                Ok((effects, late)) => (Ok(late), effects),
                Err(e) => (Err(e), Vec::new()),
            }
        });
        let late = match admitted {
            Ok(late) => late,
            Err(e) => {
                self.outboxes.remove(&id);
                return Err(e);
            }
        };
        let stream = RequestStream {
            shared: self.clone(),
            id,
            rx,
            buffer: Default::default(),
            received: late.len(),
            sent: 0,
            acked: (0, 0),
        };
        Ok((stream, late))
    }
}

/// One puzzle of a request as read: its id, and the puzzle or why it is
/// invalid.
type Parsed = (
    String,
    Result<colball_solver::Puzzle, colball_proto::InvalidPuzzle>,
);

/// Who sent a request and how it wants to be served.
struct Caller {
    client: String,
    priority: Priority,
}

impl SolverService {
    /// Admits a request's puzzles; `request` names the RPC for watchers.
    /// Reads a request's puzzles, once: within `--max-batch`, each one
    /// parsed (or why it is invalid) beside its id.
    fn parse(&self, puzzles: Vec<v1::Puzzle>) -> Result<Vec<Parsed>, ServerError> {
        let limit = self.shared.config.max_batch;
        if puzzles.len() > limit {
            return Err(ServerError::BatchTooLarge {
                batch: puzzles.len(),
                limit,
            });
        }
        let parsed = batch_from_wire(&puzzles)?;
        Ok(puzzles
            .into_iter()
            .zip(parsed)
            .map(|(wire, puzzle)| (wire.id, puzzle))
            .collect())
    }

    /// Admits a request's parsed puzzles ([`Self::parse`]).
    async fn admit(
        &self,
        batch: Vec<Parsed>,
        request: &str,
        caller: Caller,
    ) -> Result<Admitted, ServerError> {
        let shared = &self.shared;
        if shared.shutdown.is_cancelled() {
            return Err(ServerError::ShuttingDown);
        }
        let slot = shared.per_client.acquire(&caller.client)?;
        let total = batch.len();
        let mut ready = Vec::new();
        let mut tasks = Vec::new();
        for (index, (id, parsed)) in batch.into_iter().enumerate() {
            let index = index as u64;
            match parsed {
                Err(e) => ready.push(v1::PuzzleResult::invalid(index, &e)),
                Ok(puzzle) => match shared.cache.get(&puzzle) {
                    Some(a) => ready.push(a.to_result(id, index)),
                    None => tasks.push(NewTask { index, id, puzzle }),
                },
            }
        }
        if !tasks.is_empty() {
            self.wait_for_a_worker().await?;
        }
        let spec = RequestSpec {
            client: caller.client.clone(),
            priority: caller.priority,
            total,
        };
        let (mut stream, late) = shared.admit_request(spec, tasks)?;
        stream.received += ready.len();
        ready.extend(late);
        Ok(Admitted {
            ready,
            stream,
            total,
            events: BatchEvents::accept(
                shared.events.clone(),
                total,
                request,
                caller.priority.name(),
                &caller.client,
            ),
            slot,
        })
    }

    /// Waits up to the grace period for a first worker.
    async fn wait_for_a_worker(&self) -> Result<(), ServerError> {
        let grace = self.shared.config.worker_grace;
        let mut workers = self.shared.workers.subscribe();
        let ever = {
            let s = self.shared.state();
            if s.worker_count() > 0 {
                return Ok(());
            }
            s.ever_had_worker()
        };
        match tokio::time::timeout(grace, workers.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ServerError::ShuttingDown),
            Err(_) => Err(ServerError::NoWorkers {
                waited: grace,
                ever,
            }),
        }
    }
}

/// The priority of a request: its field, or the RPC's default.
fn priority(value: i32, default: Priority) -> Result<Priority, ServerError> {
    Priority::from_wire(value, default).ok_or(ServerError::BadPriority(value))
}

#[tonic::async_trait]
impl Solver for SolverService {
    async fn solve(
        &self,
        request: Request<v1::SolveRequest>,
    ) -> Result<Response<v1::PuzzleResult>, Status> {
        // tonic drops this future when the deadline passes; dropping the
        // stream then ends the request.
        let client = client_of(&request);
        let request = request.into_inner();
        let caller = Caller {
            client,
            priority: priority(request.priority, Priority::Interactive)?,
        };
        let puzzle = request.puzzle.ok_or(ServerError::MissingPuzzle)?;
        let batch = self.parse(vec![puzzle])?;
        if let Some((_, Err(e))) = batch.first() {
            return Err(ServerError::from(e.clone()).into());
        }
        let mut admitted = self.admit(batch, "solve", caller).await?;
        let result = match admitted.ready.pop() {
            Some(result) => Ok(result),
            None => match admitted.stream.next().await {
                Some(Ok(result)) => Ok(result),
                Some(Err(status)) => Err(status),
                None => Err(ServerError::ShuttingDown.into()),
            },
        };
        match &result {
            Ok(r) => {
                admitted.events.result(r);
                admitted.events.finish("complete");
            }
            Err(status) => admitted.events.finish(status.message()),
        }
        result.map(Response::new)
    }

    type GradeStream = grade::GradeStream;

    async fn grade(
        &self,
        request: Request<v1::GradeRequest>,
    ) -> Result<Response<grade::GradeStream>, Status> {
        grade::grade(self, request).await
    }

    type SolveBatchStream = ResultStream;

    async fn solve_batch(
        &self,
        request: Request<v1::SolveBatchRequest>,
    ) -> Result<Response<ResultStream>, Status> {
        let deadline = grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
        let client = client_of(&request);
        let request = request.into_inner();
        let caller = Caller {
            client,
            priority: priority(request.priority, Priority::Normal)?,
        };
        let batch = self.parse(request.puzzles)?;
        let admitted = self.admit(batch, "solve_batch", caller).await?;
        tracing::debug!(
            puzzles = admitted.total,
            ready = admitted.ready.len(),
            "batch admitted"
        );
        // Results travel in groups (what arrived together); the response
        // stream hands them to tonic one by one, which writes what is
        // ready together.
        let (tx, rx) = mpsc::channel(16);
        let span = tracing::info_span!("request", id = admitted.stream.id, rpc = "solve_batch");
        self.shared
            .spawn(span, forward(admitted, request.ordered, deadline, tx));
        Ok(Response::new(Box::pin(futures_util::StreamExt::flat_map(
            ReceiverStream::new(rx),
            tokio_stream::iter,
        ))))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let from = request.into_inner().from_sequence;
        let subscription = self
            .shared
            .events
            .subscribe(from)
            .map_err(|gone| Status::out_of_range(gone.to_string()))?;
        tracing::debug!(?from, "watcher joined");
        let (tx, rx) = mpsc::channel(256);
        self.shared.spawn(
            tracing::info_span!("watch"),
            follow(self.shared.clone(), subscription, tx),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Streams cluster events to one watcher: its backlog, then live events.
/// A watcher too slow for the live channel catches up from the retained
/// events; if even those have moved past it, its stream ends with
/// OUT_OF_RANGE saying where it could resume.
async fn follow(
    shared: Arc<Shared>,
    subscription: events::Subscription,
    tx: mpsc::Sender<Result<v1::ClusterEvent, Status>>,
) {
    let events::Subscription {
        mut after,
        mut backlog,
        mut live,
    } = subscription;
    loop {
        for event in backlog.drain(..) {
            if event.sequence <= after {
                continue;
            }
            after = event.sequence;
            if tx.send(Ok(event.as_ref().clone())).await.is_err() {
                return;
            }
        }
        let received = tokio::select! {
            r = live.recv() => r,
            () = tx.closed() => return,
            () = shared.shutdown.cancelled() => {
                let _ = tx.send(Err(ServerError::ShuttingDown.into())).await;
                return;
            }
        };
        match received {
            Ok(event) => backlog.push(event),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                match shared.events.since(after + 1) {
                    Ok(missed) => backlog = missed,
                    Err(gone) => {
                        let message = format!("this watcher fell behind: {gone}");
                        let _ = tx.send(Err(Status::out_of_range(message))).await;
                        return;
                    }
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Streams a batch's results to its client, in input order if asked. Ends
/// (and so ends the request, cancelling its remaining work) when every
/// result is sent, the client goes away, or the deadline passes.
async fn forward(
    admitted: Admitted,
    ordered: bool,
    deadline: Option<tokio::time::Instant>,
    tx: mpsc::Sender<Vec<Result<v1::PuzzleResult, Status>>>,
) {
    let Admitted {
        ready,
        mut stream,
        total,
        mut events,
        slot,
    } = admitted;
    let mut held = BTreeMap::new();
    let mut next = 0u64;
    let mut sent = 0usize;
    let expire = expire_at(deadline);
    tokio::pin!(expire);
    let mut incoming: Vec<BatchEvent> = ready.into_iter().map(Ok).collect();
    while sent < total {
        if incoming.is_empty() {
            tokio::select! {
                more = stream.next_batch(&mut incoming) => if !more {
                    incoming.push(Err(ServerError::ShuttingDown.into()));
                },
                () = tx.closed() => {
                    tracing::debug!("client went away; cancelling its batch");
                    break;
                }
                () = &mut expire => incoming.push(Err(ServerError::DeadlineExceeded.into())),
            }
        }
        // What arrived together goes on together: one step of the event
        // log and one message to the response stream.
        let mut results = Vec::with_capacity(incoming.len());
        let failure = take_results(&mut incoming, &mut results);
        events.results(&results);
        let out: Vec<_> = if ordered {
            for r in results {
                held.insert(r.index, r);
            }
            let mut out = Vec::new();
            while let Some(r) = held.remove(&next) {
                next += 1;
                out.push(Ok(r));
            }
            out
        } else {
            results.into_iter().map(Ok).collect()
        };
        let n = out.len();
        sent += n;
        if n > 0 && tx.send(out).await.is_err() {
            tracing::debug!("client went away; cancelling its batch");
            return;
        }
        stream.sent(n);
        if let Some(status) = failure {
            events.finish(status.message());
            let _ = tx.send(vec![Err(status)]).await;
            break;
        }
    }
    if sent == total {
        events.finish("complete");
    }
    // Otherwise the client went away (or an error ended the stream, already
    // reported): dropping `events` says so. Dropping the stream ends the
    // request.
    drop(stream);
    drop(slot);
}

/// Moves the results that arrived together from `arrived` to `results`,
/// up to the first failure, which it returns (what follows a failure is
/// dropped: the request ends there).
fn take_results(
    arrived: &mut Vec<BatchEvent>,
    results: &mut Vec<v1::PuzzleResult>,
) -> Option<Status> {
    for event in arrived.drain(..) {
        match event {
            Ok(result) => results.push(result),
            Err(status) => return Some(status),
        }
    }
    None
}

/// Completes when `deadline` passes; never without one.
async fn expire_at(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Reads the `grpc-timeout` header (`<digits><unit>`, unit one of H M S m u n).
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The worker-facing service.
#[derive(Debug)]
struct WorkersService {
    shared: Arc<Shared>,
}

#[tonic::async_trait]
impl Workers for WorkersService {
    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: Request<Streaming<v1::WorkerMessage>>,
    ) -> Result<Response<SessionStream>, Status> {
        let peer = request.remote_addr();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| ServerError::BadSession("no register message within 10s".into()))?
            .map_err(|s| ServerError::BadSession(s.message().to_string()))?;
        let Some(v1::WorkerMessage {
            kind: Some(worker_message::Kind::Register(register)),
        }) = first
        else {
            return Err(
                ServerError::BadSession("the first message must be register".into()).into(),
            );
        };
        if register.protocol_version != PROTOCOL_VERSION {
            tracing::warn!(peer = %crate::telemetry::addr(peer), name = %register.name, version = register.protocol_version, "worker refused: protocol version mismatch");
            return Err(ServerError::VersionMismatch {
                worker: register.protocol_version,
                coordinator: PROTOCOL_VERSION,
            }
            .into());
        }
        let shared = self.shared.clone();
        let mut name: String = register.name.chars().take(64).collect();
        if name.is_empty() {
            name = "worker".to_string();
        }
        // Credit bounds what is ever queued on this stream: assignments
        // for at most the worker's credit, their cancels, and the greeting.
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = shared.next_worker.fetch_add(1, Ordering::Relaxed);
        let greeting = v1::CoordinatorMessage {
            kind: Some(coordinator_message::Kind::Registered(v1::Registered {
                worker_id: state::shown_name(&name, worker),
                heartbeat_interval_ms: shared.config.heartbeat_interval.as_millis() as u32,
                max_tasks: u32::try_from(shared.config.limits().credit.max_tasks(register.slots))
                    .unwrap_or(u32::MAX),
            })),
        };
        // The greeting goes first, before any assignment.
        let _ = tx.send(Ok(greeting));
        let stop = CancellationToken::new();
        shared.links.insert(
            worker,
            Link {
                tx,
                stop: stop.clone(),
            },
        );
        let ip = peer.map(|p| p.ip());
        let registered =
            shared.run(
                |s| match s.register(worker, &name, ip, register.slots, Instant::now()) {
                    Ok(effects) => (Ok(()), effects),
                    Err(e) => (Err(e), Vec::new()),
                },
            );
        if let Err(e) = registered {
            shared.links.remove(&worker);
            tracing::warn!(peer = %crate::telemetry::addr(peer), %name, error = %e, "worker refused");
            return Err(ServerError::from(e).into());
        }
        tracing::info!(peer = %crate::telemetry::addr(peer), %name, slots = register.slots, worker, "worker joined");
        let span = tracing::info_span!("worker", worker, %name);
        shared
            .clone()
            .spawn(span, session_loop(shared, worker, inbound, stop));
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

/// Reads one worker's messages until its stream ends, the state closes its
/// session, or the coordinator shuts down.
async fn session_loop(
    shared: Arc<Shared>,
    worker: u64,
    mut inbound: Streaming<v1::WorkerMessage>,
    stop: CancellationToken,
) {
    let reason = loop {
        let message = tokio::select! {
            m = inbound.message() => m,
            () = stop.cancelled() => {
                // The state closed this session; its stream ends with a
                // status saying why. Dropping the worker's half now could
                // reset the call before that status is sent, so keep
                // reading (and ignoring) for a moment, until the worker
                // hangs up.
                let linger = async { while let Ok(Some(_)) = inbound.message().await {} };
                let _ = tokio::time::timeout(Duration::from_secs(5), linger).await;
                return;
            }
            () = shared.shutdown.cancelled() => break LossReason::Shutdown,
        };
        let message = match message {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => break LossReason::Disconnected,
        };
        let now = Instant::now();
        match message.kind {
            Some(worker_message::Kind::Heartbeat(h)) => {
                shared.run(|s| {
                    s.heartbeat(worker, h.cache, now);
                    ((), Vec::new())
                });
            }
            None => shared.run(|s| {
                s.heartbeat(worker, None, now);
                ((), Vec::new())
            }),
            Some(worker_message::Kind::Draining(_)) => {
                tracing::info!(worker, "worker draining");
                shared.run(|s| ((), s.drain(worker, now)));
            }
            Some(worker_message::Kind::Results(batch)) => {
                shared.run(|s| ((), s.results(worker, batch.results, now)));
            }
            Some(worker_message::Kind::Register(_)) => {
                tracing::warn!(worker, "worker registered twice; ignored");
            }
        }
    };
    shared.run(|s| ((), s.worker_lost(worker, reason, Instant::now())));
    shared.links.remove(&worker);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_checked_in_one_place_naming_what_is_wrong() {
        assert!(Config::default().validate().is_ok());
        type Spoil = fn(&mut Config);
        let cases: [(Spoil, &str); 7] = [
            (|c| c.max_attempts = 0, "--max-attempts"),
            (|c| c.max_attempts = 70_000, "--max-attempts"),
            (|c| c.max_batch = 0, "--max-batch"),
            (|c| c.max_unread = 0, "--max-unread"),
            (|c| c.audit_rate = f64::NAN, "--audit-rate"),
            (
                |c| c.heartbeat_interval = Duration::from_millis(1),
                "--heartbeat-ms",
            ),
            (|c| c.credit_per_slot = 0, "Config::credit_per_slot"),
        ];
        for (spoil, named) in cases {
            let mut config = Config::default();
            spoil(&mut config);
            let e = config.validate().expect_err(named).to_string();
            assert!(e.contains(named), "{e}");
        }
        // The coordinator refuses to start on one.
        let config = Config {
            max_attempts: 0,
            ..Config::default()
        };
        let refused = Shared::new(config, CancellationToken::new()).map(drop);
        assert!(matches!(refused, Err(StartError::Config(_))));
    }

    #[test]
    fn a_worker_config_is_checked_before_dialling() {
        let mut config = crate::worker::Config::new("http://127.0.0.1:1");
        assert!(config.validate().is_ok());
        config.backoff_initial = config.backoff_max * 2;
        assert!(config.validate().is_err());
        config = crate::worker::Config::new("http://127.0.0.1:1");
        config.name = " ".into();
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("--name"), "{e}");
    }

    #[test]
    fn grpc_timeouts_parse() {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
        m.insert("grpc-timeout", "3S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(3)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
