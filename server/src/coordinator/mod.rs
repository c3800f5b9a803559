//! The coordinator: serves clients (`colball.v1.Solver`, `colball.v1.Jobs`)
//! and workers (`colball.v1.Workers`) on one gRPC listener.
//!
//! Where things live:
//!
//! - `colball_core`: the scheduling core, a pure state machine over
//!   requests, tasks and workers, with its policies (a crate of its own);
//! - this module: the thin async driver, [`Shared`], which gives the state
//!   its inputs and carries out its effects;
//! - [`admission`]: the one road every request takes into the state;
//! - [`events`]: the event log watchers and the dashboard follow;
//! - [`per_client`]: batches in flight per client; [`config`]: every
//!   setting and its check.
//!
//! Every call into the state happens under one mutex and returns
//! [`Effect`]s, which [`Shared::apply`] carries out after the lock
//! is released: messages to workers' session streams, results to requests'
//! streams, events to the log, answers to the result cache.
//!
//! Every request, a job's windows included, takes one road in:
//! `admission` reads it (bad puzzles become error results at once),
//! answers it from the result cache where possible, and admits the rest
//! into the state. Reading its results tells the state how far its client
//! has read (so a client that stops reading stops its work, and unread
//! results count against `--max-pending`); when the client goes away or
//! its deadline passes, dropping the request ends it and cancels its
//! remaining work.
//!
//! Workers are lost when their stream breaks, after `missed_heartbeats`
//! heartbeat intervals of silence, or when they hold a task past the task
//! timeout; their tasks go back to the front of their class (at most
//! `max_attempts` dispatches per task). A worker whose answer fails the
//! replay check is quarantined.

pub(crate) mod admission;
pub mod config;
pub mod events;
pub mod per_client;
pub mod traffic;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use colball_proto::v1::{self, coordinator_message};
use dashmap::DashMap;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::auth::{self, TokenSet};
use crate::cache::ResultCache;
use crate::error::ServerError;
use colball_core::{Effect, Effects, Input, LossReason, Refused, Snapshot, State};
pub use config::{Config, ConfigError};
use events::EventLog;
use per_client::PerClient;
use traffic::Traffic;

/// What a worker's session stream sends.
/// What a worker's session stream sends: messages, and last, when the
/// state closed the session, why (the gRPC layer says it as a status).
type WorkerTx = mpsc::UnboundedSender<Result<v1::CoordinatorMessage, LossReason>>;

/// One worker's session as the driver holds it.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) tx: WorkerTx,
    /// Stops the session's reader when the state closes it.
    pub(crate) stop: CancellationToken,
}

/// The scheduler's driver, shared by the services, the jobs and the
/// housekeeping task.
#[derive(Debug)]
pub struct Shared {
    pub(crate) config: Config,
    state: Mutex<State>,
    cache: ResultCache,
    per_client: Arc<PerClient>,
    pub(crate) tokens: Arc<TokenSet>,
    quotas: crate::jobs::quotas::Quotas,
    pub(crate) workers: watch::Sender<usize>,
    /// The earliest tick the state asked for besides the regular ones
    /// ([`Effect::Wake`]), for [`housekeeping`].
    wake: watch::Sender<Option<Instant>>,
    events: Arc<EventLog>,
    pub(crate) shutdown: CancellationToken,
    /// Numbers for requests and workers (the state takes them as inputs).
    next_id: AtomicU64,
    /// Numbers for workers, apart, so that worker names read `w1#1`,
    /// `w2#2` in joining order.
    pub(crate) next_worker: AtomicU64,
    outboxes: DashMap<u64, mpsc::UnboundedSender<admission::Delivery>, foldhash::fast::RandomState>,
    pub(crate) links: DashMap<u64, Link, foldhash::fast::RandomState>,
    /// Every task a request, a job, a watcher or a worker session runs
    /// ([`Shared::spawn`]): shutdown waits for them, up to its deadline.
    tasks: TaskTracker,
}

/// Why the scheduler's driver could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokens(#[from] auth::TokenFileError),
    #[error("client quotas: {0}")]
    Quotas(#[from] crate::jobs::quotas::QuotaFileError),
}

impl Shared {
    /// Builds the scheduler's driver (reading the client tokens file);
    /// nothing runs until the services do.
    pub fn new(config: Config, shutdown: CancellationToken) -> Result<Arc<Shared>, SetupError> {
        config.validate()?;
        let tokens = TokenSet::new(
            config.client_token.clone(),
            config.client_tokens_file.clone(),
        )?;
        let quotas = crate::jobs::quotas::Quotas::new(config.client_quotas_file.clone())?;
        let events = Arc::new(EventLog::new(config.events_retained));
        Ok(Arc::new(Shared {
            tasks: TaskTracker::new(),
            state: Mutex::new(State::new(config.limits(), Instant::now())),
            events,
            cache: ResultCache::new(config.cache_capacity),
            per_client: PerClient::new(config.max_batches_per_client),
            tokens,
            quotas,
            workers: watch::channel(0).0,
            wake: watch::channel(None).0,
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
    pub(crate) fn spawn(
        &self,
        span: tracing::Span,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.tasks.spawn(task.instrument(span));
    }

    /// Tasks of requests, jobs, watchers and sessions still running.
    pub fn running_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// Gives the state one input, now, and carries out its effects after
    /// the lock is released; an admission or a registration may be refused.
    pub(crate) fn handle(&self, input: Input<'_>) -> Result<(), Refused> {
        let (refused, effects, workers) = {
            let mut state = self.state();
            let (refused, effects) = match state.handle(input, Instant::now()) {
                Ok(effects) => (None, effects),
                Err(refused) => (Some(refused), Vec::new()),
            };
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
            (refused, effects, state.worker_count())
        };
        self.apply(effects);
        if *self.workers.borrow() != workers {
            self.workers.send_replace(workers);
        }
        refused.map_or(Ok(()), Err)
    }

    /// [`Self::handle`] for the inputs the state never refuses (all but
    /// admissions and registrations).
    pub(crate) fn tell(&self, input: Input<'_>) {
        if let Err(refused) = self.handle(input) {
            debug_assert!(false, "refused: {refused}");
            tracing::error!(error = %refused, "the state refused an input it always takes");
        }
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
                        let _ = link.tx.send(Err(reason));
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
                        let _ = tx.send(Err(ServerError::from(failure)));
                    }
                }
                Effect::Publish(mut kind) => {
                    if let v1::cluster_event::Kind::WorkerQuarantined(q) = &mut kind {
                        q.until_unix_ms =
                            events::unix_ms() + self.config.quarantine.as_millis() as i64;
                    }
                    self.events.publish(kind);
                }
                // (`handle` applies these under the lock; any other
                // caller's here.)
                Effect::Cache { puzzle, answer } => self.cache.insert(puzzle, answer),
                Effect::Evict { worker } => {
                    let n = self.cache.evict_worker(&worker);
                    tracing::warn!(%worker, evicted = n, "cached answers of a quarantined worker evicted");
                }
                // Effects are applied outside the lock, so two may arrive
                // out of order: the earliest stands.
                Effect::Wake { at } => {
                    self.wake.send_if_modified(|wake| {
                        let sooner = wake.is_none_or(|w| at < w);
                        if sooner {
                            *wake = Some(at);
                        }
                        sooner
                    });
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

    /// Waits for the tasks of requests, jobs, watchers and sessions, up to
    /// `until`; false if some still run then.
    pub(crate) async fn drain_tasks(&self, until: tokio::time::Instant) -> bool {
        self.tasks.close();
        tokio::time::timeout_at(until, self.tasks.wait())
            .await
            .is_ok()
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

    /// The clients' quotas.
    pub fn quotas(&self) -> &crate::jobs::quotas::Quotas {
        &self.quotas
    }

    /// True once shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }
}

/// Ticks the state every half heartbeat interval and at the moments it
/// asks for ([`Effect::Wake`]): silent and stuck workers are declared lost,
/// requests left without workers failed, overdue tasks backed up and queue
/// depths published.
pub(crate) async fn housekeeping(shared: Arc<Shared>) {
    let interval = shared.config.heartbeat_interval;
    let mut tick = tokio::time::interval((interval / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut wake = shared.wake.subscribe();
    loop {
        let at = *wake.borrow_and_update();
        let asked = async {
            match at {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tick.tick() => {}
            () = asked => {
                // Had (a sooner ask would have replaced it; a later one
                // never does).
                shared.wake.send_if_modified(|w| {
                    let had = w.is_some_and(|w| w <= Instant::now());
                    if had {
                        *w = None;
                    }
                    had
                });
            }
            changed = wake.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        }
        shared.tell(Input::Tick);
    }
}
