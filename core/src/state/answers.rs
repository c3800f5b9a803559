//! Workers' results: each answer replayed before it is believed, then
//! delivered to the task's request and its followers, and cached.

use std::time::Instant;

use colball_proto::egress;
use colball_proto::v1::{self, task_result};
use colball_proto::work::{check_path, method_from_wire};
use colball_solver::verify::{MAX_PATH_MOVES, Rejection, check_indices};
use colball_solver::{MoveTable, Puzzle};
use ecow::EcoString;

use super::{Holds, State};
use crate::answer::VerifiedAnswer;
use crate::effect::{Effect, Effects};
use crate::errors::{LossReason, ProtocolError, RejectReason, Rejected};

impl State {
    /// Handles one result from a worker.
    #[cfg(test)]
    pub(super) fn result(&mut self, worker: u64, result: v1::TaskResult, now: Instant) -> Effects {
        self.results(worker, vec![result], now)
    }

    /// Handles one message of results from a worker, in order, then hands
    /// out the credit they freed in one dispatch. An empty message, like a
    /// result for a task the worker does not hold, is a protocol error.
    pub(super) fn results(
        &mut self,
        worker: u64,
        results: Vec<v1::TaskResult>,
        now: Instant,
    ) -> Effects {
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
            w.last_answer = now;
            self.last_answer = now;
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
                Holds::Task => {
                    self.task_result(worker, task_id, outcome, held.since, now, &mut effects)
                }
                Holds::Backup => {
                    self.backup_result(worker, task_id, outcome, held.since, now, &mut effects)
                }
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
    /// each in turn as each result is handled (measured: 10% of the
    /// coordinator's CPU a puzzle). Nothing is changed.
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
        since: Instant,
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
            task_result::Outcome::Solved(s) => match check_solved(&task.puzzle, s) {
                Ok(s) => self.solved(worker, task_id, s, since, now, effects),
                Err(rejection) => {
                    let rejected = Rejected {
                        reason: RejectReason::Replay(rejection),
                        puzzle: task.id.to_string(),
                    };
                    self.reject(worker, Some(task_id), rejected, now, effects);
                }
            },
        }
    }

    /// A verified answer of the task, from `worker`, which held it since
    /// `since`: delivered to its request and followers, cached, sampled
    /// for an audit, and timed.
    pub(super) fn solved(
        &mut self,
        worker: u64,
        task_id: u64,
        s: Checked,
        since: Instant,
        now: Instant,
        effects: &mut Effects,
    ) {
        let Some(task) = self.take(task_id, effects) else {
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
        self.budget.answered(now);
        self.solve_times
            .record(task.puzzle.size(), now.saturating_duration_since(since));
        if self.limits.cache_results {
            effects.push(Effect::Cache {
                puzzle: task.puzzle,
                answer: VerifiedAnswer {
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

    /// A worker's answer failed the check: the task goes back to the queue
    /// (its attempt not counted) and the worker is quarantined.
    pub(super) fn reject(
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
}

/// A worker's answer after its replay: the moves in the client API's
/// notation and the method's name.
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) moves: i64,
    pub(super) solution: EcoString,
    pub(super) strategy: &'static str,
    pub(super) time_us: u64,
}

/// Reads and replays a worker's answer (protocol 2: move indices and a
/// method number); anything that is not a shortest-looking valid answer is
/// a [`Rejection`].
pub(super) fn check_solved(puzzle: &Puzzle, s: v1::TaskSolved) -> Result<Checked, Rejection> {
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
