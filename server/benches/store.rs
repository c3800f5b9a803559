//! The job store at scale, with real processes (not a timed test):
//! `cargo bench -p colball-server --bench store`.
//!
//! A coordinator process (its store in a temporary `--data-dir`, result
//! cache off so every puzzle goes to a worker) and one worker process of
//! `THREADS` solver threads (default 2), on loopback; the client is this
//! process.
//!
//! 1. Coordinator CPU per puzzle (from `/proc/PID/stat`) for `SMALL`
//!    (default 200,000) puzzles of every size up to 12 cells, sent as
//!    `SolveBatch` requests and as one job, side by side, twice: the
//!    difference is what the store costs per puzzle.
//! 2. A job of `BIG` (default 2,000,000) 2x2 puzzles: the coordinator's
//!    peak resident set (VmHWM) before it and after it.
//! 3. A job of `HALF` x 2 (default 1,000,000) 2x2 puzzles, the coordinator
//!    killed (SIGKILL) once half are solved: how long a new coordinator
//!    takes to start on the store (until it listens) and until the job's
//!    next result is stored.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::path::Path;
use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::{Client, REQUEST_CHUNK, Security};
use colball_solver::{Puzzle, Size};

mod common;
use colball_testkit::procs;

use common::{batch, count_all, cpu_seconds, env, small};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

async fn via_batch(url: &str, puzzles: &[(String, Puzzle)]) {
    let mut client = Client::connect(url).await.unwrap();
    let mut n = 0;
    for chunk in puzzles.chunks(REQUEST_CHUNK) {
        n += count_all(client.solve_stream(chunk, false).await.unwrap()).await;
    }
    assert_eq!(n, puzzles.len());
}

async fn via_job(url: &str, puzzles: &[(String, Puzzle)]) {
    let mut jobs = Jobs::connect(url, &Security::default()).await.unwrap();
    let id = jobs.submit(puzzles, None, "bench").await.unwrap().id;
    let n = count_all(jobs.results(&id, 0, true).await.unwrap()).await;
    assert_eq!(n, puzzles.len());
    jobs.delete(&id).await.unwrap();
}

/// Microseconds of coordinator CPU per puzzle while `run` runs.
async fn cpu_per_puzzle(pid: u32, n: usize, run: impl Future<Output = ()>) -> f64 {
    let before = cpu_seconds(pid);
    run.await;
    1e6 * (cpu_seconds(pid) - before) / n as f64
}

fn coordinator(bin: &Path, listen: &str, data: &str) -> procs::Coordinator {
    procs::coordinator(bin, listen, &["--data-dir", data, "--cache-entries", "0"])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let threads = env("THREADS", 2).to_string();
    let n_small = env("SMALL", 200_000);
    let big = env("BIG", 2_000_000);
    let half = env("HALF", 500_000);
    let bin = Path::new(BIN);
    let dir = std::env::temp_dir().join(format!("colball-bench-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = dir.to_str().unwrap().to_string();
    let mut c = coordinator(bin, "127.0.0.1:0", &data);
    let listen = c.addr.to_string();
    let _w = procs::Proc(
        std::process::Command::new(bin)
            .env("RUST_LOG", "error")
            .args(["worker", "--coordinator", &c.url, "--threads", &threads])
            .spawn()
            .unwrap(),
    );
    procs::wait_metric(&c.http, "workers", |n| n == 1).await;
    println!(
        "colball store bench: coordinator process (store on disk, result cache off) + 1 worker process x {threads} threads, loopback\n"
    );

    // 1. CPU per puzzle.
    for round in 1..=2u64 {
        let pid = c.proc.pid();
        let b = cpu_per_puzzle(pid, n_small, via_batch(&c.url, &small(10 * round, n_small))).await;
        let j = cpu_per_puzzle(
            pid,
            n_small,
            via_job(&c.url, &small(10 * round + 1, n_small)),
        )
        .await;
        println!(
            "  coordinator CPU per puzzle, {n_small} small, run {round}: SolveBatch {b:.1} us   job {j:.1} us   store {:.1} us",
            j - b
        );
    }

    // 2. Peak resident set around a big job.
    let two = Size::new(2, 2).unwrap();
    let (hwm_before, _) = c.proc.memory_kib().unwrap();
    let puzzles = batch(1, two, big);
    let began = Instant::now();
    via_job(&c.url, &puzzles).await;
    let took = began.elapsed();
    drop(puzzles);
    let (hwm_after, rss_after) = c.proc.memory_kib().unwrap();
    println!(
        "\n  a job of {big} 2x2 puzzles ({:.0}/s): coordinator peak RSS {:.1} MiB before, {:.1} MiB after (RSS now {:.1} MiB)",
        big as f64 / took.as_secs_f64(),
        hwm_before as f64 / 1024.0,
        hwm_after as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );

    // 3. A restart on a half-done job.
    let puzzles = batch(2, two, 2 * half);
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let id = jobs.submit(&puzzles, None, "half").await.unwrap().id;
    drop(puzzles);
    let solved = loop {
        let job = jobs.get(&id).await.unwrap();
        if job.solved as usize >= half {
            break job.solved;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    c.proc.kill();
    let began = Instant::now();
    c = coordinator(bin, &listen, &data);
    let listening = began.elapsed();
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let kept = jobs.get(&id).await.unwrap().solved;
    let resumed = loop {
        if jobs.get(&id).await.unwrap().solved > kept {
            break began.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let bytes = std::fs::metadata(dir.join("colball.sqlite3"))
        .unwrap()
        .len();
    println!(
        "\n  a job of {} 2x2 puzzles killed at {solved} solved ({kept} stored; store {:.0} MiB): a coordinator listens {listening:.1?} after its start, and stores the job's next result {resumed:.1?} after it (the worker reconnects with backoff)",
        2 * half,
        bytes as f64 / (1 << 20) as f64
    );
    jobs.delete(&id).await.unwrap();
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}
