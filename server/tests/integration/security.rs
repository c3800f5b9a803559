//! Who may connect: client and worker tokens, TLS; and the coordinator's
//! limits on what one request or one client may ask for.

use std::time::Duration;

use crate::common::{FakeWorker, four_by_four, mixed, quick, solves};
use colball_client::remote::{Client, ClientError, Security};
use colball_proto::v1::solver_client::SolverClient;
use colball_proto::v1::{self, puzzle_result};
use colball_proto::{MAX_ID_BYTES, MAX_MESSAGE_BYTES, Secret};
use colball_server::coordinator::{AccessConfig, Config, SchedulingConfig};
use colball_server::worker::WorkerError;
use colball_testkit::LocalCluster;
use colball_testkit::pki::Pki;
use tokio_stream::StreamExt;
use tonic::Code;

const WAIT: Duration = Duration::from_secs(20);

fn secret(s: &str) -> Secret {
    Secret::new(s, "test").unwrap()
}

fn with_token(token: &str) -> Security {
    Security {
        token: Some(secret(token)),
        ..Security::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_guard_clients_and_workers_separately() {
    let config = Config {
        access: AccessConfig {
            client_token: Some(secret("client-secret")),
            worker_token: Some(secret("worker-secret")),
            ..quick().access
        },
        ..quick()
    };
    let mut cluster = LocalCluster::start(config, 1, 1).await.unwrap();
    assert!(cluster.wait_for_workers(1, WAIT).await);

    let mut client = Client::connect_with(&cluster.url(), &with_token("client-secret"))
        .await
        .unwrap();
    solves(&mut client, 1, 30).await;

    let (puzzles, _) = mixed(2, 3, 0);
    for (security, expect) in [
        (Security::default(), "requires a client token"),
        (with_token("guess"), "client token is wrong"),
        (with_token("worker-secret"), "client token is wrong"),
    ] {
        let mut client = Client::connect_with(&cluster.url(), &security)
            .await
            .unwrap();
        let Err(ClientError::Status(status)) = client.solve_stream(&puzzles, false).await else {
            panic!("expected a status")
        };
        assert_eq!(status.code(), Code::Unauthenticated);
        assert!(status.message().contains(expect), "{status:?}");
        assert!(!status.message().contains("guess"), "{status:?}");
        assert!(!status.message().contains("secret"), "{status:?}");
        let status = client.solve_one("x", &puzzles[0].1).await.unwrap_err();
        assert!(
            matches!(&status, ClientError::Status(s) if s.code() == Code::Unauthenticated),
            "{status}"
        );
    }

    // Workers without the worker token are refused for good: no retry loop.
    for token in [None, Some("client-secret")] {
        let mut config = cluster.worker_config("intruder", 1);
        config.token = token.map(secret);
        let index = cluster.spawn_worker(config);
        let ended = tokio::time::timeout(WAIT, cluster.join_worker(index))
            .await
            .expect("a refused worker stops by itself");
        let Some(Err(WorkerError::Refused(message))) = ended else {
            panic!("expected a refusal, got {ended:?}")
        };
        assert!(message.contains("worker token"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }
    assert_eq!(cluster.scheduler.snapshot().0.workers, 1);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_workers_and_clients_that_trust_the_ca() {
    let pki = Pki::new();
    let config = Config {
        access: AccessConfig {
            tls: Some(pki.server()),
            client_token: Some(secret("t")),
            ..quick().access
        },
        ..quick()
    };
    let cluster = LocalCluster::start_tls(config, 1, 1, Some(pki.client()))
        .await
        .unwrap();
    assert!(cluster.url().starts_with("https://localhost:"));
    assert!(cluster.wait_for_workers(1, WAIT).await);

    let security = Security {
        token: Some(secret("t")),
        tls: Some(pki.client()),
        ca_file: None,
    };
    let mut client = Client::connect_with(&cluster.url(), &security)
        .await
        .unwrap();
    solves(&mut client, 3, 40).await;
    // The certificate names 127.0.0.1 too.
    let by_ip = format!("https://127.0.0.1:{}", cluster.addr.port());
    let mut client = Client::connect_with(&by_ip, &security).await.unwrap();
    solves(&mut client, 4, 5).await;

    // Plaintext to a TLS port: the connection fails, with a hint.
    let plain = format!("http://{}", cluster.addr);
    let failure = match Client::connect_with(&plain, &with_token("t")).await {
        Err(e) => e,
        Ok(mut c) => c.solve_one("x", &mixed(5, 1, 0).0[0].1).await.unwrap_err(),
    };
    let text = failure.to_string();
    assert!(text.contains("use an https:// URL"), "{text}");

    // https without a CA trusts the public authorities only: the private
    // CA's certificate is refused at the handshake, with a hint.
    let e = Client::connect_with(&cluster.url(), &with_token("t"))
        .await
        .unwrap_err();
    assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
    assert!(e.to_string().contains("pass that CA with --ca FILE"), "{e}");

    // A CA that did not sign the certificate, or the wrong name: refused.
    let other = Pki::new();
    for security in [
        Security {
            tls: Some(other.client()),
            ..with_token("t")
        },
        Security {
            tls: Some(pki.client().domain_name("elsewhere.example")),
            ..with_token("t")
        },
    ] {
        let e = Client::connect_with(&cluster.url(), &security)
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
        assert!(e.to_string().contains("cannot connect"), "{e}");
    }
    cluster.shutdown().await;
}

fn puzzle(id: &str, start: &[&str], target: &[&str]) -> v1::Puzzle {
    v1::Puzzle {
        id: id.into(),
        start: start.iter().map(|s| s.to_string()).collect(),
        target: target.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_puzzles_are_named_and_the_rest_solved() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let mut raw = SolverClient::connect(cluster.url()).await.unwrap();
    let ok = ["RB", "BG"];
    let long_id = "L".repeat(MAX_ID_BYTES + 1);
    let huge_row = "R".repeat(100_000);
    let many_rows: Vec<&str> = vec!["RB"; 10_000];
    let cases = vec![
        (puzzle("a", &ok, &["BR", "GB"]), None),
        (puzzle("a", &ok, &ok), Some("id")),
        (puzzle("", &ok, &ok), None),
        (puzzle("", &ok, &ok), None),
        (puzzle(&long_id, &ok, &ok), Some("id")),
        (puzzle("size", &["RBR", "BGR"], &ok), Some("target")),
        (puzzle("letter", &["RB", "Bx"], &ok), Some("start")),
        (puzzle("ragged", &["RBR", "BG"], &ok), Some("start")),
        (puzzle("tall", &ok, &many_rows), Some("target")),
        (puzzle("wide", &[&huge_row, &huge_row], &ok), Some("start")),
        (puzzle("empty", &[], &ok), Some("start")),
        (puzzle("b", &ok, &["GB", "RB"]), None),
    ];
    let request = v1::SolveBatchRequest {
        priority: 0,
        puzzles: cases.iter().map(|(p, _)| p.clone()).collect(),
        ordered: true,
    };
    let results: Vec<_> = raw
        .solve_batch(request)
        .await
        .unwrap()
        .into_inner()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(results.len(), cases.len());
    for (i, (result, (sent, field))) in results.into_iter().zip(&cases).enumerate() {
        let result = result.unwrap();
        assert_eq!(result.index, i as u64);
        match (&result.outcome, field) {
            (Some(puzzle_result::Outcome::Solved(_)), None) => assert_eq!(result.id, sent.id),
            (Some(puzzle_result::Outcome::Error(e)), Some(field)) => {
                assert_eq!(e.kind, v1::puzzle_error::Kind::Invalid as i32);
                assert_eq!(e.field, *field, "case {i}: {}", e.message);
                let quoted = if sent.id.len() > MAX_ID_BYTES {
                    &sent.id[..32]
                } else {
                    &sent.id
                };
                assert!(e.message.contains(quoted), "case {i}: {}", e.message);
                assert!(e.message.len() < 400, "case {i}: {}", e.message);
            }
            other => panic!("case {i}: unexpected {other:?}"),
        }
    }

    // A whole-request problem is a status.
    let status = raw
        .solve_batch(v1::SolveBatchRequest {
            priority: 0,
            puzzles: vec![],
            ordered: false,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("empty"), "{status:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_over_the_size_limit_are_refused() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let mut raw = SolverClient::connect(cluster.url())
        .await
        .unwrap()
        .max_encoding_message_size(4 * MAX_MESSAGE_BYTES);
    let id = "i".repeat(MAX_ID_BYTES);
    let big = v1::SolveBatchRequest {
        priority: 0,
        puzzles: (0..MAX_MESSAGE_BYTES / 200)
            .map(|i| puzzle(&format!("{i}{id}"), &["RB", "BG"], &["RB", "BG"]))
            .collect(),
        ordered: false,
    };
    let status = raw.solve_batch(big).await.unwrap_err();
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("limit"), "{status:?}");
    // The connection still serves the next request.
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    solves(&mut client, 6, 5).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_limit_names_itself_and_its_flag() {
    let config = Config {
        scheduling: SchedulingConfig {
            max_pending: 50,
            max_batch: 30,
            ..quick().scheduling
        },
        access: AccessConfig {
            max_requests_per_client: 2,
            ..quick().access
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    // A worker that holds everything it gets keeps batches in flight.
    let mut fake = FakeWorker::join(&cluster.url(), 1).await.unwrap();
    let mut client = Client::connect(&cluster.url()).await.unwrap();

    let Err(ClientError::Status(status)) = client.solve_stream(&four_by_four(1, 31), false).await
    else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.message().contains("--max-batch"), "{status:?}");

    let first = client
        .solve_stream(&four_by_four(2, 30), false)
        .await
        .unwrap();
    fake.take(1).await;
    let Err(ClientError::Status(status)) = client.solve_stream(&four_by_four(3, 25), false).await
    else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("--max-pending") && status.message().contains("at most 50"),
        "{status:?}"
    );

    let second = client
        .solve_stream(&four_by_four(4, 5), false)
        .await
        .unwrap();
    let Err(ClientError::Status(status)) = client.solve_stream(&four_by_four(5, 1), false).await
    else {
        panic!("expected a status")
    };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("--max-batches-per-client")
            && status.message().contains("127.0.0.1"),
        "{status:?}"
    );
    // A single puzzle counts too.
    let e = client
        .solve_one("one", &four_by_four(6, 1)[0].1)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--max-batches-per-client"), "{e}");

    // When a batch ends (here: its client drops the stream), its place is free.
    drop(first);
    let deadline = tokio::time::Instant::now() + WAIT;
    let third = loop {
        match client.solve_stream(&four_by_four(7, 1), false).await {
            Ok(s) => break s,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    drop((second, third));
    cluster.shutdown().await;
}

/// Sends encoded bytes as they are (a request no generated client would
/// build) and reads results as the generated messages.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = v1::PuzzleResult;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = v1::PuzzleResult;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<v1::PuzzleResult>, tonic::Status> {
        use colball_proto::prost::Message;
        v1::PuzzleResult::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use colball_proto::prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

/// The most puzzles a 16 MiB message holds are empty ones, two bytes each:
/// a coordinator process refuses such a request as over `--max-batch`,
/// naming the count sent, without holding all of them (decoded, they would
/// take 1.5 GB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_of_millions_of_empty_puzzles_is_refused_within_bounded_memory() {
    use colball_testkit::procs;
    const EMPTY: usize = 8_000_000;
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_colball-server"));
    let c = procs::coordinator(bin, "127.0.0.1:0", &[]);
    let (before, _) = c.proc.memory_kib().unwrap();
    // Field 1 (a puzzle), length 0, eight million times.
    let bytes = [0x0a_u8, 0x00].repeat(EMPTY);
    assert!(bytes.len() < MAX_MESSAGE_BYTES);
    let channel = tonic::transport::Endpoint::from_shared(c.url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(MAX_MESSAGE_BYTES);
    grpc.ready().await.unwrap();
    let status = grpc
        .server_streaming(
            tonic::Request::new(bytes),
            tonic::codegen::http::uri::PathAndQuery::from_static("/colball.v1.Solver/SolveBatch"),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status
            .message()
            .contains(&format!("batch of {EMPTY} puzzles"))
            && status.message().contains("--max-batch"),
        "{status:?}"
    );
    let (peak, _) = c.proc.memory_kib().unwrap();
    println!("coordinator peak RSS grew by {} KiB", peak - before);
    // 1,000,000 kept puzzles of 80 bytes, their vector sized at once from
    // the first puzzle, and the 16 MB message (about 360 MiB measured when
    // they took 176 bytes and the vector doubled). All eight million kept
    // would take over 2 GiB.
    assert!(peak - before < 700 * 1024, "{} KiB more", peak - before);
}
