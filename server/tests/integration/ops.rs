//! Operations over real connections: the watch RPC (live, resume, gone),
//! `/metrics`, `/healthz`, `/readyz`, the dashboard's status stream, gRPC
//! health checking and server reflection.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{mixed, quick};
use colball_client::remote::Client;
use colball_proto::v1::cluster_event::Kind;
use colball_proto::v1::solver_client::SolverClient;
use colball_proto::v1::{self, ClusterEvent};
use colball_server::coordinator::{Config, SchedulingConfig};
use colball_testkit::LocalCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(10);

/// `GET path` over HTTP/1.0: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nhost: test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut text))
        .await
        .unwrap()
        .unwrap();
    let code = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1.to_string();
    (code, body)
}

/// Solves `puzzles` as one batch; how many results came back.
async fn results(client: &mut Client, puzzles: &[(String, colball_solver::Puzzle)]) -> usize {
    let stream = client.solve_stream(puzzles, false).await.unwrap();
    stream.collect::<Vec<_>>().await.len()
}

/// Every sample of a Prometheus text body: `name{labels}` -> value.
fn samples(body: &str) -> BTreeMap<String, f64> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// Reads events from `stream` until `done` says stop (bounded by `WAIT`).
async fn collect(
    stream: &mut tonic::Streaming<ClusterEvent>,
    mut done: impl FnMut(&[ClusterEvent]) -> bool,
) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    while !done(&events) {
        let next = tokio::time::timeout(WAIT, stream.message()).await;
        let event = next
            .expect("no event in time")
            .unwrap()
            .expect("stream ended");
        events.push(event);
    }
    events
}

fn finished(events: &[ClusterEvent]) -> bool {
    events
        .iter()
        .any(|e| matches!(e.kind, Some(Kind::BatchFinished(_))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_see_workers_batches_results_and_can_resume() {
    let mut cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let mut raw = SolverClient::connect(cluster.url()).await.unwrap();
    let mut live = raw
        .watch(v1::WatchRequest {
            from_sequence: None,
        })
        .await
        .unwrap()
        .into_inner();
    cluster.add_worker("watched", 1);
    let (puzzles, answers) = mixed(3, 120, 10);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let results: Vec<_> = client
        .solve_stream(&puzzles, false)
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(results.len(), 120);

    let events = collect(&mut live, finished).await;
    let seqs: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "gapless: {seqs:?}"
    );
    let Some(Kind::WorkerJoined(joined)) = &events[0].kind else {
        panic!("first event: {:?}", events[0]);
    };
    assert!(joined.name.starts_with("watched"), "{joined:?}");
    let Some(Kind::BatchAccepted(accepted)) = &events[1].kind else {
        panic!("second event: {:?}", events[1]);
    };
    assert_eq!(accepted.puzzles, 120);
    let mut moves = BTreeMap::new();
    let mut progress = Vec::new();
    for e in &events {
        match &e.kind {
            Some(Kind::Result(r)) => {
                assert_eq!(r.batch, accepted.batch);
                let result = r.result.as_ref().unwrap();
                let Some(v1::puzzle_result::Outcome::Solved(s)) = &result.outcome else {
                    panic!("{result:?}");
                };
                assert!(moves.insert(result.index, s.moves).is_none(), "once each");
            }
            Some(Kind::BatchProgress(p)) => progress.push(p.done),
            _ => {}
        }
    }
    let expected: BTreeMap<u64, i64> = (0..).zip(answers.iter().copied()).collect();
    assert_eq!(moves, expected, "every result, with the right answer");
    assert_eq!(progress, [12, 24, 36, 48, 60, 72, 84, 96, 108]);
    let Some(Kind::BatchFinished(f)) = &events.last().unwrap().kind else {
        unreachable!()
    };
    assert_eq!(
        (f.total, f.solved, f.errors, f.unanswered),
        (120, 120, 0, 0)
    );
    assert_eq!(f.outcome, "complete");

    // Resuming from the middle replays exactly the same events.
    let from = events[60].sequence;
    let mut resumed = raw
        .watch(v1::WatchRequest {
            from_sequence: Some(from),
        })
        .await
        .unwrap()
        .into_inner();
    let replayed = collect(&mut resumed, |e| e.len() == events.len() - 60).await;
    assert_eq!(replayed, events[60..]);

    // A worker leaving is an event too (after, maybe, a sample of the
    // queues' depth, which comes when it changes).
    cluster.stop_worker(0).await.unwrap().unwrap();
    let left = collect(&mut live, |e| {
        e.last()
            .is_some_and(|e| !matches!(e.kind, Some(Kind::QueueDepth(_))))
    })
    .await;
    assert!(
        matches!(&left.last().unwrap().kind, Some(Kind::WorkerLeft(w)) if w.name == joined.name),
        "{left:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_point_that_is_gone_is_out_of_range_with_the_retained_range() {
    let config = Config {
        scheduling: SchedulingConfig {
            events_retained: 10,
            ..quick().scheduling
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 1, 1).await.unwrap();
    let (puzzles, _) = mixed(4, 30, 100);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    let n = results(&mut client, &puzzles).await;
    assert_eq!(n, 30);
    let newest = cluster.scheduler.traffic().newest_sequence;
    assert!(newest > 30, "a join, an accept, 30 results, a finish");
    let mut raw = SolverClient::connect(cluster.url()).await.unwrap();
    let status = raw
        .watch(v1::WatchRequest {
            from_sequence: Some(1),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    let oldest = newest - 9;
    assert!(
        status
            .message()
            .contains(&format!("retains events {oldest} to {newest}")),
        "{status:?}"
    );
    // The oldest retained event is still a valid resume point.
    let mut stream = raw
        .watch(v1::WatchRequest {
            from_sequence: Some(oldest),
        })
        .await
        .unwrap()
        .into_inner();
    let events = collect(&mut stream, |e| e.len() == 10).await;
    assert_eq!(events[0].sequence, oldest);
    assert_eq!(events[9].sequence, newest);
    // A point beyond the newest (say, from before a restart) is refused.
    let status = raw
        .watch(v1::WatchRequest {
            from_sequence: Some(newest + 100),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_probes_follow_the_cluster() {
    let mut cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let http = cluster.serve_http().await.unwrap();
    assert_eq!(get(http, "/healthz").await, (200, "ok\n".to_string()));
    assert_eq!(get(http, "/readyz").await.0, 503, "no worker yet");
    assert_eq!(get(http, "/nowhere").await.0, 404);

    cluster.add_worker("a", 1);
    cluster.add_worker("b", 1);
    assert!(cluster.wait_for_workers(2, WAIT).await);
    assert_eq!(get(http, "/readyz").await.0, 200);
    let (puzzles, _) = mixed(5, 300, 10);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    for _ in 0..2 {
        // The second time, every puzzle comes from the result cache.
        let n = results(&mut client, &puzzles).await;
        assert_eq!(n, 300);
    }
    let (code, body) = get(http, "/metrics").await;
    assert_eq!(code, 200);
    let m = samples(&body);
    let value = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{body}"));
    assert_eq!(value("colball_workers"), 2.0);
    assert_eq!(value("colball_slots"), 2.0);
    assert_eq!(value("colball_pending"), 0.0);
    assert_eq!(value("colball_queued"), 0.0);
    assert_eq!(value("colball_in_flight"), 0.0);
    let solved = value("colball_solved_total");
    assert_eq!(value("colball_solve_latency_seconds_count"), solved);
    assert_eq!(value("colball_result_cache_hits_total"), 300.0);
    assert_eq!(value("colball_result_cache_misses_total"), solved);
    assert_eq!(
        value("colball_answered_total{strategy=\"result_cache\"}"),
        300.0
    );
    let by_strategy: f64 = m
        .iter()
        .filter(|(k, _)| k.starts_with("colball_answered_total{"))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(by_strategy, 600.0);
    let per_worker: Vec<_> = m
        .keys()
        .filter(|k| k.starts_with("colball_worker_in_flight{"))
        .collect();
    assert_eq!(per_worker.len(), 2, "{per_worker:?}");
    for name in [
        "colball_worker_cache_misses_total",
        "colball_worker_table_builds_total",
        "colball_redispatched_total",
        "colball_workers_lost_total",
        "colball_cancelled_total",
        "colball_result_cache_entries",
        "colball_solve_latency_seconds_bucket{le=\"+Inf\"}",
    ] {
        assert!(
            m.keys().any(|k| k.starts_with(name)),
            "no {name} in\n{body}"
        );
    }

    // The dashboard's data: the same figures as JSON.
    let (code, json) = get(http, "/api/status").await;
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status["workers"].as_array().unwrap().len(), 2);
    assert_eq!(status["answered"], 600);
    assert!(status["cache_hit_rate"].as_f64().unwrap() >= 0.5);
    assert_eq!(status["recent_results"].as_array().unwrap().len(), 20);
    let (code, page) = get(http, "/").await;
    assert_eq!(code, 200);
    assert!(
        page.contains("new EventSource("),
        "the page follows /api/stream"
    );
    assert!(page.contains("\"/api/stream\""));

    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_follows_workers_and_reflection_lists_every_service() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let mut cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let channel = tonic::transport::Endpoint::new(cluster.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel.clone());
    let check = |service: &str| HealthCheckRequest {
        service: service.to_string(),
    };
    let overall = health.check(check("")).await.unwrap().into_inner();
    assert_eq!(overall.status(), ServingStatus::Serving);
    let mut watch = health
        .watch(check("colball.v1.Solver"))
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::NotServing, "no worker yet");
    cluster.add_worker("a", 1);
    let next = tokio::time::timeout(WAIT, watch.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.status(), ServingStatus::Serving, "the next status");
    let workers = health.check(check("colball.v1.Workers")).await.unwrap();
    assert_eq!(workers.into_inner().status(), ServingStatus::Serving);
    let unknown = health.check(check("nope.v1.Nothing")).await.unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    // Server reflection, as grpcurl uses it.
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut reflection = ServerReflectionClient::new(channel);
    let ask = |m: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(m),
    };
    let requests = tokio_stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "colball.v1.Solver".into(),
        )),
    ]);
    let mut answers = reflection
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("not a service list");
    };
    let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    for expected in [
        "colball.v1.Solver",
        "colball.v1.Workers",
        "grpc.health.v1.Health",
    ] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("no descriptor for colball.v1.Solver");
    };
    assert!(
        files
            .file_descriptor_proto
            .iter()
            .any(|f| String::from_utf8_lossy(f).contains("SolveBatch")),
        "the descriptor of solver.proto describes SolveBatch"
    );
    cluster.shutdown().await;
}

/// The first `status` event of `/api/stream`, as JSON.
async fn first_streamed_status(addr: SocketAddr) -> serde_json::Value {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /api/stream HTTP/1.0\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = tokio::time::timeout(WAIT, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "the stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        if let Some(at) = text.find("event: status\ndata: ") {
            let data = &text[at + "event: status\ndata: ".len()..];
            if let Some(end) = data.find('\n') {
                return serde_json::from_str(&data[..end]).unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_stream_report_throughput_while_puzzles_are_queued() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let http = cluster.serve_http().await.unwrap();
    assert!(cluster.wait_for_workers(1, WAIT).await);
    let idle: serde_json::Value = serde_json::from_str(&get(http, "/api/status").await.1).unwrap();
    assert_eq!(idle["throughput"], 0.0);

    // Slow 4x4 puzzles on one single-threaded worker: a queue for seconds.
    let puzzles = crate::common::four_by_four(31, 3000);
    let url = cluster.url();
    let batch = tokio::spawn(async move {
        let mut client = Client::connect(&url).await.unwrap();
        let stream = client.solve_stream(&puzzles, false).await.unwrap();
        stream.collect::<Vec<_>>().await.len()
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    let busy = loop {
        let status: serde_json::Value =
            serde_json::from_str(&get(http, "/api/status").await.1).unwrap();
        if status["answered"].as_u64().unwrap() >= 50 && status["queued"].as_u64().unwrap() > 0 {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let throughput = busy["throughput"].as_f64().unwrap();
    assert!(throughput > 0.0, "answers per second while queued: {busy}");
    let streamed = first_streamed_status(http).await;
    assert!(
        streamed["throughput"].as_f64().unwrap() > 0.0,
        "the stream's first status: {streamed}"
    );
    assert!(streamed["queued"].as_u64().unwrap() > 0);
    // The per-second history and the answers by moves behind the
    // dashboard's charts.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let status: serde_json::Value =
        serde_json::from_str(&get(http, "/api/status").await.1).unwrap();
    let history = &status["history"];
    let per_second: u64 = history["answered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(per_second > 0, "{history}");
    assert!(
        history["queued_normal"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_u64().unwrap() > 0),
        "{history}"
    );
    assert!(
        history["p99_us"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_u64().is_some())
    );
    let by_moves: u64 = status["by_moves"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["count"].as_u64().unwrap())
        .sum();
    assert_eq!(by_moves, status["answered"].as_u64().unwrap());
    batch.abort();
    cluster.shutdown().await;
}
