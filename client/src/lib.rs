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

//!
//! [`remote`], [`jobs`] and [`watch`] are the cluster client, built with
//! the `cluster` feature (on by default).

use std::time::Duration;

pub mod bench;
pub mod grade;
#[cfg(feature = "cluster")]
pub mod jobs;
pub mod local;
pub mod progress;
#[cfg(feature = "cluster")]
pub mod remote;
#[cfg(feature = "cluster")]
pub mod watch;

/// The environment variable `colball` reads the cluster URL from when
/// `--connect` is not given.
pub const CONNECT_ENV: &str = "COLBALL_CONNECT";

/// The environment variable `colball` reads the client token from when
/// `--token` is not given.
pub const TOKEN_ENV: &str = "COLBALL_TOKEN";

/// `--reconnect-secs`'s default.
pub const DEFAULT_RECONNECT: Duration = Duration::from_secs(120);
