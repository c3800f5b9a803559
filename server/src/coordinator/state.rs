//! The coordinator's bookkeeping: admitted batches, queued and in-flight
//! tasks, registered workers and their credit.
//!
//! Everything here is synchronous and runs under one mutex held only for
//! short, non-blocking steps (messages leave through `try_send` on bounded
//! channels sized so they cannot fill in normal operation). That keeps the
//! invariants in one place and lets unit tests drive it without a network:
//!
//! - every admitted task is in exactly one of: the queue, one worker's
//!   in-flight set, or done (removed from `tasks`);
//! - a worker holds at most `slots * credit_per_slot` tasks;
//! - a task's result reaches its batch at most once: the first result
//!   removes the task, later ones (from a re-dispatch) find nothing;
//! - a task is dispatched at most `max_attempts` times; after that it gets
//!   an error result;
//! - a puzzle is pending as at most one task: when it occurs again (in the
//!   same batch or in another one admitted while it is pending), the new
//!   occurrence follows the task and gets its result (or error) under its
//!   own id, without being dispatched. A task whose batch is cancelled
//!   carries on for its followers.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colball_proto::v1::{self, coordinator_message, puzzle_result};
use colball_solver::Puzzle;
use tokio::sync::mpsc;
use tonic::Status;

use super::events::EventLog;
use crate::cache::{Answer, ResultCache};
use crate::error::ServerError;
use colball_proto::v1::cluster_event::Kind as EventKind;

/// What a batch's stream receives: a result, or the status that ends it.
pub type BatchEvent = Result<v1::PuzzleResult, Status>;
/// What a worker's session stream sends.
pub type WorkerTx = mpsc::Sender<Result<v1::CoordinatorMessage, Status>>;

/// One puzzle to dispatch.
#[derive(Debug)]
pub struct NewTask {
    pub index: u64,
    pub id: String,
    pub puzzle: Puzzle,
}

#[derive(Debug)]
struct Task {
    batch: u64,
    index: u64,
    id: String,
    puzzle: Puzzle,
    attempts: u32,
    worker: Option<u64>,
    /// Later occurrences of the same puzzle, in this batch or others.
    followers: Vec<Follower>,
    /// The wire `Task.target_share` hint: how many puzzles with this
    /// target each worker can expect from the batch (0: none).
    target_share: u64,
}

/// An occurrence of a pending task's puzzle that waits for its result.
#[derive(Debug)]
struct Follower {
    batch: u64,
    index: u64,
    id: String,
}

#[derive(Debug)]
struct Batch {
    tx: mpsc::Sender<BatchEvent>,
    tasks: Vec<u64>,
    remaining: usize,
}

#[derive(Debug)]
struct Worker {
    name: String,
    slots: u32,
    in_flight: HashSet<u64>,
    tx: WorkerTx,
    last_seen: Instant,
    draining: bool,
    solved: u64,
    cache: v1::WorkerCacheStats,
}

/// Limits the state enforces.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_pending: usize,
    pub max_attempts: u32,
    pub credit_per_slot: u32,
    pub max_chunk: usize,
}

/// Counters for metrics and logs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub solved: u64,
    pub failed: u64,
    pub redispatched: u64,
    pub workers_lost: u64,
    pub cancelled: u64,
}

/// One worker as the dashboard and `/metrics` show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WorkerView {
    pub id: u64,
    pub name: String,
    pub slots: u32,
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
}

/// A snapshot for the metrics endpoint and the dashboard.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub workers: usize,
    pub slots: u64,
    pub queued: usize,
    pub in_flight: usize,
    pub pending: usize,
    pub batches: usize,
    pub counters: Counters,
    pub worker_list: Vec<WorkerView>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct State {
    limits: Limits,
    next_id: u64,
    queue: VecDeque<u64>,
    tasks: HashMap<u64, Task>,
    /// The pending task of each puzzle.
    leaders: HashMap<Puzzle, u64>,
    batches: HashMap<u64, Batch>,
    workers: BTreeMap<u64, Worker>,
    /// When the last worker left (or the coordinator started), while none
    /// is registered.
    no_workers_since: Option<Instant>,
    counters: Counters,
    events: Arc<EventLog>,
}

impl State {
    pub fn new(limits: Limits, events: Arc<EventLog>, now: Instant) -> State {
        State {
            limits,
            next_id: 1,
            queue: VecDeque::new(),
            tasks: HashMap::new(),
            leaders: HashMap::new(),
            batches: HashMap::new(),
            workers: BTreeMap::new(),
            no_workers_since: Some(now),
            counters: Counters::default(),
            events,
        }
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub fn worker_count(&self) -> usize {
        self.workers.len()
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            workers: self.workers.len(),
            slots: self.workers.values().map(|w| u64::from(w.slots)).sum(),
            queued: self.queue.len(),
            in_flight: self.workers.values().map(|w| w.in_flight.len()).sum(),
            pending: self.tasks.len(),
            batches: self.batches.len(),
            counters: self.counters,
            worker_list: self
                .workers
                .iter()
                .map(|(&id, w)| WorkerView {
                    id,
                    name: w.name.clone(),
                    slots: w.slots,
                    in_flight: w.in_flight.len(),
                    solved: w.solved,
                    draining: w.draining,
                    cache_hits: w.cache.hits,
                    cache_misses: w.cache.misses,
                    cache_evictions: w.cache.evictions,
                    cache_entries: w.cache.entries,
                    table_builds: w.cache.table_builds,
                })
                .collect(),
        }
    }

    /// Admits a batch whose results go to `tx` (which must have room for
    /// every task). Refuses it when the pending total would pass the limit.
    pub fn admit(
        &mut self,
        tasks: Vec<NewTask>,
        tx: mpsc::Sender<BatchEvent>,
    ) -> Result<u64, ServerError> {
        let pending = self.tasks.len();
        if pending + tasks.len() > self.limits.max_pending {
            return Err(ServerError::Overloaded {
                batch: tasks.len(),
                pending,
                limit: self.limits.max_pending,
            });
        }
        let batch = self.fresh_id();
        let remaining = tasks.len();
        // Puzzles per target, spread over the workers there are now.
        let mut targets: HashMap<colball_solver::Board, u64> = HashMap::new();
        for t in &tasks {
            *targets.entry(t.puzzle.target()).or_insert(0) += 1;
        }
        let workers = self.workers.len().max(1) as u64;
        let mut ids = Vec::with_capacity(tasks.len());
        for t in tasks {
            let leader = self.leaders.get(&t.puzzle);
            if let Some(task) = leader.and_then(|id| self.tasks.get_mut(id)) {
                task.followers.push(Follower {
                    batch,
                    index: t.index,
                    id: t.id,
                });
                continue;
            }
            let id = self.fresh_id();
            self.leaders.insert(t.puzzle, id);
            self.tasks.insert(
                id,
                Task {
                    batch,
                    index: t.index,
                    id: t.id,
                    puzzle: t.puzzle,
                    attempts: 0,
                    worker: None,
                    followers: Vec::new(),
                    target_share: match targets.get(&t.puzzle.target()) {
                        Some(&n) if n > 1 => n.div_ceil(workers),
                        _ => 0,
                    },
                },
            );
            self.queue.push_back(id);
            ids.push(id);
        }
        self.batches.insert(
            batch,
            Batch {
                tx,
                remaining,
                tasks: ids,
            },
        );
        self.dispatch();
        Ok(batch)
    }

    /// Forgets a batch whose client went away (or whose deadline passed):
    /// its queued tasks are dropped and its running ones cancelled on their
    /// workers, except tasks another batch follows, which that batch takes
    /// over. The workers' credit comes back when they acknowledge.
    pub fn cancel_batch(&mut self, batch: u64) {
        let Some(b) = self.batches.remove(&batch) else {
            return;
        };
        let mut cancels: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for id in b.tasks {
            let Some(task) = self.tasks.get_mut(&id) else {
                continue;
            };
            let batches = &self.batches;
            task.followers.retain(|f| batches.contains_key(&f.batch));
            if !task.followers.is_empty() {
                // Another request waits for this puzzle: its first
                // follower takes the task over.
                let heir = task.followers.remove(0);
                (task.batch, task.index, task.id) = (heir.batch, heir.index, heir.id);
                if let Some(b) = self.batches.get_mut(&heir.batch) {
                    b.tasks.push(id);
                }
                continue;
            }
            if let Some(task) = self.take(id) {
                self.counters.cancelled += 1;
                if let Some(w) = task.worker {
                    cancels.entry(w).or_default().push(id);
                }
            }
        }
        self.queue.retain(|id| self.tasks.contains_key(id));
        for (w, task_ids) in cancels {
            tracing::debug!(worker = w, tasks = task_ids.len(), "cancelling");
            self.send(
                w,
                coordinator_message::Kind::Cancel(v1::Cancel { task_ids }),
            );
        }
    }

    /// Registers a worker; returns its id.
    pub fn add_worker(&mut self, name: String, slots: u32, tx: WorkerTx, now: Instant) -> u64 {
        let id = self.fresh_id();
        let name = format!("{name}#{id}");
        self.events
            .publish(EventKind::WorkerJoined(v1::WorkerJoined {
                worker: id,
                name: name.clone(),
                slots,
            }));
        self.workers.insert(
            id,
            Worker {
                name,
                slots,
                in_flight: HashSet::new(),
                tx,
                last_seen: now,
                draining: false,
                solved: 0,
                cache: v1::WorkerCacheStats::default(),
            },
        );
        self.no_workers_since = None;
        self.dispatch();
        id
    }

    pub fn has_worker(&self, worker: u64) -> bool {
        self.workers.contains_key(&worker)
    }

    /// Notes that the worker is alive.
    pub fn touch(&mut self, worker: u64, now: Instant) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.last_seen = now;
        }
    }

    /// Keeps the cache counters a worker reported in its heartbeat.
    pub fn worker_cache(&mut self, worker: u64, cache: v1::WorkerCacheStats) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.cache = cache;
        }
    }

    /// The worker takes no more work; it finishes what it holds.
    pub fn drain_worker(&mut self, worker: u64, now: Instant) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.draining = true;
        }
        self.release_if_drained(worker, now);
    }

    /// Closes a draining worker's session once it holds nothing: the
    /// coordinator, not the worker, decides the end, so an assignment
    /// still on the wire when the worker asked to drain is never lost.
    fn release_if_drained(&mut self, worker: u64, now: Instant) {
        if self
            .workers
            .get(&worker)
            .is_some_and(|w| w.draining && w.in_flight.is_empty())
        {
            self.lose_worker(worker, "left", now);
        }
    }

    /// Removes a worker and puts its in-flight tasks back at the front of
    /// the queue (or fails those out of attempts).
    pub fn lose_worker(&mut self, worker: u64, reason: &str, now: Instant) {
        let Some(w) = self.workers.remove(&worker) else {
            return;
        };
        let lost = !w.in_flight.is_empty() || reason != "left";
        if lost {
            tracing::warn!(worker = %w.name, reason, tasks = w.in_flight.len(), "worker lost");
            self.counters.workers_lost += 1;
        } else {
            tracing::info!(worker = %w.name, "worker left");
        }
        let (mut redispatched, mut failed) = (0, 0);
        if self.workers.is_empty() {
            self.no_workers_since = Some(now);
        }
        for id in w.in_flight {
            let Some(task) = self.tasks.get_mut(&id) else {
                continue;
            };
            task.worker = None;
            if task.attempts >= self.limits.max_attempts {
                let attempts = task.attempts;
                if let Some(task) = self.take(id) {
                    self.counters.failed += 1;
                    failed += 1;
                    self.fail(task, |id| {
                        format!(
                            "puzzle {id:?}: gave up after {attempts} attempts: every worker that took it was lost"
                        )
                    });
                }
            } else {
                self.counters.redispatched += 1;
                redispatched += 1;
                self.queue.push_front(id);
            }
        }
        self.events.publish(if lost {
            EventKind::WorkerLost(v1::WorkerLost {
                worker,
                name: w.name,
                reason: reason.to_string(),
                redispatched,
                failed,
            })
        } else {
            EventKind::WorkerLeft(v1::WorkerLeft {
                worker,
                name: w.name,
            })
        });
        self.dispatch();
    }

    /// Handles one result from a worker.
    pub fn on_result(
        &mut self,
        worker: u64,
        result: v1::TaskResult,
        cache: &ResultCache,
    ) -> Result<(), ServerError> {
        let Some(w) = self.workers.get_mut(&worker) else {
            return Ok(());
        };
        if !w.in_flight.remove(&result.task_id) {
            // Not assigned to this worker (already reported): ignore.
            return Ok(());
        }
        let worker_name = w.name.clone();
        if matches!(result.outcome, Some(v1::task_result::Outcome::Solved(_))) {
            w.solved += 1;
        }
        let outcome = result
            .outcome
            .ok_or_else(|| ServerError::BadSession("task result without outcome".into()))?;
        let task_id = result.task_id;
        match outcome {
            v1::task_result::Outcome::Cancelled(_) => {
                // The worker gave the task back unsolved (it was cancelled
                // or the worker could not take it): queue it again if it
                // is still wanted, without counting an attempt.
                if let Some(task) = self.tasks.get_mut(&task_id) {
                    task.worker = None;
                    task.attempts = task.attempts.saturating_sub(1);
                    self.queue.push_front(task_id);
                }
            }
            v1::task_result::Outcome::Solved(s) => {
                if let Some(task) = self.take(task_id) {
                    cache.insert(
                        task.puzzle,
                        Answer {
                            moves: s.moves,
                            solution: s.solution.clone(),
                            strategy: s.strategy.clone(),
                            worker: worker_name.clone(),
                        },
                    );
                    self.counters.solved += 1;
                    let solved = v1::Solved {
                        moves: s.moves,
                        solution: s.solution,
                        strategy: s.strategy,
                        worker: worker_name,
                        time_us: s.time_us,
                        cached: false,
                    };
                    // Followers are answered without a solve of their own
                    // (most tasks have none: nothing is cloned for them).
                    if !task.followers.is_empty() {
                        let copy = v1::Solved {
                            time_us: 0,
                            cached: true,
                            ..solved.clone()
                        };
                        for f in task.followers {
                            let result = v1::PuzzleResult {
                                id: f.id,
                                index: f.index,
                                outcome: Some(puzzle_result::Outcome::Solved(copy.clone())),
                            };
                            self.deliver(f.batch, result);
                        }
                    }
                    let result = v1::PuzzleResult {
                        id: task.id,
                        index: task.index,
                        outcome: Some(puzzle_result::Outcome::Solved(solved)),
                    };
                    self.deliver(task.batch, result);
                }
            }
            v1::task_result::Outcome::Error(message) => {
                if let Some(task) = self.take(task_id) {
                    tracing::warn!(worker = %worker_name, puzzle = %task.id, %message, "worker failed a puzzle");
                    self.counters.failed += 1;
                    self.fail(task, |id| {
                        format!("puzzle {id:?}: worker {worker_name}: {message}")
                    });
                }
            }
        }
        self.dispatch();
        self.release_if_drained(worker, Instant::now());
        Ok(())
    }

    /// Workers silent for longer than `timeout`.
    pub fn silent_workers(&self, now: Instant, timeout: Duration) -> Vec<u64> {
        self.workers
            .iter()
            .filter(|(_, w)| now.duration_since(w.last_seen) > timeout)
            .map(|(id, _)| *id)
            .collect()
    }

    /// When no worker has been registered for longer than `grace`, ends
    /// every batch still waiting with `error`.
    pub fn fail_if_no_workers(&mut self, now: Instant, grace: Duration) {
        let Some(since) = self.no_workers_since else {
            return;
        };
        if self.batches.is_empty() || now.duration_since(since) < grace {
            return;
        }
        let waited = now.duration_since(since);
        let batches: Vec<Batch> = self.batches.drain().map(|(_, b)| b).collect();
        for batch in batches {
            for id in &batch.tasks {
                self.take(*id);
            }
            let status: Status = ServerError::NoWorkers { waited }.into();
            let _ = batch.tx.try_send(Err(status));
        }
        self.queue.clear();
    }

    /// Ends every batch with `status` and drops every worker's stream: the
    /// coordinator is shutting down.
    pub fn close_all(&mut self, status: &Status) {
        for (_, batch) in self.batches.drain() {
            let _ = batch.tx.try_send(Err(status.clone()));
        }
        self.tasks.clear();
        self.leaders.clear();
        self.queue.clear();
        self.workers.clear();
    }

    /// Sends an error result for the task and for each of its followers;
    /// `message` is given the id of each.
    fn fail(&mut self, task: Task, message: impl Fn(&str) -> String) {
        for f in task.followers {
            let result = v1::PuzzleResult::failed(f.id.clone(), f.index, message(&f.id));
            self.deliver(f.batch, result);
        }
        let result = v1::PuzzleResult::failed(task.id.clone(), task.index, message(&task.id));
        self.deliver(task.batch, result);
    }

    /// Removes a task that is done (or no longer wanted).
    fn take(&mut self, id: u64) -> Option<Task> {
        let task = self.tasks.remove(&id)?;
        if self.leaders.get(&task.puzzle) == Some(&id) {
            self.leaders.remove(&task.puzzle);
        }
        Some(task)
    }

    /// Sends a batch one result; the batch ends after its last.
    fn deliver(&mut self, batch: u64, result: v1::PuzzleResult) {
        let Some(b) = self.batches.get_mut(&batch) else {
            return;
        };
        b.remaining -= 1;
        // Cannot be full: the channel has room for every task of the batch.
        let _ = b.tx.try_send(Ok(result));
        if b.remaining == 0 {
            self.batches.remove(&batch);
        }
    }

    fn send(&mut self, worker: u64, kind: coordinator_message::Kind) -> bool {
        let Some(w) = self.workers.get(&worker) else {
            return false;
        };
        let message = v1::CoordinatorMessage { kind: Some(kind) };
        w.tx.try_send(Ok(message)).is_ok()
    }

    /// Hands queued tasks to workers with free credit, in chunks.
    fn dispatch(&mut self) {
        let mut broken = Vec::new();
        let worker_ids: Vec<u64> = self.workers.keys().copied().collect();
        for wid in worker_ids {
            if self.queue.is_empty() {
                break;
            }
            let Some(w) = self.workers.get_mut(&wid) else {
                continue;
            };
            if w.draining {
                continue;
            }
            let credit = (w.slots * self.limits.credit_per_slot) as usize;
            let mut free = credit.saturating_sub(w.in_flight.len());
            while free > 0 && !self.queue.is_empty() {
                let mut chunk = Vec::new();
                while chunk.len() < free.min(self.limits.max_chunk) {
                    let Some(id) = self.queue.pop_front() else {
                        break;
                    };
                    let Some(task) = self.tasks.get_mut(&id) else {
                        continue; // cancelled while queued
                    };
                    task.attempts += 1;
                    task.worker = Some(wid);
                    w.in_flight.insert(id);
                    chunk.push(v1::Task {
                        task_id: id,
                        puzzle: Some(colball_proto::puzzle_to_wire(task.id.clone(), &task.puzzle)),
                        target_share: task.target_share,
                    });
                }
                if chunk.is_empty() {
                    break;
                }
                free -= chunk.len();
                let message = v1::CoordinatorMessage {
                    kind: Some(coordinator_message::Kind::Assign(v1::Assign {
                        tasks: chunk,
                    })),
                };
                if w.tx.try_send(Ok(message)).is_err() {
                    broken.push(wid);
                    break;
                }
            }
        }
        for wid in broken {
            // Its stream is closed or not being read: treat it as lost.
            self.lose_worker(wid, "session stream closed", Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_solver::Size;
    use colball_solver::generate::Generator;

    fn limits() -> Limits {
        Limits {
            max_pending: 100,
            max_attempts: 3,
            credit_per_slot: 1,
            max_chunk: 64,
        }
    }

    type WorkerRx = mpsc::Receiver<Result<v1::CoordinatorMessage, Status>>;

    /// An empty state as of `now`.
    fn state(now: Instant) -> State {
        State::new(limits(), Arc::new(EventLog::new(100)), now)
    }

    /// A state with one worker `w` of `slots` slots: the state, the worker's
    /// id and what it is sent.
    fn with_worker(slots: u32) -> (State, u64, WorkerRx) {
        let now = Instant::now();
        let mut s = state(now);
        let (wtx, wrx) = mpsc::channel(16);
        let w = s.add_worker("w".into(), slots, wtx, now);
        (s, w, wrx)
    }

    fn tasks(n: usize) -> Vec<NewTask> {
        let mut g = Generator::new(5);
        (0..n)
            .map(|i| NewTask {
                index: i as u64,
                id: format!("p{i}"),
                puzzle: g.uniform(Size::new(3, 3).unwrap()),
            })
            .collect()
    }

    fn assigned(rx: &mut WorkerRx) -> Vec<u64> {
        let mut ids = Vec::new();
        while let Ok(Ok(m)) = rx.try_recv() {
            if let Some(coordinator_message::Kind::Assign(a)) = m.kind {
                ids.extend(a.tasks.iter().map(|t| t.task_id));
            }
        }
        ids
    }

    /// The task ids of the next message to a worker, which must be a cancel.
    fn cancelled(rx: &mut WorkerRx) -> Vec<u64> {
        let Ok(Ok(m)) = rx.try_recv() else {
            panic!("expected a cancel")
        };
        let Some(coordinator_message::Kind::Cancel(c)) = m.kind else {
            panic!("expected a cancel")
        };
        c.task_ids
    }

    fn solved(task_id: u64) -> v1::TaskResult {
        v1::TaskResult {
            task_id,
            outcome: Some(v1::task_result::Outcome::Solved(v1::TaskSolved {
                moves: 1,
                solution: "r22".into(),
                strategy: "bidir".into(),
                time_us: 1,
            })),
        }
    }

    #[test]
    fn credit_limits_what_a_worker_holds() {
        let (mut s, w, mut wrx) = with_worker(2);
        let (btx, mut brx) = mpsc::channel(10);
        s.admit(tasks(10), btx).unwrap();
        let first = assigned(&mut wrx);
        assert_eq!(first.len(), 2);
        let cache = ResultCache::new(0);
        s.on_result(w, solved(first[0]), &cache).unwrap();
        assert_eq!(assigned(&mut wrx).len(), 1);
        assert!(brx.try_recv().unwrap().is_ok());
    }

    #[test]
    fn a_lost_worker_s_tasks_go_to_another_and_results_arrive_once() {
        let now = Instant::now();
        let mut s = state(now);
        let (atx, mut arx) = mpsc::channel(16);
        let a = s.add_worker("a".into(), 3, atx, now);
        let (btx, mut brx) = mpsc::channel(3);
        s.admit(tasks(3), btx).unwrap();
        let held = assigned(&mut arx);
        assert_eq!(held.len(), 3);
        let cache = ResultCache::new(10);
        s.on_result(a, solved(held[0]), &cache).unwrap();
        s.lose_worker(a, "heartbeats missed", now);
        let (ctx, mut crx) = mpsc::channel(16);
        let c = s.add_worker("c".into(), 3, ctx, now);
        let again = assigned(&mut crx);
        assert_eq!(again.len(), 2);
        for id in &again {
            s.on_result(c, solved(*id), &cache).unwrap();
            // A duplicate report is ignored.
            s.on_result(c, solved(*id), &cache).unwrap();
        }
        let indexes: Vec<u64> = received(&mut brx).iter().map(|r| r.index).collect();
        assert_eq!(indexes, vec![0, 1, 2]);
        assert_eq!(s.snapshot().pending, 0);
        assert_eq!(cache.len(), 3);
    }

    /// Three workers in turn take the one task and are lost with it.
    fn lose_a_worker_per_attempt(s: &mut State, now: Instant) {
        for round in 0..3 {
            let (wtx, mut wrx) = mpsc::channel(16);
            let w = s.add_worker(format!("w{round}"), 1, wtx, now);
            assert_eq!(assigned(&mut wrx).len(), 1);
            s.lose_worker(w, "killed", now);
        }
    }

    #[test]
    fn attempts_are_capped_with_an_error_result() {
        let now = Instant::now();
        let mut s = state(now);
        let (btx, mut brx) = mpsc::channel(1);
        s.admit(tasks(1), btx).unwrap();
        lose_a_worker_per_attempt(&mut s, now);
        let r = brx.try_recv().unwrap().unwrap();
        let Some(puzzle_result::Outcome::Error(e)) = r.outcome else {
            panic!("expected an error result");
        };
        assert!(e.message.contains("3 attempts"), "{}", e.message);
        assert_eq!(s.snapshot().pending, 0);
    }

    #[test]
    fn admission_is_bounded_and_cancel_frees_it() {
        let (mut s, _, mut wrx) = with_worker(1);
        let (btx, _brx) = mpsc::channel(80);
        let batch = s.admit(tasks(80), btx).unwrap();
        let (btx2, _brx2) = mpsc::channel(30);
        let err = s.admit(tasks(30), btx2).unwrap_err();
        assert!(matches!(err, ServerError::Overloaded { .. }), "{err}");
        let running = assigned(&mut wrx);
        s.cancel_batch(batch);
        assert_eq!(s.snapshot().pending, 0);
        assert_eq!(cancelled(&mut wrx), running);
    }

    /// Tasks 0..n where the puzzles at `repeats` are copies of puzzle 0.
    fn tasks_with_repeats(n: usize, repeats: &[usize]) -> Vec<NewTask> {
        let mut t = tasks(n);
        for &i in repeats {
            t[i].puzzle = t[0].puzzle;
        }
        t
    }

    fn received(brx: &mut mpsc::Receiver<BatchEvent>) -> Vec<v1::PuzzleResult> {
        let mut results = Vec::new();
        while let Ok(r) = brx.try_recv() {
            results.push(r.unwrap());
        }
        results.sort_by_key(|r| r.index);
        results
    }

    #[test]
    fn a_puzzle_repeated_in_a_batch_is_solved_once_and_answered_for_each_copy() {
        let (mut s, w, mut wrx) = with_worker(8);
        let (btx, mut brx) = mpsc::channel(6);
        s.admit(tasks_with_repeats(6, &[2, 5]), btx).unwrap();
        let held = assigned(&mut wrx);
        assert_eq!(held.len(), 4, "copies are not dispatched");
        assert_eq!(s.snapshot().pending, 4);
        let cache = ResultCache::new(0);
        for id in held {
            s.on_result(w, solved(id), &cache).unwrap();
        }
        let results = received(&mut brx);
        let indexes: Vec<u64> = results.iter().map(|r| r.index).collect();
        assert_eq!(indexes, vec![0, 1, 2, 3, 4, 5]);
        for r in &results {
            assert_eq!(r.id, format!("p{}", r.index), "each copy keeps its own id");
            let Some(puzzle_result::Outcome::Solved(solved)) = &r.outcome else {
                panic!("expected an answer: {r:?}");
            };
            assert_eq!(solved.cached, [2, 5].contains(&r.index), "{r:?}");
        }
        assert_eq!(s.snapshot().counters.solved, 4);
        assert_eq!(
            s.snapshot().batches,
            0,
            "the batch ended with its last copy"
        );
    }

    #[test]
    fn a_puzzle_pending_for_one_batch_is_not_dispatched_again_for_another() {
        let (mut s, w, mut wrx) = with_worker(8);
        let (atx, mut arx) = mpsc::channel(3);
        let a = s.admit(tasks(3), atx).unwrap();
        let held = assigned(&mut wrx);
        assert_eq!(held.len(), 3);
        // The same puzzles from another client: nothing new to dispatch.
        let (btx, mut brx) = mpsc::channel(3);
        s.admit(tasks(3), btx).unwrap();
        assert!(assigned(&mut wrx).is_empty());
        assert_eq!(s.snapshot().pending, 3);
        // The first client goes away: the tasks carry on for the second,
        // and the worker is told to cancel nothing.
        s.cancel_batch(a);
        assert!(wrx.try_recv().is_err(), "nothing may be cancelled");
        assert_eq!(s.snapshot().pending, 3);
        let cache = ResultCache::new(0);
        for id in held {
            s.on_result(w, solved(id), &cache).unwrap();
        }
        let results = received(&mut brx);
        let indexes: Vec<u64> = results.iter().map(|r| r.index).collect();
        assert_eq!(indexes, vec![0, 1, 2]);
        assert!(arx.try_recv().is_err(), "the cancelled batch gets nothing");
        assert_eq!(s.snapshot().pending, 0);
        assert_eq!(s.snapshot().batches, 0);
        assert_eq!(s.snapshot().counters.solved, 3);
        // Done tasks lead nothing: the same puzzles are dispatched again.
        let (ctx, _crx) = mpsc::channel(3);
        s.admit(tasks(3), ctx).unwrap();
        assert_eq!(assigned(&mut wrx).len(), 3);
    }

    #[test]
    fn a_shared_task_is_cancelled_when_every_batch_waiting_for_it_is() {
        let (mut s, _, mut wrx) = with_worker(8);
        let (atx, _arx) = mpsc::channel(2);
        let a = s.admit(tasks(2), atx).unwrap();
        let held = assigned(&mut wrx);
        let (btx, _brx) = mpsc::channel(2);
        let b = s.admit(tasks(2), btx).unwrap();
        s.cancel_batch(a);
        s.cancel_batch(b);
        assert_eq!(s.snapshot().pending, 0);
        assert_eq!(cancelled(&mut wrx), held);
        assert_eq!(s.snapshot().counters.cancelled, 2);
    }

    #[test]
    fn copies_of_a_puzzle_that_fails_fail_too() {
        let now = Instant::now();
        let mut s = state(now);
        let (btx, mut brx) = mpsc::channel(3);
        s.admit(tasks_with_repeats(3, &[1, 2]), btx).unwrap();
        lose_a_worker_per_attempt(&mut s, now);
        let results = received(&mut brx);
        assert_eq!(results.len(), 3);
        for r in &results {
            let Some(puzzle_result::Outcome::Error(e)) = &r.outcome else {
                panic!("expected an error result: {r:?}");
            };
            assert!(e.message.contains(&format!("{:?}", r.id)), "{}", e.message);
            assert!(e.message.contains("3 attempts"), "{}", e.message);
        }
    }

    #[test]
    fn batches_fail_after_the_grace_period_without_workers() {
        let now = Instant::now();
        let mut s = state(now);
        let (btx, mut brx) = mpsc::channel(2);
        s.admit(tasks(2), btx).unwrap();
        s.fail_if_no_workers(now + Duration::from_millis(10), Duration::from_secs(1));
        assert!(brx.try_recv().is_err());
        s.fail_if_no_workers(now + Duration::from_secs(2), Duration::from_secs(1));
        let status = brx.try_recv().unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }
}
