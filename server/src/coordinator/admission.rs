//! Admission: the one road into the scheduler, taken by `Solve`,
//! `SolveBatch`, `Grade` and each window of a job.
//!
//! A request's puzzles are read once ([`read`]: each id with its puzzle,
//! or why it is invalid), then [`Scheduler::admit`]:
//!
//! 1. refuses the request while the coordinator shuts down;
//! 2. holds the client's place among its requests in flight
//!    (`--max-batches-per-client`, taken at the edge by
//!    [`crate::access::Access::slot`]) while the request lives, when the
//!    request is the client's own (a job's windows are its job's);
//! 3. answers what it can at once: an invalid puzzle gets its error
//!    result, a puzzle in the result cache its answer;
//! 4. waits up to the grace period for a first worker, when something is
//!    left to solve and the caller asks (a job waits in its own way);
//! 5. gives the rest to the state ([`Input::Admit`]), which looks in the
//!    cache again under its lock and may refuse the request whole
//!    (`--max-pending`).
//!
//! The [`Admitted`] request then gives out its results with
//! [`Admitted::next`]: those answered at once first, then each group that
//! arrived together, in input order when asked, until every one is out or
//! the request fails as a whole (no worker left, shutdown, its deadline).
//! Its watchers' events (accepted, results, finished) are published on the
//! way, when it has them. Dropping it ends the request in the state, which
//! cancels what is left of its work.

use std::sync::Arc;

use colball_core::{Input, Known, NewTask, Priority, RequestSpec};
use colball_proto::{InvalidPuzzle, PuzzleText, batch_from_wire, egress};
use colball_solver::Puzzle;
use colball_solver::order::InOrder;
use ecow::EcoString;
use tokio::sync::mpsc;

use super::Scheduler;
use super::events::RequestEvents;
use crate::access::per_client::Slot;
use crate::error::ServerError;
use crate::telemetry;

/// One puzzle of a request as read: its place in the request (a job's
/// window keeps its job's numbering), its id, and the puzzle or why it is
/// invalid.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub(crate) index: u64,
    pub(crate) id: EcoString,
    pub(crate) puzzle: Result<Puzzle, Box<InvalidPuzzle>>,
}

/// What a request's stream receives: a result, or the failure that ends
/// it.
pub(crate) type Delivery = Result<egress::PuzzleResult, ServerError>;

/// Reads a request's puzzles, once: within `--max-batch`, each one parsed
/// (or why it is invalid) beside its id. `beyond` counts the puzzles the
/// request held past those decoded
/// ([`colball_proto::ingest::SolveBatchRequest::beyond`]): they count
/// towards the limit, which they always pass.
pub(crate) fn read<P: PuzzleText>(
    scheduler: &Scheduler,
    puzzles: Vec<P>,
    beyond: usize,
) -> Result<Vec<Parsed>, ServerError> {
    let limit = scheduler.settings.max_batch;
    let sent = puzzles.len() + beyond;
    if sent > limit {
        return Err(ServerError::BatchTooLarge { batch: sent, limit });
    }
    let parsed = batch_from_wire(&puzzles)?;
    Ok(puzzles
        .into_iter()
        .zip(parsed)
        .enumerate()
        .map(|(index, (wire, puzzle))| Parsed {
            index: index as u64,
            id: wire.into_id(),
            puzzle,
        })
        .collect())
}

/// Who sends a request and how it wants to be served.
#[derive(Clone, Debug)]
pub(crate) struct Requester {
    pub(crate) client: String,
    pub(crate) priority: Priority,
}

/// How a request is admitted and its results given out.
#[derive(Debug)]
pub(crate) struct Terms {
    /// The request as watchers see it: the RPC's name (`solve`,
    /// `solve_batch`, `grade`). A client's request takes a place among its
    /// requests in flight and waits for a first worker; a job's window
    /// (`None`) does neither, and its job reports its events.
    pub(crate) rpc: Option<&'static str>,
    /// Results in input order, else as they arrive.
    pub(crate) ordered: bool,
    /// When the request fails with DEADLINE_EXCEEDED, if ever.
    pub(crate) deadline: Option<tokio::time::Instant>,
    /// The client's place among its requests in flight (a client's
    /// request), held until the request ends.
    pub(crate) slot: Option<Slot>,
    /// The span the request's work belongs under: its `traceparent` goes to
    /// the workers with its tasks (when spans are exported), and the
    /// request's number is recorded in it as `id` (when it has that field).
    pub(crate) span: tracing::Span,
}

/// What [`Admitted::next`] gives.
#[derive(Debug)]
pub(crate) enum Next {
    /// Results, at least one.
    Results(Vec<egress::PuzzleResult>),
    /// The request failed as a whole; no more results come.
    Failed(ServerError),
    /// Every result is out.
    Done,
}

impl Scheduler {
    /// Admits a request of `caller` (see the module documentation).
    pub(crate) async fn admit(
        self: &Arc<Self>,
        batch: Vec<Parsed>,
        caller: &Requester,
        terms: Terms,
    ) -> Result<Admitted, ServerError> {
        if self.lifecycle.shutting_down() {
            return Err(ServerError::ShuttingDown);
        }
        let total = batch.len();
        let mut ready = Vec::new();
        // Sized once: most puzzles of a request are tasks.
        let mut tasks = Vec::with_capacity(total);
        for Parsed { index, id, puzzle } in batch {
            match puzzle {
                Err(e) => ready.push(egress::PuzzleResult::invalid(index, &e)),
                Ok(puzzle) => match self.cache.get(&puzzle) {
                    Some(a) => ready.push(a.to_result(&id, index)),
                    None => tasks.push(NewTask { index, id, puzzle }),
                },
            }
        }
        if !tasks.is_empty() && terms.rpc.is_some() {
            self.wait_for_a_worker().await?;
        }
        let spec = RequestSpec {
            client: caller.client.clone(),
            priority: caller.priority,
            total,
            trace: telemetry::context::traceparent(&terms.span).map(Arc::from),
        };
        let mut stream = self.admit_request(spec, tasks)?;
        terms.span.record("id", stream.id);
        // (The results known before admission count as read.)
        stream.received += ready.len();
        let events = terms.rpc.map(|rpc| {
            RequestEvents::accept(
                self.events.clone(),
                total,
                rpc,
                caller.priority.name(),
                &caller.client,
            )
        });
        Ok(Admitted {
            arrived: ready.into_iter().map(Ok).collect(),
            stream,
            total,
            given: 0,
            order: terms.ordered.then(InOrder::new),
            deadline: terms.deadline,
            failure: None,
            events,
            _slot: terms.slot,
        })
    }

    /// Waits up to the grace period for a first worker.
    async fn wait_for_a_worker(&self) -> Result<(), ServerError> {
        let grace = self.settings.worker_grace;
        let mut workers = self.workers.subscribe();
        let ever = {
            let s = self.state();
            if s.worker_count() > 0 {
                return Ok(());
            }
            s.ever_had_worker()
        };
        match tokio::time::timeout(grace, workers.wait_for(|n| *n > 0)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ServerError::ShuttingDown),
            Err(_) => Err(ServerError::NoWorkers(colball_core::NoWorkers {
                waited: grace,
                ever,
            })),
        }
    }

    /// Gives a request to the state: its results arrive on the stream
    /// returned (which ends the request when dropped), those of puzzles
    /// solved since the caller looked in the result cache among them.
    fn admit_request(
        self: &Arc<Self>,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
    ) -> Result<RequestStream, ServerError> {
        let id = self.fresh_id();
        let (tx, rx) = mpsc::unbounded_channel();
        // The outbox exists before the state can deliver to it.
        self.outboxes.insert(id, tx);
        // A puzzle solved between the caller's look in the cache and the
        // state's lock is in the cache now (see `Scheduler::handle`): solve
        // it once.
        let cache = &self.cache;
        let mut recheck = |t: &NewTask| {
            let answer = cache.recheck(&t.puzzle)?;
            Some(answer.to_result(&t.id, t.index))
        };
        let admit = Input::Admit {
            id,
            spec,
            tasks,
            known: cache.is_on().then_some(Known(&mut recheck)),
        };
        if let Err(refused) = self.handle(admit) {
            self.outboxes.remove(&id);
            return Err(refused.into());
        }
        Ok(RequestStream {
            scheduler: self.clone(),
            id,
            rx,
            received: 0,
            sent: 0,
            acked: (0, 0),
        })
    }
}

/// An admitted request (see the module documentation).
#[derive(Debug)]
pub(crate) struct Admitted {
    /// Results that have arrived and are not yet given out.
    arrived: Vec<Delivery>,
    stream: RequestStream,
    total: usize,
    /// Results given out.
    given: usize,
    /// Results held until those before them are out (ordered requests).
    order: Option<InOrder<egress::PuzzleResult>>,
    deadline: Option<tokio::time::Instant>,
    /// The failure that ends the request, once the results before it are
    /// out.
    failure: Option<ServerError>,
    events: Option<RequestEvents>,
    _slot: Option<Slot>,
}

impl Admitted {
    /// Its results, answered at once or not.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The next results (see [`Next`]): what has arrived together, in
    /// input order if the request is ordered. After [`Next::Failed`] or
    /// [`Next::Done`] nothing more comes.
    pub(crate) async fn next(&mut self) -> Next {
        loop {
            if self.given == self.total {
                return Next::Done;
            }
            if self.arrived.is_empty() {
                if let Some(failure) = self.failure.take() {
                    self.finish(&failure.to_string());
                    return Next::Failed(failure);
                }
                tokio::select! {
                    more = self.stream.next_batch(&mut self.arrived) => if !more {
                        self.arrived.push(Err(ServerError::ShuttingDown));
                    },
                    () = expire_at(self.deadline) => {
                        self.arrived.push(Err(ServerError::DeadlineExceeded));
                    }
                }
            }
            // What arrived together goes on together: one step of the
            // event log, one group for the caller. What follows a failure
            // is dropped: the request ends there.
            let mut results = Vec::with_capacity(self.arrived.len());
            for delivery in self.arrived.drain(..) {
                match delivery {
                    Ok(result) => results.push(result),
                    Err(failure) => {
                        self.failure = Some(failure);
                        break;
                    }
                }
            }
            if let Some(events) = &mut self.events {
                events.results(&results);
            }
            let out: Vec<_> = match &mut self.order {
                Some(order) => {
                    for r in results {
                        order.insert(r.index, r);
                    }
                    order.ready().collect()
                }
                None => results,
            };
            if !out.is_empty() {
                self.given += out.len();
                self.stream.sent(out.len());
                if self.given == self.total {
                    self.finish("complete");
                }
                return Next::Results(out);
            }
        }
    }

    /// Tells the watchers how the request ended (when it did not just stop
    /// being read: dropping its events says that).
    fn finish(&mut self, how: &str) {
        if let Some(events) = &mut self.events {
            events.finish(how);
        }
    }

    /// An admitted request over a stream given by a test.
    #[cfg(test)]
    pub(crate) fn for_test(
        stream: RequestStream,
        ready: Vec<egress::PuzzleResult>,
        total: usize,
    ) -> Admitted {
        Admitted {
            arrived: ready.into_iter().map(Ok).collect(),
            stream,
            total,
            given: 0,
            order: None,
            deadline: None,
            failure: None,
            events: None,
            _slot: None,
        }
    }
}

/// Completes when `deadline` passes; never without one.
async fn expire_at(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The results of one admitted request as the state delivers them. Reading
/// tells the state how far the client got (so it can hold back the work of
/// a client that does not read); dropping it ends the request, cancelling
/// what is left of its work.
#[derive(Debug)]
pub(crate) struct RequestStream {
    pub(crate) scheduler: Arc<Scheduler>,
    pub(crate) id: u64,
    pub(crate) rx: mpsc::UnboundedReceiver<Delivery>,
    /// Results taken from the channel (answered-at-once ones included), and
    /// results passed on to the client.
    pub(crate) received: usize,
    pub(crate) sent: usize,
    pub(crate) acked: (usize, usize),
}

impl RequestStream {
    /// Every result that has arrived, at least one (waiting for it), into
    /// `out`; `false` when the coordinator dropped the request.
    async fn next_batch(&mut self, out: &mut Vec<Delivery>) -> bool {
        self.ack();
        let got = self.rx.recv_many(out, 1024).await;
        self.received += got;
        got > 0
    }

    /// Counts results passed on to the client.
    fn sent(&mut self, n: usize) {
        self.sent += n;
    }

    fn ack(&mut self) {
        if self.acked != (self.received, self.sent) {
            self.acked = (self.received, self.sent);
            self.scheduler.tell(Input::Ack {
                request: self.id,
                received: self.received,
                sent: self.sent,
            });
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        self.scheduler.tell(Input::EndRequest { request: self.id });
        self.scheduler.outboxes.remove(&self.id);
    }
}
