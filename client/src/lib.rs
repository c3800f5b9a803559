//! The `colball` command line and its client library.
//!
//! - [`local`]: solving a batch in-process on a pool of threads, results in
//!   input order;
//! - [`bench`]: the measurements behind `colball bench`.

pub mod bench;
pub mod local;
