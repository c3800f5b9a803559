//! `colball bench`: solving speed on one thread, and the strategies side
//! by side.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use colball_client::bench::{self, human};
use colball_client::local;
use colball_solver::cache::CacheConfig;
use colball_solver::format::classic;
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Engine, EngineConfig, Puzzle, Size, Strategy};

use super::input::read_input;

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    /// Uniformly random 4x4 puzzles to time.
    #[arg(long, default_value_t = 2000)]
    pub(crate) count: usize,
    /// Random puzzles of each size with at most 12 cells to time.
    #[arg(long, default_value_t = 2000)]
    pub(crate) small: usize,
    /// A classic file of far-apart puzzles to time as well, for example
    /// docs/examples/far.in (pairs up to 12 moves apart). It is read and
    /// checked before any timing starts.
    #[arg(long, value_name = "FILE", conflicts_with = "strategies")]
    pub(crate) far: Option<PathBuf>,
    /// Seed for the random puzzles.
    #[arg(long, default_value_t = 7)]
    pub(crate) seed: u64,
    /// Measure the strategies instead: table break-even per size, a batch
    /// sharing one target, a batch with repeats, IDA* against bidirectional
    /// search by distance.
    #[arg(long)]
    pub(crate) strategies: bool,
}

pub(crate) fn run_bench(args: BenchArgs) -> Result<()> {
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

pub(crate) fn bench_strategies(args: &BenchArgs) -> Result<()> {
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
