//! Durable jobs: submit a puzzle set, get an id, come back for the
//! results. This subsystem owns everything of them: the [store](store)
//! (behind the [`JobStore`] interface), the runs, the keys and the writer.
//! The gRPC `Jobs` service and the HTTP job API call [`Jobs`] and map its
//! [`JobError`]s to their statuses; the scheduler knows nothing of jobs (a
//! job's windows enter it as requests, like any other).
//!
//! - [`submit`](Jobs::submit): the puzzles arrive in chunks and are stored
//!   as they come; the job runs while it is uploaded (`submit.rs`);
//! - running: a window of puzzles at a time through admission, results to
//!   the writer (`run.rs`), which stores them in groups (`writer.rs`);
//! - [`results`](Jobs::results): what is stored, and with `follow` what
//!   comes next (`follow.rs`);
//! - keys (`keys.rs`): a job named by the client, readable before its
//!   upload ends.
//!
//! After a restart, unfinished jobs are taken up again and only puzzles
//! without a stored result are solved.

mod error;
mod follow;
mod keys;
mod run;
pub mod store;
mod submit;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::mpsc;

pub use error::{JobError, SubmitError};
use keys::Keys;
use keys::check_key;
use run::Run;
pub use store::{Entry, JobRow, JobState, JobStore, StoreError};

use crate::coordinator::events;
use crate::coordinator::{Config, Shared};
use store::ToWrite;

/// The limits jobs are held to (from the coordinator's config).
#[derive(Clone, Debug)]
struct Limits {
    max_job_puzzles: usize,
    max_store_bytes: Option<u64>,
    retention: Duration,
}

/// The jobs subsystem: see the module documentation.
#[derive(Debug)]
pub struct Jobs {
    scheduler: Arc<Shared>,
    store: Arc<dyn JobStore>,
    runs: DashMap<i64, Run>,
    keys: Keys,
    writer: mpsc::UnboundedSender<ToWrite>,
    limits: Limits,
}

impl Jobs {
    /// Jobs over `store`, run on `scheduler`: starts the writer, takes up
    /// the store's unfinished jobs, and keeps the retention. Needs a tokio
    /// runtime.
    pub fn start(scheduler: Arc<Shared>, store: Arc<dyn JobStore>, config: &Config) -> Arc<Jobs> {
        let (writer, rx) = mpsc::unbounded_channel();
        let jobs = Arc::new(Jobs {
            scheduler,
            store,
            runs: DashMap::new(),
            keys: Keys::default(),
            writer,
            limits: Limits {
                max_job_puzzles: config.max_job_puzzles,
                max_store_bytes: config.max_store_bytes,
                retention: config.job_retention,
            },
        });
        // The writer ends with the process (its sender lives in `jobs`).
        tokio::spawn(jobs.clone().write(rx));
        let span = || tracing::info_span!("jobs");
        jobs.scheduler.spawn(span(), jobs.clone().resume());
        jobs.scheduler.spawn(span(), jobs.clone().retention());
        jobs
    }

    /// Whether jobs outlive the coordinator (the store is on disk).
    pub fn durable(&self) -> bool {
        self.store.durable()
    }

    /// Bytes the store's data takes (what `--max-store-mib` limits).
    pub async fn store_bytes(&self) -> Result<u64, JobError> {
        Ok(self.store.size_bytes().await?)
    }

    /// The job `id` if it belongs to `client` and was acknowledged;
    /// NOT_FOUND otherwise (whether it exists or not, so ids do not leak).
    pub async fn owned(&self, id: &str, client: &str) -> Result<JobRow, JobError> {
        let seq = self
            .store
            .job_seq(id)
            .ok_or_else(|| JobError::not_found(id))?;
        match self.store.job(seq).await? {
            Some(row) if row.owner == client && row.state != JobState::Receiving => Ok(row),
            _ => Err(JobError::not_found(id)),
        }
    }

    /// The job of `client` submitted with `key`, being submitted or run:
    /// waits a while for a submission that has not begun yet.
    pub async fn keyed(&self, key: &str, client: &str) -> Result<JobRow, JobError> {
        check_key(key, "key")?;
        let seq = self.keys.find(client, key).await?;
        match self.store.job(seq).await? {
            Some(row) if row.owner == client => Ok(row),
            _ => Err(Keys::gone(key)),
        }
    }

    /// The client's acknowledged jobs, newest first.
    pub async fn list(&self, client: &str) -> Result<Vec<JobRow>, JobError> {
        Ok(self.store.list(client).await?)
    }

    /// Cancels a job of `client` unless it has finished; the job as it is
    /// now.
    pub async fn cancel(&self, id: &str, client: &str) -> Result<JobRow, JobError> {
        let row = self.owned(id, client).await?;
        if row.state.finished() {
            return Ok(row);
        }
        self.stop(row.seq);
        self.store
            .set_state(row.seq, JobState::Cancelled, "", events::unix_ms())
            .await?;
        Ok(self.store.job(row.seq).await?.unwrap_or(row))
    }

    /// Cancels a job of `client` if needed and deletes it.
    pub async fn delete(&self, id: &str, client: &str) -> Result<(), JobError> {
        let row = self.owned(id, client).await?;
        self.stop(row.seq);
        self.store.delete(row.seq).await?;
        Ok(())
    }
}
