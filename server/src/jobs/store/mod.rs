//! Where jobs, their puzzles and their results are kept: the [`JobStore`]
//! interface, and its implementations. [`postgres`] keeps them in a
//! PostgreSQL database (`--store URL`) that several coordinators can
//! share; [`sqlite`] in SQLite (a file with `--data-dir`, so jobs survive a
//! restart); [`memory`] in the process's memory (neither: jobs are lost on
//! restart).
//!
//! The jobs subsystem calls the store only through the trait, so another
//! database is one more implementation: neither the scheduler nor the API
//! layer knows which one runs. Each implementation passes the same checks
//! (`conformance` below).

pub mod memory;
pub(crate) mod packing;
pub mod postgres;
pub mod sqlite;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use colball_core::Priority;
use colball_proto::{egress, v1};
use colball_solver::Puzzle;
use ecow::EcoString;

/// A job's state as stored (the wire `JobState` numbers, and 0 while its
/// puzzles are still arriving: such a job was never acknowledged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Receiving = 0,
    Queued = 1,
    Running = 2,
    Done = 3,
    Cancelled = 4,
    Failed = 5,
}

impl JobState {
    /// The state stored as number `n` for job `job`; a number this version
    /// does not know is an error, never a guess.
    pub fn stored(job: i64, n: i64) -> Result<JobState, Unreadable> {
        Ok(match n {
            0 => JobState::Receiving,
            1 => JobState::Queued,
            2 => JobState::Running,
            3 => JobState::Done,
            4 => JobState::Cancelled,
            5 => JobState::Failed,
            _ => {
                return Err(Unreadable {
                    job,
                    field: "state",
                    value: n,
                });
            }
        })
    }

    pub fn finished(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Cancelled | JobState::Failed
        )
    }
}

/// The priority class stored as number `n` (its wire number) for job
/// `job`: 0 (unset) is a job's default class, bulk; a number this version
/// does not know is an error.
pub fn stored_priority(job: i64, n: i64) -> Result<Priority, Unreadable> {
    if n == 0 {
        return Ok(Priority::Bulk);
    }
    [Priority::Interactive, Priority::Normal, Priority::Bulk]
        .into_iter()
        .find(|p| p.to_wire() as i64 == n)
        .ok_or(Unreadable {
            job,
            field: "priority class",
            value: n,
        })
}

/// The number a priority class is stored as (its wire number).
pub fn priority_number(priority: Priority) -> i32 {
    priority.to_wire() as i32
}

/// A number in a job's row that this version cannot read: written by a
/// newer colball, or damaged.
#[derive(Debug, thiserror::Error)]
#[error("job {job}: its stored {field} {value} is none this version of colball knows")]
pub struct Unreadable {
    pub job: i64,
    pub field: &'static str,
    pub value: i64,
}

impl From<Unreadable> for StoreError {
    fn from(e: Unreadable) -> StoreError {
        StoreError::Backend(e.to_string())
    }
}

/// A job's row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    pub seq: i64,
    /// The id clients use (see [`JobStore::job_seq`]).
    pub id: String,
    pub owner: String,
    pub name: String,
    pub priority: Priority,
    pub state: JobState,
    pub puzzles: u64,
    pub solved: u64,
    pub errors: u64,
    pub created_ms: i64,
    pub finished_ms: i64,
    pub failure: String,
    /// Fail the job when no worker is connected for the grace period
    /// (`JobOptions.fail_without_workers`).
    pub fail_fast: bool,
    /// Results are read in the order they were stored, not input order
    /// (`JobOptions.any_order`).
    pub any_order: bool,
    /// What the job's puzzles and results take in the store (their data,
    /// and a fixed cost per row): what counts toward its client's
    /// stored-MiB quota.
    pub bytes: u64,
    /// The URL called once the job finishes (`JobOptions.webhook`), and
    /// how its delivery stands.
    pub webhook: Option<Webhook>,
    /// The W3C `traceparent` of its submit's span, when spans were
    /// exported: every run of the job, on any coordinator, joins that
    /// trace.
    pub trace: Option<String>,
}

/// A job's webhook: its URL, and the calls made to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    /// Calls made so far.
    pub attempts: u32,
    /// When the next call is due, in Unix ms: 0 as soon as the job
    /// finishes, [`Webhook::NO_MORE`] once delivered or given up.
    pub next_ms: i64,
    /// A call was answered with a 2xx status.
    pub delivered: bool,
}

impl Webhook {
    /// [`Webhook::next_ms`] once no call is due any more.
    pub const NO_MORE: i64 = i64::MAX;

    /// A webhook not called yet.
    pub fn new(url: String) -> Webhook {
        Webhook {
            url,
            ..Webhook::default()
        }
    }
}

impl JobRow {
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// Results still to come.
    pub fn remaining(&self) -> u64 {
        self.puzzles.saturating_sub(self.solved + self.errors)
    }
}

/// A job about to be submitted: who, what, and how.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub owner: String,
    pub name: String,
    pub priority: Priority,
    pub fail_fast: bool,
    pub any_order: bool,
    pub created_ms: i64,
    /// The URL to call once the job finishes, checked against the
    /// allowed patterns.
    pub webhook: Option<String>,
    /// Its submit's `traceparent` ([`JobRow::trace`]).
    pub trace: Option<String>,
}

/// One puzzle of a job as submitted: parsed, or the error result it gets.
#[derive(Clone, Debug)]
pub enum Entry {
    Puzzle { id: EcoString, puzzle: Puzzle },
    Invalid(v1::PuzzleResult),
}

/// Puzzles of one job admitted to the scheduler at a time: a window. On a
/// shared store, window `w` of a job is its puzzles `w * WINDOW ..
/// (w + 1) * WINDOW`, claimed by one coordinator at a time.
pub const WINDOW: usize = 8192;

/// A puzzle of a job without a result yet: its index, id and puzzle.
pub type Pending = (u64, EcoString, Puzzle);

/// A result of job `job` to store. On a shared store `fence` is the epoch
/// of the claim of the result's window under which it was solved
/// ([`Claim::Window`]): the result is stored only while that claim is the
/// window's current one. `None` on a store of this coordinator's own.
#[derive(Clone, Debug)]
pub struct ToWrite {
    pub job: i64,
    pub result: egress::PuzzleResult,
    pub fence: Option<u64>,
}

impl ToWrite {
    /// A result to store without a fence (a store of one coordinator's own).
    pub fn unfenced(job: i64, result: egress::PuzzleResult) -> ToWrite {
        ToWrite {
            job,
            result,
            fence: None,
        }
    }
}

/// The store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the job database {path}: {reason}")]
    Open { path: String, reason: String },
    #[error("the job store failed: {0}")]
    Backend(String),
    /// Past its cap (twice `--max-store-mib`) or out of disk.
    #[error(
        "the job store is full: the database may not grow past twice --max-store-mib, or the disk is full ({0})"
    )]
    Full(String),
    #[error("job {0} is not in the store")]
    NoSuchJob(i64),
    /// For now: the database is unreachable or restarting (a connection
    /// refused or lost, the server shutting down or starting). Worth
    /// trying again; nothing of the call was kept.
    #[error("the job store is unavailable for now: {0}")]
    Unavailable(String),
    /// The database rolled the call back to resolve a conflict with
    /// another's (a deadlock, a serialization failure): nothing of it was
    /// kept, and it may be tried again at once.
    #[error("the job store rolled the call back in a conflict with another: {0}")]
    Conflict(String),
    #[error("the job store's task failed: {0}")]
    Task(String),
}

impl StoreError {
    /// Whether the same call may succeed later ([`StoreError::Unavailable`],
    /// [`StoreError::Conflict`]).
    pub fn passing(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Conflict(_))
    }
}

/// What a coordinator got when it asked a shared store for work on a job.
#[derive(Debug)]
pub enum Claim {
    /// Window `win` is this coordinator's under a lease: its puzzles
    /// without a result (none of a window whose upload has not reached
    /// them yet). `took_over`: it was another coordinator's, whose lease
    /// had run out. `epoch`: the fencing token of this claim, greater than
    /// that of every earlier claim of the window; results written under an
    /// older one are refused.
    Window {
        win: u64,
        epoch: u64,
        pending: Vec<Pending>,
        took_over: bool,
    },
    /// No window is free: the rest are held under live leases (or being
    /// uploaded). Ask again later.
    Busy,
    /// Every window of the job is done: each of its uploaded puzzles has
    /// a result.
    Done,
}

/// What became of a window when its holder finished it
/// ([`SharedStore::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// Every puzzle of it has a result (or its job is gone).
    Done,
    /// Some of it waits for a result or for its upload: let go for anyone
    /// to claim.
    LetGo,
    /// It was claimed again since this claim (its lease had run out): the
    /// newer claim's results stand, this one's were refused.
    Lost,
}

/// A hint that something changed in a shared store, from another
/// coordinator (PostgreSQL's `NOTIFY`; a coordinator does not hear its
/// own): a job appeared or ended, or results of job `job` were stored in
/// its windows `first..=last`. Hints may be lost; polling stands behind
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    Jobs,
    Results { job: i64, first: u64, last: u64 },
}

/// What a [`SharedStore::rescue`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rescued {
    /// Windows let go (their lease ran out).
    pub windows: u64,
    /// Jobs deleted whose upload was abandoned (their coordinator died).
    pub uploads: u64,
}

/// A store several coordinators use at once (see [`JobStore::shared`]):
/// they split each job's windows by claims under leases, and one of them
/// leads the maintenance.
#[async_trait]
pub trait SharedStore: Send + Sync {
    /// Claims the first free window of `job` for `holder` (one unheld, or
    /// whose lease ran out, or whose holder died, or one the store says
    /// `holder` holds that this process has not been told of: a claim
    /// whose answer was lost, a release that failed) until `lease` from now.
    async fn claim(&self, job: i64, holder: &str, lease: Duration) -> Result<Claim, StoreError> {
        Ok(self.finish_and_claim(job, holder, lease, &[]).await?.0)
    }

    /// [`Self::finish`]es each of `finishing` (windows of `job` with their
    /// claims' epochs), then [`Self::claim`]s a window other than those,
    /// at once: on PostgreSQL, one statement. With each window finished,
    /// how it went (a window not stored any more is done).
    async fn finish_and_claim(
        &self,
        job: i64,
        holder: &str,
        lease: Duration,
        finishing: &[(u64, u64)],
    ) -> Result<(Claim, Vec<(u64, Finished)>), StoreError>;

    /// Window `win` of `job` has had its results stored under the claim of
    /// `epoch`: it is done if no puzzle of it waits for a result (and its
    /// upload is complete), else it is let go for anyone to claim, unless
    /// it was claimed again since (then the newer claim keeps it, and this
    /// one learns it lost the window).
    async fn finish(&self, job: i64, win: u64, epoch: u64) -> Result<Finished, StoreError>;

    /// Lets go of `holder`'s windows of `job` that are not done.
    async fn release(&self, job: i64, holder: &str) -> Result<(), StoreError>;

    /// Extends every lease `holder` holds to `lease` from now, and this
    /// process's uploads'; how many windows.
    async fn renew(&self, holder: &str, lease: Duration) -> Result<u64, StoreError>;

    /// Marks `job` done if it is queued or running and each of its puzzles
    /// has a result; whether it did.
    async fn complete(&self, job: i64, now_ms: i64) -> Result<bool, StoreError>;

    /// Whether this process leads the maintenance now (it holds the
    /// store's leader lock; it tries to take it when nobody does).
    fn leading(&self) -> bool;

    /// The leader's rescue: lets go of windows whose lease ran out, and
    /// deletes uploads whose coordinator died (their lease ran out).
    async fn rescue(&self) -> Result<Rescued, StoreError>;

    /// This process's name in the store's claims and uploads (unique to
    /// it; renewed by [`Self::renew`]).
    fn holder(&self) -> &str;

    /// Hints of changes made by other coordinators.
    fn wakes(&self) -> tokio::sync::broadcast::Receiver<Wake>;
}

/// See the module documentation. Every method is one transaction: when it
/// returns `Ok`, what it wrote is kept (on disk, for a durable store).
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the jobs outlive the process.
    fn durable(&self) -> bool;

    /// How the writer groups results for this store under load: at most
    /// `.0` results a write, and a write less than `.1` after the last one
    /// waits for the rest of that time (after a pause nothing waits).
    fn write_pace(&self) -> (usize, Duration) {
        (4096, Duration::from_millis(1))
    }

    /// The store's interface for several coordinators, if it may be
    /// shared; `None`: its coordinator is its only user, runs every job
    /// itself and leads its maintenance.
    fn shared(&self) -> Option<&dyn SharedStore> {
        None
    }

    /// The id of job number `seq` (`j12-3f9a0c7d12be`): its number and a
    /// random key of this store, so an id never names a job of another
    /// store (an in-memory store restarted, whose numbers start again).
    fn job_id(&self, seq: i64) -> String;

    /// The number of a job id of this store, if it is one.
    fn job_seq(&self, id: &str) -> Option<i64>;

    /// Starts a job whose puzzles are about to arrive; its number.
    async fn create(&self, job: NewJob) -> Result<i64, StoreError>;

    /// Stores a chunk of a job's puzzles from index `first` on; invalid
    /// ones get their error result at once.
    async fn add(&self, job: i64, first: u64, entries: Vec<Entry>) -> Result<(), StoreError>;

    /// Every puzzle has arrived: the job is acknowledged and running (its
    /// run started with its first chunk), or done when every puzzle has a
    /// result already, or failed if its run failed meanwhile.
    async fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError>;

    /// Bytes the store's data takes (what `--max-store-mib` limits).
    async fn size_bytes(&self) -> Result<u64, StoreError>;

    /// Deletes the jobs that finished before `before_ms`; returns how many.
    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError>;

    /// Forgets a job and everything of it.
    async fn delete(&self, job: i64) -> Result<(), StoreError>;

    async fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError>;

    /// The owner's acknowledged jobs, newest first.
    async fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError>;

    /// Jobs queued or running (after a restart: to take up again).
    async fn unfinished(&self) -> Result<Vec<JobRow>, StoreError>;

    /// Moves a job to `state`, unless it has finished: a finished job's
    /// state stays (a run that began as the job ended elsewhere cannot
    /// set it running again, nor a cancel undo its being done).
    async fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError>;

    /// Up to `limit` puzzles of the job after index `after` (or from the
    /// start) that have no result yet, in index order.
    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError>;

    /// Stores results, all in one transaction. A result already stored is
    /// kept, and a result of a job no longer stored dropped, as is (on a
    /// shared store) one whose fence is no longer its window's epoch: the
    /// window was claimed again since. Gives the results back with, for
    /// each, whether it was new.
    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>);

    /// Stored results of the job from `from`, up to the first one missing
    /// (at most `limit`): in input order (`from` an index), or with
    /// `stored_order`, for an any-order job, in the order they were stored
    /// (`from` a position in it).
    async fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError>;

    /// Stored results of the job from index `from` in input order, gaps
    /// and all, at most `limit`.
    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError>;

    /// Finished jobs whose webhook call is due at `now_ms` (neither
    /// delivered nor given up), soonest due first, at most `limit`.
    async fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError>;

    /// Records the calls to job `job`'s webhook: `attempts` made, the next
    /// due at `next_ms` ([`Webhook::NO_MORE`]: none), whether one was
    /// `delivered`. A job no longer stored is left alone.
    async fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError>;
}

/// Where a coordinator keeps its jobs: a PostgreSQL URL (and its
/// password, from a file), else a data directory, else neither.
#[derive(Clone, Copy, Debug, Default)]
pub struct Place<'a> {
    pub url: Option<&'a str>,
    pub password: Option<&'a str>,
    pub data_dir: Option<&'a Path>,
}

/// The store for a coordinator: PostgreSQL at `place.url` when there is
/// one, else SQLite in `place.data_dir` when there is one, else in memory;
/// capped at twice `limit` (room for the results of jobs admitted under
/// it).
pub async fn open(place: Place<'_>, limit: Option<u64>) -> Result<Arc<dyn JobStore>, StoreError> {
    let cap = limit.map(|l| l.saturating_mul(2));
    Ok(match (place.url, place.data_dir) {
        (Some(url), _) => {
            Arc::new(postgres::PostgresStore::connect_as(url, place.password, cap).await?)
        }
        (None, Some(dir)) => Arc::new(sqlite::SqliteStore::open(Some(dir), cap)?),
        (None, None) => Arc::new(memory::MemoryStore::new(cap)),
    })
}

/// A name for this process in a shared store's claims: the machine's name
/// (`HOSTNAME`, a pod's name under Kubernetes; else the kernel's), the
/// process id and a random part.
fn holder_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| {
            h.trim()
                .chars()
                .filter(|c| c.is_ascii_graphic())
                .take(64)
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "coordinator".into());
    format!(
        "{host}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A fresh random key for a store's job ids.
fn instance_key() -> String {
    format!("{:012x}", rand::random::<u64>() >> 16)
}

fn id_of(seq: i64, instance: &str) -> String {
    format!("j{seq}-{instance}")
}

fn seq_of(id: &str, instance: &str) -> Option<i64> {
    let (seq, key) = id.strip_prefix('j')?.split_once('-')?;
    if key != instance {
        return None;
    }
    seq.parse().ok().filter(|n| *n > 0)
}

#[cfg(test)]
mod conformance;
