//! The invariants of the state's books, checked after every step of the
//! property test (`tests::operations`).

use foldhash::HashSet;

use colball_solver::Size;

use super::{Holds, Phase, State, TaskState};
use crate::policy::weight;

impl State {
    /// Checks the invariants in the module documentation; the property
    /// test calls it after every step. Panics with what is wrong.
    pub(super) fn check_invariants(&self) {
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
        for request in self.traces.keys() {
            assert!(
                self.requests.contains_key(request),
                "the trace of ended request {request} kept"
            );
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
                    Holds::Backup => assert_eq!(
                        self.backups.get(id).map(|w| w.get()),
                        Some(*wid),
                        "worker {wid} holds a backup of task {id} not recorded"
                    ),
                    Holds::Audit => {
                        assert_eq!(self.audits.get(id).and_then(|a| a.worker), Some(*wid))
                    }
                    Holds::Released => {
                        assert!(!self.tasks.get(*id).is_some_and(
                            |t| matches!(t.state, TaskState::Assigned { worker } if worker.get() == *wid)
                        ));
                        assert_ne!(self.backups.get(id).map(|w| w.get()), Some(*wid));
                    }
                }
            }
        }
        // A backup is of an assigned task, on another worker, which holds
        // it as one.
        for (id, backup) in &self.backups {
            let task = self
                .tasks
                .get(*id)
                .unwrap_or_else(|| panic!("backup of unknown task {id}"));
            let TaskState::Assigned { worker } = task.state else {
                panic!("backup of queued task {id}");
            };
            assert_ne!(worker, *backup, "task {id} backed up on its own worker");
            assert_eq!(
                self.workers
                    .get(&backup.get())
                    .and_then(|w| w.in_flight.get(id))
                    .map(|h| h.holds),
                Some(Holds::Backup),
                "backup of task {id}"
            );
        }
        for (rid, r) in &self.requests {
            assert!(
                r.sent <= r.received && r.received <= r.delivered && r.delivered <= r.total,
                "request {rid}"
            );
            match r.phase {
                Phase::Solving { .. } => assert!(r.delivered < r.total, "request {rid}"),
                Phase::Answered => assert_eq!(r.delivered, r.total, "request {rid}"),
                Phase::Failed => {}
            }
        }
        assert!(self.held() <= self.limits.max_pending);
    }
}
