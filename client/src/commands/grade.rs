//! `colball grade`: verdicts on contestants' answers, and a score.

use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use colball_client::local;

use super::args::{ClusterJobArgs, EngineArgs, SecurityArgs};
use super::input::read_input;

#[derive(Args, Debug)]
pub(crate) struct GradeArgs {
    /// Puzzle file (classic or JSON Lines); `-` reads standard input.
    pub(crate) puzzles: PathBuf,
    /// Answers file: classic output (`6`, or `6 r22 c33 ...` as `solve
    /// --moves` prints it) or JSON Lines with `moves` and/or `solution`.
    pub(crate) answers: PathBuf,
    /// Report format: a line per case for people, or JSON Lines.
    #[arg(long, value_enum, default_value_t = GradeFormat::Text)]
    pub(crate) format: GradeFormat,
    /// Solver threads (default: all cores).
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) threads: Option<u16>,
    #[command(flatten)]
    pub(crate) engine: EngineArgs,
    /// Find the optimal answers on a colball cluster at this URL (or
    /// several, comma-separated, of coordinators sharing one job store:
    /// when the connection breaks the run goes on with the next).
    #[arg(long, env = colball_client::CONNECT_ENV, value_name = "URL")]
    pub(crate) connect: Option<String>,
    #[command(flatten)]
    pub(crate) job: ClusterJobArgs,
    #[command(flatten)]
    pub(crate) security: SecurityArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum GradeFormat {
    Text,
    Jsonl,
}

pub(crate) fn grade(args: GradeArgs, quiet: bool) -> Result<ExitCode> {
    use colball_client::grade::{self, Backend, GradeError, ReportFormat};
    if args.puzzles.as_os_str() == "-" && args.answers.as_os_str() == "-" {
        eprintln!("colball: only one of PUZZLES and ANSWERS can be standard input (-)");
        return Ok(ExitCode::from(2));
    }
    let (puzzles, name) = read_input(Some(&args.puzzles))?;
    let (answers, _) = read_input(Some(&args.answers))?;
    let backend = match args.connect {
        #[cfg(feature = "cluster")]
        Some(url) => Backend::Remote {
            url,
            security: Box::new(args.security.security()?),
            run: args.job.run(),
        },
        #[cfg(not(feature = "cluster"))]
        Some(url) => return Err(super::without_cluster(&format!("--connect {url}"))),
        None => {
            let threads = args
                .threads
                .map_or_else(local::default_threads, usize::from);
            Backend::Local {
                threads,
                engine: args.engine.engine(threads),
            }
        }
    };
    let format = match args.format {
        GradeFormat::Text => ReportFormat::Text,
        GradeFormat::Jsonl => ReportFormat::Jsonl,
    };
    let cases = match grade::load(&puzzles, &name, &answers) {
        Ok(cases) => cases,
        Err(GradeError::Input(message)) => {
            eprintln!("colball: {message}");
            return Ok(ExitCode::FAILURE);
        }
        Err(e) => return Err(e.into()),
    };
    let mut out = BufWriter::new(io::stdout().lock());
    match grade::run(&cases, &backend, format, quiet, &mut out) {
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(GradeError::Output(e)) => Err(e.into()),
        Err(e) => Err(e.into()),
    }
}
