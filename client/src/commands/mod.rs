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

/// The error of a command line that needs the cluster client in a build
/// without it.
#[cfg(not(feature = "cluster"))]
pub(crate) fn without_cluster(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} needs the cluster client, which this build of colball leaves out \
         (built with --no-default-features): build it with its default features, \
         for example `cargo install --path client`"
    )
}
