//! Audits: a sample of verified answers solved again on another worker; a
//! worker whose count an audit beats is quarantined.

use std::time::Instant;

use colball_proto::v1::task_result;

use super::answers::check_solved;
use super::{Audit, State, Task};
use crate::answer::VerifiedAnswer;
use crate::effect::{Effect, Effects};
use crate::errors::{RejectReason, Rejected};

impl State {
    pub(super) fn maybe_audit(&mut self, worker: u64, name: &str, task: &Task, moves: i64) {
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

    pub(super) fn audit_result(
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
                    answer: VerifiedAnswer {
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

    fn random_unit(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}
