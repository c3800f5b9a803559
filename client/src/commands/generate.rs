//! `colball gen`: random puzzles.

use std::io::{self, BufWriter, Write};

use anyhow::Result;
use clap::Args;
use colball_solver::Size;
use colball_solver::format::classic;
use colball_solver::generate::Generator;

use super::args::OutputFormat;

#[derive(Args, Debug)]
pub(crate) struct GenArgs {
    /// Board size, or a comma-separated list to draw each case's size from
    /// (`2x2,3x3,4x3`).
    #[arg(long, value_delimiter = ',', default_value = "4x4")]
    pub(crate) size: Vec<Size>,
    /// Number of puzzles.
    #[arg(long, default_value_t = 10)]
    pub(crate) count: usize,
    /// Seed: the same seed gives the same puzzles.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Make each target this many random moves from its start, instead of an
    /// independent uniformly random board.
    #[arg(long)]
    pub(crate) scramble: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Classic)]
    pub(crate) format: OutputFormat,
}

pub(crate) fn generate(args: GenArgs) -> Result<()> {
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
