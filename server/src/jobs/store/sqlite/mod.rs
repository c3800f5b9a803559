//! The SQLite job store.
//!
//! With `--data-dir DIR` the database is `DIR/colball.sqlite3`, in WAL
//! mode with `synchronous = FULL`, so a transaction that returned is on
//! disk: a job is acknowledged only after its puzzles' transaction, and a
//! result is streamed to a client only after its own. A user can open the
//! file with `sqlite3` to look inside (the schema is below);
//! `sqlite3 colball.sqlite3 ".backup copy.sqlite3"` copies it safely while
//! the coordinator runs.
//!
//! [`Database`] is the plain, blocking store; [`SqliteStore`] serves it
//! through the [`JobStore`] interface, each call on a blocking thread
//! ([`SqliteStore::call`], the one way there). One connection behind a
//! mutex serves all: writes are grouped by the caller (many results per
//! transaction), so the lock is taken per group, not per puzzle.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use colball_proto::prost::Message;
use colball_proto::{egress, v1};
use rusqlite::{Connection, OptionalExtension, params};

pub(super) mod layout;
mod schema;

use super::packing;
use layout::{index_of, job_keys, key};

use super::{
    Entry, JobRow, JobState, JobStore, NewJob, Pending, StoreError, ToWrite, Unreadable, Webhook,
    id_of, priority_number, stored_priority,
};

/// The start of every query that reads whole job rows: its columns are the
/// ones [`row`] reads, in its order.
macro_rules! select_jobs {
    () => {
        "SELECT seq, owner, name, priority, state, puzzles, solved, errors, created_ms, finished_ms, failure, fail_fast, any_order, bytes, webhook, webhook_attempts, webhook_next_ms, webhook_delivered, trace FROM jobs WHERE "
    };
}

/// What a row costs beyond its data, in a job's [`JobRow::bytes`].
const ROW_BYTES: i64 = 24;

/// The database file's name under the data dir.
pub const FILE_NAME: &str = "colball.sqlite3";

/// Where a job's next stored result goes in its stored order: `Some(None)`
/// for a job read in input order, `None` for a job that no longer exists
/// (deleted while its results were on their way).
fn next_pos(tx: &rusqlite::Transaction<'_>, job: i64) -> Result<Option<Option<u64>>, StoreError> {
    let row: Option<(bool, u64)> = tx
        .prepare_cached("SELECT any_order, solved + errors FROM jobs WHERE seq = ?1")?
        .query_row([job], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    Ok(row.map(|(any_order, stored)| any_order.then_some(stored)))
}

/// A result on its way into the store, encoded.
struct Incoming<'a> {
    job: i64,
    index: u64,
    bytes: &'a [u8],
    error: bool,
}

/// A results row as [`put`] changes it: its bytes as stored, and where
/// each slot's result lies (`Err(i)` for `incoming[i]`'s).
struct SlotsRow {
    stored: Vec<u8>,
    slots: Vec<Option<Result<std::ops::Range<usize>, usize>>>,
    changed: bool,
}

/// Stores results within the caller's transaction, each results row read
/// and written once, an any-order job's new results appended to its
/// stored order as one row, and each job's counts updated once. A result
/// already stored is kept, and one of a job no longer stored dropped.
/// Returns, for each result, whether it was new.
fn put(tx: &rusqlite::Transaction<'_>, incoming: &[Incoming<'_>]) -> Result<Vec<bool>, StoreError> {
    let mut new = vec![false; incoming.len()];
    // Each job's next position in its stored order (`Some(None)` for a job
    // read in input order), read once; `None` for a job deleted meanwhile.
    let mut positions: HashMap<i64, Option<Option<u64>>> = HashMap::new();
    let mut rows: HashMap<i64, SlotsRow> = HashMap::new();
    {
        let mut read = tx.prepare_cached("SELECT slots FROM results WHERE key = ?1")?;
        for r in incoming {
            if let std::collections::hash_map::Entry::Vacant(e) = positions.entry(r.job) {
                e.insert(next_pos(tx, r.job)?);
            }
            let at = layout::slots_key(r.job, r.index);
            if positions[&r.job].is_some() && !rows.contains_key(&at) {
                let stored: Vec<u8> = read
                    .query_row([at], |row| row.get(0))
                    .optional()?
                    .unwrap_or_default();
                let slots = layout::read_slots(&stored)
                    .into_iter()
                    .map(|s| s.map(Ok))
                    .collect();
                rows.insert(
                    at,
                    SlotsRow {
                        stored,
                        slots,
                        changed: false,
                    },
                );
            }
        }
    }
    // New results per job (solved, errors, their bytes), and an any-order
    // job's new indices in the order they were stored.
    let mut counts: HashMap<i64, (i64, i64, i64, Vec<u64>)> = HashMap::new();
    for (i, r) in incoming.iter().enumerate() {
        let Some(Some(row)) = positions
            .get(&r.job)
            .map(|p| p.and(rows.get_mut(&layout::slots_key(r.job, r.index))))
        else {
            continue;
        };
        let slot = &mut row.slots[(r.index % layout::CHUNK as u64) as usize];
        if slot.is_some() {
            continue;
        }
        *slot = Some(Err(i));
        row.changed = true;
        new[i] = true;
        let c = counts.entry(r.job).or_default();
        c.0 += i64::from(!r.error);
        c.1 += i64::from(r.error);
        c.2 += r.bytes.len() as i64 + ROW_BYTES;
        if let Some(Some(Some(_))) = positions.get(&r.job) {
            c.3.push(r.index);
        }
    }
    let mut write =
        tx.prepare_cached("INSERT OR REPLACE INTO results (key, slots) VALUES (?1, ?2)")?;
    for (at, row) in rows.iter().filter(|(_, row)| row.changed) {
        let slots = layout::write_slots(row.slots.iter().map(|slot| match slot {
            None => None,
            Some(Ok(range)) => Some(&row.stored[range.clone()]),
            Some(Err(i)) => Some(incoming[*i].bytes),
        }));
        write.execute(params![at, slots])?;
    }
    let mut count = tx.prepare_cached(
        "UPDATE jobs SET solved = solved + ?2, errors = errors + ?3, bytes = bytes + ?4 WHERE seq = ?1",
    )?;
    let mut order = tx.prepare_cached("INSERT INTO orders (key, indices) VALUES (?1, ?2)")?;
    for (job, (solved, errors, bytes, indices)) in counts {
        count.execute(params![job, solved, errors, bytes])?;
        if let Some(Some(Some(first))) = positions.get(&job) {
            order.execute(params![key(job, *first), layout::pack_indices(&indices)])?;
        }
    }
    Ok(new)
}

/// Deletes job `job`'s rows (within the caller's transaction).
fn delete_job(conn: &Connection, job: i64) -> rusqlite::Result<()> {
    let (first, end) = job_keys(job);
    for sql in [
        "DELETE FROM results WHERE key >= ?1 AND key < ?2",
        "DELETE FROM orders WHERE key >= ?1 AND key < ?2",
        "DELETE FROM chunks WHERE key >= ?1 AND key < ?2",
    ] {
        conn.prepare_cached(sql)?.execute([first, end])?;
    }
    conn.prepare_cached("DELETE FROM jobs WHERE seq = ?1")?
        .execute([job])?;
    Ok(())
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DiskFull) {
            StoreError::Full(e.to_string())
        } else {
            StoreError::Backend(e.to_string())
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct Database {
    conn: Mutex<Connection>,
    path: Option<PathBuf>,
    /// This database's random key, made when it was created: the tail of
    /// every job id, so an id never names a job of another database (an
    /// in-memory store restarted, whose numbers start again at 1).
    instance: String,
}

impl Database {
    /// Opens (or creates) the database in `dir`, or an in-memory one, that
    /// may not grow past `cap` bytes (then writes fail with
    /// [`StoreError::Full`]). A file that is not a database, is damaged, or
    /// cannot be written is an error naming the file and what is wrong.
    pub fn open(dir: Option<&Path>, cap: Option<u64>) -> Result<Database, StoreError> {
        let path = dir.map(|d| d.join(FILE_NAME));
        let shown = path
            .as_ref()
            .map_or_else(|| "(in memory)".to_string(), |p| p.display().to_string());
        let fail = |reason: String| StoreError::Open {
            path: shown.clone(),
            reason,
        };
        if let Some(d) = dir {
            std::fs::create_dir_all(d)
                .map_err(|e| fail(format!("cannot create the data dir: {e}")))?;
        }
        let conn = match &path {
            Some(p) => Connection::open(p),
            None => Connection::open_in_memory(),
        }
        .map_err(|e| fail(e.to_string()))?;
        enum Problem {
            Damaged(String),
            Sql(rusqlite::Error),
        }
        impl From<rusqlite::Error> for Problem {
            fn from(e: rusqlite::Error) -> Problem {
                Problem::Sql(e)
            }
        }
        let mut conn = conn;
        let mut setup = || -> Result<String, Problem> {
            conn.busy_timeout(std::time::Duration::from_secs(5))?;
            // Every statement the store runs stays prepared (about 25).
            conn.set_prepared_statement_cache_capacity(64);
            let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
            if check != "ok" {
                return Err(Problem::Damaged(format!(
                    "the database is damaged: {check}"
                )));
            }
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))?;
            conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = OFF;")?;
            schema::migrate(&mut conn)?;
            // Jobs whose puzzles never all arrived were never acknowledged.
            let unsealed: Vec<i64> = conn
                .prepare("SELECT seq FROM jobs WHERE state = 0")?
                .query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for job in unsealed {
                delete_job(&conn, job)?;
            }
            let fresh = super::instance_key();
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('instance', ?1)",
                [fresh],
            )?;
            if let Some(cap) = cap {
                let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
                let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
                let max = (i64::try_from(cap).unwrap_or(i64::MAX) / page).max(pages + 1);
                conn.query_row(&format!("PRAGMA max_page_count = {max}"), [], |r| {
                    r.get::<_, i64>(0)
                })?;
            }
            let instance =
                conn.query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                    r.get(0)
                })?;
            Ok(instance)
        };
        let instance = match setup() {
            Ok(instance) => instance,
            Err(Problem::Damaged(problem)) => return Err(fail(problem)),
            Err(Problem::Sql(e)) => return Err(fail(e.to_string())),
        };
        Ok(Database {
            conn: Mutex::new(conn),
            path,
            instance,
        })
    }

    /// The id of job number `seq`: `j12-3f9a0c7d12be`.
    pub fn job_id(&self, seq: i64) -> String {
        id_of(seq, &self.instance)
    }

    /// The number of a job id of this database, if it is one.
    pub fn job_seq(&self, id: &str) -> Option<i64> {
        super::seq_of(id, &self.instance)
    }

    /// Whether the jobs outlive the process (the database is a file).
    pub fn durable(&self) -> bool {
        self.path.is_some()
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a job whose puzzles are about to arrive.
    pub fn create(&self, job: &NewJob) -> Result<i64, StoreError> {
        let conn = self.conn();
        conn.prepare_cached(
            "INSERT INTO jobs (owner, name, priority, state, puzzles, created_ms, fail_fast, any_order, webhook, trace) VALUES (?1, ?2, ?3, 0, 0, ?4, ?5, ?6, ?7, ?8)",
        )?
        .execute(params![job.owner, job.name, priority_number(job.priority), job.created_ms, job.fail_fast, job.any_order, job.webhook, job.trace])?;
        Ok(conn.last_insert_rowid())
    }

    /// Stores a chunk of a job's puzzles from index `first` on, in one
    /// transaction; invalid ones get their error result at once.
    pub fn add(&self, job: i64, first: u64, entries: &[Entry]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut chunk =
                tx.prepare_cached("INSERT INTO chunks (key, puzzles, ids) VALUES (?1, ?2, ?3)")?;
            let mut bytes = 0;
            for (at, part) in (first..)
                .step_by(layout::CHUNK)
                .zip(entries.chunks(layout::CHUNK))
            {
                let (puzzles, ids) = packing::pack(part);
                bytes += (puzzles.len() + ids.len()) as i64 + ROW_BYTES;
                chunk.execute(params![key(job, at), puzzles, ids])?;
            }
            let mut encoded = Vec::new();
            let mut invalid = Vec::new();
            for (index, e) in (first..).zip(entries) {
                if let Entry::Invalid(r) = e {
                    let r = v1::PuzzleResult { index, ..r.clone() };
                    let at = encoded.len();
                    r.encode(&mut encoded)
                        .map_err(|e| StoreError::Backend(e.to_string()))?;
                    invalid.push((at..encoded.len(), index));
                }
            }
            let incoming: Vec<Incoming<'_>> = invalid
                .iter()
                .map(|(at, index)| Incoming {
                    job,
                    index: *index,
                    bytes: &encoded[at.clone()],
                    error: true,
                })
                .collect();
            put(&tx, &incoming)?;
            tx.prepare_cached(
                "UPDATE jobs SET puzzles = puzzles + ?2, bytes = bytes + ?3 WHERE seq = ?1",
            )?
            .execute(params![job, entries.len() as i64, bytes])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every puzzle has arrived: the job is acknowledged and running (its
    /// run started with its first chunk), or done when every puzzle has a
    /// result already (all invalid, or all solved during the upload), or
    /// failed if its run failed meanwhile.
    pub fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError> {
        let conn = self.conn();
        conn.prepare_cached(
            "UPDATE jobs SET
                finished_ms = CASE WHEN state = 5 THEN finished_ms
                    WHEN solved + errors >= puzzles THEN ?2 ELSE 0 END,
                state = CASE WHEN state = 5 THEN 5
                    WHEN solved + errors >= puzzles THEN 3 ELSE 2 END
             WHERE seq = ?1",
        )?
        .execute(params![job, now_ms])?;
        drop(conn);
        self.job(job)?.ok_or(StoreError::NoSuchJob(job))
    }

    /// Bytes the database's data takes: its pages less the free ones
    /// (which deleted jobs leave and new ones reuse); the WAL aside.
    pub fn size_bytes(&self) -> Result<u64, StoreError> {
        let conn = self.conn();
        let pragma = |name: &str| -> Result<i64, StoreError> {
            Ok(conn.prepare_cached(name)?.query_row([], |r| r.get(0))?)
        };
        let pages = pragma("PRAGMA page_count")?;
        let free = pragma("PRAGMA freelist_count")?;
        let size = pragma("PRAGMA page_size")?;
        Ok(((pages - free).max(0) * size) as u64)
    }

    /// Deletes the jobs that finished before `before_ms`; returns how many.
    pub fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        let old: Vec<i64> = {
            let conn = self.conn();
            let mut q = conn.prepare_cached(
                "SELECT seq FROM jobs WHERE state IN (3, 4, 5) AND finished_ms > 0 AND finished_ms < ?1",
            )?;
            q.query_map([before_ms], |r| r.get(0))?
                .collect::<Result<Vec<_>, _>>()?
        };
        for seq in &old {
            self.delete(*seq)?;
        }
        Ok(old.len())
    }

    /// Forgets a job and everything of it.
    pub fn delete(&self, job: i64) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        delete_job(&tx, job)?;
        tx.commit()?;
        Ok(())
    }

    pub fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError> {
        let conn = self.conn();
        Ok(conn
            .prepare_cached(concat!(select_jobs!(), "seq = ?1"))?
            .query_row([job], |r| row(r, &self.instance))
            .optional()?)
    }

    /// The owner's jobs (acknowledged ones), newest first.
    pub fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            concat!(
                select_jobs!(),
                "owner = ?1 AND state != 0 ORDER BY seq DESC"
            ),
            [owner],
        )
    }

    /// The job rows `sql` (a [`select_jobs`] query) selects with `params`.
    fn rows(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<JobRow>, StoreError> {
        let conn = self.conn();
        let mut q = conn.prepare_cached(sql)?;
        let rows = q
            .query_map(params, |r| row(r, &self.instance))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// Jobs queued or running (after a restart: to take up again).
    pub fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        self.rows(concat!(select_jobs!(), "state IN (1, 2) ORDER BY seq"), [])
    }

    /// Finished jobs whose webhook call is due at `now_ms`.
    pub fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            concat!(
                select_jobs!(),
                "webhook IS NOT NULL AND webhook_next_ms < 9223372036854775807 \
                 AND webhook_next_ms <= ?1 AND state IN (3, 4, 5) \
                 ORDER BY webhook_next_ms, seq LIMIT ?2"
            ),
            params![now_ms, limit as i64],
        )
    }

    /// Records the calls to a job's webhook.
    pub fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError> {
        self.conn()
            .prepare_cached(
                "UPDATE jobs SET webhook_attempts = ?2, webhook_next_ms = ?3, webhook_delivered = ?4 \
                 WHERE seq = ?1 AND webhook IS NOT NULL",
            )?
            .execute(params![job, attempts, next_ms, delivered])?;
        Ok(())
    }

    pub fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let finished = if state.finished() { now_ms } else { 0 };
        self.conn()
            .prepare_cached(
                "UPDATE jobs SET state = ?2, failure = ?3, finished_ms = ?4 \
                 WHERE seq = ?1 AND state NOT IN (3, 4, 5)",
            )?
            .execute(params![job, state as i64, failure, finished])?;
        Ok(())
    }

    /// Up to `limit` puzzles of the job after index `after` (or from the
    /// start) that have no result yet, in index order.
    pub fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let conn = self.conn();
        let (_, end) = job_keys(job);
        let mut from = after.map_or(0, |a| a + 1);
        let mut out: Vec<Pending> = Vec::new();
        while out.len() < limit {
            // The puzzles from `from` on, as many as are still wanted...
            let want = limit - out.len();
            let mut found: Vec<Pending> = Vec::with_capacity(want);
            let start = run_start(&conn, Runs::Chunks, job, from)?;
            let mut chunks = conn.prepare_cached(
                "SELECT key, puzzles, ids FROM chunks WHERE key >= ?1 AND key < ?2 ORDER BY key",
            )?;
            let mut rows = chunks.query([start, end])?;
            while let Some(row) = rows.next()? {
                let first = index_of(row.get(0)?);
                let blob = |at| row.get_ref(at)?.as_blob().map_err(rusqlite::Error::from);
                let (puzzles, ids) = (blob(1)?, blob(2)?);
                let entries = (first..)
                    .zip(packing::unpack(puzzles, ids))
                    .skip_while(|(i, _)| *i < from);
                for (index, entry) in entries {
                    if let Some((id, puzzle)) = entry {
                        found.push((index, id, puzzle));
                        if found.len() == want {
                            break;
                        }
                    }
                }
                if found.len() == want {
                    break;
                }
            }
            let Some(last) = found.last().map(|p| p.0) else {
                break;
            };
            // ... less those with a result.
            let mut solved = Vec::new();
            for_each_result(&conn, job, from, |index, _| {
                solved.push(index);
                index < last
            })?;
            let exhausted = found.len() < want;
            out.extend(
                found
                    .into_iter()
                    .filter(|p| solved.binary_search(&p.0).is_err()),
            );
            if exhausted {
                break;
            }
            from = last + 1;
        }
        Ok(out)
    }

    /// Stores results (grouped: one transaction for all of them). A result
    /// already stored is kept. Returns, for each result, whether it was
    /// stored (`false` for a repeat, or a result of a deleted job).
    pub fn put_results(&self, results: &[ToWrite]) -> Result<Vec<bool>, StoreError> {
        let mut encoded = Vec::new();
        let mut ends = Vec::with_capacity(results.len());
        for w in results {
            w.result
                .encode(&mut encoded)
                .map_err(|e| StoreError::Backend(e.to_string()))?;
            ends.push(encoded.len());
        }
        let incoming: Vec<Incoming<'_>> = results
            .iter()
            .zip(std::iter::once(0).chain(ends.iter().copied()).zip(&ends))
            .map(|(w, (at, end))| Incoming {
                job: w.job,
                index: w.result.index,
                bytes: &encoded[at..*end],
                error: w.result.error().is_some(),
            })
            .collect();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let new = put(&tx, &incoming)?;
        tx.commit()?;
        Ok(new)
    }

    /// Stored results of the job from `from`, up to the first one missing
    /// (at most `limit`): in input order (`from` an index), or with
    /// `stored_order`, for an any-order job, in the order they were stored
    /// (`from` a position in it).
    pub fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let conn = self.conn();
        let mut out = Vec::new();
        if stored_order {
            let indices = stored_indices(&conn, job, from, limit)?;
            // The results row last read: its key, bytes and slots.
            let mut row: Option<(i64, Vec<u8>, layout::Slots)> = None;
            let mut read = conn.prepare_cached("SELECT slots FROM results WHERE key = ?1")?;
            for index in indices {
                let at = layout::slots_key(job, index);
                if row.as_ref().is_none_or(|(key, _, _)| *key != at) {
                    let bytes: Vec<u8> = read
                        .query_row([at], |r| r.get(0))
                        .optional()?
                        .unwrap_or_default();
                    let slots = layout::read_slots(&bytes);
                    row = Some((at, bytes, slots));
                }
                let Some((_, bytes, slots)) = &row else { break };
                let Some(range) = slots[(index % layout::CHUNK as u64) as usize].clone() else {
                    break;
                };
                let Ok(r) = egress::PuzzleResult::decode(&bytes[range]) else {
                    break;
                };
                out.push(r);
            }
            return Ok(out);
        }
        let mut next = from;
        for_each_result(&conn, job, from, |index, bytes| {
            if index != next || out.len() >= limit {
                return false;
            }
            match egress::PuzzleResult::decode(bytes) {
                Ok(r) => out.push(r),
                Err(_) => return false,
            }
            next += 1;
            true
        })?;
        Ok(out)
    }

    /// Stored results of the job from index `from` in input order, gaps and
    /// all (at most `limit`; one that does not decode ends the list).
    pub fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let conn = self.conn();
        let mut out = Vec::new();
        for_each_result(&conn, job, from, |_, bytes| {
            if out.len() >= limit {
                return false;
            }
            match egress::PuzzleResult::decode(bytes) {
                Ok(r) => out.push(r),
                Err(_) => return false,
            }
            true
        })?;
        Ok(out)
    }
}

/// Calls `f` with each stored result of job `job` from index `from` on, in
/// index order (its index and encoded bytes), while `f` returns `true`.
fn for_each_result(
    conn: &Connection,
    job: i64,
    from: u64,
    mut f: impl FnMut(u64, &[u8]) -> bool,
) -> Result<(), StoreError> {
    let (_, end) = job_keys(job);
    let mut q = conn.prepare_cached(
        "SELECT key, slots FROM results WHERE key >= ?1 AND key < ?2 ORDER BY key",
    )?;
    let mut rows = q.query([layout::slots_key(job, from), end])?;
    while let Some(row) = rows.next()? {
        let first = index_of(row.get(0)?);
        let slots = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        let stored = (first..).zip(layout::read_slots(slots));
        for (index, range) in stored.skip_while(|(i, _)| *i < from) {
            if let Some(range) = range {
                if !f(index, &slots[range]) {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// A table whose rows each hold a run of a job's entries, keyed by the
/// [`key`] of the run's first one.
#[derive(Clone, Copy)]
enum Runs {
    Chunks,
    Orders,
}

/// The key of the row of `table` whose run holds entry `from` of job
/// `job`: the last row starting at or before it (or `from`'s own key).
fn run_start(conn: &Connection, table: Runs, job: i64, from: u64) -> Result<i64, StoreError> {
    let sql = match table {
        Runs::Chunks => "SELECT max(key) FROM chunks WHERE key >= ?1 AND key <= ?2",
        Runs::Orders => "SELECT max(key) FROM orders WHERE key >= ?1 AND key <= ?2",
    };
    let (first, _) = job_keys(job);
    Ok(conn
        .prepare_cached(sql)?
        .query_row([first, key(job, from)], |r| r.get::<_, Option<i64>>(0))?
        .unwrap_or(key(job, from)))
}

/// The indices of an any-order job's results in the order they were
/// stored, from position `from` on, at most `limit`.
fn stored_indices(
    conn: &Connection,
    job: i64,
    from: u64,
    limit: usize,
) -> Result<Vec<u64>, StoreError> {
    let (_, end) = job_keys(job);
    let start = run_start(conn, Runs::Orders, job, from)?;
    let mut q = conn.prepare_cached(
        "SELECT key, indices FROM orders WHERE key >= ?1 AND key < ?2 ORDER BY key",
    )?;
    let mut rows = q.query([start, end])?;
    let mut out = Vec::new();
    let mut next = from;
    while let Some(row) = rows.next()? {
        let pos = index_of(row.get(0)?);
        if pos > next {
            break;
        }
        let indices = row.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
        for index in layout::unpack_indices(indices).skip((next - pos) as usize) {
            if out.len() >= limit {
                return Ok(out);
            }
            out.push(index);
            next += 1;
        }
    }
    Ok(out)
}

/// A number of column `column` this version cannot read, as the error
/// reading the row.
fn unreadable(column: usize) -> impl Fn(Unreadable) -> rusqlite::Error {
    move |e| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Integer,
            Box::new(e),
        )
    }
}

fn row(r: &rusqlite::Row<'_>, instance: &str) -> rusqlite::Result<JobRow> {
    let seq = r.get(0)?;
    Ok(JobRow {
        seq,
        id: id_of(seq, instance),
        owner: r.get(1)?,
        name: r.get(2)?,
        priority: stored_priority(seq, r.get(3)?).map_err(unreadable(3))?,
        state: JobState::stored(seq, r.get(4)?).map_err(unreadable(4))?,
        puzzles: r.get::<_, i64>(5)? as u64,
        solved: r.get::<_, i64>(6)? as u64,
        errors: r.get::<_, i64>(7)? as u64,
        created_ms: r.get(8)?,
        finished_ms: r.get(9)?,
        failure: r.get(10)?,
        fail_fast: r.get::<_, i64>(11)? != 0,
        any_order: r.get::<_, i64>(12)? != 0,
        bytes: r.get::<_, i64>(13)? as u64,
        webhook: match r.get::<_, Option<String>>(14)? {
            Some(url) => Some(Webhook {
                url,
                attempts: r.get(15)?,
                next_ms: r.get(16)?,
                delivered: r.get(17)?,
            }),
            None => None,
        },
        trace: r.get(18)?,
    })
}

/// [`Database`] behind the [`JobStore`] interface.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    db: Arc<Database>,
}

impl SqliteStore {
    /// Opens the database in `dir`, or an in-memory one (see
    /// [`Database::open`]).
    pub fn open(dir: Option<&Path>, cap: Option<u64>) -> Result<SqliteStore, StoreError> {
        Ok(SqliteStore {
            db: Arc::new(Database::open(dir, cap)?),
        })
    }

    /// Runs `f` on the database on a blocking thread: every call of the
    /// store goes this way, off the async threads.
    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Database) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || f(&db))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    fn durable(&self) -> bool {
        self.db.durable()
    }

    fn job_id(&self, seq: i64) -> String {
        self.db.job_id(seq)
    }

    fn job_seq(&self, id: &str) -> Option<i64> {
        self.db.job_seq(id)
    }

    async fn create(&self, job: NewJob) -> Result<i64, StoreError> {
        self.call(move |db| db.create(&job)).await?
    }

    async fn add(&self, job: i64, first: u64, entries: Vec<Entry>) -> Result<(), StoreError> {
        self.call(move |db| db.add(job, first, &entries)).await?
    }

    async fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError> {
        self.call(move |db| db.seal(job, now_ms)).await?
    }

    async fn size_bytes(&self) -> Result<u64, StoreError> {
        self.call(Database::size_bytes).await?
    }

    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        self.call(move |db| db.expire(before_ms)).await?
    }

    async fn delete(&self, job: i64) -> Result<(), StoreError> {
        self.call(move |db| db.delete(job)).await?
    }

    async fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError> {
        self.call(move |db| db.job(job)).await?
    }

    async fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError> {
        let owner = owner.to_string();
        self.call(move |db| db.list(&owner)).await?
    }

    async fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        self.call(Database::unfinished).await?
    }

    async fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let failure = failure.to_string();
        self.call(move |db| db.set_state(job, state, &failure, now_ms))
            .await?
    }

    async fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError> {
        self.call(move |db| db.webhooks_due(now_ms, limit)).await?
    }

    async fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError> {
        self.call(move |db| db.webhook_tried(job, attempts, next_ms, delivered))
            .await?
    }

    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        self.call(move |db| db.pending(job, after, limit)).await?
    }

    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        match self
            .call(move |db| {
                let outcome = db.put_results(&results);
                (results, outcome)
            })
            .await
        {
            Ok(done) => done,
            // The blocking task itself failed, and took the results with it.
            Err(e) => (Vec::new(), Err(e)),
        }
    }

    async fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        self.call(move |db| db.results(job, from, limit, stored_order))
            .await?
    }

    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        self.call(move |db| db.results_after(job, from, limit))
            .await?
    }
}

#[cfg(test)]
mod tests;
