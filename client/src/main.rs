//! `colball`: solve colball puzzles exactly, in-process or on a cluster.

/// mimalloc: the data path allocates and frees small buffers per puzzle
/// (messages, ids, move lists) from several threads, where it is several
/// times faster than the system allocator (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::{self, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use colball_client::bench::{self, human};
use colball_client::local::{self, Solved};
use colball_client::remote::{self, ClientError};
use colball_client::{jobs, watch};
use colball_solver::cache::CacheConfig;
use colball_solver::format::{Format, classic, jsonl};
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Engine, EngineConfig, Puzzle, Size, Solution, Strategy};
use std::sync::Arc;

mod job_cmd;

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
    Solve(SolveArgs),
    /// Write random puzzles in the classic format (or JSON Lines).
    Gen(GenArgs),
    /// Measure solving speed on one thread.
    Bench(BenchArgs),
    /// Print a cluster's events live: batches, results, workers joining,
    /// leaving and lost. One line per event.
    Watch(WatchArgs),
    /// Grade answers against the optimal ones: one verdict per case and a
    /// score. Exit status 0 whatever the verdicts, 1 for unusable input.
    Grade(GradeArgs),
    /// Durable jobs on a cluster: submit a puzzle file, get an id, read its
    /// results later (from any index, as often as needed).
    Job(job_cmd::JobArgs),
}

#[derive(Args, Debug)]
struct GradeArgs {
    /// Puzzle file (classic or JSON Lines); `-` reads standard input.
    puzzles: PathBuf,
    /// Answers file: classic output (`6`, or `6 r22 c33 ...` as `solve
    /// --moves` prints it) or JSON Lines with `moves` and/or `solution`.
    answers: PathBuf,
    /// Report format: a line per case for people, or JSON Lines.
    #[arg(long, value_enum, default_value_t = GradeFormat::Text)]
    format: GradeFormat,
    /// Solver threads (default: all cores).
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Find the optimal answers on a colball cluster at this URL.
    #[arg(long, env = colball_client::remote::CONNECT_ENV, value_name = "URL")]
    connect: Option<String>,
    #[command(flatten)]
    job: ClusterJobArgs,
    #[command(flatten)]
    security: SecurityArgs,
}

/// How `solve --connect` and `grade --connect` run their puzzles: as a
/// durable job on the cluster, followed to its last result.
#[derive(Args, Debug)]
struct ClusterJobArgs {
    /// The job's cluster priority class (default normal).
    #[arg(long, value_enum, requires = "connect")]
    priority: Option<PriorityArg>,
    /// When the connection to the coordinator breaks, how long to keep
    /// trying to reconnect before giving up (0: not at all). The results
    /// go on from where they stopped.
    #[arg(long, value_name = "SECS", default_value_t = jobs::DEFAULT_RECONNECT.as_secs())]
    reconnect_secs: u64,
}

impl ClusterJobArgs {
    fn run(&self) -> jobs::JobRun {
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
enum PriorityArg {
    Interactive,
    Normal,
    Bulk,
}

impl PriorityArg {
    fn wire(p: Option<PriorityArg>) -> Option<colball_proto::v1::Priority> {
        use colball_proto::v1::Priority;
        p.map(|p| match p {
            PriorityArg::Interactive => Priority::Interactive,
            PriorityArg::Normal => Priority::Normal,
            PriorityArg::Bulk => Priority::Bulk,
        })
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GradeFormat {
    Text,
    Jsonl,
}

#[derive(Args, Debug)]
struct SolveArgs {
    /// Puzzle file; `-` or nothing reads standard input.
    input: Option<PathBuf>,
    /// Input format; `auto` picks JSON Lines when the input starts with `{`.
    #[arg(long, value_enum, default_value_t = InputFormat::Auto)]
    format: InputFormat,
    /// Output format; defaults to the input's format.
    #[arg(long, value_enum)]
    output: Option<OutputFormat>,
    /// Also print one optimal move sequence per case. In classic output it
    /// follows the count on the same line: `6 r22 c33 r23 c22 r33 c23`.
    #[arg(long)]
    moves: bool,
    /// Solver threads (default: all cores). Output order never changes.
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    #[command(flatten)]
    engine: EngineArgs,
    /// Solve on a colball cluster: the coordinator's URL, for example
    /// `http://127.0.0.1:50051`. The output is the same as in-process.
    #[arg(long, env = colball_client::remote::CONNECT_ENV, value_name = "URL")]
    connect: Option<String>,
    #[command(flatten)]
    job: ClusterJobArgs,
    #[command(flatten)]
    security: SecurityArgs,
}

/// How `--connect` proves itself and checks the coordinator.
#[derive(Args, Debug)]
struct SecurityArgs {
    /// The coordinator's client token (its --client-token), for --connect.
    #[arg(
        long,
        env = colball_client::remote::TOKEN_ENV,
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// Read the client token from a file (surrounding whitespace is dropped).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "token",
        requires = "connect"
    )]
    token_file: Option<PathBuf>,
    /// Also trust this private CA certificate (PEM) for an https://
    /// --connect URL; the public certificate authorities are trusted
    /// without it.
    #[arg(long, value_name = "FILE", requires = "connect")]
    ca: Option<PathBuf>,
    /// The name to check in the coordinator's certificate instead of the
    /// URL's host.
    #[arg(long, value_name = "NAME", requires = "connect")]
    tls_domain: Option<String>,
}

impl SecurityArgs {
    fn security(&self) -> Result<remote::Security> {
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
struct EngineArgs {
    /// Search strategy: `auto` answers repeats from the cache, builds a
    /// distance table for targets shared by enough puzzles, and uses the
    /// bidirectional search for the rest.
    #[arg(long, default_value = "auto", value_parser = strategy_parser())]
    strategy: Strategy,
    /// Most solved puzzles to remember (0 turns the cache off).
    #[arg(long, default_value_t = 1_000_000)]
    cache_entries: usize,
    /// Most MiB of distance tables to keep (a 4x4 table is 15.6 MiB).
    #[arg(long, default_value_t = 64)]
    table_mib: usize,
}

/// `--strategy`: one of the strategies' names, listed in `--help`.
fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = Strategy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Strategy::ALL.map(Strategy::name)).map(|name| {
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_default()
    })
}

impl EngineArgs {
    fn engine(&self, threads: usize) -> Arc<Engine> {
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
enum InputFormat {
    Auto,
    Classic,
    Jsonl,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    Classic,
    Jsonl,
}

#[derive(Args, Debug)]
struct GenArgs {
    /// Board size, or a comma-separated list to draw each case's size from
    /// (`2x2,3x3,4x3`).
    #[arg(long, value_delimiter = ',', default_value = "4x4")]
    size: Vec<Size>,
    /// Number of puzzles.
    #[arg(long, default_value_t = 10)]
    count: usize,
    /// Seed: the same seed gives the same puzzles.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Make each target this many random moves from its start, instead of an
    /// independent uniformly random board.
    #[arg(long)]
    scramble: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Classic)]
    format: OutputFormat,
}

#[derive(Args, Debug)]
struct WatchArgs {
    /// The coordinator's URL, for example `http://127.0.0.1:50051`.
    #[arg(long, env = colball_client::remote::CONNECT_ENV, value_name = "URL")]
    connect: String,
    /// Resume from this event sequence number: events the coordinator
    /// still retains are printed first. Default: only new events.
    #[arg(long, value_name = "SEQ")]
    from: Option<u64>,
    /// `text` for people, `jsonl` for machines (one JSON object per line).
    #[arg(long, value_enum, default_value_t = WatchFormatArg::Text)]
    format: WatchFormatArg,
    /// Leave out the per-puzzle result events.
    #[arg(long)]
    no_results: bool,
    /// Stop after printing this many events.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
    #[command(flatten)]
    security: SecurityArgs,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum WatchFormatArg {
    Text,
    Jsonl,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Uniformly random 4x4 puzzles to time.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// Random puzzles of each size with at most 12 cells to time.
    #[arg(long, default_value_t = 2000)]
    small: usize,
    /// A classic file of far-apart puzzles to time as well, for example
    /// docs/examples/far.in (pairs up to 12 moves apart). It is read and
    /// checked before any timing starts.
    #[arg(long, value_name = "FILE", conflicts_with = "strategies")]
    far: Option<PathBuf>,
    /// Seed for the random puzzles.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Measure the strategies instead: table break-even per size, a batch
    /// sharing one target, a batch with repeats, IDA* against bidirectional
    /// search by distance.
    #[arg(long)]
    strategies: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Solve(args) => solve(args, cli.quiet),
        Command::Grade(args) => grade(args, cli.quiet),
        Command::Gen(args) => generate(args).map(|()| ExitCode::SUCCESS),
        Command::Bench(args) => run_bench(args).map(|()| ExitCode::SUCCESS),
        Command::Watch(args) => run_watch(args).map(|()| ExitCode::SUCCESS),
        Command::Job(args) => job_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) if matches!(e.downcast_ref(), Some(ClientError::Interrupted { .. })) => {
            eprintln!("colball: {e:#}");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("colball: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_watch(args: WatchArgs) -> Result<()> {
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
    let mut out = io::stdout().lock();
    let mut note = |line: &str| eprintln!("colball watch: {line}");
    match runtime.block_on(watch::watch(&options, &mut out, &mut note)) {
        Err(watch::WatchError::Output(e)) => Err(e.into()),
        other => Ok(other?),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<io::Error>()
        .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
}

/// The longest line an input file may have: a puzzle line is a few dozen
/// bytes (a JSON line with a 256-byte id a few hundred).
const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads a file, or standard input for `None` or `-`; returns the bytes and
/// the name to use in messages. Reading stops with an error naming the line
/// at the first line longer than [`MAX_LINE_BYTES`] (so `/dev/zero` or a
/// binary file is refused after a mebibyte, not read whole).
fn read_input(path: Option<&PathBuf>) -> Result<(Vec<u8>, String)> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            let name = p.display().to_string();
            let file =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let bytes = read_capped(file, &name)?;
            Ok((bytes, name))
        }
        _ => {
            let name = "<stdin>".to_string();
            let bytes = read_capped(io::stdin().lock(), &name)?;
            Ok((bytes, name))
        }
    }
}

/// Reads `from` to its end, refusing a line longer than [`MAX_LINE_BYTES`].
fn read_capped(mut from: impl Read, name: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    // The current line: its number and the bytes of it read so far.
    let mut line = 1usize;
    let mut line_len = 0usize;
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {name}")),
        };
        let mut pieces = chunk[..n].split(|&b| b == b'\n');
        line_len += pieces.next().map_or(0, <[u8]>::len);
        for piece in pieces {
            if line_len > MAX_LINE_BYTES {
                break;
            }
            line += 1;
            line_len = piece.len();
        }
        if line_len > MAX_LINE_BYTES {
            anyhow::bail!(
                "{name}:{line}: line {line} is longer than {} MiB; this is not a puzzle file",
                MAX_LINE_BYTES >> 20
            );
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}

/// One entry of the output, in input order: a puzzle to solve or a line that
/// could not be read.
enum Entry {
    Puzzle { id: String },
    Error(jsonl::LineError),
}

fn grade(args: GradeArgs, quiet: bool) -> Result<ExitCode> {
    use colball_client::grade::{self, Backend, GradeError, ReportFormat};
    if args.puzzles.as_os_str() == "-" && args.answers.as_os_str() == "-" {
        eprintln!("colball: only one of PUZZLES and ANSWERS can be standard input (-)");
        return Ok(ExitCode::from(2));
    }
    let (puzzles, name) = read_input(Some(&args.puzzles))?;
    let (answers, _) = read_input(Some(&args.answers))?;
    let backend = match args.connect {
        Some(url) => Backend::Remote {
            url,
            security: Box::new(args.security.security()?),
            run: args.job.run(),
        },
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

fn solve(args: SolveArgs, quiet: bool) -> Result<ExitCode> {
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
    let progress = colball_client::progress::Progress::new(puzzles.len(), quiet, "solving");
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
    let mut emit = |solution: &Solution,
                    strategy: &str,
                    elapsed: std::time::Duration|
     -> io::Result<()> {
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
        let security = args.security.security()?;
        let named: Vec<(String, Puzzle)> = ids.into_iter().zip(puzzles.iter().copied()).collect();
        let mut notice = |m: &str| progress.eprintln(&format!("colball: {m}"));
        jobs::solve_in_order(url, &security, &args.job.run(), &named, &mut notice, |r| {
            emit(&r.solution, &r.strategy, r.elapsed)
        })
        .map_err(|e| match e {
            remote::SolveError::Output(e) => anyhow::Error::from(e),
            remote::SolveError::Client(e) => anyhow::Error::from(e),
        })?;
    } else {
        let engine = args.engine.engine(threads);
        local::solve_in_order(&puzzles, threads, &engine, |solved: Solved| {
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

fn generate(args: GenArgs) -> Result<()> {
    let mut g = Generator::new(args.seed);
    let mut out = BufWriter::new(io::stdout().lock());
    for i in 0..args.count {
        let size = g.pick(&args.size);
        let puzzle = g.puzzle(size, args.scramble);
        match args.format {
            OutputFormat::Classic => out.write_all(classic::format_case(&puzzle).as_bytes())?,
            OutputFormat::Jsonl => writeln!(
                out,
                "{}",
                serde_json::json!({
                    "id": (i + 1).to_string(),
                    "start": puzzle.start().rows(),
                    "target": puzzle.target().rows(),
                })
            )?,
        }
    }
    if args.format == OutputFormat::Classic {
        writeln!(out, "0")?;
    }
    out.flush()?;
    Ok(())
}

fn run_bench(args: BenchArgs) -> Result<()> {
    if args.strategies {
        return bench_strategies(&args);
    }
    // The far file first: a mistyped name fails at once, not after the
    // timing of everything before it.
    let far = match &args.far {
        Some(path) => {
            let (bytes, name) = read_input(Some(path))?;
            let cases = classic::parse(&bytes)
                .map_err(|e| anyhow::anyhow!("{name}:{}: {}", e.line, e.kind))?;
            anyhow::ensure!(!cases.is_empty(), "{name} holds no case to time");
            let label = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            Some((
                label,
                cases.into_iter().map(|c| c.puzzle).collect::<Vec<_>>(),
            ))
        }
        None => None,
    };
    let mut search = BidirSearch::new();
    let mut g = Generator::new(args.seed);
    let size4 = Size::new(4, 4).expect("legal");
    // Warm up: the first 4x4 solve allocates and touches the table.
    let began = Instant::now();
    search.solve(&g.uniform(size4));
    let first = began.elapsed();
    let warm: Vec<Puzzle> = (0..20).map(|_| g.uniform(size4)).collect();
    bench::time_each(&mut search, &warm);

    let header = |title: &str| {
        println!(
            "{title:<24} {:>7} {:>11} {:>11} {:>11} {:>11}",
            "count", "mean", "p50", "p99", "max"
        )
    };
    println!("colball bench: bidirectional search, 1 thread\n");
    header("set");
    let uniform: Vec<Puzzle> = (0..args.count).map(|_| g.uniform(size4)).collect();
    let (stats, by_distance) = bench::time_each(&mut search, &uniform);
    println!("{:<24} {stats}", "4x4 uniform");
    if let Some((label, far)) = &far {
        println!("{:<24} {}", label, bench::time_each(&mut search, far).0);
    }
    let mut all_small = Vec::new();
    for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
        let set: Vec<Puzzle> = (0..args.small).map(|_| g.uniform(size)).collect();
        println!(
            "{:<24} {}",
            format!("{size} uniform"),
            bench::time_each(&mut search, &set).0
        );
        all_small.extend(set);
    }
    println!(
        "{:<24} {}",
        "all <= 12 cells",
        bench::time_each(&mut search, &all_small).0
    );

    println!();
    header("4x4 uniform by distance");
    for (d, stats) in by_distance {
        println!("{:<24} {stats}", format!("{d} moves"));
    }
    println!();
    println!("first 4x4 solve (allocates the table): {}", human(first));
    println!(
        "search memory: {:.1} MiB per thread",
        search.memory_bytes() as f64 / (1 << 20) as f64,
    );
    if let Some(rss) = bench::peak_rss_bytes() {
        println!(
            "peak RSS of this process: {:.1} MiB",
            rss as f64 / (1 << 20) as f64
        );
    }
    Ok(())
}

fn bench_strategies(args: &BenchArgs) -> Result<()> {
    use colball_client::bench::strategies as s;
    let threads = local::default_threads();
    println!("colball bench --strategies (one solver thread unless said)\n");
    println!("distance tables: build time, time per puzzle, break-even");
    println!(
        "{:<6} {:>12} {:>12} {:>11} {:>11} {:>11}",
        "size",
        "build 1 thr",
        format!("build {threads} thr"),
        "bidir",
        "table",
        "break-even"
    );
    for size in Size::ALL {
        let b = s::break_even(size, 300, threads, args.seed);
        println!(
            "{:<6} {:>12} {:>12} {:>11} {:>11} {:>11}",
            size.to_string(),
            human(b.build_one),
            human(b.build_all),
            human(b.bidir),
            human(b.table),
            b.break_even
        );
    }

    println!(
        "\n{} 4x4 puzzles sharing one target, end to end:",
        args.count
    );
    let shared = s::shared_target(args.count, args.seed);
    for strategy in [Strategy::Auto, Strategy::Bidir] {
        let (rate, engine) = s::throughput(&shared, strategy);
        let st = engine.stats();
        println!(
            "  {strategy:<8} {rate:>9.0} puzzles/s  (table builds {}, cache hits {})",
            st.table_builds, st.hits
        );
    }

    println!(
        "\n{} 4x4 puzzles, every second one a repeat under a symmetry:",
        args.count
    );
    let repeats = s::half_repeats(args.count, args.seed);
    let (with_cache, engine) = s::throughput(&repeats, Strategy::Auto);
    let st = engine.stats();
    let (without, _) = s::throughput(&repeats, Strategy::Bidir);
    let no_cache = {
        let engine = Engine::new(EngineConfig {
            strategy: Strategy::Bidir,
            cache: CacheConfig {
                max_entries: 0,
                ..CacheConfig::default()
            },
            ..EngineConfig::default()
        });
        let began = Instant::now();
        let mut solver = colball_solver::Solver::new(engine);
        for p in &repeats {
            std::hint::black_box(solver.solve(p));
        }
        repeats.len() as f64 / began.elapsed().as_secs_f64()
    };
    println!(
        "  auto with cache {with_cache:.0}/s, bidir with cache {without:.0}/s, bidir without cache {no_cache:.0}/s"
    );
    println!(
        "  hit rate {:.1}% ({} hits, {} misses); speedup over no cache {:.2}x",
        100.0 * st.hits as f64 / (st.hits + st.misses).max(1) as f64,
        st.hits,
        st.misses,
        with_cache / no_cache
    );

    println!("\nIDA* against bidirectional search, 4x4, mean per puzzle by distance:");
    println!(
        "{:>8} {:>6} {:>11} {:>11}",
        "distance", "count", "bidir", "idastar"
    );
    for (d, n, bidir, ida) in s::by_distance(20, std::time::Duration::from_secs(2), args.seed) {
        println!(
            "{d:>8} {n:>6} {:>11} {:>11}",
            human(bidir),
            ida.map_or_else(|| "> 2 s".to_string(), human)
        );
    }
    Ok(())
}
