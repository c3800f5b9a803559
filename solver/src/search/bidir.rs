//! Bidirectional breadth-first search over packed boards.
//!
//! Both sides grow whole layers, always the side whose newest layer is
//! smaller. Every board reached is marked in one flat byte table indexed by
//! the board's base-3 rank: the mark says which side reached it and by which
//! move, which is all that is needed to walk the path back. The search stops
//! at the first board that one side generates and the other side has already
//! marked. That is exact: both sides hold complete layers, so if the last
//! full layers are `k` (this side) and `j` (the other side) and no board was
//! shared yet, the optimum is at least `k + j + 1`; any meeting found while
//! growing layer `k + 1` gives a path of at most `k + 1 + j` moves.
//!
//! Move orders that provably reach the same board are pruned (see
//! [`MoveTable::redundant_after`]): if `m` is skipped after `l`, the board is
//! also reached through `m, l` with a larger last move, and following such
//! swaps always ends, so every board is still found at its true depth.
//!
//! The table is allocated once per search object (3^16 bytes for 4x4, about
//! 41 MiB) and never cleared in full: after each puzzle only the entries of
//! the boards the search reached are reset.

use crate::board::{Board, Puzzle, Size};
use crate::moves::MoveTable;
use crate::rank::rank;

use super::Solution;

/// Mark bit of boards reached from the target.
const BACKWARD: u8 = 0x80;
/// Low bits: the number of the move that reached the board, plus one; or
/// `ROOT` for the start and target themselves. Zero means "not reached".
const ROOT: u8 = 0x1F;
const MOVE_BITS: u8 = 0x1F;

/// One direction of the search: every board it reached, layer by layer.
#[derive(Debug, Default)]
struct Side {
    states: Vec<u32>,
    /// The move that reached `states[i]`, or `ROOT`.
    last: Vec<u8>,
    /// Index in `states` where the newest layer begins.
    layer: usize,
}

impl Side {
    fn reset(&mut self, root: u32) {
        self.states.clear();
        self.last.clear();
        self.states.push(root);
        self.last.push(ROOT);
        self.layer = 0;
    }

    fn frontier(&self) -> usize {
        self.states.len() - self.layer
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

/// A reusable bidirectional search. Keep one per thread: it owns the
/// visited table and its buffers, reused from puzzle to puzzle.
#[derive(Debug, Default)]
pub struct BidirSearch {
    marks: Vec<u8>,
    fwd: Side,
    bwd: Side,
    tables: Vec<MoveTable>,
}

impl BidirSearch {
    pub fn new() -> BidirSearch {
        BidirSearch::default()
    }

    /// Bytes held by this search's tables and buffers.
    pub fn memory_bytes(&self) -> usize {
        self.marks.capacity()
            + 5 * (self.fwd.states.capacity() + self.bwd.states.capacity())
    }

    /// Solves one puzzle exactly.
    pub fn solve(&mut self, puzzle: &Puzzle) -> Solution {
        let size = puzzle.size();
        let (start, target) = (puzzle.start().packed(), puzzle.target().packed());
        if start == target {
            return Solution::Solved(Vec::new());
        }
        if self.marks.len() < size.state_count() {
            self.marks = vec![0; size.state_count()];
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
        marks[rank(start)] = ROOT;
        marks[rank(target)] = BACKWARD | ROOT;

        let meeting = loop {
            let (f, b) = (self.fwd.frontier(), self.bwd.frontier());
            if f == 0 || b == 0 {
                break None;
            }
            let met = if f <= b {
                expand::<false>(marks, &mut self.fwd, table)
            } else {
                expand::<true>(marks, &mut self.bwd, table)
            };
            if met.is_some() {
                break met;
            }
        };

        let solution = match meeting {
            None => Solution::Unreachable,
            Some(m) => Solution::Solved(path(marks, table, m, size)),
        };
        for &s in self.fwd.states.iter().chain(&self.bwd.states) {
            marks[rank(s)] = 0;
        }
        solution
    }
}

/// Grows `side` by one layer. Returns the first meeting with the other side.
fn expand<const BWD: bool>(marks: &mut [u8], side: &mut Side, table: &MoveTable) -> Option<Meeting> {
    let tag = if BWD { BACKWARD } else { 0 };
    let end = side.states.len();
    for i in side.layer..end {
        let s = side.states[i];
        let last = side.last[i];
        let skip = if last == ROOT {
            0
        } else {
            table.redundant_after(last as usize)
        };
        for m in 0..table.len() {
            if skip >> m & 1 != 0 {
                continue;
            }
            let t = if BWD {
                table.apply_inverse(s, m)
            } else {
                table.apply(s, m)
            };
            let r = rank(t);
            let mark = marks[r];
            if mark == 0 {
                marks[r] = tag | (m as u8 + 1);
                side.states.push(t);
                side.last.push(m as u8);
            } else if mark & BACKWARD != tag {
                return Some(if BWD {
                    Meeting { fwd: t, mv: m, bwd: s }
                } else {
                    Meeting { fwd: s, mv: m, bwd: t }
                });
            }
        }
    }
    side.layer = end;
    None
}

/// Walks the marks from the meeting back to the start and on to the target.
fn path(marks: &[u8], table: &MoveTable, meeting: Meeting, size: Size) -> Vec<crate::moves::Move> {
    let mut moves = Vec::new();
    let mut s = meeting.fwd;
    loop {
        let code = marks[rank(s)] & MOVE_BITS;
        if code == ROOT {
            break;
        }
        let m = (code - 1) as usize;
        moves.push(m);
        s = table.apply_inverse(s, m);
    }
    moves.reverse();
    moves.push(meeting.mv);
    let mut s = meeting.bwd;
    loop {
        let code = marks[rank(s)] & MOVE_BITS;
        if code == ROOT {
            break;
        }
        let m = (code - 1) as usize;
        moves.push(m);
        s = table.apply(s, m);
    }
    debug_assert!(Board::from_packed(size, s).is_some());
    moves.into_iter().map(|m| table.get(m)).collect()
}
