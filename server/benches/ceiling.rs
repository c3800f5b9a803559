//! The coordinator's ceiling (not a timed test):
//! `cargo bench -p colball-server --bench ceiling`.
//!
//! A coordinator process (result cache off, store in memory) and, in this
//! process, N simulated worker sessions that speak the real worker
//! protocol over loopback and answer every task at once from answers
//! computed before the clock starts; clients in this process send `PUZZLES`
//! (default 400,000) uniformly random 3x3 puzzles as `SolveBatch` requests
//! (`CLIENTS`, default 4, at a time) and read every result. For N = 1, 10,
//! 100 and 1,000 sessions (`SESSIONS` to choose others, comma-separated) it
//! prints the puzzles dispatched and answered per second and the
//! coordinator's CPU per puzzle (user + system, from `/proc/PID/stat`).
//!
//! Then (unless `QUEUED=0`) the memory a queued puzzle costs: one session
//! that takes its credit's worth of tasks and answers none, and `QUEUED`
//! (default 1,000,000) puzzles admitted behind it, unread; the coordinator's
//! resident set before and after, per puzzle, and the growth over the
//! second half alone (what a queued puzzle adds, without the pages the
//! allocator keeps from decoding the requests).
//!
//! Sessions share TCP connections, 50 to a connection (HTTP/2 streams), so
//! 1,000 sessions need 20 connections. `COLBALL_SERVER=PATH` measures
//! another build of the coordinator (an older commit's, for a ratio in one
//! sitting).
//!
//! `VIA=job` sends the same puzzles the way `colball solve --connect`
//! does instead: each client's share as one durable job, followed in input
//! order (`colball_client::jobs::solve_in_order`), the coordinator's store
//! on disk (`--data-dir`); `VIA=batch,job` measures both, side by side in
//! one sitting. `VIA=pgjob` runs the jobs on PostgreSQL instead (`--store`,
//! a throwaway server on loopback with `pg_stat_statements`), and prints
//! the database's cost too: statements, rows and transactions per puzzle,
//! and the server's CPU per puzzle (the postmaster and its backends).
//!
//! `AGAINST=PATH` compares this build with another, side by side: for
//! each session count, `ROUNDS` (default 5) rounds that each run both
//! coordinators on the same puzzles, one after the other (in alternating
//! order, so that a host speeding up or slowing down favours neither),
//! then the median of the rounds' ratios of CPU per puzzle and of
//! throughput. On a noisy host the median ratio of many short pairs is the
//! figure to compare, not one run of each. The memory figures are skipped.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::sync::Arc;
use std::time::{Duration, Instant};

use colball_client::jobs::{JobRun, Jobs, solve_in_order};
use colball_client::remote::{Client, REQUEST_CHUNK, Security};
use colball_solver::{Puzzle, Size};

mod common;
#[path = "common/sim.rs"]
mod sim;
use colball_testkit::procs;

use common::{batch, count_all, cpu_seconds, env, server_bin};
use sim::{Answers, Database, answers, sessions};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// Prints the coordinator's resident set now against `before` (KiB), per
/// queued puzzle, once its tables have settled.
async fn report_memory(c: &procs::Coordinator, before: u64, queued: usize, how: &str) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, after) = c.proc.memory_kib().unwrap();
    let per = (after.saturating_sub(before) as f64 * 1024.0) / queued as f64;
    println!(
        "{queued} puzzles queued{how}: coordinator RSS {:.1} MiB before, {:.1} MiB after: {per:.0} bytes per queued puzzle",
        before as f64 / 1024.0,
        after as f64 / 1024.0
    );
}

/// A coordinator (result cache off) with the default heartbeat (1 s):
/// admitting a million puzzles at once keeps its two cores busy for a
/// while.
fn coordinator(extra: &[&str]) -> procs::Coordinator {
    coordinator_of(&server_bin(BIN), extra)
}

fn coordinator_of(bin: &std::path::Path, extra: &[&str]) -> procs::Coordinator {
    let args: Vec<&str> = ["--cache-entries", "0"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    procs::coordinator_beating(bin, "127.0.0.1:0", 1000, &args)
}

/// How the clients send their puzzles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// `SolveBatch` requests.
    Batch,
    /// One durable job per client, followed in input order, as `colball
    /// solve --connect` does; the store on disk.
    Job,
    /// The same, the store on PostgreSQL.
    PgJob,
}

/// One run: a coordinator of `bin` with `n` sessions; `puzzles` sent by
/// `clients` `via` batches or jobs, after a warm-up. Returns puzzles per
/// second and the coordinator's CPU per puzzle in microseconds.
async fn measure(
    bin: &std::path::Path,
    n: usize,
    answers: &Arc<Answers>,
    puzzles: &Arc<Vec<(String, Puzzle)>>,
    clients: usize,
    via: Via,
) -> (f64, f64) {
    let count = puzzles.len();
    let dir =
        std::env::temp_dir().join(format!("colball-bench-ceiling-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut args = vec!["--max-batches-per-client", "64"];
    if via == Via::Job {
        args.extend(["--data-dir", dir.to_str().unwrap()]);
    }
    let pg = (via == Via::PgJob).then(Database::start);
    if let Some(pg) = &pg {
        args.extend(["--store", &pg.url]);
    }
    let c = coordinator_of(bin, &args);
    let stop = tokio_util::sync::CancellationToken::new();
    sessions(&c.url, n, answers, false, &stop).await;
    procs::wait_metric(&c.http, "workers", |w| w as usize == n).await;
    // Warm up: the first requests grow the coordinator's tables.
    let warm = Arc::new(puzzles[..count.min(20_000)].to_vec());
    send_all(&c.url, &warm, 1, via).await;
    let pid = c.proc.pid();
    let before = match &pg {
        Some(pg) => Some(pg.costs().await),
        None => None,
    };
    let cpu = cpu_seconds(pid);
    let began = Instant::now();
    send_all(&c.url, puzzles, clients, via).await;
    let wall = began.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu;
    if let (Some(pg), Some(before)) = (&pg, before) {
        let after = pg.costs().await;
        let per = |a: f64, b: f64| (a - b) / count as f64;
        println!(
            "  database: {:.3} statements, {:.2} rows, {:.4} transactions and {:.2} us of the server's CPU a puzzle",
            per(after.statements, before.statements),
            per(after.rows, before.rows),
            per(after.transactions, before.transactions),
            1e6 * per(after.cpu, before.cpu),
        );
    }
    stop.cancel();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
    (count as f64 / wall, 1e6 * cpu / count as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `AGAINST`: this build and another, side by side (see the module
/// documentation).
async fn compare(
    against: &std::path::Path,
    counts: &[usize],
    answers: &Arc<Answers>,
    puzzles: &Arc<Vec<(String, Puzzle)>>,
    clients: usize,
    vias: &[Via],
) {
    let rounds = env("ROUNDS", 5).max(1);
    let this = server_bin(BIN);
    println!(
        "this build: {}\nagainst: {}\n",
        this.display(),
        against.display()
    );
    println!(
        "| via | sessions | round | this: puzzles/s, CPU per puzzle | against: puzzles/s, CPU per puzzle | CPU ratio | throughput ratio |"
    );
    println!("|---|---:|---:|---|---|---:|---:|");
    for (&via, &n) in vias.iter().flat_map(|v| counts.iter().map(move |n| (v, n))) {
        let (mut cpu, mut speed) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let (a, b) = if round % 2 == 0 {
                let a = measure(&this, n, answers, puzzles, clients, via).await;
                (a, measure(against, n, answers, puzzles, clients, via).await)
            } else {
                let b = measure(against, n, answers, puzzles, clients, via).await;
                (measure(&this, n, answers, puzzles, clients, via).await, b)
            };
            cpu.push(a.1 / b.1);
            speed.push(a.0 / b.0);
            println!(
                "| {via:?} | {n} | {} | {:.0}/s, {:.2} us | {:.0}/s, {:.2} us | {:.2} | {:.2} |",
                round + 1,
                a.0,
                a.1,
                b.0,
                b.1,
                a.1 / b.1,
                a.0 / b.0
            );
        }
        println!(
            "| {via:?} | {n} | median | | | **{:.2}** | **{:.2}** |",
            median(cpu),
            median(speed)
        );
    }
}

/// Sends `puzzles` over `clients` connections, reading every result:
/// `via` batches, in `SolveBatch` requests of the client's chunk, or as
/// one job per client.
async fn send_all(url: &str, puzzles: &Arc<Vec<(String, Puzzle)>>, clients: usize, via: Via) {
    let part = puzzles.len().div_ceil(clients);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (url, puzzles) = (url.to_string(), puzzles.clone());
        let range = (c * part).min(puzzles.len())..((c + 1) * part).min(puzzles.len());
        tasks.push(match via {
            Via::Batch => tokio::spawn(async move {
                let mut client = Client::connect(&url).await.unwrap();
                let mut n = 0;
                for chunk in puzzles[range].chunks(REQUEST_CHUNK) {
                    n += count_all(client.solve_stream(chunk, false).await.unwrap()).await;
                }
                n
            }),
            // (It runs its own runtime, as the command does.)
            Via::Job | Via::PgJob => tokio::task::spawn_blocking(move || {
                let mut n = 0;
                let run = JobRun::default();
                let mut notice = |_: &str| {};
                let counted = |_| -> Result<(), std::convert::Infallible> {
                    n += 1;
                    Ok(())
                };
                let security = Security::default();
                solve_in_order(&url, &security, &run, &puzzles[range], &mut notice, counted)
                    .unwrap();
                n
            }),
        });
    }
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    assert_eq!(n, puzzles.len());
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env("PUZZLES", 400_000);
    let vias: Vec<Via> = std::env::var("VIA")
        .unwrap_or_else(|_| "batch".into())
        .split(',')
        .map(|v| match v.trim() {
            "job" => Via::Job,
            "pgjob" => Via::PgJob,
            _ => Via::Batch,
        })
        .collect();
    let clients = env("CLIENTS", 4);
    let queued = env("QUEUED", 1_000_000);
    let counts: Vec<usize> = std::env::var("SESSIONS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 10, 100, 1000]);
    let three = Size::new(3, 3).unwrap();
    let puzzles = Arc::new(batch(42, three, count));
    let answers = Arc::new(answers(&puzzles));
    println!(
        "colball ceiling bench: a coordinator process (result cache off) and N simulated worker sessions answering at once; {count} 3x3 puzzles from {clients} clients via {vias:?} (SolveBatch requests, or jobs followed in order); all on loopback\n"
    );
    if let Some(against) = std::env::var_os("AGAINST") {
        compare(
            std::path::Path::new(&against),
            &counts,
            &answers,
            &puzzles,
            clients,
            &vias,
        )
        .await;
        return;
    }
    println!("| via | sessions | puzzles/s | coordinator CPU per puzzle |");
    println!("|---|---:|---:|---:|");
    for &n in &counts {
        for &via in &vias {
            let (speed, cpu) = measure(&server_bin(BIN), n, &answers, &puzzles, clients, via).await;
            println!("| {via:?} | {n} | {speed:.0} | {cpu:.2} us |");
        }
    }

    if queued == 0 {
        // `QUEUED=0`: the throughput figures alone.
        return;
    }
    // Memory per queued puzzle.
    let c = coordinator(&["--max-batches-per-client", "64"]);
    let stop = tokio_util::sync::CancellationToken::new();
    sessions(&c.url, 1, &answers, true, &stop).await;
    procs::wait_metric(&c.http, "workers", |w| w == 1).await;
    let (_, rss_before) = c.proc.memory_kib().unwrap();
    let queue = Arc::new(batch(7, three, queued));
    let mut held = Vec::new();
    let mut client = Client::connect(&c.url).await.unwrap();
    // Half, then the rest: the second half's growth is what a queued
    // puzzle costs beyond what any traffic costs (the allocator keeps the
    // pages that decoding a request used, and reuses them for the next).
    let half = (queued / 2).next_multiple_of(REQUEST_CHUNK).min(queued);
    let mut rss_half = 0;
    for (n, chunk) in queue.chunks(REQUEST_CHUNK).enumerate() {
        // Admitted and left unread: every task waits in the queue.
        held.push(client.solve_stream(chunk, false).await.unwrap());
        if (n + 1) * REQUEST_CHUNK == half {
            procs::wait_metric(&c.http, "queued", |q| q as usize + 4096 >= half).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            rss_half = c.proc.memory_kib().unwrap().1;
        }
    }
    procs::wait_metric(&c.http, "queued", |q| q as usize + 4096 >= queued).await;
    println!();
    report_memory(&c, rss_before, queued, "").await;
    if rss_half > 0 && half < queued {
        let rss_all = c.proc.memory_kib().unwrap().1;
        println!(
            "  of which the second {} puzzles: {:.0} bytes per queued puzzle",
            queued - half,
            rss_all.saturating_sub(rss_half) as f64 * 1024.0 / (queued - half) as f64
        );
    }
    stop.cancel();
    drop(held);

    // The same puzzles as one job, its store on disk: the coordinator
    // holds one window of the job in memory, the store the rest.
    let dir = std::env::temp_dir().join(format!("colball-bench-ceiling-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = coordinator(&["--data-dir", dir.to_str().unwrap()]);
    let stop = tokio_util::sync::CancellationToken::new();
    sessions(&c.url, 1, &answers, true, &stop).await;
    procs::wait_metric(&c.http, "workers", |w| w == 1).await;
    let (_, rss_before) = c.proc.memory_kib().unwrap();
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    jobs.submit(&queue, None, "queued").await.unwrap();
    procs::wait_metric(&c.http, "queued", |q| q > 0).await;
    report_memory(&c, rss_before, queued, " as one job (store on disk)").await;
    stop.cancel();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
