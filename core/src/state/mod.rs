//! The state machine: its books (tasks, requests, workers, audits) and the
//! operations on them, one file per concern.
//!
//! Nothing here touches a channel, a socket or the clock: every operation
//! takes its inputs (the time included) and returns the [`Effect`]s to
//! apply — assign these tasks to worker W, deliver this result to request
//! R, cancel these tasks on W, close W's session, publish this event,
//! cache this answer — which the async driver in `coordinator/mod.rs`
//! applies after releasing the lock. Tests drive it with plain calls and a
//! fake clock; `tests::operations` checks its invariants
//! ([`State::check_invariants`], in `invariants.rs`) after every step of
//! random operation sequences:
//!
//! - every task is in exactly one state: queued (once, in the
//!   [`FairQueue`]) or assigned to exactly one worker, which holds it;
//!   done tasks are removed; an assigned task may have one backup copy,
//!   held by another worker;
//! - no worker holds more than its credit;
//! - every admitted puzzle gets exactly one result or error, and a request
//!   ends only after all of them;
//! - once every request has ended, no task is left.
//!
//! Trust: a worker's answer is replayed ([`colball_solver::verify`])
//! before it is delivered or cached. A failed replay, a result without an
//! outcome or for a task the worker does not hold, or tasks held past the
//! task timeout end the worker's session, and its tasks go back to the
//! queue. A sample of answers is audited on another worker; a worker whose
//! count an audit beats is quarantined and its cached answers evicted.
//!
//! A puzzle pending for one request is not dispatched again for another
//! (or for a repeat in the same request): the new occurrence follows the
//! pending task and gets its answer under its own id. A task whose request
//! ends carries on for its followers.
//!
//! Stragglers: when no eligible work is queued and a worker has free
//! credit, a task held far longer than its size's expected time is
//! started once more on another worker (`backups.rs`, within a budget);
//! the first verified answer is delivered and the other copy cancelled,
//! its late answer ignored. A worker whose tasks are all overdue is marked
//! slow; one that answers nothing for many times the expected time while
//! others answer is lost as stuck, before the task timeout.
//!
//! The operations, by file: `requests.rs` (admission, reading, ending and
//! failing requests, delivery), `workers.rs` (registration, heartbeats,
//! draining, losses, housekeeping, shutdown), `answers.rs` (workers'
//! results and their replay), `audits.rs` (answers re-solved elsewhere),
//! `dispatch.rs` (tasks handed to workers with credit).

mod answers;
mod audits;
mod backups;
mod dispatch;
#[cfg(test)]
mod invariants;
mod requests;
#[cfg(test)]
mod tests;
mod workers;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use colball_proto::v1;
use colball_solver::Puzzle;
// The books are hashed with foldhash: several times faster than SipHash on
// these small keys, and randomly seeded per process.
use ecow::EcoString;
use foldhash::{HashMap, HashMapExt};
use thin_vec::ThinVec;

use crate::effect::Effects;
use crate::input::{Input, Known, Refused};
use crate::limits::{Limits, MAX_ATTEMPTS};
use crate::policy::{Depths, FairQueue};
use crate::snapshot::{Counters, Snapshot, WorkerView};
use crate::solve_times::SolveTimes;
use crate::tasks::{Led, TaskTable};

pub use workers::shown_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Queued,
    /// (Worker ids are never 0: the driver counts them from 1, and a
    /// worker 0 would be given nothing. So the state takes one word.)
    Assigned {
        worker: NonZeroU64,
    },
}

#[derive(Debug)]
struct Task {
    request: u64,
    /// Its place in its request (a request holds at most `u32::MAX`
    /// puzzles: see [`State::admit_known`]).
    index: u32,
    /// Its slot's version, kept by the task table ([`Led::version`]).
    version: u32,
    /// The client's id (inline up to 15 bytes).
    id: EcoString,
    puzzle: Puzzle,
    /// Dispatches that count against `max_attempts` (at most
    /// [`MAX_ATTEMPTS`]).
    attempts: u16,
    state: TaskState,
    /// Later occurrences of the same puzzle, in this request or others.
    /// (A thin vector: one word in every task, as most have none.)
    followers: ThinVec<Follower>,
    /// How many tasks of its request share its target (a hint for the
    /// worker's table decision; saturated).
    target_share: u16,
}

// What a queued puzzle costs: see PERFORMANCE.md's memory figures. A slot
// of the task table is an `Option<Task>`, the same size.
const _: () = assert!(size_of::<Task>() == 64 && size_of::<Option<Task>>() == 64);

impl Led for Task {
    fn puzzle(&self) -> &Puzzle {
        &self.puzzle
    }
    fn version(&self) -> u32 {
        self.version
    }
    fn set_version(&mut self, version: u32) {
        self.version = version;
    }
}

/// An occurrence of a pending task's puzzle that waits for its result.
#[derive(Debug)]
struct Follower {
    request: u64,
    index: u32,
    id: EcoString,
}

/// A verified answer being re-solved on another worker.
#[derive(Debug)]
struct Audit {
    puzzle: Puzzle,
    id: String,
    origin: u64,
    origin_name: String,
    /// Whom to quarantine if the origin has gone by the time it is caught.
    origin_key: WorkerKey,
    moves: i64,
    /// The worker solving it now.
    worker: Option<u64>,
}

/// A request's books: where it is in its life, and how far its results
/// have gone: given to the driver, read by the client's stream, and sent
/// on to the client (`sent <= received <= delivered <= total`).
#[derive(Debug)]
struct Request {
    phase: Phase,
    total: usize,
    delivered: usize,
    received: usize,
    sent: usize,
}

/// Where a request is in its life. Whatever the phase, it leaves the books
/// when its stream ends ([`Input::EndRequest`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Results are still to come. `held` while its client leaves
    /// `max_unread` results unread: its queued tasks wait meanwhile.
    Solving { held: bool },
    /// Every result has been delivered.
    Answered,
    /// It failed as a whole (no worker, or shutdown): no more results come.
    Failed,
}

impl Request {
    /// Whether results are still to come: only then does it lead tasks or
    /// take over those it follows.
    fn solving(&self) -> bool {
        matches!(self.phase, Phase::Solving { .. })
    }
}

/// One task or audit a worker holds: what it is, since when, and its weight.
#[derive(Debug, Clone, Copy)]
struct Held {
    holds: Holds,
    since: Instant,
    weight: usize,
}

impl Worker {
    fn hold(&mut self, id: u64, held: Held) {
        self.load += held.weight;
        if let Some(old) = self.in_flight.insert(id, held) {
            self.load -= old.weight;
        }
    }

    fn unhold(&mut self, id: u64) -> Option<Held> {
        let held = self.in_flight.remove(&id)?;
        self.load -= held.weight;
        Some(held)
    }
}

/// What a worker's slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holds {
    Task,
    /// A second copy of a task another worker holds as [`Holds::Task`]:
    /// the first verified answer of the two wins.
    Backup,
    Audit,
    /// A task no longer wanted, until the worker reports it.
    Released,
}

#[derive(Debug)]
struct Worker {
    /// (Shared by every result it answers, not copied.)
    name: EcoString,
    key: WorkerKey,
    slots: u32,
    /// Credit in weight units ([`policy::weight`]), and the weight of what
    /// it holds.
    credit: usize,
    load: usize,
    in_flight: HashMap<u64, Held>,
    last_seen: Instant,
    /// When it last answered anything (or joined).
    last_answer: Instant,
    /// Whether every task it holds is far past its expected time.
    slow: bool,
    draining: bool,
    solved: u64,
    cache: v1::WorkerCacheStats,
}

/// Who a quarantine applies to: the name a worker registers with and its
/// address. (Both can be changed by a determined attacker; the replay
/// check, not the quarantine, is what keeps wrong answers out.)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct WorkerKey {
    name: String,
    peer: Option<IpAddr>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct State {
    limits: Limits,
    /// The last audit's id (audits count from 1; task ids, from the task
    /// table, are 2^32 and above).
    next_audit: u64,
    queue: FairQueue,
    /// The pending tasks, one per puzzle, and the task of each puzzle.
    tasks: TaskTable<Task>,
    requests: HashMap<u64, Request>,
    /// The trace context of each request that has one (few, or none when
    /// the driver exports no spans): looked up only when not empty.
    traces: HashMap<u64, Arc<str>>,
    workers: BTreeMap<u64, Worker>,
    audits: HashMap<u64, Audit>,
    audit_queue: std::collections::VecDeque<u64>,
    quarantined: HashMap<WorkerKey, (Instant, String)>,
    /// Tasks with a backup copy, and the worker that holds it.
    backups: HashMap<u64, NonZeroU64>,
    budget: backups::Budget,
    /// When overdue tasks may next be looked for.
    next_speculation: Instant,
    /// The wake asked of the driver ([`Effect::Wake`]) and not yet had.
    wake: Option<Instant>,
    /// When any worker last answered.
    last_answer: Instant,
    /// The last housekeeping tick.
    last_tick: Instant,
    /// When the last worker left (or the coordinator started), while none
    /// is registered; and whether any worker ever joined.
    no_workers_since: Option<Instant>,
    ever_had_worker: bool,
    counters: Counters,
    /// How long each size's tasks take, from verified answers.
    solve_times: SolveTimes,
    last_depths: Depths,
    /// Sampling for audits (xorshift; deterministic from the seed).
    rng: u64,
}

impl State {
    /// Handles one input at `now`; the effects are for the driver to carry
    /// out, in order. Only an admission or a registration can be refused,
    /// and then nothing of it is taken.
    pub fn handle(&mut self, input: Input<'_>, now: Instant) -> Result<Effects, Refused> {
        Ok(match input {
            Input::Admit {
                id,
                spec,
                tasks,
                known: Some(Known(known)),
            } => self.admit_known(id, spec, tasks, now, known)?,
            Input::Admit {
                id,
                spec,
                tasks,
                known: None,
            } => self.admit_known(id, spec, tasks, now, |_| None)?,
            Input::Ack {
                request,
                received,
                sent,
            } => self.ack(request, received, sent, now),
            Input::EndRequest { request } => self.end_request(request, now),
            Input::Register {
                worker,
                name,
                peer,
                slots,
            } => self.register(worker, name, peer, slots, now)?,
            Input::Heartbeat { worker, cache } => {
                self.heartbeat(worker, cache, now);
                Vec::new()
            }
            Input::Drain { worker } => self.drain(worker, now),
            Input::Results { worker, results } => self.results(worker, results, now),
            Input::WorkerLost { worker, reason } => self.worker_lost(worker, reason, now),
            Input::Tick => self.tick(now),
            Input::Shutdown => self.shutdown(),
        })
    }

    pub fn new(mut limits: Limits, now: Instant) -> State {
        limits.max_attempts = limits.max_attempts.clamp(1, MAX_ATTEMPTS);
        State {
            limits,
            next_audit: 0,
            queue: FairQueue::new(),
            tasks: TaskTable::new(),
            requests: HashMap::new(),
            traces: HashMap::new(),
            workers: BTreeMap::new(),
            audits: HashMap::new(),
            audit_queue: std::collections::VecDeque::new(),
            quarantined: HashMap::new(),
            backups: HashMap::new(),
            budget: backups::Budget::new(now),
            next_speculation: now,
            wake: None,
            last_answer: now,
            last_tick: now,
            no_workers_since: Some(now),
            ever_had_worker: false,
            counters: Counters::default(),
            solve_times: SolveTimes::default(),
            last_depths: [0; 3],
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(super) fn fresh_audit(&mut self) -> u64 {
        self.next_audit += 1;
        self.next_audit
    }

    /// Workers registered now.
    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    /// Whether any worker has registered since the coordinator started.
    pub fn ever_had_worker(&self) -> bool {
        self.ever_had_worker
    }

    pub fn has_worker(&self, worker: u64) -> bool {
        self.workers.contains_key(&worker)
    }

    /// Results admitted and not yet read, over all requests.
    pub(super) fn held(&self) -> usize {
        self.requests.values().map(|r| r.total - r.sent).sum()
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            workers: self.workers.len(),
            slots: self.workers.values().map(|w| u64::from(w.slots)).sum(),
            queued: self.queue.len(),
            queued_by_class: self.queue.depths(),
            in_flight: self.workers.values().map(|w| w.in_flight.len()).sum(),
            pending: self.tasks.len(),
            held: self.held(),
            batches: self.requests.len(),
            audits: self.audits.len(),
            counters: self.counters.clone(),
            solve_times: self.solve_times.view(),
            worker_list: self
                .workers
                .iter()
                .map(|(&id, w)| WorkerView {
                    id,
                    name: w.name.to_string(),
                    slots: w.slots,
                    credit: w.credit,
                    in_flight: w.in_flight.len(),
                    solved: w.solved,
                    draining: w.draining,
                    slow: w.slow,
                    cache_hits: w.cache.hits,
                    cache_misses: w.cache.misses,
                    cache_evictions: w.cache.evictions,
                    cache_entries: w.cache.entries,
                    table_builds: w.cache.table_builds,
                    table_hits: w.cache.table_hits,
                })
                .collect(),
        }
    }
}
