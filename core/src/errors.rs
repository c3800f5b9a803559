//! Why a worker was lost, an answer refused, and a registration or an
//! admission refused.

use std::fmt;
use std::time::Duration;

use colball_solver::verify::Rejection;

/// Why a worker's session ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// It drained and left holding nothing.
    Left,
    /// Its stream ended or broke.
    Disconnected,
    /// No message for longer than the heartbeat timeout.
    Silent,
    /// It held a task past the task timeout while still heartbeating.
    Stuck,
    /// It answered nothing for many times the expected solve time of what
    /// it held, while other workers answered.
    Unresponsive,
    /// It broke the protocol.
    Protocol(ProtocolError),
    /// An answer of its failed the check.
    Quarantined(Rejected),
    /// The coordinator is shutting down.
    Shutdown,
}

impl LossReason {
    /// Whether a worker ended this way was lost (as opposed to leaving).
    pub fn is_loss(&self) -> bool {
        !matches!(self, LossReason::Left | LossReason::Shutdown)
    }

    /// Whether the tasks it held count an attempt. A quarantined worker's
    /// do not, nor an unresponsive one's (it answered nothing while others
    /// answered): the puzzles did nothing wrong, and a hung worker that
    /// registers again and again must not use up their attempts.
    pub(crate) fn counts_attempt(&self) -> bool {
        !matches!(
            self,
            LossReason::Quarantined(_) | LossReason::Unresponsive | LossReason::Shutdown
        )
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::Left => f.write_str("left"),
            LossReason::Disconnected => f.write_str("stream ended"),
            LossReason::Silent => f.write_str("missed heartbeats"),
            LossReason::Stuck => f.write_str("held a task past the task timeout"),
            LossReason::Unresponsive => f.write_str(
                "answered nothing for many times the expected solve time while other workers answered",
            ),
            LossReason::Protocol(e) => write!(f, "protocol error: {e}"),
            LossReason::Quarantined(r) => write!(f, "quarantined: {r}"),
            LossReason::Shutdown => f.write_str("coordinator shutting down"),
        }
    }
}

/// A message a worker may not send.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("a result for task {0} without an outcome")]
    NoOutcome(u64),
    #[error("a result for task {0}, which it does not hold")]
    NotHeld(u64),
    #[error("a results message with no result")]
    EmptyResults,
}

/// An answer that failed the coordinator's check, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub reason: RejectReason,
    /// The puzzle's id, for people.
    pub puzzle: String,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "puzzle {:?}: {}", self.puzzle, self.reason)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The replay failed.
    Replay(Rejection),
    /// An audit on another worker found a shorter sequence.
    NotOptimal { given: i64, found: i64 },
}

impl RejectReason {
    pub fn label(&self) -> &'static str {
        match self {
            RejectReason::Replay(r) => r.label(),
            RejectReason::NotOptimal { .. } => "not_optimal",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::Replay(r) => r.fmt(f),
            RejectReason::NotOptimal { given, found } => write!(
                f,
                "answered {given} moves where another worker found a valid {found}"
            ),
        }
    }
}

/// Every rejection label, for metrics.
pub const REJECT_LABELS: [&str; 6] = [
    "illegal_move",
    "wrong_count",
    "misses_target",
    "false_unreachable",
    "malformed",
    "not_optimal",
];

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    #[error("register: slots must be between 1 and {limit} (--max-worker-slots), not {slots}")]
    Slots { slots: u32, limit: u32 },
    #[error(
        "worker {name:?} from this address is quarantined for another {}s (--quarantine-secs): {why}",
        .remaining.as_secs()
    )]
    Quarantined {
        name: String,
        remaining: Duration,
        why: String,
    },
}

/// Why a request was not admitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmitError {
    #[error(
        "batch of {batch} puzzles rejected: the coordinator holds {pending} puzzles and admits at most {limit} (--max-pending); retry later or send smaller batches"
    )]
    Overloaded {
        batch: usize,
        pending: usize,
        limit: usize,
    },
    #[error(
        "puzzle index {index} is past {max}, the most a pending task keeps (a batch holds at most 1,000,000 puzzles, a job at most --max-job-puzzles)"
    )]
    IndexTooLarge { index: u64, max: u32 },
}
