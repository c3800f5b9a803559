//! The Grade RPC: contestants' answers judged against the optimal ones.
//!
//! The puzzles go through [admission](crate::coordinator::admission), like
//! a `SolveBatch`:
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
use std::sync::Arc;

use colball_proto::grade::{answer_from_wire, graded_to_wire};
use colball_proto::{egress, v1};
use colball_solver::Puzzle;
use colball_solver::grade::{GivenAnswer, Graded, grade_case};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use colball_core::Priority;

use super::{client_of, grpc_timeout, priority};
use crate::access::Access;
use crate::coordinator::Scheduler;
use crate::coordinator::admission::{self, Admitted, Next, Requester, Terms};

/// The stream of a Grade call.
pub(super) type VerdictStream = Pin<Box<dyn Stream<Item = Result<v1::GradeResult, Status>> + Send>>;

/// What the verdict of one case needs besides the optimum.
struct CaseInfo {
    id: String,
    puzzle: Option<Puzzle>,
    answer: Option<GivenAnswer>,
}

/// Serves one Grade call (see the module documentation).
pub(super) async fn grade(
    scheduler: &Arc<Scheduler>,
    access: &Access,
    request: Request<v1::GradeRequest>,
) -> Result<Response<VerdictStream>, Status> {
    let deadline = grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
    let client = client_of(&request);
    let request = request.into_inner();
    let caller = Requester {
        client,
        priority: priority(request.priority, Priority::Normal)?,
    };
    let cases = request.cases;
    let mut puzzles = Vec::with_capacity(cases.len());
    let mut answers = Vec::with_capacity(cases.len());
    for case in cases {
        // A case without a puzzle reads as one with no rows: it becomes an
        // error result naming the missing field.
        puzzles.push(case.puzzle.unwrap_or_default());
        answers.push(case.answer.as_ref().map(answer_from_wire));
    }
    // Each puzzle is read once, for the admission and the judge both.
    let batch = admission::read(scheduler, puzzles, 0)?;
    let infos = batch
        .iter()
        .zip(answers)
        .map(|(parsed, answer)| CaseInfo {
            id: parsed.id.to_string(),
            puzzle: parsed.puzzle.as_ref().ok().copied(),
            answer,
        })
        .collect();
    let span = tracing::info_span!("request", id = tracing::field::Empty, rpc = "grade");
    let terms = Terms {
        rpc: Some("grade"),
        ordered: false,
        deadline,
        slot: Some(access.slot(&caller.client)?),
        span: span.clone(),
    };
    let admitted = scheduler.admit(batch, &caller, terms).await?;
    tracing::debug!(cases = admitted.total(), "grading admitted");
    let (tx, rx) = mpsc::channel(256);
    scheduler
        .lifecycle()
        .spawn(span, judge(admitted, infos, tx));
    Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
}

/// Judges each case as its optimum arrives and streams the verdict. Ends
/// (and so ends the request, cancelling its remaining work) when every
/// case is decided or the client goes away.
async fn judge(
    mut admitted: Admitted,
    infos: Vec<CaseInfo>,
    tx: mpsc::Sender<Result<v1::GradeResult, Status>>,
) {
    let total = infos.len();
    let mut decided = vec![false; total];
    let mut sent = 0usize;
    let failure = loop {
        let next = tokio::select! {
            next = admitted.next() => next,
            () = tx.closed() => {
                tracing::debug!("grading client went away; cancelling its batch");
                return;
            }
        };
        let results = match next {
            Next::Results(results) => results,
            Next::Failed(e) => break Some(e.to_string()),
            Next::Done => break None,
        };
        for result in results {
            let index = result.index as usize;
            let Some(info) = infos.get(index).filter(|_| !decided[index]) else {
                tracing::warn!(index, "grading: unexpected or repeated result; ignored");
                continue;
            };
            decided[index] = true;
            sent += 1;
            let graded = verdict(info, result.outcome);
            if tx
                .send(Ok(graded_to_wire(result.index, result.id.into(), &graded)))
                .await
                .is_err()
            {
                return;
            }
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
}

/// The verdict on one case, given the cluster's outcome for its puzzle.
fn verdict(info: &CaseInfo, outcome: Option<egress::Outcome>) -> Graded {
    match (outcome, &info.puzzle) {
        (Some(egress::Outcome::Solved(s)), Some(puzzle)) => {
            grade_case(puzzle, s.moves, info.answer.as_ref())
        }
        (Some(egress::Outcome::Error(e)), _) => Graded::error(info.answer.as_ref(), e.message),
        (Some(egress::Outcome::Solved(_)), None) => Graded::error(
            info.answer.as_ref(),
            "the puzzle is malformed but was answered",
        ),
        (None, _) => Graded::error(info.answer.as_ref(), "the cluster sent no outcome"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::admission::RequestStream;
    use crate::coordinator::{Scheduler, SchedulingConfig};
    use crate::error::ServerError;
    use crate::lifecycle::Lifecycle;
    use colball_proto::grade::verdict_from_wire;
    use colball_solver::grade::Verdict;
    use tokio_util::sync::CancellationToken;

    fn info(id: &str, answer: Option<GivenAnswer>) -> CaseInfo {
        let wire = v1::Puzzle {
            id: id.into(),
            start: vec!["RB".into(), "GR".into()],
            target: vec!["RB".into(), "GR".into()],
        };
        CaseInfo {
            id: id.into(),
            puzzle: colball_proto::puzzle_from_wire(&wire).ok(),
            answer,
        }
    }

    fn solved(index: u64, id: &str, moves: i64) -> egress::PuzzleResult {
        egress::PuzzleResult {
            id: id.into(),
            index,
            outcome: Some(egress::Outcome::Solved(egress::Solved {
                moves,
                ..Default::default()
            })),
        }
    }

    #[tokio::test]
    async fn a_failed_batch_ends_with_error_verdicts_for_the_undecided_cases() {
        let scheduler = Scheduler::new(
            SchedulingConfig::default(),
            Lifecycle::new(CancellationToken::new()),
        );
        let (batch_tx, batch_rx) = mpsc::unbounded_channel();
        let stream = RequestStream {
            scheduler: scheduler.clone(),
            id: 1,
            rx: batch_rx,
            received: 1,
            sent: 0,
            acked: (0, 0),
        };
        let admitted = Admitted::for_test(stream, vec![solved(0, "a", 0)], 4);
        let infos = vec![
            info("a", Some(GivenAnswer::count(0))),
            info("b", Some(GivenAnswer::count(3))),
            info("c", Some(GivenAnswer::count(2))),
            info("d", None),
        ];
        batch_tx.send(Ok(solved(1, "b", 0))).unwrap();
        batch_tx
            .send(Ok(egress::PuzzleResult::failed(
                "c".into(),
                2,
                "worker gave up".into(),
            )))
            .unwrap();
        let no_workers = colball_core::NoWorkers {
            waited: std::time::Duration::from_secs(10),
            ever: true,
        };
        batch_tx
            .send(Err(ServerError::NoWorkers(no_workers)))
            .unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        judge(admitted, infos, tx).await;
        let mut results = Vec::new();
        while let Some(r) = rx.recv().await {
            results.push(r.unwrap());
        }
        let got: Vec<(u64, &str, Option<Verdict>)> = results
            .iter()
            .map(|r| (r.index, r.id.as_str(), verdict_from_wire(r.verdict)))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, "a", Some(Verdict::Correct)),
                (1, "b", Some(Verdict::WrongAnswer)),
                (2, "c", Some(Verdict::Error)),
                (3, "d", Some(Verdict::Error)),
            ]
        );
        assert_eq!(results[2].detail, "worker gave up");
        assert_eq!(results[2].given, Some(2));
        assert!(
            results[3].detail.contains(&no_workers.to_string()),
            "{}",
            results[3].detail
        );
        assert_eq!(results[3].expected, None);
    }
}
