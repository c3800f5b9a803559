//! Load test of a colball cluster on this machine: mixed-size puzzles
//! streamed through a coordinator process and worker processes (the real
//! `colball-server` binary) on loopback. Prints puzzles, seconds,
//! puzzles/s, the peak resident set of each process, and the wrong, lost
//! and duplicate answers (all must be 0; the command fails otherwise).
//!
//! ```sh
//! cargo build --release -p colball-server
//! cargo run --release -p colball-server --example load -- --puzzles 200000 --workers 2
//! ```
//!
//! `server/tests/load.rs` runs the same code with 20,000 puzzles.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use colball_testkit::load;

/// Streams puzzles through a coordinator and workers and checks every answer.
#[derive(Parser, Debug)]
struct Args {
    /// Puzzles to solve.
    #[arg(long, default_value_t = 200_000)]
    puzzles: usize,
    /// Worker processes, one solver thread each.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Seed of the puzzle generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Every N-th puzzle is a 4x4 (0: none); the rest have at most 12 cells.
    #[arg(long, default_value_t = 50)]
    four_every: usize,
    /// Puzzles per request (the coordinator takes at most 200,000).
    #[arg(long, default_value_t = 20_000)]
    chunk: usize,
    /// Requests open at once.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// The colball-server binary. Default: beside this example's directory
    /// (`target/release/colball-server` for a release run).
    #[arg(long)]
    server: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let server = match args.server.or_else(default_server) {
        Some(s) if s.is_file() => s,
        Some(s) => {
            eprintln!(
                "load: no colball-server binary at {}; build it first (cargo build --release -p colball-server) or pass --server PATH",
                s.display()
            );
            return ExitCode::FAILURE;
        }
        None => {
            eprintln!("load: cannot find the colball-server binary; pass --server PATH");
            return ExitCode::FAILURE;
        }
    };
    let config = load::LoadConfig {
        puzzles: args.puzzles,
        workers: args.workers,
        seed: args.seed,
        four_every: args.four_every,
        chunk: args.chunk,
        concurrency: args.concurrency,
    };
    println!(
        "load: {} puzzles, {} workers, server {}",
        config.puzzles,
        config.workers,
        server.display()
    );
    match load::run(&server, &config).await {
        Ok(report) => {
            print!("{report}");
            if report.wrong + report.lost + report.duplicates + report.failed == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!("load: FAILED: some answers were wrong, lost or duplicated");
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("load: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `target/PROFILE/colball-server`, from `target/PROFILE/examples/load`.
fn default_server() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let profile = exe.parent()?.parent()?;
    Some(profile.join(format!("colball-server{}", std::env::consts::EXE_SUFFIX)))
}
