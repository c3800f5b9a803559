//! Stragglers as processes: a worker that takes tasks and never answers,
//! and one stopped nine tenths of the time, must not hold a batch's tail.
//! Each batch is timed beside the same batch on the healthy workers alone,
//! in the same test; the bounds here are loose (timed tests on a shared
//! machine), the targets are measured by `cargo bench --bench stragglers`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::four_by_four;
use colball_client::remote::{Client, RemoteSolved};
use colball_solver::{BidirSearch, Puzzle};
use colball_testkit::hung::HungWorker;
use colball_testkit::procs::{self, DutyCycle, Proc, Stderr, metric, wait_metric};
use tokio_stream::StreamExt;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// A coordinator with the default heartbeats (1 s, three missed), so that
/// a worker stopped for 0.9 s is not taken for lost.
fn coordinator() -> procs::Coordinator {
    procs::coordinator_beating(Path::new(BIN), "127.0.0.1:0", 1000, &[])
}

fn worker(url: &str, name: &str, threads: usize) -> Proc {
    procs::worker_threads(Path::new(BIN), url, name, Stderr::Warn, threads, &[])
}

/// The oracle's answers.
fn answers(puzzles: &[(String, Puzzle)]) -> Vec<i64> {
    let mut search = BidirSearch::new();
    puzzles
        .iter()
        .map(|(_, p)| search.solve(p).answer())
        .collect()
}

/// Reads a batch's results to the end, checking each against `answers`
/// and that each puzzle comes once; the workers' names, in arrival order.
async fn read_all(
    mut stream: impl tokio_stream::Stream<
        Item = Result<RemoteSolved, colball_client::remote::ClientError>,
    > + Unpin,
    answers: &[i64],
) -> Vec<String> {
    let mut seen = vec![false; answers.len()];
    let mut workers = Vec::new();
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert!(
            !std::mem::replace(&mut seen[r.index], true),
            "{} twice",
            r.id
        );
        assert_eq!(r.solution.answer(), answers[r.index], "{}", r.id);
        workers.push(r.worker.split('#').next().unwrap().to_string());
    }
    assert!(seen.iter().all(|s| *s), "results missing");
    workers
}

/// How many puzzles the worker named `name` holds, from `/metrics`.
fn holds(http: &str, name: &str) -> u64 {
    let body = procs::metrics_text(http).unwrap();
    let key = format!("colball_worker_in_flight{{worker=\"{name}#");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .and_then(|l| l.split_whitespace().last())
        .map_or(0, |v| v.parse().unwrap())
}

/// Seconds to solve `puzzles` on `workers` healthy workers of one thread.
async fn healthy_alone(puzzles: &[(String, Puzzle)], answers: &[i64], workers: usize) -> Duration {
    let c = coordinator();
    let _workers: Vec<Proc> = (0..workers)
        .map(|i| worker(&c.url, &format!("h{i}"), 1))
        .collect();
    wait_metric(&c.http, "workers", |n| n == workers as u64).await;
    let mut client = Client::connect(&c.url).await.unwrap();
    let began = Instant::now();
    read_all(client.solve_stream(puzzles, false).await.unwrap(), answers).await;
    began.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_process_does_not_hold_a_batch_until_the_task_timeout() {
    let puzzles = four_by_four(321, 300);
    let answers = answers(&puzzles);
    let alone = healthy_alone(&puzzles, &answers, 1).await;

    let c = coordinator();
    let hung = HungWorker::start(&c.url, "hung", 2);
    wait_metric(&c.http, "workers", |n| n == 1).await;
    let mut client = Client::connect(&c.url).await.unwrap();
    let began = Instant::now();
    let stream = client.solve_stream(&puzzles, false).await.unwrap();
    // The hung worker takes its share before an honest one joins.
    while hung.held() == 0 {
        assert!(
            began.elapsed() < procs::WAIT,
            "the hung worker was given nothing"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _honest = worker(&c.url, "honest", 1);
    let workers = read_all(stream, &answers).await;
    let took = began.elapsed();
    println!(
        "300 4x4: {:.2} s with a hung worker holding {} tasks, {:.2} s alone",
        took.as_secs_f64(),
        hung.held(),
        alone.as_secs_f64()
    );
    assert!(workers.iter().all(|w| w == "honest"), "{workers:?}");
    assert!(metric(&c.http, "backups_won_total") >= 1);
    assert_eq!(metric(&c.http, "tasks_timed_out_total"), 0);
    assert!(
        took < alone * 4 + Duration::from_secs(2),
        "{took:?} with the hung worker against {alone:?} without (task timeout 30 s)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_nine_tenths_of_the_time_does_not_hold_a_batch() {
    let puzzles = four_by_four(322, 1000);
    let answers = answers(&puzzles);
    let alone = healthy_alone(&puzzles, &answers, 2).await;

    let c = coordinator();
    let _a = worker(&c.url, "h0", 1);
    let _b = worker(&c.url, "h1", 1);
    let throttled = worker(&c.url, "throttled", 2);
    wait_metric(&c.http, "workers", |n| n == 3).await;
    let mut client = Client::connect(&c.url).await.unwrap();
    // The coordinator learns a 4x4's expected time first, so that what the
    // stopped worker holds is judged from the start, not from whenever
    // enough answers have come in.
    let warm = four_by_four(323, 60);
    let warm_answers = self::answers(&warm);
    read_all(
        client.solve_stream(&warm, false).await.unwrap(),
        &warm_answers,
    )
    .await;
    let began = Instant::now();
    let stream = client.solve_stream(&puzzles, false).await.unwrap();
    // Stopped while it holds some of the batch: only then can it hold the
    // tail.
    while holds(&c.http, "throttled") == 0 {
        assert!(
            began.elapsed() < procs::WAIT,
            "the throttled worker was given nothing"
        );
        tokio::task::yield_now().await;
    }
    let cycle = DutyCycle::start(
        throttled.pid(),
        Duration::from_millis(900),
        Duration::from_millis(100),
    );
    let workers = read_all(stream, &answers).await;
    let took = began.elapsed();
    drop(cycle);
    let by_throttled = workers.iter().filter(|w| *w == "throttled").count();
    let (slow, won) = (
        metric(&c.http, "workers_marked_slow_total"),
        metric(&c.http, "backups_won_total"),
    );
    println!(
        "1000 4x4: {:.2} s with a worker stopped 0.9 s in 1 s ({by_throttled} solved by it, \
         marked slow {slow} times, {won} backups won), {:.2} s on the two healthy ones alone",
        took.as_secs_f64(),
        alone.as_secs_f64()
    );
    assert!(slow >= 1, "the stopped worker was never marked slow");
    assert_eq!(metric(&c.http, "workers_lost_total"), 0);
    // Without backups the tail waits for the stopped worker, up to 0.9 s
    // (1.8x of `alone` measured on 2 cores); with them, 1.0x to 1.1x.
    assert!(
        took < alone.mul_f64(1.5) + Duration::from_millis(500),
        "{took:?} with the stopped worker against {alone:?} without"
    );
}
