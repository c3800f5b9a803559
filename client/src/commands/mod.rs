//! The `colball` commands, one module each; [`args`] holds the arguments
//! they share and [`input`] reads their puzzle files. The solving itself is
//! the library's (`colball_client`): these modules parse, call and print.

pub(crate) mod args;
pub(crate) mod bench;
pub(crate) mod generate;
pub(crate) mod grade;
pub(crate) mod input;
pub(crate) mod job;
pub(crate) mod solve;
pub(crate) mod watch;
