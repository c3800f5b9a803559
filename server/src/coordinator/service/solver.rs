//! `colball.v1.Solver`: `Solve`, `SolveBatch` and `Watch` (and `Grade`,
//! in [`super::grade`]).

use std::pin::Pin;
use std::sync::Arc;

use colball_proto::ingest::{self, solver_server::Solver};
use colball_proto::{PuzzleText, batch_from_wire};
use colball_proto::{egress, v1};
use colball_solver::order::InOrder;
use ecow::EcoString;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{client_of, expire_at, grade, grpc_timeout};
use crate::coordinator::events::{self, BatchEvents};
use crate::coordinator::per_client::Slot;
use crate::coordinator::policy::Priority;
use crate::coordinator::state::{NewTask, RequestSpec};
use crate::coordinator::{BatchEvent, RequestStream, Shared, take_results};
use crate::error::ServerError;

type ResultStream = Pin<Box<dyn Stream<Item = Result<egress::PuzzleResult, Status>> + Send>>;
type EventStream = Pin<Box<dyn Stream<Item = Result<v1::ClusterEvent, Status>> + Send>>;
/// The client-facing service.
#[derive(Debug)]
pub(super) struct SolverService {
    pub(super) shared: Arc<Shared>,
}
/// A request after parsing and the cache: results known now, and the
/// stream the rest arrive on.
pub(super) struct Admitted {
    pub(super) ready: Vec<egress::PuzzleResult>,
    pub(super) stream: RequestStream,
    pub(super) total: usize,
    /// Reports the request's results and end to watchers.
    pub(super) events: BatchEvents,
    /// The request's place among its client's requests in flight.
    pub(super) slot: Slot,
}
/// One puzzle of a request as read: its id, and the puzzle or why it is
/// invalid.
type Parsed = (
    EcoString,
    Result<colball_solver::Puzzle, Box<colball_proto::InvalidPuzzle>>,
);

/// Who sent a request and how it wants to be served.
pub(super) struct Caller {
    pub(super) client: String,
    pub(super) priority: Priority,
}

impl SolverService {
    /// Reads a request's puzzles, once: within `--max-batch`, each one
    /// parsed (or why it is invalid) beside its id. `beyond` counts the
    /// puzzles the request held past those decoded
    /// ([`ingest::SolveBatchRequest::beyond`]): they count towards the
    /// limit, which they always pass.
    pub(super) fn parse<P: PuzzleText>(
        &self,
        puzzles: Vec<P>,
        beyond: usize,
    ) -> Result<Vec<Parsed>, ServerError> {
        let limit = self.shared.config.max_batch;
        let sent = puzzles.len() + beyond;
        if sent > limit {
            return Err(ServerError::BatchTooLarge { batch: sent, limit });
        }
        let parsed = batch_from_wire(&puzzles)?;
        Ok(puzzles
            .into_iter()
            .zip(parsed)
            .map(|(wire, puzzle)| (wire.into_id(), puzzle))
            .collect())
    }

    /// Admits a request's parsed puzzles ([`Self::parse`]); `request`
    /// names the RPC for watchers.
    pub(super) async fn admit(
        &self,
        batch: Vec<Parsed>,
        request: &str,
        caller: Caller,
    ) -> Result<Admitted, ServerError> {
        let shared = &self.shared;
        if shared.shutdown.is_cancelled() {
            return Err(ServerError::ShuttingDown);
        }
        let slot = shared.per_client.acquire(&caller.client)?;
        let total = batch.len();
        let mut ready = Vec::new();
        // Sized once: most puzzles of a request are tasks.
        let mut tasks = Vec::with_capacity(total);
        for (index, (id, parsed)) in batch.into_iter().enumerate() {
            let index = index as u64;
            match parsed {
                Err(e) => ready.push(egress::PuzzleResult::invalid(index, &e)),
                Ok(puzzle) => match shared.cache.get(&puzzle) {
                    Some(a) => ready.push(a.to_result(&id, index)),
                    None => tasks.push(NewTask { index, id, puzzle }),
                },
            }
        }
        if !tasks.is_empty() {
            self.wait_for_a_worker().await?;
        }
        let spec = RequestSpec {
            client: caller.client.clone(),
            priority: caller.priority,
            total,
        };
        let (mut stream, late) = shared.admit_request(spec, tasks)?;
        stream.received += ready.len();
        ready.extend(late);
        Ok(Admitted {
            ready,
            stream,
            total,
            events: BatchEvents::accept(
                shared.events.clone(),
                total,
                request,
                caller.priority.name(),
                &caller.client,
            ),
            slot,
        })
    }

    /// Waits up to the grace period for a first worker.
    async fn wait_for_a_worker(&self) -> Result<(), ServerError> {
        let grace = self.shared.config.worker_grace;
        let mut workers = self.shared.workers.subscribe();
        let ever = {
            let s = self.shared.state();
            if s.worker_count() > 0 {
                return Ok(());
            }
            s.ever_had_worker()
        };
        match tokio::time::timeout(grace, workers.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ServerError::ShuttingDown),
            Err(_) => Err(ServerError::NoWorkers {
                waited: grace,
                ever,
            }),
        }
    }
}

/// The priority of a request: its field, or the RPC's default.
pub(super) fn priority(value: i32, default: Priority) -> Result<Priority, ServerError> {
    Priority::from_wire(value, default).ok_or(ServerError::BadPriority(value))
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
        let caller = Caller {
            client,
            priority: priority(request.priority, Priority::Interactive)?,
        };
        let puzzle = request.puzzle.ok_or(ServerError::MissingPuzzle)?;
        let batch = self.parse(vec![puzzle], 0)?;
        if let Some((_, Err(e))) = batch.first() {
            return Err(ServerError::from(colball_proto::InvalidPuzzle::clone(e)).into());
        }
        let mut admitted = self.admit(batch, "solve", caller).await?;
        let result = match admitted.ready.pop() {
            Some(result) => Ok(result),
            None => match admitted.stream.next().await {
                Some(Ok(result)) => Ok(result),
                Some(Err(status)) => Err(status),
                None => Err(ServerError::ShuttingDown.into()),
            },
        };
        match &result {
            Ok(r) => {
                admitted.events.result(r);
                admitted.events.finish("complete");
            }
            Err(status) => admitted.events.finish(status.message()),
        }
        result.map(Response::new)
    }

    type GradeStream = grade::GradeStream;

    async fn grade(
        &self,
        request: Request<v1::GradeRequest>,
    ) -> Result<Response<grade::GradeStream>, Status> {
        grade::grade(self, request).await
    }

    type SolveBatchStream = ResultStream;

    async fn solve_batch(
        &self,
        request: Request<ingest::SolveBatchRequest>,
    ) -> Result<Response<ResultStream>, Status> {
        let deadline = grpc_timeout(request.metadata()).map(|t| tokio::time::Instant::now() + t);
        let client = client_of(&request);
        let request = request.into_inner();
        let caller = Caller {
            client,
            priority: priority(request.priority, Priority::Normal)?,
        };
        let batch = self.parse(request.puzzles, request.beyond)?;
        let admitted = self.admit(batch, "solve_batch", caller).await?;
        tracing::debug!(
            puzzles = admitted.total,
            ready = admitted.ready.len(),
            "batch admitted"
        );
        // Results travel in groups (what arrived together); the response
        // stream hands them to tonic one by one, which writes what is
        // ready together.
        let (tx, rx) = mpsc::channel(16);
        let span = tracing::info_span!("request", id = admitted.stream.id, rpc = "solve_batch");
        self.shared
            .spawn(span, forward(admitted, request.ordered, deadline, tx));
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
            .shared
            .events
            .subscribe(from)
            .map_err(|gone| Status::out_of_range(gone.to_string()))?;
        tracing::debug!(?from, "watcher joined");
        let (tx, rx) = mpsc::channel(256);
        self.shared.spawn(
            tracing::info_span!("watch"),
            follow(self.shared.clone(), subscription, tx),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Streams cluster events to one watcher: its backlog, then live events.
/// A watcher too slow for the live channel catches up from the retained
/// events; if even those have moved past it, its stream ends with
/// OUT_OF_RANGE saying where it could resume.
async fn follow(
    shared: Arc<Shared>,
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
            () = shared.shutdown.cancelled() => {
                let _ = tx.send(Err(ServerError::ShuttingDown.into())).await;
                return;
            }
        };
        match received {
            Ok(event) => backlog.push(event),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                match shared.events.since(after + 1) {
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

/// Streams a batch's results to its client, in input order if asked. Ends
/// (and so ends the request, cancelling its remaining work) when every
/// result is sent, the client goes away, or the deadline passes.
async fn forward(
    admitted: Admitted,
    ordered: bool,
    deadline: Option<tokio::time::Instant>,
    tx: mpsc::Sender<Vec<Result<egress::PuzzleResult, Status>>>,
) {
    let Admitted {
        ready,
        mut stream,
        total,
        mut events,
        slot,
    } = admitted;
    let mut held = InOrder::new();
    let mut sent = 0usize;
    let expire = expire_at(deadline);
    tokio::pin!(expire);
    let mut incoming: Vec<BatchEvent> = ready.into_iter().map(Ok).collect();
    while sent < total {
        if incoming.is_empty() {
            tokio::select! {
                more = stream.next_batch(&mut incoming) => if !more {
                    incoming.push(Err(ServerError::ShuttingDown.into()));
                },
                () = tx.closed() => {
                    tracing::debug!("client went away; cancelling its batch");
                    break;
                }
                () = &mut expire => incoming.push(Err(ServerError::DeadlineExceeded.into())),
            }
        }
        // What arrived together goes on together: one step of the event
        // log and one message to the response stream.
        let mut results = Vec::with_capacity(incoming.len());
        let failure = take_results(&mut incoming, &mut results);
        events.results(&results);
        let out: Vec<_> = if ordered {
            for r in results {
                held.insert(r.index, r);
            }
            held.ready().map(Ok).collect()
        } else {
            results.into_iter().map(Ok).collect()
        };
        let n = out.len();
        sent += n;
        if n > 0 && tx.send(out).await.is_err() {
            tracing::debug!("client went away; cancelling its batch");
            return;
        }
        stream.sent(n);
        if let Some(status) = failure {
            events.finish(status.message());
            let _ = tx.send(vec![Err(status)]).await;
            break;
        }
    }
    if sent == total {
        events.finish("complete");
    }
    // Otherwise the client went away (or an error ended the stream, already
    // reported): dropping `events` says so. Dropping the stream ends the
    // request.
    drop(stream);
    drop(slot);
}
