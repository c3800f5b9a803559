//! The measurements behind `colball bench`: time per puzzle on one thread.

use std::fmt;
use std::time::{Duration, Instant};

use colball_solver::{BidirSearch, Puzzle};

/// Timing of one set of puzzles.
#[derive(Clone, Debug)]
pub struct Stats {
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Stats {
    fn from_times(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let count = times.len();
        let pick = |q: f64| {
            if count == 0 {
                Duration::ZERO
            } else {
                times[((count as f64 * q).ceil() as usize).clamp(1, count) - 1]
            }
        };
        let total: Duration = times.iter().sum();
        Stats {
            count,
            mean: if count == 0 {
                Duration::ZERO
            } else {
                total / count as u32
            },
            p50: pick(0.50),
            p99: pick(0.99),
            max: times.last().copied().unwrap_or_default(),
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>7} {:>11} {:>11} {:>11} {:>11}",
            self.count,
            human(self.mean),
            human(self.p50),
            human(self.p99),
            human(self.max)
        )
    }
}

/// A duration with a unit that keeps 3 significant digits readable.
pub fn human(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Solves every puzzle on this thread with `search` and times each one:
/// the statistics of the whole set, and of each distance (`-1` for
/// unreachable) in increasing order. `search` should be warm (its table
/// allocated) for steady-state figures.
pub fn time_each(search: &mut BidirSearch, puzzles: &[Puzzle]) -> (Stats, Vec<(i64, Stats)>) {
    let mut all = Vec::with_capacity(puzzles.len());
    let mut by_distance = std::collections::BTreeMap::<i64, Vec<Duration>>::new();
    for p in puzzles {
        let began = Instant::now();
        let solution = std::hint::black_box(search.solve(std::hint::black_box(p)));
        let elapsed = began.elapsed();
        all.push(elapsed);
        by_distance
            .entry(solution.answer())
            .or_default()
            .push(elapsed);
    }
    let by_distance = by_distance
        .into_iter()
        .map(|(d, times)| (d, Stats::from_times(times)))
        .collect();
    (Stats::from_times(all), by_distance)
}

/// Peak resident memory of this process, where the OS tells it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_ranks() {
        let times = (1..=100).map(Duration::from_millis).collect();
        let s = Stats::from_times(times);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(s.mean, Duration::from_micros(50_500));
    }
}

/// Figures for choosing and checking strategies (`colball bench --strategies`).
pub mod strategies {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use colball_solver::generate::Generator;
    use colball_solver::symmetry::Symmetry;
    use colball_solver::table::DistanceTable;
    use colball_solver::{
        BidirSearch, Engine, EngineConfig, IdaStar, Puzzle, Size, Solver, Strategy,
    };

    fn mean_time(puzzles: &[Puzzle], mut solve: impl FnMut(&Puzzle)) -> Duration {
        let began = Instant::now();
        for p in puzzles {
            solve(p);
        }
        began.elapsed() / puzzles.len().max(1) as u32
    }

    /// Per size: table build time (1 thread and `threads`), mean time per
    /// puzzle by bidirectional search and by table, and the break-even count.
    #[derive(Clone, Debug)]
    pub struct BreakEven {
        pub size: Size,
        pub build_one: Duration,
        pub build_all: Duration,
        pub bidir: Duration,
        pub table: Duration,
        pub break_even: u64,
    }

    pub fn break_even(size: Size, samples: usize, threads: usize, seed: u64) -> BreakEven {
        let mut g = Generator::new(seed);
        let target = g.board(size);
        let puzzles: Vec<Puzzle> = (0..samples)
            .map(|_| Puzzle::new(g.board(size), target).expect("same size"))
            .collect();
        let began = Instant::now();
        let table = DistanceTable::build(target, 1);
        let build_one = began.elapsed();
        let began = Instant::now();
        DistanceTable::build(target, threads);
        let build_all = began.elapsed();
        let mut search = BidirSearch::new();
        search.solve(&puzzles[0]);
        let bidir = mean_time(&puzzles, |p| {
            std::hint::black_box(search.solve(p));
        });
        let table_time = mean_time(&puzzles, |p| {
            std::hint::black_box(table.solve(p));
        });
        let saved = bidir.saturating_sub(table_time).as_nanos().max(1);
        BreakEven {
            size,
            build_one,
            build_all,
            bidir,
            table: table_time,
            break_even: (build_one.as_nanos() / saved) as u64,
        }
    }

    /// End-to-end throughput (puzzles per second) of one thread on `puzzles`
    /// with a fresh engine of `strategy` (cache, tables and all).
    pub fn throughput(puzzles: &[Puzzle], strategy: Strategy) -> (f64, Arc<Engine>) {
        let engine = Engine::new(EngineConfig {
            strategy,
            ..EngineConfig::default()
        });
        let began = Instant::now();
        engine.announce(puzzles);
        let mut solver = Solver::new(engine.clone());
        for p in puzzles {
            std::hint::black_box(solver.solve(p));
        }
        (puzzles.len() as f64 / began.elapsed().as_secs_f64(), engine)
    }

    /// `count` 4x4 puzzles with one shared target.
    pub fn shared_target(count: usize, seed: u64) -> Vec<Puzzle> {
        let size = Size::new(4, 4).expect("legal");
        let mut g = Generator::new(seed);
        let target = g.board(size);
        (0..count)
            .map(|_| Puzzle::new(g.board(size), target).expect("same size"))
            .collect()
    }

    /// `count` 4x4 puzzles of which every second one repeats an earlier one
    /// under a random symmetry.
    pub fn half_repeats(count: usize, seed: u64) -> Vec<Puzzle> {
        let size = Size::new(4, 4).expect("legal");
        let mut g = Generator::new(seed);
        let symmetries: Vec<Symmetry> = Symmetry::all().collect();
        let mut puzzles: Vec<Puzzle> = Vec::with_capacity(count);
        for i in 0..count {
            if i % 2 == 1 {
                let earlier = puzzles[g.index(puzzles.len())];
                let sym = symmetries[g.index(symmetries.len())];
                puzzles.push(sym.puzzle(&earlier));
            } else {
                puzzles.push(g.uniform(size));
            }
        }
        puzzles
    }

    /// Mean time per puzzle of IDA* and of bidirectional search, by
    /// distance, on 4x4 puzzles scrambled by 0..=12 moves. IDA* stops being
    /// measured at a distance once one of its solves takes over `cap`.
    pub fn by_distance(
        per_distance: usize,
        cap: Duration,
        seed: u64,
    ) -> Vec<(usize, usize, Duration, Option<Duration>)> {
        let size = Size::new(4, 4).expect("legal");
        let mut g = Generator::new(seed);
        let mut bidir = BidirSearch::new();
        let mut buckets: Vec<Vec<Puzzle>> = vec![Vec::new(); 14];
        let mut tries = 0;
        while buckets.iter().take(13).any(|b| b.len() < per_distance) && tries < 200_000 {
            tries += 1;
            let k = tries % 13;
            let p = if k >= 11 {
                g.uniform(size)
            } else {
                g.scrambled(size, k)
            };
            let d = bidir.solve(&p).distance().expect("4x4 is connected");
            if buckets[d].len() < per_distance {
                buckets[d].push(p);
            }
        }
        let mut ida = IdaStar::new();
        let mut ida_ok = true;
        buckets
            .iter()
            .enumerate()
            .filter(|(_, b)| !b.is_empty())
            .map(|(d, puzzles)| {
                let b = mean_time(puzzles, |p| {
                    std::hint::black_box(bidir.solve(p));
                });
                let i = if ida_ok {
                    let mut worst = Duration::ZERO;
                    let mean = mean_time(puzzles, |p| {
                        let began = Instant::now();
                        if worst <= cap {
                            std::hint::black_box(ida.solve(p));
                        }
                        worst = worst.max(began.elapsed());
                    });
                    ida_ok = worst <= cap;
                    ida_ok.then_some(mean)
                } else {
                    None
                };
                (d, puzzles.len(), b, i)
            })
            .collect()
    }
}
