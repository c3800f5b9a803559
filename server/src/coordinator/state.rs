//! The coordinator's core: a pure state machine over admitted requests,
//! their tasks and the registered workers.
//!
//! Nothing here touches a channel, a socket or the clock: every operation
//! takes its inputs (the time included) and returns the [`Effect`]s to
//! apply — assign these tasks to worker W, deliver this result to request
//! R, cancel these tasks on W, close W's session, publish this event,
//! cache this answer — which the async driver in `coordinator/mod.rs`
//! applies after releasing the lock. Tests drive it with plain calls and a
//! fake clock; `tests::operations` checks its invariants after every step
//! of random operation sequences:
//!
//! - every task is in exactly one state: queued (once, in the
//!   [`FairQueue`]) or assigned to exactly one worker, which holds it;
//!   done tasks are removed;
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

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use colball_proto::egress;
use colball_proto::v1::{self, cluster_event::Kind as EventKind, task_result};
use colball_proto::work::{check_path, method_from_wire, task_to_wire};
use colball_solver::verify::{MAX_PATH_MOVES, Rejection, check_indices};
use colball_solver::{MoveTable, Puzzle, Size};
// The books are hashed with foldhash: several times faster than SipHash on
// these small keys, and randomly seeded per process.
use ecow::EcoString;
use foldhash::{HashMap, HashMapExt, HashSet};
use thin_vec::ThinVec;

use super::policy::{Credit, Depths, FairQueue, Priority, target_shares, weight};
use super::tasks::{Led, TaskTable};
use crate::cache::Answer;
use crate::error::ServerError;

/// One puzzle to dispatch.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub index: u64,
    /// The client's id (inline up to 15 bytes).
    pub id: EcoString,
    pub puzzle: Puzzle,
}

/// What the state needs to know of a request besides its tasks.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Who it counts for in fair sharing and per-client limits.
    pub client: String,
    pub priority: Priority,
    /// Every result the client will read, answered-at-once ones included:
    /// the request holds this many places under `max_pending` until its
    /// client has read them.
    pub total: usize,
}

/// Why a worker's session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// It drained and left holding nothing.
    Left,
    /// Its stream ended or broke.
    Disconnected,
    /// No message for longer than the heartbeat timeout.
    Silent,
    /// It held a task past the task timeout while still heartbeating.
    Stuck,
    /// It broke the protocol.
    Protocol(ProtocolError),
    /// An answer of its failed the check.
    Quarantined(Rejected),
    /// The coordinator is shutting down.
    Shutdown,
}

impl LossReason {
    /// Whether a worker ended this way was lost (as opposed to leaving).
    pub fn is_loss(&self) -> bool {
        !matches!(self, LossReason::Left | LossReason::Shutdown)
    }

    /// Whether the tasks it held count an attempt (a quarantined worker's
    /// do not: the puzzles did nothing wrong).
    fn counts_attempt(&self) -> bool {
        !matches!(self, LossReason::Quarantined(_) | LossReason::Shutdown)
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Left => f.write_str("left"),
            LossReason::Disconnected => f.write_str("stream ended"),
            LossReason::Silent => f.write_str("missed heartbeats"),
            LossReason::Stuck => f.write_str("held a task past the task timeout"),
            LossReason::Protocol(e) => write!(f, "protocol error: {e}"),
            LossReason::Quarantined(r) => write!(f, "quarantined: {r}"),
            LossReason::Shutdown => f.write_str("coordinator shutting down"),
        }
    }
}

/// A message a worker may not send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("a result for task {0} without an outcome")]
    NoOutcome(u64),
    #[error("a result for task {0}, which it does not hold")]
    NotHeld(u64),
    #[error("a results message with no result")]
    EmptyResults,
}

/// An answer that failed the coordinator's check, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub reason: RejectReason,
    /// The puzzle's id, for people.
    pub puzzle: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "puzzle {:?}: {}", self.puzzle, self.reason)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The replay failed.
    Replay(Rejection),
    /// An audit on another worker found a shorter sequence.
    NotOptimal { given: i64, found: i64 },
}

impl RejectReason {
    pub fn label(&self) -> &'static str {
        match self {
            RejectReason::Replay(r) => r.label(),
            RejectReason::NotOptimal { .. } => "not_optimal",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::Replay(r) => r.fmt(f),
            RejectReason::NotOptimal { given, found } => write!(
                f,
                "answered {given} moves where another worker found a valid {found}"
            ),
        }
    }
}

/// Every rejection label, for metrics.
pub const REJECT_LABELS: [&str; 6] = [
    "illegal_move",
    "wrong_count",
    "misses_target",
    "false_unreachable",
    "malformed",
    "not_optimal",
];

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("register: slots must be between 1 and {limit} (--max-worker-slots), not {slots}")]
    Slots { slots: u32, limit: u32 },
    #[error(
        "worker {name:?} from this address is quarantined for another {}s (--quarantine-secs): {why}",
        .remaining.as_secs()
    )]
    Quarantined {
        name: String,
        remaining: Duration,
        why: String,
    },
}

/// Why a request ended before all its results.
#[derive(Clone, Debug)]
pub enum RequestFailure {
    /// No worker for longer than the grace period.
    NoWorkers {
        waited: Duration,
        ever: bool,
    },
    ShuttingDown,
}

impl From<RequestFailure> for ServerError {
    fn from(f: RequestFailure) -> ServerError {
        match f {
            RequestFailure::NoWorkers { waited, ever } => ServerError::NoWorkers { waited, ever },
            RequestFailure::ShuttingDown => ServerError::ShuttingDown,
        }
    }
}

/// Something for the driver to do.
#[derive(Debug)]
pub enum Effect {
    /// Send these tasks to the worker.
    Assign {
        worker: u64,
        tasks: Vec<v1::Task>,
    },
    /// Tell the worker these tasks are no longer wanted.
    Cancel {
        worker: u64,
        tasks: Vec<u64>,
    },
    /// End the worker's session (its tasks are already back in the queue).
    Close {
        worker: u64,
        reason: LossReason,
    },
    /// Give the request one result.
    Deliver {
        request: u64,
        result: egress::PuzzleResult,
    },
    /// End the request's stream with this failure.
    Fail {
        request: u64,
        failure: RequestFailure,
    },
    Publish(EventKind),
    /// Keep a verified answer.
    Cache {
        puzzle: Puzzle,
        answer: Answer,
    },
    /// Forget every cached answer from this worker (by its shown name).
    Evict {
        worker: String,
    },
}

/// Effects in the order they arose.
pub type Effects = Vec<Effect>;

/// The most `max_attempts` can be (a task counts its attempts in 16 bits).
pub const MAX_ATTEMPTS: u32 = u16::MAX as u32;

/// Limits and policies the state applies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most results admitted and not yet read by their clients.
    pub max_pending: usize,
    /// Dispatches of one puzzle before it gets an error result (1 to
    /// [`MAX_ATTEMPTS`]).
    pub max_attempts: u32,
    pub credit: Credit,
    /// Most tasks in one assignment message.
    pub max_chunk: usize,
    /// Results a request may hold unread before its tasks wait.
    pub max_unread: usize,
    /// Most slots a worker may register.
    pub max_worker_slots: u32,
    /// Longest a worker may hold a task.
    pub task_timeout: Duration,
    /// Silence after which a worker is lost.
    pub silence_timeout: Duration,
    /// How long a request waits without any worker before it fails.
    pub worker_grace: Duration,
    /// How long a quarantined worker may not register again.
    pub quarantine: Duration,
    /// Fraction of answers re-solved on another worker (0: none).
    pub audit_rate: f64,
    /// Most audits waiting for a worker.
    pub max_audits: usize,
    /// Whether the driver keeps answers in a result cache (else the state
    /// builds no [`Effect::Cache`]).
    pub cache_results: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_pending: 1_000_000,
            max_attempts: 3,
            credit: Credit::new(2),
            max_chunk: 1024,
            max_unread: 16_384,
            max_worker_slots: 256,
            task_timeout: Duration::from_secs(30),
            silence_timeout: Duration::from_secs(3),
            worker_grace: Duration::from_secs(10),
            quarantine: Duration::from_secs(600),
            audit_rate: 0.01,
            max_audits: 10_000,
            cache_results: true,
        }
    }
}

/// Counters for metrics and logs.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub solved: u64,
    pub failed: u64,
    pub redispatched: u64,
    pub workers_lost: u64,
    pub cancelled: u64,
    /// Answers refused, by [`REJECT_LABELS`] position.
    pub rejected: [u64; 6],
    pub quarantined: u64,
    pub audits_passed: u64,
    pub audits_skipped: u64,
    pub timed_out: u64,
}

impl Counters {
    /// Counts one refused answer under its reason's label.
    fn reject(&mut self, reason: &RejectReason) {
        let label = reason.label();
        if let Some(i) = REJECT_LABELS.iter().position(|l| *l == label) {
            self.rejected[i] += 1;
        }
    }
}

/// One worker as the dashboard and `/metrics` show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkerView {
    pub id: u64,
    pub name: String,
    pub slots: u32,
    pub credit: usize,
    /// Tasks it holds now.
    pub in_flight: usize,
    /// Puzzles it has solved since it joined.
    pub solved: u64,
    pub draining: bool,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_evictions: u64,
    pub cache_entries: u64,
    pub table_builds: u64,
    /// Puzzles it answered from a distance table.
    pub table_hits: u64,
}

/// A snapshot for the metrics endpoint and the dashboard.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub workers: usize,
    pub slots: u64,
    pub queued: usize,
    /// Queued tasks by class (interactive, normal, bulk).
    pub queued_by_class: Depths,
    pub in_flight: usize,
    /// Puzzles admitted and not yet answered.
    pub pending: usize,
    /// Results admitted and not yet read by clients (what `max_pending`
    /// bounds).
    pub held: usize,
    pub batches: usize,
    pub audits: usize,
    pub counters: Counters,
    pub worker_list: Vec<WorkerView>,
}

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

#[derive(Debug)]
struct Request {
    total: usize,
    /// Results given to the driver, read by the client's stream, and sent
    /// on to the client.
    delivered: usize,
    received: usize,
    sent: usize,
    /// Results still to deliver (0 once failed).
    remaining: usize,
    held: bool,
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
    workers: BTreeMap<u64, Worker>,
    audits: HashMap<u64, Audit>,
    audit_queue: std::collections::VecDeque<u64>,
    quarantined: HashMap<WorkerKey, (Instant, String)>,
    /// When the last worker left (or the coordinator started), while none
    /// is registered; and whether any worker ever joined.
    no_workers_since: Option<Instant>,
    ever_had_worker: bool,
    counters: Counters,
    last_depths: Depths,
    /// Sampling for audits (xorshift; deterministic from the seed).
    rng: u64,
}

impl State {
    pub fn new(mut limits: Limits, now: Instant) -> State {
        limits.max_attempts = limits.max_attempts.clamp(1, MAX_ATTEMPTS);
        State {
            limits,
            next_audit: 0,
            queue: FairQueue::new(),
            tasks: TaskTable::new(),
            requests: HashMap::new(),
            workers: BTreeMap::new(),
            audits: HashMap::new(),
            audit_queue: std::collections::VecDeque::new(),
            quarantined: HashMap::new(),
            no_workers_since: Some(now),
            ever_had_worker: false,
            counters: Counters::default(),
            last_depths: [0; 3],
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn fresh_audit(&mut self) -> u64 {
        self.next_audit += 1;
        self.next_audit
    }

    /// Whether a task for `puzzle` is pending (queued or on a worker).
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
    fn held(&self) -> usize {
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

    /// Admits request `id` (a number the driver chose, unused so far) with
    /// the puzzles still to solve. Refuses it when the results held for
    /// clients would pass `max_pending`.
    pub fn admit(
        &mut self,
        id: u64,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
        now: Instant,
    ) -> Result<Effects, ServerError> {
        self.admit_known(id, spec, tasks, now, |_| None)
            .map(|(effects, _)| effects)
    }

    /// [`Self::admit`], asking `known` for the result of each task whose
    /// puzzle is not pending (the driver looks in its result cache again,
    /// under the lock, for a puzzle solved since its first look). Such
    /// results are returned beside the effects, for the caller to pass on
    /// at once, and count as delivered; their puzzles are not solved again.
    pub fn admit_known(
        &mut self,
        id: u64,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
        now: Instant,
        mut known: impl FnMut(&NewTask) -> Option<egress::PuzzleResult>,
    ) -> Result<(Effects, Vec<egress::PuzzleResult>), ServerError> {
        // A task keeps its index in 32 bits: no request comes near (a
        // batch holds at most 1,000,000, a job at most `u32::MAX`), and
        // one that did is refused whole.
        if let Some(index) = tasks
            .iter()
            .map(|t| t.index)
            .find(|&i| i > u64::from(u32::MAX))
        {
            return Err(ServerError::IndexTooLarge {
                index,
                max: u32::MAX,
            });
        }
        let held = self.held();
        if held + spec.total > self.limits.max_pending {
            return Err(ServerError::Overloaded {
                batch: spec.total,
                pending: held,
                limit: self.limits.max_pending,
            });
        }
        let shares = target_shares(tasks.iter().map(|t| t.puzzle.target()), self.workers.len());
        self.queue.open(id, &spec.client, spec.priority);
        self.queue.reserve(id, tasks.len());
        let total = spec.total.max(tasks.len());
        let mut request = Request {
            total,
            delivered: total - tasks.len(),
            received: 0,
            sent: 0,
            remaining: tasks.len(),
            held: false,
        };
        let mut late = Vec::new();
        for (t, target_share) in tasks.into_iter().zip(shares) {
            let leader = self.tasks.leader(&t.puzzle);
            if let Some(task) = leader.and_then(|l| self.tasks.get_mut(l)) {
                task.followers.push(Follower {
                    request: id,
                    index: t.index as u32,
                    id: t.id,
                });
                continue;
            }
            if let Some(result) = known(&t) {
                late.push(result);
                continue;
            }
            let task_id = self.tasks.insert(Task {
                request: id,
                index: t.index as u32,
                version: 0,
                id: t.id,
                target_share,
                puzzle: t.puzzle,
                attempts: 0,
                state: TaskState::Queued,
                followers: ThinVec::new(),
            });
            self.queue.push(id, task_id);
        }
        request.delivered += late.len();
        request.remaining -= late.len();
        self.requests.insert(id, request);
        self.update_hold(id);
        let mut effects = Vec::new();
        self.dispatch(now, None, &mut effects);
        Ok((effects, late))
    }

    /// The request's stream has read `received` results and sent `sent` of
    /// them on to its client (both counted from its start).
    pub fn ack(&mut self, request: u64, received: usize, sent: usize, now: Instant) -> Effects {
        let mut effects = Vec::new();
        let Some(r) = self.requests.get_mut(&request) else {
            return effects;
        };
        r.received = r.received.max(received.min(r.delivered));
        r.sent = r.sent.max(sent.min(r.received));
        if self.update_hold(request) {
            self.dispatch(now, None, &mut effects);
        }
        effects
    }

    /// Holds a request's queued tasks while its client leaves too many
    /// results unread; returns true when it was released.
    fn update_hold(&mut self, request: u64) -> bool {
        let Some(r) = self.requests.get_mut(&request) else {
            return false;
        };
        let hold = r.delivered - r.received >= self.limits.max_unread;
        if hold == r.held {
            return false;
        }
        r.held = hold;
        self.queue.hold(request, hold);
        !hold
    }

    /// Ends a request (its stream finished, or its client went away): its
    /// queued tasks are dropped and its running ones cancelled on their
    /// workers, except tasks another request follows, which that request
    /// takes over (a queued one at the head of the queue, dispatched at
    /// once if a worker has credit). The workers' credit for cancelled
    /// tasks comes back when they report.
    pub fn end_request(&mut self, request: u64, now: Instant) -> Effects {
        let mut effects = Vec::new();
        let Some(r) = self.requests.remove(&request) else {
            return effects;
        };
        let (queued, running) = self.close_tasks(request, r.remaining > 0);
        let queued_set: HashSet<u64> = queued.iter().copied().collect();
        let mut cancels: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for id in queued.into_iter().chain(running) {
            let Some(task) = self.tasks.get_mut(id) else {
                continue;
            };
            // A follower whose request has ended or failed (its queue is
            // closed) cannot take the task over.
            let requests = &self.requests;
            task.followers
                .retain(|f| requests.get(&f.request).is_some_and(|r| r.remaining > 0));
            if !task.followers.is_empty() {
                // Another request waits for this puzzle: its first
                // follower takes the task over.
                let heir = task.followers.remove(0);
                (task.request, task.index, task.id) = (heir.request, heir.index, heir.id);
                if queued_set.contains(&id) {
                    self.queue.push_retry(heir.request, id);
                }
                continue;
            }
            let Some(task) = self.take(id) else { continue };
            self.counters.cancelled += 1;
            if let TaskState::Assigned { worker } = task.state {
                self.release(worker.get(), id);
                cancels.entry(worker.get()).or_default().push(id);
            }
        }
        for (worker, tasks) in cancels {
            effects.push(Effect::Cancel { worker, tasks });
        }
        self.dispatch(now, None, &mut effects);
        effects
    }

    /// Registers worker `id` (a number the driver chose, unused so far).
    pub fn register(
        &mut self,
        id: u64,
        name: &str,
        peer: Option<IpAddr>,
        slots: u32,
        now: Instant,
    ) -> Result<Effects, RegisterError> {
        let limit = self.limits.max_worker_slots;
        if slots == 0 || slots > limit {
            return Err(RegisterError::Slots { slots, limit });
        }
        let key = WorkerKey {
            name: name.to_string(),
            peer,
        };
        if let Some((until, why)) = self.quarantined.get(&key) {
            if *until > now {
                return Err(RegisterError::Quarantined {
                    name: name.to_string(),
                    remaining: *until - now,
                    why: why.clone(),
                });
            }
            self.quarantined.remove(&key);
        }
        let shown = shown_name(name, id);
        let mut effects = vec![Effect::Publish(EventKind::WorkerJoined(v1::WorkerJoined {
            worker: id,
            name: shown.clone(),
            slots,
        }))];
        self.workers.insert(
            id,
            Worker {
                name: shown.into(),
                key,
                slots,
                credit: self.limits.credit.of(slots),
                load: 0,
                in_flight: HashMap::new(),
                last_seen: now,
                draining: false,
                solved: 0,
                cache: v1::WorkerCacheStats::default(),
            },
        );
        self.no_workers_since = None;
        self.ever_had_worker = true;
        self.dispatch(now, None, &mut effects);
        Ok(effects)
    }

    /// Notes that the worker is alive (any message counts), and keeps the
    /// cache counters a heartbeat carries.
    pub fn heartbeat(&mut self, worker: u64, cache: Option<v1::WorkerCacheStats>, now: Instant) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.last_seen = now;
            if let Some(cache) = cache {
                w.cache = cache;
            }
        }
    }

    /// The worker takes no more work; it finishes what it holds, and the
    /// coordinator closes its session once it holds nothing.
    pub fn drain(&mut self, worker: u64, now: Instant) -> Effects {
        let mut effects = Vec::new();
        if let Some(w) = self.workers.get_mut(&worker) {
            w.draining = true;
            w.last_seen = now;
        }
        self.release_if_drained(worker, now, &mut effects);
        effects
    }

    fn release_if_drained(&mut self, worker: u64, now: Instant, effects: &mut Effects) {
        if self
            .workers
            .get(&worker)
            .is_some_and(|w| w.draining && w.in_flight.is_empty())
        {
            self.lose(worker, LossReason::Left, now, effects);
        }
    }

    /// The worker's session ended (or is to end) for `reason`: its tasks go
    /// back to the front of their class (or fail, out of attempts).
    pub fn worker_lost(&mut self, worker: u64, reason: LossReason, now: Instant) -> Effects {
        let mut effects = Vec::new();
        self.lose(worker, reason, now, &mut effects);
        effects
    }

    fn lose(&mut self, worker: u64, reason: LossReason, now: Instant, effects: &mut Effects) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        let lost = reason.is_loss() || !w.in_flight.is_empty();
        if lost {
            tracing::warn!(worker = %w.name, %reason, tasks = w.in_flight.len(), "worker lost");
            self.counters.workers_lost += 1;
        } else {
            tracing::info!(worker = %w.name, "worker left");
        }
        if self.workers.is_empty() {
            self.no_workers_since = Some(now);
        }
        let (mut redispatched, mut failed) = (0, 0);
        let mut ids: Vec<(u64, Holds)> = w.in_flight.iter().map(|(&id, h)| (id, h.holds)).collect();
        // Back to the queue in the order the requests gave them (the books
        // are hashed; task ids are slots, not ages).
        let tasks = &self.tasks;
        ids.sort_unstable_by_key(|&(id, _)| (tasks.get(id).map(|t| (t.request, t.index)), id));
        for (id, holds) in ids {
            match holds {
                Holds::Released => {}
                Holds::Audit => {
                    if let Some(a) = self.audits.get_mut(&id) {
                        a.worker = None;
                        self.audit_queue.push_front(id);
                    }
                }
                Holds::Task => {
                    if self.requeue(id, reason.counts_attempt(), effects) {
                        redispatched += 1;
                    } else {
                        failed += 1;
                    }
                }
            }
        }
        if let LossReason::Quarantined(rejected) = &reason {
            // None of its answers is trusted any more.
            effects.push(Effect::Evict {
                worker: w.name.to_string(),
            });
            let until = now + self.limits.quarantine;
            self.quarantined
                .insert(w.key.clone(), (until, rejected.to_string()));
            self.counters.quarantined += 1;
            effects.push(Effect::Publish(EventKind::WorkerQuarantined(
                v1::WorkerQuarantined {
                    worker,
                    name: w.name.to_string(),
                    reason: rejected.reason.label().to_string(),
                    detail: rejected.to_string(),
                    redispatched,
                    // The driver sets the wall-clock time.
                    until_unix_ms: 0,
                },
            )));
        }
        effects.push(Effect::Publish(if lost {
            EventKind::WorkerLost(v1::WorkerLost {
                worker,
                name: w.name.to_string(),
                reason: reason.to_string(),
                redispatched,
                failed,
            })
        } else {
            EventKind::WorkerLeft(v1::WorkerLeft {
                worker,
                name: w.name.to_string(),
            })
        }));
        effects.push(Effect::Close { worker, reason });
        self.dispatch(now, None, effects);
    }

    /// Puts an assigned task back in the queue, first in its class; with
    /// `count`, the dispatch counts as an attempt and a task out of
    /// attempts fails instead. Returns true when it was queued again.
    fn requeue(&mut self, id: u64, count: bool, effects: &mut Effects) -> bool {
        let max = self.limits.max_attempts;
        let Some(task) = self.tasks.get_mut(id) else {
            return false;
        };
        let TaskState::Assigned { .. } = task.state else {
            return false;
        };
        if !count {
            task.attempts = task.attempts.saturating_sub(1);
        }
        task.state = TaskState::Queued;
        if u32::from(task.attempts) >= max {
            let attempts = task.attempts;
            if let Some(task) = self.take(id) {
                self.counters.failed += 1;
                self.fail(task, effects, |id| {
                    format!(
                        "puzzle {id:?}: gave up after {attempts} attempts: every worker that took it was lost"
                    )
                });
            }
            return false;
        }
        self.counters.redispatched += 1;
        let request = task.request;
        self.queue.push_retry(request, id);
        true
    }

    /// Handles one result from a worker.
    pub fn result(&mut self, worker: u64, result: v1::TaskResult, now: Instant) -> Effects {
        self.results(worker, vec![result], now)
    }

    /// Handles one message of results from a worker, in order, then hands
    /// out the credit they freed in one dispatch. An empty message, like a
    /// result for a task the worker does not hold, is a protocol error.
    pub fn results(&mut self, worker: u64, results: Vec<v1::TaskResult>, now: Instant) -> Effects {
        let mut effects = Vec::new();
        if !self.workers.contains_key(&worker) {
            return effects;
        }
        if results.is_empty() {
            let e = ProtocolError::EmptyResults;
            self.lose(worker, LossReason::Protocol(e), now, &mut effects);
            return effects;
        }
        self.touch(worker, &results);
        // Plain answers free this worker's credit only; anything else may
        // have queued work for every worker.
        let mut only = Some(worker);
        for result in results {
            let Some(w) = self.workers.get_mut(&worker) else {
                return effects;
            };
            w.last_seen = now;
            let task_id = result.task_id;
            let Some(held) = w.unhold(task_id) else {
                let e = ProtocolError::NotHeld(task_id);
                self.lose(worker, LossReason::Protocol(e), now, &mut effects);
                return effects;
            };
            let Some(outcome) = result.outcome else {
                // Give the slot back so `lose` re-dispatches it.
                w.hold(task_id, held);
                let e = ProtocolError::NoOutcome(task_id);
                self.lose(worker, LossReason::Protocol(e), now, &mut effects);
                return effects;
            };
            if !matches!(outcome, task_result::Outcome::Solved(_)) {
                only = None;
            }
            match held.holds {
                Holds::Released => {}
                Holds::Audit => self.audit_result(worker, task_id, outcome, now, &mut effects),
                Holds::Task => self.task_result(worker, task_id, outcome, now, &mut effects),
            }
        }
        if self.workers.contains_key(&worker) {
            self.dispatch(now, only, &mut effects);
            self.release_if_drained(worker, now, &mut effects);
        }
        effects
    }

    /// Looks up every result's entries in the books before any is
    /// handled. A message's results are of tasks dispatched a while
    /// before, and their entries (the worker's hold, the task's slot, its
    /// puzzle's leader) have mostly left the processor's caches: looked up
    /// in one short loop whose rounds do not depend on each other, the
    /// processor waits for many of those reads at once, rather than for
    /// each in turn as each result is handled (docs/PERFORMANCE.md, the
    /// ninth pass: 10% of the coordinator's CPU a puzzle). Nothing is
    /// changed.
    fn touch(&self, worker: u64, results: &[v1::TaskResult]) {
        let Some(w) = self.workers.get(&worker) else {
            return;
        };
        for r in results {
            std::hint::black_box(w.in_flight.get(&r.task_id));
            self.tasks.touch(r.task_id);
        }
    }

    fn task_result(
        &mut self,
        worker: u64,
        task_id: u64,
        outcome: task_result::Outcome,
        now: Instant,
        effects: &mut Effects,
    ) {
        let Some(task) = self.tasks.get(task_id) else {
            return;
        };
        match outcome {
            task_result::Outcome::Cancelled(_) => {
                // Given back unsolved: queue it again without an attempt.
                self.requeue(task_id, false, effects);
            }
            task_result::Outcome::Error(message) => {
                // A worker's failure is not the puzzle's: try elsewhere, up
                // to the attempt limit.
                let name = self
                    .workers
                    .get(&worker)
                    .map_or_else(|| "unknown".into(), |w| w.name.clone());
                tracing::warn!(worker = %name, puzzle = %task.id, message = %truncate(&message, 200), "worker failed a puzzle");
                self.requeue(task_id, true, effects);
            }
            task_result::Outcome::Solved(s) => {
                let s = match check_solved(&task.puzzle, s) {
                    Ok(s) => s,
                    Err(rejection) => {
                        let rejected = Rejected {
                            reason: RejectReason::Replay(rejection),
                            puzzle: task.id.to_string(),
                        };
                        self.reject(worker, Some(task_id), rejected, now, effects);
                        return;
                    }
                };
                let Some(task) = self.take(task_id) else {
                    return;
                };
                let name = match self.workers.get_mut(&worker) {
                    Some(w) => {
                        w.solved += 1;
                        w.name.clone()
                    }
                    None => EcoString::new(),
                };
                self.counters.solved += 1;
                if self.limits.cache_results {
                    effects.push(Effect::Cache {
                        puzzle: task.puzzle,
                        answer: Answer {
                            moves: s.moves,
                            solution: s.solution.clone(),
                            strategy: s.strategy.into(),
                            worker: name.clone(),
                        },
                    });
                }
                self.maybe_audit(worker, &name, &task, s.moves);
                let solved = egress::Solved {
                    moves: s.moves,
                    solution: s.solution,
                    strategy: s.strategy.into(),
                    worker: name,
                    time_us: s.time_us,
                    cached: false,
                    shared: false,
                };
                if !task.followers.is_empty() {
                    // (Copies share the strings.)
                    let copy = egress::Solved {
                        time_us: 0,
                        cached: true,
                        shared: true,
                        ..solved.clone()
                    };
                    for f in task.followers {
                        let result = egress::PuzzleResult {
                            id: f.id,
                            index: f.index.into(),
                            outcome: Some(egress::Outcome::Solved(copy.clone())),
                        };
                        self.deliver(f.request, result, effects);
                    }
                }
                let result = egress::PuzzleResult {
                    id: task.id,
                    index: task.index.into(),
                    outcome: Some(egress::Outcome::Solved(solved)),
                };
                self.deliver(task.request, result, effects);
            }
        }
    }

    /// A worker's answer failed the check: the task goes back to the queue
    /// (its attempt not counted) and the worker is quarantined.
    fn reject(
        &mut self,
        worker: u64,
        task: Option<u64>,
        rejected: Rejected,
        now: Instant,
        effects: &mut Effects,
    ) {
        self.counters.reject(&rejected.reason);
        if let Some(task) = task {
            self.requeue(task, false, effects);
        }
        self.lose(worker, LossReason::Quarantined(rejected), now, effects);
    }

    fn maybe_audit(&mut self, worker: u64, name: &str, task: &Task, moves: i64) {
        if self.limits.audit_rate <= 0.0 {
            return;
        }
        let Some(key) = self.workers.get(&worker).map(|w| w.key.clone()) else {
            return;
        };
        if self.limits.audit_rate < 1.0 && self.random_unit() >= self.limits.audit_rate {
            return;
        }
        if self.audits.len() >= self.limits.max_audits {
            self.counters.audits_skipped += 1;
            return;
        }
        let id = self.fresh_audit();
        self.audits.insert(
            id,
            Audit {
                puzzle: task.puzzle,
                id: task.id.to_string(),
                origin: worker,
                origin_name: name.to_string(),
                origin_key: key,
                moves,
                worker: None,
            },
        );
        self.audit_queue.push_back(id);
    }

    fn audit_result(
        &mut self,
        worker: u64,
        audit_id: u64,
        outcome: task_result::Outcome,
        now: Instant,
        effects: &mut Effects,
    ) {
        let Some(audit) = self.audits.get_mut(&audit_id) else {
            return;
        };
        audit.worker = None;
        let s = match outcome {
            task_result::Outcome::Cancelled(_) => {
                self.audit_queue.push_front(audit_id);
                return;
            }
            task_result::Outcome::Error(_) => {
                self.audits.remove(&audit_id);
                return;
            }
            task_result::Outcome::Solved(s) => s,
        };
        let Some(audit) = self.audits.remove(&audit_id) else {
            return;
        };
        let s = match check_solved(&audit.puzzle, s) {
            Ok(s) => s,
            Err(rejection) => {
                let rejected = Rejected {
                    reason: RejectReason::Replay(rejection),
                    puzzle: audit.id,
                };
                self.reject(worker, None, rejected, now, effects);
                return;
            }
        };
        if s.moves == audit.moves {
            self.counters.audits_passed += 1;
            return;
        }
        // Both sequences are valid: the shorter stands.
        let (loser, given, found) = if s.moves < audit.moves {
            (audit.origin, audit.moves, s.moves)
        } else {
            (worker, s.moves, audit.moves)
        };
        let rejected = Rejected {
            reason: RejectReason::NotOptimal { given, found },
            puzzle: audit.id.clone(),
        };
        if loser == audit.origin {
            tracing::warn!(worker = %audit.origin_name, %rejected, "audit: a shorter answer found elsewhere");
            let name = self
                .workers
                .get(&worker)
                .map(|w| w.name.clone())
                .unwrap_or_default();
            if self.limits.cache_results {
                effects.push(Effect::Cache {
                    puzzle: audit.puzzle,
                    answer: Answer {
                        moves: s.moves,
                        solution: s.solution,
                        strategy: s.strategy.into(),
                        worker: name,
                    },
                });
            }
            if !self.workers.contains_key(&loser) {
                // Gone already: its answers are evicted, and it may not
                // come back for a while.
                effects.push(Effect::Evict {
                    worker: audit.origin_name.clone(),
                });
                self.counters.reject(&rejected.reason);
                let already = self
                    .quarantined
                    .get(&audit.origin_key)
                    .is_some_and(|(until, _)| *until > now);
                if !already {
                    self.counters.quarantined += 1;
                    let until = now + self.limits.quarantine;
                    self.quarantined
                        .insert(audit.origin_key, (until, rejected.to_string()));
                }
                return;
            }
        }
        self.reject(loser, None, rejected, now, effects);
    }

    /// Housekeeping: silent and stuck workers are lost, requests without
    /// any worker past the grace period fail, quarantines expire, and the
    /// queue depths are published when they changed.
    pub fn tick(&mut self, now: Instant) -> Effects {
        let mut effects = Vec::new();
        let silent = self.limits.silence_timeout;
        let overdue = self.limits.task_timeout;
        let lost: Vec<(u64, LossReason)> = self
            .workers
            .iter()
            .filter_map(|(&id, w)| {
                if now.saturating_duration_since(w.last_seen) > silent {
                    Some((id, LossReason::Silent))
                } else if w
                    .in_flight
                    .values()
                    .any(|h| now.saturating_duration_since(h.since) > overdue)
                {
                    Some((id, LossReason::Stuck))
                } else {
                    None
                }
            })
            .collect();
        for (id, reason) in lost {
            if reason == LossReason::Stuck {
                self.counters.timed_out += 1;
            }
            self.lose(id, reason, now, &mut effects);
        }
        self.fail_if_no_workers(now, &mut effects);
        self.quarantined.retain(|_, (until, _)| *until > now);
        let depths = self.queue.depths();
        if depths != self.last_depths {
            self.last_depths = depths;
            effects.push(Effect::Publish(EventKind::QueueDepth(v1::QueueDepth {
                interactive: depths[0] as u64,
                normal: depths[1] as u64,
                bulk: depths[2] as u64,
            })));
        }
        effects
    }

    /// When no worker has been registered for longer than the grace
    /// period, fails every request still waiting for results.
    fn fail_if_no_workers(&mut self, now: Instant, effects: &mut Effects) {
        let Some(since) = self.no_workers_since else {
            return;
        };
        let waited = now.saturating_duration_since(since);
        if waited < self.limits.worker_grace {
            return;
        }
        let waiting: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.remaining > 0)
            .map(|(&id, _)| id)
            .collect();
        let ever = self.ever_had_worker;
        for id in waiting {
            self.fail_request(id, RequestFailure::NoWorkers { waited, ever }, effects);
        }
    }

    /// Drops a request's unanswered work and ends its stream with
    /// `failure`; the request itself stays until its stream ends.
    fn fail_request(&mut self, id: u64, failure: RequestFailure, effects: &mut Effects) {
        let Some(r) = self.requests.get_mut(&id) else {
            return;
        };
        let leads = r.remaining > 0;
        r.remaining = 0;
        let (queued, running) = self.close_tasks(id, leads);
        for t in queued.into_iter().chain(running) {
            if let Some(task) = self.take(t) {
                if let TaskState::Assigned { worker } = task.state {
                    let worker = worker.get();
                    self.release(worker, t);
                    effects.push(Effect::Cancel {
                        worker,
                        tasks: vec![t],
                    });
                }
                // Followers in other requests lose their leader: they fail
                // with it (their requests have no worker either).
                for f in task.followers {
                    if f.request != id {
                        let message =
                            format!("puzzle {:?}: {}", f.id, ServerError::from(failure.clone()));
                        let result = egress::PuzzleResult::failed(f.id, f.index.into(), message);
                        self.deliver(f.request, result, effects);
                    }
                }
            }
        }
        effects.push(Effect::Fail {
            request: id,
            failure,
        });
    }

    /// Ends everything: the coordinator is shutting down.
    pub fn shutdown(&mut self) -> Effects {
        let mut effects = Vec::new();
        let requests: Vec<u64> = self.requests.keys().copied().collect();
        for id in requests {
            effects.push(Effect::Fail {
                request: id,
                failure: RequestFailure::ShuttingDown,
            });
        }
        self.requests.clear();
        self.tasks.clear();
        self.queue = FairQueue::new();
        self.audits.clear();
        self.audit_queue.clear();
        for (worker, _) in std::mem::take(&mut self.workers) {
            effects.push(Effect::Close {
                worker,
                reason: LossReason::Shutdown,
            });
        }
        effects
    }

    /// Sends an error result for the task and for each of its followers;
    /// `message` is given the id of each.
    fn fail(&mut self, task: Task, effects: &mut Effects, message: impl Fn(&str) -> String) {
        for f in task.followers {
            let message = message(&f.id);
            let result = egress::PuzzleResult::failed(f.id, f.index.into(), message);
            self.deliver(f.request, result, effects);
        }
        let message = message(&task.id);
        let result = egress::PuzzleResult::failed(task.id, task.index.into(), message);
        self.deliver(task.request, result, effects);
    }

    /// Takes a request's queued tasks out of the queue and returns them (in
    /// queue order) with the tasks it leads that workers hold, in input
    /// order. (Every task is one or the other, so the request needs no list
    /// of its own.) Workers are searched only if the request `leads`
    /// anything: one with no result left to deliver leads no task.
    fn close_tasks(&mut self, request: u64, leads: bool) -> (Vec<u64>, Vec<u64>) {
        let queued = self.queue.close(request);
        if !leads {
            return (queued, Vec::new());
        }
        let tasks = &self.tasks;
        let running = self
            .workers
            .values()
            .flat_map(|w| w.in_flight.iter())
            .filter(|(_, held)| held.holds == Holds::Task)
            .map(|(&id, _)| id)
            .filter(|&id| tasks.get(id).is_some_and(|t| t.request == request));
        let mut running: Vec<u64> = running.collect();
        // (The workers' books are hashed: an order that does not vary.)
        running.sort_unstable_by_key(|&id| (tasks.get(id).map(|t| t.index), id));
        (queued, running)
    }

    /// Removes a task that is done (or no longer wanted).
    fn take(&mut self, id: u64) -> Option<Task> {
        self.tasks.remove(id)
    }

    /// Marks a task a worker holds as no longer wanted: its slot stays
    /// taken (with its original start, for the task timeout) until the
    /// worker reports it.
    fn release(&mut self, worker: u64, task: u64) {
        if let Some(held) = self
            .workers
            .get_mut(&worker)
            .and_then(|w| w.in_flight.get_mut(&task))
        {
            held.holds = Holds::Released;
        }
    }

    /// Gives a request one result.
    fn deliver(&mut self, request: u64, result: egress::PuzzleResult, effects: &mut Effects) {
        let Some(r) = self.requests.get_mut(&request) else {
            return;
        };
        if r.remaining == 0 {
            return;
        }
        r.remaining -= 1;
        r.delivered += 1;
        effects.push(Effect::Deliver { request, result });
        self.update_hold(request);
    }

    /// Hands queued tasks (and audits) to workers with free credit (to
    /// `only`, when only its credit changed), in chunks, in the fair
    /// queue's order.
    fn dispatch(&mut self, now: Instant, only: Option<u64>, effects: &mut Effects) {
        let ids: Vec<u64> = match only {
            Some(w) => vec![w],
            None => self.workers.keys().copied().collect(),
        };
        for wid in ids {
            if self.queue.is_empty() && self.audit_queue.is_empty() {
                break;
            }
            let Some(w) = self.workers.get(&wid) else {
                continue;
            };
            if w.draining {
                continue;
            }
            // A worker gets tasks while its load is below its credit (so
            // it may end over it by less than one task's weight).
            let mut load = w.load;
            let credit = w.credit;
            let mut chunk = Vec::new();
            let mut holds = Vec::new();
            while load < credit {
                let Some((id, task, kind)) = self.next_for(wid) else {
                    break;
                };
                let weight = weight_of(&task);
                load += weight;
                chunk.push(task);
                holds.push((id, kind, weight));
                if chunk.len() == self.limits.max_chunk {
                    effects.push(Effect::Assign {
                        worker: wid,
                        tasks: std::mem::take(&mut chunk),
                    });
                }
            }
            if let Some(w) = self.workers.get_mut(&wid) {
                for (id, holds, weight) in holds {
                    w.hold(
                        id,
                        Held {
                            holds,
                            since: now,
                            weight,
                        },
                    );
                }
            }
            if !chunk.is_empty() {
                effects.push(Effect::Assign {
                    worker: wid,
                    tasks: chunk,
                });
            }
        }
    }

    /// The next task for worker `wid`: an audit of another worker's answer
    /// first (they are few), else the fair queue's next.
    fn next_for(&mut self, wid: u64) -> Option<(u64, v1::Task, Holds)> {
        // Look a few audits deep for one this worker did not answer.
        let pick = self
            .audit_queue
            .iter()
            .take(8)
            .position(|id| self.audits.get(id).is_some_and(|a| a.origin != wid));
        if let Some(at) = pick {
            let id = self.audit_queue.remove(at)?;
            let audit = self.audits.get_mut(&id)?;
            audit.worker = Some(wid);
            let task = task_to_wire(id, &audit.puzzle, 0);
            return Some((id, task, Holds::Audit));
        }
        let worker = NonZeroU64::new(wid)?;
        let id = self.queue.pop()?;
        let task = self.tasks.get_mut(id)?;
        task.attempts = task.attempts.saturating_add(1);
        task.state = TaskState::Assigned { worker };
        Some((
            id,
            task_to_wire(id, &task.puzzle, u64::from(task.target_share)),
            Holds::Task,
        ))
    }

    fn random_unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Checks the invariants in the module documentation; the property
    /// test calls it after every step. Panics with what is wrong.
    #[cfg(test)]
    fn check_invariants(&self) {
        let queued = self.queue.all_tasks();
        let mut seen = HashSet::default();
        for id in &queued {
            assert!(seen.insert(*id), "task {id} queued twice");
            let task = self
                .tasks
                .get(*id)
                .unwrap_or_else(|| panic!("queued task {id} unknown"));
            assert_eq!(task.state, TaskState::Queued, "task {id}");
        }
        assert_eq!(self.tasks.leaders(), self.tasks.len(), "leaders");
        for (id, task) in self.tasks.iter() {
            assert_eq!(
                self.tasks.leader(&task.puzzle),
                Some(id),
                "leader of task {id}"
            );
            match task.state {
                TaskState::Queued => {
                    assert!(seen.contains(&id), "queued task {id} not in the queue")
                }
                TaskState::Assigned { worker } => {
                    let w = self
                        .workers
                        .get(&worker.get())
                        .unwrap_or_else(|| panic!("task {id} on unknown worker"));
                    assert_eq!(
                        w.in_flight.get(&id).map(|h| h.holds),
                        Some(Holds::Task),
                        "task {id}"
                    );
                }
            }
            assert!(
                self.requests.contains_key(&task.request),
                "task {id} of an ended request"
            );
            assert!(u32::from(task.attempts) <= self.limits.max_attempts);
        }
        for (wid, w) in &self.workers {
            let max_weight = Size::ALL.into_iter().map(weight).max().unwrap_or(1);
            assert!(
                w.load < w.credit + max_weight,
                "worker {wid} over its credit: {} of {}",
                w.load,
                w.credit
            );
            assert_eq!(
                w.load,
                w.in_flight.values().map(|h| h.weight).sum::<usize>(),
                "worker {wid}'s load"
            );
            for (id, held) in &w.in_flight {
                match &held.holds {
                    Holds::Task => assert!(
                        matches!(self.tasks.get(*id).map(|t| t.state), Some(TaskState::Assigned { worker }) if worker.get() == *wid),
                        "worker {wid} holds task {id} not assigned to it"
                    ),
                    Holds::Audit => {
                        assert_eq!(self.audits.get(id).and_then(|a| a.worker), Some(*wid))
                    }
                    Holds::Released => assert!(!self.tasks.get(*id).is_some_and(
                        |t| matches!(t.state, TaskState::Assigned { worker } if worker.get() == *wid)
                    )),
                }
            }
        }
        for (rid, r) in &self.requests {
            assert!(
                r.sent <= r.received && r.received <= r.delivered && r.delivered <= r.total,
                "request {rid}"
            );
            assert_eq!(r.delivered + r.remaining, r.total, "request {rid}");
        }
        assert!(self.held() <= self.limits.max_pending);
    }
}

/// The name results and events show for worker number `id` that
/// registered as `name`.
pub fn shown_name(name: &str, id: u64) -> String {
    format!("{name}#{id}")
}

/// The weight of a wire task (of its board's size).
fn weight_of(task: &v1::Task) -> usize {
    Size::new(task.rows as usize, task.cols as usize).map_or(1, weight)
}

/// A worker's answer after its replay: the moves in the client API's
/// notation and the method's name.
#[derive(Debug)]
struct Checked {
    moves: i64,
    solution: EcoString,
    strategy: &'static str,
    time_us: u64,
}

/// Reads and replays a worker's answer (protocol 2: move indices and a
/// method number); anything that is not a shortest-looking valid answer is
/// a [`Rejection`].
fn check_solved(puzzle: &Puzzle, s: v1::TaskSolved) -> Result<Checked, Rejection> {
    let strategy = method_from_wire(s.method)
        .ok_or_else(|| Rejection::Malformed(format!("an unknown method number {}", s.method)))?
        .name();
    // Bounded before replaying (`check_indices` checks it again, for every
    // caller).
    if s.path.len() > MAX_PATH_MOVES {
        return Err(Rejection::Malformed(format!(
            "a path of {} moves (at most {MAX_PATH_MOVES})",
            s.path.len()
        )));
    }
    // Replayed as the move numbers the wire carries: no list of moves.
    check_path(puzzle.size(), &s.path).map_err(|e| Rejection::IllegalMove(e.to_string()))?;
    check_indices(puzzle, s.moves, &s.path)?;
    // Every byte is a move (checked above), and the text ASCII. Written on
    // the stack, then into the string the result keeps (inline up to 15
    // bytes).
    let mut text = [0; 4 * MAX_PATH_MOVES];
    let len = MoveTable::of(puzzle.size())
        .notation_bytes(&s.path, &mut text)
        .unwrap_or(0);
    let solution = EcoString::from(std::str::from_utf8(&text[..len]).unwrap_or_default());
    Ok(Checked {
        moves: s.moves,
        solution,
        strategy,
        time_us: s.time_us,
    })
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_proto::work::{path_from_wire, task_puzzle};
    use colball_solver::generate::Generator;
    use colball_solver::verify::check_answer;
    use colball_solver::{BidirSearch, format_moves};

    fn limits() -> Limits {
        Limits {
            max_pending: 100,
            credit: Credit {
                per_slot: 1,
                unit: weight(Size::new(3, 3).unwrap()),
            },
            audit_rate: 0.0,
            ..Limits::default()
        }
    }

    fn spec(client: &str, priority: Priority, total: usize) -> RequestSpec {
        RequestSpec {
            client: client.into(),
            priority,
            total,
        }
    }

    /// An empty state with one limit changed.
    fn state_with(change: impl FnOnce(&mut Limits), now: Instant) -> State {
        let mut l = limits();
        change(&mut l);
        State::new(l, now)
    }

    /// A state with one worker (id 1) of `slots` slots, as of `now`.
    fn with_worker(slots: u32, now: Instant) -> State {
        let mut s = State::new(limits(), now);
        s.register(1, "w", None, slots, now).unwrap();
        s
    }

    fn puzzles(n: usize, size: Size, seed: u64) -> Vec<NewTask> {
        let mut g = Generator::new(seed);
        (0..n)
            .map(|i| NewTask {
                index: i as u64,
                id: ecow::eco_format!("p{i}"),
                puzzle: g.uniform(size),
            })
            .collect()
    }

    fn tasks(n: usize) -> Vec<NewTask> {
        puzzles(n, Size::new(3, 3).unwrap(), 5)
    }

    /// The tasks assigned in `effects`, per worker, in order.
    fn assigned(effects: &Effects) -> Vec<(u64, v1::Task)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Assign { worker, tasks } => Some(tasks.iter().map(|t| (*worker, *t))),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn delivered(effects: &Effects) -> Vec<(u64, egress::PuzzleResult)> {
        let mut out: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Deliver { request, result } => Some((*request, result.clone())),
                _ => None,
            })
            .collect();
        out.sort_by_key(|(r, res)| (*r, res.index));
        out
    }

    fn cancels(effects: &Effects) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Cancel { tasks, .. } => Some(tasks.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    fn closed(effects: &Effects) -> Vec<(u64, LossReason)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Close { worker, reason } => Some((*worker, reason.clone())),
                _ => None,
            })
            .collect()
    }

    /// The true answer to an assigned task, as a worker reports it.
    fn answer(task: &v1::Task) -> v1::TaskResult {
        let puzzle = task_puzzle(task).unwrap();
        let solution = BidirSearch::new().solve(&puzzle);
        solved(
            puzzle.size(),
            task.task_id,
            solution.answer(),
            &solution.notation(),
        )
    }

    fn solved(size: Size, task_id: u64, moves: i64, solution: &str) -> v1::TaskResult {
        v1::TaskResult {
            task_id,
            outcome: Some(outcome(size, moves, solution)),
        }
    }

    fn outcome(size: Size, moves: i64, solution: &str) -> task_result::Outcome {
        colball_testkit::worker_answer(size, moves, solution)
    }

    /// The moves of a worker's answer, in notation.
    fn notation(size: Size, s: &v1::TaskSolved) -> String {
        format_moves(&path_from_wire(size, &s.path).unwrap())
    }

    fn outcome_moves(r: &egress::PuzzleResult) -> Option<i64> {
        match &r.outcome {
            Some(egress::Outcome::Solved(s)) => Some(s.moves),
            _ => None,
        }
    }

    #[test]
    fn a_lone_puzzle_is_dispatched_and_answered_at_once() {
        // A worker with room for a large chunk: one puzzle does not wait
        // for the chunk to fill, nor for a tick of the clock.
        let now = Instant::now();
        let mut s = with_worker(32, now);
        let e = s
            .admit(10, spec("a", Priority::Interactive, 1), tasks(1), now)
            .unwrap();
        let sent = assigned(&e);
        assert_eq!(sent.len(), 1, "{e:?}");
        let e = s.result(1, answer(&sent[0].1), now);
        let got = delivered(&e);
        assert_eq!(got.len(), 1, "{e:?}");
        assert_eq!((got[0].0, got[0].1.index), (10, 0));
    }

    #[test]
    fn an_index_past_32_bits_is_refused_whole_and_its_neighbours_kept() {
        // Tasks keep their index in 32 bits; no batch or job comes near,
        // but the state does not wrap one that did.
        let now = Instant::now();
        let mut s = with_worker(32, now);
        let mut big = tasks(3);
        big[2].index = u64::from(u32::MAX) + 1;
        let e = s
            .admit(10, spec("a", Priority::Normal, 3), big, now)
            .unwrap_err();
        assert!(matches!(e, ServerError::IndexTooLarge { .. }), "{e:?}");
        assert!(e.to_string().contains("index 4294967296"), "{e}");
        assert_eq!((s.tasks.len(), s.requests.len()), (0, 0));
        let mut last = tasks(1);
        last[0].index = u64::from(u32::MAX);
        let e = s
            .admit(11, spec("a", Priority::Normal, 1), last, now)
            .unwrap();
        let e = s.result(1, answer(&assigned(&e)[0].1), now);
        assert_eq!(delivered(&e)[0].1.index, u64::from(u32::MAX));
        s.check_invariants();
    }

    #[test]
    fn credit_limits_what_a_worker_holds() {
        let now = Instant::now();
        let mut s = with_worker(2, now);
        let first = assigned(
            &s.admit(10, spec("a", Priority::Normal, 10), tasks(10), now)
                .unwrap(),
        );
        assert_eq!(first.len(), 2);
        let e = s.result(1, answer(&first[0].1), now);
        assert_eq!(assigned(&e).len(), 1);
        assert_eq!(delivered(&e).len(), 1);
    }

    #[test]
    fn a_lost_worker_s_tasks_go_to_another_and_results_arrive_once() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        s.register(1, "a", None, 3, now).unwrap();
        let held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 3), tasks(3), now)
                .unwrap(),
        );
        assert_eq!(held.len(), 3);
        let mut got = delivered(&s.result(1, answer(&held[0].1), now));
        s.worker_lost(1, LossReason::Silent, now);
        let again = assigned(&s.register(2, "c", None, 3, now).unwrap());
        assert_eq!(again.len(), 2);
        for (_, t) in &again {
            got.extend(delivered(&s.result(2, answer(t), now)));
        }
        // A second report of a task is a protocol error: the worker is
        // lost, and nothing is delivered twice.
        let e = s.result(2, answer(&again[0].1), now);
        assert!(delivered(&e).is_empty());
        assert!(matches!(
            closed(&e)[..],
            [(2, LossReason::Protocol(ProtocolError::NotHeld(_)))]
        ));
        let indexes: Vec<u64> = got.iter().map(|(_, r)| r.index).collect();
        assert_eq!(indexes, vec![0, 1, 2]);
        assert_eq!(s.snapshot().pending, 0);
    }

    /// Three workers in turn take the one task and are lost with it.
    fn lose_a_worker_per_attempt(s: &mut State, now: Instant) -> Effects {
        let mut effects = Vec::new();
        for round in 0..3 {
            let id = 100 + round;
            let e = s.register(id, "w", None, 1, now).unwrap();
            assert_eq!(assigned(&e).len(), 1);
            effects.extend(s.worker_lost(id, LossReason::Disconnected, now));
        }
        effects
    }

    #[test]
    fn attempts_are_capped_with_an_error_result() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
            .unwrap();
        let got = delivered(&lose_a_worker_per_attempt(&mut s, now));
        let [(10, r)] = &got[..] else {
            panic!("one result: {got:?}")
        };
        let Some(egress::Outcome::Error(e)) = &r.outcome else {
            panic!("expected an error result");
        };
        assert!(e.message.contains("3 attempts"), "{}", e.message);
        assert_eq!(s.snapshot().pending, 0);
    }

    #[test]
    fn admission_counts_unread_results_and_ending_frees_it() {
        let now = Instant::now();
        let mut s = with_worker(1, now);
        let running = assigned(
            &s.admit(10, spec("c", Priority::Normal, 80), tasks(80), now)
                .unwrap(),
        );
        let err = s
            .admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
            .unwrap_err();
        assert!(matches!(err, ServerError::Overloaded { .. }), "{err}");
        // Results solved but unread still hold their places.
        let mut more = running.clone();
        for _ in 0..30 {
            let (_, t) = more.pop().unwrap();
            more.extend(assigned(&s.result(1, answer(&t), now)));
        }
        assert_eq!(s.snapshot().held, 80);
        assert!(
            s.admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
                .is_err()
        );
        // Once read and sent on, they do not.
        s.ack(10, 30, 30, now);
        assert_eq!(s.snapshot().held, 50);
        s.admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
            .unwrap();
        let e = s.end_request(10, now);
        assert_eq!(cancels(&e), vec![more[0].1.task_id]);
        assert_eq!(s.snapshot().held, 30);
    }

    #[test]
    fn a_client_that_does_not_read_stops_its_dispatch() {
        let now = Instant::now();
        let mut s = state_with(|l| l.max_unread = 4, now);
        s.register(1, "w", None, 2, now).unwrap();
        let mut held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 20), tasks(20), now)
                .unwrap(),
        );
        let mut answered = 0;
        while let Some((_, t)) = held.pop() {
            answered += 1;
            held.extend(assigned(&s.result(1, answer(&t), now)));
        }
        // Four unread results hold the rest back: what was in flight then
        // finishes, nothing more goes out.
        assert!((4..=5).contains(&answered), "{answered}");
        assert_eq!(s.snapshot().in_flight, 0);
        assert_eq!(s.snapshot().queued, 20 - answered);
        // The client reads two: two more go out.
        let e = s.ack(10, 2, 2, now);
        assert_eq!(assigned(&e).len(), 2);
    }

    /// Tasks 0..n where the puzzles at `repeats` are copies of puzzle 0.
    fn tasks_with_repeats(n: usize, repeats: &[usize]) -> Vec<NewTask> {
        let mut t = tasks(n);
        for &i in repeats {
            t[i].puzzle = t[0].puzzle;
        }
        t
    }

    #[test]
    fn a_puzzle_repeated_in_a_batch_is_solved_once_and_answered_for_each_copy() {
        let now = Instant::now();
        let mut s = with_worker(8, now);
        let held = assigned(
            &s.admit(
                10,
                spec("c", Priority::Normal, 6),
                tasks_with_repeats(6, &[2, 5]),
                now,
            )
            .unwrap(),
        );
        assert_eq!(held.len(), 4, "copies are not dispatched");
        assert_eq!(s.snapshot().pending, 4);
        let mut got = Vec::new();
        for (_, t) in &held {
            got.extend(delivered(&s.result(1, answer(t), now)));
        }
        got.sort_by_key(|(_, r)| r.index);
        let indexes: Vec<u64> = got.iter().map(|(_, r)| r.index).collect();
        assert_eq!(indexes, vec![0, 1, 2, 3, 4, 5]);
        for (_, r) in &got {
            assert_eq!(r.id, format!("p{}", r.index), "each copy keeps its own id");
            let Some(egress::Outcome::Solved(solved)) = &r.outcome else {
                panic!("expected an answer: {r:?}");
            };
            assert_eq!(solved.cached, [2, 5].contains(&r.index), "{r:?}");
        }
        assert_eq!(s.snapshot().counters.solved, 4);
    }

    #[test]
    fn a_puzzle_pending_for_one_request_is_not_dispatched_again_for_another() {
        let now = Instant::now();
        let mut s = with_worker(8, now);
        let held = assigned(
            &s.admit(10, spec("a", Priority::Normal, 3), tasks(3), now)
                .unwrap(),
        );
        assert_eq!(held.len(), 3);
        // The same puzzles from another client: nothing new to dispatch.
        let e = s
            .admit(11, spec("b", Priority::Normal, 3), tasks(3), now)
            .unwrap();
        assert!(assigned(&e).is_empty());
        assert_eq!(s.snapshot().pending, 3);
        // The first client goes away: the tasks carry on for the second,
        // and the worker is told to cancel nothing.
        assert!(cancels(&s.end_request(10, now)).is_empty());
        assert_eq!(s.snapshot().pending, 3);
        let mut got = Vec::new();
        for (_, t) in &held {
            got.extend(delivered(&s.result(1, answer(t), now)));
        }
        assert!(
            got.iter().all(|(r, _)| *r == 11),
            "the ended request gets nothing"
        );
        assert_eq!(got.len(), 3);
        assert_eq!(s.snapshot().pending, 0);
        // Done tasks lead nothing: the same puzzles are dispatched again.
        let e = s
            .admit(12, spec("c", Priority::Normal, 3), tasks(3), now)
            .unwrap();
        assert_eq!(assigned(&e).len(), 3);
    }

    #[test]
    fn a_shared_task_is_cancelled_when_every_request_waiting_for_it_ends() {
        let now = Instant::now();
        let mut s = with_worker(8, now);
        let held = assigned(
            &s.admit(10, spec("a", Priority::Normal, 2), tasks(2), now)
                .unwrap(),
        );
        s.admit(11, spec("b", Priority::Normal, 2), tasks(2), now)
            .unwrap();
        assert!(cancels(&s.end_request(10, now)).is_empty());
        let ids: Vec<u64> = held.iter().map(|(_, t)| t.task_id).collect();
        assert_eq!(cancels(&s.end_request(11, now)), ids);
        assert_eq!(s.snapshot().pending, 0);
        assert_eq!(s.snapshot().counters.cancelled, 2);
    }

    #[test]
    fn copies_of_a_puzzle_that_fails_fail_too() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        s.admit(
            10,
            spec("c", Priority::Normal, 3),
            tasks_with_repeats(3, &[1, 2]),
            now,
        )
        .unwrap();
        let got = delivered(&lose_a_worker_per_attempt(&mut s, now));
        assert_eq!(got.len(), 3);
        for (_, r) in &got {
            let Some(egress::Outcome::Error(e)) = &r.outcome else {
                panic!("expected an error result: {r:?}");
            };
            assert!(e.message.contains(&format!("{:?}", r.id)), "{}", e.message);
            assert!(e.message.contains("3 attempts"), "{}", e.message);
        }
    }

    #[test]
    fn requests_fail_after_the_grace_period_without_workers() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        s.admit(10, spec("c", Priority::Normal, 2), tasks(2), now)
            .unwrap();
        assert!(
            s.tick(now + Duration::from_millis(10))
                .iter()
                .all(|e| !matches!(e, Effect::Fail { .. }))
        );
        let e = s.tick(now + Duration::from_secs(11));
        let failure = e.iter().find_map(|e| match e {
            Effect::Fail {
                request: 10,
                failure,
            } => Some(failure.clone()),
            _ => None,
        });
        assert!(
            matches!(failure, Some(RequestFailure::NoWorkers { ever: false, .. })),
            "{failure:?}"
        );
    }

    #[test]
    fn a_small_request_behind_a_large_one_goes_first() {
        let now = Instant::now();
        let mut s = with_worker(2, now);
        let mut held = assigned(
            &s.admit(10, spec("big", Priority::Normal, 60), tasks(60), now)
                .unwrap(),
        );
        // Another client's two puzzles (3x3 from another seed), same class.
        let small = puzzles(2, Size::new(3, 3).unwrap(), 99);
        s.admit(11, spec("small", Priority::Normal, 2), small, now)
            .unwrap();
        let mut order = Vec::new();
        while !held.is_empty() && order.len() < 6 {
            let (_, t) = held.remove(0);
            let e = s.result(1, answer(&t), now);
            order.extend(delivered(&e).into_iter().map(|(r, _)| r));
            held.extend(assigned(&e));
        }
        // The big request's first two were already out; the small one's
        // two come within the next four dispatches, not after 58.
        let small_at: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, r)| **r == 11)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(small_at.len(), 2, "{order:?}");
        assert!(small_at[1] < 6, "{order:?}");
    }

    #[test]
    fn interactive_requests_pass_bulk_ones() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        s.admit(10, spec("a", Priority::Bulk, 5), tasks(5), now)
            .unwrap();
        s.admit(
            11,
            spec("a", Priority::Interactive, 1),
            puzzles(1, Size::new(3, 3).unwrap(), 3),
            now,
        )
        .unwrap();
        let first = assigned(&s.register(1, "w", None, 1, now).unwrap());
        assert_eq!(first.len(), 1);
        let e = s.result(1, answer(&first[0].1), now);
        assert_eq!(delivered(&e)[0].0, 11);
        assert_eq!(s.snapshot().queued_by_class, [0, 0, 4]);
    }

    #[test]
    fn a_wrong_answer_is_never_delivered_and_its_worker_is_quarantined() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        let ip: IpAddr = "10.0.0.9".parse().unwrap();
        s.register(1, "bad", Some(ip), 2, now).unwrap();
        let held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 3), tasks(3), now)
                .unwrap(),
        );
        let size = task_puzzle(&held[0].1).unwrap().size();
        let e = s.result(1, solved(size, held[0].1.task_id, 2, "r22 c33"), now);
        assert!(delivered(&e).is_empty());
        assert!(!e.iter().any(|e| matches!(e, Effect::Cache { .. })));
        assert!(matches!(closed(&e)[..], [(1, LossReason::Quarantined(_))]));
        assert!(e.iter().any(|e| matches!(e, Effect::Publish(EventKind::WorkerQuarantined(q)) if q.reason == "misses_target" || q.reason == "wrong_count")));
        assert_eq!(s.snapshot().counters.quarantined, 1);
        // It may not come back under the same name and address...
        let err = s.register(2, "bad", Some(ip), 2, now).unwrap_err();
        assert!(matches!(err, RegisterError::Quarantined { .. }), "{err}");
        // ... but after the cool-down it may.
        assert!(
            s.register(2, "bad", Some(ip), 2, now + Duration::from_secs(601))
                .is_ok()
        );
        s.worker_lost(2, LossReason::Disconnected, now);
        // An honest worker answers all three, the rejected one without an
        // attempt counted against it.
        let again = assigned(&s.register(3, "good", Some(ip), 3, now).unwrap());
        assert_eq!(again.len(), 3);
        let mut got = Vec::new();
        for (_, t) in &again {
            got.extend(delivered(&s.result(3, answer(t), now)));
        }
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn minus_one_is_accepted_only_where_the_target_is_unreachable() {
        let now = Instant::now();
        let mut s = with_worker(1, now);
        let held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
                .unwrap(),
        );
        let size = task_puzzle(&held[0].1).unwrap().size();
        let e = s.result(1, solved(size, held[0].1.task_id, -1, ""), now);
        assert!(delivered(&e).is_empty());
        assert!(matches!(
            &closed(&e)[..],
            [(
                1,
                LossReason::Quarantined(Rejected {
                    reason: RejectReason::Replay(Rejection::FalseUnreachable),
                    ..
                })
            )]
        ));
    }

    #[test]
    fn slots_are_bounded() {
        let now = Instant::now();
        let mut s = State::new(limits(), now);
        assert!(matches!(
            s.register(1, "w", None, 0, now),
            Err(RegisterError::Slots { .. })
        ));
        let err = s.register(1, "w", None, 1 << 31, now).unwrap_err();
        assert!(err.to_string().contains("--max-worker-slots"), "{err}");
        assert!(s.register(1, "w", None, 256, now).is_ok());
    }

    #[test]
    fn a_result_without_an_outcome_loses_the_worker_and_its_tasks_go_back() {
        let now = Instant::now();
        let mut s = with_worker(2, now);
        let held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 2), tasks(2), now)
                .unwrap(),
        );
        let e = s.result(
            1,
            v1::TaskResult {
                task_id: held[0].1.task_id,
                outcome: None,
            },
            now,
        );
        assert!(matches!(
            closed(&e)[..],
            [(1, LossReason::Protocol(ProtocolError::NoOutcome(_)))]
        ));
        assert_eq!(s.snapshot().queued, 2, "both tasks are queued again");
    }

    #[test]
    fn a_worker_that_holds_a_task_too_long_is_stuck() {
        let now = Instant::now();
        let mut s = with_worker(1, now);
        s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
            .unwrap();
        // Heartbeats keep coming, the answer does not.
        let later = now + Duration::from_secs(31);
        s.heartbeat(1, None, later);
        let e = s.tick(later);
        assert!(matches!(closed(&e)[..], [(1, LossReason::Stuck)]));
        assert_eq!(s.snapshot().queued, 1);
        assert_eq!(s.snapshot().counters.timed_out, 1);
    }

    #[test]
    fn an_audit_that_finds_a_shorter_answer_quarantines_the_first_worker() {
        let now = Instant::now();
        let mut s = state_with(|l| l.audit_rate = 1.0, now);
        s.register(1, "padder", None, 1, now).unwrap();
        let held = assigned(
            &s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
                .unwrap(),
        );
        // A valid but padded answer: four rotations of one window.
        let honest = answer(&held[0].1);
        let Some(task_result::Outcome::Solved(h)) = &honest.outcome else {
            unreachable!()
        };
        let size = task_puzzle(&held[0].1).unwrap().size();
        let padded = solved(
            size,
            held[0].1.task_id,
            h.moves + 4,
            &format!("{} r22 r22 r22 r22", notation(size, h)),
        );
        let e = s.result(1, padded, now);
        assert_eq!(
            outcome_moves(&delivered(&e)[0].1),
            Some(h.moves + 4),
            "delivered: it replays"
        );
        assert_eq!(s.snapshot().audits, 1);
        // The audit waits for another worker.
        let audit = assigned(&s.register(2, "honest", None, 1, now).unwrap());
        assert_eq!(audit.len(), 1);
        let e = s.result(2, answer(&audit[0].1), now);
        assert!(
            matches!(
                &closed(&e)[..],
                [(
                    1,
                    LossReason::Quarantined(Rejected {
                        reason: RejectReason::NotOptimal { .. },
                        ..
                    })
                )]
            ),
            "{e:?}"
        );
        assert!(
            e.iter()
                .any(|e| matches!(e, Effect::Evict { worker } if worker == "padder#1"))
        );
        assert!(
            e.iter()
                .any(|e| matches!(e, Effect::Cache { answer, .. } if answer.moves == h.moves))
        );
    }

    mod operations {
        //! The property test: random operation sequences, invariants
        //! checked after every step.
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Admit {
                n: usize,
                ready: usize,
                client: u8,
                priority: u8,
                first: usize,
                /// Tasks (bits by position) whose result the driver finds
                /// under the lock, if their puzzle is not pending.
                known: u8,
            },
            Register {
                slots: u32,
            },
            Answer {
                worker: usize,
                pick: usize,
                how: How,
            },
            Lose {
                worker: usize,
            },
            Drain {
                worker: usize,
            },
            End {
                request: usize,
            },
            Read {
                request: usize,
                n: usize,
            },
            Tick {
                ms: u64,
            },
        }

        #[derive(Clone, Copy, Debug)]
        enum How {
            Right,
            WrongCount,
            Misses,
            Padded,
            NoOutcome,
            Cancelled,
            Error,
            NotHeld,
            Late,
        }

        fn how() -> impl Strategy<Value = How> {
            prop_oneof![
                6 => Just(How::Right),
                1 => Just(How::WrongCount),
                1 => Just(How::Misses),
                1 => Just(How::Padded),
                1 => Just(How::NoOutcome),
                1 => Just(How::Cancelled),
                1 => Just(How::Error),
                1 => Just(How::NotHeld),
                1 => Just(How::Late),
            ]
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (1..6usize, 0..3usize, 0..3u8, 0..3u8, 0..12usize, prop_oneof![Just(0u8), any::<u8>()]).prop_map(|(n, ready, client, priority, first, known)| Op::Admit { n, ready, client, priority, first, known }),
                2 => (0..4u32).prop_map(|slots| Op::Register { slots }),
                8 => (0..4usize, 0..8usize, how()).prop_map(|(worker, pick, how)| Op::Answer { worker, pick, how }),
                1 => (0..4usize).prop_map(|worker| Op::Lose { worker }),
                1 => (0..4usize).prop_map(|worker| Op::Drain { worker }),
                1 => (0..8usize).prop_map(|request| Op::End { request }),
                3 => (0..8usize, 1..8usize).prop_map(|(request, n)| Op::Read { request, n }),
                2 => (0..40_000u64).prop_map(|ms| Op::Tick { ms }),
            ]
        }

        /// A small pool of puzzles, so that repeats happen; 2x2 ones
        /// include unreachable targets.
        fn pool() -> Vec<(Puzzle, i64, String)> {
            let mut g = Generator::new(7);
            let mut search = BidirSearch::new();
            let mut pool = Vec::new();
            for (r, c) in [(2, 2), (2, 2), (2, 2), (2, 3), (3, 3), (2, 4)] {
                for _ in 0..2 {
                    let p = g.uniform(Size::new(r, c).unwrap());
                    let s = search.solve(&p);
                    pool.push((p, s.answer(), s.notation()));
                }
            }
            pool
        }

        /// The driver's and the clients' side, as the test sees it.
        #[derive(Default)]
        struct World {
            workers: Vec<u64>,
            /// Tasks each worker was sent and has not answered.
            sent: HashMap<u64, Vec<u64>>,
            answered: HashMap<u64, HashSet<u64>>,
            requests: Vec<u64>,
            /// Per request: its total, the indexes answered at once, the
            /// results delivered (index -> count), read so far, failed.
            totals: HashMap<u64, usize>,
            results: HashMap<u64, HashMap<u64, usize>>,
            read: HashMap<u64, usize>,
            failed: HashSet<u64>,
            ended: HashSet<u64>,
            puzzle_at: HashMap<(u64, u64), Puzzle>,
            next_id: u64,
        }

        impl World {
            fn apply(&mut self, effects: Effects) {
                for e in effects {
                    match e {
                        Effect::Assign { worker, tasks } => {
                            assert!(self.workers.contains(&worker), "assigned to a gone worker");
                            self.sent
                                .entry(worker)
                                .or_default()
                                .extend(tasks.iter().map(|t| t.task_id));
                        }
                        Effect::Cancel { .. } | Effect::Publish(_) | Effect::Evict { .. } => {}
                        Effect::Close { worker, .. } => {
                            self.workers.retain(|w| *w != worker);
                            self.sent.remove(&worker);
                        }
                        Effect::Deliver { request, result } => {
                            assert!(
                                !self.ended.contains(&request),
                                "delivered to an ended request"
                            );
                            *self
                                .results
                                .entry(request)
                                .or_default()
                                .entry(result.index)
                                .or_default() += 1;
                            if let Some(egress::Outcome::Solved(s)) = &result.outcome {
                                let puzzle = self.puzzle_at[&(request, result.index)];
                                assert_eq!(
                                    check_answer(&puzzle, s.moves, &s.solution),
                                    Ok(()),
                                    "an unchecked answer delivered"
                                );
                            }
                        }
                        Effect::Fail { request, .. } => {
                            self.failed.insert(request);
                        }
                        Effect::Cache { puzzle, answer } => {
                            assert_eq!(
                                check_answer(&puzzle, answer.moves, &answer.solution),
                                Ok(()),
                                "an unchecked answer cached"
                            );
                        }
                    }
                }
            }

            /// The clock moves on: every worker has heartbeaten, then the
            /// housekeeping tick.
            fn tick(&mut self, s: &mut State, now: Instant) {
                for &wid in &self.workers {
                    s.heartbeat(wid, None, now);
                }
                let e = s.tick(now);
                self.apply(e);
            }

            /// Every request whose results are all in (or that failed) is
            /// ended by its stream, as the driver's forwarder does.
            fn finish(&mut self, s: &mut State, now: Instant) {
                for &r in &self.requests.clone() {
                    if self.ended.contains(&r) {
                        continue;
                    }
                    let got = self.results.get(&r).map_or(0, |m| m.len());
                    let total = self.totals[&r];
                    if self.failed.contains(&r) || got == total {
                        let e = s.end_request(r, now);
                        self.ended.insert(r);
                        self.apply(e);
                    }
                }
            }
        }

        fn run(ops: Vec<Op>) {
            let pool = pool();
            let answers: HashMap<Puzzle, (i64, String)> =
                pool.iter().map(|(p, n, t)| (*p, (*n, t.clone()))).collect();
            let start = Instant::now();
            let mut now = start;
            let mut s = State::new(
                Limits {
                    max_pending: 40,
                    max_unread: 3,
                    credit: Credit::new(2),
                    audit_rate: 0.3,
                    max_attempts: 3,
                    ..Limits::default()
                },
                now,
            );
            let mut w = World {
                next_id: 1,
                ..World::default()
            };
            let mut puzzles_of: HashMap<u64, Puzzle> = HashMap::new();
            for op in ops {
                match op {
                    Op::Admit {
                        n,
                        ready,
                        client,
                        priority,
                        first,
                        known,
                    } => {
                        let id = w.next_id;
                        w.next_id += 1;
                        let tasks: Vec<NewTask> = (0..n)
                            .map(|i| NewTask {
                                index: (ready + i) as u64,
                                id: ecow::eco_format!("r{id}p{i}"),
                                puzzle: pool[(first + i * 5) % pool.len()].0,
                            })
                            .collect();
                        let total = ready + n;
                        let spec = RequestSpec {
                            client: format!("c{client}"),
                            priority: Priority::ALL[priority as usize],
                            total,
                        };
                        for t in &tasks {
                            w.puzzle_at.insert((id, t.index), t.puzzle);
                        }
                        let lookup = |t: &NewTask| {
                            let bit = t.index - ready as u64;
                            (known >> bit & 1 == 1).then(|| egress::PuzzleResult {
                                index: t.index,
                                ..egress::PuzzleResult::default()
                            })
                        };
                        if let Ok((e, late)) = s.admit_known(id, spec, tasks, now, lookup) {
                            w.requests.push(id);
                            w.totals.insert(id, total);
                            let m = w.results.entry(id).or_default();
                            for i in 0..ready {
                                m.insert(i as u64, 1);
                            }
                            for r in late {
                                *m.entry(r.index).or_default() += 1;
                            }
                            w.apply(e);
                        }
                    }
                    Op::Register { slots } => {
                        let id = 1000 + w.next_id;
                        w.next_id += 1;
                        if let Ok(e) = s.register(id, &format!("w{id}"), None, slots, now) {
                            w.workers.push(id);
                            w.apply(e);
                        }
                    }
                    Op::Answer { worker, pick, how } => {
                        let Some(&wid) = w.workers.get(worker) else {
                            continue;
                        };
                        let sent = w.sent.entry(wid).or_default();
                        let task_id = match how {
                            How::NotHeld => 999_999,
                            How::Late => match w.answered.get(&wid).and_then(|a| a.iter().next()) {
                                Some(&t) => t,
                                None => continue,
                            },
                            _ => {
                                if sent.is_empty() {
                                    continue;
                                }
                                sent.remove(pick % sent.len())
                            }
                        };
                        w.answered.entry(wid).or_default().insert(task_id);
                        // What the worker was asked: look the puzzle up
                        // through the state (tasks and audits).
                        let puzzle = s
                            .tasks
                            .get(task_id)
                            .map(|t| t.puzzle)
                            .or_else(|| s.audits.get(&task_id).map(|a| a.puzzle))
                            .or_else(|| puzzles_of.get(&task_id).copied());
                        let Some(puzzle) = puzzle else {
                            // A released task: its puzzle is gone; any
                            // report frees the slot.
                            let e = s.result(
                                wid,
                                v1::TaskResult {
                                    task_id,
                                    outcome: Some(task_result::Outcome::Cancelled(
                                        v1::Cancelled {},
                                    )),
                                },
                                now,
                            );
                            w.apply(e);
                            continue;
                        };
                        puzzles_of.insert(task_id, puzzle);
                        let (n, text) = answers[&puzzle].clone();
                        let size = puzzle.size();
                        let outcome = match how {
                            How::Right | How::NotHeld | How::Late => Some(outcome(size, n, &text)),
                            How::WrongCount => Some(outcome(size, n + 1, &text)),
                            How::Misses => Some(outcome(size, 1, "c22")),
                            How::Padded if n >= 0 => {
                                Some(outcome(size, n + 4, &format!("{text} r22 r22 r22 r22")))
                            }
                            How::Padded => Some(outcome(size, n, &text)),
                            How::NoOutcome => None,
                            How::Cancelled => {
                                Some(task_result::Outcome::Cancelled(v1::Cancelled {}))
                            }
                            How::Error => Some(task_result::Outcome::Error("boom".into())),
                        };
                        let e = s.result(wid, v1::TaskResult { task_id, outcome }, now);
                        w.apply(e);
                    }
                    Op::Lose { worker } => {
                        let Some(&wid) = w.workers.get(worker) else {
                            continue;
                        };
                        w.workers.retain(|x| *x != wid);
                        let e = s.worker_lost(wid, LossReason::Disconnected, now);
                        w.apply(e);
                    }
                    Op::Drain { worker } => {
                        let Some(&wid) = w.workers.get(worker) else {
                            continue;
                        };
                        let e = s.drain(wid, now);
                        w.apply(e);
                    }
                    Op::End { request } => {
                        let Some(&r) = w.requests.get(request) else {
                            continue;
                        };
                        if w.ended.insert(r) {
                            let e = s.end_request(r, now);
                            w.apply(e);
                        }
                    }
                    Op::Read { request, n } => {
                        let Some(&r) = w.requests.get(request) else {
                            continue;
                        };
                        let got = w.results.get(&r).map_or(0, |m| m.values().sum());
                        let read = w.read.entry(r).or_default();
                        *read = (*read + n).min(got);
                        let read = *read;
                        let e = s.ack(r, read, read, now);
                        w.apply(e);
                    }
                    Op::Tick { ms } => {
                        now += Duration::from_millis(ms);
                        w.tick(&mut s, now);
                    }
                }
                w.finish(&mut s, now);
                s.check_invariants();
                check_world(&s, &w);
            }
            // Wind down: an honest worker answers everything, clients read.
            let honest = 5_000_000;
            if let Ok(e) = s.register(honest, "honest", None, 3, now) {
                w.workers.push(honest);
                w.apply(e);
            }
            for _ in 0..500 {
                for r in w.requests.clone() {
                    let got = w.results.get(&r).map_or(0, |m| m.values().sum());
                    w.read.insert(r, got);
                    let e = s.ack(r, got, got, now);
                    w.apply(e);
                }
                for wid in w.workers.clone() {
                    // All it holds, in one message (as a worker under load
                    // sends them).
                    let sent = std::mem::take(w.sent.entry(wid).or_default());
                    let results: Vec<v1::TaskResult> = sent
                        .into_iter()
                        .map(|task_id| {
                            let puzzle = s
                                .tasks
                                .get(task_id)
                                .map(|t| t.puzzle)
                                .or_else(|| s.audits.get(&task_id).map(|a| a.puzzle));
                            let outcome = match puzzle {
                                Some(p) => {
                                    let (n, text) = answers[&p].clone();
                                    outcome(p.size(), n, &text)
                                }
                                None => task_result::Outcome::Cancelled(v1::Cancelled {}),
                            };
                            v1::TaskResult {
                                task_id,
                                outcome: Some(outcome),
                            }
                        })
                        .collect();
                    if !results.is_empty() {
                        let e = s.results(wid, results, now);
                        w.apply(e);
                    }
                }
                now += Duration::from_millis(100);
                w.tick(&mut s, now);
                w.finish(&mut s, now);
                s.check_invariants();
                check_world(&s, &w);
                if w.requests.iter().all(|r| w.ended.contains(r)) {
                    break;
                }
            }
            // Every request not ended by its client got all its results
            // exactly once, or failed.
            for &r in &w.requests {
                let m = w.results.get(&r).cloned().unwrap_or_default();
                if !w.failed.contains(&r) && w.ended.contains(&r) && m.len() < w.totals[&r] {
                    // Only a client that went away may miss results.
                    continue;
                }
                assert!(w.ended.contains(&r), "request {r} never ended");
            }
            assert!(s.requests.is_empty());
            assert!(
                s.tasks.len() == 0,
                "tasks left: {:?}",
                s.tasks.iter().map(|(id, _)| id).collect::<Vec<_>>()
            );
            assert!(s.queue.is_empty());
            assert_eq!(s.tasks.leaders(), 0);
        }

        fn check_world(s: &State, w: &World) {
            for (r, m) in &w.results {
                for (index, count) in m {
                    assert_eq!(*count, 1, "request {r} got index {index} {count} times");
                    assert!((*index as usize) < w.totals[r]);
                }
            }
            // Work-conserving: no worker idles with credit while eligible
            // work waits.
            if s.queue.has_eligible() {
                for (id, worker) in &s.workers {
                    assert!(
                        worker.draining || worker.load >= worker.credit,
                        "worker {id} idles with {} of {} while work waits",
                        worker.load,
                        worker.credit
                    );
                }
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
            #[test]
            fn invariants_hold_after_every_step(ops in proptest::collection::vec(op(), 1..80)) {
                run(ops);
            }
        }
    }
}
