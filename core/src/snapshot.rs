//! Counters and views of the state, for metrics, logs and the dashboard.

use crate::errors::{REJECT_LABELS, RejectReason};
use crate::policy::Depths;

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
    pub worker_list: Vec<WorkerView>,
}
