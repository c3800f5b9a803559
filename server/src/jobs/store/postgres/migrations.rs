//! The schema, one step a version, and the migration that runs them at
//! start under an advisory lock (and regroups a database of the
//! row-per-puzzle layout in place).

use std::collections::BTreeMap;

use colball_proto::v1;
use ecow::EcoString;

use super::super::{Entry, StoreError, WINDOW, packing};
use super::{Failure, Group, MIGRATION_LOCK, backend, mark};

/// The schema, one step a version.
pub(super) const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE colball_jobs (
    seq bigserial PRIMARY KEY,
    owner text NOT NULL,
    name text NOT NULL,
    priority integer NOT NULL,
    state smallint NOT NULL,
    puzzles bigint NOT NULL DEFAULT 0,
    solved bigint NOT NULL DEFAULT 0,
    errors bigint NOT NULL DEFAULT 0,
    created_ms bigint NOT NULL,
    finished_ms bigint NOT NULL DEFAULT 0,
    failure text NOT NULL DEFAULT '',
    fail_fast boolean NOT NULL,
    any_order boolean NOT NULL,
    stored bigint NOT NULL DEFAULT 0,
    bytes bigint NOT NULL
);
CREATE INDEX colball_jobs_owner ON colball_jobs (owner, seq);
CREATE INDEX colball_jobs_unfinished ON colball_jobs (seq) WHERE state IN (1, 2);
CREATE TABLE colball_puzzles (
    job bigint NOT NULL REFERENCES colball_jobs ON DELETE CASCADE,
    idx bigint NOT NULL,
    id text NOT NULL,
    puzzle bytea,
    PRIMARY KEY (job, idx)
);
CREATE TABLE colball_results (
    job bigint NOT NULL REFERENCES colball_jobs ON DELETE CASCADE,
    idx bigint NOT NULL,
    pos bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (job, idx)
);
CREATE UNIQUE INDEX colball_results_pos ON colball_results (job, pos);
",
    r"
CREATE TABLE colball_windows (
    job bigint NOT NULL REFERENCES colball_jobs ON DELETE CASCADE,
    win bigint NOT NULL,
    holder text,
    lease_until timestamptz,
    done boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job, win)
);
CREATE INDEX colball_windows_held ON colball_windows (holder) WHERE holder IS NOT NULL;
ALTER TABLE colball_windows ADD COLUMN holder_key bigint;
ALTER TABLE colball_jobs ADD COLUMN uploader text, ADD COLUMN upload_until timestamptz;
INSERT INTO colball_windows (job, win)
    SELECT seq, generate_series(0, (puzzles - 1) / 8192) FROM colball_jobs
    WHERE puzzles > 0 AND state IN (0, 1, 2);
",
    r"
ALTER TABLE colball_jobs ADD COLUMN webhook text,
    ADD COLUMN webhook_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN webhook_next_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN webhook_delivered boolean NOT NULL DEFAULT false;
CREATE INDEX colball_jobs_webhooks_due ON colball_jobs (webhook_next_ms)
    WHERE webhook IS NOT NULL AND webhook_next_ms < 9223372036854775807;
",
    r"
ALTER TABLE colball_windows ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
",
    r"
CREATE TABLE colball_puzzle_blocks (
    job bigint NOT NULL REFERENCES colball_jobs ON DELETE CASCADE,
    first bigint NOT NULL,
    puzzles bytea NOT NULL,
    ids bytea NOT NULL,
    PRIMARY KEY (job, first)
);
CREATE TABLE colball_result_groups (
    job bigint NOT NULL REFERENCES colball_jobs ON DELETE CASCADE,
    pos bigint NOT NULL,
    n integer NOT NULL,
    win bigint NOT NULL,
    lo bigint NOT NULL,
    hi bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (job, pos)
);
CREATE INDEX colball_result_groups_win ON colball_result_groups (job, win);
ALTER TABLE colball_windows ADD COLUMN got bytea NOT NULL DEFAULT '\x',
    ADD COLUMN filled integer NOT NULL DEFAULT 0;
INSERT INTO colball_windows (job, win, done)
    SELECT seq, generate_series(0, (puzzles - 1) / 8192), state IN (3, 4, 5)
    FROM colball_jobs WHERE puzzles > 0
    ON CONFLICT DO NOTHING;
DO $$ BEGIN
    ALTER TABLE colball_result_groups ALTER COLUMN body SET COMPRESSION lz4;
    ALTER TABLE colball_puzzle_blocks ALTER COLUMN puzzles SET COMPRESSION lz4,
        ALTER COLUMN ids SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN NULL;
END $$;
",
    // The submit's traceparent, for the job's runs on any coordinator.
    "ALTER TABLE colball_jobs ADD COLUMN trace text;",
];

/// The version whose step moves the jobs of the row-per-puzzle layout
/// into blocks and groups ([`regroup`]), once its tables are made.
pub(super) const REGROUPED: usize = 5;

/// Creates or migrates the schema and reads (or makes) the store's key,
/// under the migration lock. Refuses a database holding other tables and
/// none of ours, and one migrated by a newer colball.
pub(super) async fn migrate(client: &mut deadpool_postgres::Object) -> Result<String, Failure> {
    let e = Failure::from;
    let tx = client.transaction().await.map_err(e)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(e)?;
    let tables: Vec<String> = tx
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() ORDER BY table_name",
            &[],
        )
        .await
        .map_err(e)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !tables.iter().any(|t| t == "colball_meta")
        && tables.iter().any(|t| !t.starts_with("colball_"))
    {
        let shown: Vec<&str> = tables.iter().take(3).map(String::as_str).collect();
        return Err(Failure(
            format!(
                "it holds tables that are not colball's ({}{}) and no colball_meta: give colball a database of its own",
                shown.join(", "),
                if tables.len() > 3 { ", ..." } else { "" }
            ),
            false,
        ));
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS colball_meta (key text PRIMARY KEY, value text NOT NULL)",
    )
    .await
    .map_err(e)?;
    let version: i64 = tx
        .query_opt(
            "SELECT value FROM colball_meta WHERE key = 'schema_version'",
            &[],
        )
        .await
        .map_err(e)?
        .map_or(Ok(0), |r| r.get::<_, String>(0).parse::<i64>())
        .map_err(|_| {
            Failure(
                "its colball_meta holds a schema_version that is not a number".into(),
                false,
            )
        })?;
    let latest = MIGRATIONS.len() as i64;
    if version > latest {
        return Err(Failure(
            format!(
                "its schema is version {version}, newer than this colball's {latest}: run a newer colball-server"
            ),
            false,
        ));
    }
    for (at, step) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(step).await.map_err(e)?;
        if at + 1 == REGROUPED {
            regroup(&tx)
                .await
                .map_err(|e| Failure(e.to_string(), false))?;
        }
    }
    tx.execute(
        "INSERT INTO colball_meta VALUES ('schema_version', $1) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        &[&latest.to_string()],
    )
    .await
    .map_err(e)?;
    tx.execute(
        "INSERT INTO colball_meta VALUES ('instance', $1) ON CONFLICT (key) DO NOTHING",
        &[&super::super::instance_key()],
    )
    .await
    .map_err(e)?;
    let instance: String = tx
        .query_one("SELECT value FROM colball_meta WHERE key = 'instance'", &[])
        .await
        .map_err(e)?
        .get(0);
    tx.commit().await.map_err(e)?;
    Ok(instance)
}

/// Moves the jobs of the row-per-puzzle layout (`colball_puzzles`, a row
/// per puzzle, and `colball_results`, a row per result) into blocks and
/// groups, job by job, window by window, and drops the old tables. Run
/// once, by the migration to [`REGROUPED`], in its transaction: a job in
/// flight goes on from where it was.
pub(super) async fn regroup(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), StoreError> {
    let jobs: Vec<i64> = tx
        .query("SELECT DISTINCT job FROM colball_puzzles ORDER BY job", &[])
        .await
        .map_err(backend)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for job in jobs {
        let rows = tx
            .query(
                "SELECT idx, id, puzzle FROM colball_puzzles WHERE job = $1 ORDER BY idx",
                &[&job],
            )
            .await
            .map_err(backend)?;
        // A block per run of consecutive indices in one window.
        let mut blocks: Vec<(u64, Vec<Entry>)> = Vec::new();
        for r in &rows {
            let index = r.get::<_, i64>(0) as u64;
            let entry = match r
                .get::<_, Option<&[u8]>>(2)
                .and_then(packing::unpack_puzzle)
            {
                Some(puzzle) => Entry::Puzzle {
                    id: EcoString::from(r.get::<_, &str>(1)),
                    puzzle,
                },
                None => Entry::Invalid(v1::PuzzleResult::default()),
            };
            match blocks.last_mut() {
                Some((first, entries))
                    if *first + entries.len() as u64 == index
                        && *first / WINDOW as u64 == index / WINDOW as u64 =>
                {
                    entries.push(entry)
                }
                _ => blocks.push((index, vec![entry])),
            }
        }
        for (first, entries) in &blocks {
            let (puzzles, ids) = packing::pack(entries);
            tx.execute(
                "INSERT INTO colball_puzzle_blocks (job, first, puzzles, ids) VALUES ($1, $2, $3, $4)",
                &[&job, &(*first as i64), &puzzles, &ids],
            )
            .await
            .map_err(backend)?;
        }
        let results = tx
            .query(
                "SELECT idx, pos, body FROM colball_results WHERE job = $1 ORDER BY pos",
                &[&job],
            )
            .await
            .map_err(backend)?;
        // A group per run of results in one window, in stored order.
        let mut groups: Vec<(i64, Group)> = Vec::new();
        let mut bitmaps: BTreeMap<u64, (Vec<u8>, i32)> = BTreeMap::new();
        for r in &results {
            let index = r.get::<_, i64>(0) as u64;
            let pos: i64 = r.get(1);
            let (bits, filled) = bitmaps.entry(index / WINDOW as u64).or_default();
            mark(bits, index % WINDOW as u64);
            *filled += 1;
            match groups.last_mut() {
                Some((first, group))
                    if *first + group.len() as i64 == pos
                        && group[0].0 / WINDOW as u64 == index / WINDOW as u64 =>
                {
                    group.push((index, r.get(2)))
                }
                _ => groups.push((pos, vec![(index, r.get(2))])),
            }
        }
        for (pos, group) in groups {
            let lo = group.iter().map(|g| g.0).min().unwrap_or(0) as i64;
            let hi = group.iter().map(|g| g.0).max().unwrap_or(0) as i64;
            tx.execute(
                "INSERT INTO colball_result_groups (job, pos, n, win, lo, hi, body) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &job,
                    &pos,
                    &(group.len() as i32),
                    &(lo / WINDOW as i64),
                    &lo,
                    &hi,
                    &packing::pack_results(group),
                ],
            )
            .await
            .map_err(backend)?;
        }
        for (win, (bits, filled)) in bitmaps {
            tx.execute(
                "UPDATE colball_windows SET got = $3, filled = $4 WHERE job = $1 AND win = $2",
                &[&job, &(win as i64), &bits, &filled],
            )
            .await
            .map_err(backend)?;
        }
    }
    tx.batch_execute("DROP TABLE colball_results; DROP TABLE colball_puzzles;")
        .await
        .map_err(backend)?;
    Ok(())
}
