//! Counters and views of the state, for metrics, logs and the dashboard.

use crate::errors::{REJECT_LABELS, RejectReason};
use crate::policy::Depths;
use crate::solve_times::SolveTime;

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
    /// Backup copies started; of them, those whose answer won, and those
    /// cancelled or lost.
    pub backups_started: u64,
    pub backups_won: u64,
    pub backups_wasted: u64,
    /// Times a worker was marked slow; workers lost as stuck before the
    /// task timeout.
    pub workers_slow: u64,
    pub workers_stuck: u64,
}

impl Counters {
    /// Counts one refused answer under its reason's label.
    pub(crate) fn reject(&mut self, reason: &RejectReason) {
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
    /// Every task it holds is far past its expected time.
    pub slow: bool,
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
    /// Each board size's expected solve time, once learned.
    pub solve_times: Vec<SolveTime>,
    pub worker_list: Vec<WorkerView>,
}
