//! The cluster in-process: a coordinator and workers on loopback (see
//! `colball_server::testing`), driven through the typed client.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::common::{FakeWorker, four_by_four, mixed, quick};
use colball_client::remote::{Client, ClientError};
use colball_proto::PROTOCOL_VERSION;
use colball_proto::v1::solver_client::SolverClient;
use colball_proto::v1::{self, coordinator_message, puzzle_result};
use colball_server::coordinator::{Config, SchedulingConfig};
use colball_server::worker::WorkerError;
use colball_solver::engine::break_even;
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Puzzle, Size};
use colball_testkit::LocalCluster;
use tokio_stream::StreamExt;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_match_in_process_answers_each_exactly_once() {
    let cluster = LocalCluster::start(quick(), 2, 1).await.unwrap();
    let (puzzles, answers) = mixed(11, 600, 60);
    let mut client = Client::connect(&cluster.url()).await.unwrap();

    let mut seen = HashSet::new();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert!(seen.insert(r.index), "result {} twice", r.index);
        assert_eq!(r.id, puzzles[r.index].0);
        assert_eq!(r.solution.answer(), answers[r.index], "{}", r.id);
        // What answered it on the worker: its engine's choice.
        assert!(
            ["cache", "bidir", "idastar", "table"].contains(&r.strategy.as_str()),
            "{}",
            r.strategy
        );
        assert!(r.worker.starts_with('w'), "{}", r.worker);
    }
    assert_eq!(seen.len(), puzzles.len());

    // In input order on request; now every answer comes from the cache.
    let mut stream = client.solve_stream(&puzzles, true).await.unwrap();
    let mut next = 0;
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert_eq!(r.index, next);
        assert!(r.cached);
        assert_eq!(r.solution.answer(), answers[r.index]);
        next += 1;
    }
    assert_eq!(next, puzzles.len());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_puzzle_repeated_in_one_batch_is_dispatched_once() {
    let cluster = LocalCluster::start(quick(), 2, 1).await.unwrap();
    let (distinct, answers) = mixed(13, 4, 2);
    // Every puzzle ten times, interleaved, each copy with its own id.
    let puzzles: Vec<_> = (0..40)
        .map(|i| (format!("copy{i}"), distinct[i % 4].1))
        .collect();
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, true).await.unwrap();
    let mut next = 0;
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert_eq!(r.index, next);
        assert_eq!(r.id, format!("copy{next}"));
        assert_eq!(r.solution.answer(), answers[next % 4]);
        assert_eq!(r.cached, next >= 4, "only the first of each is solved");
        next += 1;
    }
    assert_eq!(next, 40);
    assert_eq!(cluster.scheduler.snapshot().0.counters.solved, 4);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_sending_the_same_puzzles_at_once_share_each_solve() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let puzzles = four_by_four(14, 200);
    let url = cluster.url();
    let solve = |puzzles: Vec<(String, Puzzle)>, url: String| async move {
        let mut client = Client::connect(&url).await.unwrap();
        let mut stream = client.solve_stream(&puzzles, true).await.unwrap();
        let mut answers = Vec::new();
        while let Some(r) = stream.next().await {
            answers.push(r.unwrap().solution.answer());
        }
        answers
    };
    let first = tokio::spawn(solve(puzzles.clone(), url.clone()));
    let second = tokio::spawn(solve(puzzles.clone(), url));
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(first.len(), 200);
    assert_eq!(first, second);
    // Each puzzle was solved once: the second request followed the first's
    // pending tasks (or, for those already done, hit the result cache).
    assert_eq!(cluster.scheduler.snapshot().0.counters.solved, 200);
    // And the second's answers are counted as what they were: shared
    // solves, or result cache hits, never both.
    let by = cluster.scheduler.traffic().by_strategy;
    let count = |k: &str| by.get(k).copied().unwrap_or(0);
    assert_eq!(count("shared") + count("result_cache"), 200, "{by:?}");
    assert!(count("shared") > 0, "{by:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_shared_across_a_batch_gets_its_table_at_once() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let size = Size::new(3, 4).unwrap();
    let mut g = Generator::new(41);
    let target = g.board(size);
    // Enough to pay for a table; the worker is sent only a few at a time.
    let puzzles: Vec<(String, Puzzle)> = (0..break_even(size) + 50)
        .map(|i| (format!("s{i}"), Puzzle::new(g.board(size), target).unwrap()))
        .collect();
    let mut search = BidirSearch::new();
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    let mut by_strategy: HashMap<String, usize> = HashMap::new();
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        let expected = search.solve(&puzzles[r.index].1).answer();
        assert_eq!(r.solution.answer(), expected, "{}", r.id);
        *by_strategy.entry(r.strategy).or_default() += 1;
    }
    // Without the coordinator's hint the worker would count the target up
    // to the break-even itself, solving that many by search first.
    assert!(
        by_strategy.keys().all(|s| s == "table" || s == "cache"),
        "{by_strategy:?}"
    );
    assert!(by_strategy["table"] > puzzles.len() / 2, "{by_strategy:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_puzzles_and_the_cache() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let (puzzles, answers) = mixed(12, 5, 2);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    for ((id, p), answer) in puzzles.iter().zip(&answers) {
        let r = client.solve_one(id, p).await.unwrap();
        assert_eq!(r.solution.answer(), *answer);
        assert!(!r.cached);
        let again = client.solve_one(id, p).await.unwrap();
        assert!(again.cached);
        assert_eq!(again.solution, r.solution);
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_puzzles_are_error_results_naming_id_and_field() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let mut raw = SolverClient::connect(cluster.url()).await.unwrap();
    let good = v1::Puzzle {
        id: "good".into(),
        start: vec!["RB".into(), "BG".into()],
        target: vec!["BR".into(), "GB".into()],
    };
    let bad = v1::Puzzle {
        id: "bad".into(),
        start: vec!["RB".into(), "BG".into()],
        target: vec!["RB".into(), "XG".into()],
    };
    let request = v1::SolveBatchRequest {
        priority: 0,
        puzzles: vec![good.clone(), bad.clone()],
        ordered: true,
    };
    let results: Vec<_> = raw
        .solve_batch(request)
        .await
        .unwrap()
        .into_inner()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(results.len(), 2);
    let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    assert!(matches!(
        results[0].outcome,
        Some(puzzle_result::Outcome::Solved(_))
    ));
    let Some(puzzle_result::Outcome::Error(e)) = &results[1].outcome else {
        panic!("expected an error result")
    };
    assert_eq!(e.field, "target");
    assert!(
        e.message.contains("\"bad\"") && e.message.contains("row 2, column 1"),
        "{}",
        e.message
    );

    let status = raw
        .solve(v1::SolveRequest {
            puzzle: Some(bad),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("field target"), "{status:?}");
    let status = raw.solve(v1::SolveRequest::default()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_workers_is_a_clear_unavailable_error() {
    let config = Config {
        scheduling: SchedulingConfig {
            worker_grace: Duration::from_millis(200),
            ..quick().scheduling
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let (puzzles, _) = mixed(13, 3, 0);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let Err(ClientError::Status(status)) = client.solve_stream(&puzzles, false).await else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), Code::Unavailable);
    assert!(status.message().contains("no worker"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_is_bounded() {
    let config = Config {
        scheduling: SchedulingConfig {
            max_pending: 50,
            ..quick().scheduling
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    // A worker that holds everything it gets keeps the puzzles pending.
    let mut fake = FakeWorker::join(&cluster.url(), 1).await.unwrap();
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let _first = client
        .solve_stream(&four_by_four(1, 40), false)
        .await
        .unwrap();
    fake.take(1).await;
    let Err(ClientError::Status(status)) = client.solve_stream(&four_by_four(2, 20), false).await
    else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("at most 50"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_is_lost_and_its_puzzles_solved_elsewhere() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    // Takes what it is given, then says nothing: no heartbeats, no
    // results. Its one slot's credit (two 4x4 puzzles' worth) covers all
    // 40 small puzzles.
    let mut fake = FakeWorker::silent(&cluster.url(), 1).await.unwrap();
    let (puzzles, answers) = mixed(14, 40, 0);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    assert_eq!(fake.take(40).await.len(), 40);
    let mut cluster = cluster;
    cluster.add_worker("real", 1);
    let mut seen = HashSet::new();
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert!(seen.insert(r.index));
        assert_eq!(r.solution.answer(), answers[r.index]);
        assert!(r.worker.starts_with("real"), "{}", r.worker);
    }
    assert_eq!(seen.len(), puzzles.len());
    let (snapshot, _) = cluster.scheduler.snapshot();
    assert_eq!(snapshot.counters.workers_lost, 1);
    assert_eq!(snapshot.counters.redispatched, 40);
    drop(fake);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_capped_with_an_error_result() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let (puzzles, _) = mixed(15, 1, 0);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let url = cluster.url();
    let feeder = tokio::spawn(async move {
        // Three workers in turn take the puzzle and vanish.
        for _ in 0..3 {
            let mut fake = FakeWorker::silent(&url, 1).await.unwrap();
            assert_eq!(fake.take(1).await.len(), 1);
        }
    });
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    let Some(Err(ClientError::Puzzle { id, message })) = stream.next().await else {
        panic!("expected an error result")
    };
    assert_eq!(id, "p1");
    assert!(message.contains("3 attempts"), "{message}");
    assert!(stream.next().await.is_none());
    feeder.await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_its_work() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let mut fake = FakeWorker::join(&cluster.url(), 2).await.unwrap();
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let stream = client
        .solve_stream(&four_by_four(3, 100), false)
        .await
        .unwrap();
    let mut held = fake.take(4).await;
    drop(stream);
    let mut cancelled = fake.cancelled().await;
    held.sort();
    cancelled.sort();
    assert_eq!(cancelled, held);
    // The queued rest is gone too.
    let deadline = tokio::time::Instant::now() + WAIT;
    while cluster.scheduler.snapshot().0.pending > 0 {
        assert!(tokio::time::Instant::now() < deadline, "work left pending");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_are_honoured() {
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let mut fake = FakeWorker::join(&cluster.url(), 1).await.unwrap();
    let mut raw = SolverClient::connect(cluster.url()).await.unwrap();
    let puzzles = four_by_four(4, 3)
        .into_iter()
        .map(|(id, p)| colball_proto::puzzle_to_wire(id, &p))
        .collect();
    let mut request = tonic::Request::new(v1::SolveBatchRequest {
        priority: 0,
        puzzles,
        ordered: false,
    });
    request.set_timeout(Duration::from_millis(300));
    let mut stream = raw.solve_batch(request).await.unwrap().into_inner();
    fake.take(1).await;
    let status = stream.message().await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(fake.cancelled().await.len(), 2);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_version_mismatch_is_refused() {
    let mut cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let mut config = cluster.worker_config("old", 1);
    config.protocol_version = 99;
    let index = cluster.spawn_worker(config);
    let Some(Err(WorkerError::Refused(message))) = cluster.join_worker(index).await else {
        panic!("expected a refusal")
    };
    assert!(message.contains("protocol version 99"), "{message}");
    assert_eq!(cluster.scheduler.snapshot().0.workers, 0);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_1_worker_is_refused_before_any_task() {
    // Protocol 1 carried text boards and one result a message; a worker
    // of that version would misread version 2's tasks, so it gets none.
    let cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let status = FakeWorker::register_speaking(&cluster.url(), "v1", 2, 1)
        .await
        .err()
        .expect("a protocol 1 worker must be refused");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(
        status.message().contains(&format!(
            "version 1 is not supported: this coordinator speaks version {PROTOCOL_VERSION}"
        )),
        "{}",
        status.message()
    );
    assert_eq!(cluster.scheduler.snapshot().0.workers, 0);
    // The current version joins the same coordinator and is told how many
    // tasks it may be sent.
    let mut fake = FakeWorker::register_speaking(&cluster.url(), "v2", 2, PROTOCOL_VERSION)
        .await
        .unwrap();
    let Some(coordinator_message::Kind::Registered(r)) = fake.next().await else {
        panic!("no greeting");
    };
    assert!(r.worker_id.starts_with("v2#"), "{r:?}");
    assert_eq!(r.max_tasks, 2 * 2 * 1024 + 1, "{r:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_finishes_what_it_holds() {
    let mut cluster = LocalCluster::start(quick(), 1, 2).await.unwrap();
    assert!(cluster.wait_for_workers(1, WAIT).await);
    let puzzles = four_by_four(5, 60);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    let mut seen = HashSet::new();
    for _ in 0..5 {
        seen.insert(stream.next().await.unwrap().unwrap().index);
    }
    // Drain the only worker: what it holds is reported, the rest waits for
    // the next worker.
    cluster.add_worker("second", 2);
    assert!(matches!(cluster.stop_worker(0).await, Some(Ok(()))));
    while let Some(r) = stream.next().await {
        assert!(seen.insert(r.unwrap().index));
    }
    assert_eq!(seen.len(), puzzles.len());
    assert_eq!(cluster.scheduler.snapshot().0.counters.redispatched, 0);
    cluster.shutdown().await;
}
