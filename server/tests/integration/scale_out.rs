//! Several coordinators on one PostgreSQL database (real processes, a
//! throwaway server): a job survives the coordinator it was submitted to
//! being killed, cancel reaches the coordinator running the work, an
//! interactive job on one is served while a bulk job on another fills
//! the workers, and the maintenance changes leader when its leader dies.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{four_by_four, mixed};
use colball_client::jobs::Jobs;
use colball_client::remote::{ClientError, Security};
use colball_proto::v1::{self, puzzle_result};
use colball_testkit::postgres::TempPostgres;
use colball_testkit::procs::{self, Coordinator, Stderr, metric, wait_metric};
use tokio_stream::StreamExt;
use tonic::Code;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// A fresh database on a throwaway server, and the flags of a coordinator
/// on it (2 s leases, so that takeovers come quickly).
async fn database(name: &str) -> (TempPostgres, Vec<String>) {
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database(name);
    let flags = ["--store", &url, "--job-lease-secs", "2"]
        .map(String::from)
        .to_vec();
    (server, flags)
}

fn coordinator(flags: &[String], extra: &[&str]) -> Coordinator {
    coordinator_on("127.0.0.1:0", flags, extra)
}

fn coordinator_on(listen: &str, flags: &[String], extra: &[&str]) -> Coordinator {
    let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
    all.extend(extra);
    procs::coordinator(Path::new(BIN), listen, &all)
}

async fn jobs(c: &Coordinator) -> Jobs {
    Jobs::connect(&c.url, &Security::default()).await.unwrap()
}

fn moves(r: &v1::PuzzleResult) -> i64 {
    match &r.outcome {
        Some(puzzle_result::Outcome::Solved(s)) => s.moves,
        other => panic!("result {}: {other:?}", r.index),
    }
}

/// Follows job `id` on `c` to its end, counting results in `received`.
fn follow(
    c: &Coordinator,
    id: String,
    received: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<Vec<v1::PuzzleResult>> {
    let url = c.url.clone();
    tokio::spawn(async move {
        let mut jobs = Jobs::connect(&url, &Security::default()).await.unwrap();
        let mut stream = jobs.results(&id, 0, true).await.unwrap();
        let mut seen = Vec::new();
        while let Some(r) = stream.next().await {
            seen.push(r.unwrap());
            received.fetch_add(1, Ordering::Relaxed);
        }
        seen
    })
}

/// Three coordinators and two workers on one database: a 20,000-puzzle
/// job submitted on the first, that coordinator SIGKILLed twice at random
/// moments (and started again); the others finish it, and its results
/// read from the third equal the in-process answers, each index once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_outlives_the_coordinator_it_was_submitted_to_being_killed_twice() {
    const PUZZLES: usize = 20_000;
    let (_server, flags) = database("three").await;
    let mut a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let c = coordinator(&flags, &[]);
    let bin = Path::new(BIN);
    let _w0 = procs::worker(bin, &a.url, "w0", Stderr::Quiet, &[]);
    let _w1 = procs::worker(bin, &b.url, "w1", Stderr::Quiet, &[]);
    wait_metric(&a.http, "workers", |n| n == 1).await;
    wait_metric(&b.http, "workers", |n| n == 1).await;
    let (puzzles, answers) = mixed(45, PUZZLES, 8);
    let id = jobs(&a).await.submit(&puzzles, None, "").await.unwrap().id;
    let received = Arc::new(AtomicUsize::new(0));
    let reader = follow(&c, id.clone(), received.clone());
    for (kill, moment) in procs::random_moments(2, PUZZLES as u64 * 8 / 10)
        .into_iter()
        .enumerate()
    {
        procs::wait_to_kill(&received, moment, kill).await;
        let listen = a.addr.to_string();
        a.proc.kill();
        a = coordinator_on(&listen, &flags, &[]);
    }
    let seen = tokio::time::timeout(Duration::from_secs(120), reader)
        .await
        .expect("the job finished in 2 minutes")
        .unwrap();
    assert_eq!(seen.len(), PUZZLES);
    let mut indexes = HashSet::new();
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.index, i as u64, "in input order");
        assert!(indexes.insert(r.index), "index {} twice", r.index);
        assert_eq!(moves(r), answers[i], "{}", r.id);
    }
    // Every result is stored; the job is marked done by the coordinator
    // that finishes its last window, within a moment of it.
    let mut on_c = jobs(&c).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let job = loop {
        let job = on_c.get(&id).await.unwrap();
        if job.state != v1::JobState::Running as i32 || Instant::now() >= deadline {
            break job;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(job.state, v1::JobState::Done as i32, "{}", job.failure);
    assert_eq!((job.solved, job.errors), (PUZZLES as u64, 0));
    println!(
        "windows claimed: a {} b {}; taken over: a {} b {}",
        metric(&a.http, "job_windows_claimed_total"),
        metric(&b.http, "job_windows_claimed_total"),
        metric(&a.http, "job_windows_taken_over_total"),
        metric(&b.http, "job_windows_taken_over_total"),
    );
}

/// A job runs on the coordinator with the workers; it is cancelled on
/// another, and the work stops on the first within a couple of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_on_one_coordinator_stops_the_work_running_on_another() {
    let (_server, flags) = database("cancel").await;
    let a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let _w = procs::worker(Path::new(BIN), &a.url, "w0", Stderr::Quiet, &[]);
    wait_metric(&a.http, "workers", |n| n == 1).await;
    let mut on_b = jobs(&b).await;
    let id = on_b
        .submit(&four_by_four(46, 20_000), None, "")
        .await
        .unwrap()
        .id;
    // A (with the worker) takes it up and runs it.
    wait_metric(&a.http, "in_flight", |n| n > 0).await;
    let cancelled_at = Instant::now();
    let job = on_b.cancel(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Cancelled as i32);
    // Stopped: nothing pending on A and no result stored for 300 ms (a
    // result answered before the cancel may still be on its way to the
    // store, and A may be between two windows of the job).
    let mut on_a = jobs(&a).await;
    let deadline = cancelled_at + Duration::from_secs(5);
    let (mut solved, mut since) = (u64::MAX, Instant::now());
    loop {
        let now = on_a.get(&id).await.unwrap().solved;
        if metric(&a.http, "pending") > 0 || now != solved {
            (solved, since) = (now, Instant::now());
        } else if since.elapsed() >= Duration::from_millis(300) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a still works on a cancelled job"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "work stopped {:?} after the cancel",
        since.duration_since(cancelled_at)
    );
    assert!(solved < 20_000, "finished before the cancel");
    // And stays stopped, past the once-a-second look at the jobs' states.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let job = on_a.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Cancelled as i32);
    assert_eq!(
        job.solved, solved,
        "no result stored after the work stopped"
    );
    assert_eq!(metric(&a.http, "pending"), 0);
}

/// A bulk job submitted on A fills the workers (all on A); an interactive
/// job submitted on B is answered promptly, while the bulk job still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_job_on_one_coordinator_is_served_past_a_bulk_job_on_another() {
    let (_server, flags) = database("classes").await;
    let a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let bin = Path::new(BIN);
    let _workers: Vec<_> = (0..2)
        .map(|i| procs::worker(bin, &a.url, &format!("w{i}"), Stderr::Quiet, &[]))
        .collect();
    wait_metric(&a.http, "workers", |n| n == 2).await;
    let bulk = jobs(&a)
        .await
        .submit(&four_by_four(47, 20_000), Some(v1::Priority::Bulk), "bulk")
        .await
        .unwrap()
        .id;
    wait_metric(&a.http, "in_flight", |n| n > 0).await;
    let (small, answers) = mixed(48, 20, 0);
    let mut on_b = jobs(&b).await;
    let began = Instant::now();
    let id = on_b
        .submit(&small, Some(v1::Priority::Interactive), "now")
        .await
        .unwrap()
        .id;
    let mut stream = on_b.results(&id, 0, true).await.unwrap();
    let mut seen = Vec::new();
    while let Some(r) = stream.next().await {
        seen.push(r.unwrap());
    }
    let took = began.elapsed();
    println!("the interactive job answered in {took:?}");
    assert_eq!(seen.iter().map(moves).collect::<Vec<_>>(), answers);
    let bulk = jobs(&a).await.get(&bulk).await.unwrap();
    assert!(bulk.remaining > 0, "the bulk job ended first");
    assert!(took < Duration::from_secs(3), "waited {took:?}");
}

/// One coordinator of three leads the maintenance; killed, another leads
/// within seconds and keeps the retention: a job finished after the kill
/// is deleted once its retention passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leader_dies_another_takes_over_the_retention() {
    let (_server, flags) = database("leader").await;
    // Retention 1.8 s: the maintenance runs every second.
    let extra = ["--job-retention-hours", "0.0005"];
    let mut all: Vec<Coordinator> = (0..3).map(|_| coordinator(&flags, &extra)).collect();
    let leaders = |all: &[Coordinator]| -> Vec<usize> {
        (0..all.len())
            .filter(|&i| metric(&all[i].http, "store_leader") == 1)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        match leaders(&all)[..] {
            [one] => break one,
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "no single leader: {:?}",
                    leaders(&all)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let killed_at = Instant::now();
    all.remove(leader).proc.kill();
    let deadline = killed_at + Duration::from_secs(5);
    loop {
        match leaders(&all)[..] {
            [_] => break,
            ref other => {
                assert!(
                    Instant::now() < deadline,
                    "leaders after the kill: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    println!("a new leader {:?} after the kill", killed_at.elapsed());
    // A job finished now is deleted by the new leader.
    let _w = procs::worker(Path::new(BIN), &all[0].url, "w0", Stderr::Quiet, &[]);
    wait_metric(&all[0].http, "workers", |n| n == 1).await;
    let mut client = jobs(&all[1]).await;
    let (small, _) = mixed(49, 10, 0);
    let id = client.submit(&small, None, "").await.unwrap().id;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.get(&id).await {
            Ok(job) => assert!(job.state != v1::JobState::Failed as i32, "{}", job.failure),
            Err(ClientError::Status(s)) if s.code() == Code::NotFound => break,
            Err(e) => panic!("{e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the job outlived its retention by far"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `colball solve --connect A,B` with both workers on `--coordinator A,B`:
/// A is SIGKILLed mid-run (and not started again); the client and the
/// workers go on with B, which takes over A's windows, and the output is
/// what in-process `colball solve` prints, exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solve_connect_to_two_coordinators_rides_through_the_first_one_s_death() {
    use crate::cli_jobs::{colball, puzzles_and_answers, text};
    let (_server, flags) = database("solve-failover").await;
    let a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let both = format!("{},{}", a.url, b.url);
    let bin = Path::new(BIN);
    let _workers: Vec<_> = (0..2)
        .map(|i| procs::worker(bin, &both, &format!("w{i}"), Stderr::Quiet, &[]))
        .collect();
    wait_metric(&a.http, "workers", |n| n == 2).await;
    let (input, local) = puzzles_and_answers("3x3,4x4", 3000, 23);
    let connect = both.clone();
    let command =
        tokio::task::spawn_blocking(move || colball(&["solve", "--connect", &connect], &input));
    wait_metric(&a.http, "solved_total", |n| n >= 300).await;
    a.proc.kill();
    let out = tokio::time::timeout(Duration::from_secs(120), command)
        .await
        .expect("colball solve --connect A,B did not finish")
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("reconnected to {}", b.url)),
        "{stderr}"
    );
    assert!(out.stdout == local, "the output differs from in-process");
    assert_eq!(metric(&b.http, "workers"), 2, "the workers moved to B");
}

/// `colball job results ID --wait --connect A,B` while A, which runs the
/// job, is SIGKILLed: the rest is read from B, and the output is what
/// in-process `colball solve` prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_results_wait_goes_on_with_the_next_coordinator() {
    use crate::cli_jobs::{colball, puzzles_and_answers, text};
    let (_server, flags) = database("results-failover").await;
    let a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let both = format!("{},{}", a.url, b.url);
    let _w = procs::worker(Path::new(BIN), &both, "w0", Stderr::Quiet, &[]);
    wait_metric(&a.http, "workers", |n| n == 1).await;
    let (input, local) = puzzles_and_answers("2x3,3x3,4x4", 5000, 24);
    let submit = colball(&["job", "submit", "--connect", &a.url], &input);
    assert!(submit.status.success(), "{}", text(&submit.stderr));
    let id = text(&submit.stdout).trim().to_string();
    let command = tokio::task::spawn_blocking(move || {
        colball(&["job", "results", &id, "--wait", "--connect", &both], b"")
    });
    wait_metric(&a.http, "solved_total", |n| n >= 500).await;
    a.proc.kill();
    let out = tokio::time::timeout(Duration::from_secs(120), command)
        .await
        .expect("job results --wait did not finish")
        .unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("reconnected to {}", b.url)),
        "{stderr}"
    );
    assert!(
        out.stdout == local,
        "the job's results differ from in-process"
    );
}

/// Three coordinators started at once on a fresh database: the schema is
/// made once (under its lock), all three serve, and a job submitted on one
/// is read on another and seen done on the third.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinators_started_together_on_a_fresh_database_all_serve() {
    let (_server, flags) = database("together").await;
    let all: Vec<Coordinator> = std::thread::scope(|s| {
        let started: Vec<_> = (0..3)
            .map(|_| s.spawn(|| coordinator(&flags, &[])))
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let _w = procs::worker(Path::new(BIN), &all[0].url, "w0", Stderr::Quiet, &[]);
    wait_metric(&all[0].http, "workers", |n| n == 1).await;
    let (small, answers) = mixed(50, 50, 0);
    let id = jobs(&all[0])
        .await
        .submit(&small, None, "")
        .await
        .unwrap()
        .id;
    let seen = follow(&all[1], id.clone(), Arc::new(AtomicUsize::new(0)))
        .await
        .unwrap();
    assert_eq!(seen.iter().map(moves).collect::<Vec<_>>(), answers);
    let job = jobs(&all[2]).await.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32, "{}", job.failure);
}

/// Follows job `id` on `c` to its end: its results, in input order.
async fn all_results(c: &Coordinator, id: &str) -> Vec<v1::PuzzleResult> {
    let mut stream = jobs(c).await.results(id, 0, true).await.unwrap();
    let mut seen = Vec::new();
    while let Some(r) = stream.next().await {
        seen.push(r.unwrap());
    }
    seen
}

/// Checks that `seen` is one result per index in input order, each the
/// in-process answer.
fn exactly_the_answers(seen: &[v1::PuzzleResult], answers: &[i64]) {
    assert_eq!(seen.len(), answers.len());
    for (i, r) in seen.iter().enumerate() {
        assert_eq!(r.index, i as u64, "in input order, each index once");
        assert_eq!(moves(r), answers[i], "{}", r.id);
    }
}

/// A coordinator frozen (SIGSTOP) past its lease while it holds windows
/// of a job, with tasks of them out: the other takes them over and
/// finishes the job. Thawed, the frozen one writes nothing over what was
/// stored (its results for the windows it lost are refused by their
/// fence), and it serves new work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_frozen_past_its_lease_changes_nothing_when_thawed_and_serves_again() {
    const PUZZLES: usize = 4 * 8192;
    let (_server, flags) = database("frozen").await;
    let a = coordinator(&flags, &[]);
    let b = coordinator(&flags, &[]);
    let bin = Path::new(BIN);
    let _wa = procs::worker(bin, &a.url, "wa", Stderr::Quiet, &[]);
    let _wb = procs::worker(bin, &b.url, "wb", Stderr::Quiet, &[]);
    wait_metric(&a.http, "workers", |n| n == 1).await;
    wait_metric(&b.http, "workers", |n| n == 1).await;
    let (puzzles, answers) = mixed(47, PUZZLES, 16);
    let id = jobs(&b).await.submit(&puzzles, None, "").await.unwrap().id;
    // A holds a window, some of it out with its worker.
    wait_metric(&a.http, "in_flight", |n| n > 0).await;
    assert!(metric(&a.http, "job_windows_claimed_total") >= 1);
    a.proc.signal("STOP");
    let frozen = Instant::now();
    let seen = tokio::time::timeout(Duration::from_secs(120), all_results(&b, &id))
        .await
        .expect("B finished the job in 2 minutes");
    exactly_the_answers(&seen, &answers);
    let taken = metric(&b.http, "job_windows_taken_over_total")
        + metric(&b.http, "job_windows_rescued_total");
    assert!(taken >= 1, "B finished the job without A's windows");
    let job = jobs(&b).await.get(&id).await.unwrap();
    assert_eq!(job.state, v1::JobState::Done as i32, "{}", job.failure);
    assert_eq!((job.solved, job.errors), (PUZZLES as u64, 0));
    println!(
        "A frozen {:.1} s; B took over {taken} windows",
        frozen.elapsed().as_secs_f64()
    );

    // Thawed, A serves a new job (its worker still with it) ...
    a.proc.signal("CONT");
    let (small, small_answers) = mixed(48, 300, 0);
    let new = jobs(&a).await.submit(&small, None, "").await.unwrap().id;
    let on_a = tokio::time::timeout(Duration::from_secs(60), all_results(&a, &new))
        .await
        .expect("the thawed A served a new job in a minute");
    exactly_the_answers(&on_a, &small_answers);
    // ... and what it solved for the windows it lost changed nothing:
    // read back from it, the first job is what B read, counts and all.
    let after = all_results(&a, &id).await;
    assert!(after == seen, "the stored results changed after A thawed");
    let job = jobs(&a).await.get(&id).await.unwrap();
    assert_eq!((job.solved, job.errors), (PUZZLES as u64, 0));
    println!(
        "A, thawed: {} windows lost, {} results stored for the new job",
        metric(&a.http, "job_windows_lost_total"),
        on_a.len()
    );
}
