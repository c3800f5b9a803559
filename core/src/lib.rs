//! The coordinator's scheduling core: a pure state machine over admitted
//! requests, their tasks and the registered workers, with its policies.
//!
//! Nothing here touches a channel, a socket or the clock, and the crate
//! depends on no async runtime, no gRPC stack and no database: the
//! coordinator's driver (in `colball-server`) feeds the [`State`] its
//! inputs, the time included, and carries out the [`Effect`]s it returns.
//!
//! - [`State`] (`state/`): the books and their operations, by concern:
//!   requests, workers, answers, audits, dispatch;
//! - [`input`]: everything that can happen to the state ([`Input`], handled
//!   in one place, [`State::handle`]), what a request brings ([`NewTask`],
//!   [`RequestSpec`]), and what may be refused ([`Refused`]);
//! - [`effect`]: what the driver is asked to do ([`Effect`]), and why a
//!   request ended early ([`RequestFailure`]);
//! - [`errors`]: why a worker was lost, an answer refused, a registration
//!   or an admission refused;
//! - [`limits`]: the limits and policies the state applies;
//! - [`snapshot`]: counters and views for metrics and the dashboard;
//! - [`solve_times`]: how long each board size's tasks take, learned
//!   from verified answers;
//! - [`policy`]: the fair queue, worker credit and target-share hints;
//! - [`VerifiedAnswer`]: a verified answer, as the result cache keeps it.

pub mod answer;
pub mod effect;
pub mod errors;
pub mod input;
pub mod limits;
pub mod policy;
pub mod snapshot;
pub mod solve_times;
mod state;
mod tasks;

pub use answer::VerifiedAnswer;
pub use effect::{Effect, Effects, NoWorkers, RequestFailure, SHUTTING_DOWN};
pub use errors::{
    AdmitError, LossReason, ProtocolError, REJECT_LABELS, RegisterError, RejectReason, Rejected,
};
pub use input::{Input, Known, NewTask, Refused, RequestSpec};
pub use limits::{Limits, MAX_ATTEMPTS, Speculation};
pub use policy::Priority;
pub use snapshot::{Counters, Snapshot, WorkerView};
pub use solve_times::{SolveTime, SolveTimes};
pub use state::{State, shown_name};
