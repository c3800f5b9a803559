//! Durable jobs: submit, read results in order (resuming from any index),
//! ownership, cancel, and a coordinator killed and restarted on its data
//! dir mid-job.

use std::collections::HashSet;
use std::path::Path;

use crate::common::{FakeWorker, four_by_four, mixed, quick};
use colball_client::jobs::Jobs;
use colball_client::remote::{ClientError, Security};
use colball_proto::Secret;
use colball_proto::v1::{self, puzzle_result};
use colball_server::coordinator::{AccessConfig, Config, SchedulingConfig, StoreConfig};
use colball_testkit::LocalCluster;
use colball_testkit::postgres::TempPostgres;
use colball_testkit::procs::{self, Stderr, wait_metric};
use tokio_stream::StreamExt;
use tonic::Code;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

fn moves(r: &v1::PuzzleResult) -> i64 {
    match &r.outcome {
        Some(puzzle_result::Outcome::Solved(s)) => s.moves,
        other => panic!("result {}: {other:?}", r.index),
    }
}

/// Starts a coordinator on the store that `store` names (`--data-dir DIR`
/// or `--store URL`), outside this test's `PGPASSWORD` and
/// `PGSSLROOTCERT`, which must refuse to start (exit 1); its standard
/// error.
fn refused_start(store: &[&str]) -> String {
    let out = std::process::Command::new(BIN)
        .args(["coordinator", "--listen", "127.0.0.1:0"])
        .args(store)
        .env_remove("PGPASSWORD")
        .env_remove("PGSSLROOTCERT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    stderr
}

/// Reads results from `from` (following to the end with `follow`), at most
/// `limit`; checks they come in order.
async fn read(
    jobs: &mut Jobs,
    id: &str,
    from: u64,
    follow: bool,
    limit: usize,
) -> Vec<v1::PuzzleResult> {
    let mut stream = jobs.results(id, from, follow).await.unwrap();
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(r) = stream.next().await else { break };
        let r = r.unwrap();
        assert_eq!(r.index, from + out.len() as u64, "in input order");
        out.push(r);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_solved_and_read_in_order_from_anywhere() {
    let cluster = LocalCluster::start(quick(), 2, 1).await.unwrap();
    let (puzzles, answers) = mixed(41, 3000, 50);
    let mut jobs = Jobs::connect(&cluster.url(), &Security::default())
        .await
        .unwrap();
    let accepted = jobs.submit(&puzzles, None, "mixed").await.unwrap();
    assert_eq!(accepted.puzzles, 3000);
    // Read the first 1,000, go away, come back for the rest.
    let first = read(&mut jobs, &accepted.id, 0, true, 1000).await;
    let rest = read(&mut jobs, &accepted.id, 1000, true, usize::MAX).await;
    let all: Vec<_> = first.into_iter().chain(rest).collect();
    assert_eq!(all.len(), 3000);
    for (r, answer) in all.iter().zip(&answers) {
        assert_eq!(moves(r), *answer, "{}", r.id);
        assert_eq!(r.id, puzzles[r.index as usize].0);
    }
    let job = jobs.get(&accepted.id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32);
    assert_eq!((job.solved, job.errors, job.remaining), (3000, 0, 0));
    assert_eq!(jobs.list().await.unwrap()[0].id, accepted.id);
    // Done: read again from the middle, without following.
    assert_eq!(
        read(&mut jobs, &accepted.id, 2990, false, usize::MAX)
            .await
            .len(),
        10
    );
    jobs.delete(&accepted.id).await.unwrap();
    let Err(ClientError::Status(s)) = jobs.get(&accepted.id).await else {
        panic!("a deleted job is still there")
    };
    assert_eq!(s.code(), Code::NotFound);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_belong_to_their_client_and_can_be_cancelled() {
    let dir = std::env::temp_dir().join(format!("colball-jobs-own-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice a-token\nbob b-token\n").unwrap();
    let config = Config {
        access: AccessConfig {
            client_tokens_file: Some(tokens),
            ..quick().access
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    // A worker that holds what it is given: the job stays running.
    let mut fake = FakeWorker::join(&url, 2).await.unwrap();
    let security = |t: &str| Security {
        token: Some(Secret::new(t, "test").unwrap()),
        ..Security::default()
    };
    let mut alice = Jobs::connect(&url, &security("a-token")).await.unwrap();
    let mut bob = Jobs::connect(&url, &security("b-token")).await.unwrap();
    let id = alice
        .submit(&four_by_four(9, 50), None, "")
        .await
        .unwrap()
        .id;
    let held = fake.take(4).await;
    assert_eq!(held.len(), 4);
    // Bob cannot see, read, cancel or delete it: NOT_FOUND, like a job
    // that does not exist.
    for e in [
        bob.get(&id).await.err(),
        bob.cancel(&id).await.err(),
        bob.delete(&id).await.err(),
        bob.results(&id, 0, false).await.err(),
        bob.get("j999").await.err(),
    ] {
        let Some(ClientError::Status(s)) = e else {
            panic!("bob reached alice's job")
        };
        assert_eq!(s.code(), Code::NotFound);
    }
    assert!(bob.list().await.unwrap().is_empty());
    // Alice cancels it: its work on the worker is cancelled too.
    let job = alice.cancel(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Cancelled as i32);
    let cancelled = fake.cancelled().await;
    assert!(!cancelled.is_empty());
    assert!(held.iter().any(|t| cancelled.contains(t)));
    drop(fake);
    cluster.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_survives_coordinator_kills_and_resumes_where_it_stopped() {
    let bin = Path::new(BIN);
    let mut cluster = procs::Durable::start(bin, "jobs-kill", 1).await;
    survives_kills(&mut cluster).await;
    cluster.kill();
    // A file that is not a database: a clear error at start, exit 1.
    let dir = &cluster.data;
    for side in ["colball.sqlite3-wal", "colball.sqlite3-shm"] {
        let _ = std::fs::remove_file(dir.join(side));
    }
    std::fs::write(
        dir.join("colball.sqlite3"),
        b"not a database at all".repeat(100),
    )
    .unwrap();
    let stderr = refused_start(&["--data-dir", dir.to_str().unwrap()]);
    assert!(
        stderr.contains("colball.sqlite3") && stderr.contains("not a database"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_postgres_survives_coordinator_kills_and_resumes_where_it_stopped() {
    let bin = Path::new(BIN);
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database("jobs");
    let mut cluster = procs::Durable::start_postgres(bin, &url, 1).await;
    survives_kills(&mut cluster).await;
}

/// PostgreSQL restarted in immediate mode (SIGQUIT: no checkpoint, as a
/// crash) mid-job: what was acknowledged stays, the job goes on once the
/// database is back, and a reader that sees UNAVAILABLE meanwhile picks
/// up from where it stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_postgres_rides_through_the_database_restarting() {
    let bin = Path::new(BIN);
    let mut server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database("restart");
    let cluster = procs::Durable::start_postgres(bin, &url, 1).await;
    let (puzzles, answers) = mixed(43, 6000, 8);
    let mut jobs = Jobs::connect(&cluster.coordinator.url, &Security::default())
        .await
        .unwrap();
    let id = jobs.submit(&puzzles, None, "").await.unwrap().id;
    let mut seen = read(&mut jobs, &id, 0, true, 1500).await;
    let pid = server.pid();
    let server = tokio::task::spawn_blocking(move || {
        server.restart_immediate();
        server
    })
    .await
    .unwrap();
    assert_ne!(server.pid(), pid, "a new server");
    let mut unavailable = 0;
    let read_rest = async {
        while seen.len() < puzzles.len() {
            let mut stream = match jobs.results(&id, seen.len() as u64, true).await {
                Ok(stream) => stream,
                Err(ClientError::Status(s)) if s.code() == Code::Unavailable => {
                    unavailable += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            while let Some(r) = stream.next().await {
                match r {
                    Ok(r) => {
                        assert_eq!(r.index, seen.len() as u64, "in input order");
                        seen.push(r);
                    }
                    Err(ClientError::Status(s)) if s.code() == Code::Unavailable => {
                        unavailable += 1;
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    };
    if tokio::time::timeout(std::time::Duration::from_secs(60), read_rest)
        .await
        .is_err()
    {
        let job = jobs.get(&id).await.unwrap();
        panic!("stuck at {} results: {job:?}", seen.len());
    }
    println!("read through the restart ({unavailable} reads refused as UNAVAILABLE)");
    for (r, answer) in seen.iter().zip(&answers) {
        assert_eq!(moves(r), *answer, "{}", r.id);
    }
    let job = jobs.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32, "{}", job.failure);
    assert_eq!(job.solved + job.errors, puzzles.len() as u64);
}

/// A store URL with `sslmode=require` connects in TLS, verifying the
/// server's certificate against `PGSSLROOTCERT`: a job runs, and the
/// server sees the coordinator's connections encrypted. Without the CA
/// (the web's roots), the certificate is refused and the start fails,
/// naming the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_in_tls_verifies_the_server_and_runs_jobs() {
    let pki = colball_testkit::pki::Pki::new();
    let ca = pki.write("pg-tls").join("ca.pem");
    let (cert, key) = (pki.cert.clone(), pki.key.clone());
    let server = tokio::task::spawn_blocking(move || TempPostgres::start_tls(&cert, &key))
        .await
        .unwrap();
    let url = format!("{}?sslmode=require", server.database("tls"));
    let ca_env = [("PGSSLROOTCERT", ca.to_str().unwrap())];
    let c = procs::coordinator_env(
        Path::new(BIN),
        "127.0.0.1:0",
        200,
        &["--store", &url],
        &ca_env,
    );
    let _w = procs::worker(Path::new(BIN), &c.url, "w0", Stderr::Quiet, &[]);
    wait_metric(&c.http, "workers", |n| n == 1).await;
    let (puzzles, answers) = mixed(47, 300, 10);
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let id = jobs.submit(&puzzles, None, "").await.unwrap().id;
    let seen = read(&mut jobs, &id, 0, true, usize::MAX).await;
    assert_eq!(seen.iter().map(moves).collect::<Vec<_>>(), answers);
    let (client, connection) = tokio_postgres::connect(&server.url("tls"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.datname = 'tls' AND a.pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    let (encrypted, plain): (i64, i64) = (row.get(0), row.get(1));
    assert!(encrypted >= 2, "{encrypted} connections in TLS");
    assert_eq!(plain, 0, "the coordinator's connections are all in TLS");
    // The web's roots do not know the test's CA: refused, naming it.
    let stderr = refused_start(&["--store", &url]);
    assert!(
        stderr.contains("\"tls\" on 127.0.0.1") && stderr.contains("certificate"),
        "{stderr}"
    );
}

/// A database that asks for a password: the coordinator reads it from
/// `--store-password-file`, so it is in neither its arguments nor its
/// environment; without it, the start fails naming the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_password_comes_from_its_file() {
    const PASSWORD: &str = "s3cret-pw";
    let server = tokio::task::spawn_blocking(|| TempPostgres::start_with_password(PASSWORD))
        .await
        .unwrap();
    let url = server.database("locked");
    let stderr = refused_start(&["--store", &url]);
    assert!(
        stderr.contains("\"locked\"") && stderr.contains("password"),
        "{stderr}"
    );
    let dir = std::env::temp_dir().join(format!("colball-pg-pw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("password");
    std::fs::write(&file, format!("{PASSWORD}\n")).unwrap();
    let flags = [
        "--store",
        &url,
        "--store-password-file",
        file.to_str().unwrap(),
    ];
    let c = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &flags);
    Jobs::connect(&c.url, &Security::default())
        .await
        .unwrap()
        .probe()
        .await
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", c.proc.pid())).unwrap();
    let environ = std::fs::read(format!("/proc/{}/environ", c.proc.pid())).unwrap();
    for seen in [cmdline, environ] {
        assert!(!String::from_utf8_lossy(&seen).contains(PASSWORD));
    }
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A coordinator whose database cannot be used exits 1 at start, saying
/// which host and database (never the password) and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_that_cannot_be_used_stops_the_start_naming_host_and_database() {
    let start = |url: &str| {
        let stderr = refused_start(&["--store", url]);
        assert!(
            !stderr.contains("hunter2"),
            "the password is shown: {stderr}"
        );
        stderr
    };
    // Nothing listens on port 1.
    let stderr = start("postgres://colball:hunter2@127.0.0.1:1/orders");
    assert!(stderr.contains("\"orders\" on 127.0.0.1:1"), "{stderr}");
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    // A database that does not exist.
    let missing = server
        .url("missing")
        .replace("colball@", "colball:hunter2@");
    let stderr = start(&missing);
    assert!(
        stderr.contains("\"missing\"") && stderr.contains("does not exist"),
        "{stderr}"
    );
    // A database holding another application's tables.
    let theirs = server.database("theirs");
    let (client, connection) = tokio_postgres::connect(&theirs, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("CREATE TABLE invoices (id int)")
        .await
        .unwrap();
    let stderr = start(&theirs);
    assert!(
        stderr.contains("invoices") && stderr.contains("a database of its own"),
        "{stderr}"
    );
}

/// A 6,000-puzzle job on `cluster`, its coordinator killed twice and
/// restarted on its store while the client reads; every result once and
/// right, and the job done.
async fn survives_kills(cluster: &mut procs::Durable) {
    let (puzzles, answers) = mixed(42, 6000, 8);
    let url = cluster.coordinator.url.clone();
    let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
    let id = jobs.submit(&puzzles, None, "").await.unwrap().id;
    let mut seen = read(&mut jobs, &id, 0, true, 500).await;
    // Killed mid-job, twice, each time restarted on the same data dir and
    // port; the client comes back for the results from where it stopped.
    for round in 0..2 {
        cluster.kill_and_restart();
        wait_metric(&cluster.coordinator.http, "workers", |n| n == 1).await;
        let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
        let limit = if round == 0 { 1500 } else { usize::MAX };
        let more = read(&mut jobs, &id, seen.len() as u64, true, limit).await;
        seen.extend(more);
    }
    assert_eq!(seen.len(), puzzles.len());
    let mut indexes = HashSet::new();
    for (r, answer) in seen.iter().zip(&answers) {
        assert!(indexes.insert(r.index));
        assert_eq!(moves(r), *answer, "{}", r.id);
    }
    let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
    let job = jobs.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32);
}

/// `colball solve --connect`'s loop (`jobs::solve_in_order`) on 20,000
/// puzzles while the coordinator is SIGKILLed three times at random
/// moments (including, with luck, during the submission) and restarted on
/// its data dir: the output is complete, in order, each result once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_job_rides_out_three_coordinator_kills_at_random_moments() {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    const PUZZLES: usize = 20_000;
    let mut cluster = procs::Durable::start(Path::new(BIN), "jobs-kill3", 2).await;
    let (puzzles, answers) = mixed(44, PUZZLES, 50);
    let received = Arc::new(AtomicUsize::new(0));
    let batch = crate::chaos::solve_in_background(
        cluster.coordinator.url.clone(),
        Arc::new(puzzles.clone()),
        received.clone(),
    );
    for (kill, moment) in procs::random_moments(3, PUZZLES as u64 * 9 / 10)
        .into_iter()
        .enumerate()
    {
        procs::wait_to_kill(&received, moment, kill).await;
        cluster.kill_and_restart();
    }
    let results = tokio::time::timeout(Duration::from_secs(120), batch)
        .await
        .expect("the followed job did not finish")
        .unwrap()
        .unwrap();
    assert_eq!(results.len(), PUZZLES);
    for (i, (r, answer)) in results.iter().zip(&answers).enumerate() {
        assert_eq!(r.index, i, "in order, each once");
        assert_eq!(r.id, puzzles[i].0);
        assert_eq!(r.solution.answer(), *answer, "{}", r.id);
    }
    // Read to its end, the job was deleted.
    let mut jobs = Jobs::connect(&cluster.coordinator.url, &Security::default())
        .await
        .unwrap();
    assert!(jobs.list().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_refuses_new_jobs_naming_the_flag() {
    let config = Config {
        store: StoreConfig {
            // Smaller than an empty database: every submission is refused.
            max_bytes: Some(1),
            ..quick().store
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 1, 1).await.unwrap();
    let mut jobs = Jobs::connect(&cluster.url(), &Security::default())
        .await
        .unwrap();
    let Err(ClientError::Status(s)) = jobs.submit(&four_by_four(1, 3), None, "").await else {
        panic!("a job was stored past the limit")
    };
    assert_eq!(s.code(), Code::ResourceExhausted);
    assert!(s.message().contains("--max-store-mib"), "{s:?}");
    assert!(jobs.list().await.unwrap().is_empty());
    cluster.shutdown().await;
}

/// The store is capped at twice `--max-store-mib`: a job accepted under
/// the limit whose results outgrow the cap fails, saying so; the stored
/// results stay readable, and the coordinator serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fills_up_mid_job_fails_that_job_and_serves_on() {
    let config = Config {
        scheduling: SchedulingConfig {
            cache_capacity: 0,
            ..quick().scheduling
        },
        store: StoreConfig {
            max_bytes: Some(96 * 1024),
            ..quick().store
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 1, 2).await.unwrap();
    let mut jobs = Jobs::connect(&cluster.url(), &Security::default())
        .await
        .unwrap();
    let (puzzles, answers) = mixed(45, 2500, 0);
    let id = jobs.submit(&puzzles, None, "big").await.unwrap().id;
    let got = read(&mut jobs, &id, 0, true, usize::MAX).await;
    let job = jobs.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Failed as i32, "{job:?}");
    assert!(
        job.failure.contains("the job store is full") && job.failure.contains("--max-store-mib"),
        "{}",
        job.failure
    );
    assert!(
        !got.is_empty() && got.len() < puzzles.len(),
        "{}",
        got.len()
    );
    for (r, answer) in got.iter().zip(&answers) {
        assert_eq!(moves(r), *answer);
    }
    println!(
        "store full after {} of {} results",
        got.len(),
        puzzles.len()
    );
    // Batches are still solved...
    let mut client = colball_client::remote::Client::connect(&cluster.url())
        .await
        .unwrap();
    crate::common::solves(&mut client, 46, 200).await;
    // ... and once the failed job is deleted, its room is reused.
    jobs.delete(&id).await.unwrap();
    let (small, _) = mixed(47, 100, 0);
    let id = jobs.submit(&small, None, "").await.unwrap().id;
    assert_eq!(read(&mut jobs, &id, 0, true, usize::MAX).await.len(), 100);
    assert_eq!(
        jobs.get(&id).await.unwrap().state,
        v1::JobState::Done as i32
    );
    cluster.shutdown().await;
}

/// One HTTP/1.0 request: the status code and the body.
pub(crate) async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let (code, _, body) = http_with_head(addr, method, path, token, body).await;
    (code, body)
}

/// One HTTP/1.0 request: the status code, the head and the body.
pub(crate) async fn http_with_head(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String, String) {
    let auth = token.map_or_else(String::new, |t| format!("authorization: Bearer {t}\r\n"));
    exchange(addr, method, path, &auth, body).await
}

/// One HTTP/1.0 POST of a JSON document: the status code and the body.
pub(crate) async fn http_json(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, String) {
    let auth = token.map_or_else(String::new, |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!("{auth}content-type: application/json\r\n");
    let (code, _, body) = exchange(addr, "POST", path, &head, body).await;
    (code, body)
}

/// One HTTP/1.0 exchange with the header lines `head` (each ending in
/// CRLF): the status code, the head and the body.
pub(crate) async fn exchange(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    head: &str,
    body: &[u8],
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.0\r\nhost: test\r\n{head}content-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut text = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        s.read_to_string(&mut text),
    )
    .await
    .unwrap()
    .unwrap();
    let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (code, head.to_string(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_job_api_submits_lists_streams_and_deletes() {
    let dir = std::env::temp_dir().join(format!("colball-jobs-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice a-token\nbob b-token\n").unwrap();
    let config = Config {
        access: AccessConfig {
            client_tokens_file: Some(tokens),
            ..quick().access
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 1, 1).await.unwrap();
    let addr = cluster.serve_http().await.unwrap();
    let (puzzles, answers) = mixed(43, 300, 0);
    let mut body = String::new();
    for (_, p) in &puzzles {
        let (size, start, target) = (p.size(), p.start().rows(), p.target().rows());
        body.push_str(&format!(
            "{} {}\n{}\n{}\n",
            size.rows(),
            size.cols(),
            start.join("\n"),
            target.join("\n")
        ));
    }
    body.push_str("0\n");
    assert_eq!(
        http(addr, "POST", "/api/v1/jobs", None, body.as_bytes())
            .await
            .0,
        401
    );
    let (code, created) = http(
        addr,
        "POST",
        "/api/v1/jobs?priority=normal&name=web",
        Some("a-token"),
        body.as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["puzzles"], 300);
    let (code, bad) = http(addr, "POST", "/api/v1/jobs", Some("a-token"), b"2 2\nRB\n").await;
    assert_eq!(code, 400, "{bad}");
    // Every error is a JSON object naming what was wrong, the framework's
    // own refusals included.
    let results = format!("/api/v1/jobs/{id}/results?from=x");
    for (method, path, expected) in [
        ("POST", "/api/v1/jobs", 400),
        ("GET", results.as_str(), 400),
        ("PUT", "/api/v1/jobs", 405),
        ("GET", "/api/v1/nothing/here", 404),
    ] {
        let body: &[u8] = if method == "POST" { b"2 2\nRB\n" } else { b"" };
        let (code, text) = http(addr, method, path, Some("a-token"), body).await;
        assert_eq!(code, expected, "{method} {path}: {text}");
        let error: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"));
        assert!(
            error["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{method} {path}: {text}"
        );
    }
    // Results follow the job to its end, as NDJSON in input order.
    let (code, lines) = http(
        addr,
        "GET",
        &format!("/api/v1/jobs/{id}/results?from=0&follow=1"),
        Some("a-token"),
        b"",
    )
    .await;
    assert_eq!(code, 200);
    let records: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 300);
    for (i, (r, answer)) in records.iter().zip(&answers).enumerate() {
        assert_eq!(r["id"], (i + 1).to_string());
        assert_eq!(r["moves"], *answer);
    }
    let (_, one) = http(
        addr,
        "GET",
        &format!("/api/v1/jobs/{id}"),
        Some("a-token"),
        b"",
    )
    .await;
    let one: serde_json::Value = serde_json::from_str(&one).unwrap();
    assert_eq!(
        (one["state"].as_str(), one["name"].as_str()),
        (Some("done"), Some("web"))
    );
    let (_, list) = http(addr, "GET", "/api/v1/jobs", Some("a-token"), b"").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&list).unwrap()[0]["id"],
        id.as_str()
    );
    // Bob does not see it or delete it; Alice deletes it, and it is gone.
    let path = format!("/api/v1/jobs/{id}");
    for (method, token, expected) in [
        ("GET", "b-token", 404),
        ("DELETE", "b-token", 404),
        ("DELETE", "a-token", 204),
        ("GET", "a-token", 404),
    ] {
        let (code, body) = http(addr, method, &path, Some(token), b"").await;
        assert_eq!(code, expected, "{method} by {token}: {body}");
    }
    cluster.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Memory does not grow with a job's size: a coordinator process takes a
/// 2,000,000-puzzle job (stored in full, then solved a window at a time
/// by one worker for a while) with its peak resident set growing by less
/// than a 200,000-puzzle job's puzzles would take in memory. The job's
/// own cost is measured: the result cache is off and the event log keeps
/// 1,000 events, since both are bounded by their own flags whatever the
/// job (and filled by however many results arrive before the reading).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_million_puzzle_job_costs_the_coordinator_a_bounded_window() {
    use std::time::Duration;
    const PUZZLES: usize = 2_000_000;
    let dir = std::env::temp_dir().join(format!("colball-jobs-2m-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.to_str().unwrap().to_string();
    let bin = Path::new(BIN);
    let c = procs::coordinator(
        bin,
        "127.0.0.1:0",
        &[
            "--data-dir",
            &data,
            "--cache-entries",
            "0",
            "--events-retained",
            "1000",
        ],
    );
    let (before, _) = c.proc.memory_kib().unwrap();
    let two = colball_solver::Size::new(2, 2).unwrap();
    let mut g = colball_solver::generate::Generator::new(48);
    let puzzles: Vec<_> = (0..PUZZLES)
        .map(|i| (format!("p{i}"), g.uniform(two)))
        .collect();
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let id = jobs.submit(&puzzles, None, "2m").await.unwrap().id;
    drop(puzzles);
    let (stored, _) = c.proc.memory_kib().unwrap();
    let _w = procs::worker(bin, &c.url, "w", Stderr::Warn, &[]);
    // A few windows solved.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while jobs.get(&id).await.unwrap().solved < 50_000 {
        assert!(std::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (peak, rss) = c.proc.memory_kib().unwrap();
    println!(
        "coordinator peak RSS {:.1} MiB before the job, {:.1} MiB once stored, {:.1} MiB while it runs (RSS {:.1} MiB)",
        before as f64 / 1024.0,
        stored as f64 / 1024.0,
        peak as f64 / 1024.0,
        rss as f64 / 1024.0
    );
    // 2,000,000 tasks in memory would take hundreds of MiB; the job's
    // chunks and one window take a few.
    assert!(peak - before < 48 * 1024, "{} KiB more", peak - before);
    jobs.delete(&id).await.unwrap();
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An HTTP upload is read as it arrives: 2,000,000 puzzles posted as one
/// 32 MB classic file raise the coordinator's peak resident set by less
/// than 64 MiB (buffered and parsed whole, they took over 700 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_million_puzzle_http_upload_is_stored_as_it_arrives() {
    const PUZZLES: usize = 2_000_000;
    let two = colball_solver::Size::new(2, 2).unwrap();
    let mut g = colball_solver::generate::Generator::new(49);
    let mut body = Vec::with_capacity(PUZZLES * 16);
    for _ in 0..PUZZLES {
        body.extend_from_slice(
            colball_solver::format::classic::format_case(&g.uniform(two)).as_bytes(),
        );
    }
    upload_stays_bounded("http-2m", &body, PUZZLES, false).await;
}

/// Submits `body` (a puzzle file of `puzzles` puzzles, or a JSON
/// submission when `json`) over HTTP to a coordinator process with its
/// store on disk, and checks that its peak resident set grew by less than
/// 64 MiB; then deletes the job.
pub(crate) async fn upload_stays_bounded(name: &str, body: &[u8], puzzles: usize, json: bool) {
    let dir = std::env::temp_dir().join(format!("colball-jobs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.to_str().unwrap().to_string();
    let c = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &["--data-dir", &data]);
    let (before, _) = c.proc.memory_kib().unwrap();
    let addr = c.http.parse().unwrap();
    let (code, created) = if json {
        http_json(addr, "/api/v1/jobs", None, body).await
    } else {
        http(addr, "POST", "/api/v1/jobs?name=big", None, body).await
    };
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["puzzles"], puzzles);
    let (peak, _) = c.proc.memory_kib().unwrap();
    println!(
        "coordinator peak RSS {:.1} MiB before, {:.1} MiB after a {} MB {}",
        before as f64 / 1024.0,
        peak as f64 / 1024.0,
        body.len() >> 20,
        if json { "JSON submission" } else { "upload" }
    );
    assert!(peak - before < 64 * 1024, "{} KiB more", peak - before);
    let id = created["id"].as_str().unwrap();
    let (code, _) = http(addr, "DELETE", &format!("/api/v1/jobs/{id}"), None, b"").await;
    assert_eq!(code, 204);
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A raw submission whose chunks the test sends one by one: the options
/// go first; the call runs in a task so it can be cut short.
fn submission(
    url: &str,
) -> (
    tokio::sync::mpsc::Sender<v1::SubmitRequest>,
    tokio::task::JoinHandle<Result<v1::JobAccepted, tonic::Status>>,
) {
    submission_with(url, v1::JobOptions::default())
}

/// [`submission`] with `options`.
fn submission_with(
    url: &str,
    options: v1::JobOptions,
) -> (
    tokio::sync::mpsc::Sender<v1::SubmitRequest>,
    tokio::task::JoinHandle<Result<v1::JobAccepted, tonic::Status>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.try_send(v1::SubmitRequest {
        kind: Some(v1::submit_request::Kind::Options(options)),
    })
    .unwrap();
    let url = url.to_string();
    let call = tokio::spawn(async move {
        let mut raw = v1::jobs_client::JobsClient::connect(url).await.unwrap();
        raw.submit(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map(|r| r.into_inner())
    });
    (tx, call)
}

fn chunk(puzzles: Vec<v1::Puzzle>) -> v1::SubmitRequest {
    v1::SubmitRequest {
        kind: Some(v1::submit_request::Kind::Puzzles(v1::PuzzleChunk {
            puzzles,
        })),
    }
}

fn wire(puzzles: &[(String, colball_solver::Puzzle)]) -> Vec<v1::Puzzle> {
    puzzles
        .iter()
        .map(|(id, p)| colball_proto::puzzle_to_wire(id.clone(), p))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_solved_while_the_rest_of_it_is_still_arriving() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let url = cluster.url();
    let mut watch = v1::solver_client::SolverClient::connect(url.clone())
        .await
        .unwrap()
        .watch(v1::WatchRequest {
            from_sequence: None,
        })
        .await
        .unwrap()
        .into_inner();
    let (puzzles, answers) = mixed(47, 100, 0);
    let (tx, call) = submission(&url);
    tx.send(chunk(wire(&puzzles[..60]))).await.unwrap();
    // The first chunk's puzzles are solved before the upload is over.
    let mut solved = 0;
    while solved < 60 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), watch.message())
            .await
            .expect("the first chunk is solved during the upload")
            .unwrap()
            .unwrap();
        if let Some(v1::cluster_event::Kind::Result(_)) = event.kind {
            solved += 1;
        }
    }
    assert!(
        !call.is_finished(),
        "the job was acknowledged before its end"
    );
    // The rest, with a malformed puzzle among it.
    let mut rest = wire(&puzzles[60..]);
    rest.insert(
        20,
        v1::Puzzle {
            id: "bad".into(),
            start: vec!["RRB".into(), "BG".into()],
            target: vec!["BR".into(), "GB".into()],
        },
    );
    tx.send(chunk(rest)).await.unwrap();
    drop(tx);
    let accepted = call.await.unwrap().unwrap();
    assert_eq!(accepted.puzzles, 101);
    let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
    let results = read(&mut jobs, &accepted.id, 0, true, usize::MAX).await;
    assert_eq!(results.len(), 101);
    for r in &results {
        let at = r.index as usize;
        match at {
            80 => assert!(
                matches!(r.outcome, Some(puzzle_result::Outcome::Error(_))),
                "{r:?}"
            ),
            _ => {
                let i = if at > 80 { at - 1 } else { at };
                assert_eq!(
                    (r.id.as_str(), moves(r)),
                    (puzzles[i].0.as_str(), answers[i])
                );
            }
        }
    }
    let job = jobs.get(&accepted.id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32);
    assert_eq!((job.solved, job.errors, job.remaining), (100, 1, 0));
    cluster.shutdown().await;
}

/// The next message of a result stream, within 10 s.
async fn within(
    stream: &mut tonic::Streaming<v1::PuzzleResult>,
) -> Result<Option<v1::PuzzleResult>, tonic::Status> {
    tokio::time::timeout(std::time::Duration::from_secs(10), stream.message())
        .await
        .expect("a result stream answers within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_read_by_its_key_while_its_puzzles_are_still_arriving() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let url = cluster.url();
    let (puzzles, answers) = mixed(53, 100, 0);
    let keyed = |key: &str| v1::JobOptions {
        key: key.into(),
        ..v1::JobOptions::default()
    };
    let by_key = |key: &str| v1::ResultsRequest {
        key: key.into(),
        follow: true,
        ..v1::ResultsRequest::default()
    };
    let raw = v1::jobs_client::JobsClient::connect(url.clone())
        .await
        .unwrap();
    // The follower may ask before the submission has begun: it waits.
    let follower = tokio::spawn({
        let mut raw = raw.clone();
        let request = by_key("k-1");
        async move { raw.results(request).await }
    });
    let (tx, call) = submission_with(&url, keyed("k-1"));
    let mut stream = follower.await.unwrap().unwrap().into_inner();
    // An empty chunk first changes nothing.
    tx.send(chunk(Vec::new())).await.unwrap();
    tx.send(chunk(wire(&puzzles[..60]))).await.unwrap();
    for (i, answer) in answers[..60].iter().enumerate() {
        let r = within(&mut stream).await.unwrap().expect("a result");
        assert_eq!((r.index, moves(&r)), (i as u64, *answer));
    }
    assert!(!call.is_finished(), "read before the upload was over");
    // While the job runs, its key is taken.
    let (tx2, call2) = submission_with(&url, keyed("k-1"));
    drop(tx2);
    let refused = call2.await.unwrap().unwrap_err();
    assert_eq!(refused.code(), Code::AlreadyExists, "{refused:?}");
    assert!(refused.message().contains("key"), "{refused:?}");
    // The rest, with a malformed puzzle first: its error result comes in
    // its place, while the rest is solved.
    let mut rest = wire(&puzzles[60..]);
    rest.insert(
        0,
        v1::Puzzle {
            id: "bad".into(),
            start: vec!["RRB".into(), "BG".into()],
            target: vec!["BR".into(), "GB".into()],
        },
    );
    tx.send(chunk(rest)).await.unwrap();
    let bad = within(&mut stream).await.unwrap().expect("a result");
    assert_eq!(bad.index, 60);
    assert!(
        matches!(bad.outcome, Some(puzzle_result::Outcome::Error(_))),
        "{bad:?}"
    );
    drop(tx);
    let accepted = call.await.unwrap().unwrap();
    assert_eq!(accepted.puzzles, 101);
    for (i, answer) in answers.iter().enumerate().skip(60) {
        let r = within(&mut stream).await.unwrap().expect("a result");
        assert_eq!((r.index, moves(&r)), (i as u64 + 1, *answer));
    }
    // The stream ends after the last one, now that the size is known.
    assert!(within(&mut stream).await.unwrap().is_none());

    // A follower of a submission cut short is told so.
    let (tx, call) = submission_with(&url, keyed("k-2"));
    tx.send(chunk(wire(&puzzles[..10]))).await.unwrap();
    let mut stream = raw
        .clone()
        .results(by_key("k-2"))
        .await
        .unwrap()
        .into_inner();
    let first = within(&mut stream).await.unwrap().expect("a result");
    assert_eq!(first.index, 0);
    // A second options message fails the submission.
    tx.send(v1::SubmitRequest {
        kind: Some(v1::submit_request::Kind::Options(keyed("k-2"))),
    })
    .await
    .unwrap();
    let failed = call.await.unwrap().unwrap_err();
    assert_eq!(failed.code(), Code::InvalidArgument, "{failed:?}");
    let end = loop {
        match within(&mut stream).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without saying the job is gone"),
            Err(status) => break status,
        }
    };
    assert_eq!(end.code(), Code::Aborted, "{end:?}");
    assert!(end.message().contains("cut short"), "{end:?}");
    drop(tx);
    // A malformed key is named as such.
    let bad = raw.clone().results(by_key("no spaces")).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument, "{bad:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_ends_short_of_what_it_announced_is_not_a_job() {
    let config = Config {
        store: StoreConfig {
            max_job_puzzles: 1000,
            ..quick().store
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 1, 1).await.unwrap();
    let url = cluster.url();
    let (puzzles, answers) = mixed(59, 20, 0);
    let announced = |n: u64| v1::JobOptions {
        puzzles: n,
        key: "short".into(),
        ..v1::JobOptions::default()
    };
    // Ten of twenty, then the end of the stream: refused, nothing kept.
    let (tx, call) = submission_with(&url, announced(20));
    tx.send(chunk(wire(&puzzles[..10]))).await.unwrap();
    drop(tx);
    let refused = call.await.unwrap().unwrap_err();
    assert_eq!(refused.code(), Code::Aborted, "{refused:?}");
    assert!(refused.message().contains("10 of the 20"), "{refused:?}");
    // More than announced, and more than the coordinator takes.
    let (tx, call) = submission_with(&url, announced(5));
    tx.send(chunk(wire(&puzzles[..10]))).await.unwrap();
    let refused = call.await.unwrap().unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    drop(tx);
    let (tx, call) = submission_with(&url, announced(1001));
    let refused = call.await.unwrap().unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    drop(tx);
    let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
    assert!(jobs.list().await.unwrap().is_empty());
    // Exactly as announced: a job, and its key was free again.
    let (tx, call) = submission_with(&url, announced(20));
    tx.send(chunk(wire(&puzzles[..10]))).await.unwrap();
    tx.send(chunk(wire(&puzzles[10..]))).await.unwrap();
    drop(tx);
    let accepted = call.await.unwrap().unwrap();
    let results = read(&mut jobs, &accepted.id, 0, true, usize::MAX).await;
    let got: Vec<i64> = results.iter().map(moves).collect();
    assert_eq!(got, answers);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_cut_short_stops_its_run_and_leaves_nothing() {
    let dir = std::env::temp_dir().join(format!("colball-jobs-cut-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = Config {
        store: StoreConfig {
            data_dir: Some(dir.clone()),
            ..quick().store
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    let mut fake = FakeWorker::join(&url, 2).await.unwrap();
    let (tx, call) = submission(&url);
    tx.send(chunk(wire(&four_by_four(11, 20)))).await.unwrap();
    // The worker is given the job's puzzles while the upload is open.
    let held = fake.take(4).await;
    assert_eq!(held.len(), 4);
    // The client goes away mid-upload.
    call.abort();
    let _ = call.await;
    let cancelled = fake.cancelled().await;
    assert!(held.iter().any(|t| cancelled.contains(t)), "{cancelled:?}");
    // The job and its puzzles are deleted, not left to finish unseen.
    let db = rusqlite::Connection::open(dir.join(colball_server::jobs::store::sqlite::FILE_NAME))
        .unwrap();
    let left = || -> (i64, i64) {
        let count = |table: &str| {
            db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
                .unwrap()
        };
        (count("jobs"), count("chunks"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while left() != (0, 0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(left(), (0, 0));
    drop(tx);
    drop(fake);
    cluster.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A coordinator told to stop ends the streams open on it with a status a
/// program can tell apart without reading its English: UNAVAILABLE with
/// the `SHUTTING_DOWN` reason (what `colball solve --connect` rides out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_cut_by_a_shutdown_say_so_by_their_reason() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let url = cluster.url();
    // A worker that holds what it is given: both streams stay open.
    let mut fake = FakeWorker::join(&url, 2).await.unwrap();
    let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
    let id = jobs.submit(&four_by_four(3, 4), None, "").await.unwrap().id;
    let mut results = jobs.results(&id, 0, true).await.unwrap();
    let mut raw = v1::solver_client::SolverClient::connect(url.clone())
        .await
        .unwrap();
    let batch = v1::SolveBatchRequest {
        puzzles: four_by_four(4, 4)
            .iter()
            .map(|(id, p)| colball_proto::puzzle_to_wire(id.clone(), p))
            .collect(),
        ..v1::SolveBatchRequest::default()
    };
    let mut solving = raw.solve_batch(batch).await.unwrap().into_inner();
    assert_eq!(fake.take(4).await.len(), 4);
    let ends = tokio::spawn(async move {
        let job_end = loop {
            match results.next().await {
                Some(Ok(_)) => {}
                Some(Err(ClientError::Status(s))) => break Some(s),
                _ => break None,
            }
        };
        let batch_end = loop {
            match solving.message().await {
                Ok(Some(_)) => {}
                Ok(None) => break None,
                Err(s) => break Some(s),
            }
        };
        (job_end, batch_end)
    });
    let lifecycle = cluster.app.lifecycle.clone();
    assert!(
        lifecycle.running_tasks() >= 3,
        "the job, its follower, the session"
    );
    cluster.shutdown().await;
    // The shutdown waited for the tasks of the job, its follower, the
    // batch and the worker's session.
    assert_eq!(lifecycle.running_tasks(), 0);
    let (job_end, batch_end) = ends.await.unwrap();
    for end in [job_end, batch_end] {
        let status = end.expect("the stream ended with a status");
        assert!(
            colball_proto::reason::is_shutting_down(&status),
            "{status:?}"
        );
    }
    drop(fake);
}
