//! `colball solve`: in-process, or on a cluster with `--connect`.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use colball_client::local::{self, SolvedCase};
use colball_client::progress::Progress;
#[cfg(feature = "cluster")]
use colball_client::{jobs, remote};
use colball_solver::format::{Format, classic, jsonl};
use colball_solver::{Puzzle, Solution};

use super::args::{ClusterJobArgs, EngineArgs, InputFormat, OutputFormat, SecurityArgs};
use super::input::read_input;

#[derive(Args, Debug)]
pub(crate) struct SolveArgs {
    /// Puzzle file; `-` or nothing reads standard input.
    pub(crate) input: Option<PathBuf>,
    /// Input format; `auto` picks JSON Lines when the input starts with `{`.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    pub(crate) format: InputFormat,
    /// Output format; defaults to the input's format.
    #[arg(long, value_enum)]
    pub(crate) output: Option<OutputFormat>,
    /// Also print one optimal move sequence per case. In classic output it
    /// follows the count on the same line: `6 r22 c33 r23 c22 r33 c23`.
    #[arg(long)]
    pub(crate) moves: bool,
    /// Solver threads (default: all cores). Output order never changes.
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) threads: Option<u16>,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    /// Solve on a colball cluster: the coordinator's URL, for example
    /// `http://127.0.0.1:50051`. The output is the same as in-process.
    /// Several, comma-separated (coordinators sharing one job store): when
    /// the connection breaks the run goes on with the next.
    #[arg(long, env = colball_client::CONNECT_ENV, value_name = "URL")]
    pub(crate) connect: Option<String>,
    #[command(flatten)]
    pub(crate) job: ClusterJobArgs,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

/// One entry of the output, in input order: a puzzle to solve or a line that
/// could not be read.
pub(crate) enum Entry {
    Puzzle { id: String },
    Error(jsonl::LineError),
}

pub(crate) fn solve(args: SolveArgs, quiet: bool) -> Result<ExitCode> {
    let (bytes, name) = read_input(args.input.as_ref())?;
    let format = match args.format {
        InputFormat::Auto => Format::detect(&bytes),
        InputFormat::Classic => Format::Classic,
        InputFormat::Jsonl => Format::Jsonl,
    };
    let mut puzzles = Vec::new();
    let mut ids = Vec::new();
    let mut entries = Vec::new();
    match format {
        Format::Classic => match classic::parse(&bytes) {
            Ok(cases) => {
                for (i, case) in cases.into_iter().enumerate() {
                    puzzles.push(case.puzzle);
                    let id = (i + 1).to_string();
                    ids.push(id.clone());
                    entries.push(Entry::Puzzle { id });
                }
            }
            Err(e) => {
                eprintln!("colball: {name}:{}: {}", e.line, e.kind);
                return Ok(ExitCode::FAILURE);
            }
        },
        Format::Jsonl => {
            for case in jsonl::parse(&bytes) {
                match case {
                    Ok(case) => {
                        puzzles.push(case.puzzle);
                        ids.push(case.id.clone());
                        entries.push(Entry::Puzzle { id: case.id });
                    }
                    Err(e) => entries.push(Entry::Error(e)),
                }
            }
        }
    }
    if entries.is_empty() && !quiet {
        eprintln!("colball: {name} holds no case (nothing to solve)");
    }
    let output = args.output.unwrap_or(match format {
        Format::Classic => OutputFormat::Classic,
        Format::Jsonl => OutputFormat::Jsonl,
    });
    let threads = args
        .threads
        .map_or_else(local::default_threads, usize::from);

    let mut out = BufWriter::new(io::stdout().lock());
    let progress = Progress::new(puzzles.len(), quiet, "solving");
    let mut errors = 0usize;
    let mut entries = entries.into_iter().peekable();
    // Writes the error entries that come before the next puzzle.
    let mut flush_errors =
        |out: &mut BufWriter<_>, entries: &mut std::iter::Peekable<_>| -> io::Result<()> {
            while let Some(Entry::Error(_)) = entries.peek() {
                let Some(Entry::Error(e)) = entries.next() else {
                    unreachable!()
                };
                errors += 1;
                progress.eprintln(&format!("colball: {name}:{}: {}", e.line, e.message));
                match output {
                    OutputFormat::Classic => writeln!(out, "error")?,
                    OutputFormat::Jsonl => {
                        writeln!(out, "{}", jsonl::to_line(&jsonl::ErrorRecord::from(&e)))?
                    }
                }
            }
            Ok(())
        };
    let mut emit = |solution: &Solution, strategy: &str, elapsed: Duration| -> io::Result<()> {
        flush_errors(&mut out, &mut entries)?;
        progress.inc();
        let Some(Entry::Puzzle { id }) = entries.next() else {
            unreachable!("one entry per puzzle")
        };
        match output {
            OutputFormat::Classic => {
                writeln!(out, "{}", classic::format_answer(solution, args.moves))
            }
            OutputFormat::Jsonl => {
                let record =
                    jsonl::SolvedRecord::new(id, solution, strategy, elapsed.as_micros() as u64);
                writeln!(out, "{}", jsonl::to_line(&record))
            }
        }
    };
    if let Some(url) = &args.connect {
        let named: Vec<(String, Puzzle)> = ids.into_iter().zip(puzzles.iter().copied()).collect();
        solve_remote(url, &args, &named, &progress, &mut emit)?;
    } else {
        let engine = args.engine.engine(threads);
        local::solve_in_order(&puzzles, threads, &engine, |solved: SolvedCase| {
            emit(&solved.solution, solved.method.name(), solved.elapsed)
        })?;
    }
    flush_errors(&mut out, &mut entries)?;
    out.flush()?;
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `--connect URL`: the puzzles solved as a job on the cluster, each result
/// given to `emit` in input order.
#[cfg(feature = "cluster")]
fn solve_remote(
    url: &str,
    args: &SolveArgs,
    named: &[(String, Puzzle)],
    progress: &Progress,
    emit: &mut impl FnMut(&Solution, &str, Duration) -> io::Result<()>,
) -> Result<()> {
    let security = args.security.security()?;
    let mut notice = |m: &str| progress.eprintln(&format!("colball: {m}"));
    jobs::solve_in_order(url, &security, &args.job.run(), named, &mut notice, |r| {
        emit(&r.solution, &r.strategy, r.elapsed)
    })
    .map_err(|e| match e {
        remote::SolveError::Output(e) => anyhow::Error::from(e),
        remote::SolveError::Client(e) => anyhow::Error::from(e),
    })
}

#[cfg(not(feature = "cluster"))]
fn solve_remote(
    url: &str,
    _: &SolveArgs,
    _: &[(String, Puzzle)],
    _: &Progress,
    _: &mut impl FnMut(&Solution, &str, Duration) -> io::Result<()>,
) -> Result<()> {
    Err(super::without_cluster(&format!("--connect {url}")))
}
