//! Workers: registration, heartbeats, draining, losses, the housekeeping
//! tick and shutdown.

use std::net::IpAddr;
use std::time::Instant;

use colball_proto::v1::{self, cluster_event::Kind as EventKind};
use foldhash::{HashMap, HashMapExt};

use super::{Holds, State, TaskState, Worker, WorkerKey};
use crate::effect::{Effect, Effects, RequestFailure};
use crate::errors::{LossReason, RegisterError};
use crate::policy::FairQueue;

impl State {
    /// Registers worker `id` (a number the driver chose, unused so far).
    pub(super) fn register(
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
                last_answer: now,
                slow: false,
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
    pub(super) fn heartbeat(
        &mut self,
        worker: u64,
        cache: Option<v1::WorkerCacheStats>,
        now: Instant,
    ) {
        if let Some(w) = self.workers.get_mut(&worker) {
            w.last_seen = now;
            if let Some(cache) = cache {
                w.cache = cache;
            }
        }
    }

    /// The worker takes no more work; it finishes what it holds, and the
    /// coordinator closes its session once it holds nothing.
    pub(super) fn drain(&mut self, worker: u64, now: Instant) -> Effects {
        let mut effects = Vec::new();
        if let Some(w) = self.workers.get_mut(&worker) {
            w.draining = true;
            w.last_seen = now;
        }
        self.release_if_drained(worker, now, &mut effects);
        effects
    }

    pub(super) fn release_if_drained(&mut self, worker: u64, now: Instant, effects: &mut Effects) {
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
    pub(super) fn worker_lost(&mut self, worker: u64, reason: LossReason, now: Instant) -> Effects {
        let mut effects = Vec::new();
        self.lose(worker, reason, now, &mut effects);
        effects
    }

    pub(super) fn lose(
        &mut self,
        worker: u64,
        reason: LossReason,
        now: Instant,
        effects: &mut Effects,
    ) {
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
                Holds::Backup => {
                    if self.backups.get(&id).map(|w| w.get()) == Some(worker) {
                        self.backups.remove(&id);
                        self.counters.backups_wasted += 1;
                    }
                }
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
    pub(super) fn requeue(&mut self, id: u64, count: bool, effects: &mut Effects) -> bool {
        let max = self.limits.max_attempts;
        let Some(task) = self.tasks.get_mut(id) else {
            return false;
        };
        let TaskState::Assigned { .. } = task.state else {
            return false;
        };
        if self.promote_backup(id) {
            self.counters.redispatched += 1;
            return true;
        }
        let Some(task) = self.tasks.get_mut(id) else {
            return false;
        };
        if !count {
            task.attempts = task.attempts.saturating_sub(1);
        }
        task.state = TaskState::Queued;
        if u32::from(task.attempts) >= max {
            let attempts = task.attempts;
            if let Some(task) = self.take(id, effects) {
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

    /// Housekeeping: silent and stuck workers are lost, requests without
    /// any worker past the grace period fail, quarantines expire, and the
    /// queue depths are published when they changed.
    pub(super) fn tick(&mut self, now: Instant) -> Effects {
        let mut effects = Vec::new();
        let silent = self.limits.silence_timeout;
        if now.saturating_duration_since(self.last_tick) > silent {
            // The coordinator itself was not running (stopped, or starved)
            // for longer than a worker may be silent: what its workers sent
            // meanwhile is still unread, so none is judged silent by it.
            for w in self.workers.values_mut() {
                w.last_seen = w.last_seen.max(now);
            }
        }
        self.last_tick = now;
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
        // Workers are judged by the expected times the backups below are
        // launched by: a worker whose every task is due for a backup is slow.
        self.solve_times
            .refresh(self.limits.speculation.min_samples);
        self.judge_workers(now, &mut effects);
        self.fail_if_no_workers(now, &mut effects);
        if self.wake.is_some_and(|w| w <= now) {
            self.wake = None;
        }
        self.speculate(now, &mut effects);
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

    /// Ends everything: the coordinator is shutting down.
    pub(super) fn shutdown(&mut self) -> Effects {
        let mut effects = Vec::new();
        let requests: Vec<u64> = self.requests.keys().copied().collect();
        for id in requests {
            effects.push(Effect::Fail {
                request: id,
                failure: RequestFailure::ShuttingDown,
            });
        }
        self.requests.clear();
        self.traces.clear();
        self.tasks.clear();
        self.queue = FairQueue::new();
        self.audits.clear();
        self.audit_queue.clear();
        self.backups.clear();
        for (worker, _) in std::mem::take(&mut self.workers) {
            effects.push(Effect::Close {
                worker,
                reason: LossReason::Shutdown,
            });
        }
        effects
    }
}

/// The name results and events show for worker number `id` that
/// registered as `name`.
pub fn shown_name(name: &str, id: u64) -> String {
    format!("{name}#{id}")
}
