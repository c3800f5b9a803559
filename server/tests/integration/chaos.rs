//! Faults injected into a running cluster of real `colball-server`
//! processes on loopback, bounded in count and time:
//!
//! - during a long batch, workers are killed with SIGKILL and restarted,
//!   and a worker's network stream is cut by a TCP proxy between it and the
//!   coordinator; every puzzle must still be answered exactly once, and
//!   correctly;
//! - the coordinator is killed (or stopped) mid-batch and restarted on the
//!   same address without a data dir: the client reconnects, gets a clear
//!   "the job was lost, resubmit" error instead of a hang, the workers
//!   reconnect on their own, and resubmitting completes the batch. (With a
//!   data dir the job survives: see `jobs.rs`.)

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::four_by_four;
use colball_client::jobs::{self, JobRun};
use colball_client::remote::{self, Client, ClientError, RemoteSolved, SolveError};
use colball_solver::{BidirSearch, Puzzle, Solution, apply_moves};
use colball_testkit::procs::{self, Stderr, metric, wait_metric};
use colball_testkit::proxy::Proxy;
use tokio_stream::StreamExt;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

fn bin() -> &'static Path {
    Path::new(BIN)
}

/// Checks one answer independently of the cluster: the moves replay from
/// start to target, and their count is the in-process search's.
fn check(search: &mut BidirSearch, puzzle: &Puzzle, solution: &Solution) {
    let expected = search.solve(puzzle).answer();
    assert_eq!(solution.answer(), expected, "{puzzle:?}");
    if let Solution::Solved(path) = solution {
        assert_eq!(apply_moves(puzzle.start(), path).unwrap(), puzzle.target());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_killed_and_streams_cut_mid_batch_lose_nothing() {
    const PUZZLES: usize = 5000;
    const KILLS: usize = 6;
    const CUTS: usize = 3;
    let c = procs::coordinator(bin(), "127.0.0.1:0", &[]);
    let proxy = Proxy::start(c.addr).await.unwrap();
    // Workers a and b dial the coordinator and are killed and restarted;
    // worker p dials through the proxy, whose connections are cut.
    let start = |name: &str, url: &str| procs::worker(bin(), url, name, Stderr::Quiet, &[]);
    let mut a = Some(start("a", &c.url));
    let mut b = Some(start("b", &c.url));
    let _p = start("p", &proxy.url());
    wait_metric(&c.http, "workers", |n| n == 3).await;

    let puzzles = four_by_four(41, PUZZLES);
    let mut client = Client::connect(&c.url).await.unwrap();
    let stream = client.solve_stream(&puzzles, false).await.unwrap();
    let received = Arc::new(AtomicUsize::new(0));
    let collector = tokio::spawn({
        let received = received.clone();
        async move {
            tokio::pin!(stream);
            let mut results = Vec::new();
            while let Some(r) = stream.next().await {
                results.push(r);
                received.fetch_add(1, Ordering::Relaxed);
            }
            results
        }
    });

    // The faults, one every 250 ms once results flow, in the order kill a,
    // cut, kill b, ...: at most KILLS kills and CUTS cuts, and none once the
    // batch is done.
    let (mut kills, mut cuts) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while received.load(Ordering::Relaxed) < 50 {
        assert!(Instant::now() < deadline, "no results");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut step = 0;
    while (kills < KILLS || cuts < CUTS) && !collector.is_finished() {
        match step % 3 {
            0 | 2 if kills < KILLS => {
                let (slot, name) = if step % 3 == 0 {
                    (&mut a, "a")
                } else {
                    (&mut b, "b")
                };
                slot.take().unwrap().kill(); // SIGKILL
                *slot = Some(start(name, &c.url));
                kills += 1;
            }
            1 if cuts < CUTS && proxy.cut() > 0 => cuts += 1,
            _ => {}
        }
        step += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let results = tokio::time::timeout(Duration::from_secs(60), collector)
        .await
        .expect("the batch did not finish within 60 s")
        .unwrap();
    let redispatched = metric(&c.http, "redispatched_total");
    let workers_lost = metric(&c.http, "workers_lost_total");
    let failed = metric(&c.http, "failed_total");
    let mut seen = HashSet::new();
    let mut duplicates = 0;
    let mut search = BidirSearch::new();
    for r in &results {
        let r = r.as_ref().unwrap_or_else(|e| panic!("error result: {e}"));
        if !seen.insert(r.index) {
            duplicates += 1;
            continue;
        }
        check(&mut search, &puzzles[r.index].1, &r.solution);
    }
    let lost = PUZZLES - seen.len();
    println!(
        "chaos: puzzles {PUZZLES}, kills {kills}, stream cuts {cuts}, re-dispatched {redispatched}, workers lost {workers_lost}, failed {failed}, lost {lost}, duplicates {duplicates}"
    );
    assert_eq!(lost, 0);
    assert_eq!(duplicates, 0);
    assert_eq!(failed, 0);
    assert_eq!(results.len(), PUZZLES);
    assert_eq!((kills, cuts), (KILLS, CUTS), "the batch ended too soon");
    // Each kill and cut hit a worker in the middle of its work.
    assert!(redispatched >= 1, "{redispatched}");
    assert!(workers_lost >= 1, "{workers_lost}");
}

/// A batch through `jobs::solve_in_order` (what `colball solve --connect`
/// runs), on a blocking thread; counts results as they arrive.
pub(crate) fn solve_in_background(
    url: String,
    puzzles: Arc<Vec<(String, Puzzle)>>,
    received: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Result<Vec<RemoteSolved>, SolveError<std::convert::Infallible>>> {
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let run = JobRun::default();
        let mut notice = |m: &str| eprintln!("client: {m}");
        jobs::solve_in_order(
            &url,
            &remote::Security::default(),
            &run,
            &puzzles,
            &mut notice,
            |r| {
                out.push(r);
                received.fetch_add(1, Ordering::Relaxed);
                Ok(())
            },
        )?;
        Ok(out)
    })
}

/// Kills (`KILL`) or stops (`TERM`) a coordinator without a data dir
/// mid-batch and restarts it on the same address: the client reconnects,
/// finds its job gone and says so; resubmitting completes.
async fn coordinator_restart(signal: &str, seed: u64) {
    const PUZZLES: usize = 1500;
    let c = procs::coordinator(bin(), "127.0.0.1:0", &[]);
    let addr = c.addr;
    let _a = procs::worker(bin(), &c.url, "a", Stderr::Quiet, &[]);
    let _b = procs::worker(bin(), &c.url, "b", Stderr::Quiet, &[]);
    wait_metric(&c.http, "workers", |n| n == 2).await;

    let puzzles = Arc::new(four_by_four(seed, PUZZLES));
    let received = Arc::new(AtomicUsize::new(0));
    let batch = solve_in_background(c.url.clone(), puzzles.clone(), received.clone());
    wait_metric(&c.http, "solved_total", |n| n >= 100).await;
    let mut old = c.proc;
    old.signal(signal);
    let status = old.wait_exit();
    assert_eq!(status.success(), signal == "TERM", "{status:?}");

    // The same address again; the workers find it on their own, and so
    // does the client, which learns its job is gone.
    let c2 = procs::coordinator(bin(), &addr.to_string(), &[]);
    assert_eq!(c2.addr, addr);
    let failure = tokio::time::timeout(Duration::from_secs(30), batch)
        .await
        .expect("the client hung after the coordinator came back")
        .unwrap()
        .unwrap_err();
    let got = received.load(Ordering::Relaxed);
    assert!(got < PUZZLES, "{got}");
    let SolveError::Client(ClientError::JobLost {
        received: reported,
        total,
        durable: false,
        ..
    }) = &failure
    else {
        panic!("expected a lost job, got {failure:?}");
    };
    assert_eq!((*reported, *total), (got, PUZZLES));
    let message = failure.to_string();
    assert!(
        message.contains(&format!("the coordinator at {} no longer has job", c.url))
            && message.contains("no --data-dir")
            && message.contains("resubmit"),
        "{message}"
    );
    wait_metric(&c2.http, "workers", |n| n == 2).await;
    // Nothing survived the restart.
    assert_eq!(metric(&c2.http, "pending"), 0);
    assert_eq!(metric(&c2.http, "result_cache_entries"), 0);
    assert_eq!(metric(&c2.http, "solved_total"), 0);

    let received = Arc::new(AtomicUsize::new(0));
    let results = tokio::time::timeout(
        Duration::from_secs(60),
        solve_in_background(c2.url.clone(), puzzles.clone(), received),
    )
    .await
    .expect("the resubmitted batch did not finish within 60 s")
    .unwrap()
    .unwrap();
    assert_eq!(results.len(), PUZZLES);
    let mut search = BidirSearch::new();
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.index, i);
        check(&mut search, &puzzles[i].1, &r.solution);
    }
    assert_eq!(metric(&c2.http, "solved_total") as usize, PUZZLES);
    println!(
        "coordinator {signal}: {got} of {PUZZLES} results before the restart; client error: {message}"
    );
    drop(old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_killed_mid_batch_fails_the_client_clearly_and_a_resubmit_completes() {
    coordinator_restart("KILL", 42).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_stopped_mid_batch_fails_the_client_clearly_and_a_resubmit_completes() {
    coordinator_restart("TERM", 43).await;
}
