//! The Grade RPC: contestants' answers judged against the optimal ones.
//!
//! The puzzles go through [`SolverService::admit`], like a `SolveBatch`:
//! answered from the result cache where possible, otherwise solved by the
//! workers (and then cached), so grading many contestants on one puzzle set
//! solves each puzzle once. Each case is judged with
//! [`colball_solver::grade::grade_case`] as soon as its optimum is known,
//! and its verdict streamed at once (not in input order).
//!
//! A puzzle that is malformed, or that the cluster gives up on, gets a
//! `VERDICT_ERROR` result naming why. When the whole batch fails (no worker
//! left, the deadline passed, shutdown), every case not yet decided gets an
//! error verdict with that reason, and the stream ends normally.

use std::pin::Pin;

use colball_proto::grade::{answer_from_wire, graded_to_wire};
use colball_proto::puzzle_from_wire;
use colball_proto::v1::{self, puzzle_result};
use colball_solver::Puzzle;
use colball_solver::grade::{GivenAnswer, Graded, grade_case};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{Admitted, SolverService, grpc_timeout};
use crate::error::ServerError;

/// The stream of a Grade call.
pub(super) type GradeStream = Pin<Box<dyn Stream<Item = Result<v1::GradeResult, Status>> + Send>>;

/// What the verdict of one case needs besides the optimum.
struct CaseInfo {
    id: String,
    puzzle: Option<Puzzle>,
    answer: Option<GivenAnswer>,
}

/// Serves one Grade call (see the module documentation).
pub(super) async fn grade(
    service: &SolverService,
    request: Request<v1::GradeRequest>,
) -> Result<Response<GradeStream>, Status> {
    let deadline = grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
    let cases = request.into_inner().cases;
    let mut puzzles = Vec::with_capacity(cases.len());
    let mut infos = Vec::with_capacity(cases.len());
    for case in cases {
        // A case without a puzzle reads as one with no rows: admit turns it
        // into an error result naming the missing field.
        let wire = case.puzzle.unwrap_or_default();
        infos.push(CaseInfo {
            id: wire.id.clone(),
            puzzle: puzzle_from_wire(&wire).ok(),
            answer: case.answer.as_ref().map(answer_from_wire),
        });
        puzzles.push(wire);
    }
    let admitted = service.admit(puzzles).await?;
    tracing::debug!(
        cases = admitted.total,
        ready = admitted.ready.len(),
        "grading admitted"
    );
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(judge(admitted, infos, deadline, tx));
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// Judges each case as its optimum arrives and streams the verdict. Ends
/// (cancelling the remaining work through the guard) when every case is
/// decided or the client goes away.
async fn judge(
    admitted: Admitted,
    infos: Vec<CaseInfo>,
    deadline: Option<tokio::time::Instant>,
    tx: mpsc::Sender<Result<v1::GradeResult, Status>>,
) {
    let Admitted {
        ready,
        mut rx,
        total,
        guard,
    } = admitted;
    let mut decided = vec![false; total];
    let mut sent = 0usize;
    let expire = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expire);
    let mut ready = ready.into_iter();
    let failure = loop {
        if sent == total {
            break None;
        }
        let result = match ready.next() {
            Some(result) => result,
            None => tokio::select! {
                event = rx.recv() => match event {
                    Some(Ok(result)) => result,
                    Some(Err(status)) => break Some(status.message().to_string()),
                    None => break Some(ServerError::ShuttingDown.to_string()),
                },
                () = tx.closed() => {
                    tracing::debug!("grading client went away; cancelling its batch");
                    return;
                }
                () = &mut expire => break Some(ServerError::DeadlineExceeded.to_string()),
            },
        };
        let index = result.index as usize;
        let Some(info) = infos.get(index).filter(|_| !decided[index]) else {
            tracing::warn!(index, "grading: unexpected or repeated result; ignored");
            continue;
        };
        decided[index] = true;
        sent += 1;
        let graded = verdict(info, result.outcome);
        if tx
            .send(Ok(graded_to_wire(result.index, result.id, &graded)))
            .await
            .is_err()
        {
            return;
        }
    };
    if let Some(reason) = failure {
        tracing::warn!(%reason, undecided = total - sent, "grading batch failed");
        for (index, info) in infos.iter().enumerate() {
            if decided[index] {
                continue;
            }
            let graded = Graded::error(
                info.answer.as_ref(),
                format!("the cluster could not solve this puzzle: {reason}"),
            );
            if tx
                .send(Ok(graded_to_wire(index as u64, info.id.clone(), &graded)))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    drop(guard);
}

/// The verdict on one case, given the cluster's outcome for its puzzle.
fn verdict(info: &CaseInfo, outcome: Option<puzzle_result::Outcome>) -> Graded {
    match (outcome, &info.puzzle) {
        (Some(puzzle_result::Outcome::Solved(s)), Some(puzzle)) => {
            grade_case(puzzle, s.moves, info.answer.as_ref())
        }
        (Some(puzzle_result::Outcome::Error(e)), _) => {
            Graded::error(info.answer.as_ref(), e.message)
        }
        (Some(puzzle_result::Outcome::Solved(_)), None) => Graded::error(
            info.answer.as_ref(),
            "the puzzle is malformed but was answered",
        ),
        (None, _) => Graded::error(info.answer.as_ref(), "the cluster sent no outcome"),
    }
}
