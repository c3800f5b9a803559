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
//!   upload ends;
//! - [`webhooks`]: a URL called once the job finishes.
//!
//! After a restart, unfinished jobs are taken up again and only puzzles
//! without a stored result are solved.

mod error;
mod follow;
mod keys;
mod progress;
pub mod quotas;
mod run;
pub mod store;
mod submit;
pub mod webhooks;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use error::{JobError, SubmitError};
use keys::Keys;
use keys::check_key;
pub use progress::Pace;
use progress::Speedometer;
use run::Run;
pub use store::{Entry, JobRow, JobState, JobStore, StoreError};
pub use submit::{JobSpec, NAME_CHARS};

/// A job as its client sees it: its row (its state a closed enum, its
/// priority class typed) and its pace. The API layers turn it into their
/// own messages.
#[derive(Clone, Debug)]
pub struct JobView {
    pub row: JobRow,
    pub pace: Pace,
}

impl JobView {
    /// When the next call to its webhook is due, in Unix ms: 0 when none
    /// is (the job has not finished, or the call was delivered or given
    /// up).
    pub fn webhook_next_ms(&self) -> i64 {
        let row = &self.row;
        match &row.webhook {
            Some(w) if w.next_ms != store::Webhook::NO_MORE && row.state.finished() => {
                w.next_ms.max(row.finished_ms)
            }
            _ => 0,
        }
    }
}

/// A job whose results are to be read: its number and id, whether its
/// results are kept in the order they were stored, and its size once its
/// submission is sealed.
#[derive(Clone, Debug)]
pub struct Followed {
    seq: i64,
    id: String,
    any_order: bool,
    total: Option<u64>,
}

impl Followed {
    fn of(row: &JobRow) -> Followed {
        Followed {
            seq: row.seq,
            id: row.id(),
            any_order: row.any_order,
            total: (row.state != JobState::Receiving).then_some(row.puzzles),
        }
    }
}

use crate::coordinator::events;
use crate::coordinator::{Scheduler, StoreConfig};
use crate::lifecycle::Lifecycle;
use store::ToWrite;

/// The limits jobs are held to (from the coordinator's config).
#[derive(Clone, Debug)]
struct Limits {
    max_job_puzzles: usize,
    max_store_bytes: Option<u64>,
    retention: Duration,
    lease: Duration,
}

/// How the jobs wait for a store that is unavailable for now (a database
/// restarting): 100 ms doubling to 5 s between tries, said once in the
/// log, given up only at shutdown or when the caller's `stop` fires.
pub(crate) struct Patience {
    what: &'static str,
    pause: Duration,
    said: bool,
}

impl Patience {
    pub(crate) fn new(what: &'static str) -> Patience {
        Patience {
            what,
            pause: Duration::from_millis(100),
            said: false,
        }
    }

    /// After a try that failed with `e`: waits and says whether to try
    /// again (`e` passes, and neither `shutdown` nor `stop` came).
    pub(crate) async fn again(
        &mut self,
        e: &StoreError,
        shutdown: &CancellationToken,
        stop: Option<&CancellationToken>,
    ) -> bool {
        if !e.passing() {
            return false;
        }
        if !self.said {
            tracing::warn!(error = %e, "{}: the job store is unavailable; trying again until it is back", self.what);
            self.said = true;
        }
        let stopped = async {
            match stop {
                Some(stop) => stop.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = tokio::time::sleep(self.pause) => {}
            () = stopped => return false,
            () = shutdown.cancelled() => return false,
        }
        self.pause = (self.pause * 2).min(Duration::from_secs(5));
        true
    }

    /// The last try's outcome: says so if the store came back.
    pub(crate) fn done(&self, ok: bool) {
        if self.said && ok {
            tracing::info!("{}: the job store is back", self.what);
        }
    }
}

/// The jobs subsystem: see the module documentation.
#[derive(Debug)]
pub struct Jobs {
    scheduler: Arc<Scheduler>,
    lifecycle: Lifecycle,
    store: Arc<dyn JobStore>,
    runs: DashMap<i64, Run>,
    keys: Keys,
    writer: mpsc::UnboundedSender<ToWrite>,
    limits: Limits,
    /// The paces of the jobs whose status is read.
    speed: Speedometer,
    /// Which webhooks are called, and how.
    webhooks: webhooks::WebhookConfig,
    /// The clients' quotas (read again on SIGHUP).
    quotas: quotas::Quotas,
    /// Counts of the work shared with other coordinators.
    pub(crate) sharing: Sharing,
    /// Counts of the webhook calls this coordinator made.
    pub(crate) webhook_calls: webhooks::Calls,
}

/// What a coordinator did on a shared store (for `/metrics`).
#[derive(Debug, Default)]
pub struct Sharing {
    pub windows_claimed: std::sync::atomic::AtomicU64,
    pub windows_taken_over: std::sync::atomic::AtomicU64,
    pub windows_lost: std::sync::atomic::AtomicU64,
    pub windows_rescued: std::sync::atomic::AtomicU64,
    pub uploads_rescued: std::sync::atomic::AtomicU64,
}

impl Jobs {
    /// Jobs over `store`, run on `scheduler`: starts the writer, takes up
    /// the store's unfinished jobs, and keeps the retention. Needs a tokio
    /// runtime.
    pub fn start(
        scheduler: Arc<Scheduler>,
        store: Arc<dyn JobStore>,
        config: &StoreConfig,
        webhooks: webhooks::WebhookConfig,
        quotas: quotas::Quotas,
    ) -> Arc<Jobs> {
        let (writer, rx) = mpsc::unbounded_channel();
        let jobs = Arc::new(Jobs {
            lifecycle: scheduler.lifecycle().clone(),
            scheduler,
            quotas,
            store,
            runs: DashMap::new(),
            keys: Keys::default(),
            writer,
            limits: Limits {
                max_job_puzzles: config.max_job_puzzles,
                max_store_bytes: config.max_bytes,
                retention: config.job_retention,
                lease: config.job_lease,
            },
            speed: Speedometer::default(),
            webhooks,
            sharing: Sharing::default(),
            webhook_calls: webhooks::Calls::default(),
        });
        // The writer ends with the process (its sender lives in `jobs`).
        tokio::spawn(jobs.clone().write(rx));
        let span = || tracing::info_span!("jobs");
        // Unfinished jobs are taken up once at start on a store of its
        // own; on a shared store, by the first of the looks each second.
        if jobs.store.shared().is_some() {
            jobs.lifecycle.spawn(span(), jobs.clone().share());
        } else {
            jobs.lifecycle.spawn(span(), jobs.clone().resume());
        }
        jobs.lifecycle.spawn(span(), jobs.clone().retention());
        jobs.lifecycle.spawn(span(), jobs.clone().deliver());
        jobs
    }

    /// The clients' quotas.
    pub fn quotas(&self) -> &quotas::Quotas {
        &self.quotas
    }

    /// Whether this coordinator leads the store's maintenance (always, on
    /// a store of its own).
    pub fn leading(&self) -> bool {
        self.store.shared().is_none_or(|s| s.leading())
    }

    /// Waits for the next `tick` at which this coordinator leads the
    /// store's maintenance; false once shutdown begins.
    pub(crate) async fn next_lead(&self, tick: &mut tokio::time::Interval) -> bool {
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.lifecycle.cancelled() => return false,
            }
            if self.leading() {
                return true;
            }
        }
    }

    /// Calls `call` on the store until it answers (see [`Patience`]).
    pub(crate) async fn patiently<T, F>(
        &self,
        what: &'static str,
        stop: Option<&CancellationToken>,
        mut call: impl FnMut() -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let mut patience = Patience::new(what);
        loop {
            match call().await {
                Err(e) if patience.again(&e, self.lifecycle.shutdown(), stop).await => {}
                outcome => {
                    patience.done(outcome.is_ok());
                    return outcome;
                }
            }
        }
    }

    /// Most puzzles in one job (`--max-job-puzzles`).
    pub fn max_job_puzzles(&self) -> usize {
        self.limits.max_job_puzzles
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

    /// The job `id` of `client` (as [`Self::owned`]) to read the results
    /// of: answered by its run when it runs here, else by the store.
    pub async fn followed(&self, id: &str, client: &str) -> Result<Followed, JobError> {
        let run = self
            .store
            .job_seq(id)
            .and_then(|seq| self.running(seq, client));
        match run {
            Some(f) if f.total.is_some() => Ok(f),
            _ => Ok(Followed::of(&self.owned(id, client).await?)),
        }
    }

    /// The job of `client` submitted with `key`, being submitted or run,
    /// to read the results of (by its run when it runs here): waits a
    /// while for a submission that has not begun yet.
    pub async fn followed_by_key(&self, key: &str, client: &str) -> Result<Followed, JobError> {
        check_key(key, "key")?;
        let seq = self.keys.find(client, key).await?;
        if let Some(f) = self.running(seq, client) {
            return Ok(f);
        }
        match self.store.job(seq).await? {
            Some(row) if row.owner == client => Ok(Followed::of(&row)),
            _ => Err(Keys::gone(key)),
        }
    }

    /// Job `seq` as its run here knows it, if it runs here for `client`.
    fn running(&self, seq: i64, client: &str) -> Option<Followed> {
        let run = self.runs.get(&seq)?;
        let upload = *run.upload.borrow();
        (run.owner == client).then(|| Followed {
            seq,
            id: self.store.job_id(seq),
            any_order: run.any_order,
            total: upload.sealed.then_some(upload.puzzles),
        })
    }

    /// A job's status as clients see it: its row, with its pace (from the
    /// reads of its status, see [`progress`]).
    pub fn status(&self, row: JobRow) -> JobView {
        let pace = self
            .speed
            .observe(&row, std::time::Instant::now(), events::unix_ms());
        JobView { row, pace }
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
        // Owned by `client` (its run answers when it runs here).
        let seq = self.followed(id, client).await?.seq;
        self.stop(seq);
        self.store.delete(seq).await?;
        self.speed.forget(seq);
        Ok(())
    }
}
