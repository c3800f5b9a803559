//! The hung worker does what the straggler tests rely on: it registers,
//! stays connected by its heartbeats, takes tasks and answers none.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is a failed test

use std::time::{Duration, Instant};

use colball_proto::v1::solver_client::SolverClient;
use colball_proto::{puzzle_to_wire, v1};
use colball_server::coordinator::{Config, SchedulingConfig};
use colball_solver::Size;
use colball_solver::generate::Generator;
use colball_testkit::LocalCluster;
use colball_testkit::hung::HungWorker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_takes_tasks_stays_connected_and_answers_none() {
    let config = Config {
        scheduling: SchedulingConfig {
            heartbeat_interval: Duration::from_millis(100),
            ..Config::default().scheduling
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let hung = HungWorker::start(&cluster.url(), "hung", 2);
    let mut g = Generator::new(32);
    let four = Size::new(4, 4).unwrap();
    let puzzles = (0..4)
        .map(|i| puzzle_to_wire(format!("q{i}"), &g.uniform(four)))
        .collect();
    let mut client = SolverClient::connect(cluster.url()).await.unwrap();
    let batch = tokio::spawn(async move {
        let mut stream = client
            .solve_batch(v1::SolveBatchRequest {
                puzzles,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        stream.message().await
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while hung.held() == 0 {
        assert!(
            Instant::now() < deadline,
            "the hung worker was given no task"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Ten heartbeat intervals on: still registered, still holding, and
    // nothing has been answered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (snapshot, _) = cluster.scheduler.snapshot();
    assert_eq!(snapshot.workers, 1, "the hung worker was dropped");
    let worker = &snapshot.worker_list[0];
    assert_eq!(worker.name, "hung#1");
    assert_eq!(worker.in_flight, hung.held());
    assert_eq!(worker.solved, 0);
    assert_eq!(snapshot.counters.solved, 0);
    assert!(
        !batch.is_finished(),
        "a result came from a worker that answers nothing"
    );
    batch.abort();
    drop(hung);
    cluster.shutdown().await;
}
