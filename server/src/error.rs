//! The coordinator's errors, and the one place they become gRPC statuses.
//!
//! Messages that reach clients say what was wrong and what to do; details
//! for operators go to the logs where the error is raised.

use std::time::Duration;

use colball_proto::{InvalidBatch, InvalidPuzzle};
use thiserror::Error;
use tonic::{Code, Status};

/// Why the coordinator refused or ended a request.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("{0}")]
    InvalidPuzzle(#[from] InvalidPuzzle),
    #[error("{0}")]
    InvalidBatch(#[from] InvalidBatch),
    #[error("field puzzle: the request holds no puzzle")]
    MissingPuzzle,
    #[error(
        "batch of {batch} puzzles rejected: the coordinator holds {pending} puzzles and admits at most {limit} (--max-pending); retry later or send smaller batches"
    )]
    Overloaded {
        batch: usize,
        pending: usize,
        limit: usize,
    },
    #[error(
        "batch of {batch} puzzles exceeds the limit of {limit} puzzles per request (--max-batch); split it"
    )]
    BatchTooLarge { batch: usize, limit: usize },
    #[error(
        "puzzle index {index} is past {max}, the most a pending task keeps (a batch holds at most 1,000,000 puzzles, a job at most --max-job-puzzles)"
    )]
    IndexTooLarge { index: u64, max: u32 },
    #[error(
        "client {peer} already has {limit} requests in flight, the limit per client (--max-batches-per-client); wait for one to finish"
    )]
    TooManyBatches { peer: String, limit: usize },
    #[error(
        "{} (waited {}s); start one with `colball-server worker --coordinator URL`",
        if *.ever { "no worker is connected: every worker that joined has left or was lost" } else { "no worker has joined the cluster" },
        tenths(*.waited)
    )]
    NoWorkers { waited: Duration, ever: bool },
    #[error("{0}")]
    Register(#[from] crate::coordinator::state::RegisterError),
    #[error("field priority: {0} names no priority class (1 interactive, 2 normal, 3 bulk)")]
    BadPriority(i32),
    #[error("the deadline passed before every result arrived")]
    DeadlineExceeded,
    #[error("the coordinator is shutting down")]
    ShuttingDown,
    #[error(
        "worker protocol version {worker} is not supported: this coordinator speaks version {coordinator}; run matching colball-server versions"
    )]
    VersionMismatch { worker: u32, coordinator: u32 },
    #[error("bad worker session: {0}")]
    BadSession(String),
}

impl From<ServerError> for Status {
    fn from(e: ServerError) -> Status {
        let code = match &e {
            ServerError::InvalidPuzzle(_)
            | ServerError::InvalidBatch(_)
            | ServerError::MissingPuzzle
            | ServerError::BadSession(_)
            | ServerError::BadPriority(_) => Code::InvalidArgument,
            ServerError::Register(crate::coordinator::state::RegisterError::Slots { .. }) => {
                Code::InvalidArgument
            }
            ServerError::Register(crate::coordinator::state::RegisterError::Quarantined {
                ..
            }) => Code::PermissionDenied,
            ServerError::Overloaded { .. }
            | ServerError::BatchTooLarge { .. }
            | ServerError::IndexTooLarge { .. }
            | ServerError::TooManyBatches { .. } => Code::ResourceExhausted,
            ServerError::NoWorkers { .. } | ServerError::ShuttingDown => Code::Unavailable,
            ServerError::DeadlineExceeded => Code::DeadlineExceeded,
            ServerError::VersionMismatch { .. } => Code::FailedPrecondition,
        };
        if let ServerError::ShuttingDown = e {
            return colball_proto::reason::shutting_down(e.to_string());
        }
        Status::new(code, e.to_string())
    }
}

/// Seconds to a tenth, without a trailing `.0`: `1`, `10.2`.
fn tenths(d: Duration) -> String {
    let text = format!("{:.1}", d.as_secs_f64());
    text.strip_suffix(".0").map_or(text.clone(), str::to_string)
}
