//! IDA*: iterative-deepening depth-first search with admissible bounds.
//!
//! It needs almost no memory (the path and a few tables), so it suits
//! machines or threads that cannot spare a visited table. Its lower bound on
//! the remaining moves is the largest of:
//!
//! - **window cover**: the fewest 2x2 windows whose union covers every cell
//!   that differs from the target (each move changes only its window's
//!   cells, so every differing cell lies in some moved window); this is
//!   never below `ceil(differing cells / 4)`, the bound the statement
//!   suggests, and is precomputed per size for every mask of cells;
//! - **colour counts**: a rotation keeps the number of balls of each colour,
//!   a recolour moves at most four balls between colours, so at least
//!   `ceil(excess / 4)` recolours are needed, where `excess` is how many balls
//!   must change colour class; and since each recolour adds 1 (mod 3) to the
//!   sum of all cells' colour values, the number of recolours is also
//!   congruent to the change of that sum, mod 3: the bound is the smallest
//!   number that is both.
//!
//! Move orders are pruned as in the bidirectional search (commuting moves in
//! one order only), and a move is not applied a fourth time in a row for a
//! rotation or a third time for a recolour (those return to an earlier
//! board). In a depth-first search the first rule is safe because every move
//! sequence can be rearranged, keeping its length, into one where no two
//! adjacent commuting moves are out of order.

use crate::board::{Board, Puzzle, Size};
use crate::moves::{MoveTable, RECOLOUR_MOVES};

use super::Solution;

/// A reusable IDA* search; keeps its per-size tables between puzzles.
#[derive(Debug, Default)]
pub struct IdaStar {
    sizes: Vec<SizeTables>,
    path: Vec<u8>,
    /// Nodes expanded by the last solve (for measurements).
    nodes: u64,
}

#[derive(Debug)]
struct SizeTables {
    moves: MoveTable,
    /// `cover[mask]`: fewest windows covering the cells of `mask`.
    cover: Vec<u8>,
}

impl SizeTables {
    fn new(size: Size) -> SizeTables {
        let moves = MoveTable::new(size);
        let cells = size.cells();
        let windows: Vec<u32> = (0..size.windows())
            .map(|w| {
                let mv = moves.get(2 * w);
                let (r, c) = (mv.row as usize - 1, mv.col as usize - 1);
                let cols = size.cols();
                [
                    (r - 1) * cols + c - 1,
                    (r - 1) * cols + c,
                    r * cols + c - 1,
                    r * cols + c,
                ]
                .iter()
                .fold(0u32, |m, &cell| m | 1 << cell)
            })
            .collect();
        // cover[m] = 1 + min over windows w holding m's lowest cell of
        // cover[m & !w]: that cell must be covered by one of them.
        let mut cover = vec![0u8; 1 << cells];
        for mask in 1..(1usize << cells) {
            let low = 1u32 << (mask as u32).trailing_zeros();
            cover[mask] = windows
                .iter()
                .filter(|&&w| w & low != 0)
                .map(|&w| cover[mask & !(w as usize)] + 1)
                .min()
                .expect("every cell lies in some window");
        }
        SizeTables { moves, cover }
    }
}

/// Cells of a packed board, as a bit per cell, where `a` and `b` differ.
#[inline(always)]
fn differing_cells(a: u32, b: u32) -> usize {
    let x = a ^ b;
    let mut m = (x | (x >> 1)) & 0x5555_5555;
    m = (m | (m >> 1)) & 0x3333_3333;
    m = (m | (m >> 2)) & 0x0F0F_0F0F;
    m = (m | (m >> 4)) & 0x00FF_00FF;
    m = (m | (m >> 8)) & 0x0000_FFFF;
    m as usize
}

/// Balls of each colour: (red, blue, green), for a board of `cells` cells.
#[inline(always)]
fn colour_counts(s: u32, cells: u32) -> [u32; 3] {
    let lo = s & 0x5555_5555;
    let hi = (s >> 1) & 0x5555_5555;
    let blue = lo.count_ones();
    let green = hi.count_ones();
    [cells - blue - green, blue, green]
}

/// The colour-count bound: recolours needed between `s` and `t`.
#[inline(always)]
fn colour_bound(s: u32, t: u32, cells: u32) -> u8 {
    let (a, b) = (colour_counts(s, cells), colour_counts(t, cells));
    let excess: u32 = (0..3).map(|c| b[c].saturating_sub(a[c])).sum();
    let sum = |n: [u32; 3]| n[1] + 2 * n[2];
    let residue = (sum(b) + 3 * cells - sum(a)) % 3;
    let mut k = excess.div_ceil(4);
    while k % 3 != residue {
        k += 1;
    }
    k as u8
}

impl IdaStar {
    pub fn new() -> IdaStar {
        IdaStar::default()
    }

    /// Nodes expanded by the last solve.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// The lower bound on the distance of `puzzle`.
    pub fn lower_bound(&mut self, puzzle: &Puzzle) -> u8 {
        let size = puzzle.size();
        let tables = self.tables(size);
        bound(
            tables,
            puzzle.start().packed(),
            puzzle.target().packed(),
            size.cells() as u32,
        )
    }

    fn tables(&mut self, size: Size) -> &SizeTables {
        let i = self.tables_index(size);
        &self.sizes[i]
    }

    /// Where the tables for `size` are in `self.sizes`, built on first use.
    fn tables_index(&mut self, size: Size) -> usize {
        match self.sizes.iter().position(|t| t.moves.size() == size) {
            Some(i) => i,
            None => {
                self.sizes.push(SizeTables::new(size));
                self.sizes.len() - 1
            }
        }
    }

    /// Solves one puzzle exactly. On 2x2, where some targets cannot be
    /// reached, it first checks reachability (the 12 boards a start can
    /// reach are its 4 rotations times 3 recolourings).
    pub fn solve(&mut self, puzzle: &Puzzle) -> Solution {
        self.solve_within(puzzle, u8::MAX)
            .expect("without a depth limit every reachable puzzle is solved")
    }

    /// Solves one puzzle exactly if its distance is at most `max_depth`;
    /// `None` means it is farther (unreachable puzzles are answered).
    pub fn solve_within(&mut self, puzzle: &Puzzle, max_depth: u8) -> Option<Solution> {
        let size = puzzle.size();
        let (start, target) = (puzzle.start().packed(), puzzle.target().packed());
        if size.windows() == 1 && !reachable_2x2(puzzle.start(), puzzle.target()) {
            return Some(Solution::Unreachable);
        }
        let cells = size.cells() as u32;
        let i = self.tables_index(size);
        let tables = &self.sizes[i];
        self.nodes = 0;
        let mut limit = bound(tables, start, target, cells);
        loop {
            if limit > max_depth {
                return None;
            }
            self.path.clear();
            let mut dfs = Dfs {
                tables,
                target,
                cells,
                path: &mut self.path,
                nodes: 0,
            };
            let next = dfs.search(start, 0, limit, u8::MAX, 0);
            self.nodes += dfs.nodes;
            match next {
                Found::Yes => break,
                Found::No(next_limit) => limit = next_limit,
            }
        }
        Some(Solution::Solved(
            self.path
                .iter()
                .map(|&m| tables.moves.get(m as usize))
                .collect(),
        ))
    }
}

fn bound(tables: &SizeTables, s: u32, t: u32, cells: u32) -> u8 {
    tables.cover[differing_cells(s, t)].max(colour_bound(s, t, cells))
}

fn reachable_2x2(start: Board, target: Board) -> bool {
    let moves = MoveTable::new(start.size());
    let mut s = start.packed();
    for _ in 0..4 {
        let mut c = s;
        for _ in 0..3 {
            if c == target.packed() {
                return true;
            }
            c = moves.apply(c, 1);
        }
        s = moves.apply(s, 0);
    }
    false
}

enum Found {
    Yes,
    /// Not within the limit; the smallest bound that exceeded it.
    No(u8),
}

struct Dfs<'a> {
    tables: &'a SizeTables,
    target: u32,
    cells: u32,
    path: &'a mut Vec<u8>,
    nodes: u64,
}

impl Dfs<'_> {
    /// `run` counts how many times `last` was just applied in a row.
    fn search(&mut self, s: u32, depth: u8, limit: u8, last: u8, run: u8) -> Found {
        if s == self.target {
            return Found::Yes;
        }
        self.nodes += 1;
        let moves = &self.tables.moves;
        let mut allowed = (1u32 << moves.len()) - 1;
        if last != u8::MAX {
            allowed &= !moves.redundant_after(last as usize);
            let is_recolour = RECOLOUR_MOVES >> last & 1 == 1;
            if run + 1 == if is_recolour { 3 } else { 4 } {
                allowed &= !(1 << last);
            }
        }
        let mut next_limit = u8::MAX;
        while allowed != 0 {
            let m = allowed.trailing_zeros() as u8;
            allowed &= allowed - 1;
            let t = moves.apply(s, m as usize);
            let f = depth + 1 + bound(self.tables, t, self.target, self.cells);
            if f > limit {
                next_limit = next_limit.min(f);
                continue;
            }
            self.path.push(m);
            let run = if m == last { run + 1 } else { 1 };
            match self.search(t, depth + 1, limit, m, run) {
                Found::Yes => return Found::Yes,
                Found::No(n) => next_limit = next_limit.min(n),
            }
            self.path.pop();
        }
        Found::No(next_limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Generator;
    use crate::search::BidirSearch;

    #[test]
    fn agrees_with_bidirectional_search() {
        let mut g = Generator::new(12);
        let mut ida = IdaStar::new();
        let mut bidir = BidirSearch::new();
        for size in Size::ALL {
            for k in 0..40 {
                let p = if size.cells() <= 9 {
                    g.uniform(size)
                } else {
                    g.scrambled(size, k % 8)
                };
                let got = ida.solve(&p);
                assert_eq!(got.distance(), bidir.solve(&p).distance(), "{size} {p:?}");
                if let Some(path) = got.path() {
                    assert_eq!(crate::apply_moves(p.start(), path).unwrap(), p.target());
                }
            }
        }
    }

    #[test]
    fn a_depth_limit_answers_near_puzzles_only() {
        let mut g = Generator::new(14);
        let mut ida = IdaStar::new();
        let mut bidir = BidirSearch::new();
        let size = Size::new(4, 4).unwrap();
        for k in 0..60 {
            let p = g.scrambled(size, k % 9);
            let d = bidir.solve(&p).distance().unwrap();
            let got = ida.solve_within(&p, 4);
            assert_eq!(got.is_some(), d <= 4);
            if let Some(s) = got {
                assert_eq!(s.distance(), Some(d));
            }
        }
    }

    #[test]
    fn bounds_never_exceed_the_distance() {
        let mut g = Generator::new(13);
        let mut ida = IdaStar::new();
        let mut bidir = BidirSearch::new();
        for size in Size::ALL {
            for _ in 0..300 {
                let p = g.uniform(size);
                if let Some(d) = bidir.solve(&p).distance() {
                    assert!(ida.lower_bound(&p) as usize <= d, "{size} {p:?}");
                }
            }
        }
    }

    #[test]
    fn window_cover_is_at_least_a_quarter_of_the_cells() {
        let tables = SizeTables::new(Size::new(4, 4).unwrap());
        for mask in 0..(1usize << 16) {
            assert!(tables.cover[mask] as u32 >= (mask.count_ones()).div_ceil(4));
        }
        assert_eq!(tables.cover[0xFFFF], 4);
    }
}
