//! The `colball` command and its library end to end, one module per
//! subject, in one test binary (one link instead of one per file).
//!
//! `cargo test -p colball-client --test integration lost` runs one module.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;
use colball_testkit::{pki, proxy};

mod cli;
mod connect;
mod errors;
mod grade;
mod jobs;
mod lost;
mod secure_connect;
mod untrusted;
mod watch;
