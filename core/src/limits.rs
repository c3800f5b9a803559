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
    /// Backup copies of overdue tasks, and workers found slow or stuck.
    pub speculation: Speculation,
}

/// When a task held far longer than its size's expected time (learned
/// from verified answers, see [`crate::solve_times`]) is started a second
/// time on another worker, and when a worker counts as slow or stuck.
/// Sizes not yet learned are left to the task timeout.
#[derive(Clone, Debug)]
pub struct Speculation {
    /// A task is backed up once held this many times its size's expected
    /// time (0: never)...
    pub after: f64,
    /// ... and at least this long.
    pub min_age: Duration,
    /// Backups started in a minute stay under this fraction of the
    /// answers verified in it...
    pub budget: f64,
    /// ... or this many, whichever is more.
    pub min_budget: u32,
    /// Answers of a size needed before its expected time is believed.
    pub min_samples: usize,
    /// A worker is slow while every task it holds is past this many times
    /// its expected time.
    pub slow_after: f64,
    /// A worker that answers nothing for this many times the expected
    /// time of what it holds (and at least `stuck_min`), while others
    /// answer, is stuck: it is lost and its tasks go elsewhere.
    pub stuck_after: f64,
    pub stuck_min: Duration,
}

impl Default for Speculation {
    fn default() -> Speculation {
        Speculation {
            after: 4.0,
            min_age: Duration::from_millis(100),
            budget: 0.05,
            min_budget: 10,
            min_samples: crate::solve_times::MIN_SAMPLES,
            slow_after: 4.0,
            stuck_after: 50.0,
            stuck_min: Duration::from_secs(2),
        }
    }
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
            speculation: Speculation::default(),
        }
    }
}
