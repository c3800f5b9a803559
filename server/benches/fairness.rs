//! Fair sharing and priorities, measured (not a timed test):
//! `cargo bench -p colball-server --bench fairness`.
//!
//! An in-process cluster on loopback: a coordinator and 2 workers of 1
//! solver thread, with named client tokens so clients on one address are
//! told apart. Prints:
//! - single 3x3 puzzles from one client (`Solve`, class interactive by
//!   default): p50, p99 and max latency on an idle cluster, then while
//!   another client's `COUNT`-puzzle 4x4 `normal` batch keeps both workers
//!   busy, and again with the single puzzles sent as `normal` (same class:
//!   only the round robin between clients helps them);
//! - two clients sending equal 4x4 batches at once: each one's rate while
//!   both run, and their ratio.
//!
//! Environment: `COUNT` (the big batch, default 20000), `SINGLES` (single
//! puzzles per run, default 200), `EACH` (each of the two equal batches,
//! default 3000). The coordinator's cache is off, so every puzzle is
//! solved.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::time::{Duration, Instant};

use colball_client::remote::{Client, Security};
use colball_proto::{Secret, v1};
use colball_server::coordinator::{AccessConfig, Config, SchedulingConfig};
use colball_solver::{Puzzle, Size};
use colball_testkit::LocalCluster;
use tokio_stream::StreamExt;

mod common;

use common::{batch, env};

async fn client(url: &str, token: &str) -> Client {
    let security = Security {
        token: Some(Secret::new(token, "bench").unwrap()),
        ..Security::default()
    };
    Client::connect_with(url, &security).await.unwrap()
}

/// Latencies of `puzzles` sent one at a time: p50, p99, max.
async fn singles(client: &mut Client, puzzles: &[(String, Puzzle)]) -> [Duration; 3] {
    let mut times = Vec::new();
    for (id, p) in puzzles {
        let began = Instant::now();
        client.solve_one(id, p).await.unwrap();
        times.push(began.elapsed());
    }
    times.sort();
    let pick = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    [pick(0.5), pick(0.99), times[times.len() - 1]]
}

fn show(name: &str, [p50, p99, max]: [Duration; 3]) {
    println!("  {name:<44} {p50:>9.1?} {p99:>9.1?} {max:>9.1?}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let count = env("COUNT", 20_000);
    let n_singles = env("SINGLES", 200);
    let each = env("EACH", 3000);
    let dir = std::env::temp_dir().join(format!("colball-fairness-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        "bulk t-bulk\nlive t-live\nalice t-alice\nbob t-bob\n",
    )
    .unwrap();
    let config = Config {
        scheduling: SchedulingConfig {
            cache_capacity: 0,
            ..Config::default().scheduling
        },
        access: AccessConfig {
            client_tokens_file: Some(tokens),
            ..Config::default().access
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start(config, 2, 1).await.unwrap();
    assert!(cluster.wait_for_workers(2, Duration::from_secs(10)).await);
    let url = cluster.url();
    let three = Size::new(3, 3).unwrap();
    let four = Size::new(4, 4).unwrap();
    let mut live = client(&url, "t-live").await;
    // Warm up: each worker thread allocates its search tables once.
    let mut warm = live.solve_stream(&batch(1, four, 40), false).await.unwrap();
    while warm.next().await.is_some() {}

    println!("colball fairness bench: coordinator + 2 workers x 1 thread, loopback\n");
    println!("single 3x3 puzzles, one at a time ({n_singles}):     p50       p99       max");
    show(
        "idle cluster",
        singles(&mut live, &batch(2, three, n_singles)).await,
    );

    let mut bulk = client(&url, "t-bulk").await;
    let big = batch(3, four, count);
    let mut stream = bulk.solve_stream(&big, false).await.unwrap();
    let drain = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(r) = stream.next().await {
            r.unwrap();
            n += 1;
        }
        n
    });
    // Let the big batch fill the workers first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let busy = singles(&mut live, &batch(4, three, n_singles)).await;
    show(
        &format!("behind a {count}-puzzle 4x4 batch (interactive)"),
        busy,
    );
    live.set_priority(Some(v1::Priority::Normal));
    let same_class = singles(&mut live, &batch(5, three, n_singles)).await;
    show("behind it, sent as normal (same class)", same_class);
    let finished_big = drain.is_finished();
    drain.abort();
    drop(bulk);
    if finished_big {
        println!("  (the big batch finished before the single puzzles: raise COUNT)");
    }
    // The abandoned batch's remaining work is cancelled; wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.scheduler.snapshot().0.pending > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    println!("\ntwo clients, {each} 4x4 puzzles each, sent at once");
    let run = |token: &'static str, seed: u64| {
        let url = url.clone();
        let puzzles = batch(seed, four, each);
        async move {
            let mut c = client(&url, token).await;
            let began = Instant::now();
            let mut s = c.solve_stream(&puzzles, false).await.unwrap();
            let mut times = Vec::with_capacity(puzzles.len());
            while let Some(r) = s.next().await {
                r.unwrap();
                times.push(began.elapsed());
            }
            times
        }
    };
    let (a, b) = tokio::join!(run("t-alice", 6), run("t-bob", 7));
    // Rates while both ran: results each had when the first finished.
    let both_until = a.last().unwrap().min(b.last().unwrap()).as_secs_f64();
    let upto = |t: &[Duration]| t.iter().filter(|d| d.as_secs_f64() <= both_until).count();
    let (ra, rb) = (upto(&a) as f64 / both_until, upto(&b) as f64 / both_until);
    println!(
        "  alice {ra:>8.0} puzzles/s   bob {rb:>8.0} puzzles/s   (while both ran, {both_until:.1} s)"
    );
    println!(
        "  ratio {:.3} (target: within 10%)",
        ra.max(rb) / ra.min(rb)
    );
    cluster.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
