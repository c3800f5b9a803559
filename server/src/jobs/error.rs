//! Why a job operation was refused or ended. The API layer maps each kind
//! to its gRPC status and its HTTP status, once each.

use super::store::StoreError;

/// Why a job operation was refused, or a job's result stream ended.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A field of the request is wrong (the message names it).
    #[error("{0}")]
    Invalid(String),
    /// The job is bigger than `--max-job-puzzles` allows.
    #[error("{0}")]
    TooBig(String),
    /// The store holds `--max-store-mib` already.
    #[error(
        "the job store holds {held_mib} MiB, its limit (--max-store-mib) is {limit_mib} MiB: delete finished jobs, or wait for their retention to pass"
    )]
    StoreLimit { held_mib: u64, limit_mib: u64 },
    /// Another job of the client holds the key.
    #[error("{0}")]
    KeyTaken(String),
    /// No such job for this client (whether it exists or not).
    #[error("{0}")]
    NotFound(String),
    /// The submission ended before it was complete; nothing of it is kept.
    #[error("{0}")]
    Incomplete(String),
    /// The client is over one of its quotas.
    #[error("{}", .0.message)]
    OverQuota(super::quotas::OverQuota),
    /// The coordinator is shutting down.
    #[error("the coordinator is shutting down; ask again from the last index read")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl JobError {
    pub(super) fn not_found(id: &str) -> JobError {
        JobError::NotFound(format!(
            "no job {id:?}: it does not exist, was deleted, or belongs to another client"
        ))
    }

    pub(super) fn cut_short() -> JobError {
        JobError::Incomplete(
            "the job's submission was cut short before it was sealed; nothing of it is kept: submit it again"
                .into(),
        )
    }
}

/// Why a submission failed: the jobs subsystem refused it, or its upload
/// (a stream the API layer reads) failed with the API's own error.
#[derive(Debug)]
pub enum SubmitError<E> {
    Job(JobError),
    Upload(E),
}

impl<E> From<JobError> for SubmitError<E> {
    fn from(e: JobError) -> SubmitError<E> {
        SubmitError::Job(e)
    }
}

impl<E> From<StoreError> for SubmitError<E> {
    fn from(e: StoreError) -> SubmitError<E> {
        SubmitError::Job(e.into())
    }
}
