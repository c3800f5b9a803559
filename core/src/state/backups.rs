//! Stragglers: backup copies of overdue tasks, and workers found slow or
//! stuck, judged against each size's expected time ([`SolveTimes`]).
//!
//! [`SolveTimes`]: crate::solve_times::SolveTimes

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

use colball_proto::v1::{self, cluster_event::Kind as EventKind, task_result};
use colball_proto::work::task_to_wire;

use super::answers::check_solved;
use super::dispatch::Assignment;
use super::{Held, Holds, State, TaskState};
use crate::effect::{Effect, Effects};
use crate::errors::{LossReason, RejectReason, Rejected};
use crate::policy::weight;

/// How often overdue tasks are looked for, at most.
const SCAN_EVERY: Duration = Duration::from_millis(10);

/// The budget's window, in buckets of [`BUCKET`].
const BUCKETS: usize = 6;
const BUCKET: Duration = Duration::from_secs(10);

/// Answers verified and backups started over the last minute, in buckets
/// of ten seconds.
#[derive(Debug)]
pub(super) struct Budget {
    /// (answers, backups) per bucket; `current` is the one being filled.
    buckets: [(u64, u64); BUCKETS],
    current: usize,
    since: Instant,
}

impl Budget {
    pub(super) fn new(now: Instant) -> Budget {
        Budget {
            buckets: [(0, 0); BUCKETS],
            current: 0,
            since: now,
        }
    }

    fn roll(&mut self, now: Instant) {
        let mut turns = 0;
        while now.saturating_duration_since(self.since) >= BUCKET && turns < BUCKETS {
            self.current = (self.current + 1) % BUCKETS;
            self.buckets[self.current] = (0, 0);
            self.since += BUCKET;
            turns += 1;
        }
        if turns == BUCKETS {
            self.since = now;
        }
    }

    pub(super) fn answered(&mut self, now: Instant) {
        self.roll(now);
        self.buckets[self.current].0 += 1;
    }

    /// Whether one more backup stays within `fraction` of the minute's
    /// answers (or `floor` backups).
    fn allows(&mut self, now: Instant, fraction: f64, floor: u32) -> bool {
        self.roll(now);
        let (answers, backups) = self
            .buckets
            .iter()
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        let allowed = (answers as f64 * fraction).max(f64::from(floor));
        (backups as f64) < allowed
    }

    fn spent(&mut self, now: Instant) {
        self.roll(now);
        self.buckets[self.current].1 += 1;
    }
}

impl State {
    /// With no eligible work queued: starts a backup of the most overdue
    /// tasks on workers with free credit, within the budget. Looks at most
    /// every [`SCAN_EVERY`].
    ///
    /// Without an answer or a tick to look again, a task becoming overdue
    /// would wait for the next regular tick: so a look that finds tasks
    /// not yet overdue (or is put off) asks for a wake when one will be.
    pub(super) fn speculate(&mut self, now: Instant, effects: &mut Effects) {
        let sp = &self.limits.speculation;
        if sp.after <= 0.0 || self.queue.has_eligible() {
            return;
        }
        let free = |w: &super::Worker| !w.draining && !w.slow && w.load < w.credit;
        if !self.workers.values().any(free) {
            return;
        }
        if now < self.next_speculation {
            self.wake_at(self.next_speculation, effects);
            return;
        }
        self.next_speculation = now + SCAN_EVERY;
        let (after, min_age) = (sp.after, sp.min_age);
        let mut overdue: Vec<(Duration, u64, u64)> = Vec::new();
        let mut soonest: Option<Instant> = None;
        for (&wid, w) in &self.workers {
            for (&id, held) in &w.in_flight {
                if held.holds != Holds::Task || self.backups.contains_key(&id) {
                    continue;
                }
                let Some(task) = self.tasks.get(id) else {
                    continue;
                };
                let Some(expected) = self.solve_times.expected(task.puzzle.size()) else {
                    continue;
                };
                let age = now.saturating_duration_since(held.since);
                let limit = expected.mul_f64(after).max(min_age);
                if age > limit {
                    overdue.push((age, id, wid));
                } else {
                    let due = held.since + limit + Duration::from_millis(1);
                    soonest = Some(soonest.map_or(due, |s| s.min(due)));
                }
            }
        }
        if let Some(at) = soonest {
            self.wake_at(at, effects);
        }
        // The longest overdue first; ties in a fixed order.
        overdue.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, id, primary) in overdue {
            let sp = &self.limits.speculation;
            if !self.budget.allows(now, sp.budget, sp.min_budget) {
                break;
            }
            // The worker with the most free credit, other than the first.
            let Some((&to, _)) = self
                .workers
                .iter()
                .filter(|(wid, w)| **wid != primary && free(w))
                .max_by_key(|(wid, w)| (w.credit - w.load, std::cmp::Reverse(**wid)))
            else {
                continue;
            };
            let (Some(task), Some(worker)) = (self.tasks.get(id), NonZeroU64::new(to)) else {
                continue;
            };
            let wire = task_to_wire(id, &task.puzzle, u64::from(task.target_share));
            let weight = weight(task.puzzle.size());
            if let Some(w) = self.workers.get_mut(&to) {
                w.hold(
                    id,
                    Held {
                        holds: Holds::Backup,
                        since: now,
                        weight,
                    },
                );
            }
            self.backups.insert(id, worker);
            self.budget.spent(now);
            self.counters.backups_started += 1;
            tracing::debug!(task = id, from = primary, to, "backup started");
            let mut assignment = Assignment::default();
            assignment.push(wire, self.trace_of(id, Holds::Backup));
            effects.push(assignment.to(to));
        }
    }

    /// Asks the driver for a tick at `at`, unless one is due sooner.
    fn wake_at(&mut self, at: Instant, effects: &mut Effects) {
        if self.wake.is_some_and(|w| w <= at) {
            return;
        }
        self.wake = Some(at);
        effects.push(Effect::Wake { at });
    }

    /// A backup copy's result. The first verified answer wins: the
    /// first copy is cancelled, and the answer delivered as the task's. A
    /// backup given back or failed just ends; a wrong answer quarantines
    /// its worker, and the first copy runs on.
    pub(super) fn backup_result(
        &mut self,
        worker: u64,
        task_id: u64,
        outcome: task_result::Outcome,
        since: Instant,
        now: Instant,
        effects: &mut Effects,
    ) {
        let Some(task) = self.tasks.get(task_id) else {
            return;
        };
        let TaskState::Assigned { worker: primary } = task.state else {
            return;
        };
        let task_result::Outcome::Solved(s) = outcome else {
            self.backups.remove(&task_id);
            self.counters.backups_wasted += 1;
            return;
        };
        match check_solved(&task.puzzle, s) {
            Err(rejection) => {
                let rejected = Rejected {
                    reason: RejectReason::Replay(rejection),
                    puzzle: task.id.to_string(),
                };
                self.backups.remove(&task_id);
                self.counters.backups_wasted += 1;
                self.reject(worker, None, rejected, now, effects);
            }
            Ok(checked) => {
                self.backups.remove(&task_id);
                self.counters.backups_won += 1;
                self.withdraw(primary.get(), task_id, effects);
                self.solved(worker, task_id, checked, since, now, effects);
            }
        }
    }

    /// The task is done (or no longer wanted): its backup copy, if any,
    /// is cancelled ([`State::take`] calls this).
    pub(super) fn drop_backup(&mut self, task: u64, effects: &mut Effects) {
        if let Some(worker) = self.backups.remove(&task) {
            self.counters.backups_wasted += 1;
            self.withdraw(worker.get(), task, effects);
        }
    }

    /// The first copy of the task ended without an answer: its backup, if
    /// any, becomes the task's copy. Returns whether there was one.
    pub(super) fn promote_backup(&mut self, task: u64) -> bool {
        let Some(worker) = self.backups.remove(&task) else {
            return false;
        };
        if let Some(t) = self.tasks.get_mut(task) {
            t.state = TaskState::Assigned { worker };
        }
        if let Some(held) = self
            .workers
            .get_mut(&worker.get())
            .and_then(|w| w.in_flight.get_mut(&task))
        {
            held.holds = Holds::Task;
        }
        true
    }

    /// Housekeeping for stragglers: marks workers slow (or no longer so),
    /// and loses those stuck.
    pub(super) fn judge_workers(&mut self, now: Instant, effects: &mut Effects) {
        let sp = &self.limits.speculation;
        let mut stuck = Vec::new();
        let mut marked = Vec::new();
        for (&wid, w) in &mut self.workers {
            // Each held copy's age and its size's expected time; none if
            // a size is not known yet.
            let mut all_known = true;
            let mut all_late = true;
            let mut oldest: Option<Instant> = None;
            let mut longest = Duration::ZERO;
            let mut any = false;
            for (&id, held) in &w.in_flight {
                if !matches!(held.holds, Holds::Task | Holds::Backup) {
                    continue;
                }
                any = true;
                let expected = self
                    .tasks
                    .get(id)
                    .and_then(|t| self.solve_times.expected(t.puzzle.size()));
                let Some(expected) = expected else {
                    all_known = false;
                    continue;
                };
                longest = longest.max(expected);
                oldest = Some(oldest.map_or(held.since, |o| o.min(held.since)));
                let age = now.saturating_duration_since(held.since);
                all_late &= age > expected.mul_f64(sp.slow_after).max(sp.min_age);
            }
            let slow = any && all_known && all_late;
            if slow && !w.slow {
                marked.push((wid, w.name.to_string(), w.in_flight.len()));
            }
            w.slow = slow;
            let Some(oldest) = oldest.filter(|_| any && all_known) else {
                continue;
            };
            // Quiet since its last answer, or since it took what it holds.
            let quiet = w.last_answer.max(oldest);
            let limit = longest.mul_f64(sp.stuck_after).max(sp.stuck_min);
            if now.saturating_duration_since(quiet) > limit && self.last_answer > quiet {
                stuck.push(wid);
            }
        }
        for (worker, name, held) in marked {
            self.counters.workers_slow += 1;
            tracing::warn!(worker = %name, tasks = held, "worker slow: every task it holds is far past its expected time");
            effects.push(Effect::Publish(EventKind::WorkerSlow(v1::WorkerSlow {
                worker,
                name,
                tasks: held as u64,
            })));
        }
        for worker in stuck {
            self.counters.workers_stuck += 1;
            self.lose(worker, LossReason::Unresponsive, now, effects);
        }
    }
}
