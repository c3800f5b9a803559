//! Dispatch: queued tasks (and audits) handed to workers with free credit,
//! in chunks, in the fair queue's order.

use std::num::NonZeroU64;
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

/// The weight of a wire task (of its board's size).
fn weight_of(task: &v1::Task) -> usize {
    Size::new(task.rows as usize, task.cols as usize).map_or(1, weight)
}
