//! Several coordinators on one PostgreSQL database (not a timed test):
//! `cargo bench -p colball-server --bench scale_out`.
//!
//! **Throughput.** For 1, 2 and 3 coordinators (`COORDINATORS` to choose
//! others, comma-separated) on one throwaway PostgreSQL server (loopback,
//! `pg_stat_statements`), each with `SESSIONS` (default 10) simulated
//! worker sessions that answer every task at once from answers computed
//! before the clock starts: `JOBS` (default 6) jobs sharing `PUZZLES`
//! (default 240,000) uniformly random 3x3 puzzles, submitted round-robin
//! over the coordinators and each followed in input order on the one it
//! was submitted to, as `colball solve --connect` does. Prints puzzles a
//! second, the coordinators' CPU a puzzle (all of them), and the
//! database's statements, rows, transactions and server CPU a puzzle. `ROUNDS` (default 2)
//! rounds, each on a fresh server.
//!
//! **Takeover.** Two coordinators: A's sessions take tasks and answer
//! none, B's answer at once. A job of four windows is submitted on B;
//! once A holds a window, A is SIGKILLed, and the time from the kill until
//! the job is done (B takes A's window over when its lease runs out) is
//! printed against the lease (`--job-lease-secs`, `LEASE` default 10).
//!
//! **A result cache in the database.** What sharing answers through the
//! database would cost: 100,000 answers stored by arrays and looked up
//! 1,024 keys a query, the database's CPU and the wall time an answer,
//! beside a worker thread's time to solve a 3x3 and a 4x4 puzzle.
//!
//! **Deleting a big job.** One job of `DELETE_PUZZLES` (default
//! 2,000,000) puzzles on one coordinator: the database's growth a puzzle,
//! and how long its deletion takes.
//!
//! `PARTS` (default `throughput,takeover,delete,cache`) picks the parts;
//! `STATEMENTS=N` prints the N statements called most in each throughput
//! run.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::sync::Arc;
use std::time::{Duration, Instant};

use colball_client::jobs::{JobRun, Jobs, solve_in_order};
use colball_client::remote::Security;
use colball_proto::v1;
use colball_solver::{Puzzle, Size};

mod common;
#[path = "common/sim.rs"]
mod sim;
use colball_testkit::procs;
use tokio_stream::StreamExt;

use common::{batch, cpu_seconds, env, server_bin};
use sim::{Answers, Database, answers, sessions};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// A coordinator on the database at `url` (result cache off, 1 s
/// heartbeats).
fn coordinator(url: &str, lease: &str) -> procs::Coordinator {
    let args = [
        "--cache-entries",
        "0",
        "--max-batches-per-client",
        "64",
        "--store",
        url,
        "--job-lease-secs",
        lease,
    ];
    procs::coordinator_beating(&server_bin(BIN), "127.0.0.1:0", 1000, &args)
}

/// Coordinators on one database, each with `sessions` simulated workers
/// (answering, or `mute`).
async fn cluster(
    db: &Database,
    mutes: &[bool],
    sessions_each: usize,
    answers: &Arc<Answers>,
    stop: &tokio_util::sync::CancellationToken,
    lease: &str,
) -> Vec<procs::Coordinator> {
    let mut all = Vec::new();
    for &mute in mutes {
        let c = coordinator(&db.url, lease);
        sessions(&c.url, sessions_each, answers, mute, stop).await;
        procs::wait_metric(&c.http, "workers", |w| w as usize == sessions_each).await;
        all.push(c);
    }
    all
}

/// Runs `puzzles` as `jobs` jobs, job `j` submitted to and followed on
/// coordinator `j % coordinators.len()`.
async fn run_jobs(
    coordinators: &[procs::Coordinator],
    puzzles: &Arc<Vec<(String, Puzzle)>>,
    jobs: usize,
) {
    let part = puzzles.len().div_ceil(jobs);
    let mut tasks = Vec::new();
    for j in 0..jobs {
        let url = coordinators[j % coordinators.len()].url.clone();
        let puzzles = puzzles.clone();
        let range = (j * part).min(puzzles.len())..((j + 1) * part).min(puzzles.len());
        tasks.push(tokio::task::spawn_blocking(move || {
            let mut n = 0;
            let counted = |_| -> Result<(), std::convert::Infallible> {
                n += 1;
                Ok(())
            };
            let run = JobRun::default();
            solve_in_order(
                &url,
                &Security::default(),
                &run,
                &puzzles[range],
                &mut |_| {},
                counted,
            )
            .unwrap();
            n
        }));
    }
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    assert_eq!(n, puzzles.len());
}

/// One throughput run with `k` coordinators.
async fn throughput(
    k: usize,
    answers: &Arc<Answers>,
    puzzles: &Arc<Vec<(String, Puzzle)>>,
    warm: &Arc<Vec<(String, Puzzle)>>,
) {
    let db = Database::start();
    let stop = tokio_util::sync::CancellationToken::new();
    let sessions_each = env("SESSIONS", 10);
    let all = cluster(&db, &vec![false; k], sessions_each, answers, &stop, "10").await;
    run_jobs(&all, warm, k).await;
    let before = db.costs().await;
    let cpu: f64 = all.iter().map(|c| cpu_seconds(c.proc.pid())).sum();
    let began = Instant::now();
    run_jobs(&all, puzzles, env("JOBS", 6)).await;
    let wall = began.elapsed().as_secs_f64();
    let cpu = all.iter().map(|c| cpu_seconds(c.proc.pid())).sum::<f64>() - cpu;
    let after = db.costs().await;
    let n = puzzles.len() as f64;
    let claimed: u64 = all
        .iter()
        .map(|c| procs::metric(&c.http, "job_windows_claimed_total"))
        .sum();
    println!(
        "| {k} | {:.0} | {:.2} us | {:.4} | {:.2} | {:.4} | {:.2} us | {claimed} |",
        n / wall,
        1e6 * cpu / n,
        (after.statements - before.statements) / n,
        (after.rows - before.rows) / n,
        (after.transactions - before.transactions) / n,
        1e6 * (after.cpu - before.cpu) / n,
    );
    let top = env("STATEMENTS", 0);
    if top > 0 {
        for (calls, rows, query) in db.top(top as i64).await {
            println!("    {calls} calls, {rows} rows: {query}");
        }
    }
    stop.cancel();
}

/// One takeover run: the seconds from A's kill until the job is done.
async fn takeover(answers: &Arc<Answers>, puzzles: &[(String, Puzzle)], lease: &str) -> f64 {
    let db = Database::start();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut all = cluster(&db, &[true, false], 5, answers, &stop, lease).await;
    let b = all.pop().unwrap();
    let a = all.pop().unwrap();
    let mut jobs = Jobs::connect(&b.url, &Security::default()).await.unwrap();
    let id = jobs.submit(puzzles, None, "").await.unwrap().id;
    procs::wait_metric(&a.http, "in_flight", |n| n > 0).await;
    let killed = Instant::now();
    a.proc.kill();
    loop {
        let job = jobs.get(&id).await.unwrap();
        if job.state == v1::JobState::Done as i32 {
            break;
        }
        assert!(killed.elapsed() < Duration::from_secs(120), "{job:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = killed.elapsed().as_secs_f64();
    let taken = procs::metric(&b.http, "job_windows_taken_over_total")
        + procs::metric(&b.http, "job_windows_rescued_total");
    assert!(taken >= 1, "B took no window over");
    stop.cancel();
    took
}

/// What a result cache in the database would cost, against what a hit
/// saves: answers stored and looked up by arrays (as the job store
/// writes), `CACHE_ENTRIES` (default 100,000) of them, looked up 1,024 at a
/// time; the database's CPU and the wall time a key, beside the time a
/// worker thread takes to solve a puzzle of each size.
async fn shared_cache_costs(puzzles: &[(String, Puzzle)]) {
    let db = Database::start();
    let client = db.client().await;
    client
        .batch_execute("CREATE TABLE answers (key bigint PRIMARY KEY, body bytea NOT NULL)")
        .await
        .unwrap();
    let keys: Vec<i64> = puzzles
        .iter()
        .map(|(_, p)| (i64::from(p.start().packed()) << 32) | i64::from(p.target().packed()))
        .collect();
    let body = vec![0u8; 24];
    let cpu = sim::tree_cpu_seconds(db.server.pid());
    let began = Instant::now();
    for chunk in keys.chunks(4096) {
        let bodies: Vec<&[u8]> = chunk.iter().map(|_| body.as_slice()).collect();
        client
            .execute(
                "INSERT INTO answers SELECT * FROM unnest($1::bigint[], $2::bytea[]) ON CONFLICT DO NOTHING",
                &[&chunk, &bodies],
            )
            .await
            .unwrap();
    }
    let n = keys.len() as f64;
    let put = (
        1e6 * began.elapsed().as_secs_f64() / n,
        1e6 * (sim::tree_cpu_seconds(db.server.pid()) - cpu) / n,
    );
    let cpu = sim::tree_cpu_seconds(db.server.pid());
    let began = Instant::now();
    let mut found = 0;
    for chunk in keys.chunks(1024) {
        found += client
            .query(
                "SELECT key, body FROM answers WHERE key = ANY($1)",
                &[&chunk],
            )
            .await
            .unwrap()
            .len();
    }
    assert_eq!(found, keys.len());
    let get = (
        1e6 * began.elapsed().as_secs_f64() / n,
        1e6 * (sim::tree_cpu_seconds(db.server.pid()) - cpu) / n,
    );
    println!(
        "\na result cache in the database, {} answers: stored {:.2} us wall and {:.2} us of the database's CPU an answer; looked up {:.2} us wall and {:.2} us of its CPU a key (1,024 a query)",
        keys.len(),
        put.0,
        put.1,
        get.0,
        get.1
    );
    for (size, count) in [("3x3", 20_000), ("4x4", 300)] {
        let (r, c) = size.split_once('x').unwrap();
        let size = Size::new(r.parse().unwrap(), c.parse().unwrap()).unwrap();
        let set = batch(10, size, count);
        let mut search = colball_solver::BidirSearch::new();
        let began = Instant::now();
        for (_, p) in &set {
            std::hint::black_box(search.solve(p).answer());
        }
        println!(
            "  a worker thread solves a {size} puzzle in {:.2} us",
            1e6 * began.elapsed().as_secs_f64() / count as f64
        );
    }
}

/// One job of `DELETE_PUZZLES` (default 2,000,000) puzzles through one
/// coordinator, followed to its end: what the database grew by a puzzle,
/// and the time its deletion takes (the client's call, to its answer).
async fn delete_cost(answers: &Arc<Answers>, puzzles: &[(String, Puzzle)]) {
    let n = env("DELETE_PUZZLES", 2_000_000);
    let big: Vec<(String, Puzzle)> = puzzles
        .iter()
        .cycle()
        .take(n)
        .enumerate()
        .map(|(i, (_, p))| (format!("q{}", i + 1), *p))
        .collect();
    let db = Database::start();
    let stop = tokio_util::sync::CancellationToken::new();
    let all = cluster(&db, &[false], env("SESSIONS", 10), answers, &stop, "10").await;
    let client = db.client().await;
    let size = async || -> i64 {
        client
            .query_one("SELECT pg_database_size('bench')", &[])
            .await
            .unwrap()
            .get(0)
    };
    let before = size().await;
    let mut jobs = Jobs::connect(&all[0].url, &Security::default())
        .await
        .unwrap();
    let id = jobs.submit(&big, None, "").await.unwrap().id;
    let mut results = jobs.results(&id, 0, true).await.unwrap();
    let mut got = 0;
    while let Some(r) = results.next().await {
        r.unwrap();
        got += 1;
    }
    assert_eq!(got, n);
    let grown = size().await - before;
    let began = Instant::now();
    jobs.delete(&id).await.unwrap();
    let took = began.elapsed().as_secs_f64();
    let left: i64 = client
        .query_one(
            "SELECT (SELECT count(*) FROM colball_puzzle_blocks) \
                  + (SELECT count(*) FROM colball_result_groups) \
                  + (SELECT count(*) FROM colball_windows)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "rows of the deleted job left");
    println!(
        "\none job of {n} puzzles: the database grew {:.1} bytes a puzzle; deleting it took {took:.3} s",
        grown as f64 / n as f64
    );
    stop.cancel();
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env("PUZZLES", 240_000);
    let rounds = env("ROUNDS", 2).max(1);
    let parts =
        std::env::var("PARTS").unwrap_or_else(|_| "throughput,takeover,delete,cache".into());
    let counts: Vec<usize> = std::env::var("COORDINATORS")
        .unwrap_or_else(|_| "1,2,3".into())
        .split(',')
        .map(|n| n.trim().parse().expect("COORDINATORS: numbers"))
        .collect();
    let size = Size::new(3, 3).unwrap();
    let puzzles = Arc::new(batch(7, size, count));
    let warm = Arc::new(batch(8, size, 20_000));
    let window_jobs = batch(9, size, 4 * 8192);
    let all: Vec<_> = puzzles
        .iter()
        .chain(warm.iter())
        .chain(window_jobs.iter())
        .cloned()
        .collect();
    let answers = Arc::new(answers(&all));
    if parts.contains("throughput") {
        println!(
            "{count} 3x3 puzzles in {} jobs, {} simulated sessions a coordinator, one PostgreSQL\n",
            env("JOBS", 6),
            env("SESSIONS", 10)
        );
        println!(
            "| coordinators | puzzles/s | coordinators' CPU a puzzle | statements a puzzle | rows a puzzle | transactions a puzzle | database CPU a puzzle | windows claimed |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
        for round in 0..rounds {
            // Alternating order, so that a host speeding up or slowing
            // down favours none.
            let mut order = counts.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for &k in &order {
                throughput(k, &answers, &puzzles, &warm).await;
            }
        }
    }
    if parts.contains("takeover") {
        let lease = env("LEASE", 10).to_string();
        println!("\ntakeover after a SIGKILL, lease {lease} s:");
        for round in 0..rounds {
            let took = takeover(&answers, &window_jobs, &lease).await;
            println!(
                "  round {}: the job done {took:.2} s after the kill",
                round + 1
            );
        }
    }
    if parts.contains("delete") {
        for _ in 0..rounds {
            delete_cost(&answers, &puzzles).await;
        }
    }
    if parts.contains("cache") {
        for _ in 0..rounds {
            shared_cache_costs(&puzzles[..count.min(100_000)]).await;
        }
    }
}
