//! The colball cluster: a [`coordinator`] that spreads puzzle batches over
//! [`worker`] processes over gRPC, with results streaming back to clients.
//!
//! - [`coordinator`]: the client-facing `Solver` service and the
//!   worker-facing `Workers` service; admission, credit-based dispatch,
//!   failure handling, the result cache;
//! - [`worker`]: dials the coordinator, solves on a dedicated thread pool;
//! - [`auth`]: optional client and worker tokens (tonic interceptors);
//! - [`cache`]: the bounded result cache both use;
//! - [`http`]: the coordinator's plain-HTTP health and metrics endpoint;
//!   [`process`] reads the process figures it exports;
//! - [`store`]: durable jobs, their puzzles and results, in SQLite;
//!   [`http_jobs`]: the job API over plain HTTP;
//! - [`shutdown`], [`telemetry`]: one shutdown path (Ctrl-C and SIGTERM) and
//!   tracing setup for the binary;
//!
//! The binary (`src/main.rs`) only parses flags into the `Config` structs
//! here, binds the listener and calls `run`.
//!
//! How it all fits together, and what happens when things fail, is in
//! `docs/CLUSTER.md`.

pub mod auth;
pub mod cache;
pub mod coordinator;
pub mod error;
pub mod http;
pub mod http_jobs;
pub mod process;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod worker;

pub use error::ServerError;
