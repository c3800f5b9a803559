//! `colball job ...`: durable jobs on a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand, ValueEnum};
use colball_client::CONNECT_ENV;

use super::args::{OutputFormat, PriorityArg, SecurityArgs};
#[cfg(feature = "cluster")]
pub use cluster::run;

#[derive(Args, Debug)]
pub struct JobArgs {
    #[command(subcommand)]
    command: JobCommand,
    /// The coordinator's URL, for example `http://127.0.0.1:50051`; or
    /// several, comma-separated (coordinators sharing one job store): the
    /// first that answers is used, and `results --wait` goes on with the
    /// next when its connection breaks.
    #[arg(long, env = CONNECT_ENV, value_name = "URL", global = true)]
    connect: Option<String>,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Subcommand, Debug)]
enum JobCommand {
    /// Store a puzzle file on the cluster as a job; prints its id alone on
    /// standard output once every puzzle is stored.
    Submit {
        /// Puzzle file (classic or JSON Lines); `-` or nothing reads
        /// standard input.
        input: Option<PathBuf>,
        /// The job's priority class (default bulk).
        #[arg(long, value_enum)]
        priority: Option<PriorityArg>,
        /// A name for people.
        #[arg(long, default_value = "")]
        name: String,
        /// Let results come in the order they are solved, not input order:
        /// `job results` then prints them as they were stored, as JSON
        /// Lines (each names its puzzle), and `--from N` skips the first N
        /// of that order.
        #[arg(long)]
        any_order: bool,
        /// A URL the coordinator calls (a signed POST) once the job
        /// finishes; it must match one of its --webhook-allow patterns.
        #[arg(long, value_name = "URL", default_value = "")]
        webhook: String,
    },
    /// A job's state and counts.
    Status {
        id: String,
        #[arg(long, value_enum, default_value_t = StatusFormat::Text)]
        format: StatusFormat,
    },
    /// Your jobs, newest first.
    List {
        #[arg(long, value_enum, default_value_t = StatusFormat::Text)]
        format: StatusFormat,
    },
    /// Stop a job; the results stored so far stay readable.
    Cancel { id: String },
    /// Cancel a job if needed and delete it with its results.
    Delete { id: String },
    /// Print a job's results in input order, as `colball solve` prints
    /// them: those stored now, or with `--wait` all of them as they come.
    Results {
        id: String,
        /// Follow the job until its last result.
        #[arg(long)]
        wait: bool,
        /// Start at this result (0-based), e.g. after the ones already read.
        #[arg(long, value_name = "N", default_value_t = 0)]
        from: u64,
        /// Also print one optimal move sequence per case.
        #[arg(long)]
        moves: bool,
        #[arg(long, value_enum, default_value_t = OutputFormat::Classic)]
        output: OutputFormat,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StatusFormat {
    Text,
    Json,
}

#[cfg(not(feature = "cluster"))]
pub fn run(_: JobArgs, _quiet: bool) -> Result<ExitCode> {
    Err(super::without_cluster("colball job"))
}

/// The commands' work, with the cluster client.
#[cfg(feature = "cluster")]
mod cluster {
    use std::io::{self, BufWriter, Write};

    use anyhow::Context;
    use colball_client::jobs::{self, Jobs};
    use colball_client::progress::Progress;
    use colball_proto::v1::{self, puzzle_result};
    use colball_solver::format::{Format, classic, jsonl};

    use super::super::input::read_input;
    use super::*;

    pub fn run(args: JobArgs, quiet: bool) -> Result<ExitCode> {
        let url = args
            .connect
            .clone()
            .context("colball job needs the coordinator: --connect URL or COLBALL_CONNECT")?;
        let security = args.security.security()?;
        let runtime = colball_client::remote::runtime()?;
        runtime.block_on(async move {
            let urls = colball_client::remote::urls(&url)?;
            let (mut jobs, mut at) = Jobs::connect_first(&urls, &security).await?;
            match args.command {
                JobCommand::Submit {
                    input,
                    priority,
                    name,
                    any_order,
                    webhook,
                } => {
                    let options = v1::JobOptions {
                        priority: PriorityArg::wire(priority).unwrap_or(v1::Priority::Unspecified)
                            as i32,
                        name,
                        any_order,
                        webhook,
                        ..v1::JobOptions::default()
                    };
                    submit(&mut jobs, input, options).await
                }
                JobCommand::Status { id, format } => {
                    let job = jobs.get(&id).await?;
                    print_jobs(&[job], format)?;
                    Ok(ExitCode::SUCCESS)
                }
                JobCommand::List { format } => {
                    print_jobs(&jobs.list().await?, format)?;
                    Ok(ExitCode::SUCCESS)
                }
                JobCommand::Cancel { id } => {
                    let job = jobs.cancel(&id).await?;
                    print_jobs(&[job], StatusFormat::Text)?;
                    Ok(ExitCode::SUCCESS)
                }
                JobCommand::Delete { id } => {
                    jobs.delete(&id).await?;
                    eprintln!("colball: job {id} deleted");
                    Ok(ExitCode::SUCCESS)
                }
                JobCommand::Results {
                    id,
                    wait,
                    from,
                    moves,
                    output,
                } => {
                    let reader = jobs::Reader {
                        urls: &urls,
                        security: &security,
                        reconnect: jobs::DEFAULT_RECONNECT,
                    };
                    let shown = Shown {
                        moves,
                        output,
                        quiet,
                    };
                    results(reader, &mut jobs, &mut at, &id, wait, from, shown).await
                }
            }
        })
    }

    async fn submit(
        jobs: &mut Jobs,
        input: Option<PathBuf>,
        options: v1::JobOptions,
    ) -> Result<ExitCode> {
        let (bytes, shown) = read_input(input.as_ref())?;
        let mut puzzles = Vec::new();
        match Format::detect(&bytes) {
            Format::Classic => match classic::parse(&bytes) {
                Ok(cases) => {
                    for (i, case) in cases.into_iter().enumerate() {
                        puzzles.push(((i + 1).to_string(), case.puzzle));
                    }
                }
                Err(e) => {
                    eprintln!("colball: {shown}:{}: {}", e.line, e.kind);
                    return Ok(ExitCode::FAILURE);
                }
            },
            Format::Jsonl => {
                let mut bad = false;
                for case in jsonl::parse(&bytes) {
                    match case {
                        Ok(case) => puzzles.push((case.id, case.puzzle)),
                        Err(e) => {
                            eprintln!("colball: {shown}:{}: {}", e.line, e.message);
                            bad = true;
                        }
                    }
                }
                if bad {
                    eprintln!("colball: {shown}: not submitted: fix the lines above");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        if puzzles.is_empty() {
            eprintln!("colball: {shown} holds no puzzle: nothing submitted");
            return Ok(ExitCode::FAILURE);
        }
        let accepted = jobs.submit_with(&puzzles, options).await?;
        eprintln!(
            "colball: job {} stored: {} puzzles",
            accepted.id, accepted.puzzles
        );
        println!("{}", accepted.id);
        Ok(ExitCode::SUCCESS)
    }

    fn print_jobs(list: &[v1::Job], format: StatusFormat) -> Result<()> {
        let mut out = io::stdout().lock();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for job in list {
            match format {
                StatusFormat::Text => writeln!(out, "{}", jobs::job_line(job, now))?,
                StatusFormat::Json => writeln!(out, "{}", jobs::job_json(job))?,
            }
        }
        Ok(())
    }

    /// How `job results` prints.
    #[derive(Clone, Copy)]
    struct Shown {
        moves: bool,
        output: OutputFormat,
        /// No progress bar.
        quiet: bool,
    }

    async fn results(
        reader: jobs::Reader<'_>,
        jobs: &mut Jobs,
        at: &mut usize,
        id: &str,
        wait: bool,
        from: u64,
        Shown {
            moves,
            output,
            quiet,
        }: Shown,
    ) -> Result<ExitCode> {
        let job = jobs.get(id).await?;
        let any_order = job.any_order;
        if any_order && matches!(output, OutputFormat::Classic) {
            eprintln!(
                "colball: job {id} takes its results in any order (submitted with --any-order): read them with --output jsonl, where each line names its puzzle"
            );
            return Ok(ExitCode::from(2));
        }
        let mut out = BufWriter::new(io::stdout().lock());
        let mut errors = 0;
        let mut next = from;
        let mut seen = std::collections::HashSet::new();
        // A bar while waiting for a job's results (on a terminal only).
        let to_come = job.puzzles.saturating_sub(from) as usize;
        let progress = Progress::new(to_come, quiet || !wait, "results");
        let mut notice = |line: &str| progress.eprintln(&format!("colball: {line}"));
        let print = |r: v1::PuzzleResult| -> Result<()> {
            if any_order {
                anyhow::ensure!(
                    seen.insert(r.index),
                    "the cluster sent result {} twice",
                    r.index
                );
            } else {
                anyhow::ensure!(
                    r.index == next,
                    "the cluster sent result {} when {next} was due",
                    r.index
                );
            }
            next += 1;
            progress.inc();
            match (&r.outcome, output) {
                (Some(puzzle_result::Outcome::Solved(s)), OutputFormat::Classic) => {
                    if moves && !s.solution.is_empty() {
                        writeln!(out, "{} {}", s.moves, s.solution)?;
                    } else {
                        writeln!(out, "{}", s.moves)?;
                    }
                }
                (Some(puzzle_result::Outcome::Solved(s)), OutputFormat::Jsonl) => {
                    let record = jsonl::SolvedRecord {
                        id: r.id.clone(),
                        moves: s.moves,
                        solution: s.solution.clone(),
                        strategy: s.strategy.clone(),
                        time_us: s.time_us,
                    };
                    writeln!(out, "{}", jsonl::to_line(&record))?;
                }
                (outcome, format) => {
                    errors += 1;
                    let message = match outcome {
                        Some(puzzle_result::Outcome::Error(e)) => e.message.clone(),
                        _ => "no outcome".to_string(),
                    };
                    progress.eprintln(&format!("colball: job {id}, result {}: {message}", r.index));
                    match format {
                        OutputFormat::Classic => writeln!(out, "error")?,
                        OutputFormat::Jsonl => {
                            let record = jsonl::ErrorRecord {
                                id: Some(r.id.clone()),
                                line: r.index as usize + 1,
                                error: message,
                            };
                            writeln!(out, "{}", jsonl::to_line(&record))?;
                        }
                    }
                }
            }
            Ok(())
        };
        let span = (from, job.puzzles);
        match jobs::read_results(reader, jobs, at, id, span, wait, &mut notice, print).await {
            Ok(()) => {}
            Err(colball_client::remote::SolveError::Output(e)) => return Err(e),
            Err(colball_client::remote::SolveError::Client(e)) => return Err(e.into()),
        }
        out.flush()?;
        Ok(if errors > 0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        })
    }
}
