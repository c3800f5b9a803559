//! The coordinator: serves clients (`colball.v1.Solver`) and workers
//! (`colball.v1.Workers`) on one gRPC listener.
//!
//! A batch is parsed (bad puzzles become error results at once), answered
//! from the result cache where possible, and the rest admitted into
//! [`state::State`], which hands tasks to workers as their credit allows. A
//! task per batch streams results back through a bounded channel; when the
//! client goes away or its deadline passes, that task's guard cancels the
//! batch's queued and running work.
//!
//! Workers are lost when their stream breaks or after `missed_heartbeats`
//! heartbeat intervals of silence; their tasks go back to the front of the
//! queue (at most `max_attempts` dispatches per task).

pub mod events;
mod grade;
pub mod per_client;
pub mod state;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use colball_proto::v1::solver_server::{Solver, SolverServer};
use colball_proto::v1::workers_server::{Workers, WorkersServer};
use colball_proto::v1::{self, coordinator_message, puzzle_result, worker_message};
use colball_proto::{
    MAX_MESSAGE_BYTES, PROTOCOL_VERSION, Secret, batch_from_wire, puzzle_from_wire,
};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::{self, Role};
use crate::cache::ResultCache;
use crate::error::ServerError;
use events::{BatchEvents, EventLog, Traffic};
use per_client::{PerClient, Slot};
use state::{BatchEvent, Limits, NewTask, Snapshot, State};

/// Coordinator settings. `Config::default()` suits one machine.
#[derive(Clone, Debug)]
pub struct Config {
    /// Most puzzles admitted and not yet answered, over all clients.
    pub max_pending: usize,
    /// Most puzzles in one request.
    pub max_batch: usize,
    /// Dispatches of one puzzle before it gets an error result.
    pub max_attempts: u32,
    /// Tasks a worker may hold per slot: 2 lets each solver thread have the
    /// next puzzle at hand while it solves one, so no thread idles for a
    /// network round trip; a slow worker still holds only twice its slots.
    pub credit_per_slot: u32,
    /// Most tasks in one assignment message.
    pub max_chunk: usize,
    /// How often workers send heartbeats.
    pub heartbeat_interval: Duration,
    /// Heartbeat intervals of silence after which a worker is lost.
    pub missed_heartbeats: u32,
    /// How long a request waits for a first worker before UNAVAILABLE.
    pub worker_grace: Duration,
    /// Entries of the result cache (0 turns it off).
    pub cache_capacity: usize,
    /// Time for in-flight requests to finish after shutdown begins.
    pub drain_timeout: Duration,
    /// Cluster events kept for watchers that resume from a sequence number.
    pub events_retained: usize,
    /// Most requests (batches or single puzzles) in flight per client IP
    /// (0: no limit); see [`per_client`].
    pub max_batches_per_client: usize,
    /// The token clients must send (`Solver`); `None`: anyone may call.
    pub client_token: Option<Secret>,
    /// The token workers must send (`Workers`); `None`: anyone may join.
    pub worker_token: Option<Secret>,
    /// TLS for the gRPC port; `None`: plaintext.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_pending: 1_000_000,
            max_batch: 200_000,
            max_attempts: 3,
            credit_per_slot: 2,
            max_chunk: 64,
            heartbeat_interval: Duration::from_secs(1),
            missed_heartbeats: 3,
            worker_grace: Duration::from_secs(10),
            cache_capacity: 1_000_000,
            drain_timeout: Duration::from_secs(10),
            events_retained: events::DEFAULT_RETAINED,
            max_batches_per_client: 64,
            client_token: None,
            worker_token: None,
            tls: None,
        }
    }
}

/// State shared by both services and the housekeeping task.
#[derive(Debug)]
pub struct Shared {
    config: Config,
    state: Mutex<State>,
    cache: ResultCache,
    per_client: Arc<PerClient>,
    workers: watch::Sender<usize>,
    events: Arc<EventLog>,
    shutdown: CancellationToken,
}

impl Shared {
    fn new(config: Config, shutdown: CancellationToken) -> Arc<Shared> {
        let limits = Limits {
            max_pending: config.max_pending,
            max_attempts: config.max_attempts,
            credit_per_slot: config.credit_per_slot.max(1),
            max_chunk: config.max_chunk.max(1),
        };
        let events = Arc::new(EventLog::new(config.events_retained));
        Arc::new(Shared {
            state: Mutex::new(State::new(limits, events.clone(), Instant::now())),
            events,
            cache: ResultCache::new(config.cache_capacity),
            per_client: PerClient::new(config.max_batches_per_client),
            workers: watch::channel(0).0,
            config,
            shutdown,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic under the lock would leave the books half-written; there
        // is no safe way on, so stop loudly rather than serve wrong results.
        self.state.lock().unwrap_or_else(|_| {
            tracing::error!("coordinator state poisoned; aborting");
            std::process::abort()
        })
    }

    fn publish_workers(&self, count: usize) {
        self.workers.send_replace(count);
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

    /// True once shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// Serves until `shutdown` is cancelled, then ends every stream and waits
/// up to `drain_timeout` for connections to close.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let shared = Shared::new(config, shutdown.clone());
    serve(listener, shared, shutdown).await
}

/// Like [`run`], with a handle on the shared state (for the HTTP endpoint).
pub fn start(config: Config, shutdown: CancellationToken) -> Arc<Shared> {
    Shared::new(config, shutdown)
}

/// Serves the services of `shared` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, "coordinator listening");
    let housekeeping = tokio::spawn(housekeeping(shared.clone()));
    let drain_timeout = shared.config.drain_timeout;
    let closer = {
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        async move {
            shutdown.cancelled().await;
            tracing::info!("coordinator shutting down");
            shared.state().close_all(&ServerError::ShuttingDown.into());
            shared.publish_workers(0);
        }
    };
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = shared.config.tls.clone() {
        builder = builder.tls_config(tls)?;
    }
    let client_auth = auth::check(shared.config.client_token.clone(), Role::Client);
    let worker_auth = auth::check(shared.config.worker_token.clone(), Role::Worker);
    let solver = SolverServer::new(SolverService {
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
        .add_service(InterceptedService::new(workers, worker_auth))
        .add_service(health_service)
        .add_optional_service(
            reflection_v1.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .add_optional_service(
            reflection_v1alpha.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), closer);
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

/// Declares silent workers lost and fails batches left without workers.
async fn housekeeping(shared: Arc<Shared>) {
    let interval = shared.config.heartbeat_interval;
    let timeout = interval * shared.config.missed_heartbeats.max(1);
    let mut tick = tokio::time::interval((interval / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut state = shared.state();
        for w in state.silent_workers(now, timeout) {
            state.lose_worker(w, "missed heartbeats", now);
        }
        state.fail_if_no_workers(now, shared.config.worker_grace);
        let count = state.worker_count();
        drop(state);
        shared.publish_workers(count);
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

/// Cancels a batch's remaining work when dropped: when its stream ends, the
/// client disconnects, or a unary call is abandoned.
struct BatchGuard {
    shared: Arc<Shared>,
    batch: Option<u64>,
}

impl Drop for BatchGuard {
    fn drop(&mut self) {
        if let Some(batch) = self.batch {
            self.shared.state().cancel_batch(batch);
        }
    }
}

/// A batch after parsing and the cache: results known now, and the channel
/// the rest arrive on.
struct Admitted {
    ready: Vec<v1::PuzzleResult>,
    rx: mpsc::Receiver<BatchEvent>,
    total: usize,
    guard: BatchGuard,
    /// Reports the request's results and end to watchers.
    events: BatchEvents,
    /// The request's place among its client's requests in flight.
    slot: Slot,
}

impl SolverService {
    /// Admits a request's puzzles; `request` names the RPC for watchers,
    /// `peer` is the client's address (for the per-client limit).
    async fn admit(
        &self,
        puzzles: Vec<v1::Puzzle>,
        request: &str,
        peer: Option<std::net::IpAddr>,
    ) -> Result<Admitted, ServerError> {
        let shared = &self.shared;
        if shared.shutdown.is_cancelled() {
            return Err(ServerError::ShuttingDown);
        }
        if puzzles.len() > shared.config.max_batch {
            return Err(ServerError::BatchTooLarge {
                batch: puzzles.len(),
                limit: shared.config.max_batch,
            });
        }
        let slot = shared.per_client.acquire(peer)?;
        let total = puzzles.len();
        let parsed = batch_from_wire(&puzzles)?;
        let mut ready = Vec::new();
        let mut tasks = Vec::new();
        for (index, (wire, parsed)) in puzzles.into_iter().zip(parsed).enumerate() {
            let index = index as u64;
            match parsed {
                Err(e) => ready.push(v1::PuzzleResult::invalid(index, &e)),
                Ok(puzzle) => match shared.cache.get(&puzzle) {
                    Some(a) => ready.push(v1::PuzzleResult {
                        id: wire.id,
                        index,
                        outcome: Some(puzzle_result::Outcome::Solved(v1::Solved {
                            moves: a.moves,
                            solution: a.solution,
                            strategy: a.strategy,
                            worker: a.worker,
                            time_us: 0,
                            cached: true,
                        })),
                    }),
                    None => tasks.push(NewTask {
                        index,
                        id: wire.id,
                        puzzle,
                    }),
                },
            }
        }
        if !tasks.is_empty() {
            self.wait_for_a_worker().await?;
        }
        let (tx, rx) = mpsc::channel(tasks.len().max(1));
        let batch = if tasks.is_empty() {
            None
        } else {
            Some(shared.state().admit(tasks, tx)?)
        };
        Ok(Admitted {
            ready,
            rx,
            total,
            guard: BatchGuard {
                shared: shared.clone(),
                batch,
            },
            events: BatchEvents::accept(shared.events.clone(), total, request),
            slot,
        })
    }

    /// Waits up to the grace period for a first worker.
    async fn wait_for_a_worker(&self) -> Result<(), ServerError> {
        let grace = self.shared.config.worker_grace;
        let mut workers = self.shared.workers.subscribe();
        if self.shared.state().worker_count() > 0 {
            return Ok(());
        }
        match tokio::time::timeout(grace, workers.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ServerError::ShuttingDown),
            Err(_) => Err(ServerError::NoWorkers { waited: grace }),
        }
    }
}

#[tonic::async_trait]
impl Solver for SolverService {
    async fn solve(
        &self,
        request: Request<v1::SolveRequest>,
    ) -> Result<Response<v1::PuzzleResult>, Status> {
        // tonic drops this future when the deadline passes; the guard then
        // cancels the work.
        let peer = request.remote_addr().map(|a| a.ip());
        let puzzle = request
            .into_inner()
            .puzzle
            .ok_or(ServerError::MissingPuzzle)?;
        if let Err(e) = puzzle_from_wire(&puzzle) {
            return Err(ServerError::from(e).into());
        }
        let mut admitted = self.admit(vec![puzzle], "solve", peer).await?;
        let result = match admitted.ready.pop() {
            Some(result) => Ok(result),
            None => match admitted.rx.recv().await {
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
        let peer = request.remote_addr().map(|a| a.ip());
        let request = request.into_inner();
        let admitted = self.admit(request.puzzles, "solve_batch", peer).await?;
        tracing::debug!(
            puzzles = admitted.total,
            ready = admitted.ready.len(),
            "batch admitted"
        );
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(forward(admitted, request.ordered, deadline, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
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
        tokio::spawn(follow(self.shared.clone(), subscription, tx));
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
/// (and so cancels the remaining work through the guard) when every result
/// is sent, the client goes away, or the deadline passes.
async fn forward(
    admitted: Admitted,
    ordered: bool,
    deadline: Option<tokio::time::Instant>,
    tx: mpsc::Sender<Result<v1::PuzzleResult, Status>>,
) {
    let Admitted {
        ready,
        mut rx,
        total,
        guard,
        mut events,
        slot,
    } = admitted;
    let mut held = BTreeMap::new();
    let mut next = 0u64;
    let mut sent = 0usize;
    let expire = expire_at(deadline);
    tokio::pin!(expire);
    let mut incoming = ready.into_iter().map(Ok).collect::<Vec<_>>();
    incoming.reverse();
    while sent < total {
        let event = match incoming.pop() {
            Some(event) => event,
            None => tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => event,
                    None => Err(ServerError::ShuttingDown.into()),
                },
                () = tx.closed() => {
                    tracing::debug!("client went away; cancelling its batch");
                    break;
                }
                () = &mut expire => Err(ServerError::DeadlineExceeded.into()),
            },
        };
        let result = match event {
            Ok(result) => result,
            Err(status) => {
                events.finish(status.message());
                let _ = tx.send(Err(status)).await;
                break;
            }
        };
        events.result(&result);
        let out: Vec<_> = if ordered {
            held.insert(result.index, result);
            let mut out = Vec::new();
            while let Some(r) = held.remove(&next) {
                next += 1;
                out.push(r);
            }
            out
        } else {
            vec![result]
        };
        for r in out {
            sent += 1;
            if tx.send(Ok(r)).await.is_err() {
                tracing::debug!("client went away; cancelling its batch");
                drop(guard);
                return;
            }
        }
    }
    if sent == total {
        events.finish("complete");
    }
    // Otherwise the client went away (or an error ended the stream, already
    // reported): dropping `events` says so.
    drop(guard);
    drop(slot);
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
            tracing::warn!(?peer, name = %register.name, version = register.protocol_version, "worker refused: protocol version mismatch");
            return Err(ServerError::VersionMismatch {
                worker: register.protocol_version,
                coordinator: PROTOCOL_VERSION,
            }
            .into());
        }
        if register.slots == 0 {
            return Err(
                ServerError::BadSession("register: slots must be at least 1".into()).into(),
            );
        }
        let shared = self.shared.clone();
        // Room for a full credit of assignments (one task per message at
        // worst), cancels and the greeting; try_send never finds it full
        // unless the worker stops reading.
        let capacity = (register.slots * shared.config.credit_per_slot.max(1)) as usize * 2 + 64;
        let (tx, rx) = mpsc::channel(capacity);
        let name = if register.name.is_empty() {
            "worker".to_string()
        } else {
            register.name.clone()
        };
        let greeting = v1::CoordinatorMessage {
            kind: Some(coordinator_message::Kind::Registered(v1::Registered {
                worker_id: String::new(),
                heartbeat_interval_ms: shared.config.heartbeat_interval.as_millis() as u32,
            })),
        };
        // The greeting goes first, before any assignment.
        tx.try_send(Ok(greeting))
            .map_err(|_| ServerError::BadSession("worker stream closed at once".into()))?;
        let (worker, count) = {
            let mut state = shared.state();
            let worker = state.add_worker(name.clone(), register.slots, tx, Instant::now());
            (worker, state.worker_count())
        };
        shared.publish_workers(count);
        tracing::info!(?peer, %name, slots = register.slots, worker, "worker joined");
        tokio::spawn(session_loop(shared, worker, inbound));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Reads one worker's messages until its stream ends or it is lost.
async fn session_loop(shared: Arc<Shared>, worker: u64, mut inbound: Streaming<v1::WorkerMessage>) {
    let reason = loop {
        let message = tokio::select! {
            m = inbound.message() => m,
            () = shared.shutdown.cancelled() => break "coordinator shutting down",
        };
        let message = match message {
            Ok(Some(m)) => m,
            Ok(None) => break "left",
            Err(_) => break "stream broken",
        };
        let mut state = shared.state();
        if !state.has_worker(worker) {
            break "already lost";
        }
        state.touch(worker, Instant::now());
        match message.kind {
            Some(worker_message::Kind::Heartbeat(h)) => {
                if let Some(cache) = h.cache {
                    state.worker_cache(worker, cache);
                }
            }
            None => {}
            Some(worker_message::Kind::Draining(_)) => {
                tracing::info!(worker, "worker draining");
                state.drain_worker(worker, Instant::now());
            }
            Some(worker_message::Kind::Result(result)) => {
                if let Err(e) = state.on_result(worker, result, &shared.cache) {
                    tracing::warn!(worker, error = %e, "bad message from worker");
                }
            }
            Some(worker_message::Kind::Register(_)) => {
                tracing::warn!(worker, "worker registered twice; ignored");
            }
        }
    };
    let count = {
        let mut state = shared.state();
        state.lose_worker(worker, reason, Instant::now());
        state.worker_count()
    };
    shared.publish_workers(count);
}

#[cfg(test)]
mod tests {
    use super::*;

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
