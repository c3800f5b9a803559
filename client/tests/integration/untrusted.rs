//! The client does not trust the cluster either: `colball solve --connect`
//! replays every sequence it receives, and a coordinator (here a fake one)
//! that sends an answer that does not solve its puzzle gets exit status 1
//! naming the puzzle, with nothing wrong printed.

use std::pin::Pin;
use std::sync::Mutex;

use colball_proto::puzzle_from_wire;
use colball_proto::v1::jobs_server::{Jobs, JobsServer};
use colball_proto::v1::{self, puzzle_result, submit_request};
use colball_solver::BidirSearch;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::common::run as colball;

/// A job service that answers every puzzle of its one job truly except the
/// one at `bad`, for which it sends `(moves, solution)`.
struct LyingCoordinator {
    bad: u64,
    lie: (i64, &'static str),
    /// The job's puzzles, once submitted.
    puzzles: Mutex<Vec<v1::Puzzle>>,
}

type Results = Pin<Box<dyn Stream<Item = Result<v1::PuzzleResult, Status>> + Send>>;

#[tonic::async_trait]
impl Jobs for LyingCoordinator {
    async fn submit(
        &self,
        request: Request<Streaming<v1::SubmitRequest>>,
    ) -> Result<Response<v1::JobAccepted>, Status> {
        let mut inbound = request.into_inner();
        let mut puzzles = Vec::new();
        while let Some(message) = inbound.next().await {
            if let Some(submit_request::Kind::Puzzles(chunk)) = message?.kind {
                puzzles.extend(chunk.puzzles);
            }
        }
        let n = puzzles.len() as u64;
        *self.puzzles.lock().unwrap() = puzzles;
        Ok(Response::new(v1::JobAccepted {
            id: "j1-fake".into(),
            puzzles: n,
            durable: true,
        }))
    }

    async fn get(&self, _: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Err(Status::not_found("fake"))
    }

    async fn list(&self, _: Request<v1::ListJobsRequest>) -> Result<Response<v1::JobList>, Status> {
        Ok(Response::new(v1::JobList::default()))
    }

    async fn cancel(&self, _: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        Ok(Response::new(v1::Job::default()))
    }

    async fn delete(
        &self,
        _: Request<v1::JobRef>,
    ) -> Result<Response<v1::DeleteJobResponse>, Status> {
        Ok(Response::new(v1::DeleteJobResponse {}))
    }

    type ResultsStream = Results;

    async fn results(
        &self,
        request: Request<v1::ResultsRequest>,
    ) -> Result<Response<Results>, Status> {
        let from = request.into_inner().from_index as usize;
        let mut search = BidirSearch::new();
        let results: Vec<Result<v1::PuzzleResult, Status>> = self
            .puzzles
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .skip(from)
            .map(|(i, wire)| {
                let s = search.solve(&puzzle_from_wire(wire).unwrap());
                let (moves, solution) = if i as u64 == self.bad {
                    (self.lie.0, self.lie.1.to_string())
                } else {
                    (s.answer(), s.notation())
                };
                Ok(v1::PuzzleResult {
                    id: wire.id.clone(),
                    index: i as u64,
                    outcome: Some(puzzle_result::Outcome::Solved(v1::Solved {
                        moves,
                        solution,
                        strategy: "bidir".into(),
                        ..Default::default()
                    })),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(results))))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_do_not_solve_their_puzzle_are_refused() {
    // Two 3x3 puzzles, one move apart each: "r22" solves both.
    let input = b"3 3\nRRR\nBBB\nGGG\nBRR\nBRB\nGGG\n3 3\nRRR\nBBB\nGGG\nBRR\nBRB\nGGG\n0\n";
    for (lie, why) in [
        ((1, "c33"), "does not turn the start into the target"),
        ((2, "r22"), "disagrees with its sequence"),
        ((-1, ""), "says it is not (-1)"),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JobsServer::new(LyingCoordinator {
                    bad: 1,
                    lie,
                    puzzles: Mutex::default(),
                }))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let out = tokio::task::spawn_blocking(move || {
            colball(&["solve", "--moves", "--connect", &url], None, input)
        })
        .await
        .unwrap();
        server.abort();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{lie:?}: {stderr}");
        assert!(stderr.contains("puzzle \"2\""), "{stderr}");
        assert!(stderr.contains(why), "{lie:?}: {stderr}");
        // The first (true) answer was printed; the lie was not.
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1 r22\n", "{lie:?}");
    }
}
