//! Everything that can happen to the state ([`Input`]), what a request
//! brings ([`NewTask`], [`RequestSpec`]), and what may be refused
//! ([`Refused`]).

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use colball_proto::{egress, v1};
use colball_solver::Puzzle;
use ecow::EcoString;

use crate::errors::{AdmitError, LossReason, RegisterError};
use crate::policy::Priority;

/// One input to the state, handled by [`State::handle`](crate::State::handle)
/// at a time the driver gives. Only [`Input::Admit`] and
/// [`Input::Register`] can be refused.
#[derive(Debug)]
pub enum Input<'a> {
    /// A client's request, numbered `id` by the driver (a number not used
    /// before), with the puzzles still to solve. `known`, when given, is
    /// asked for the result of each puzzle not pending, under the state's
    /// lock (the driver looks in its result cache again, for a puzzle
    /// solved since its first look): such results are delivered at once
    /// and their puzzles not solved again. Refused whole when the results
    /// held for clients would pass `max_pending`.
    Admit {
        id: u64,
        spec: RequestSpec,
        tasks: Vec<NewTask>,
        known: Option<Known<'a>>,
    },
    /// The request's stream has read `received` results and sent `sent` of
    /// them on to its client (both counted from its start).
    Ack {
        request: u64,
        received: usize,
        sent: usize,
    },
    /// The request's stream ended (every result read, the client gone, or
    /// its deadline passed): what is left of its work is dropped.
    EndRequest { request: u64 },
    /// A worker registers, numbered `worker` by the driver (not used
    /// before), as `name` from `peer` with `slots` solver threads.
    Register {
        worker: u64,
        name: &'a str,
        peer: Option<IpAddr>,
        slots: u32,
    },
    /// A message from the worker shows it alive; a heartbeat may carry its
    /// cache's counters.
    Heartbeat {
        worker: u64,
        cache: Option<v1::WorkerCacheStats>,
    },
    /// The worker takes no more work and leaves once it holds nothing.
    Drain { worker: u64 },
    /// One message of results from a worker, handled in order.
    Results {
        worker: u64,
        results: Vec<v1::TaskResult>,
    },
    /// The worker's session ended (or is to end) for `reason`.
    WorkerLost { worker: u64, reason: LossReason },
    /// Housekeeping, every half heartbeat interval: silent and stuck
    /// workers, requests without workers, quarantines, queue depths.
    Tick,
    /// The coordinator is shutting down: everything ends.
    Shutdown,
}

/// What [`Input::Admit`] asks of a puzzle not pending: its result, if the
/// driver knows it.
pub struct Known<'a>(pub &'a mut dyn FnMut(&NewTask) -> Option<egress::PuzzleResult>);

impl fmt::Debug for Known<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Known(..)")
    }
}

/// An input the state refused; nothing of it was taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Admit(#[from] AdmitError),
    #[error(transparent)]
    Register(#[from] RegisterError),
}

/// One puzzle to dispatch.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub index: u64,
    /// The client's id (inline up to 15 bytes).
    pub id: EcoString,
    pub puzzle: Puzzle,
}

/// What the state needs to know of a request besides its tasks.
#[derive(Debug, Clone)]
pub struct RequestSpec {
    /// Who it counts for in fair sharing and per-client limits.
    pub client: String,
    pub priority: Priority,
    /// Every result the client will read, answered-at-once ones included:
    /// the request holds this many places under `max_pending` until its
    /// client has read them.
    pub total: usize,
    /// The W3C `traceparent` of the span its work belongs under, when the
    /// driver exports spans: passed on with its tasks ([`Effect::Assign`]);
    /// opaque to the state.
    ///
    /// [`Effect::Assign`]: crate::Effect::Assign
    pub trace: Option<Arc<str>>,
}
