//! The solver against an independent oracle, the reference examples, its
//! symmetries, and fuzzed input, one module per subject, in one test binary.
//!
//! `cargo test -p colball-solver --test integration oracle` runs one module.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use colball_mutate as mutate;

mod examples;
mod oracle;
mod parse_fuzz;
mod symmetry;
