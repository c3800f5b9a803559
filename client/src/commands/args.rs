//! Arguments more than one command shares: how to reach and trust a
//! cluster, how to solve in-process, priorities and file formats.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
#[cfg(feature = "cluster")]
use colball_client::{jobs, remote};
use colball_solver::cache::CacheConfig;
use colball_solver::{Engine, EngineConfig, Strategy};

/// How `solve --connect` and `grade --connect` run their puzzles: as a
/// durable job on the cluster, followed to its last result.
#[derive(Args, Debug)]
pub(crate) struct ClusterJobArgs {
    /// The job's cluster priority class (default normal).
    #[arg(long, value_enum, requires = "connect")]
    pub(crate) priority: Option<PriorityArg>,
    /// When the connection to the coordinator breaks, how long to keep
    /// trying to reconnect before giving up (0: not at all). The results
    /// go on from where they stopped.
    #[arg(long, value_name = "SECS", default_value_t = colball_client::DEFAULT_RECONNECT.as_secs())]
    pub(crate) reconnect_secs: u64,
}

#[cfg(feature = "cluster")]
impl ClusterJobArgs {
    pub(crate) fn run(&self) -> jobs::JobRun {
        jobs::JobRun {
            priority: PriorityArg::wire(self.priority),
            name: String::new(),
            reconnect: std::time::Duration::from_secs(self.reconnect_secs),
            cancel_on_interrupt: true,
        }
    }
}

/// A request's priority class on the cluster: higher classes are always
/// dispatched first; clients share a class in turn.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum PriorityArg {
    Interactive,
    Normal,
    Bulk,
}

#[cfg(feature = "cluster")]
impl PriorityArg {
    pub(crate) fn wire(p: Option<PriorityArg>) -> Option<colball_proto::v1::Priority> {
        use colball_proto::v1::Priority;
        p.map(|p| match p {
            PriorityArg::Interactive => Priority::Interactive,
            PriorityArg::Normal => Priority::Normal,
            PriorityArg::Bulk => Priority::Bulk,
        })
    }
}

/// How `--connect` proves itself and checks the coordinator.
#[derive(Args, Debug)]
pub(crate) struct SecurityArgs {
    /// The coordinator's client token (its --client-token), for --connect.
    #[arg(
        long,
        env = colball_client::TOKEN_ENV,
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(crate) token: Option<String>,
    /// Read the client token from a file (surrounding whitespace is dropped).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "token",
        requires = "connect"
    )]
    pub(crate) token_file: Option<PathBuf>,
    /// Also trust this private CA certificate (PEM) for an https://
    /// --connect URL; the public certificate authorities are trusted
    /// without it.
    #[arg(long, value_name = "FILE", requires = "connect")]
    pub(crate) ca: Option<PathBuf>,
    /// The name to check in the coordinator's certificate instead of the
    /// URL's host.
    #[arg(long, value_name = "NAME", requires = "connect")]
    pub(crate) tls_domain: Option<String>,
}

#[cfg(feature = "cluster")]
impl SecurityArgs {
    pub(crate) fn security(&self) -> anyhow::Result<remote::Security> {
        let token = colball_proto::Secret::from_sources(
            self.token.as_deref(),
            self.token_file.as_deref(),
            "--token (or COLBALL_TOKEN)",
        )?;
        let tls = if self.ca.is_some() || self.tls_domain.is_some() {
            Some(colball_proto::tls::client_config(
                self.ca.as_deref(),
                self.tls_domain.as_deref(),
            )?)
        } else {
            None
        };
        Ok(remote::Security {
            token,
            tls,
            ca_file: self.ca.clone(),
        })
    }
}

/// How puzzles are solved in-process.
#[derive(Args, Debug)]
pub(crate) struct EngineArgs {
    /// Search strategy: `auto` answers repeats from the cache, builds a
    /// distance table for targets shared by enough puzzles, and uses the
    /// bidirectional search for the rest.
    #[arg(long, default_value = "auto", value_parser = strategy_parser())]
    pub(crate) strategy: Strategy,
    /// Most solved puzzles to remember (0 turns the cache off).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) cache_entries: usize,
    /// Most MiB of distance tables to keep (a 4x4 table is 15.6 MiB).
    #[arg(long, default_value_t = 64)]
    pub(crate) table_mib: usize,
}

/// `--strategy`: one of the strategies' names, listed in `--help`.
pub(crate) fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = Strategy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Strategy::ALL.map(Strategy::name)).map(|name| {
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_default()
    })
}

impl EngineArgs {
    pub(crate) fn engine(&self, threads: usize) -> Arc<Engine> {
        Engine::new(EngineConfig {
            strategy: self.strategy,
            cache: CacheConfig {
                max_entries: self.cache_entries,
                max_table_bytes: self.table_mib << 20,
                ..CacheConfig::default()
            },
            table_threads: threads,
            ..EngineConfig::default()
        })
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum InputFormat {
    Auto,
    Classic,
    Jsonl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum OutputFormat {
    Classic,
    Jsonl,
}
