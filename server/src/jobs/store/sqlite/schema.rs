//! The SQLite store's schema, and the migrations that bring a database of
//! an earlier version to it. The version is SQLite's `user_version`: 0 for
//! a new file and for files of the first layout (a row per puzzle and per
//! result, keyed by job and index), 2 for the second (puzzles in chunks, a
//! row per result), [`VERSION`] for the layout in [`super::layout`]. A migration runs in one transaction at open: a
//! database is either migrated whole or left as it was.

use colball_solver::{Board, Puzzle, Size};
use rusqlite::{Connection, params};

use super::layout::{self, CHUNK, key};
use crate::jobs::store::Entry;
use crate::jobs::store::packing;

/// The schema version this build writes.
pub const VERSION: i64 = 6;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    owner TEXT NOT NULL,
    name TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state INTEGER NOT NULL,
    puzzles INTEGER NOT NULL,
    solved INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL DEFAULT 0,
    failure TEXT NOT NULL DEFAULT '',
    fail_fast INTEGER NOT NULL DEFAULT 0,
    any_order INTEGER NOT NULL DEFAULT 0,
    -- What the job's rows hold: its chunks' and results' bytes.
    bytes INTEGER NOT NULL DEFAULT 0,
    -- The URL called once the job finishes (NULL: none), and its calls.
    webhook TEXT,
    webhook_attempts INTEGER NOT NULL DEFAULT 0,
    -- When the next call is due (Unix ms); i64::MAX once none is.
    webhook_next_ms INTEGER NOT NULL DEFAULT 0,
    webhook_delivered INTEGER NOT NULL DEFAULT 0,
    -- The submit's traceparent, when spans were exported (NULL: none).
    trace TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, seq);
CREATE INDEX IF NOT EXISTS jobs_webhooks_due ON jobs (webhook_next_ms)
    WHERE webhook IS NOT NULL AND webhook_next_ms < 9223372036854775807;
-- key: job << 32 | the chunk's first index.
CREATE TABLE IF NOT EXISTS chunks (
    key INTEGER PRIMARY KEY,
    puzzles BLOB NOT NULL,
    ids BLOB NOT NULL
);
-- key: job << 32 | the first index of the row's run.
CREATE TABLE IF NOT EXISTS results (
    key INTEGER PRIMARY KEY,
    slots BLOB NOT NULL
);
-- key: job << 32 | the first position in the stored order of the row's results.
CREATE TABLE IF NOT EXISTS orders (
    key INTEGER PRIMARY KEY,
    indices BLOB NOT NULL
);
";

/// The second layout's results table: a row per result.
const SECOND_RESULTS: &str = "
CREATE TABLE results_v2 (
    key INTEGER PRIMARY KEY,
    result BLOB NOT NULL,
    pos INTEGER
);
";

/// Brings the database to [`VERSION`].
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<()> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if version >= VERSION {
        return Ok(());
    }
    let tx = conn.transaction()?;
    let has = |table: &str, column: &str| -> rusqlite::Result<bool> {
        tx.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n > 0)
    };
    let first_layout = has("puzzles", "idx")?;
    let second_layout = !first_layout && has("results", "pos")?;
    if first_layout {
        // Columns the earliest files lack.
        for (table, column, ddl) in [
            ("jobs", "fail_fast", "INTEGER NOT NULL DEFAULT 0"),
            ("jobs", "any_order", "INTEGER NOT NULL DEFAULT 0"),
            ("results", "pos", "INTEGER"),
        ] {
            if !has(table, column)? {
                tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {ddl}"))?;
            }
        }
        tx.execute_batch(
            "ALTER TABLE results RENAME TO results_v1;
             ALTER TABLE puzzles RENAME TO puzzles_v1;",
        )?;
    }
    if second_layout {
        tx.execute_batch("ALTER TABLE results RENAME TO results_v2;")?;
    }
    tx.execute_batch("DROP INDEX IF EXISTS results_by_pos;")?;
    // A table of an earlier version lacks the jobs' bytes (SCHEMA leaves
    // an existing table as it is); they are counted below.
    let count_bytes = has("jobs", "seq")? && !has("jobs", "bytes")?;
    if count_bytes {
        tx.execute_batch("ALTER TABLE jobs ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0")?;
    }
    // Webhooks came with version 5, traces with 6.
    for (column, ddl) in [
        ("webhook", "TEXT"),
        ("webhook_attempts", "INTEGER NOT NULL DEFAULT 0"),
        ("webhook_next_ms", "INTEGER NOT NULL DEFAULT 0"),
        ("webhook_delivered", "INTEGER NOT NULL DEFAULT 0"),
        ("trace", "TEXT"),
    ] {
        if has("jobs", "seq")? && !has("jobs", column)? {
            tx.execute_batch(&format!("ALTER TABLE jobs ADD COLUMN {column} {ddl}"))?;
        }
    }
    tx.execute_batch(SCHEMA)?;
    if first_layout {
        tx.execute_batch(SECOND_RESULTS)?;
        tx.execute(
            "INSERT INTO results_v2 (key, result, pos)
             SELECT (job << 32) | idx, result, CASE WHEN pos IS NULL THEN NULL ELSE (job << 32) | pos END
             FROM results_v1",
            [],
        )?;
        chunk_puzzles(&tx)?;
        tx.execute_batch("DROP TABLE results_v1; DROP TABLE puzzles_v1;")?;
    }
    if first_layout || second_layout {
        slot_results(&tx)?;
        tx.execute_batch("DROP TABLE results_v2;")?;
    }
    if count_bytes {
        // Each job's chunks and results rows, as `add` and `put` count them.
        tx.execute_batch(
            "UPDATE jobs SET bytes =
                (SELECT COALESCE(SUM(length(puzzles) + length(ids) + 24), 0) FROM chunks
                 WHERE key >= jobs.seq << 32 AND key < (jobs.seq + 1) << 32)
              + (SELECT COALESCE(SUM(length(slots) + 24), 0) FROM results
                 WHERE key >= jobs.seq << 32 AND key < (jobs.seq + 1) << 32)",
        )?;
    }
    tx.pragma_update(None, "user_version", VERSION)?;
    tx.commit()
}

/// Moves the second layout's result rows into rows of slots, and the
/// stored order of any-order jobs into `orders`.
fn slot_results(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    {
        let mut read = tx.prepare("SELECT key, result FROM results_v2 ORDER BY key")?;
        let mut insert = tx.prepare("INSERT INTO results (key, slots) VALUES (?1, ?2)")?;
        let mut rows = read.query([])?;
        // The row being gathered: its key, and its slots so far.
        let mut row: Option<(i64, Vec<Option<Vec<u8>>>)> = None;
        let mut flush = |row: &mut Option<(i64, Vec<Option<Vec<u8>>>)>| -> rusqlite::Result<()> {
            if let Some((key, slots)) = row.take() {
                let slots = layout::write_slots(slots.iter().map(|s| s.as_deref()));
                insert.execute(params![key, slots])?;
            }
            Ok(())
        };
        while let Some(r) = rows.next()? {
            let (at, result): (i64, Vec<u8>) = (r.get(0)?, r.get(1)?);
            let index = layout::index_of(at);
            let first = at - (index % CHUNK as u64) as i64;
            if row.as_ref().is_none_or(|(key, _)| *key != first) {
                flush(&mut row)?;
                row = Some((first, vec![None; CHUNK]));
            }
            if let Some((_, slots)) = row.as_mut() {
                slots[(index % CHUNK as u64) as usize] = Some(result);
            }
        }
        flush(&mut row)?;
    }
    let mut read =
        tx.prepare("SELECT pos, key FROM results_v2 WHERE pos IS NOT NULL ORDER BY pos")?;
    let mut insert = tx.prepare("INSERT INTO orders (key, indices) VALUES (?1, ?2)")?;
    let mut rows = read.query([])?;
    // The row being gathered: its first position's key, and its indices.
    let mut row: Option<(i64, Vec<u64>)> = None;
    while let Some(r) = rows.next()? {
        let (pos, at): (i64, i64) = (r.get(0)?, r.get(1)?);
        let follows = row.as_ref().is_some_and(|(first, indices)| {
            *first + indices.len() as i64 == pos && indices.len() < CHUNK
        });
        if !follows {
            if let Some((first, indices)) = row.take() {
                insert.execute(params![first, layout::pack_indices(&indices)])?;
            }
            row = Some((pos, Vec::new()));
        }
        if let Some((_, indices)) = row.as_mut() {
            indices.push(layout::index_of(at));
        }
    }
    if let Some((first, indices)) = row {
        insert.execute(params![first, layout::pack_indices(&indices)])?;
    }
    Ok(())
}

/// Moves the first layout's puzzle rows into chunks: runs of consecutive
/// indices of a job, [`CHUNK`] at most.
fn chunk_puzzles(tx: &rusqlite::Transaction<'_>) -> rusqlite::Result<()> {
    let mut read =
        tx.prepare("SELECT job, idx, id, size, start, target FROM puzzles_v1 ORDER BY job, idx")?;
    let mut insert = tx.prepare("INSERT INTO chunks (key, puzzles, ids) VALUES (?1, ?2, ?3)")?;
    let mut rows = read.query([])?;
    // The chunk being gathered: its job, first index, and entries.
    let mut chunk: Option<(i64, u64, Vec<Entry>)> = None;
    let mut flush = |chunk: &mut Option<(i64, u64, Vec<Entry>)>| -> rusqlite::Result<()> {
        if let Some((job, first, entries)) = chunk.take() {
            let (puzzles, ids) = packing::pack(&entries);
            insert.execute(params![key(job, first), puzzles, ids])?;
        }
        Ok(())
    };
    while let Some(row) = rows.next()? {
        let (job, idx): (i64, i64) = (row.get(0)?, row.get(1)?);
        let idx = idx as u64;
        let entry = match unpack(row.get(3)?, row.get(4)?, row.get(5)?) {
            Some(puzzle) => Entry::Puzzle {
                id: row.get::<_, String>(2)?.into(),
                puzzle,
            },
            None => Entry::Invalid(Default::default()),
        };
        let follows = chunk.as_ref().is_some_and(|(j, first, entries)| {
            *j == job && first + entries.len() as u64 == idx && entries.len() < CHUNK
        });
        if !follows {
            flush(&mut chunk)?;
            chunk = Some((job, idx, Vec::new()));
        }
        if let Some((_, _, entries)) = chunk.as_mut() {
            entries.push(entry);
        }
    }
    flush(&mut chunk)
}

/// A puzzle of the first layout: its size as `rows * 10 + cols`, its
/// boards' cells.
fn unpack(size: i64, start: i64, target: i64) -> Option<Puzzle> {
    let size = Size::new((size / 10) as usize, (size % 10) as usize).ok()?;
    let start = Board::from_packed(size, u32::try_from(start).ok()?)?;
    let target = Board::from_packed(size, u32::try_from(target).ok()?)?;
    Puzzle::new(start, target).ok()
}
