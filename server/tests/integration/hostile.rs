//! Workers that lie, break the protocol or stall, in a cluster with an
//! honest worker: the answers clients get are still exactly the in-process
//! ones, nothing wrong is cached, and the bad worker is quarantined or
//! lost. The fake workers speak the real protocol over gRPC.

use std::time::Duration;

use crate::common::{FakeWorker, mixed, quick};
use colball_client::remote::Client;
use colball_proto::v1::{self, coordinator_message, worker_message};
use colball_proto::work::outcome_from_notation as worker_answer;
use colball_proto::work::task_puzzle;
use colball_server::coordinator::{Config, SchedulingConfig};
use colball_solver::{BidirSearch, Puzzle};
use colball_testkit::LocalCluster;
use tokio_stream::StreamExt;
use tonic::Code;

/// How a bad worker answers each task it is given.
#[derive(Clone, Copy, Debug)]
enum Lie {
    /// "2 moves: r22 c33", whatever the puzzle.
    Fixed,
    /// The true sequence with a count one too high.
    WrongCount,
    /// The true answer to the previous puzzle it was given.
    OtherPuzzle,
    /// -1 (unreachable) on every board.
    Unreachable,
    /// A result with no outcome.
    NoOutcome,
    /// Nothing at all, while it keeps heartbeating.
    Nothing,
    /// A valid sequence, padded with four rotations of one window (which
    /// cancel out): replays, but is four moves too long.
    Padded,
}

/// Runs a worker that answers every task with `lie` until its stream
/// ends; returns how the stream ended.
fn spawn_liar(mut fake: FakeWorker, lie: Lie) -> tokio::task::JoinHandle<Option<tonic::Status>> {
    tokio::spawn(async move {
        let mut search = BidirSearch::new();
        let mut previous: Option<(i64, String)> = None;
        loop {
            let message = match fake.inbound.message().await {
                Ok(Some(m)) => m,
                Ok(None) => return None,
                Err(status) => return Some(status),
            };
            let Some(coordinator_message::Kind::Assign(assign)) = message.kind else {
                continue;
            };
            for task in assign.tasks {
                let puzzle: Puzzle = task_puzzle(&task).unwrap();
                let s = search.solve(&puzzle);
                let truth = (s.answer(), s.notation());
                let solved = |moves: i64, solution: String| {
                    Some(worker_answer(puzzle.size(), moves, &solution))
                };
                let outcome = match lie {
                    Lie::Fixed => solved(2, "r22 c33".into()),
                    Lie::WrongCount => solved(truth.0 + 1, truth.1.clone()),
                    Lie::OtherPuzzle => match previous.clone() {
                        Some((n, text)) if n != truth.0 || text != truth.1 => solved(n, text),
                        // Nothing to borrow yet: tell the truth.
                        _ => solved(truth.0, truth.1.clone()),
                    },
                    Lie::Unreachable => solved(-1, String::new()),
                    Lie::NoOutcome => None,
                    Lie::Nothing => continue,
                    Lie::Padded if truth.0 >= 0 => solved(
                        truth.0 + 4,
                        format!("{} r22 r22 r22 r22", truth.1).trim().to_string(),
                    ),
                    Lie::Padded => solved(truth.0, truth.1.clone()),
                };
                previous = Some(truth);
                let message = v1::WorkerMessage {
                    kind: Some(worker_message::Kind::Results(v1::Results {
                        results: vec![v1::TaskResult {
                            task_id: task.task_id,
                            outcome,
                        }],
                    })),
                };
                if fake.out.send(message).await.is_err() {
                    return None;
                }
            }
        }
    })
}

/// Solves `puzzles` and checks every answer against in-process ones (the
/// client replays each sequence too).
async fn solve_exactly(
    client: &mut Client,
    puzzles: &[(String, Puzzle)],
    answers: &[i64],
) -> usize {
    let mut stream = client.solve_stream(puzzles, true).await.unwrap();
    let mut n = 0;
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert_eq!(r.solution.answer(), answers[r.index], "{}", r.id);
        n += 1;
    }
    assert_eq!(n, puzzles.len());
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_or_broken_workers_never_reach_a_client_or_the_cache() {
    for (round, lie) in [
        Lie::Fixed,
        Lie::WrongCount,
        Lie::OtherPuzzle,
        Lie::Unreachable,
        Lie::NoOutcome,
        Lie::Nothing,
    ]
    .into_iter()
    .enumerate()
    {
        let config = Config {
            scheduling: SchedulingConfig {
                task_timeout: Duration::from_secs(1),
                audit_rate: 0.0,
                ..quick().scheduling
            },
            ..quick()
        };
        // The liar joins first, so it is given work before the honest one.
        let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
        let url = cluster.url();
        let liar = spawn_liar(FakeWorker::join_as(&url, "liar", 4).await.unwrap(), lie);
        let mut cluster = cluster;
        cluster.add_worker("honest", 1);
        assert!(cluster.wait_for_workers(2, Duration::from_secs(10)).await);
        let (puzzles, answers) = mixed(100 + round as u64, 300, 30);
        let mut client = Client::connect(&url).await.unwrap();
        solve_exactly(&mut client, &puzzles, &answers).await;
        // The liar's session ended: quarantined for a wrong answer, lost
        // for a broken protocol or for holding tasks too long.
        let ended = tokio::time::timeout(Duration::from_secs(10), liar)
            .await
            .unwrap_or_else(|_| panic!("{lie:?}: the liar's session is still open"))
            .unwrap();
        let (snapshot, _) = cluster.scheduler.snapshot();
        match lie {
            Lie::NoOutcome => {
                assert_eq!(
                    ended.map(|s| s.code()),
                    Some(Code::InvalidArgument),
                    "{lie:?}"
                )
            }
            Lie::Nothing => {
                assert_eq!(
                    ended.map(|s| s.code()),
                    Some(Code::DeadlineExceeded),
                    "{lie:?}"
                );
                assert!(snapshot.counters.timed_out >= 1, "{lie:?}");
            }
            _ => {
                let status = ended.unwrap_or_else(|| panic!("{lie:?}: no status"));
                assert_eq!(status.code(), Code::PermissionDenied, "{lie:?}: {status:?}");
                assert!(status.message().contains("quarantined"), "{status:?}");
                assert_eq!(snapshot.counters.quarantined, 1, "{lie:?}");
                assert!(
                    snapshot.counters.rejected.iter().sum::<u64>() >= 1,
                    "{lie:?}"
                );
                // It may not come straight back.
                let again = FakeWorker::join_as(&url, "liar", 4).await;
                assert_eq!(
                    again.err().map(|s| s.code()),
                    Some(Code::PermissionDenied),
                    "{lie:?}"
                );
            }
        }
        assert_eq!(
            snapshot.workers, 1,
            "{lie:?}: only the honest worker is left"
        );
        // Nothing wrong was cached: the same puzzles again, now answered
        // from the cache, are still exactly right.
        solve_exactly(&mut client, &puzzles, &answers).await;
        cluster.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_catches_answers_that_replay_but_are_too_long() {
    let config = Config {
        scheduling: SchedulingConfig {
            audit_rate: 1.0,
            ..quick().scheduling
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    let padder = spawn_liar(
        FakeWorker::join_as(&url, "padder", 4).await.unwrap(),
        Lie::Padded,
    );
    let mut cluster = cluster;
    cluster.add_worker("honest", 1);
    assert!(cluster.wait_for_workers(2, Duration::from_secs(10)).await);
    let (puzzles, answers) = mixed(200, 200, 0);
    let mut client = Client::connect(&url).await.unwrap();
    // The first answers may be the padded ones: they replay, so they are
    // delivered (and cannot be recalled).
    let mut stream = client.solve_stream(&puzzles, true).await.unwrap();
    let mut padded = 0;
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        let n = r.solution.answer();
        assert!(
            n == answers[r.index] || n == answers[r.index] + 4,
            "{}: {n}",
            r.id
        );
        padded += usize::from(n != answers[r.index]);
    }
    assert!(padded > 0, "the padder answered nothing");
    let ended = tokio::time::timeout(Duration::from_secs(20), padder)
        .await
        .expect("the padder is still connected")
        .unwrap();
    assert_eq!(ended.map(|s| s.code()), Some(Code::PermissionDenied));
    // Every answer the cluster gives now is optimal: the padder's cached
    // answers were evicted when it was caught.
    let (snapshot, _) = cluster.scheduler.snapshot();
    assert_eq!(snapshot.counters.quarantined, 1);
    assert!(snapshot.counters.rejected[5] >= 1, "not_optimal rejections");
    solve_exactly(&mut client, &puzzles, &answers).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_outside_the_slot_limits_are_refused() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    for slots in [0, 257, 1 << 31, u32::MAX] {
        let status = FakeWorker::join(&cluster.url(), slots).await.err().unwrap();
        assert_eq!(status.code(), Code::InvalidArgument, "{slots}");
        assert!(
            status.message().contains("--max-worker-slots"),
            "{status:?}"
        );
    }
    assert!(FakeWorker::join(&cluster.url(), 256).await.is_ok());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_binaries_refuse_a_liar_and_stay_exact() {
    use colball_testkit::procs::{self, Stderr, metric, wait_metric};
    use std::path::Path;
    let bin = Path::new(env!("CARGO_BIN_EXE_colball-server"));
    let c = procs::coordinator(bin, "127.0.0.1:0", &["--audit-rate", "0"]);
    let liar = spawn_liar(
        FakeWorker::join_as(&c.url, "liar", 4).await.unwrap(),
        Lie::Fixed,
    );
    let _honest = procs::worker(bin, &c.url, "honest", Stderr::Warn, &[]);
    wait_metric(&c.http, "workers", |n| n == 2).await;
    let (puzzles, answers) = mixed(300, 400, 20);
    let mut client = Client::connect(&c.url).await.unwrap();
    solve_exactly(&mut client, &puzzles, &answers).await;
    let ended = tokio::time::timeout(Duration::from_secs(10), liar)
        .await
        .expect("the liar is still connected")
        .unwrap();
    assert_eq!(ended.map(|s| s.code()), Some(Code::PermissionDenied));
    assert_eq!(metric(&c.http, "workers_quarantined_total"), 1);
    let body = procs::metrics_text(&c.http).unwrap();
    assert!(
        body.contains("colball_results_rejected_total{reason=\"misses_target\"} 1"),
        "{body}"
    );
    // From the cache now, still exact.
    solve_exactly(&mut client, &puzzles, &answers).await;
}

/// A worker that heartbeats, takes tasks and never answers, joined before
/// the batch: once its tasks are far past the expected 4x4 time (learned
/// from the honest worker's answers), they get backup copies on the honest
/// worker, so the batch finishes long before the task timeout (30 s)
/// would have freed them, exactly as in-process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_does_not_hold_a_batch_until_the_task_timeout() {
    let config = Config {
        scheduling: SchedulingConfig {
            audit_rate: 0.0,
            ..quick().scheduling
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    let hung = spawn_liar(
        FakeWorker::join_as(&url, "hung", 2).await.unwrap(),
        Lie::Nothing,
    );
    let mut cluster = cluster;
    cluster.add_worker("honest", 1);
    assert!(cluster.wait_for_workers(2, Duration::from_secs(10)).await);
    // Every one 4x4.
    let (puzzles, answers) = mixed(31, 120, 1);
    let mut client = Client::connect(&url).await.unwrap();
    let started = std::time::Instant::now();
    solve_exactly(&mut client, &puzzles, &answers).await;
    let took = started.elapsed();
    let (snapshot, _) = cluster.scheduler.snapshot();
    let c = &snapshot.counters;
    assert_eq!(c.timed_out, 0, "the batch waited for the task timeout");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(c.backups_won >= 1, "{c:?}");
    assert!(
        snapshot.solve_times.iter().any(|t| t.size == "4x4"),
        "{:?}",
        snapshot.solve_times
    );
    hung.abort();
    cluster.shutdown().await;
}
