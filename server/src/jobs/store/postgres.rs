//! The PostgreSQL job store (`--store postgres://USER@HOST:PORT/DB`): jobs
//! kept in a database that several coordinators can share.
//!
//! Tables (prefixed `colball_`, so that a database shared with other
//! applications is safe): `colball_meta` (the schema's version and the
//! store's key for job ids), `colball_jobs` (a row per job, with its counts,
//! the results stored so far (`stored`, the next result's place in stored
//! order) and the bytes it holds), `colball_puzzles` (a row per puzzle: its
//! id and its [`pack_puzzle`] bytes, none for one stored with its error)
//! and `colball_results` (a row per result: its index, its place in stored
//! order and its encoding). Puzzles and results go in by arrays
//! (`unnest`), one statement a chunk or group, never one a puzzle.
//!
//! Every write to a job's results first locks the job's row (`FOR
//! UPDATE`, jobs in ascending order), so concurrent writers from several
//! coordinators keep each result once (the first wins), the counts exact
//! and the stored order without gaps.
//!
//! The schema is created and migrated at start under a transaction-level
//! advisory lock, so coordinators starting together migrate once. Its
//! size (what `--max-store-mib` caps) is counted as the in-memory store
//! counts it, in the jobs' rows: PostgreSQL's own files do not shrink when
//! rows are deleted.

use std::collections::{BTreeMap, HashSet};
use std::str::FromStr;

use async_trait::async_trait;
use colball_proto::prost::Message;
use colball_proto::{egress, v1};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use ecow::EcoString;
use tokio_postgres::NoTls;
use tokio_postgres::types::ToSql;

use super::sqlite::layout::{pack_puzzle, unpack_puzzle};
use super::{Entry, JobRow, JobState, JobStore, NewJob, Pending, StoreError, ToWrite, id_of};

/// What a job costs beyond its puzzles and results, for the size.
const JOB_BYTES: i64 = 256;
/// What a puzzle or a result costs beyond its id or encoding.
const ROW_BYTES: i64 = 24;

/// The advisory lock held while the schema is migrated.
const MIGRATION_LOCK: i64 = 0x636f_6c62_616c_6c01;

/// The schema, one step a version.
const MIGRATIONS: &[&str] = &[r"
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
"];

const JOB_COLUMNS: &str = "seq, owner, name, priority, state, puzzles, solved, errors, \
     created_ms, finished_ms, failure, fail_fast, any_order";

/// See the module documentation.
#[derive(Debug)]
pub struct PostgresStore {
    pool: Pool,
    instance: String,
    cap: Option<u64>,
}

fn backend(e: impl Into<Failure>) -> StoreError {
    let Failure(text, passing) = e.into();
    if passing {
        StoreError::Unavailable(text)
    } else {
        StoreError::Backend(text)
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

/// Where a URL points, for messages: host, port and database, never the
/// password.
pub fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{:?} on {}:{port}",
        config.get_dbname().unwrap_or("(the user's)"),
        hosts.join(",")
    )
}

impl PostgresStore {
    /// Connects to the database at `url` (its password from the URL, else
    /// `PGPASSWORD`), creates or migrates the schema, and reads the store's
    /// key. A store capped at `cap` bytes.
    pub async fn connect(url: &str, cap: Option<u64>) -> Result<PostgresStore, StoreError> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Open {
            path: "the --store URL".into(),
            reason: format!("not a PostgreSQL URL: {e}"),
        })?;
        if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(std::time::Duration::from_secs(10));
        }
        let target = describe(&config);
        let open = |reason: Failure| StoreError::Open {
            path: target.clone(),
            reason: reason.0,
        };
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .build()
            .map_err(|e| open(e.into()))?;
        let mut client = pool.get().await.map_err(|e| open(e.into()))?;
        let instance = migrate(&mut client).await.map_err(open)?;
        drop(client);
        Ok(PostgresStore {
            pool,
            instance,
            cap,
        })
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

    fn row(&self, r: &tokio_postgres::Row) -> JobRow {
        let seq: i64 = r.get(0);
        JobRow {
            seq,
            id: id_of(seq, &self.instance),
            owner: r.get(1),
            name: r.get(2),
            priority: r.get(3),
            state: JobState::from_number(i64::from(r.get::<_, i16>(4))),
            puzzles: r.get::<_, i64>(5) as u64,
            solved: r.get::<_, i64>(6) as u64,
            errors: r.get::<_, i64>(7) as u64,
            created_ms: r.get(8),
            finished_ms: r.get(9),
            failure: r.get(10),
            fail_fast: r.get(11),
            any_order: r.get(12),
        }
    }

    async fn rows(
        &self,
        filter: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<JobRow>, StoreError> {
        let client = self.client().await?;
        let sql = format!("SELECT {JOB_COLUMNS} FROM colball_jobs {filter}");
        let rows = client.query(&sql, params).await.map_err(backend)?;
        Ok(rows.iter().map(|r| self.row(r)).collect())
    }
}

/// Creates or migrates the schema and reads (or makes) the store's key,
/// under the migration lock. Refuses a database holding other tables and
/// none of ours, and one migrated by a newer colball.
async fn migrate(client: &mut deadpool_postgres::Object) -> Result<String, Failure> {
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
    for step in &MIGRATIONS[version as usize..] {
        tx.batch_execute(step).await.map_err(e)?;
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
        &[&super::instance_key()],
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

/// Stores `results` of job `job` unless stored already, the job's row
/// locked first (so concurrent writers take turns): the first of each
/// index wins. Whether each was new; none is for a job no longer stored.
async fn put_locked(
    tx: &deadpool_postgres::Transaction<'_>,
    job: i64,
    results: &[(u64, bool, &[u8])],
) -> Result<Vec<bool>, StoreError> {
    let Some(stored) = tx
        .query_opt(
            "SELECT stored FROM colball_jobs WHERE seq = $1 FOR UPDATE",
            &[&job],
        )
        .await
        .map_err(backend)?
    else {
        return Ok(vec![false; results.len()]);
    };
    let stored: i64 = stored.get(0);
    let asked: Vec<i64> = results.iter().map(|r| r.0 as i64).collect();
    let mut have: HashSet<i64> = tx
        .query(
            "SELECT idx FROM colball_results WHERE job = $1 AND idx = ANY($2)",
            &[&job, &asked],
        )
        .await
        .map_err(backend)?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let (mut idx, mut pos, mut body) = (Vec::new(), Vec::new(), Vec::new());
    let (mut solved, mut errors, mut bytes) = (0i64, 0i64, 0i64);
    let mut new = Vec::with_capacity(results.len());
    for &(index, error, encoded) in results {
        let fresh = have.insert(index as i64);
        new.push(fresh);
        if fresh {
            idx.push(index as i64);
            pos.push(stored + idx.len() as i64 - 1);
            body.push(encoded);
            bytes += encoded.len() as i64 + ROW_BYTES;
            if error {
                errors += 1;
            } else {
                solved += 1;
            }
        }
    }
    if !idx.is_empty() {
        tx.execute(
            "INSERT INTO colball_results (job, idx, pos, body) \
             SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::bytea[])",
            &[&job, &idx, &pos, &body],
        )
        .await
        .map_err(backend)?;
        tx.execute(
            "UPDATE colball_jobs SET solved = solved + $2, errors = errors + $3, \
             stored = stored + $4, bytes = bytes + $5 WHERE seq = $1",
            &[&job, &solved, &errors, &(idx.len() as i64), &bytes],
        )
        .await
        .map_err(backend)?;
    }
    Ok(new)
}

#[async_trait]
impl JobStore for PostgresStore {
    fn durable(&self) -> bool {
        true
    }

    fn job_id(&self, seq: i64) -> String {
        id_of(seq, &self.instance)
    }

    fn job_seq(&self, id: &str) -> Option<i64> {
        super::seq_of(id, &self.instance)
    }

    async fn create(&self, job: NewJob) -> Result<i64, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(backend)?;
        self.room(&tx, JOB_BYTES).await?;
        let seq: i64 = tx
            .query_one(
                "INSERT INTO colball_jobs (owner, name, priority, state, created_ms, fail_fast, any_order, bytes) \
                 VALUES ($1, $2, $3, 0, $4, $5, $6, $7) RETURNING seq",
                &[
                    &job.owner,
                    &job.name,
                    &job.priority,
                    &job.created_ms,
                    &job.fail_fast,
                    &job.any_order,
                    &JOB_BYTES,
                ],
            )
            .await
            .map_err(backend)?
            .get(0);
        tx.commit().await.map_err(backend)?;
        Ok(seq)
    }

    async fn add(&self, job: i64, first: u64, entries: Vec<Entry>) -> Result<(), StoreError> {
        let n = entries.len();
        let mut idx = Vec::with_capacity(n);
        let mut ids = Vec::with_capacity(n);
        let mut puzzles: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);
        let mut invalid = Vec::new();
        // The puzzles' bytes; the error results' are counted where they
        // are stored (`put_locked`).
        let mut bytes = 0i64;
        for (i, entry) in entries.iter().enumerate() {
            let index = first + i as u64;
            idx.push(index as i64);
            bytes += ROW_BYTES;
            match entry {
                Entry::Puzzle { id, puzzle } => {
                    bytes += id.len() as i64;
                    ids.push(id.as_str());
                    puzzles.push(Some(pack_puzzle(puzzle).to_vec()));
                }
                Entry::Invalid(r) => {
                    ids.push("");
                    puzzles.push(None);
                    invalid.push((
                        index,
                        v1::PuzzleResult { index, ..r.clone() }.encode_to_vec(),
                    ));
                }
            }
        }
        let errors: Vec<(u64, bool, &[u8])> = invalid
            .iter()
            .map(|(i, e)| (*i, true, e.as_slice()))
            .collect();
        let error_bytes: i64 = errors.iter().map(|e| e.2.len() as i64 + ROW_BYTES).sum();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(backend)?;
        if tx
            .query_opt(
                "SELECT 1 FROM colball_jobs WHERE seq = $1 FOR UPDATE",
                &[&job],
            )
            .await
            .map_err(backend)?
            .is_none()
        {
            return Err(StoreError::NoSuchJob(job));
        }
        self.room(&tx, bytes + error_bytes).await?;
        tx.execute(
            "INSERT INTO colball_puzzles (job, idx, id, puzzle) \
             SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bytea[])",
            &[&job, &idx, &ids, &puzzles],
        )
        .await
        .map_err(backend)?;
        if !errors.is_empty() {
            put_locked(&tx, job, &errors).await?;
        }
        tx.execute(
            "UPDATE colball_jobs SET puzzles = greatest(puzzles, $2), bytes = bytes + $3 WHERE seq = $1",
            &[&job, &((first + n as u64) as i64), &bytes],
        )
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)
    }

    async fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE colball_jobs SET \
               finished_ms = CASE WHEN state = 5 THEN finished_ms \
                 WHEN solved + errors >= puzzles THEN $2 ELSE 0 END, \
               state = CASE WHEN state = 5 THEN 5 \
                 WHEN solved + errors >= puzzles THEN 3 ELSE 2 END \
             WHERE seq = $1 RETURNING {JOB_COLUMNS}"
        );
        let row = client
            .query_opt(&sql, &[&job, &now_ms])
            .await
            .map_err(backend)?
            .ok_or(StoreError::NoSuchJob(job))?;
        Ok(self.row(&row))
    }

    async fn size_bytes(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(held_bytes(&**client).await? as u64)
    }

    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "DELETE FROM colball_jobs WHERE state IN (3, 4, 5) \
                 AND finished_ms > 0 AND finished_ms < $1",
                &[&before_ms],
            )
            .await
            .map_err(backend)?;
        Ok(n as usize)
    }

    async fn delete(&self, job: i64) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM colball_jobs WHERE seq = $1", &[&job])
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError> {
        Ok(self.rows("WHERE seq = $1", &[&job]).await?.pop())
    }

    async fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            "WHERE owner = $1 AND state <> 0 ORDER BY seq DESC",
            &[&owner],
        )
        .await
    }

    async fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        self.rows("WHERE state IN (1, 2) ORDER BY seq", &[]).await
    }

    async fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let finished_ms = if state.finished() { now_ms } else { 0 };
        let client = self.client().await?;
        client
            .execute(
                "UPDATE colball_jobs SET state = $2, failure = $3, finished_ms = $4 WHERE seq = $1",
                &[&job, &(state as i16), &failure, &finished_ms],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let from = after.map_or(0, |a| a as i64 + 1);
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT p.idx, p.id, p.puzzle FROM colball_puzzles p \
                 WHERE p.job = $1 AND p.idx >= $2 AND p.puzzle IS NOT NULL \
                   AND NOT EXISTS (SELECT 1 FROM colball_results r WHERE r.job = p.job AND r.idx = p.idx) \
                 ORDER BY p.idx LIMIT $3",
                &[&job, &from, &(limit as i64)],
            )
            .await
            .map_err(backend)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let puzzle = unpack_puzzle(r.get::<_, &[u8]>(2))?;
                Some((
                    r.get::<_, i64>(0) as u64,
                    EcoString::from(r.get::<_, &str>(1)),
                    puzzle,
                ))
            })
            .collect())
    }

    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        let encoded: Vec<Vec<u8>> = results.iter().map(|(_, r)| r.encode_to_vec()).collect();
        let put = async {
            let more: i64 = encoded.iter().map(|e| e.len() as i64 + ROW_BYTES).sum();
            // By job, in ascending order (so that writers never wait on each
            // other in a circle), each result's place in `results` kept.
            let mut by_job: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
            for (at, (job, _)) in results.iter().enumerate() {
                by_job.entry(*job).or_default().push(at);
            }
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(backend)?;
            self.room(&tx, more).await?;
            let mut new = vec![false; results.len()];
            for (job, at) in &by_job {
                let group: Vec<(u64, bool, &[u8])> = at
                    .iter()
                    .map(|&i| {
                        (
                            results[i].1.index,
                            results[i].1.error().is_some(),
                            encoded[i].as_slice(),
                        )
                    })
                    .collect();
                for (i, fresh) in at.iter().zip(put_locked(&tx, *job, &group).await?) {
                    new[*i] = fresh;
                }
            }
            tx.commit().await.map_err(backend)?;
            Ok(new)
        };
        let outcome = put.await;
        (results, outcome)
    }

    async fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let column = if stored_order { "pos" } else { "idx" };
        let sql = format!(
            "SELECT {column}, body FROM colball_results \
             WHERE job = $1 AND {column} >= $2 AND {column} < $2 + $3 ORDER BY {column}"
        );
        let client = self.client().await?;
        let rows = client
            .query(&sql, &[&job, &(from as i64), &(limit as i64)])
            .await
            .map_err(backend)?;
        // Up to the first missing.
        Ok(rows
            .iter()
            .enumerate()
            .map_while(|(i, r)| {
                (r.get::<_, i64>(0) == from as i64 + i as i64)
                    .then(|| decode(r.get(1)))
                    .flatten()
            })
            .collect())
    }

    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT body FROM colball_results WHERE job = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
                &[&job, &(from as i64), &(limit as i64)],
            )
            .await
            .map_err(backend)?;
        Ok(rows.iter().map_while(|r| decode(r.get(0))).collect())
    }
}
