//! The PostgreSQL job store (`--store postgres://USER@HOST:PORT/DB`): jobs
//! kept in a database that several coordinators can share.
//!
//! Tables (prefixed `colball_`, so that a database shared with other
//! applications is safe): `colball_meta` (the schema's version and the
//! store's key for job ids), `colball_jobs` (a row per job, with its counts,
//! the results stored so far (`stored`, the next result's place in stored
//! order) and the bytes it holds), `colball_puzzle_blocks` (a row per
//! uploaded chunk's part in one window: the index of its first puzzle, and
//! its puzzles and ids packed as the SQLite store packs a chunk,
//! [`pack`](super::packing::pack)) and `colball_result_groups` (a row per group of
//! results a writer stored in one window: the place in stored order of its
//! first, how many, its window, its lowest and highest index, and the
//! results' encodings packed, [`pack_results`](super::packing::pack_results)). Which of a
//! window's indices have a result is a bitmap in its row (`got`, with
//! their count, `filled`). So a job costs a row per chunk and per group
//! written, never one per puzzle, and a read in index order merges the
//! groups of the windows it covers.
//!
//! Every write to a job's results first locks the job's row (`FOR
//! UPDATE`, jobs in ascending order), then its windows' rows (ascending),
//! so concurrent writers from several coordinators keep each result once
//! (the first wins, by the bitmap), the counts exact and the stored order
//! without gaps.
//!
//! Several coordinators share the store ([`SharedStore`](super::SharedStore)): each job's
//! puzzles fall in windows of [`WINDOW`](super::WINDOW) (`colball_windows`, a row per
//! window: its holder, its lease and whether it is done), claimed with
//! `FOR UPDATE SKIP LOCKED` under a lease the holder renews, and taken by
//! another once the lease runs out or at once when its holder dies. A
//! run's next window costs one statement: it finishes the windows whose
//! results are stored, claims the next and reads its puzzles' blocks. One
//! more connection per coordinator, its session, holds the coordinator's
//! live lock (a session advisory lock of its own, let go the moment that
//! connection ends: how a dead holder is told), listens for the others'
//! hints (`LISTEN colball`: `jobs` when a job appears or ends, `r<job>`
//! when results are stored) and holds the leader's lock for whoever leads
//! the maintenance.
//!
//! The schema is created and migrated at start under a transaction-level
//! advisory lock, so coordinators starting together migrate once; a
//! database of the row-per-puzzle layout (versions 1 to 4) has its jobs
//! regrouped in place ([`migrations::regroup`]), those in flight too. Its
//! size (what `--max-store-mib` caps) is counted as the in-memory store
//! counts it, in the jobs' rows: PostgreSQL's own files do not shrink when
//! rows are deleted.
//!
//! The parts: [`connect`] (the URL, the password, TLS and the pool),
//! [`migrations`] (the schema and its steps), [`session`] (the live lock,
//! the hints and the leader's lock), [`claims`] (windows claimed,
//! finished, renewed and rescued: [`SharedStore`](super::SharedStore)),
//! [`results`] (the fenced, deduplicating writes) and [`queries`] (the
//! rest of [`JobStore`](super::JobStore)); this module holds the store,
//! its errors and what they share.

mod claims;
mod connect;
mod migrations;
mod queries;
mod results;
mod session;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colball_proto::egress;
use colball_proto::prost::Message;
use deadpool_postgres::Pool;
use tokio::sync::broadcast;
use tokio_postgres::types::ToSql;
use tokio_util::sync::DropGuard;

use super::{JobRow, JobState, StoreError, Wake, Webhook, id_of, stored_priority};

use claims::{has, mark, window_pending};
use migrations::migrate;
use results::{Fenced, Group, SeenWindow, put_locked, put_seen};
use session::{Session, jobs_hint, results_hint, session};

/// What a job costs beyond its puzzles and results, for the size.
const JOB_BYTES: i64 = 256;
/// What a puzzle or a result costs beyond its id or encoding.
const ROW_BYTES: i64 = 24;

/// The advisory lock held while the schema is migrated.
const MIGRATION_LOCK: i64 = 0x636f_6c62_616c_6c01;

/// The session advisory lock the leader of the maintenance holds.
const LEADER_LOCK: i64 = 0x636f_6c62_616c_6c02;

/// How often a coordinator's session tries to take the leader's lock
/// (and checks its connection): a new leader within this of the last
/// one's end.
const LEADER_TRY: Duration = Duration::from_secs(1);

/// The first key of the session advisory lock each coordinator holds
/// while it lives (the second is its own, [`PostgresStore::holder_key`]):
/// a window whose holder's lock is gone (its process died, so its
/// connection closed) is free at once, without waiting for its lease.
const LIVE_CLASS: i32 = 0x636f_6c62;

/// The channel of the hints between coordinators.
const CHANNEL: &str = "colball";

const JOB_COLUMNS: &str = "seq, owner, name, priority, state, puzzles, solved, errors, \
     created_ms, finished_ms, failure, fail_fast, any_order, bytes, \
     webhook, webhook_attempts, webhook_next_ms, webhook_delivered, trace";

/// See the module documentation.
#[derive(Debug)]
pub struct PostgresStore {
    pool: Pool,
    instance: String,
    cap: Option<u64>,
    wakes: broadcast::Sender<Wake>,
    leading: Arc<AtomicBool>,
    /// This process's name in claims and uploads: unique to it.
    holder: String,
    /// The second key of this process's live lock ([`LIVE_CLASS`]).
    holder_key: i32,
    /// Whether its session holds the live lock now: it claims only then.
    alive: Arc<AtomicBool>,
    /// The windows this process holds, as it last saw them stored.
    held: Mutex<HashMap<(i64, u64), SeenWindow>>,
    /// Ends the session with the store.
    _session: DropGuard,
}

fn backend(e: impl Into<Failure>) -> StoreError {
    let Failure(text, passing) = e.into();
    if passing {
        StoreError::Unavailable(text)
    } else if let Some(text) = text.strip_prefix(CONFLICT) {
        StoreError::Conflict(text.to_string())
    } else {
        StoreError::Backend(text)
    }
}

/// How a [`Failure`]'s text starts when the server rolled the transaction
/// back in a conflict (SQLSTATE 40001, 40P01).
const CONFLICT: &str = "conflict: ";

/// Calls `call` again, up to five times in all, while it fails in a
/// conflict the server resolved by rolling it back ([`StoreError::Conflict`]:
/// nothing of it was kept), a few milliseconds apart.
async fn resolving<T, F>(mut call: impl FnMut() -> F) -> Result<T, StoreError>
where
    F: Future<Output = Result<T, StoreError>>,
{
    let mut tries = 1;
    loop {
        match call().await {
            Err(StoreError::Conflict(why)) if tries < 5 => {
                tracing::debug!(%why, "a job store call rolled back in a conflict; trying again");
                tokio::time::sleep(Duration::from_millis(2 << tries)).await;
                tries += 1;
            }
            outcome => return outcome,
        }
    }
}

/// What went wrong, said whole (the server's own message for a database
/// error: the driver's `Display` says only "db error"; else the error and
/// its causes), and whether it passes: the connection refused or lost, or
/// the server shutting down, starting or in recovery (SQLSTATE classes 08
/// and 57P).
struct Failure(String, bool);

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        if let Some(db) = e.as_db_error() {
            let code = db.code().code();
            if code == "40001" || code == "40P01" {
                return Failure(format!("{CONFLICT}{}", db.message()), false);
            }
            let passing = code.starts_with("08") || code.starts_with("57P");
            return Failure(db.message().to_string(), passing);
        }
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text = format!("{text}: {c}");
            cause = c.source();
        }
        // Not the server's answer: the connection (refused, lost, closed,
        // timed out).
        Failure(text, true)
    }
}

impl From<deadpool_postgres::PoolError> for Failure {
    fn from(e: deadpool_postgres::PoolError) -> Failure {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            deadpool_postgres::PoolError::Timeout(_) => Failure(e.to_string(), true),
            other => Failure(other.to_string(), false),
        }
    }
}

impl From<deadpool_postgres::BuildError> for Failure {
    fn from(e: deadpool_postgres::BuildError) -> Failure {
        Failure(e.to_string(), false)
    }
}

impl PostgresStore {
    /// Deletes the jobs `pick` (a condition on `colball_jobs`) picks, with
    /// all of theirs; how many. Their rows are locked first (in ascending
    /// order, those locked by others skipped with `skip`), then their
    /// windows (in ascending order): the order every writer of both keeps,
    /// so deletes never deadlock with claims and renewals.
    async fn delete_picked(
        &self,
        pick: &str,
        params: &[&(dyn ToSql + Sync)],
        skip: bool,
    ) -> Result<u64, StoreError> {
        let lock = if skip {
            "FOR UPDATE SKIP LOCKED"
        } else {
            "FOR UPDATE"
        };
        let sql = format!("SELECT seq FROM colball_jobs WHERE {pick} ORDER BY seq {lock}");
        let n = resolving(|| async {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(backend)?;
            let seqs: Vec<i64> = tx
                .query(&sql, params)
                .await
                .map_err(backend)?
                .iter()
                .map(|r| r.get(0))
                .collect();
            if seqs.is_empty() {
                return Ok(0);
            }
            tx.execute(
                "SELECT 1 FROM colball_windows WHERE job = ANY($1) ORDER BY job, win FOR UPDATE",
                &[&seqs],
            )
            .await
            .map_err(backend)?;
            let n = tx
                .execute("DELETE FROM colball_jobs WHERE seq = ANY($1)", &[&seqs])
                .await
                .map_err(backend)?;
            tx.commit().await.map_err(backend)?;
            Ok(n)
        })
        .await?;
        if n > 0 {
            self.hint_jobs(&self.client().await?).await?;
        }
        Ok(n)
    }

    /// Tells the other coordinators that a job appeared or ended.
    async fn hint_jobs(&self, client: &deadpool_postgres::Object) -> Result<(), StoreError> {
        client
            .execute(
                "SELECT pg_notify($1, $2)",
                &[&CHANNEL, &jobs_hint(self.holder_key)],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Forgets the windows held that `which` picks (by job and window).
    fn forget(&self, which: impl Fn(&(i64, u64)) -> bool) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| !which(k));
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(backend)
    }

    /// Refuses `more` bytes past the cap.
    async fn room(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        more: i64,
    ) -> Result<(), StoreError> {
        let Some(cap) = self.cap else {
            return Ok(());
        };
        let held = held_bytes(&**tx).await?;
        if held + more > cap as i64 {
            return Err(StoreError::Full(format!(
                "{held} bytes held, {more} more asked, {cap} at most"
            )));
        }
        Ok(())
    }

    /// A job's row as read (its [`JOB_COLUMNS`]); a number this version
    /// cannot read is an error.
    fn row(&self, r: &tokio_postgres::Row) -> Result<JobRow, StoreError> {
        let seq: i64 = r.get(0);
        Ok(JobRow {
            seq,
            id: id_of(seq, &self.instance),
            owner: r.get(1),
            name: r.get(2),
            priority: stored_priority(seq, i64::from(r.get::<_, i32>(3)))?,
            state: JobState::stored(seq, i64::from(r.get::<_, i16>(4)))?,
            puzzles: r.get::<_, i64>(5) as u64,
            solved: r.get::<_, i64>(6) as u64,
            errors: r.get::<_, i64>(7) as u64,
            created_ms: r.get(8),
            finished_ms: r.get(9),
            failure: r.get(10),
            fail_fast: r.get(11),
            any_order: r.get(12),
            bytes: r.get::<_, i64>(13) as u64,
            webhook: r.get::<_, Option<String>>(14).map(|url| Webhook {
                url,
                attempts: r.get::<_, i32>(15) as u32,
                next_ms: r.get(16),
                delivered: r.get(17),
            }),
            trace: r.get(18),
        })
    }

    async fn rows(
        &self,
        filter: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<JobRow>, StoreError> {
        let client = self.client().await?;
        let sql = format!("SELECT {JOB_COLUMNS} FROM colball_jobs {filter}");
        let rows = client.query(&sql, params).await.map_err(backend)?;
        rows.iter().map(|r| self.row(r)).collect()
    }
}

/// The bytes the jobs hold, as `--max-store-mib` counts them.
async fn held_bytes(client: &impl tokio_postgres::GenericClient) -> Result<i64, StoreError> {
    Ok(client
        .query_one(
            "SELECT coalesce(sum(bytes), 0)::bigint FROM colball_jobs",
            &[],
        )
        .await
        .map_err(backend)?
        .get(0))
}

fn decode(bytes: &[u8]) -> Option<egress::PuzzleResult> {
    egress::PuzzleResult::decode(bytes).ok()
}
