//! Cluster benchmarks (not timed tests): `cargo bench -p colball-server --bench cluster`.
//!
//! Starts in-process clusters on loopback and prints:
//! - overhead: 1 worker with T threads against in-process solving with T
//!   threads, on the same batch of uniformly random 4x4 puzzles;
//! - scaling: 2 workers of 1 thread against 1 worker of 1 thread;
//! - both again with real processes (a coordinator process and worker
//!   processes, as deployed; the client in the bench's process), with
//!   where the CPU went: the workers' searches, the workers' other threads,
//!   the coordinator and the client, per puzzle;
//! - on a machine of 2 cores or more, 1 worker x 1 thread alone on one
//!   core, the coordinator and the client on another (`taskset`), against
//!   in-process solving on that core: what the cluster costs a worker when
//!   the coordinator is elsewhere, as deployed;
//! - latency of single-puzzle requests (p50, p99) for 3x3 and 4x4 puzzles.
//!
//! Environment: `COUNT` (4x4 puzzles per batch, default 2000), `THREADS`
//! (T, default all cores). The coordinator's cache is off so every puzzle
//! is solved, and so are the workers' caches. In-process solving runs the
//! worker's default engine (`auto`) with its cache off too, so both sides
//! run the same search.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use colball_client::remote::Client;
use colball_server::coordinator::Config;
use colball_solver::cache::CacheConfig;
use colball_solver::{Engine, EngineConfig, Puzzle, Size, Solver};
use colball_testkit::LocalCluster;
use tokio_stream::StreamExt;

mod common;
use colball_testkit::procs;

use common::{batch, count_all, cpu_seconds, env, server_bin, stat_cpu_seconds};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// Puzzles per second in-process: `threads` solvers taking the next
/// puzzle, each configured as a worker's by default with its cache off
/// (as the bench's workers run), so the two sides run the same search.
fn in_process(puzzles: &[(String, Puzzle)], threads: usize) -> f64 {
    let engine = Engine::new(EngineConfig {
        cache: CacheConfig {
            max_entries: 0,
            ..CacheConfig::default()
        },
        table_threads: threads,
        ..EngineConfig::default()
    });
    let next = AtomicUsize::new(0);
    let began = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut solver = Solver::new(engine.clone());
                while let Some((_, p)) = puzzles.get(next.fetch_add(1, Ordering::Relaxed)) {
                    std::hint::black_box(solver.solve(p));
                }
            });
        }
    });
    puzzles.len() as f64 / began.elapsed().as_secs_f64()
}

fn config() -> Config {
    let mut config = Config::default();
    config.scheduling.cache_capacity = 0;
    config
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

/// One batch that warms `threads` solver threads: the first 4x4 solve of
/// each thread allocates its tables.
async fn warm(client: &mut Client, threads: usize) {
    let warm = batch(99, Size::new(4, 4).unwrap(), threads * 4);
    let mut s = client.solve_stream(&warm, false).await.unwrap();
    while s.next().await.is_some() {}
}

/// Puzzles per second through the coordinator at `url`, after one batch
/// that warms its `threads` solver threads.
async fn timed(url: &str, puzzles: &[(String, Puzzle)], threads: usize) -> f64 {
    let mut client = Client::connect(url).await.unwrap();
    warm(&mut client, threads).await;
    let began = Instant::now();
    let n = count_all(client.solve_stream(puzzles, false).await.unwrap()).await;
    assert_eq!(n, puzzles.len());
    n as f64 / began.elapsed().as_secs_f64()
}

/// CPU seconds (user + system) of the solver threads of process `pid`
/// (the process's whole figure is [`cpu_seconds`], which also counts
/// threads that have ended).
fn solver_cpu(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("solver"))
        })
        .map(|t| stat_cpu_seconds(t.path().join("stat")))
        .sum()
}

/// Pins every thread of process `pid` to `cpus` (a `taskset` list); a
/// thread that ends meanwhile is skipped.
fn pin(pid: u32, cpus: &str) {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    for t in tasks.flatten() {
        let _ = std::process::Command::new("taskset")
            .args(["-cp", cpus, &t.file_name().to_string_lossy()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A run through real processes: puzzles per second, and CPU per puzzle.
struct ProcRun {
    rate: f64,
    search: Duration,
    worker_other: Duration,
    coordinator: Duration,
    client: Duration,
}

impl std::fmt::Display for ProcRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        write!(
            f,
            "CPU per puzzle: search {:.0} us, worker beside it {:.0} us, coordinator {:.0} us, client {:.0} us",
            us(self.search),
            us(self.worker_other),
            us(self.coordinator),
            us(self.client)
        )
    }
}

/// [`through_cluster`] with real processes: a coordinator (result cache
/// off) and `workers` worker processes of `threads` solver threads; the
/// client in this process. With `cores`, the workers are pinned to the
/// second list and the coordinator and this process to the first.
async fn through_processes(
    puzzles: &[(String, Puzzle)],
    workers: usize,
    threads: usize,
    cores: Option<(&str, &str)>,
) -> ProcRun {
    let bin = server_bin(BIN);
    let c = procs::coordinator_beating(&bin, "127.0.0.1:0", 1000, &["--cache-entries", "0"]);
    let ws: Vec<procs::Proc> = (0..workers)
        .map(|i| {
            let name = format!("bench-{i}");
            let extra = ["--cache-entries", "0"];
            procs::worker_threads(&bin, &c.url, &name, procs::Stderr::Quiet, threads, &extra)
        })
        .collect();
    procs::wait_metric(&c.http, "workers", |w| w as usize == workers).await;
    if let Some((near, far)) = cores {
        pin(c.proc.pid(), near);
        pin(std::process::id(), near);
        for w in &ws {
            pin(w.pid(), far);
        }
    }
    let me = std::process::id();
    let cpu = || {
        let search: f64 = ws.iter().map(|w| solver_cpu(w.pid())).sum();
        let worker: f64 = ws.iter().map(|w| cpu_seconds(w.pid())).sum();
        (
            search,
            worker - search,
            cpu_seconds(c.proc.pid()),
            cpu_seconds(me),
        )
    };
    let mut client = Client::connect(&c.url).await.unwrap();
    warm(&mut client, workers * threads).await;
    let before = cpu();
    let began = Instant::now();
    let n = count_all(client.solve_stream(puzzles, false).await.unwrap()).await;
    let took = began.elapsed();
    let after = cpu();
    assert_eq!(n, puzzles.len());
    if cores.is_some() {
        pin(me, &all_cores());
    }
    let each = |a: f64, b: f64| Duration::from_secs_f64((a - b).max(0.0) / n as f64);
    ProcRun {
        rate: n as f64 / took.as_secs_f64(),
        search: each(after.0, before.0),
        worker_other: each(after.1, before.1),
        coordinator: each(after.2, before.2),
        client: each(after.3, before.3),
    }
}

/// Every core online, as a `taskset` list (what this process is pinned
/// back to).
fn all_cores() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_or_else(|_| "0".to_string(), |s| s.trim().to_string())
}

/// [`in_process`] with this process pinned to `cpus`.
fn in_process_on(puzzles: &[(String, Puzzle)], threads: usize, cpus: &str) -> f64 {
    pin(std::process::id(), cpus);
    let rate = in_process(puzzles, threads);
    pin(std::process::id(), &all_cores());
    rate
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
    let count = env("COUNT", 2000);
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
    // coordinator and the client; the in-process figures are measured
    // again beside them.
    let local_t = in_process(&puzzles, threads);
    let procs_t = runtime.block_on(through_processes(&puzzles, 1, threads, None));
    let local_1 = in_process(&puzzles, 1);
    let one = runtime.block_on(through_processes(&puzzles, 1, 1, None));
    let two = runtime.block_on(through_processes(&puzzles, 2, 1, None));
    println!("\nreal processes (a coordinator process, worker processes, on the same cores)");
    println!("  in-process, {threads} threads     {local_t:>8.0} puzzles/s");
    println!(
        "  1 worker x {threads} threads       {:>8.0} puzzles/s  ({:.0}% of in-process; target >= 90%)",
        procs_t.rate,
        100.0 * procs_t.rate / local_t
    );
    println!("      {procs_t}");
    println!(
        "  in-process, 1 thread      {local_1:>8.0} puzzles/s  (in-process {threads} threads: {:.2}x)",
        local_t / local_1
    );
    println!(
        "  1 worker x 1 thread       {:>8.0} puzzles/s  ({:.0}% of in-process 1 thread)",
        one.rate,
        100.0 * one.rate / local_1
    );
    println!("      {one}");
    println!(
        "  2 workers x 1 thread      {:>8.0} puzzles/s  ({:.2}x one worker; target >= 1.8x)",
        two.rate,
        two.rate / one.rate
    );
    println!("      {two}");

    // As deployed, the coordinator does not share a worker's cores: here
    // it and the client get core 0, the worker core 1.
    if threads >= 2 {
        let local = in_process_on(&puzzles, 1, "1");
        let alone = runtime.block_on(through_processes(&puzzles, 1, 1, Some(("0", "1"))));
        println!("\nthe worker alone on core 1 (the coordinator and the client on core 0)");
        println!("  in-process on core 1      {local:>8.0} puzzles/s");
        println!(
            "  1 worker x 1 thread       {:>8.0} puzzles/s  ({:.0}% of in-process on its core; target >= 90%)",
            alone.rate,
            100.0 * alone.rate / local
        );
        println!("      {alone}");
    }

    println!("\nsingle-puzzle requests, 1 worker x 1 thread (p50 / p99 / max)");
    for (name, size, n) in [("3x3", Size::new(3, 3).unwrap(), 500), ("4x4", four, 200)] {
        let (p50, p99, max) = runtime.block_on(latency(&batch(11, size, n)));
        println!("  {name} x {n:<4} {p50:>10.1?} {p99:>10.1?} {max:>10.1?}");
    }
}
