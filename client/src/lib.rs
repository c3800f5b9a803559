//! The `colball` command line and its client library.
//!
//! - [`local`]: solving a batch in-process on a pool of threads, results in
//!   input order;
//! - [`bench`]: the measurements behind `colball bench`.
//! - [`remote`]: the typed client for a colball cluster, behind
//!   `colball solve --connect URL`;
//! - [`watch`]: `colball watch`, a cluster's events as lines;
//! - [`grade`]: `colball grade`, answers judged against the optimum;
//! - [`progress`]: the progress bar on standard error.

pub mod bench;
pub mod grade;
pub mod jobs;
pub mod local;
pub mod progress;
pub mod remote;
pub mod watch;
