//! Stragglers (not timed tests): `cargo build --release -p colball-testkit
//! --bins && cargo bench -p colball-server --bench stragglers`.
//!
//! Real processes on loopback (a coordinator process and worker processes,
//! the client in the bench's process), each case beside its healthy
//! baseline in the same run, and beside the same case with the straggler
//! handling off (`--backup-after 0 --stuck-after 100000`: no backups, and
//! no worker declared stuck before the 30 s task timeout):
//! - hung: `COUNT_HUNG` (300) uniformly random 4x4 puzzles; a worker that
//!   takes tasks and never answers joins first, an honest one-thread
//!   worker once it holds tasks; against the honest worker alone;
//! - stopped: `COUNT_STOPPED` (2,000) 4x4 puzzles; a two-thread worker
//!   stopped 0.9 s of every second (SIGSTOP/SIGCONT) beside two healthy
//!   one-thread workers; against the two healthy ones alone;
//! - healthy: `COUNT_HEALTHY` (20,000) 4x4 puzzles on two healthy one-thread
//!   workers: extra solves the backups cost, and puzzles per second with
//!   and without them.
//!
//! `ROUNDS` (1) repeats the whole; each line stands on its own (the healthy
//! case's two runs go in alternating order).

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use colball_client::remote::Client;
use colball_solver::{Puzzle, Size};
use colball_testkit::hung::HungWorker;
use colball_testkit::procs::{self, DutyCycle, Proc, Stderr, metric, wait_metric};

mod common;
use common::{batch, count_all, env, server_bin};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

struct Bench {
    bin: PathBuf,
}

impl Bench {
    fn coordinator(&self, backups: bool) -> procs::Coordinator {
        let off: &[&str] = if backups {
            &[]
        } else {
            &["--backup-after", "0", "--stuck-after", "100000"]
        };
        procs::coordinator_beating(&self.bin, "127.0.0.1:0", 1000, off)
    }

    fn worker(&self, url: &str, name: &str, threads: usize) -> Proc {
        procs::worker_threads(&self.bin, url, name, Stderr::Warn, threads, &[])
    }
}

async fn solve(url: &str, puzzles: &[(String, Puzzle)]) -> Duration {
    let mut client = Client::connect(url).await.unwrap();
    let began = Instant::now();
    let n = count_all(client.solve_stream(puzzles, false).await.unwrap()).await;
    assert_eq!(n, puzzles.len());
    began.elapsed()
}

/// The batch on `healthy` one-thread workers alone: its time, and the
/// backups it started.
async fn on_healthy(
    b: &Bench,
    puzzles: &[(String, Puzzle)],
    healthy: usize,
    backups: bool,
) -> (Duration, u64) {
    let c = b.coordinator(backups);
    let _w: Vec<Proc> = (0..healthy)
        .map(|i| b.worker(&c.url, &format!("h{i}"), 1))
        .collect();
    wait_metric(&c.http, "workers", |n| n == healthy as u64).await;
    let took = solve(&c.url, puzzles).await;
    (took, metric(&c.http, "backups_started_total"))
}

async fn with_hung(b: &Bench, puzzles: &[(String, Puzzle)], backups: bool) -> Duration {
    let c = b.coordinator(backups);
    let hung = HungWorker::start(&c.url, "hung", 2);
    wait_metric(&c.http, "workers", |n| n == 1).await;
    let mut client = Client::connect(&c.url).await.unwrap();
    let began = Instant::now();
    let stream = client.solve_stream(puzzles, false).await.unwrap();
    while hung.held() == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _honest = b.worker(&c.url, "honest", 1);
    assert_eq!(count_all(stream).await, puzzles.len());
    began.elapsed()
}

async fn with_stopped(b: &Bench, puzzles: &[(String, Puzzle)], backups: bool) -> Duration {
    let c = b.coordinator(backups);
    let _a = b.worker(&c.url, "h0", 1);
    let _b = b.worker(&c.url, "h1", 1);
    let stopped = b.worker(&c.url, "stopped", 2);
    wait_metric(&c.http, "workers", |n| n == 3).await;
    let _cycle = DutyCycle::start(
        stopped.pid(),
        Duration::from_millis(900),
        Duration::from_millis(100),
    );
    solve(&c.url, puzzles).await
}

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// One case's line: the baseline, the case, and the case with the
/// handling off, with their ratios to the baseline.
fn report(
    case: &str,
    base: &str,
    with: &str,
    puzzles: &[(String, Puzzle)],
    [alone, on, off]: [Duration; 3],
) {
    println!(
        "{case:8} {} 4x4: {base} {:.2} s; {with} {:.2} s ({:.2}x), handling off {:.2} s ({:.2}x)",
        puzzles.len(),
        alone.as_secs_f64(),
        on.as_secs_f64(),
        ratio(on, alone),
        off.as_secs_f64(),
        ratio(off, alone)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let b = Bench {
        bin: server_bin(BIN),
    };
    assert!(Path::new(&b.bin).exists());
    let four = Size::new(4, 4).unwrap();
    for round in 0..env("ROUNDS", 1) {
        let seed = 3200 + round as u64;
        let puzzles = batch(seed, four, env("COUNT_HUNG", 300));
        let (alone, _) = on_healthy(&b, &puzzles, 1, true).await;
        let on = with_hung(&b, &puzzles, true).await;
        let off = with_hung(&b, &puzzles, false).await;
        report(
            "hung",
            "honest alone",
            "with a hung worker",
            &puzzles,
            [alone, on, off],
        );

        let puzzles = batch(seed, four, env("COUNT_STOPPED", 2000));
        let (alone, _) = on_healthy(&b, &puzzles, 2, true).await;
        let on = with_stopped(&b, &puzzles, true).await;
        let off = with_stopped(&b, &puzzles, false).await;
        report(
            "stopped",
            "two healthy alone",
            "with a third stopped 0.9 s in 1 s",
            &puzzles,
            [alone, on, off],
        );

        let puzzles = batch(seed, four, env("COUNT_HEALTHY", 20_000));
        // Which goes first alternates by round, so that a machine getting
        // busier or quieter does not favour one.
        let ((on, started), (off, _)) = if round % 2 == 0 {
            let on = on_healthy(&b, &puzzles, 2, true).await;
            (on, on_healthy(&b, &puzzles, 2, false).await)
        } else {
            let off = on_healthy(&b, &puzzles, 2, false).await;
            (on_healthy(&b, &puzzles, 2, true).await, off)
        };
        let rate = |d: Duration| puzzles.len() as f64 / d.as_secs_f64();
        println!(
            "healthy  {} 4x4 on two workers: backups {started} ({:.2}% extra solves), {:.0}/s with them, {:.0}/s without ({:.3}x)",
            puzzles.len(),
            100.0 * started as f64 / puzzles.len() as f64,
            rate(on),
            rate(off),
            rate(on) / rate(off)
        );
    }
}
