//! The colball cluster: a [`coordinator`] that spreads puzzle batches over
//! [`worker`] processes over gRPC, with results streaming back to clients.
//!
//! - [`coordinator`]: the async driver of the scheduler's state machine
//!   (the `colball-core` crate, with its policies) and admission, the one
//!   road every request takes into it;
//! - [`jobs`]: durable jobs, with their [store](jobs::store) (SQLite, or
//!   in memory) behind the `JobStore` interface;
//! - [`app`]: the scheduler and the jobs together, as the APIs serve them;
//! - [`grpc`]: the gRPC services (client-facing `Solver` and `Jobs`,
//!   worker-facing `Workers`, health, reflection);
//! - [`worker`]: dials the coordinator, solves on a dedicated thread pool;
//! - [`access`]: access at the edge: the tokens and each client's
//!   requests in flight; [`auth`]: the token checks (tonic interceptors);
//! - [`lifecycle`]: the shutdown token and the tasks shutdown waits for;
//! - [`cache`]: the bounded result cache both use;
//! - [`http`]: the coordinator's plain-HTTP endpoint: dashboard, health,
//!   metrics, and the job API over plain HTTP;
//! - [`shutdown`], [`telemetry`]: one shutdown path (Ctrl-C and SIGTERM) and
//!   tracing setup for the binary;
//!
//! The binary (`src/main.rs`) only parses flags into the `Config` structs
//! here, binds the listener and calls `run`.
//!
//! How it all fits together, and what happens when things fail, is in
//! `docs/CLUSTER.md`.

pub mod access;
pub mod app;
pub mod auth;
pub mod cache;
pub mod coordinator;
pub mod error;
pub mod grpc;
pub mod http;
pub mod jobs;
pub mod lifecycle;
pub mod shutdown;
pub mod telemetry;
pub mod worker;

pub use error::ServerError;
