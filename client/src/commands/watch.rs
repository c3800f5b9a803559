//! `colball watch`: a cluster's events, live.

use anyhow::Result;
use clap::{Args, ValueEnum};
#[cfg(feature = "cluster")]
use colball_client::{remote, watch};

use super::args::SecurityArgs;

#[derive(Args, Debug)]
pub(crate) struct WatchArgs {
    /// The coordinator's URL, for example `http://127.0.0.1:50051`.
    #[arg(long, env = colball_client::CONNECT_ENV, value_name = "URL")]
    pub(crate) connect: String,
    /// Resume from this event sequence number: events the coordinator
    /// still retains are printed first. Default: only new events.
    #[arg(long, value_name = "SEQ")]
    pub(crate) from: Option<u64>,
    /// `text` for people, `jsonl` for machines (one JSON object per line).
    #[arg(long, value_enum, default_value_t = WatchFormatArg::Text)]
    pub(crate) format: WatchFormatArg,
    /// Leave out the per-puzzle result events.
    #[arg(long)]
    pub(crate) no_results: bool,
    /// Stop after printing this many events.
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum WatchFormatArg {
    Text,
    Jsonl,
}

#[cfg(not(feature = "cluster"))]
pub(crate) fn run_watch(_: WatchArgs) -> Result<()> {
    Err(super::without_cluster("colball watch"))
}

#[cfg(feature = "cluster")]
pub(crate) fn run_watch(args: WatchArgs) -> Result<()> {
    let options = watch::WatchOptions {
        url: args.connect,
        from: args.from,
        format: match args.format {
            WatchFormatArg::Text => watch::WatchFormat::Text,
            WatchFormatArg::Jsonl => watch::WatchFormat::Jsonl,
        },
        no_results: args.no_results,
        count: args.count,
        security: args.security.security()?,
    };
    let runtime = remote::runtime()?;
    let mut out = std::io::stdout().lock();
    let mut note = |line: &str| eprintln!("colball watch: {line}");
    match runtime.block_on(watch::watch(&options, &mut out, &mut note)) {
        Err(watch::WatchError::Output(e)) => Err(e.into()),
        other => Ok(other?),
    }
}
