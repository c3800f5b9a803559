//! The coordinator's errors (the gRPC layer maps them to statuses).
//!
//! Messages that reach clients say what was wrong and what to do; details
//! for operators go to the logs where the error is raised.

use colball_core::{AdmitError, NoWorkers, Refused, RegisterError, RequestFailure, SHUTTING_DOWN};
use colball_proto::{InvalidBatch, InvalidPuzzle};
use thiserror::Error;

/// Why the coordinator refused or ended a request.
#[derive(Debug, Error)]
pub enum ServerError {
    #[error("{0}")]
    InvalidPuzzle(#[from] InvalidPuzzle),
    #[error("{0}")]
    InvalidBatch(#[from] InvalidBatch),
    #[error("field puzzle: the request holds no puzzle")]
    MissingPuzzle,
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error(
        "batch of {batch} puzzles exceeds the limit of {limit} puzzles per request (--max-batch); split it"
    )]
    BatchTooLarge { batch: usize, limit: usize },
    #[error(
        "client {peer} already has {limit} requests in flight, the limit per client (--max-batches-per-client); wait for one to finish"
    )]
    TooManyRequests { peer: String, limit: usize },
    #[error(transparent)]
    NoWorkers(#[from] NoWorkers),
    #[error("{0}")]
    Register(#[from] RegisterError),
    #[error("field priority: {0} names no priority class (1 interactive, 2 normal, 3 bulk)")]
    BadPriority(i32),
    #[error("the deadline passed before every result arrived")]
    DeadlineExceeded,
    #[error("{}", SHUTTING_DOWN)]
    ShuttingDown,
    #[error(
        "worker protocol version {worker} is not supported: this coordinator speaks version {coordinator}; run matching colball-server versions"
    )]
    VersionMismatch { worker: u32, coordinator: u32 },
    #[error("bad worker session: {0}")]
    BadSession(String),
}

impl From<Refused> for ServerError {
    fn from(r: Refused) -> ServerError {
        match r {
            Refused::Admit(e) => ServerError::Admit(e),
            Refused::Register(e) => ServerError::Register(e),
        }
    }
}

impl From<RequestFailure> for ServerError {
    fn from(f: RequestFailure) -> ServerError {
        match f {
            RequestFailure::NoWorkers(n) => ServerError::NoWorkers(n),
            RequestFailure::ShuttingDown => ServerError::ShuttingDown,
        }
    }
}
