//! The server's integration tests, one module per subject, in one test
//! binary (one link instead of one per file). `load` stays a binary of its
//! own: it measures its own process's peak memory.
//!
//! `cargo test -p colball-server --test integration chaos` runs one module.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;

mod chaos;
mod cli_jobs;
mod cluster;
mod dashboard;
mod deploy;
mod grpcurl;
mod hostile;
mod http_api;
mod jobs;
mod json_submit;
mod ops;
mod processes;
mod prometheus;
mod scale_out;
mod secure_processes;
mod security;
mod sharing;
mod stragglers;
mod tracing_export;
mod webhooks;
