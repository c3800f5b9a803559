//! `colball`: solve colball puzzles exactly, in-process or on a cluster.

/// mimalloc: the data path allocates and frees small buffers per puzzle
/// (messages, ids, move lists) from several threads, where it is faster
/// than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// Without the `cluster` feature the cluster's arguments are still parsed
// (a command line means the same in every build), but never read.
#[cfg_attr(not(feature = "cluster"), allow(dead_code))]
mod commands;

use commands::{bench, generate, grade, job, solve, watch};

/// Exact solver for the colball puzzle (GDOI 2008).
#[derive(Parser, Debug)]
#[command(name = "colball", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// No progress bar or other chatter on standard error; errors still go
    /// there.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Solve every puzzle of a file and print the minimum number of moves.
    Solve(solve::SolveArgs),
    /// Write random puzzles in the classic format (or JSON Lines).
    Gen(generate::GenArgs),
    /// Measure solving speed on one thread.
    Bench(bench::BenchArgs),
    /// Print a cluster's events live: batches, results, workers joining,
    /// leaving and lost. One line per event.
    Watch(watch::WatchArgs),
    /// Grade answers against the optimal ones: one verdict per case and a
    /// score. Exit status 0 whatever the verdicts, 1 for unusable input.
    Grade(grade::GradeArgs),
    /// Durable jobs on a cluster: submit a puzzle file, get an id, read its
    /// results later (from any index, as often as needed).
    Job(job::JobArgs),
}

impl Command {
    /// Its name on the command line.
    fn name(&self) -> &'static str {
        match self {
            Command::Solve(_) => "solve",
            Command::Gen(_) => "gen",
            Command::Bench(_) => "bench",
            Command::Watch(_) => "watch",
            Command::Grade(_) => "grade",
            Command::Job(_) => "job",
        }
    }

    fn run(self, quiet: bool) -> anyhow::Result<ExitCode> {
        match self {
            Command::Solve(args) => solve::solve(args, quiet),
            Command::Grade(args) => grade::grade(args, quiet),
            Command::Gen(args) => generate::generate(args).map(|()| ExitCode::SUCCESS),
            Command::Bench(args) => bench::run_bench(args).map(|()| ExitCode::SUCCESS),
            Command::Watch(args) => watch::run_watch(args).map(|()| ExitCode::SUCCESS),
            Command::Job(args) => job::run(args, quiet),
        }
    }
}

/// Runs the command in a span `colball` (`colball solve`, ...), exported
/// over OTLP as service `colball` when the standard OpenTelemetry
/// variables ask: the coordinator's spans for its calls join its trace.
#[cfg(feature = "cluster")]
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let export = colball_telemetry::init("colball", None).map_err(anyhow::Error::msg)?;
    let span = tracing::info_span!(
        "colball",
        otel.name = %format_args!("colball {}", cli.command.name()),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
    );
    let result = span.in_scope(|| cli.command.run(cli.quiet));
    if result.is_err() {
        span.record("otel.status_code", "ERROR");
    }
    drop(span);
    // The span goes out (this waits for it).
    export.finish();
    result
}

#[cfg(not(feature = "cluster"))]
fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let _ = cli.command.name();
    cli.command.run(cli.quiet)
}

fn main() -> ExitCode {
    let result = run(Cli::parse());
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if interrupted(&e) => {
            eprintln!("colball: {e:#}");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("colball: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether the user stopped a cluster job with Ctrl-C.
fn interrupted(e: &anyhow::Error) -> bool {
    #[cfg(feature = "cluster")]
    {
        use colball_client::remote::ClientError;
        matches!(e.downcast_ref(), Some(ClientError::Interrupted { .. }))
    }
    #[cfg(not(feature = "cluster"))]
    {
        let _ = e;
        false
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}
