//! What the state asks its driver to do, and why a request ended early.

use std::sync::Arc;
use std::time::{Duration, Instant};

use colball_proto::egress;
use colball_proto::v1::{self, cluster_event::Kind as EventKind};
use colball_solver::Puzzle;

use crate::answer::VerifiedAnswer;
use crate::errors::LossReason;

/// What a request that ends for the coordinator's shutdown is told.
pub const SHUTTING_DOWN: &str = "the coordinator is shutting down";

/// Why a request ended before all its results.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RequestFailure {
    /// No worker for longer than the grace period.
    #[error(transparent)]
    NoWorkers(#[from] NoWorkers),
    #[error("{}", SHUTTING_DOWN)]
    ShuttingDown,
}

/// No worker has been connected for `waited`; `ever` says whether one
/// ever joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{} (waited {}s); start one with `colball-server worker --coordinator URL`",
    if self.ever { "no worker is connected: every worker that joined has left or was lost" } else { "no worker has joined the cluster" },
    tenths(self.waited)
)]
pub struct NoWorkers {
    pub waited: Duration,
    pub ever: bool,
}

/// Seconds to a tenth, without a trailing `.0`: `1`, `10.2`.
fn tenths(d: Duration) -> String {
    let text = format!("{:.1}", d.as_secs_f64());
    text.strip_suffix(".0").map_or(text.clone(), str::to_string)
}

/// Something for the driver to do.
#[derive(Debug)]
pub enum Effect {
    /// Send these tasks to the worker, with the trace contexts they name
    /// (a task's `trace` counts from 1 in `traces`).
    Assign {
        worker: u64,
        tasks: Vec<v1::Task>,
        traces: Vec<Arc<str>>,
    },
    /// Tell the worker these tasks are no longer wanted.
    Cancel {
        worker: u64,
        tasks: Vec<u64>,
    },
    /// End the worker's session (its tasks are already back in the queue).
    Close {
        worker: u64,
        reason: LossReason,
    },
    /// Give the request one result.
    Deliver {
        request: u64,
        result: egress::PuzzleResult,
    },
    /// End the request's stream with this failure.
    Fail {
        request: u64,
        failure: RequestFailure,
    },
    Publish(EventKind),
    /// Keep a verified answer.
    Cache {
        puzzle: Puzzle,
        answer: VerifiedAnswer,
    },
    /// Forget every cached answer from this worker (by its shown name).
    Evict {
        worker: String,
    },
    /// Send [`Input::Tick`](crate::Input::Tick) at `at` (besides the
    /// regular ticks): a held task becomes overdue then, and may want a
    /// backup before the next regular tick. A later wake than one already
    /// asked for is never asked.
    Wake {
        at: Instant,
    },
}

/// Effects in the order they arose.
pub type Effects = Vec<Effect>;
