//! The job path against `SolveBatch`, and what the store costs (not a
//! timed test): `cargo bench -p colball-server --bench jobs`.
//!
//! An in-process cluster on loopback (coordinator and 1 worker of
//! `THREADS` solver threads in this process), coordinator cache off.
//! Batches of the same kind (fresh puzzles each time, so that no cache
//! helps) are solved as `SolveBatch` requests, as one job over gRPC
//! (submit, then read every result, following), and as one job over the
//! HTTP API (`POST /api/v1/jobs` with the classic file, then `GET
//! .../results?follow=1`, NDJSON), side by side, twice each:
//! - `COUNT4` uniformly random 4x4 puzzles (default 2000);
//! - `SMALL` puzzles of every size up to 12 cells (default 400000);
//!
//! then, with the store on disk (a temporary data dir), the bytes it takes
//! per puzzle and the time a coordinator takes to start on it.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use colball_client::jobs::Jobs;
use colball_client::remote::{Client, Security};
use colball_server::coordinator::{Config, SchedulingConfig, StoreConfig};
use colball_solver::{Puzzle, Size};
use colball_testkit::LocalCluster;

mod common;

use common::{batch, count_all, env, small};

async fn via_batch(url: &str, puzzles: &[(String, Puzzle)]) -> f64 {
    let mut client = Client::connect(url).await.unwrap();
    let began = Instant::now();
    let mut n = 0;
    for chunk in puzzles.chunks(colball_client::remote::REQUEST_CHUNK) {
        n += count_all(client.solve_stream(chunk, false).await.unwrap()).await;
    }
    assert_eq!(n, puzzles.len());
    n as f64 / began.elapsed().as_secs_f64()
}

/// Puzzles per second through a job: submitted, then every result read
/// (following); the job is deleted after unless `keep`.
async fn via_job(url: &str, puzzles: &[(String, Puzzle)], keep: bool) -> f64 {
    let mut jobs = Jobs::connect(url, &Security::default()).await.unwrap();
    let began = Instant::now();
    let id = jobs.submit(puzzles, None, "bench").await.unwrap().id;
    let n = count_all(jobs.results(&id, 0, true).await.unwrap()).await;
    assert_eq!(n, puzzles.len());
    let rate = n as f64 / began.elapsed().as_secs_f64();
    if !keep {
        jobs.delete(&id).await.unwrap();
    }
    rate
}

/// Puzzles per second through a job over the HTTP API: the puzzles as a
/// classic file (made before the clock starts, as a user's file is)
/// posted, then every result read as NDJSON, following (HTTP/1.0, so the
/// body is the lines alone, ended by the close).
async fn via_http(http: SocketAddr, puzzles: &[(String, Puzzle)]) -> f64 {
    let file = classic_file(puzzles);
    let began = Instant::now();
    let created = request(http, "POST", "/api/v1/jobs", &file).await;
    let created: serde_json::Value = serde_json::from_slice(&created).unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let path = format!("/api/v1/jobs/{id}/results?follow=1");
    let lines = request(http, "GET", &path, b"").await;
    let n = lines.iter().filter(|b| **b == b'\n').count();
    assert_eq!(n, puzzles.len());
    let rate = n as f64 / began.elapsed().as_secs_f64();
    request(http, "DELETE", &format!("/api/v1/jobs/{id}"), b"").await;
    rate
}

/// The classic file of `puzzles`.
fn classic_file(puzzles: &[(String, Puzzle)]) -> Vec<u8> {
    let mut file = String::new();
    for (_, p) in puzzles {
        let size = p.size();
        file.push_str(&format!(
            "{} {}\n{}\n{}\n",
            size.rows(),
            size.cols(),
            p.start().rows().join("\n"),
            p.target().rows().join("\n")
        ));
    }
    file.into_bytes()
}

/// One HTTP/1.0 request; the body of its 2xx answer.
async fn request(http: SocketAddr, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    let mut s = tokio::net::TcpStream::connect(http).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.0\r\nhost: bench\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let status = String::from_utf8_lossy(&answer[..end]).to_string();
    assert!(
        status.split_whitespace().nth(1).unwrap().starts_with('2'),
        "{status}"
    );
    answer.split_off(end + 4)
}

/// Each measurement gets puzzles of its own (`make(seed)`): the workers'
/// solver caches would answer a repeated set.
async fn compare(
    name: &str,
    url: &str,
    http: SocketAddr,
    make: impl Fn(u64) -> Vec<(String, Puzzle)>,
) {
    for round in 1..=2 {
        let b = via_batch(url, &make(10 * round)).await;
        let j = via_job(url, &make(10 * round + 1), false).await;
        let h = via_http(http, &make(10 * round + 2)).await;
        println!(
            "  {name:<28} run {round}: SolveBatch {b:>8.0}/s   job {j:>8.0}/s   job/batch {:>4.0}%   HTTP job {h:>8.0}/s   HTTP/gRPC job {:>4.0}%",
            100.0 * j / b,
            100.0 * h / j
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let threads = env("THREADS", 2);
    let count4 = env("COUNT4", 2000);
    let n_small = env("SMALL", 400_000);
    let config = Config {
        scheduling: SchedulingConfig {
            cache_capacity: 0,
            ..Config::default().scheduling
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start(config.clone(), 1, threads)
        .await
        .unwrap();
    assert!(cluster.wait_for_workers(1, Duration::from_secs(10)).await);
    let url = cluster.url();
    let http = cluster.serve_http().await.unwrap();
    println!(
        "colball jobs bench: coordinator + 1 worker x {threads} threads, loopback, store in memory\n"
    );
    let four = Size::new(4, 4).unwrap();
    compare(&format!("{count4} 4x4"), &url, http, |seed| {
        batch(seed, four, count4)
    })
    .await;
    compare(
        &format!("{n_small} small (<= 12 cells)"),
        &url,
        http,
        |seed| small(seed + 100, n_small),
    )
    .await;
    cluster.shutdown().await;

    // On disk: the store's size per puzzle, and a restart on it.
    let dir = std::env::temp_dir().join(format!("colball-bench-jobs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let on_disk = Config {
        store: StoreConfig {
            data_dir: Some(dir.clone()),
            ..config.store
        },
        ..config
    };
    let cluster = LocalCluster::start(on_disk.clone(), 1, threads)
        .await
        .unwrap();
    assert!(cluster.wait_for_workers(1, Duration::from_secs(10)).await);
    let puzzles = small(3, n_small);
    let rate = via_job(&cluster.url(), &puzzles, true).await;
    let bytes = cluster.app.jobs.store_bytes().await.unwrap();
    cluster.shutdown().await;
    println!(
        "\nstore on disk: {n_small} small puzzles with their results: {:.1} MiB, {:.0} bytes per puzzle ({rate:.0} puzzles/s through the job)",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / n_small as f64
    );
    let began = Instant::now();
    let again = LocalCluster::start(on_disk, 0, 1).await.unwrap();
    println!("  a coordinator starts on it in {:.1?}", began.elapsed());
    again.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
