//! The limits and policies the state applies.

use std::time::Duration;

use crate::policy::Credit;

/// The most `max_attempts` can be (a task counts its attempts in 16 bits).
pub const MAX_ATTEMPTS: u32 = u16::MAX as u32;

/// Limits and policies the state applies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most results admitted and not yet read by their clients.
    pub max_pending: usize,
    /// Dispatches of one puzzle before it gets an error result (1 to
    /// [`MAX_ATTEMPTS`]).
    pub max_attempts: u32,
    pub credit: Credit,
    /// Most tasks in one assignment message.
    pub max_chunk: usize,
    /// Results a request may hold unread before its tasks wait.
    pub max_unread: usize,
    /// Most slots a worker may register.
    pub max_worker_slots: u32,
    /// Longest a worker may hold a task.
    pub task_timeout: Duration,
    /// Silence after which a worker is lost.
    pub silence_timeout: Duration,
    /// How long a request waits without any worker before it fails.
    pub worker_grace: Duration,
    /// How long a quarantined worker may not register again.
    pub quarantine: Duration,
    /// Fraction of answers re-solved on another worker (0: none).
    pub audit_rate: f64,
    /// Most audits waiting for a worker.
    pub max_audits: usize,
    /// Whether the driver keeps answers in a result cache (else the state
    /// builds no [`Effect::Cache`]).
    pub cache_results: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_pending: 1_000_000,
            max_attempts: 3,
            credit: Credit::new(2),
            max_chunk: 1024,
            max_unread: 16_384,
            max_worker_slots: 256,
            task_timeout: Duration::from_secs(30),
            silence_timeout: Duration::from_secs(3),
            worker_grace: Duration::from_secs(10),
            quarantine: Duration::from_secs(600),
            audit_rate: 0.01,
            max_audits: 10_000,
            cache_results: true,
        }
    }
}
