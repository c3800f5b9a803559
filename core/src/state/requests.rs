//! Requests: admission, how far their clients have read, ending and
//! failing them, and delivering their results.

use std::collections::BTreeMap;
use std::time::Instant;

use colball_proto::egress;
use foldhash::HashSet;
use thin_vec::ThinVec;

use super::{Follower, Holds, Phase, Request, State, Task, TaskState};
use crate::effect::{Effect, Effects, NoWorkers, RequestFailure};
use crate::errors::AdmitError;
use crate::input::{NewTask, RequestSpec};
use crate::policy::target_shares;

impl State {
    /// [`Self::admit_known`] with nothing known.
    #[cfg(test)]
    pub(super) fn admit(
        &mut self,
        id: u64,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
        now: Instant,
    ) -> Result<Effects, AdmitError> {
        self.admit_known(id, spec, tasks, now, |_| None)
    }

    /// [`Input::Admit`](crate::input::Input::Admit).
    pub(super) fn admit_known(
        &mut self,
        id: u64,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
        now: Instant,
        mut known: impl FnMut(&NewTask) -> Option<egress::PuzzleResult>,
    ) -> Result<Effects, AdmitError> {
        // A task keeps its index in 32 bits: no request comes near (a
        // batch holds at most 1,000,000, a job at most `u32::MAX`), and
        // one that did is refused whole.
        if let Some(index) = tasks
            .iter()
            .map(|t| t.index)
            .find(|&i| i > u64::from(u32::MAX))
        {
            return Err(AdmitError::IndexTooLarge {
                index,
                max: u32::MAX,
            });
        }
        let held = self.held();
        if held + spec.total > self.limits.max_pending {
            return Err(AdmitError::Overloaded {
                batch: spec.total,
                pending: held,
                limit: self.limits.max_pending,
            });
        }
        let shares = target_shares(tasks.iter().map(|t| t.puzzle.target()), self.workers.len());
        self.queue.open(id, &spec.client, spec.priority);
        self.queue.reserve(id, tasks.len());
        let total = spec.total.max(tasks.len());
        let request = Request {
            total,
            delivered: total - tasks.len(),
            received: 0,
            sent: 0,
            phase: if tasks.is_empty() {
                Phase::Answered
            } else {
                Phase::Solving { held: false }
            },
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
        self.requests.insert(id, request);
        if let Some(trace) = spec.trace {
            self.traces.insert(id, trace);
        }
        let mut effects = Vec::new();
        for result in late {
            self.deliver(id, result, &mut effects);
        }
        self.update_hold(id);
        self.dispatch(now, None, &mut effects);
        Ok(effects)
    }

    /// [`Input::Ack`](crate::input::Input::Ack).
    pub(super) fn ack(
        &mut self,
        request: u64,
        received: usize,
        sent: usize,
        now: Instant,
    ) -> Effects {
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
    pub(super) fn update_hold(&mut self, request: u64) -> bool {
        let Some(r) = self.requests.get_mut(&request) else {
            return false;
        };
        let Phase::Solving { held } = &mut r.phase else {
            return false;
        };
        let hold = r.delivered - r.received >= self.limits.max_unread;
        if hold == *held {
            return false;
        }
        *held = hold;
        self.queue.hold(request, hold);
        !hold
    }

    /// Ends a request (its stream finished, or its client went away): its
    /// queued tasks are dropped and its running ones cancelled on their
    /// workers, except tasks another request follows, which that request
    /// takes over (a queued one at the head of the queue, dispatched at
    /// once if a worker has credit). The workers' credit for cancelled
    /// tasks comes back when they report.
    pub(super) fn end_request(&mut self, request: u64, now: Instant) -> Effects {
        let mut effects = Vec::new();
        let Some(r) = self.requests.remove(&request) else {
            return effects;
        };
        self.traces.remove(&request);
        let (queued, running) = self.close_tasks(request, r.solving());
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
                .retain(|f| requests.get(&f.request).is_some_and(Request::solving));
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
            let Some(task) = self.take(id, &mut effects) else {
                continue;
            };
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

    /// When no worker has been registered for longer than the grace
    /// period, fails every request still waiting for results.
    pub(super) fn fail_if_no_workers(&mut self, now: Instant, effects: &mut Effects) {
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
            .filter(|(_, r)| r.solving())
            .map(|(&id, _)| id)
            .collect();
        let ever = self.ever_had_worker;
        for id in waiting {
            self.fail_request(
                id,
                RequestFailure::NoWorkers(NoWorkers { waited, ever }),
                effects,
            );
        }
    }

    /// Drops a request's unanswered work and ends its stream with
    /// `failure`; the request itself stays until its stream ends.
    fn fail_request(&mut self, id: u64, failure: RequestFailure, effects: &mut Effects) {
        // Only a request still solving (a follower's may have failed with
        // its leader's already).
        let Some(r) = self.requests.get_mut(&id).filter(|r| r.solving()) else {
            return;
        };
        r.phase = Phase::Failed;
        let (queued, running) = self.close_tasks(id, true);
        let mut also = Vec::new();
        for t in queued.into_iter().chain(running) {
            if let Some(task) = self.take(t, effects) {
                if let TaskState::Assigned { worker } = task.state {
                    self.withdraw(worker.get(), t, effects);
                }
                // Followers in other requests lose their leader: their
                // requests fail with it, for the same reason (no worker,
                // or shutting down), rather than take an error result for
                // the puzzle: a job's window retries a failed request.
                also.extend(task.followers.iter().map(|f| f.request));
            }
        }
        effects.push(Effect::Fail {
            request: id,
            failure: failure.clone(),
        });
        also.sort_unstable();
        also.dedup();
        for other in also {
            self.fail_request(other, failure.clone(), effects);
        }
    }

    /// Sends an error result for the task and for each of its followers;
    /// `message` is given the id of each.
    pub(super) fn fail(
        &mut self,
        task: Task,
        effects: &mut Effects,
        message: impl Fn(&str) -> String,
    ) {
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
    pub(super) fn close_tasks(&mut self, request: u64, leads: bool) -> (Vec<u64>, Vec<u64>) {
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

    /// Removes a task that is done (or no longer wanted), and cancels its
    /// backup copy if it has one.
    pub(super) fn take(&mut self, id: u64, effects: &mut Effects) -> Option<Task> {
        self.drop_backup(id, effects);
        self.tasks.remove(id)
    }

    /// Tells `worker` its copy of `task` is no longer wanted (the slot stays
    /// taken until it reports, see [`Self::release`]).
    pub(super) fn withdraw(&mut self, worker: u64, task: u64, effects: &mut Effects) {
        self.release(worker, task);
        effects.push(Effect::Cancel {
            worker,
            tasks: vec![task],
        });
    }

    /// Marks a task a worker holds as no longer wanted: its slot stays
    /// taken (with its original start, for the task timeout) until the
    /// worker reports it.
    pub(super) fn release(&mut self, worker: u64, task: u64) {
        if let Some(held) = self
            .workers
            .get_mut(&worker)
            .and_then(|w| w.in_flight.get_mut(&task))
        {
            held.holds = Holds::Released;
        }
    }

    /// Gives a request one result.
    pub(super) fn deliver(
        &mut self,
        request: u64,
        result: egress::PuzzleResult,
        effects: &mut Effects,
    ) {
        let Some(r) = self.requests.get_mut(&request) else {
            return;
        };
        if !r.solving() {
            return;
        }
        r.delivered += 1;
        if r.delivered == r.total {
            r.phase = Phase::Answered;
        }
        effects.push(Effect::Deliver { request, result });
        self.update_hold(request);
    }
}
