//! The worker's cost beyond the search (not a timed test):
//! `cargo bench -p colball-server --bench worker`.
//!
//! A real worker process (one solver thread) and, in this process, a
//! stand-in coordinator that speaks the worker protocol over loopback: it
//! keeps `HELD` (default 2,048) tasks assigned, in chunks of up to 1,024,
//! and counts the answers. For each board size (`SIZES`, default 2x2, 2x3,
//! 3x3) it sends `PUZZLES` (default 200,000) uniformly random puzzles and
//! prints the worker's CPU per puzzle (user + system, from
//! `/proc/PID/stat`) beside the CPU the same engine spends solving the same
//! puzzles in this process on one thread: the difference is what the
//! worker's path costs (the session, its messages, the hand-off to the
//! solver thread and back).
//!
//! `COLBALL_SERVER=PATH` measures another build of the worker.
//!
//! The search's figure is an engine configured as the worker's by default
//! (`auto`, its solution cache on), warmed by the same first puzzles, so
//! the difference holds no search.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is a failed run

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use colball_proto::v1::workers_server::{Workers, WorkersServer};
use colball_proto::v1::{self, coordinator_message, task_result, worker_message};
use colball_proto::work::task_to_wire;
use colball_proto::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use colball_solver::{Engine, EngineConfig, Puzzle, Size, Solver};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_stream::Stream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status, Streaming};

mod common;
use colball_testkit::procs;

use common::{batch, cpu_seconds, env, server_bin, thread_cpu_seconds};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// Tasks in one assignment, as the coordinator's largest chunk.
const CHUNK: usize = 1024;

type Out = Pin<Box<dyn Stream<Item = Result<v1::CoordinatorMessage, Status>> + Send>>;

/// One run's puzzles, and where to say that every answer came.
struct Run {
    puzzles: Vec<Puzzle>,
    done: oneshot::Sender<usize>,
}

/// The stand-in coordinator: serves one session at a time, feeding it the
/// run waiting in `next`.
struct Feeder {
    next: Arc<Mutex<mpsc::Receiver<Run>>>,
    held: usize,
}

#[tonic::async_trait]
impl Workers for Feeder {
    type SessionStream = Out;

    async fn session(
        &self,
        request: Request<Streaming<v1::WorkerMessage>>,
    ) -> Result<Response<Out>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound.message().await?;
        let Some(v1::WorkerMessage {
            kind: Some(worker_message::Kind::Register(register)),
        }) = first
        else {
            return Err(Status::invalid_argument("register first"));
        };
        assert_eq!(register.protocol_version, PROTOCOL_VERSION);
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(Ok(message(coordinator_message::Kind::Registered(
            v1::Registered {
                worker_id: format!("{}#1", register.name),
                heartbeat_interval_ms: 1000,
                max_tasks: self.held as u32,
            },
        ))))
        .unwrap();
        let (next, held) = (self.next.clone(), self.held);
        tokio::spawn(async move {
            let mut runs = next.lock().await;
            while let Some(run) = runs.recv().await {
                let answered = feed(&run.puzzles, held, &tx, &mut inbound).await;
                let _ = run.done.send(answered);
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::UnboundedReceiverStream::new(rx),
        )))
    }
}

fn message(kind: coordinator_message::Kind) -> v1::CoordinatorMessage {
    v1::CoordinatorMessage { kind: Some(kind) }
}

/// Keeps `held` tasks assigned until every puzzle is answered; how many
/// were solved.
async fn feed(
    puzzles: &[Puzzle],
    held: usize,
    tx: &mpsc::UnboundedSender<Result<v1::CoordinatorMessage, Status>>,
    inbound: &mut Streaming<v1::WorkerMessage>,
) -> usize {
    let (mut sent, mut answered) = (0usize, 0usize);
    while answered < puzzles.len() {
        while sent < puzzles.len() && sent - answered + CHUNK.min(puzzles.len() - sent) <= held {
            let end = (sent + CHUNK).min(puzzles.len());
            let tasks = (sent..end)
                .map(|i| task_to_wire(i as u64, &puzzles[i], 1))
                .collect();
            tx.send(Ok(message(coordinator_message::Kind::Assign(v1::Assign {
                tasks,
                traceparents: Vec::new(),
            }))))
            .unwrap();
            sent = end;
        }
        let Some(m) = inbound.message().await.unwrap() else {
            break;
        };
        if let Some(worker_message::Kind::Results(r)) = m.kind {
            for result in &r.results {
                assert!(
                    matches!(result.outcome, Some(task_result::Outcome::Solved(_))),
                    "task {} not solved",
                    result.task_id
                );
            }
            answered += r.results.len();
        }
    }
    answered
}

/// CPU seconds this thread spends solving `puzzles`, after `warm`, with a
/// fresh engine configured as the worker's (one thread).
fn search_seconds(warm: &[Puzzle], puzzles: &[Puzzle]) -> f64 {
    let engine = Engine::new(EngineConfig {
        table_threads: 1,
        ..EngineConfig::default()
    });
    let mut solver = Solver::new(engine);
    for p in warm {
        std::hint::black_box(solver.solve(p));
    }
    let began = thread_cpu_seconds();
    for p in puzzles {
        std::hint::black_box(solver.solve(p));
    }
    thread_cpu_seconds() - began
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let count = env("PUZZLES", 200_000);
    let held = env("HELD", 2048);
    let sizes: Vec<Size> = std::env::var("SIZES")
        .unwrap_or_else(|_| "2x2,2x3,3x3".into())
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (runs, next) = mpsc::channel(1);
    let feeder = Feeder {
        next: Arc::new(Mutex::new(next)),
        held,
    };
    tokio::spawn(
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(
                WorkersServer::new(feeder)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let worker = procs::worker(&server_bin(BIN), &url, "bench", procs::Stderr::Quiet, &[]);
    println!(
        "colball worker bench: one worker process (1 solver thread) fed by a stand-in coordinator on loopback, {held} tasks held, {count} puzzles a size\n"
    );
    println!("| size | worker CPU per puzzle | search alone | worker's path |");
    println!("|---|---:|---:|---:|");
    for (seed, size) in sizes.into_iter().enumerate() {
        let puzzles: Vec<Puzzle> = batch(seed as u64 + 1, size, count)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        // Warm up: the worker's first tasks build its tables.
        let warm = &puzzles[..count.min(5_000)];
        for part in [warm, &puzzles[..]] {
            let (done, answered) = oneshot::channel();
            let cpu = cpu_seconds(worker.pid());
            let began = Instant::now();
            runs.send(Run {
                puzzles: part.to_vec(),
                done,
            })
            .await
            .unwrap();
            assert_eq!(answered.await.unwrap(), part.len());
            if part.len() < count {
                continue;
            }
            let (cpu, wall) = (cpu_seconds(worker.pid()) - cpu, began.elapsed());
            let search = tokio::task::block_in_place(|| search_seconds(warm, &puzzles));
            let per = |s: f64| 1e6 * s / count as f64;
            println!(
                "| {size} | {:.2} us | {:.2} us | {:.2} us | ({:.0} puzzles/s)",
                per(cpu),
                per(search),
                per(cpu - search),
                count as f64 / wall.as_secs_f64()
            );
        }
    }
    drop(worker);
}
