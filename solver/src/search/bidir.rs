//! Bidirectional breadth-first search over packed boards.
//!
//! Both sides grow whole layers, always the side whose newest layer is
//! smaller. Every board reached is marked in one flat table indexed by the
//! board's base-3 rank, two bits a board: reached from the start, reached
//! from the target, or not reached. For 4x4 that is 3^16 / 4 bytes, about
//! 10.3 MiB, which stays in the last-level cache where a byte table (41 MiB)
//! would not. The search stops at the first board that one side generates and
//! the other side has already marked. That is exact: both sides hold complete
//! layers, so if the last full layers are `k` (this side) and `j` (the other
//! side) and no board was shared yet, the optimum is at least `k + j + 1`;
//! any meeting found while growing layer `k + 1` gives a path of at most
//! `k + 1 + j` moves.
//!
//! Move orders that provably reach the same board are pruned (see
//! [`MoveTable::redundant_after`]): if `m` is skipped after `l`, the board is
//! also reached through `m, l` with a larger last move, and following such
//! swaps always ends, so every board is still found at its true depth.
//!
//! Speed comes from memory-level parallelism: a layer is grown in chunks;
//! each chunk first computes every successor and its table address and
//! prefetches it, then checks and marks them, so many cache misses are in
//! flight at once instead of one after another.
//!
//! The path is not stored in the table. Each side keeps its boards layer by
//! layer with the move that reached each; walking back from the meeting
//! point looks the board up in its layer (a linear scan of that one layer,
//! done once per move of the answer).
//!
//! The table is allocated once per search object and never cleared in full
//! after a small search: only the marks of the boards a search reached are
//! reset.

use crate::board::Puzzle;
use crate::moves::{MAX_MOVES, Move, MoveTable, RECOLOUR_MOVES};
use crate::rank::rank;

use super::Solution;

/// Two-bit marks.
const FWD: u64 = 1;
const BWD: u64 = 2;
/// `last` of a side's root board: no move reached it, so nothing is pruned.
const ROOT: u8 = u8::MAX;
/// Frontier boards expanded per prefetch batch.
const CHUNK: usize = 64;

/// One direction of the search: every board it reached, layer by layer.
#[derive(Debug, Default)]
struct Side {
    states: Vec<u32>,
    /// The move that reached `states[i]`, or `ROOT`.
    last: Vec<u8>,
    /// `starts[d]` is the index in `states` where layer `d` begins; the last
    /// entry is the start of the newest complete layer (the frontier).
    starts: Vec<usize>,
}

impl Side {
    fn reset(&mut self, root: u32) {
        self.states.clear();
        self.last.clear();
        self.starts.clear();
        self.states.push(root);
        self.last.push(ROOT);
        self.starts.push(0);
    }

    fn frontier(&self) -> std::ops::Range<usize> {
        *self.starts.last().unwrap_or(&0)..self.states.len()
    }

    /// The layer that holds index `pos`.
    fn layer_of(&self, pos: usize) -> usize {
        self.starts.partition_point(|&s| s <= pos) - 1
    }

    /// Index range of layer `d`.
    fn layer(&self, d: usize) -> std::ops::Range<usize> {
        self.starts[d]..self.starts.get(d + 1).copied().unwrap_or(self.states.len())
    }

    /// The moves along this side's path to `board`: from the root to `board`
    /// for the forward side, from `board` to the root (the target) for the
    /// backward side.
    fn trace(&self, table: &MoveTable, mut board: u32, backward: bool) -> Vec<usize> {
        let find = |range: std::ops::Range<usize>, board: u32| {
            let offset = self.states[range.clone()].iter().position(|&s| s == board);
            range.start + offset.expect("every board on a path was reached by its side")
        };
        let mut pos = find(0..self.states.len(), board);
        let mut depth = self.layer_of(pos);
        let mut moves = Vec::with_capacity(depth);
        while depth > 0 {
            let m = self.last[pos] as usize;
            moves.push(m);
            board = if backward {
                table.apply(board, m)
            } else {
                table.apply_inverse(board, m)
            };
            depth -= 1;
            pos = find(self.layer(depth), board);
        }
        if !backward {
            moves.reverse();
        }
        moves
    }
}

/// Where the two sides met: the forward side reached `fwd`, the backward
/// side reached `bwd`, and move `mv` turns `fwd` into `bwd`.
#[derive(Clone, Copy, Debug)]
struct Meeting {
    fwd: u32,
    mv: usize,
    bwd: u32,
}

/// One successor waiting in a prefetch batch.
#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    board: u32,
    rank: u32,
    from: u32,
    mv: u8,
}

/// A reusable bidirectional search. Keep one per thread: it owns the mark
/// table and its buffers, reused from puzzle to puzzle.
#[derive(Debug, Default)]
pub struct BidirSearch {
    marks: Vec<u64>,
    fwd: Side,
    bwd: Side,
    pending: Vec<Pending>,
    tables: Vec<MoveTable>,
}

impl BidirSearch {
    pub fn new() -> BidirSearch {
        BidirSearch::default()
    }

    /// Bytes held by this search's table and buffers.
    pub fn memory_bytes(&self) -> usize {
        8 * self.marks.capacity()
            + 4 * (self.fwd.states.capacity() + self.bwd.states.capacity())
            + self.fwd.last.capacity()
            + self.bwd.last.capacity()
    }

    /// Solves one puzzle exactly.
    pub fn solve(&mut self, puzzle: &Puzzle) -> Solution {
        let size = puzzle.size();
        let (start, target) = (puzzle.start().packed(), puzzle.target().packed());
        if start == target {
            return Solution::Solved(Vec::new());
        }
        let words = size.state_count().div_ceil(32);
        if self.marks.len() < words {
            self.marks = vec![0; words];
        }
        let table_index = match self.tables.iter().position(|t| t.size() == size) {
            Some(i) => i,
            None => {
                self.tables.push(MoveTable::new(size));
                self.tables.len() - 1
            }
        };
        let table = &self.tables[table_index];
        let marks = &mut self.marks[..];
        self.fwd.reset(start);
        self.bwd.reset(target);
        set_mark(marks, rank(start), FWD);
        set_mark(marks, rank(target), BWD);

        let meeting = loop {
            let (f, b) = (self.fwd.frontier().len(), self.bwd.frontier().len());
            if f == 0 || b == 0 {
                break None;
            }
            let met = if f <= b {
                expand::<false>(marks, &mut self.fwd, &mut self.pending, table)
            } else {
                expand::<true>(marks, &mut self.bwd, &mut self.pending, table)
            };
            if met.is_some() {
                break met;
            }
        };

        let solution = match meeting {
            None => Solution::Unreachable,
            Some(m) => {
                let mut path = self.fwd.trace(table, m.fwd, false);
                path.push(m.mv);
                path.extend(self.bwd.trace(table, m.bwd, true));
                Solution::Solved(
                    path.into_iter()
                        .map(|i| table.get(i))
                        .collect::<Vec<Move>>(),
                )
            }
        };

        // Reset what this search touched; past about one board in eight
        // words, clearing the whole table is the cheaper way.
        let reached = self.fwd.states.len() + self.bwd.states.len();
        if reached > words / 8 {
            marks[..words].fill(0);
        } else {
            for &s in self.fwd.states.iter().chain(&self.bwd.states) {
                let r = rank(s);
                marks[r / 32] = 0;
            }
        }
        solution
    }
}

#[inline(always)]
fn get_mark(marks: &[u64], r: usize) -> u64 {
    (marks[r / 32] >> (2 * (r % 32))) & 3
}

#[inline(always)]
fn set_mark(marks: &mut [u64], r: usize, mark: u64) {
    marks[r / 32] |= mark << (2 * (r % 32));
}

/// Hints the CPU to load `word`'s cache line.
#[inline(always)]
pub(crate) fn prefetch<T>(word: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: prefetching is a hint; it never faults, even on a bad address,
        // and this one points into a live slice.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((word as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = word;
}

/// Queues the successors of `s` by the moves in `allowed`, all of one kind,
/// and prefetches their marks.
#[inline(always)]
fn successors<const BACKWARD: bool, const RECOLOUR: bool>(
    table: &MoveTable,
    marks: &[u64],
    pending: &mut Vec<Pending>,
    s: u32,
    mut allowed: u32,
) {
    while allowed != 0 {
        let m = allowed.trailing_zeros() as usize;
        allowed &= allowed - 1;
        let t = table.apply_kind::<RECOLOUR, BACKWARD>(s, m);
        let r = rank(t);
        prefetch(&marks[r / 32]);
        pending.push(Pending {
            board: t,
            rank: r as u32,
            from: s,
            mv: m as u8,
        });
    }
}

/// Grows `side` by one layer. Returns the first meeting with the other side.
fn expand<const BACKWARD: bool>(
    marks: &mut [u64],
    side: &mut Side,
    pending: &mut Vec<Pending>,
    table: &MoveTable,
) -> Option<Meeting> {
    let (own, other) = if BACKWARD { (BWD, FWD) } else { (FWD, BWD) };
    let frontier = side.frontier();
    let moves = table.len();
    pending.reserve(CHUNK * MAX_MOVES);
    let all = (1u32 << moves) - 1;
    let mut chunk_start = frontier.start;
    while chunk_start < frontier.end {
        let chunk_end = (chunk_start + CHUNK).min(frontier.end);
        pending.clear();
        for i in chunk_start..chunk_end {
            let s = side.states[i];
            let last = side.last[i];
            let allowed = if last == ROOT {
                all
            } else {
                all & !table.redundant_after(last as usize)
            };
            // Each kind in its own branch-free loop over the set bits.
            successors::<BACKWARD, false>(table, marks, pending, s, allowed & !RECOLOUR_MOVES);
            successors::<BACKWARD, true>(table, marks, pending, s, allowed & RECOLOUR_MOVES);
        }
        // Branch-free insertion: every successor is written past the end,
        // and the length only advances for boards not seen before.
        let mut len = side.states.len();
        side.states.resize(len + pending.len(), 0);
        side.last.resize(len + pending.len(), 0);
        let mut met = false;
        for p in pending.iter() {
            let r = p.rank as usize;
            let word = &mut marks[r / 32];
            let shift = 2 * (r % 32);
            let mark = (*word >> shift) & 3;
            let new = (mark == 0) as u64;
            *word |= (own * new) << shift;
            side.states[len] = p.board;
            side.last[len] = p.mv;
            len += new as usize;
            met |= mark == other;
        }
        side.states.truncate(len);
        side.last.truncate(len);
        if met {
            let p = pending
                .iter()
                .find(|p| get_mark(marks, p.rank as usize) == other)
                .expect("a meeting was seen in this chunk");
            let mv = p.mv as usize;
            return Some(if BACKWARD {
                Meeting {
                    fwd: p.board,
                    mv,
                    bwd: p.from,
                }
            } else {
                Meeting {
                    fwd: p.from,
                    mv,
                    bwd: p.board,
                }
            });
        }
        chunk_start = chunk_end;
    }
    side.starts.push(frontier.end);
    None
}
