//! Dispatch: queued tasks (and audits) handed to workers with free credit,
//! in chunks, in the fair queue's order.

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Instant;

use colball_proto::v1;
use colball_proto::work::task_to_wire;
use colball_solver::Size;

use super::{Held, Holds, State, TaskState};
use crate::effect::{Effect, Effects};
use crate::policy::weight;

impl State {
    /// Hands queued tasks (and audits) to workers with free credit (to
    /// `only`, when only its credit changed), in chunks, in the fair
    /// queue's order.
    pub(super) fn dispatch(&mut self, now: Instant, only: Option<u64>, effects: &mut Effects) {
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
            let mut chunk = Assignment::default();
            let mut holds = Vec::new();
            while load < credit {
                let Some((id, task, kind)) = self.next_for(wid) else {
                    break;
                };
                let weight = weight_of(&task);
                load += weight;
                let trace = self.trace_of(id, kind);
                chunk.push(task, trace);
                holds.push((id, kind, weight));
                if chunk.tasks.len() == self.limits.max_chunk {
                    effects.push(std::mem::take(&mut chunk).to(wid));
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
            if !chunk.tasks.is_empty() {
                effects.push(chunk.to(wid));
            }
        }
        self.speculate(now, effects);
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
}

impl State {
    /// The trace context task `id`'s work belongs under: its request's
    /// (an audit has none). Only looked up when some request has one.
    pub(super) fn trace_of(&self, id: u64, holds: Holds) -> Option<&Arc<str>> {
        if self.traces.is_empty() || holds == Holds::Audit {
            return None;
        }
        let request = self.tasks.get(id)?.request;
        self.traces.get(&request)
    }
}

/// Tasks for one worker, being gathered, and the trace contexts they name.
#[derive(Debug, Default)]
pub(super) struct Assignment {
    tasks: Vec<v1::Task>,
    traces: Vec<Arc<str>>,
}

impl Assignment {
    /// Adds `task`, naming `trace` (each context listed once; consecutive
    /// tasks mostly share one, so the search starts from the last).
    pub(super) fn push(&mut self, mut task: v1::Task, trace: Option<&Arc<str>>) {
        if let Some(trace) = trace {
            let at = match self.traces.iter().rposition(|t| Arc::ptr_eq(t, trace)) {
                Some(at) => at,
                None => {
                    self.traces.push(trace.clone());
                    self.traces.len() - 1
                }
            };
            task.trace = u32::try_from(at + 1).unwrap_or(0);
        }
        self.tasks.push(task);
    }

    /// The effect that sends it to worker `worker`.
    pub(super) fn to(self, worker: u64) -> Effect {
        Effect::Assign {
            worker,
            tasks: self.tasks,
            traces: self.traces,
        }
    }
}

/// The weight of a wire task (of its board's size).
fn weight_of(task: &v1::Task) -> usize {
    Size::new(task.rows as usize, task.cols as usize).map_or(1, weight)
}
