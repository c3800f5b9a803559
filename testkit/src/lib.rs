//! Test support for colball's crates, kept out of the products: the
//! crates take it as a dev-dependency only.
//!
//! - [`LocalCluster`]: a coordinator on `127.0.0.1:0` and in-process
//!   workers, stopped when dropped.
//! - [`procs`]: real `colball-server` processes (each stopped by its own
//!   PID), their metrics and their memory.
//! - [`proxy`]: a TCP proxy on loopback whose connections can be cut.
//! - [`pki`]: throwaway certificates for the TLS tests.
//! - [`postgres`]: a throwaway PostgreSQL server on a free loopback port.
//! - [`hung`]: a worker process that takes tasks and never answers (the
//!   crate's binary, `colball-hung-worker`).
//! - [`load`]: the load run (the `load` example and its test), with the
//!   `load` feature.
//! - [`nemesis`]: faults at random under a workload, and the checker of
//!   what its clients were told, with the `nemesis` feature.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test support: a failure is a failed test

mod cluster;
pub mod hung;
#[cfg(feature = "load")]
pub mod load;
#[cfg(feature = "nemesis")]
pub mod nemesis;
pub mod pki;
pub mod postgres;
pub mod procs;
pub mod proxy;

pub use cluster::LocalCluster;
