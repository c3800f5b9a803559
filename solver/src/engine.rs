//! Choosing a strategy per puzzle, and sharing what was learnt.
//!
//! An [`Engine`] is shared (in an `Arc`) by all solver threads of a process:
//! it holds the configuration, the solution cache, the distance tables and
//! the count of puzzles announced per target. Each thread owns a [`Solver`]
//! with its own search buffers and asks the engine before and after every
//! search.
//!
//! `auto` decides per puzzle: a cached answer if there is one; a distance
//! table if one is built for the puzzle's (canonical) target, or if enough
//! puzzles with that target were announced for a table to pay for itself
//! ([`break_even`]); IDA* if the puzzle turns out to be at most
//! [`IDA_STAR_MAX_DEPTH`] moves apart; otherwise the bidirectional search. A
//! puzzle whose target is not worth a table never waits for one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use dashmap::DashMap;

use crate::board::{Board, Puzzle, Size};
use crate::cache::{self, CacheConfig, CacheStats, SolutionCache, TableCache, TableKey};
use crate::moves::{Move, MoveTable};
use crate::search::{BidirSearch, IdaStar, Solution};
use crate::symmetry::{Symmetry, canonical};

/// How to solve: chosen by the user.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Cache, then a table where it pays, else bidirectional search.
    #[default]
    Auto,
    Bidir,
    IdaStar,
    /// A distance table per target, built on first use.
    Table,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::Auto,
        Strategy::Bidir,
        Strategy::IdaStar,
        Strategy::Table,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::Bidir => "bidir",
            Strategy::IdaStar => "idastar",
            Strategy::Table => "table",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Strategy, String> {
        Strategy::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown strategy {s:?}: expected auto, bidir, idastar or table")
            })
    }
}

/// What actually produced an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    Cache,
    Bidir,
    IdaStar,
    Table,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Cache => "cache",
            Method::Bidir => "bidir",
            Method::IdaStar => "idastar",
            Method::Table => "table",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An answer and how it was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub solution: Solution,
    pub method: Method,
}

/// How many puzzles must share a target before building its distance table
/// beats solving them one by one with the bidirectional search: the table's
/// build time divided by the time it saves per puzzle. Measured on the
/// development machine with `colball bench --strategies` (one thread; see
/// docs/PERFORMANCE.md), rounded; 4x4's measured 1,842.
pub fn break_even(size: Size) -> u64 {
    match size.cells() {
        4 => 30,
        6 => 400,
        8 | 9 => 150,
        12 => 650,
        _ => 2_000,
    }
}

/// Up to this distance IDA* beats the bidirectional search (4x4: about 2x
/// at distances 1 to 4, slower from 5 on; see docs/PERFORMANCE.md), so
/// `auto` first tries IDA* limited to this depth when the lower bound allows
/// it. A failed attempt costs a few microseconds.
pub const IDA_STAR_MAX_DEPTH: u8 = 4;

/// Most targets whose announced counts the engine keeps (small in unit
/// tests, so that the bound is exercised).
const MAX_DEMAND_ENTRIES: usize = if cfg!(test) { 1_000 } else { 1 << 20 };

/// Settings of an [`Engine`].
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub strategy: Strategy,
    pub cache: CacheConfig,
    /// Threads a table build may use (the threads that would otherwise wait
    /// for it).
    pub table_threads: usize,
    /// Boards with fewer cells skip the solution cache: solving them is
    /// cheaper than finding their canonical form.
    pub min_cache_cells: usize,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            strategy: Strategy::Auto,
            cache: CacheConfig::default(),
            table_threads: 1,
            min_cache_cells: 9,
        }
    }
}

/// State shared by all solver threads of a process.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    solutions: SolutionCache,
    tables: TableCache,
    /// Puzzles announced per canonical target (a worker announces every
    /// task it receives: hashed with foldhash, seeded, as the cache).
    demand: DashMap<TableKey, u64, foldhash::quality::RandomState>,
    solved: [AtomicU64; 4],
}

impl Engine {
    pub fn new(config: EngineConfig) -> Arc<Engine> {
        Arc::new(Engine {
            solutions: SolutionCache::new(&config.cache),
            tables: TableCache::new(&config.cache),
            config,
            demand: DashMap::default(),
            solved: Default::default(),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Tells the engine about puzzles it is about to solve, so that `auto`
    /// can see which targets many of them share. Call it with each batch (or
    /// each chunk of a stream) before solving it.
    pub fn announce<'a>(&self, puzzles: impl IntoIterator<Item = &'a Puzzle>) {
        self.update_demand(puzzles, |n| *n += 1);
    }

    /// Announces one puzzle, and tells the engine that about `count`
    /// puzzles with its target are on their way, when whoever holds the
    /// whole batch knows more than the puzzles announced so far (a worker is
    /// sent a few at a time): the target's announced count goes up by one,
    /// and to at least `count`.
    pub fn announce_hinted(&self, puzzle: &Puzzle, count: u64) {
        self.update_demand([puzzle], |n| *n = (*n + 1).max(count));
    }

    /// Applies `update` to the announced count of each puzzle's canonical
    /// target (only `auto` counts), keeping the counts bounded.
    fn update_demand<'a>(
        &self,
        puzzles: impl IntoIterator<Item = &'a Puzzle>,
        update: impl Fn(&mut u64),
    ) {
        if self.config.strategy != Strategy::Auto {
            return;
        }
        let mut grew = false;
        for p in puzzles {
            let (target, _) = canonical_target(p.target());
            match self.demand.entry(table_key(target)) {
                dashmap::Entry::Occupied(mut known) => update(known.get_mut()),
                dashmap::Entry::Vacant(new) => {
                    let mut n = 0;
                    update(&mut n);
                    new.insert(n);
                    grew = true;
                }
            }
        }
        // Bounded: a long-running worker sees endless distinct targets. Past
        // the limit, targets seen once are forgotten (they are far from any
        // break-even), and if that is not enough, all counts start afresh.
        // (Counted only when a target was added: `len` visits every shard.)
        if grew && self.demand.len() > MAX_DEMAND_ENTRIES {
            self.demand.retain(|_, n| *n > 1);
            if self.demand.len() > MAX_DEMAND_ENTRIES / 2 {
                self.demand.clear();
            }
        }
    }

    /// Cache counters.
    pub fn stats(&self) -> CacheStats {
        cache::stats(&self.solutions, &self.tables)
    }

    /// Puzzles answered so far by each method: cache, bidir, idastar, table.
    pub fn solved_by(&self) -> [(Method, u64); 4] {
        [Method::Cache, Method::Bidir, Method::IdaStar, Method::Table]
            .map(|m| (m, self.solved[m as usize].load(Relaxed)))
    }
}

fn table_key(target: Board) -> TableKey {
    TableKey {
        size: target.size(),
        target: target.packed(),
    }
}

/// The canonical form of a target under the symmetries that keep it a
/// target, and the symmetry that gives it.
fn canonical_target(target: Board) -> (Board, Symmetry) {
    Symmetry::target_images(target)
        .into_iter()
        .min_by_key(|(b, _)| (b.size(), b.packed()))
        .expect("there is always the identity")
}

fn to_indices(size: Size, path: &[Move]) -> Vec<u8> {
    path.iter()
        .map(|&m| MoveTable::index_of(size, m).expect("solutions use moves of their size") as u8)
        .collect()
}

fn to_moves(size: Size, path: &[u8]) -> Vec<Move> {
    path.iter()
        .map(|&i| MoveTable::move_at(size, i as usize))
        .collect()
}

/// One thread's solver: its own search buffers, the shared engine.
#[derive(Debug)]
pub struct Solver {
    engine: Arc<Engine>,
    bidir: BidirSearch,
    ida: IdaStar,
}

impl Solver {
    pub fn new(engine: Arc<Engine>) -> Solver {
        Solver {
            engine,
            bidir: BidirSearch::new(),
            ida: IdaStar::new(),
        }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Solves with the engine's strategy.
    pub fn solve(&mut self, puzzle: &Puzzle) -> Answer {
        let strategy = self.engine.config.strategy;
        self.solve_with(puzzle, strategy)
    }

    /// Solves with `strategy`, using and feeding the shared caches.
    pub fn solve_with(&mut self, puzzle: &Puzzle, strategy: Strategy) -> Answer {
        let size = puzzle.size();
        let engine = Arc::clone(&self.engine);
        let cached = engine.solutions.enabled() && size.cells() >= engine.config.min_cache_cells;
        let key = cached.then(|| canonical(puzzle, Symmetry::all()));
        if let Some((key, sym)) = &key {
            if let Some(path) = engine.solutions.get(key) {
                let solution = match path {
                    Some(p) => Solution::Solved(to_moves(size, &sym.path_back(size, &p))),
                    None => Solution::Unreachable,
                };
                return self.answered(solution, Method::Cache);
            }
        }
        let (solution, method) = match strategy {
            Strategy::Bidir => (self.bidir.solve(puzzle), Method::Bidir),
            Strategy::IdaStar => (self.ida.solve(puzzle), Method::IdaStar),
            Strategy::Table => (self.via_table(puzzle, true), Method::Table),
            Strategy::Auto => {
                let (target, _) = canonical_target(puzzle.target());
                let wanted = engine
                    .demand
                    .get(&table_key(target))
                    .is_some_and(|n| *n >= break_even(size));
                if let Some(solution) = self.try_table(puzzle, wanted) {
                    (solution, Method::Table)
                } else if let Some(solution) = (self.ida.lower_bound(puzzle) <= IDA_STAR_MAX_DEPTH)
                    .then(|| self.ida.solve_within(puzzle, IDA_STAR_MAX_DEPTH))
                    .flatten()
                {
                    (solution, Method::IdaStar)
                } else {
                    (self.bidir.solve(puzzle), Method::Bidir)
                }
            }
        };
        if let Some((key, sym)) = key {
            let path = solution
                .path()
                .map(|p| Arc::from(sym.path_forward(size, &to_indices(size, p))));
            engine.solutions.insert(key, path);
        }
        self.answered(solution, method)
    }

    fn answered(&self, solution: Solution, method: Method) -> Answer {
        self.engine.solved[method as usize].fetch_add(1, Relaxed);
        Answer { solution, method }
    }

    fn via_table(&mut self, puzzle: &Puzzle, build: bool) -> Solution {
        self.try_table(puzzle, build)
            .expect("a table is built when asked to")
    }

    /// Solves through the table of the puzzle's canonical target: one that
    /// exists, or (with `build`) one built now.
    fn try_table(&mut self, puzzle: &Puzzle, build: bool) -> Option<Solution> {
        let (target, sym) = canonical_target(puzzle.target());
        let tables = &self.engine.tables;
        let table = if build {
            tables.get_or_build(target, self.engine.config.table_threads)
        } else {
            tables.get(target)?
        };
        let turned = sym.puzzle(puzzle);
        let solution = table.solve(&turned);
        Some(match solution.path() {
            Some(p) => {
                let size = turned.size();
                let back = sym.path_back(puzzle.size(), &to_indices(size, p));
                Solution::Solved(to_moves(puzzle.size(), &back))
            }
            None => Solution::Unreachable,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Generator;

    fn check(p: &Puzzle, a: &Answer, expected: Option<usize>) {
        assert_eq!(a.solution.distance(), expected, "{p:?} by {}", a.method);
        if let Some(path) = a.solution.path() {
            assert_eq!(crate::apply_moves(p.start(), path).unwrap(), p.target());
        }
    }

    #[test]
    fn every_strategy_agrees_and_repeats_come_from_the_cache() {
        let mut g = Generator::new(21);
        let mut reference = BidirSearch::new();
        for strategy in Strategy::ALL {
            let engine = Engine::new(EngineConfig {
                strategy,
                ..EngineConfig::default()
            });
            let mut solver = Solver::new(engine.clone());
            for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
                for _ in 0..20 {
                    let p = g.uniform(size);
                    let expected = reference.solve(&p).distance();
                    let first = solver.solve(&p);
                    check(&p, &first, expected);
                    let again = solver.solve(&p);
                    check(&p, &again, expected);
                    if size.cells() >= 9 {
                        assert_eq!(again.method, Method::Cache);
                    }
                }
            }
        }
    }

    #[test]
    fn equivalent_puzzles_hit_one_entry_and_paths_map_back() {
        let mut g = Generator::new(22);
        let engine = Engine::new(EngineConfig::default());
        let mut solver = Solver::new(engine.clone());
        let mut reference = BidirSearch::new();
        for size in [Size::new(3, 4).unwrap(), Size::new(3, 3).unwrap()] {
            let p = g.uniform(size);
            solver.solve(&p);
            for sym in Symmetry::all() {
                let q = sym.puzzle(&p);
                let a = solver.solve(&q);
                assert_eq!(a.method, Method::Cache, "{sym:?}");
                check(&q, &a, reference.solve(&q).distance());
            }
        }
    }

    #[test]
    fn announced_counts_stay_bounded() {
        let engine = Engine::new(EngineConfig::default());
        let size = Size::new(3, 3).unwrap();
        let mut g = Generator::new(24);
        let shared = g.uniform(size);
        engine.announce([&shared, &shared]);
        let lone: Vec<Puzzle> = (0..MAX_DEMAND_ENTRIES + 10)
            .map(|_| g.uniform(size))
            .collect();
        engine.announce(&lone);
        assert!(engine.demand.len() <= MAX_DEMAND_ENTRIES);
        let (target, _) = canonical_target(shared.target());
        assert_eq!(engine.demand.get(&table_key(target)).map(|n| *n), Some(2));
        // Hints are bounded the same way (4x4 targets: all distinct).
        let four = Size::new(4, 4).unwrap();
        for _ in 0..MAX_DEMAND_ENTRIES + 10 {
            engine.announce_hinted(&g.uniform(four), 1);
        }
        assert!(engine.demand.len() <= MAX_DEMAND_ENTRIES);
        assert_eq!(engine.demand.get(&table_key(target)).map(|n| *n), Some(2));
        // A hint raises a count to at least itself, and counts the puzzle.
        engine.announce_hinted(&shared, 40);
        assert_eq!(engine.demand.get(&table_key(target)).map(|n| *n), Some(40));
        engine.announce_hinted(&shared, 3);
        assert_eq!(engine.demand.get(&table_key(target)).map(|n| *n), Some(41));
    }

    #[test]
    fn auto_uses_a_table_only_for_announced_shared_targets() {
        let size = Size::new(3, 3).unwrap();
        let mut g = Generator::new(23);
        let engine = Engine::new(EngineConfig {
            cache: CacheConfig {
                max_entries: 0,
                ..CacheConfig::default()
            },
            ..EngineConfig::default()
        });
        let mut solver = Solver::new(engine.clone());
        let target = g.board(size);
        let shared: Vec<Puzzle> = (0..break_even(size) as usize)
            .map(|_| Puzzle::new(g.board(size), target).unwrap())
            .collect();
        let lone = g.uniform(size);
        engine.announce(shared.iter().chain([&lone]));
        let mut reference = BidirSearch::new();
        for p in &shared[..20] {
            let a = solver.solve(p);
            assert_eq!(a.method, Method::Table);
            check(p, &a, reference.solve(p).distance());
        }
        assert_eq!(solver.solve(&lone).method, Method::Bidir);
        assert_eq!(engine.stats().table_builds, 1);
    }

    #[test]
    fn a_hinted_count_raises_a_target_s_demand_but_never_lowers_it() {
        let size = Size::new(3, 3).unwrap();
        let mut g = Generator::new(25);
        let engine = Engine::new(EngineConfig::default());
        let mut solver = Solver::new(engine.clone());
        let target = g.board(size);
        let first = Puzzle::new(g.board(size), target).unwrap();
        // Announced alone, one puzzle is not worth a table.
        engine.announce([&first]);
        assert_ne!(solver.solve(&first).method, Method::Table);
        // A hint that enough of them are coming is.
        let next = Puzzle::new(g.board(size), target).unwrap();
        engine.announce_hinted(&next, break_even(size));
        assert_eq!(solver.solve(&next).method, Method::Table);
        let (key, _) = canonical_target(target);
        // A smaller hint only counts the puzzle.
        engine.announce_hinted(&next, 1);
        assert_eq!(
            engine.demand.get(&table_key(key)).map(|n| *n),
            Some(break_even(size) + 1)
        );
        // Only `auto` counts demand.
        let bidir = Engine::new(EngineConfig {
            strategy: Strategy::Bidir,
            ..EngineConfig::default()
        });
        bidir.announce_hinted(&next, 1_000_000);
        assert!(bidir.demand.is_empty());
    }
}
