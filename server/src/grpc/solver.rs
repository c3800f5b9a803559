//! `colball.v1.Solver`: `Solve`, `SolveBatch` and `Watch` (and `Grade`,
//! in [`super::grade`]).

use std::pin::Pin;
use std::sync::Arc;

use colball_core::Priority;
use colball_proto::ingest::{self, solver_server::Solver};
use colball_proto::{egress, v1};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{ResultStream, client_of, grade, grpc_timeout, priority};
use crate::access::Access;
use crate::coordinator::Scheduler;
use crate::coordinator::admission::{self, Admitted, Next, Parsed, Requester, Terms};
use crate::coordinator::events;
use crate::error::ServerError;

type EventStream = Pin<Box<dyn Stream<Item = Result<v1::ClusterEvent, Status>> + Send>>;
/// The client-facing service.
#[derive(Debug)]
pub(super) struct SolverService {
    pub(super) scheduler: Arc<Scheduler>,
    pub(super) access: Arc<Access>,
}
#[tonic::async_trait]
impl Solver for SolverService {
    async fn solve(
        &self,
        request: Request<v1::SolveRequest>,
    ) -> Result<Response<egress::PuzzleResult>, Status> {
        // tonic drops this future when the deadline passes; dropping the
        // stream then ends the request.
        let client = client_of(&request);
        let request = request.into_inner();
        let caller = Requester {
            client,
            priority: priority(request.priority, Priority::Interactive)?,
        };
        let puzzle = request.puzzle.ok_or(ServerError::MissingPuzzle)?;
        let batch = admission::read(&self.scheduler, vec![puzzle], 0)?;
        if let Some(Parsed { puzzle: Err(e), .. }) = batch.first() {
            return Err(ServerError::from(colball_proto::InvalidPuzzle::clone(e)).into());
        }
        let span = tracing::info_span!("request", id = tracing::field::Empty, rpc = "solve");
        let terms = Terms {
            rpc: Some("solve"),
            ordered: false,
            deadline: None,
            slot: Some(self.access.slot(&caller.client)?),
            span: span.clone(),
        };
        let mut admitted = self.scheduler.admit(batch, &caller, terms).await?;
        match admitted.next().await {
            Next::Results(mut results) => match results.pop() {
                Some(result) => Ok(Response::new(result)),
                None => Err(ServerError::ShuttingDown.into()),
            },
            Next::Failed(e) => Err(e.into()),
            Next::Done => Err(ServerError::ShuttingDown.into()),
        }
    }

    type GradeStream = grade::VerdictStream;

    async fn grade(
        &self,
        request: Request<v1::GradeRequest>,
    ) -> Result<Response<grade::VerdictStream>, Status> {
        grade::grade(&self.scheduler, &self.access, request).await
    }

    type SolveBatchStream = ResultStream;

    async fn solve_batch(
        &self,
        request: Request<ingest::SolveBatchRequest>,
    ) -> Result<Response<ResultStream>, Status> {
        let deadline = grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
        let client = client_of(&request);
        let request = request.into_inner();
        let caller = Requester {
            client,
            priority: priority(request.priority, Priority::Normal)?,
        };
        let batch = admission::read(&self.scheduler, request.puzzles, request.beyond)?;
        let span = tracing::info_span!("request", id = tracing::field::Empty, rpc = "solve_batch");
        let terms = Terms {
            rpc: Some("solve_batch"),
            ordered: request.ordered,
            deadline,
            slot: Some(self.access.slot(&caller.client)?),
            span: span.clone(),
        };
        let admitted = self.scheduler.admit(batch, &caller, terms).await?;
        tracing::debug!(puzzles = admitted.total(), "batch admitted");
        // Results travel in groups (what arrived together); the response
        // stream hands them to tonic one by one, which writes what is
        // ready together.
        let (tx, rx) = mpsc::channel(16);
        self.scheduler
            .lifecycle()
            .spawn(span, forward(admitted, tx));
        Ok(Response::new(Box::pin(futures_util::StreamExt::flat_map(
            ReceiverStream::new(rx),
            tokio_stream::iter,
        ))))
    }

    type WatchStream = EventStream;

    async fn watch(
        &self,
        request: Request<v1::WatchRequest>,
    ) -> Result<Response<EventStream>, Status> {
        let from = request.into_inner().from_sequence;
        let subscription = self
            .scheduler
            .events()
            .subscribe(from)
            .map_err(|gone| Status::out_of_range(gone.to_string()))?;
        tracing::debug!(?from, "watcher joined");
        let (tx, rx) = mpsc::channel(256);
        self.scheduler.lifecycle().spawn(
            tracing::info_span!("watch"),
            follow(self.scheduler.clone(), subscription, tx),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Streams cluster events to one watcher: its backlog, then live events.
/// A watcher too slow for the live channel catches up from the retained
/// events; if even those have moved past it, its stream ends with
/// OUT_OF_RANGE saying where it could resume.
async fn follow(
    scheduler: Arc<Scheduler>,
    subscription: events::Subscription,
    tx: mpsc::Sender<Result<v1::ClusterEvent, Status>>,
) {
    let events::Subscription {
        mut after,
        mut backlog,
        mut live,
    } = subscription;
    loop {
        for event in backlog.drain(..) {
            if event.sequence <= after {
                continue;
            }
            after = event.sequence;
            if tx.send(Ok(event.as_ref().clone())).await.is_err() {
                return;
            }
        }
        let received = tokio::select! {
            r = live.recv() => r,
            () = tx.closed() => return,
            () = scheduler.lifecycle().cancelled() => {
                let _ = tx.send(Err(ServerError::ShuttingDown.into())).await;
                return;
            }
        };
        match received {
            Ok(event) => backlog.push(event),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                match scheduler.events().since(after + 1) {
                    Ok(missed) => backlog = missed,
                    Err(gone) => {
                        let message = format!("this watcher fell behind: {gone}");
                        let _ = tx.send(Err(Status::out_of_range(message))).await;
                        return;
                    }
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Streams a batch's results to its client (in input order if asked).
/// Ends (and so ends the request, cancelling its remaining work) when every
/// result is sent, the request fails, or the client goes away.
async fn forward(
    mut admitted: Admitted,
    tx: mpsc::Sender<Vec<Result<egress::PuzzleResult, Status>>>,
) {
    loop {
        let next = tokio::select! {
            next = admitted.next() => next,
            () = tx.closed() => {
                tracing::debug!("client went away; cancelling its batch");
                return;
            }
        };
        let (out, last) = match next {
            Next::Results(results) => (results.into_iter().map(Ok).collect(), false),
            Next::Failed(e) => (vec![Err(e.into())], true),
            Next::Done => return,
        };
        if tx.send(out).await.is_err() {
            tracing::debug!("client went away; cancelling its batch");
            return;
        }
        if last {
            return;
        }
    }
}
