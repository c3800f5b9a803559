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
//! [`layout::pack`]) and `colball_result_groups` (a row per group of
//! results a writer stored in one window: the place in stored order of its
//! first, how many, its window, its lowest and highest index, and the
//! results' encodings packed, [`layout::pack_results`]). Which of a
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
//! Several coordinators share the store ([`SharedStore`]): each job's
//! puzzles fall in windows of [`WINDOW`] (`colball_windows`, a row per
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
//! regrouped in place ([`regroup`]), those in flight too. Its
//! size (what `--max-store-mib` caps) is counted as the in-memory store
//! counts it, in the jobs' rows: PostgreSQL's own files do not shrink when
//! rows are deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use colball_proto::prost::Message;
use colball_proto::{egress, v1};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use ecow::EcoString;
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;
use tokio_postgres::config::SslMode;
use tokio_postgres::types::ToSql;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::sqlite::layout;
use super::{
    Claim, Entry, Finished, JobRow, JobState, JobStore, NewJob, Pending, Rescued, SharedStore,
    StoreError, ToWrite, WINDOW, Wake, Webhook, id_of,
};

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

/// The schema, one step a version.
const MIGRATIONS: &[&str] = &[
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
];

/// The version whose step moves the jobs of the row-per-puzzle layout
/// into blocks and groups ([`regroup`]), once its tables are made.
const REGROUPED: usize = 5;

/// The keys of the coordinators alive now (a common table expression:
/// their live locks, [`LIVE_CLASS`]).
const LIVE_KEYS: &str = "live AS (SELECT objid::bigint AS key FROM pg_locks \
     WHERE locktype = 'advisory' AND objsubid = 2 AND classid = 1668246626 AND granted \
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// Whether a window may be claimed: nobody holds it, its lease ran out,
/// or its holder is dead (no live lock), as a condition (with [`LIVE_KEYS`]).
const WINDOW_FREE: &str = "holder IS NULL OR lease_until < now() \
     OR holder_key IS NULL OR holder_key NOT IN (SELECT key FROM live)";

const _: () = assert!(LIVE_CLASS == 1668246626);

// The SQL below spells the window's size out.
const _: () = assert!(WINDOW == 8192);

/// An update of `set` on the windows `pick` picks (conditions on
/// `colball_windows`), locked in ascending order first: the order every
/// statement that touches several windows keeps (deletes too, after the
/// jobs' rows), so that they never deadlock.
fn ordered(set: &str, pick: &str) -> String {
    format!(
        "UPDATE colball_windows w SET {set} FROM (SELECT job, win FROM colball_windows \
         WHERE {pick} ORDER BY job, win FOR UPDATE) o WHERE w.job = o.job AND w.win = o.win"
    )
}

/// Whether window `w` of job `j` is done: all its puzzles are there (the
/// job is sealed, or its upload went past the window) and each has its
/// result, as a condition.
const WINDOW_DONE: &str = "(j.state <> 0 OR j.puzzles >= (w.win + 1) * 8192) \
     AND w.filled >= least(j.puzzles - w.win * 8192, 8192)";

/// An update that finishes windows `wins` of job `job` (SQL expressions,
/// the windows an array), each under the claim of its epoch in `epochs`:
/// each window is done if [`WINDOW_DONE`], and let go unless it was
/// claimed again since. Locks the windows in ascending order first, and
/// returns each window finished, whether it is done and whether the claim
/// was still its own (see [`finished_as`]).
fn finish_windows(job: &str, wins: &str, epochs: &str) -> String {
    format!(
        "UPDATE colball_windows w SET done = w.done OR {WINDOW_DONE}, \
           holder = CASE WHEN w.epoch = f.epoch THEN NULL ELSE w.holder END, \
           lease_until = CASE WHEN w.epoch = f.epoch THEN NULL ELSE w.lease_until END \
         FROM colball_jobs j, unnest({wins}::bigint[], {epochs}::bigint[]) f(win, epoch), \
           (SELECT win FROM colball_windows WHERE job = {job} AND win = ANY({wins}) \
            ORDER BY win FOR UPDATE) o \
         WHERE j.seq = w.job AND w.job = {job} AND w.win = f.win AND o.win = f.win \
         RETURNING w.win, w.done, w.epoch = f.epoch AS ours"
    )
}

/// What became of a window [`finish_windows`] returned: `done`, and whether
/// the claim finishing it was still its own.
fn finished_as(done: bool, ours: bool) -> Finished {
    if !ours {
        Finished::Lost
    } else if done {
        Finished::Done
    } else {
        Finished::LetGo
    }
}

const JOB_COLUMNS: &str = "seq, owner, name, priority, state, puzzles, solved, errors, \
     created_ms, finished_ms, failure, fail_fast, any_order, bytes, \
     webhook, webhook_attempts, webhook_next_ms, webhook_delivered";

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
    held: Mutex<HashMap<(i64, u64), Seen>>,
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

/// TLS to the database, used when the URL's `sslmode` is `prefer` or
/// `require`: the server's certificate is always verified (libpq's
/// `verify-full`), against the PEM file `PGSSLROOTCERT` names (libpq's
/// variable), else the web's root authorities.
fn tls_connector() -> Result<MakeRustlsConnect, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match std::env::var_os("PGSSLROOTCERT") {
        Some(path) => {
            let shown = std::path::Path::new(&path).display().to_string();
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
                .and_then(|certs| certs.collect::<Result<_, _>>())
                .map_err(|e| {
                    format!("PGSSLROOTCERT {shown}: not a PEM file of certificates: {e}")
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("PGSSLROOTCERT {shown}: holds no certificate"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
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
        PostgresStore::connect_as(url, None, cap).await
    }

    /// [`Self::connect`] with `password` (from `--store-password-file`)
    /// before the URL's and `PGPASSWORD`.
    pub async fn connect_as(
        url: &str,
        password: Option<&str>,
        cap: Option<u64>,
    ) -> Result<PostgresStore, StoreError> {
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| StoreError::Open {
            path: "the --store URL".into(),
            reason: format!("not a PostgreSQL URL: {e}"),
        })?;
        if let Some(password) = password {
            config.password(password);
        } else if config.get_password().is_none()
            && let Ok(password) = std::env::var("PGPASSWORD")
        {
            config.password(password);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(10));
        }
        // A dead peer is noticed, and a dead leader's lock let go, within
        // about a minute even without a clean close.
        config.keepalives_idle(Duration::from_secs(30));
        let target = describe(&config);
        let open = |reason: Failure| StoreError::Open {
            path: target.clone(),
            reason: reason.0,
        };
        if !url.contains("sslmode=") {
            // As libpq's "disable": a URL that names no sslmode is plain.
            config.ssl_mode(SslMode::Disable);
        }
        let tls = tls_connector().map_err(|reason| StoreError::Open {
            path: target.clone(),
            reason,
        })?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
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
        let wakes = broadcast::channel(1024).0;
        let stop = CancellationToken::new();
        let holder_key = rand::random::<i32>() & i32::MAX;
        let me = Session {
            wakes: wakes.clone(),
            leading: Arc::new(AtomicBool::new(false)),
            alive: Arc::new(AtomicBool::new(false)),
            holder_key,
        };
        let (leading, alive) = (me.leading.clone(), me.alive.clone());
        tokio::spawn(session(config, tls, me, stop.clone()));
        // Its first claims wait for the live lock: give the session a moment.
        let ready = tokio::time::Instant::now() + Duration::from_secs(5);
        while !alive.load(Ordering::Relaxed) && tokio::time::Instant::now() < ready {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(PostgresStore {
            pool,
            instance,
            cap,
            holder: super::holder_name(),
            holder_key,
            alive,
            held: Mutex::default(),
            wakes,
            leading,
            _session: stop.drop_guard(),
        })
    }

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
            bytes: r.get::<_, i64>(13) as u64,
            webhook: r.get::<_, Option<String>>(14).map(|url| Webhook {
                url,
                attempts: r.get::<_, i32>(15) as u32,
                next_ms: r.get(16),
                delivered: r.get(17),
            }),
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

/// What a coordinator's session keeps up: the hints it passes on, whether
/// it leads, whether it holds its live lock, and that lock's key.
struct Session {
    wakes: broadcast::Sender<Wake>,
    leading: Arc<AtomicBool>,
    alive: Arc<AtomicBool>,
    holder_key: i32,
}

/// A coordinator's session with the store, for as long as the store
/// lives: connected again and again (100 ms doubling to 5 s between
/// tries) while the database is unreachable.
async fn session(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    me: Session,
    stop: CancellationToken,
) {
    let mut pause = Duration::from_millis(100);
    loop {
        let began = tokio::time::Instant::now();
        tokio::select! {
            ended = session_once(&config, &tls, &me) => {
                if let Err(e) = ended {
                    tracing::debug!(error = %Failure::from(e).0, "the job store's session ended");
                }
            }
            () = stop.cancelled() => return,
        }
        me.alive.store(false, Ordering::Relaxed);
        if me.leading.swap(false, Ordering::Relaxed) {
            tracing::warn!("no longer leading the job store's maintenance: its session ended");
        }
        if began.elapsed() > Duration::from_secs(10) {
            pause = Duration::from_millis(100);
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One connection of [`session`]: takes its live lock, listens for hints
/// and passes them on, and tries for the leader's lock every
/// [`LEADER_TRY`] until it holds it (then checks that its connection
/// lives). Ends with the connection.
async fn session_once(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    me: &Session,
) -> Result<(), tokio_postgres::Error> {
    let (wakes, leading) = (&me.wakes, &*me.leading);
    let (client, mut connection) = config.connect(tls.clone()).await?;
    let (tx, mut hints) = mpsc::unbounded_channel();
    // The connection is driven here, its notifications passed on.
    let drive = async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = tx.send(n.payload().to_string());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    };
    let work = async {
        let live: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, $2)",
                &[&LIVE_CLASS, &me.holder_key],
            )
            .await?
            .get(0);
        if !live {
            // Another process drew the same key (one chance in 2^31): this
            // one claims nothing until a session of it holds the lock.
            tracing::warn!("the job store's live lock of this coordinator is held by another");
        }
        me.alive.store(live, Ordering::Relaxed);
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        // Whatever was missed while not listening: look again.
        let _ = wakes.send(Wake::Jobs);
        let mut tick = tokio::time::interval(LEADER_TRY);
        loop {
            tokio::select! {
                hint = hints.recv() => match hint.as_deref().and_then(|h| parse_hint(h, me.holder_key)) {
                    Some(wake) => { let _ = wakes.send(wake); }
                    None if hint.is_none() => return Ok(()),
                    None => {}
                },
                _ = tick.tick() => {
                    if leading.load(Ordering::Relaxed) {
                        client.simple_query("SELECT 1").await?;
                    } else {
                        let got: bool = client
                            .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
                            .await?
                            .get(0);
                        if got {
                            leading.store(true, Ordering::Relaxed);
                            tracing::info!("leading the job store's maintenance");
                        }
                    }
                }
            }
        }
    };
    tokio::select! {
        ended = drive => ended,
        ended = work => ended,
    }
}

/// The payload of a hint that a job appeared or ended, from the
/// coordinator whose live key is `origin`.
fn jobs_hint(origin: i32) -> String {
    format!("jobs:{origin}")
}

/// The payload of a hint that results of job `job` were stored in its
/// windows `wins` (not empty) by the coordinator whose live key is
/// `origin`.
fn results_hint(job: i64, wins: &[i64], origin: i32) -> String {
    let first = wins.iter().min().copied().unwrap_or(0);
    let last = wins.iter().max().copied().unwrap_or(0);
    format!("r{job}:{first}-{last}:{origin}")
}

/// A hint's payload ([`jobs_hint`], [`results_hint`]) as a wake for the
/// coordinator whose live key is `me`: none for its own hints, nor for a
/// payload it cannot read. A payload without windows or origin (`jobs`,
/// `r` and a job's number) is read as every window's, from another.
fn parse_hint(payload: &str, me: i32) -> Option<Wake> {
    let mine = |origin: Option<&str>| origin.is_some_and(|o| o.parse() == Ok(me));
    if let Some(rest) = payload.strip_prefix("jobs") {
        let origin = rest.strip_prefix(':');
        return (rest.is_empty() || origin.is_some() && !mine(origin)).then_some(Wake::Jobs);
    }
    let mut parts = payload.strip_prefix('r')?.splitn(3, ':');
    let job = parts.next()?.parse().ok()?;
    let (first, last) = match parts.next() {
        None => (0, u64::MAX),
        Some(wins) => {
            let (first, last) = wins.split_once('-')?;
            (first.parse().ok()?, last.parse().ok()?)
        }
    };
    if mine(parts.next()) || first > last {
        return None;
    }
    Some(Wake::Results { job, first, last })
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

/// Whether index `at` of a window has a result, by the window's bitmap.
fn has(got: &[u8], at: u64) -> bool {
    got.get((at / 8) as usize)
        .is_some_and(|byte| byte >> (at % 8) & 1 == 1)
}

/// Marks index `at` of a window as having a result in its bitmap.
fn mark(got: &mut Vec<u8>, at: u64) {
    let byte = (at / 8) as usize;
    if got.len() <= byte {
        got.resize(WINDOW / 8, 0);
    }
    got[byte] |= 1 << (at % 8);
}

/// Up to `limit` puzzles of window `win` of `job`, from index `from` on,
/// that have no result yet (by `got`, its bitmap, when known), in index
/// order.
async fn window_pending(
    client: &impl tokio_postgres::GenericClient,
    job: i64,
    win: u64,
    from: u64,
    limit: usize,
    got: Option<Vec<u8>>,
) -> Result<Vec<Pending>, StoreError> {
    let got: Vec<u8> = match got {
        Some(got) => got,
        None => client
            .query_opt(
                "SELECT got FROM colball_windows WHERE job = $1 AND win = $2",
                &[&job, &(win as i64)],
            )
            .await
            .map_err(backend)?
            .map_or_else(Vec::new, |r| r.get(0)),
    };
    let first = win * WINDOW as u64;
    let blocks = client
        .query(
            "SELECT first, puzzles, ids FROM colball_puzzle_blocks \
             WHERE job = $1 AND first >= $2 AND first < $3 ORDER BY first",
            &[&job, &(first as i64), &((first + WINDOW as u64) as i64)],
        )
        .await
        .map_err(backend)?;
    Ok(unpack_pending(
        blocks
            .iter()
            .map(|b| (b.get::<_, i64>(0) as u64, b.get(1), b.get(2))),
        &got,
        first,
        from,
        limit,
    ))
}

/// The puzzles of window `first`'s `blocks` (each its first index, packed
/// puzzles and ids) from index `from` that have no result by its bitmap
/// `got` (nor an error stored with them), up to `limit`.
fn unpack_pending<'b>(
    blocks: impl Iterator<Item = (u64, &'b [u8], &'b [u8])>,
    got: &[u8],
    first: u64,
    from: u64,
    limit: usize,
) -> Vec<Pending> {
    let mut out = Vec::new();
    for (start, puzzles, ids) in blocks {
        let entries = layout::unpack(puzzles, ids);
        for (index, entry) in (start..).zip(entries) {
            if index < from || has(got, index - first) {
                continue;
            }
            // None: an entry stored with its error result (so not here).
            if let Some((id, puzzle)) = entry {
                out.push((index, id, puzzle));
                if out.len() == limit {
                    return out;
                }
            }
        }
    }
    out
}

fn decode(bytes: &[u8]) -> Option<egress::PuzzleResult> {
    egress::PuzzleResult::decode(bytes).ok()
}

/// A result to store: its index, whether it is an error, its encoding and
/// its fence (the epoch of its window's claim it was solved under).
type Fenced<'a> = (u64, bool, &'a [u8], Option<u64>);

/// Stores `results` of job `job` unless stored already, the job's row
/// locked first (so concurrent writers take turns), then its windows'
/// rows: the first of each index wins, by the window's bitmap. A fenced
/// result is stored only while its fence is its window's epoch, read under
/// that lock, which holds until the commit: a claim of the window (which
/// raises the epoch) waits for the results being written and then sees
/// them stored, and once it is made the older claim's results are refused.
/// The new results go in as a group a window, in one statement with the
/// windows' bitmaps and the job's counts. Whether each was new; none is
/// for a job no longer stored, nor for an index beyond its upload.
async fn put_locked(
    tx: &deadpool_postgres::Transaction<'_>,
    job: i64,
    results: &[Fenced<'_>],
    seen: &mut Vec<((i64, u64), Seen)>,
    origin: i32,
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
    let wins: Vec<i64> = results
        .iter()
        .map(|r| (r.0 / WINDOW as u64) as i64)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Each window's epoch and bitmap, and its new results in order.
    let mut windows: BTreeMap<u64, (u64, Vec<u8>, Group)> = tx
        .query(
            "SELECT win, epoch, got FROM colball_windows WHERE job = $1 AND win = ANY($2) \
             ORDER BY win FOR UPDATE",
            &[&job, &wins],
        )
        .await
        .map_err(backend)?
        .iter()
        .map(|r| {
            let win = r.get::<_, i64>(0) as u64;
            (win, (r.get::<_, i64>(1) as u64, r.get(2), Vec::new()))
        })
        .collect();
    let mut counts = Counts::default();
    let mut new = Vec::with_capacity(results.len());
    // The windows this write's holder fences (its own claims).
    let mut own = BTreeSet::new();
    for &(index, error, encoded, fence) in results {
        let win = index / WINDOW as u64;
        let at = index % WINDOW as u64;
        let fresh = windows.get_mut(&win).is_some_and(|(epoch, got, group)| {
            if fence == Some(*epoch) {
                own.insert(win);
            }
            let fresh = fence.is_none_or(|f| f == *epoch) && !has(got, at);
            if fresh {
                mark(got, at);
                group.push((index, encoded));
            }
            fresh
        });
        new.push(fresh);
        if fresh {
            counts.add(error, encoded);
        }
    }
    let mut rows = GroupRows::default();
    let mut next = stored;
    for (w, (epoch, bits, group)) in windows {
        if own.contains(&w) {
            // Its holder's: as it is stored once this commits.
            seen.push((
                (job, w),
                Seen {
                    epoch,
                    got: bits.clone(),
                },
            ));
        }
        if !group.is_empty() {
            next = rows.push(next, w, bits, &group);
        }
    }
    let Counts {
        solved,
        errors,
        bytes,
    } = counts;
    let GroupRows {
        pos,
        n,
        win,
        lo,
        hi,
        got,
        body,
    } = rows;
    if !pos.is_empty() {
        tx.execute(
            "WITH g AS ( \
               INSERT INTO colball_result_groups (job, pos, n, win, lo, hi, body) \
               SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::bigint[], $5::bigint[], \
                 $6::bigint[], $7::bytea[])), \
             w AS ( \
               UPDATE colball_windows w SET got = u.got, filled = w.filled + u.n \
               FROM unnest($4::bigint[], $8::bytea[], $3::int[]) AS u(win, got, n) \
               WHERE w.job = $1 AND w.win = u.win), \
             j AS ( \
               UPDATE colball_jobs SET solved = solved + $9, errors = errors + $10, \
                 stored = $11, bytes = bytes + $12 WHERE seq = $1 RETURNING seq) \
             SELECT pg_notify($13, $14) FROM j",
            &[
                &job,
                &pos,
                &n,
                &win,
                &lo,
                &hi,
                &body,
                &got,
                &solved,
                &errors,
                &next,
                &bytes,
                &CHANNEL,
                &results_hint(job, &win, origin),
            ],
        )
        .await
        .map_err(backend)?;
    }
    Ok(new)
}

/// Results of one window as a group holds them: (index, encoded result).
type Group<'a> = Vec<(u64, &'a [u8])>;

/// What a write adds to its job's counts.
#[derive(Default)]
struct Counts {
    solved: i64,
    errors: i64,
    bytes: i64,
}

impl Counts {
    fn add(&mut self, error: bool, encoded: &[u8]) {
        self.bytes += encoded.len() as i64 + ROW_BYTES;
        if error {
            self.errors += 1;
        } else {
            self.solved += 1;
        }
    }
}

/// The result groups a write adds, as the arrays its statement takes
/// (`colball_result_groups` columns, and each window's new bitmap).
#[derive(Default)]
struct GroupRows {
    pos: Vec<i64>,
    n: Vec<i32>,
    win: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    got: Vec<Vec<u8>>,
    body: Vec<Vec<u8>>,
}

impl GroupRows {
    /// Adds window `w`'s `group` (not empty) at position `pos`, its bitmap
    /// becoming `got`; the position after it.
    fn push(&mut self, pos: i64, w: u64, got: Vec<u8>, group: &Group) -> i64 {
        self.pos.push(pos);
        self.n.push(group.len() as i32);
        self.win.push(w as i64);
        self.lo
            .push(group.iter().map(|g| g.0).min().unwrap_or(0) as i64);
        self.hi
            .push(group.iter().map(|g| g.0).max().unwrap_or(0) as i64);
        self.got.push(got);
        self.body.push(layout::pack_results(group.iter().copied()));
        pos + group.len() as i64
    }
}

/// A window as its holder last saw it stored: the epoch of its claim and
/// which indices have a result.
#[derive(Clone, Debug)]
struct Seen {
    epoch: u64,
    got: Vec<u8>,
}

/// Stores `results` of job `job` in one statement, if each is fenced by
/// the claim `held` knows its window by and the windows are stored as
/// `held` saw them (epoch and bitmap, compared under the rows' locks, the
/// job's row locked first): a holder writing its own windows. The new
/// windows are kept in `held`. Whether each was new, or None (nothing
/// changed) when a window is not as seen: to be written by [`put_locked`].
async fn put_seen(
    client: &impl tokio_postgres::GenericClient,
    held: &Mutex<HashMap<(i64, u64), Seen>>,
    job: i64,
    results: &[Fenced<'_>],
    origin: i32,
) -> Result<Option<Vec<bool>>, StoreError> {
    let mut windows: BTreeMap<u64, (Seen, Vec<u8>, Group)> = BTreeMap::new();
    {
        let held = held.lock().unwrap_or_else(|e| e.into_inner());
        for &(index, _, _, fence) in results {
            let win = index / WINDOW as u64;
            match held.get(&(job, win)) {
                Some(seen) if fence == Some(seen.epoch) => {
                    windows
                        .entry(win)
                        .or_insert_with(|| (seen.clone(), seen.got.clone(), Vec::new()));
                }
                _ => return Ok(None),
            }
        }
    }
    let mut counts = Counts::default();
    let mut new = Vec::with_capacity(results.len());
    for &(index, error, encoded, _) in results {
        let at = index % WINDOW as u64;
        let (_, got, group) = windows
            .get_mut(&(index / WINDOW as u64))
            .expect("seen above");
        let fresh = !has(got, at);
        if fresh {
            mark(got, at);
            group.push((index, encoded));
            counts.add(error, encoded);
        }
        new.push(fresh);
    }
    windows.retain(|_, (_, _, group)| !group.is_empty());
    if windows.is_empty() {
        // Each is stored already: the bitmap only grows.
        return Ok(Some(new));
    }
    // Positions from the job's stored count, which the statement adds.
    let (mut rows, mut next) = (GroupRows::default(), 0i64);
    let (mut epoch, mut old) = (vec![], vec![]);
    for (w, (seen, bits, group)) in &windows {
        next = rows.push(next, *w, bits.clone(), group);
        epoch.push(seen.epoch as i64);
        old.push(seen.got.clone());
    }
    let Counts {
        solved,
        errors,
        bytes,
    } = counts;
    let GroupRows {
        pos: off,
        n,
        win,
        lo,
        hi,
        got,
        body,
    } = rows;
    let ok: bool = client
        .query_one(
            "WITH j AS MATERIALIZED ( \
               SELECT seq, stored FROM colball_jobs WHERE seq = $1 FOR UPDATE), \
             w AS MATERIALIZED ( \
               SELECT win, epoch, got FROM colball_windows \
               WHERE job = $1 AND win = ANY($4) AND EXISTS (SELECT 1 FROM j) \
               ORDER BY win FOR UPDATE), \
             ok AS MATERIALIZED ( \
               SELECT count(*) = cardinality($4::bigint[]) AS ok FROM w \
               JOIN unnest($4::bigint[], $9::bigint[], $10::bytea[]) AS u(win, epoch, old) \
                 ON w.win = u.win AND w.epoch = u.epoch AND w.got = u.old), \
             g AS ( \
               INSERT INTO colball_result_groups (job, pos, n, win, lo, hi, body) \
               SELECT $1, j.stored + u.off, u.n, u.win, u.lo, u.hi, u.body FROM j, ok, \
                 unnest($2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], \
                   $7::bytea[]) AS u(off, n, win, lo, hi, body) \
               WHERE ok.ok), \
             wu AS ( \
               UPDATE colball_windows w SET got = u.got, filled = w.filled + u.n \
               FROM ok, unnest($4::bigint[], $8::bytea[], $3::int[]) AS u(win, got, n) \
               WHERE ok.ok AND w.job = $1 AND w.win = u.win), \
             ju AS ( \
               UPDATE colball_jobs j SET solved = j.solved + $11, errors = j.errors + $12, \
                 stored = j.stored + $13, bytes = j.bytes + $14 \
               FROM ok WHERE ok.ok AND j.seq = $1 RETURNING j.seq) \
             SELECT ok.ok, (SELECT count(pg_notify($15, $16)) FROM ju) FROM ok",
            &[
                &job,
                &off,
                &n,
                &win,
                &lo,
                &hi,
                &body,
                &got,
                &epoch,
                &old,
                &solved,
                &errors,
                &next,
                &bytes,
                &CHANNEL,
                &results_hint(job, &win, origin),
            ],
        )
        .await
        .map_err(backend)?
        .get(0);
    let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
    for (w, (seen, bits, _)) in windows {
        if ok {
            held.insert(
                (job, w),
                Seen {
                    epoch: seen.epoch,
                    got: bits,
                },
            );
        } else {
            held.remove(&(job, w));
        }
    }
    Ok(ok.then_some(new))
}

/// Moves the jobs of the row-per-puzzle layout (`colball_puzzles`, a row
/// per puzzle, and `colball_results`, a row per result) into blocks and
/// groups, job by job, window by window, and drops the old tables. Run
/// once, by the migration to [`REGROUPED`], in its transaction: a job in
/// flight goes on from where it was.
async fn regroup(tx: &deadpool_postgres::Transaction<'_>) -> Result<(), StoreError> {
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
            let entry = match r.get::<_, Option<&[u8]>>(2).and_then(layout::unpack_puzzle) {
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
            let (puzzles, ids) = layout::pack(entries);
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
                    &layout::pack_results(group),
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

#[async_trait]
impl JobStore for PostgresStore {
    /// Up to 16,384 results a write, gathered for up to 50 ms under load:
    /// a write costs the shared database a round trip and its CPU, and
    /// every coordinator's writes land on it.
    fn write_pace(&self) -> (usize, Duration) {
        (16_384, Duration::from_millis(50))
    }

    fn durable(&self) -> bool {
        true
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
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
                "INSERT INTO colball_jobs (owner, name, priority, state, created_ms, fail_fast, \
                   any_order, bytes, uploader, upload_until, webhook) \
                 VALUES ($1, $2, $3, 0, $4, $5, $6, $7, $8, now() + interval '1 minute', $9) \
                 RETURNING seq",
                &[
                    &job.owner,
                    &job.name,
                    &job.priority,
                    &job.created_ms,
                    &job.fail_fast,
                    &job.any_order,
                    &JOB_BYTES,
                    &self.holder,
                    &job.webhook,
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
        let mut invalid = Vec::new();
        // The puzzles' bytes; the error results' are counted where they
        // are stored (`put_locked`).
        let mut bytes = 0i64;
        for (i, entry) in entries.iter().enumerate() {
            let index = first + i as u64;
            bytes += ROW_BYTES;
            match entry {
                Entry::Puzzle { id, .. } => bytes += id.len() as i64,
                Entry::Invalid(r) => invalid.push((
                    index,
                    v1::PuzzleResult { index, ..r.clone() }.encode_to_vec(),
                )),
            }
        }
        // A block per window the chunk reaches into.
        let (mut starts, mut puzzles, mut ids) = (vec![], vec![], vec![]);
        let mut at = 0;
        while at < n {
            let index = first + at as u64;
            let room = WINDOW - (index % WINDOW as u64) as usize;
            let part = &entries[at..n.min(at + room)];
            let (p, i) = layout::pack(part);
            starts.push(index as i64);
            puzzles.push(p);
            ids.push(i);
            at += part.len();
        }
        // Invalid puzzles' results come with the upload, under no claim.
        let errors: Vec<Fenced<'_>> = invalid
            .iter()
            .map(|(i, e)| (*i, true, e.as_slice(), None))
            .collect();
        let error_bytes: i64 = errors.iter().map(|e| e.2.len() as i64 + ROW_BYTES).sum();
        let (starts, ids, puzzles, errors) = (&starts, &ids, &puzzles, &errors);
        let w = WINDOW as u64;
        let (win_first, win_last) = (
            (first / w) as i64,
            ((first + n as u64).saturating_sub(1) / w) as i64,
        );
        let (end, uncapped) = ((first + n as u64) as i64, self.cap.is_none());
        resolving(|| async move {
            let mut client = self.client().await?;
            if uncapped && n > 0 && errors.is_empty() {
                // Valid puzzles under no cap: one statement, the job's row
                // locked first.
                let found: i64 = client
                    .query_one(
                        "WITH j AS MATERIALIZED ( \
                           SELECT seq FROM colball_jobs WHERE seq = $1 FOR UPDATE), \
                         b AS ( \
                           INSERT INTO colball_puzzle_blocks (job, first, puzzles, ids) \
                           SELECT $1, u.* FROM j, \
                             unnest($2::bigint[], $3::bytea[], $4::bytea[]) AS u), \
                         w AS ( \
                           INSERT INTO colball_windows (job, win) \
                           SELECT $1, generate_series($5::bigint, $6::bigint) FROM j \
                           ON CONFLICT DO NOTHING), \
                         u AS ( \
                           UPDATE colball_jobs c SET puzzles = greatest(c.puzzles, $7), \
                             bytes = c.bytes + $8 FROM j WHERE c.seq = j.seq) \
                         SELECT count(*) FROM j",
                        &[
                            &job, starts, puzzles, ids, &win_first, &win_last, &end, &bytes,
                        ],
                    )
                    .await
                    .map_err(backend)?
                    .get(0);
                return if found == 0 {
                    Err(StoreError::NoSuchJob(job))
                } else {
                    Ok(())
                };
            }
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
            if n > 0 {
                tx.execute(
                    "WITH b AS ( \
                       INSERT INTO colball_puzzle_blocks (job, first, puzzles, ids) \
                       SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::bytea[])) \
                     INSERT INTO colball_windows (job, win) \
                     SELECT $1, generate_series($5::bigint, $6::bigint) ON CONFLICT DO NOTHING",
                    &[&job, starts, puzzles, ids, &win_first, &win_last],
                )
                .await
                .map_err(backend)?;
            }
            if !errors.is_empty() {
                put_locked(&tx, job, errors, &mut Vec::new(), self.holder_key).await?;
            }
            tx.execute(
                "UPDATE colball_jobs SET puzzles = greatest(puzzles, $2), bytes = bytes + $3 \
                 WHERE seq = $1",
                &[&job, &end, &bytes],
            )
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)
        })
        .await
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
        self.hint_jobs(&client).await?;
        Ok(self.row(&row))
    }

    async fn size_bytes(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(held_bytes(&**client).await? as u64)
    }

    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        let pick = "state IN (3, 4, 5) AND finished_ms > 0 AND finished_ms < $1";
        Ok(self.delete_picked(pick, &[&before_ms], true).await? as usize)
    }

    async fn delete(&self, job: i64) -> Result<(), StoreError> {
        self.forget(|&(j, _)| j == job);
        self.delete_picked("seq = $1", &[&job], false).await?;
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

    async fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            "WHERE webhook IS NOT NULL AND webhook_next_ms < 9223372036854775807 \
               AND webhook_next_ms <= $1 AND state IN (3, 4, 5) \
             ORDER BY webhook_next_ms, seq LIMIT $2",
            &[&now_ms, &(limit as i64)],
        )
        .await
    }

    async fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError> {
        let attempts = i32::try_from(attempts).unwrap_or(i32::MAX);
        self.client()
            .await?
            .execute(
                "UPDATE colball_jobs SET webhook_attempts = $2, webhook_next_ms = $3, \
                   webhook_delivered = $4 WHERE seq = $1 AND webhook IS NOT NULL",
                &[&job, &attempts, &next_ms, &delivered],
            )
            .await
            .map_err(backend)?;
        Ok(())
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
        let n = client
            .execute(
                "UPDATE colball_jobs SET state = $2, failure = $3, finished_ms = $4 \
                 WHERE seq = $1 AND state NOT IN (3, 4, 5)",
                &[&job, &(state as i16), &failure, &finished_ms],
            )
            .await
            .map_err(backend)?;
        if n > 0 && state.finished() {
            self.hint_jobs(&client).await?;
        }
        Ok(())
    }

    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let from = after.map_or(0, |a| a + 1);
        let client = self.client().await?;
        let Some(row) = client
            .query_opt("SELECT puzzles FROM colball_jobs WHERE seq = $1", &[&job])
            .await
            .map_err(backend)?
        else {
            return Ok(Vec::new());
        };
        let puzzles = row.get::<_, i64>(0) as u64;
        let mut out = Vec::new();
        let mut win = from / WINDOW as u64;
        while out.len() < limit && win * (WINDOW as u64) < puzzles {
            out.extend(window_pending(&**client, job, win, from, limit - out.len(), None).await?);
            win += 1;
        }
        Ok(out)
    }

    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        let encoded: Vec<Vec<u8>> = results.iter().map(|w| w.result.encode_to_vec()).collect();
        let put = async {
            let more: i64 = encoded.iter().map(|e| e.len() as i64 + ROW_BYTES).sum();
            // By job, in ascending order (so that writers never wait on each
            // other in a circle), each result's place in `results` kept.
            let mut by_job: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
            for (at, w) in results.iter().enumerate() {
                by_job.entry(w.job).or_default().push(at);
            }
            let fenced = |at: &[usize]| -> Vec<Fenced<'_>> {
                at.iter()
                    .map(|&i| {
                        let w = &results[i];
                        (
                            w.result.index,
                            w.result.error().is_some(),
                            encoded[i].as_slice(),
                            w.fence,
                        )
                    })
                    .collect()
            };
            let mut client = self.client().await?;
            let mut new = vec![false; results.len()];
            if self.cap.is_none() {
                // A holder's own windows, each job in a statement.
                let mut rest = BTreeMap::new();
                for (job, at) in by_job {
                    match put_seen(&**client, &self.held, job, &fenced(&at), self.holder_key)
                        .await?
                    {
                        Some(fresh) => at.iter().zip(fresh).for_each(|(i, f)| new[*i] = f),
                        None => {
                            rest.insert(job, at);
                        }
                    }
                }
                by_job = rest;
            }
            if by_job.is_empty() {
                return Ok(new);
            }
            let tx = client.transaction().await.map_err(backend)?;
            self.room(&tx, more).await?;
            let mut seen = Vec::new();
            for (job, at) in &by_job {
                let fresh = put_locked(&tx, *job, &fenced(at), &mut seen, self.holder_key).await?;
                at.iter().zip(fresh).for_each(|(i, f)| new[*i] = f);
            }
            tx.commit().await.map_err(backend)?;
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(seen);
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
        let client = self.client().await?;
        let end = from.saturating_add(limit as u64).min(i64::MAX as u64);
        // What is stored in [from, end) by index or place, as they come.
        let mut found: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        if stored_order {
            // From the group holding place `from` on.
            let rows = client
                .query(
                    "SELECT pos, body FROM colball_result_groups WHERE job = $1 \
                       AND pos >= coalesce((SELECT max(pos) FROM colball_result_groups \
                                            WHERE job = $1 AND pos <= $2), 0) \
                       AND pos < $3 ORDER BY pos",
                    &[&job, &(from as i64), &(end as i64)],
                )
                .await
                .map_err(backend)?;
            for r in &rows {
                let first = r.get::<_, i64>(0) as u64;
                for (place, (_, bytes)) in (first..).zip(layout::unpack_results(r.get(1))) {
                    if (from..end).contains(&place) {
                        found.insert(place, bytes.to_vec());
                    }
                }
            }
        } else {
            let w = WINDOW as u64;
            let rows = client
                .query(
                    "SELECT body FROM colball_result_groups WHERE job = $1 \
                       AND win >= $2 AND win <= $3 AND hi >= $4 AND lo < $5",
                    &[
                        &job,
                        &((from / w) as i64),
                        &((end.saturating_sub(1) / w) as i64),
                        &(from as i64),
                        &(end as i64),
                    ],
                )
                .await
                .map_err(backend)?;
            for r in &rows {
                for (index, bytes) in layout::unpack_results(r.get(0)) {
                    if (from..end).contains(&index) {
                        found.insert(index, bytes.to_vec());
                    }
                }
            }
        }
        // Up to the first missing.
        Ok((from..)
            .zip(found)
            .map_while(|(want, (at, bytes))| (at == want).then(|| decode(&bytes)).flatten())
            .collect())
    }

    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let client = self.client().await?;
        // Windows `span` at a time from `from`'s, until `limit` are found
        // or no group is left.
        let span = (limit / WINDOW + 1) as i64;
        let mut win = (from / WINDOW as u64) as i64;
        let mut found: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        loop {
            // The groups of the first `span` windows from `win` that have
            // any result from `from` on.
            let rows = client
                .query(
                    "SELECT win, body FROM colball_result_groups WHERE job = $1 AND hi >= $3 \
                       AND win IN (SELECT DISTINCT win FROM colball_result_groups \
                                   WHERE job = $1 AND win >= $2 AND hi >= $3 \
                                   ORDER BY win LIMIT $4)",
                    &[&job, &win, &(from as i64), &span],
                )
                .await
                .map_err(backend)?;
            let mut windows = BTreeSet::new();
            for r in &rows {
                windows.insert(r.get::<_, i64>(0));
                for (index, bytes) in layout::unpack_results(r.get(1)) {
                    if index >= from {
                        found.insert(index, bytes.to_vec());
                    }
                }
            }
            match windows.last() {
                Some(last) if found.len() < limit && windows.len() as i64 == span => win = last + 1,
                _ => break,
            }
        }
        Ok(found
            .into_values()
            .take(limit)
            .map_while(|bytes| decode(&bytes))
            .collect())
    }
}

#[async_trait]
impl SharedStore for PostgresStore {
    async fn finish_and_claim(
        &self,
        job: i64,
        holder: &str,
        lease: Duration,
        finishing: &[(u64, u64)],
    ) -> Result<(Claim, Vec<(u64, Finished)>), StoreError> {
        let mut finishing = finishing.to_vec();
        finishing.sort_unstable();
        self.forget(|&(j, w)| j == job && finishing.iter().any(|f| f.0 == w));
        let (wins, epochs): (Vec<i64>, Vec<i64>) =
            finishing.iter().map(|&(w, e)| (w as i64, e as i64)).unzip();
        if !self.alive.load(Ordering::Relaxed) {
            // Until the session holds the live lock, a claim would look
            // dead to the others at once.
            let mut finished = Vec::new();
            for &(win, epoch) in &finishing {
                finished.push((win, self.finish(job, win, epoch).await?));
            }
            return Ok((Claim::Busy, finished));
        }
        // The windows of the job this process knows it holds. Any other
        // the store says it holds is one it lost track of (a claim whose
        // answer was lost with its connection, a release that failed): its
        // own to claim again, else nobody would (its leases are renewed).
        let known: Vec<i64> = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|&&(j, _)| j == job)
            .map(|&(_, w)| w as i64)
            .collect();
        let client = self.client().await?;
        let lease = lease.as_secs_f64();
        let key = i64::from(self.holder_key);
        // One statement: the finished windows (locked in ascending order),
        // the claim of the first free window among the others, and either
        // its puzzles' blocks or, with none free, whether the job has all
        // its results and how many of its windows are still open. Rows:
        // kind 0 the claim, 1 a block of it, 2 a window finished, 3 the job.
        let sql = format!(
            "WITH {LIVE_KEYS}, \
             finishing AS ({}), \
             free AS ( \
               SELECT win, holder FROM colball_windows \
               WHERE job = $1 AND NOT done AND win <> ALL($7) \
                 AND ({WINDOW_FREE} OR (holder = $2 AND win <> ALL($8))) \
               ORDER BY win LIMIT 1 FOR UPDATE SKIP LOCKED), \
             claimed AS ( \
               UPDATE colball_windows w SET holder = $2, holder_key = $4, epoch = w.epoch + 1, \
                 lease_until = now() + make_interval(secs => $3) \
               FROM free WHERE w.job = $1 AND w.win = free.win \
               RETURNING w.win, free.holder, w.epoch, w.got) \
             SELECT 0, win, holder, epoch, NULL::boolean, NULL::boolean, got, NULL::bytea \
               FROM claimed \
             UNION ALL \
             SELECT 1, b.first, NULL, NULL, NULL, NULL, b.puzzles, b.ids \
               FROM colball_puzzle_blocks b, claimed c \
               WHERE b.job = $1 AND b.first >= c.win * 8192 AND b.first < (c.win + 1) * 8192 \
             UNION ALL \
             SELECT 2, win, NULL, NULL, done, ours, NULL, NULL FROM finishing \
             UNION ALL \
             SELECT 3, \
               (SELECT count(*) FROM colball_windows WHERE job = $1 AND NOT done AND win <> ALL($5)) \
                 + (SELECT count(*) FROM finishing WHERE NOT done), \
               NULL, NULL, \
               (SELECT state IN (1, 2) AND solved + errors >= puzzles FROM colball_jobs \
                WHERE seq = $1), \
               NULL, NULL, NULL \
             WHERE NOT EXISTS (SELECT 1 FROM claimed) \
             ORDER BY 1, 2",
            finish_windows("$1", "$5", "$6")
        );
        // A window of `finishing` not stored any more (its job is gone) is
        // done; none of them is claimed, in the first try or the next.
        let mut finished: Vec<(u64, Finished)> = finishing
            .iter()
            .map(|&(w, _)| (w, Finished::Done))
            .collect();
        let but = wins.clone();
        let (mut wins, mut epochs) = (wins, epochs);
        loop {
            let rows = client
                .query(
                    &sql,
                    &[&job, &holder, &lease, &key, &wins, &epochs, &but, &known],
                )
                .await
                .map_err(backend)?;
            let mut claimed = None;
            let mut blocks: Vec<(u64, &[u8], &[u8])> = Vec::new();
            let mut open = None;
            for r in &rows {
                match r.get::<_, i32>(0) {
                    0 => claimed = Some(r),
                    1 => blocks.push((r.get::<_, i64>(1) as u64, r.get(6), r.get(7))),
                    2 => {
                        let win = r.get::<_, i64>(1) as u64;
                        if let Some(f) = finished.iter_mut().find(|f| f.0 == win) {
                            f.1 = finished_as(r.get(4), r.get(5));
                        }
                    }
                    _ => open = Some((r.get::<_, i64>(1), r.get::<_, Option<bool>>(4))),
                }
            }
            (wins, epochs) = (Vec::new(), Vec::new());
            let Some(claimed) = claimed else {
                let (open, solved) = open.unwrap_or((0, None));
                if open == 0 {
                    return Ok((Claim::Done, finished));
                }
                // Each puzzle has its result (a window's holder may have
                // died after storing them, before it marked the window
                // done): the windows are all done.
                if solved == Some(true) {
                    client
                        .execute(
                            &ordered(
                                "done = true, holder = NULL, lease_until = NULL",
                                "job = $1 AND NOT done",
                            ),
                            &[&job],
                        )
                        .await
                        .map_err(backend)?;
                    return Ok((Claim::Done, finished));
                }
                return Ok((Claim::Busy, finished));
            };
            let win = claimed.get::<_, i64>(1) as u64;
            let before: Option<String> = claimed.get(2);
            let epoch = claimed.get::<_, i64>(3) as u64;
            let got: Vec<u8> = claimed.get(6);
            let first = win * WINDOW as u64;
            let pending = unpack_pending(blocks.into_iter(), &got, first, first, WINDOW);
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((job, win), Seen { epoch, got });
            if !pending.is_empty() {
                let claim = Claim::Window {
                    win,
                    epoch,
                    pending,
                    took_over: before.is_some_and(|b| b != holder),
                };
                return Ok((claim, finished));
            }
            // Nothing to solve in it: done (then the next), or (its upload
            // not there yet) let go and waited for.
            if self.finish(job, win, epoch).await? != Finished::Done {
                return Ok((Claim::Busy, finished));
            }
        }
    }

    async fn finish(&self, job: i64, win: u64, epoch: u64) -> Result<Finished, StoreError> {
        self.forget(|&(j, w)| (j, w) == (job, win));
        let client = self.client().await?;
        let row = client
            .query_opt(
                &finish_windows("$1", "$2", "$3"),
                &[&job, &vec![win as i64], &vec![epoch as i64]],
            )
            .await
            .map_err(backend)?;
        // A window of a job gone is done.
        Ok(row.map_or(Finished::Done, |r| finished_as(r.get(1), r.get(2))))
    }

    async fn release(&self, job: i64, holder: &str) -> Result<(), StoreError> {
        self.forget(|&(j, _)| j == job);
        let sql = ordered(
            "holder = NULL, lease_until = NULL",
            "job = $1 AND holder = $2 AND NOT done",
        );
        resolving(|| async {
            let client = self.client().await?;
            client
                .execute(&sql, &[&job, &holder])
                .await
                .map_err(backend)
        })
        .await?;
        Ok(())
    }

    async fn renew(&self, holder: &str, lease: Duration) -> Result<u64, StoreError> {
        let lease = lease.as_secs_f64();
        let uploads = "UPDATE colball_jobs j SET upload_until = now() + make_interval(secs => $2) \
             FROM (SELECT seq FROM colball_jobs WHERE uploader = $1 AND state = 0 \
                   ORDER BY seq FOR UPDATE) o WHERE j.seq = o.seq";
        let windows = ordered(
            "lease_until = now() + make_interval(secs => $2)",
            "holder = $1 AND NOT done",
        );
        resolving(|| async {
            let client = self.client().await?;
            client
                .execute(uploads, &[&self.holder, &lease])
                .await
                .map_err(backend)?;
            client
                .execute(&windows, &[&holder, &lease])
                .await
                .map_err(backend)
        })
        .await
    }

    async fn complete(&self, job: i64, now_ms: i64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE colball_jobs SET state = 3, finished_ms = $2 \
                 WHERE seq = $1 AND state IN (1, 2) AND solved + errors >= puzzles",
                &[&job, &now_ms],
            )
            .await
            .map_err(backend)?;
        if n > 0 {
            self.hint_jobs(&client).await?;
        }
        Ok(n > 0)
    }

    fn leading(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    async fn rescue(&self) -> Result<Rescued, StoreError> {
        let sql = format!(
            "WITH {LIVE_KEYS} {}",
            ordered(
                "holder = NULL, holder_key = NULL, lease_until = NULL",
                &format!("holder IS NOT NULL AND NOT done AND ({WINDOW_FREE})"),
            )
        );
        let windows = resolving(|| async {
            let client = self.client().await?;
            client.execute(&sql, &[]).await.map_err(backend)
        })
        .await?;
        let uploads = self
            .delete_picked("state = 0 AND upload_until < now()", &[], true)
            .await?;
        Ok(Rescued { windows, uploads })
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn wakes(&self) -> broadcast::Receiver<Wake> {
        self.wakes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use colball_testkit::postgres::TempPostgres;

    use super::super::conformance::{entries, new_job, put, solved};
    use super::*;

    async fn wake(hints: &mut broadcast::Receiver<Wake>, want: Wake) {
        let heard = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                if hints.recv().await.unwrap() == want {
                    return;
                }
            }
        });
        heard
            .await
            .unwrap_or_else(|_| panic!("no {want:?} hint in 5 s"));
    }

    /// A coordinator does not hear its own hints; a results hint names
    /// its windows; the payloads without windows or origin are another's,
    /// of every window.
    #[test]
    fn hints_are_read_for_others_with_their_windows() {
        let me = 7;
        assert_eq!(parse_hint(&jobs_hint(8), me), Some(Wake::Jobs));
        assert_eq!(parse_hint(&jobs_hint(me), me), None);
        assert_eq!(parse_hint("jobs", me), Some(Wake::Jobs));
        let results = Wake::Results {
            job: 12,
            first: 3,
            last: 5,
        };
        assert_eq!(
            parse_hint(&results_hint(12, &[5, 3, 4], 8), me),
            Some(results)
        );
        assert_eq!(parse_hint(&results_hint(12, &[3], me), me), None);
        assert_eq!(
            parse_hint("r12", me),
            Some(Wake::Results {
                job: 12,
                first: 0,
                last: u64::MAX
            })
        );
        for bad in ["r", "rx", "r12:5-3:8", "r12:3:8", "jobsx", "hello"] {
            assert_eq!(parse_hint(bad, me), None, "{bad}");
        }
    }

    fn window(claim: Claim) -> (u64, usize, bool) {
        match claim {
            Claim::Window {
                win,
                pending,
                took_over,
                ..
            } => (win, pending.len(), took_over),
            other => panic!("no window claimed: {other:?}"),
        }
    }

    /// The epoch of the current claim of window `win` of `job`.
    async fn epoch(s: &PostgresStore, job: i64, win: u64) -> u64 {
        let client = s.client().await.unwrap();
        let row = client
            .query_one(
                "SELECT epoch FROM colball_windows WHERE job = $1 AND win = $2",
                &[&job, &(win as i64)],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0) as u64
    }

    /// A throwaway server, and two stores (coordinators) on its database
    /// `name`.
    async fn two_on(name: &str) -> (TempPostgres, String, PostgresStore, PostgresStore) {
        let server = tokio::task::spawn_blocking(TempPostgres::start)
            .await
            .unwrap();
        let url = server.database(name);
        let a = PostgresStore::connect(&url, None).await.unwrap();
        let b = PostgresStore::connect(&url, None).await.unwrap();
        (server, url, a, b)
    }

    async fn leaders(stores: &[&PostgresStore]) -> usize {
        stores.iter().filter(|s| s.leading()).count()
    }

    /// Two coordinators on one database: a job's windows are split between
    /// them, a window is done only once each of its puzzles has a result, a
    /// lease that runs out is taken over, the job is completed once, one of
    /// them leads at a time, and each hears the other's hints.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn coordinators_on_one_database_split_windows_and_take_over_lapsed_leases() {
        let (_server, url, a, b) = two_on("shared").await;
        let mut heard_by_b = b.wakes();
        let job = a.create(new_job("alice")).await.unwrap();
        let n = 2 * WINDOW + 100;
        a.add(job, 0, entries(n)).await.unwrap();
        let lease = Duration::from_secs(2);

        // Before the seal the last window is not all there: it is let go.
        assert_eq!(
            window(a.claim(job, "a", lease).await.unwrap()),
            (0, WINDOW, false)
        );
        assert_eq!(
            window(b.claim(job, "b", lease).await.unwrap()),
            (1, WINDOW, false)
        );
        assert_eq!(
            window(b.claim(job, "b", lease).await.unwrap()),
            (2, 100, false)
        );
        assert_eq!(
            b.finish(job, 2, epoch(&b, job, 2).await).await.unwrap(),
            Finished::LetGo,
            "not uploaded whole"
        );
        a.seal(job, 1).await.unwrap();
        wake(&mut heard_by_b, Wake::Jobs).await;
        assert_eq!(
            window(a.claim(job, "a", lease).await.unwrap()),
            (2, 100, false)
        );
        let a_window_2 = epoch(&a, job, 2).await;
        assert!(matches!(
            b.claim(job, "b", lease).await.unwrap(),
            Claim::Busy
        ));

        // Window 0 is finished before its results are in: let go, not done.
        assert_eq!(
            a.finish(job, 0, epoch(&a, job, 0).await).await.unwrap(),
            Finished::LetGo
        );
        assert_eq!(
            window(b.claim(job, "b", lease).await.unwrap()),
            (0, WINDOW, false)
        );
        let results = |range: std::ops::Range<usize>| {
            range.map(|i| (job, solved(i as u64))).collect::<Vec<_>>()
        };
        put(&a, results(0..WINDOW)).await;
        wake(
            &mut heard_by_b,
            Wake::Results {
                job,
                first: 0,
                last: 0,
            },
        )
        .await;
        assert_eq!(
            b.finish(job, 0, epoch(&b, job, 0).await).await.unwrap(),
            Finished::Done
        );

        // b renews its leases (windows 1); a lets its own lapse (window 2),
        // and b takes it over.
        assert_eq!(b.renew("b", lease).await.unwrap(), 1);
        tokio::time::sleep(lease + Duration::from_millis(500)).await;
        assert_eq!(
            window(b.claim(job, "b", lease).await.unwrap()),
            (1, WINDOW, false)
        );
        assert_eq!(
            window(b.claim(job, "b", lease).await.unwrap()),
            (2, 100, true)
        );
        // The leader lets go of what lapsed: nothing now.
        assert_eq!(a.rescue().await.unwrap(), Rescued::default());

        // a, back from a pause, still has window 2's old claim: its results
        // are refused and its finish leaves the window b's.
        let stale = a_window_2;
        assert!(stale < epoch(&b, job, 2).await);
        let late = (2 * WINDOW..n)
            .map(|i| ToWrite {
                fence: Some(stale),
                ..ToWrite::unfenced(job, solved(i as u64))
            })
            .collect();
        let (_, new) = a.put_results(late).await;
        assert!(new.unwrap().iter().all(|new| !new), "a stale write stored");
        assert_eq!(a.finish(job, 2, stale).await.unwrap(), Finished::Lost);
        let holder: Option<String> = a
            .client()
            .await
            .unwrap()
            .query_one(
                "SELECT holder FROM colball_windows WHERE job = $1 AND win = 2",
                &[&job],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(holder.as_deref(), Some("b"));

        // Everything stored (some twice): done once.
        put(&b, results(WINDOW..n)).await;
        put(&a, results(WINDOW..n)).await;
        for w in [1, 2] {
            assert_eq!(
                b.finish(job, w, epoch(&b, job, w).await).await.unwrap(),
                Finished::Done
            );
        }
        assert!(matches!(
            a.claim(job, "a", lease).await.unwrap(),
            Claim::Done
        ));
        assert!(b.complete(job, 9).await.unwrap());
        assert!(!a.complete(job, 10).await.unwrap(), "completed once");
        let row = a.job(job).await.unwrap().unwrap();
        assert_eq!(
            (row.state, row.solved, row.finished_ms),
            (JobState::Done, n as u64, 9)
        );
        // Finished: not among the unfinished jobs each coordinator syncs with.
        assert!(a.unfinished().await.unwrap().iter().all(|r| r.seq != job));

        // An upload whose coordinator stopped renewing it is deleted by
        // the rescue; one still renewed is not.
        let abandoned = a.create(new_job("alice")).await.unwrap();
        a.add(abandoned, 0, entries(10)).await.unwrap();
        let kept = b.create(new_job("bob")).await.unwrap();
        assert_eq!(b.rescue().await.unwrap(), Rescued::default());
        a.renew("a", Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            b.rescue().await.unwrap(),
            Rescued {
                windows: 0,
                uploads: 1
            }
        );
        assert!(a.job(abandoned).await.unwrap().is_none());
        assert!(a.job(kept).await.unwrap().is_some());

        // A coordinator that dies (its connections close) lets go of its
        // windows at once, long before their lease runs out.
        let c = PostgresStore::connect(&url, None).await.unwrap();
        let orphan = c.create(new_job("carol")).await.unwrap();
        c.add(orphan, 0, entries(10)).await.unwrap();
        c.seal(orphan, 1).await.unwrap();
        let long = Duration::from_secs(600);
        assert_eq!(
            window(c.claim(orphan, "c", long).await.unwrap()),
            (0, 10, false)
        );
        assert!(matches!(
            b.claim(orphan, "b", long).await.unwrap(),
            Claim::Busy
        ));
        drop(c);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let taken = loop {
            match b.claim(orphan, "b", long).await.unwrap() {
                Claim::Window { took_over, .. } => break took_over,
                _ => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the dead one's window is still held"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        assert!(taken);

        // One leader; when it goes, the other leads.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while leaders(&[&a, &b]).await != 1 {
            assert!(tokio::time::Instant::now() < deadline, "no leader in 5 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(LEADER_TRY * 2).await;
        assert_eq!(leaders(&[&a, &b]).await, 1, "two leaders");
        let (leader, other) = if a.leading() { (a, b) } else { (b, a) };
        drop(leader);
        let deadline = tokio::time::Instant::now() + LEADER_TRY * 4;
        while !other.leading() {
            assert!(tokio::time::Instant::now() < deadline, "no new leader");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Two coordinators delete, expire, renew, release and claim windows
    /// of the same jobs at once: every call succeeds (the statements that
    /// lock several rows lock them in one order, and a conflict the server
    /// still rolls back is tried again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_deletes_renewals_and_claims_all_succeed() {
        let (_server, _, a, b) = two_on("concurrent").await;
        let lease = Duration::from_secs(30);
        let puzzles = entries(WINDOW + 10);
        for round in 0..8 {
            let mut jobs = Vec::new();
            for _ in 0..3 {
                let job = a.create(new_job("alice")).await.unwrap();
                a.add(job, 0, puzzles.clone()).await.unwrap();
                a.seal(job, 1).await.unwrap();
                a.claim(job, "a", lease).await.unwrap();
                b.claim(job, "b", lease).await.unwrap();
                jobs.push(job);
            }
            a.set_state(jobs[2], JobState::Done, "", 1).await.unwrap();
            let (deleted, expired, renewed_a, renewed_b, released, claimed) = tokio::join!(
                a.delete(jobs[0]),
                b.expire(2),
                a.renew("a", lease),
                b.renew("b", lease),
                b.release(jobs[1], "b"),
                a.claim(jobs[1], "a", lease),
            );
            deleted.unwrap_or_else(|e| panic!("round {round}: delete: {e}"));
            assert_eq!(expired.unwrap(), 1, "round {round}");
            renewed_a.unwrap_or_else(|e| panic!("round {round}: renew: {e}"));
            renewed_b.unwrap_or_else(|e| panic!("round {round}: renew: {e}"));
            released.unwrap_or_else(|e| panic!("round {round}: release: {e}"));
            claimed.unwrap_or_else(|e| panic!("round {round}: claim: {e}"));
            a.delete(jobs[1]).await.unwrap();
        }
    }

    /// One step of two coordinators working one job's three windows.
    #[derive(Clone, Debug)]
    enum Step {
        Claim(usize),
        /// Every puzzle of window `.0` gets its result, under no claim.
        Solve(u64),
        /// Coordinator `.0` writes window `.1`'s results under its last
        /// claim of it.
        Write(usize, u64),
        /// Coordinator `.0` finishes window `.1` under its last claim of it.
        Finish(usize, u64),
        /// Coordinator `.0` finishes window `.1` under its last claim of it
        /// (if it has one) and claims another, in one call.
        FinishAndClaim(usize, u64),
        /// Coordinator `.0`'s leases run out.
        Lapse(usize),
        Renew(usize),
        Release(usize),
        /// Coordinator `.0` claims, and the answer is lost (its connection
        /// broke as the claim committed): it does not know the window.
        LoseClaim(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (0..2usize).prop_map(Step::Claim),
            1 => (0..3u64).prop_map(Step::Solve),
            2 => (0..2usize, 0..3u64).prop_map(|(h, w)| Step::Write(h, w)),
            3 => (0..2usize, 0..3u64).prop_map(|(h, w)| Step::Finish(h, w)),
            3 => (0..2usize, 0..3u64).prop_map(|(h, w)| Step::FinishAndClaim(h, w)),
            1 => (0..2usize).prop_map(Step::Lapse),
            1 => (0..2usize).prop_map(Step::Renew),
            1 => (0..2usize).prop_map(Step::Release),
            1 => (0..2usize).prop_map(Step::LoseClaim),
        ]
    }

    /// What the windows should be: for each, its holder (and whether its
    /// lease is live), whether it is done, whether its results are stored,
    /// its epoch; each coordinator's last claim of each, and whether it
    /// knows it holds it.
    #[derive(Clone, Debug, Default)]
    struct Model {
        holder: [Option<(usize, bool)>; 3],
        done: [bool; 3],
        solved: [bool; 3],
        epoch: [u64; 3],
        claimed: [[Option<u64>; 3]; 2],
        known: [[bool; 3]; 2],
    }

    impl Model {
        /// Whether `h` may claim window `w`: nobody holds it under a live
        /// lease, or `h` does without knowing it.
        fn free(&self, h: usize, w: usize) -> bool {
            !self.done[w]
                && self.holder[w].is_none_or(|(o, live)| !live || (o == h && !self.known[h][w]))
        }

        /// What a claim by `h` gives, as the store decides it.
        fn claim(&mut self, h: usize) -> Result<(u64, bool), bool> {
            self.claim_other(h, None)
        }

        /// What a claim by `h` of a window other than `but` gives.
        fn claim_other(&mut self, h: usize, but: Option<usize>) -> Result<(u64, bool), bool> {
            for w in 0..3 {
                if !self.free(h, w) || but == Some(w) {
                    continue;
                }
                self.epoch[w] += 1;
                if self.solved[w] {
                    self.done[w] = true;
                    self.holder[w] = None;
                    continue;
                }
                let took_over = self.holder[w].is_some_and(|(o, _)| o != h);
                self.holder[w] = Some((h, true));
                self.claimed[h][w] = Some(self.epoch[w]);
                self.known[h][w] = true;
                return Ok((w as u64, took_over));
            }
            if self.solved.iter().all(|s| *s) {
                self.done = [true; 3];
                self.holder = [None; 3];
            }
            // Err(true): every window done.
            Err(self.done.iter().all(|d| *d))
        }

        /// What `h` finishing window `w` under its last claim gives, if it
        /// has claimed it.
        fn finish(&mut self, h: usize, w: usize) -> Option<(u64, Finished)> {
            let fence = self.claimed[h][w]?;
            self.known[h][w] = false;
            let done = self.done[w] || self.solved[w];
            let how = if fence != self.epoch[w] {
                Finished::Lost
            } else if done {
                Finished::Done
            } else {
                Finished::LetGo
            };
            self.done[w] = done;
            if fence == self.epoch[w] || done {
                self.holder[w] = None;
            }
            Some((fence, how))
        }
    }

    /// Whether claim `got` is what the model wanted.
    fn claimed_as_wanted(want: Result<(u64, bool), bool>, got: &Claim, model: &Model) {
        match (want, got) {
            (Ok((w, over)), Claim::Window { win, took_over, .. }) => {
                assert_eq!((*win, *took_over), (w, over), "{model:?}")
            }
            (Err(false), Claim::Busy) | (Err(true), Claim::Done) => {}
            (want, got) => panic!("claim: {want:?} wanted, {got:?}: {model:?}"),
        }
    }

    /// Random sequences of claims, results, finishes, lapses, renewals and
    /// releases by two coordinators on one job: after every step the
    /// windows in the database are what the model says (holder, done,
    /// epoch), a claim gives the window the model predicts (never one held
    /// under a live lease, unless by its claimer, whose claim's answer was
    /// lost) with a greater epoch than any before, a window is
    /// done only when each of its puzzles has its result, and results
    /// written or a finish under a claim no longer current (the window
    /// claimed again since) change nothing.
    #[test]
    fn window_claims_keep_their_invariants_over_random_steps() {
        use proptest::test_runner::{Config, TestRunner};
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let server = TempPostgres::start();
        let url = server.database("steps");
        let stores = runtime.block_on(async {
            [
                PostgresStore::connect(&url, None).await.unwrap(),
                PostgresStore::connect(&url, None).await.unwrap(),
            ]
        });
        let names = ["a", "b"];
        let n = 2 * WINDOW + 50;
        let puzzles = entries(n);
        let long = Duration::from_secs(60);
        let mut runner = TestRunner::new(Config {
            cases: 24,
            ..Config::default()
        });
        let steps = proptest::collection::vec(step(), 1..40);
        let outcome = runner.run(&steps, |steps| {
            runtime.block_on(async {
                let s = &stores;
                let job = s[0].create(new_job("alice")).await.unwrap();
                s[0].add(job, 0, puzzles.clone()).await.unwrap();
                s[0].seal(job, 1).await.unwrap();
                let mut model = Model::default();
                for step in steps {
                    match step {
                        Step::Claim(h) => {
                            let got = s[h].claim(job, names[h], long).await.unwrap();
                            claimed_as_wanted(model.claim(h), &got, &model);
                        }
                        Step::FinishAndClaim(h, w) => {
                            let i = w as usize;
                            let finished = model.finish(h, i);
                            let finishing: Vec<(u64, u64)> =
                                finished.iter().map(|&(fence, _)| (w, fence)).collect();
                            let (got, how) = s[h]
                                .finish_and_claim(job, names[h], long, &finishing)
                                .await
                                .unwrap();
                            let want: Vec<(u64, Finished)> =
                                finished.iter().map(|&(_, how)| (w, how)).collect();
                            assert_eq!(how, want, "{model:?}");
                            let but = finished.is_some().then_some(i);
                            claimed_as_wanted(model.claim_other(h, but), &got, &model);
                        }
                        Step::Solve(w) => {
                            let from = w * WINDOW as u64;
                            let to = (from + WINDOW as u64).min(n as u64);
                            let results = (from..to).map(|i| (job, solved(i))).collect();
                            put(&s[0], results).await;
                            model.solved[w as usize] = true;
                        }
                        Step::Write(h, w) => {
                            let i = w as usize;
                            if let Some(fence) = model.claimed[h][i] {
                                let from = w * WINDOW as u64;
                                let to = (from + WINDOW as u64).min(n as u64);
                                let results = (from..to)
                                    .map(|i| ToWrite {
                                        fence: Some(fence),
                                        ..ToWrite::unfenced(job, solved(i))
                                    })
                                    .collect();
                                let (_, new) = s[h].put_results(results).await;
                                let stored = fence == model.epoch[i] && !model.solved[i];
                                let new = new.unwrap();
                                assert!(new.iter().all(|n| *n == stored), "{model:?}");
                                model.solved[i] |= stored;
                                // A write under the current claim tells its
                                // writer the window is its own.
                                model.known[h][i] |= fence == model.epoch[i];
                            }
                        }
                        Step::Finish(h, w) => {
                            if let Some((fence, want)) = model.finish(h, w as usize) {
                                let got = s[h].finish(job, w, fence).await.unwrap();
                                assert_eq!(got, want, "{model:?}");
                            }
                        }
                        Step::LoseClaim(h) => {
                            let before = model.claimed[h];
                            let got = s[h].claim(job, names[h], long).await.unwrap();
                            claimed_as_wanted(model.claim(h), &got, &model);
                            if let Claim::Window { win, .. } = got {
                                s[h].forget(|&k| k == (job, win));
                                let w = win as usize;
                                model.known[h][w] = false;
                                model.claimed[h][w] = before[w];
                            }
                        }
                        Step::Lapse(h) => {
                            s[h].renew(names[h], Duration::ZERO).await.unwrap();
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            for slot in model.holder.iter_mut().flatten() {
                                if slot.0 == h {
                                    slot.1 = false;
                                }
                            }
                        }
                        Step::Renew(h) => {
                            s[h].renew(names[h], long).await.unwrap();
                            for (w, slot) in model.holder.iter_mut().enumerate() {
                                if let Some((o, live)) = slot {
                                    if *o == h && !model.done[w] {
                                        *live = true;
                                    }
                                }
                            }
                        }
                        Step::Release(h) => {
                            s[h].release(job, names[h]).await.unwrap();
                            model.known[h] = [false; 3];
                            for w in 0..3 {
                                if model.holder[w].is_some_and(|(o, _)| o == h) && !model.done[w] {
                                    model.holder[w] = None;
                                }
                            }
                        }
                    }
                    let client = s[0].client().await.unwrap();
                    let rows = client
                        .query(
                            "SELECT win, holder, done, epoch FROM colball_windows \
                             WHERE job = $1 ORDER BY win",
                            &[&job],
                        )
                        .await
                        .unwrap();
                    for r in &rows {
                        let w = r.get::<_, i64>(0) as usize;
                        let holder: Option<String> = r.get(1);
                        let done: bool = r.get(2);
                        assert_eq!(done, model.done[w], "window {w}: {model:?}");
                        let epoch = r.get::<_, i64>(3) as u64;
                        assert_eq!(epoch, model.epoch[w], "window {w}: {model:?}");
                        assert!(
                            !done || model.solved[w],
                            "window {w} done without its results"
                        );
                        let want = model.holder[w].map(|(h, _)| names[h].to_string());
                        if !done {
                            assert_eq!(holder, want, "window {w}: {model:?}");
                        }
                    }
                }
                s[0].delete(job).await.unwrap();
            });
            Ok(())
        });
        drop(stores);
        drop(server);
        outcome.unwrap();
    }

    /// Writes job `seq` as the row-per-puzzle layout held it: a row per
    /// puzzle, and a row per result for the indices `solved`, in that
    /// (stored) order.
    async fn old_job(
        client: &tokio_postgres::Client,
        seq: i64,
        state: i16,
        puzzles: &[Entry],
        solved_in_order: &[u64],
    ) {
        client
            .execute(
                "INSERT INTO colball_jobs (seq, owner, name, priority, state, puzzles, solved, \
                   created_ms, fail_fast, any_order, stored, bytes) \
                 VALUES ($1, 'alice', 'old', 0, $2, $3, $4, 1, false, false, $4, 0)",
                &[
                    &seq,
                    &state,
                    &(puzzles.len() as i64),
                    &(solved_in_order.len() as i64),
                ],
            )
            .await
            .unwrap();
        let (idx, ids, bytes): (Vec<i64>, Vec<String>, Vec<Vec<u8>>) = puzzles
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                Entry::Puzzle { id, puzzle } => (
                    i as i64,
                    id.to_string(),
                    layout::pack_puzzle(puzzle).to_vec(),
                ),
                Entry::Invalid(_) => unreachable!("the old jobs here hold puzzles only"),
            })
            .collect();
        client
            .execute(
                "INSERT INTO colball_puzzles (job, idx, id, puzzle) \
                 SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bytea[])",
                &[&seq, &idx, &ids, &bytes],
            )
            .await
            .unwrap();
        let idx: Vec<i64> = solved_in_order.iter().map(|&i| i as i64).collect();
        let pos: Vec<i64> = (0..idx.len() as i64).collect();
        let bodies: Vec<Vec<u8>> = solved_in_order
            .iter()
            .map(|&i| solved(i).encode_to_vec())
            .collect();
        client
            .execute(
                "INSERT INTO colball_results (job, idx, pos, body) \
                 SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::bytea[])",
                &[&seq, &idx, &pos, &bodies],
            )
            .await
            .unwrap();
    }

    /// A database of the row-per-puzzle layout (schema 4) holding a job
    /// half done, one of its windows claimed by a coordinator that is gone,
    /// and a finished job, is regrouped when a coordinator opens it: the
    /// half-done job is claimed from where it was and finished, and both
    /// read back whole, in index and in stored order, from any index.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_of_the_row_layout_is_regrouped_and_its_jobs_go_on() {
        let server = tokio::task::spawn_blocking(TempPostgres::start)
            .await
            .unwrap();
        let url = server.database("old");
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        client
            .batch_execute(&MIGRATIONS[..4].concat())
            .await
            .unwrap();
        client
            .batch_execute(
                "CREATE TABLE colball_meta (key text PRIMARY KEY, value text NOT NULL); \
                 INSERT INTO colball_meta VALUES ('schema_version', '4')",
            )
            .await
            .unwrap();
        let n = WINDOW + 300;
        let puzzles = entries(n);
        // Job 1: window 0 whole, stored out of order; window 1 a third
        // done, in two runs, and claimed (epoch 1) by a coordinator whose
        // lease has run out.
        let w = WINDOW as u64;
        let mut half: Vec<u64> = (0..w).rev().collect();
        half.extend((w..w + 50).chain(w + 200..w + 250));
        old_job(&client, 1, 2, &puzzles, &half).await;
        client
            .batch_execute(
                "INSERT INTO colball_windows (job, win, done) VALUES (1, 0, true); \
                 INSERT INTO colball_windows (job, win, holder, lease_until, epoch) \
                   VALUES (1, 1, 'gone', now() - interval '1 minute', 1)",
            )
            .await
            .unwrap();
        // Job 2: finished (finished jobs had no windows).
        let all: Vec<u64> = (0..n as u64).collect();
        old_job(&client, 2, 3, &puzzles, &all).await;
        client
            .batch_execute("SELECT setval('colball_jobs_seq_seq', 2)")
            .await
            .unwrap();
        drop(client);
        connection.await.unwrap().unwrap();

        let s = PostgresStore::connect(&url, None).await.unwrap();
        let check = |job: i64, results: Vec<egress::PuzzleResult>, want: &[u64]| {
            let got: Vec<u64> = results.iter().map(|r| r.index).collect();
            assert_eq!(got, want, "job {job}");
            for r in &results {
                assert_eq!(r.id, format!("p{}", r.index), "job {job}");
            }
        };
        // Job 1 reads what it had, up to its first missing index.
        check(
            1,
            s.results(1, 0, usize::MAX, false).await.unwrap(),
            &all[..w as usize + 50],
        );
        check(1, s.results(1, 0, usize::MAX, true).await.unwrap(), &half);
        check(
            1,
            s.results(1, 100, 3, true).await.unwrap(),
            &half[100..103],
        );
        // Its window 1 is taken over at a higher epoch; what is pending is
        // what had no result.
        let Claim::Window {
            win,
            epoch,
            pending,
            took_over,
        } = s.claim(1, "new", Duration::from_secs(30)).await.unwrap()
        else {
            panic!("window 1 is not claimed");
        };
        assert_eq!((win, epoch, took_over), (1, 2, true));
        let missing: Vec<u64> = (w + 50..w + 200).chain(w + 250..n as u64).collect();
        assert_eq!(pending.iter().map(|p| p.0).collect::<Vec<_>>(), missing);
        for (index, id, puzzle) in &pending {
            assert_eq!(*id, format!("p{index}"));
            let Entry::Puzzle { puzzle: was, .. } = &puzzles[*index as usize] else {
                unreachable!()
            };
            assert_eq!(puzzle, was, "puzzle {index}");
        }
        // A stale claim's results are refused; the current one's stored.
        let write = |fence| {
            missing
                .iter()
                .map(|&i| ToWrite {
                    fence: Some(fence),
                    ..ToWrite::unfenced(1, solved(i))
                })
                .collect::<Vec<_>>()
        };
        let (_, stale) = s.put_results(write(1)).await;
        assert!(stale.unwrap().iter().all(|new| !new));
        let (_, fresh) = s.put_results(write(epoch)).await;
        assert!(fresh.unwrap().iter().all(|new| *new));
        assert_eq!(s.finish(1, 1, epoch).await.unwrap(), Finished::Done);
        assert!(s.complete(1, 2).await.unwrap());
        let row = s.job(1).await.unwrap().unwrap();
        assert_eq!((row.state, row.solved), (JobState::Done, n as u64));
        check(1, s.results(1, 0, usize::MAX, false).await.unwrap(), &all);
        check(
            1,
            s.results(1, w + 40, 20, false).await.unwrap(),
            &all[w as usize + 40..w as usize + 60],
        );
        let stored: Vec<u64> = half.iter().chain(&missing).copied().collect();
        check(1, s.results(1, 0, usize::MAX, true).await.unwrap(), &stored);
        check(
            1,
            s.results_after(1, w + 10, 5).await.unwrap(),
            &all[w as usize + 10..w as usize + 15],
        );
        // Job 2 whole, and a new job after them.
        check(2, s.results(2, 0, usize::MAX, false).await.unwrap(), &all);
        assert_eq!(s.create(new_job("bob")).await.unwrap(), 3);
        // The old tables are gone, and deleting a job leaves none of it.
        let client = s.client().await.unwrap();
        let old: i64 = client
            .query_one(
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_name IN ('colball_puzzles', 'colball_results')",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(old, 0);
        s.delete(1).await.unwrap();
        for table in [
            "colball_puzzle_blocks",
            "colball_result_groups",
            "colball_windows",
        ] {
            let left: i64 = client
                .query_one(&format!("SELECT count(*) FROM {table} WHERE job = 1"), &[])
                .await
                .unwrap()
                .get(0);
            assert_eq!(left, 0, "{table}");
        }
    }
}
