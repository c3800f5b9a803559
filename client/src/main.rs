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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Solve(args) => solve::solve(args, cli.quiet),
        Command::Grade(args) => grade::grade(args, cli.quiet),
        Command::Gen(args) => generate::generate(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => bench::run_bench(args).map(|()| ExitCode::SUCCESS),
        Command::Watch(args) => watch::run_watch(args).map(|()| ExitCode::SUCCESS),
        Command::Job(args) => job::run(args, cli.quiet),
    };
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
