//! The coordinator: serves clients (`colball.v1.Solver`, `colball.v1.Jobs`)
//! and workers (`colball.v1.Workers`) on one gRPC listener.
//!
//! Where things live:
//!
//! - `colball_core`: the scheduling core, a pure state machine over
//!   requests, tasks and workers, with its policies (a crate of its own);
//! - this module: the thin async driver, [`Scheduler`], which gives the
//!   state its inputs and carries out its effects; workers register
//!   through it ([`Scheduler::register`]) and get their session;
//! - [`admission`]: the one road every request takes into the state;
//! - [`events`]: the event log watchers and the dashboard follow;
//! - [`config`]: every setting, in groups, and their check.
//!
//! The service's lifecycle (its shutdown token and tasks,
//! [`crate::lifecycle`]) and access at the edge (tokens, each client's
//! requests in flight, [`crate::access`]) are apart: the scheduler holds a
//! handle on the first and knows nothing of the second.
//!
//! Every call into the state happens under one mutex and returns
//! [`Effect`]s, which [`Scheduler::apply`] carries out after the lock
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
pub mod traffic;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use colball_proto::v1::{self, coordinator_message};
use dashmap::DashMap;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::cache::ResultCache;
use crate::error::ServerError;
use crate::lifecycle::Lifecycle;
use colball_core::{Effect, Effects, Input, LossReason, Refused, Snapshot, State, shown_name};
pub use config::{AccessConfig, Config, ConfigError, SchedulingConfig, StoreConfig};
use events::EventLog;
use traffic::Traffic;

/// What a worker's session stream sends: messages, and last, when the
/// state closed the session, why (the gRPC layer says it as a status).
pub(crate) type SessionMessage = Result<v1::CoordinatorMessage, LossReason>;

/// One worker's session as the driver holds it.
#[derive(Debug)]
struct Link {
    tx: mpsc::UnboundedSender<SessionMessage>,
    /// Stops the session's reader when the state closes it.
    stop: CancellationToken,
}

/// A worker's session as [`Scheduler::register`] opened it: the worker's
/// number, what its stream sends (the greeting first), and the token
/// cancelled when the state closes the session.
#[derive(Debug)]
pub(crate) struct WorkerSession {
    pub(crate) worker: u64,
    pub(crate) messages: mpsc::UnboundedReceiver<SessionMessage>,
    pub(crate) stop: CancellationToken,
}

/// Numbers the state takes as inputs: for requests, and apart for workers
/// (so that worker names read `w1#1`, `w2#2` in joining order).
#[derive(Debug)]
struct Ids {
    requests: AtomicU64,
    workers: AtomicU64,
}

/// The scheduler's driver, shared by the services, the jobs and the
/// housekeeping task.
#[derive(Debug)]
pub struct Scheduler {
    settings: SchedulingConfig,
    state: Mutex<State>,
    cache: ResultCache,
    events: Arc<EventLog>,
    /// The workers connected, for those who wait for one.
    workers: watch::Sender<usize>,
    /// The earliest tick the state asked for besides the regular ones
    /// ([`Effect::Wake`]), for [`housekeeping`].
    wake: watch::Sender<Option<Instant>>,
    ids: Ids,
    outboxes: DashMap<u64, mpsc::UnboundedSender<admission::Delivery>, foldhash::fast::RandomState>,
    links: DashMap<u64, Link, foldhash::fast::RandomState>,
    /// Every task a request or a worker session runs goes through it.
    lifecycle: Lifecycle,
}

impl Scheduler {
    /// The scheduler's driver over `settings` (validated with the rest of
    /// the [`Config`]); nothing runs until the services do.
    pub fn new(settings: SchedulingConfig, lifecycle: Lifecycle) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            state: Mutex::new(State::new(settings.limits(), Instant::now())),
            events: Arc::new(EventLog::new(settings.events_retained)),
            cache: ResultCache::new(settings.cache_capacity),
            workers: watch::channel(0).0,
            wake: watch::channel(None).0,
            ids: Ids {
                requests: AtomicU64::new(1),
                workers: AtomicU64::new(1),
            },
            outboxes: DashMap::default(),
            links: DashMap::default(),
            settings,
            lifecycle,
        })
    }

    /// The settings it runs by.
    pub fn settings(&self) -> &SchedulingConfig {
        &self.settings
    }

    /// The service's lifecycle (its tasks and shutdown).
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
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
        self.ids.requests.fetch_add(1, Ordering::Relaxed)
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
                Effect::Assign {
                    worker,
                    tasks,
                    traces,
                } => self.send(
                    worker,
                    coordinator_message::Kind::Assign(v1::Assign {
                        tasks,
                        traceparents: traces.iter().map(|t| t.to_string()).collect(),
                    }),
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
                            events::unix_ms() + self.settings.quarantine.as_millis() as i64;
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

    /// Registers a worker of `name` (at most 64 characters kept) from
    /// `peer` with `slots` solver threads: its session, greeted first, or
    /// why the state refused it (quarantine, slots).
    pub(crate) fn register(
        &self,
        name: &str,
        peer: Option<IpAddr>,
        slots: u32,
    ) -> Result<WorkerSession, Refused> {
        // Credit bounds what is ever queued on this stream: assignments
        // for at most the worker's credit, their cancels, and the greeting.
        let (tx, messages) = mpsc::unbounded_channel();
        let worker = self.ids.workers.fetch_add(1, Ordering::Relaxed);
        let greeting = v1::CoordinatorMessage {
            kind: Some(coordinator_message::Kind::Registered(v1::Registered {
                worker_id: shown_name(name, worker),
                heartbeat_interval_ms: self.settings.heartbeat_interval.as_millis() as u32,
                max_tasks: u32::try_from(self.settings.limits().credit.max_tasks(slots))
                    .unwrap_or(u32::MAX),
            })),
        };
        // The greeting goes first, before any assignment.
        let _ = tx.send(Ok(greeting));
        let stop = CancellationToken::new();
        self.links.insert(
            worker,
            Link {
                tx,
                stop: stop.clone(),
            },
        );
        let registered = self.handle(Input::Register {
            worker,
            name,
            peer,
            slots,
        });
        if let Err(refused) = registered {
            self.links.remove(&worker);
            return Err(refused);
        }
        Ok(WorkerSession {
            worker,
            messages,
            stop,
        })
    }

    /// Worker `worker`'s session ended, for `reason`.
    pub(crate) fn session_ended(&self, worker: u64, reason: LossReason) {
        self.tell(Input::WorkerLost { worker, reason });
        self.links.remove(&worker);
    }

    /// The number of workers connected, as it changes.
    pub fn workers(&self) -> watch::Receiver<usize> {
        self.workers.subscribe()
    }

    /// Shutdown has begun: the state stops dispatching, and nobody waits
    /// for a worker any more.
    pub(crate) fn shut_down(&self) {
        self.tell(Input::Shutdown);
        self.workers.send_replace(0);
    }
}

/// Ticks the state every half heartbeat interval and at the moments it
/// asks for ([`Effect::Wake`]): silent and stuck workers are declared lost,
/// requests left without workers failed, overdue tasks backed up and queue
/// depths published.
pub(crate) async fn housekeeping(scheduler: Arc<Scheduler>) {
    let interval = scheduler.settings.heartbeat_interval;
    let mut tick = tokio::time::interval((interval / 2).max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut wake = scheduler.wake.subscribe();
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
                scheduler.wake.send_if_modified(|w| {
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
        scheduler.tell(Input::Tick);
    }
}
