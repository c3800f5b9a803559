//! Cluster benchmarks (not timed tests): `cargo bench -p colball-server --bench cluster`.
//!
//! Starts in-process clusters on loopback and prints:
//! - overhead: 1 worker with T threads against in-process solving with T
//!   threads, on the same batch of uniformly random 4x4 puzzles;
//! - scaling: 2 workers of 1 thread against 1 worker of 1 thread;
//! - both again with real processes (a coordinator process and worker
//!   processes, as deployed; the client in the bench's process);
//! - latency of single-puzzle requests (p50, p99) for 3x3 and 4x4 puzzles.
//!
//! Environment: `COUNT` (4x4 puzzles per batch, default 1000), `THREADS`
//! (T, default all cores). The coordinator's cache is off so every puzzle
//! is solved.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use colball_client::remote::Client;
use colball_server::coordinator::Config;
use colball_solver::{BidirSearch, Puzzle, Size};
use colball_testkit::LocalCluster;
use tokio_stream::StreamExt;

mod common;
use colball_testkit::procs;

use common::{batch, count_all, env, server_bin};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// Puzzles per second in-process: `threads` searches taking the next puzzle.
fn in_process(puzzles: &[(String, Puzzle)], threads: usize) -> f64 {
    let next = AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut search = BidirSearch::new();
                while let Some((_, p)) = puzzles.get(next.fetch_add(1, Ordering::Relaxed)) {
                    std::hint::black_box(search.solve(p));
                }
            });
        }
    });
    puzzles.len() as f64 / began.elapsed().as_secs_f64()
}

fn config() -> Config {
    Config {
        cache_capacity: 0,
        ..Config::default()
    }
}

/// Puzzles per second through a cluster of `workers` x `threads`.
async fn through_cluster(puzzles: &[(String, Puzzle)], workers: usize, threads: usize) -> f64 {
    let cluster = LocalCluster::start(config(), workers, threads)
        .await
        .unwrap();
    assert!(
        cluster
            .wait_for_workers(workers, Duration::from_secs(10))
            .await
    );
    let rate = timed(&cluster.url(), puzzles, workers * threads).await;
    cluster.shutdown().await;
    rate
}

/// Puzzles per second through the coordinator at `url`, after one batch
/// that warms its `threads` solver threads.
async fn timed(url: &str, puzzles: &[(String, Puzzle)], threads: usize) -> f64 {
    let mut client = Client::connect(url).await.unwrap();
    // Warm up: the first 4x4 solve of each thread allocates its tables.
    let warm = batch(99, Size::new(4, 4).unwrap(), threads * 4);
    let mut s = client.solve_stream(&warm, false).await.unwrap();
    while s.next().await.is_some() {}
    let began = Instant::now();
    let n = count_all(client.solve_stream(puzzles, false).await.unwrap()).await;
    assert_eq!(n, puzzles.len());
    n as f64 / began.elapsed().as_secs_f64()
}

/// [`through_cluster`] with real processes: a coordinator (result cache
/// off) and `workers` worker processes of `threads` solver threads; the
/// client in this process.
async fn through_processes(puzzles: &[(String, Puzzle)], workers: usize, threads: usize) -> f64 {
    let bin = server_bin(BIN);
    let c = procs::coordinator_beating(&bin, "127.0.0.1:0", 1000, &["--cache-entries", "0"]);
    let _workers: Vec<procs::Proc> = (0..workers)
        .map(|i| {
            let name = format!("bench-{i}");
            procs::worker_threads(&bin, &c.url, &name, procs::Stderr::Quiet, threads, &[])
        })
        .collect();
    procs::wait_metric(&c.http, "workers", |w| w as usize == workers).await;
    timed(&c.url, puzzles, workers * threads).await
}

async fn latency(puzzles: &[(String, Puzzle)]) -> (Duration, Duration, Duration) {
    let cluster = LocalCluster::start(config(), 1, 1).await.unwrap();
    assert!(cluster.wait_for_workers(1, Duration::from_secs(10)).await);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let mut times = Vec::new();
    for (id, p) in puzzles {
        let began = Instant::now();
        client.solve_one(id, p).await.unwrap();
        times.push(began.elapsed());
    }
    cluster.shutdown().await;
    times.sort();
    let pick = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    (pick(0.5), pick(0.99), times[times.len() - 1])
}

fn main() {
    let count = env("COUNT", 1000);
    let threads = env(
        "THREADS",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let four = Size::new(4, 4).unwrap();
    let puzzles = batch(7, four, count);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    println!("colball cluster bench: {count} uniform 4x4 puzzles, loopback\n");
    in_process(&puzzles[..count.min(50)], threads); // warm up
    let local_t = in_process(&puzzles, threads);
    let cluster_t = runtime.block_on(through_cluster(&puzzles, 1, threads));
    println!("overhead ({threads} threads)");
    println!("  in-process, {threads} threads     {local_t:>8.0} puzzles/s");
    println!(
        "  1 worker x {threads} threads       {cluster_t:>8.0} puzzles/s  ({:.0}% of in-process; target >= 90%)",
        100.0 * cluster_t / local_t
    );

    let local_1 = in_process(&puzzles, 1);
    let one = runtime.block_on(through_cluster(&puzzles, 1, 1));
    let two = runtime.block_on(through_cluster(&puzzles, 2, 1));
    println!("\nscaling (1 thread per worker)");
    println!("  in-process, 1 thread      {local_1:>8.0} puzzles/s");
    println!("  1 worker x 1 thread       {one:>8.0} puzzles/s");
    println!(
        "  2 workers x 1 thread      {two:>8.0} puzzles/s  ({:.2}x one worker; target >= 1.8x)",
        two / one
    );

    // The same with real processes: each worker's solver threads in their
    // own process, as deployed, beside a coordinator process; the client
    // (this process) reads the results. On two cores, 1 worker x 2
    // threads and 2 workers x 1 thread both share the cores with the
    // coordinator; the in-process figures are measured again beside them.
    let local_t = in_process(&puzzles, threads);
    let procs_t = runtime.block_on(through_processes(&puzzles, 1, threads));
    let local_1 = in_process(&puzzles, 1);
    let one = runtime.block_on(through_processes(&puzzles, 1, 1));
    let two = runtime.block_on(through_processes(&puzzles, 2, 1));
    println!("\nreal processes (a coordinator process, worker processes)");
    println!("  in-process, {threads} threads     {local_t:>8.0} puzzles/s");
    println!(
        "  1 worker x {threads} threads       {procs_t:>8.0} puzzles/s  ({:.0}% of in-process; target >= 90%)",
        100.0 * procs_t / local_t
    );
    println!("  in-process, 1 thread      {local_1:>8.0} puzzles/s");
    println!(
        "  1 worker x 1 thread       {one:>8.0} puzzles/s  ({:.0}% of in-process 1 thread)",
        100.0 * one / local_1
    );
    println!(
        "  2 workers x 1 thread      {two:>8.0} puzzles/s  ({:.2}x one worker; target >= 1.8x)",
        two / one
    );

    println!("\nsingle-puzzle requests, 1 worker x 1 thread (p50 / p99 / max)");
    for (name, size, n) in [("3x3", Size::new(3, 3).unwrap(), 500), ("4x4", four, 200)] {
        let (p50, p99, max) = runtime.block_on(latency(&batch(11, size, n)));
        println!("  {name} x {n:<4} {p50:>10.1?} {p99:>10.1?} {max:>10.1?}");
    }
}
