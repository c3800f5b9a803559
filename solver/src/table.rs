//! Distance tables ("God's table" for one target).
//!
//! One backward breadth-first search from a target gives every board's
//! distance to it. Distances are stored modulo 7 in 3 bits a board (`7`
//! means "cannot reach the target"), 21 boards to a 64-bit word, indexed by
//! base-3 rank: about 15.6 MiB for 4x4.
//!
//! Why modulo 7 and not modulo 3: moves are not their own inverses. From a
//! board at distance `d`, a move can lead to a board at distance `d - 1`
//! (one step closer) but also up to `d + 3` (undoing a rotation takes three
//! moves). So the successors' distances span five values, `d - 1 ..= d + 3`,
//! and modulo 3 the one-closer code `d - 1` is shared with `d + 2`: a walk
//! that follows it can wander off (the tests caught exactly that). Modulo 7
//! the five values are distinct, so from any board exactly the successors one
//! step closer carry the code `(d - 1) mod 7`, and following them gives both
//! the exact distance and an optimal path.
//!
//! The build grows layers from the target. Early layers are small, so they
//! are grown top-down from an explicit frontier (predecessors by inverse
//! moves). Once the frontier outgrows half of the boards not yet reached,
//! the search turns bottom-up: it scans the unreached boards in rank order
//! and marks each one that has a successor in the newest layer, which needs
//! no frontier list at all. A board whose successor carries the newest
//! layer's code really is one step beyond it: a successor three layers back
//! would have put the board itself in an earlier layer (any modulus of at
//! least 3 is enough for that). The bottom-up scans
//! split the table into word ranges, one per thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::board::{Board, Puzzle, Size};
use crate::moves::{MAX_MOVES, MoveTable};
use crate::rank::{rank, unrank};
use crate::search::Solution;

/// Bits per board, boards per word, the modulus, and the "unreached" code.
const BITS: usize = 3;
const PER_WORD: usize = 21;
const MODULUS: u64 = 7;
const UNREACHED: u64 = 7;
/// The lowest bit of each of a word's 21 codes.
const LOW_BITS: u64 = 0x1249_2492_4924_9249;
/// Frontier boards per prefetch batch in the top-down phase.
const CHUNK: usize = 16;

/// Every board's distance (mod 7) to one target.
#[derive(Debug)]
pub struct DistanceTable {
    target: Board,
    moves: MoveTable,
    codes: Vec<AtomicU64>,
    /// The largest distance of any reachable board.
    radius: u8,
}

impl DistanceTable {
    /// Builds the table for `target` with up to `threads` threads.
    pub fn build(target: Board, threads: usize) -> DistanceTable {
        let size = target.size();
        let moves = MoveTable::new(size);
        let states = size.state_count();
        let words = states.div_ceil(PER_WORD);
        let codes: Vec<AtomicU64> = (0..words).map(|_| AtomicU64::new(u64::MAX)).collect();
        let table = DistanceTable {
            target,
            moves,
            codes,
            radius: 0,
        };
        table.build_layers(states, threads.max(1))
    }

    fn build_layers(mut self, states: usize, threads: usize) -> DistanceTable {
        let mut frontier = vec![self.target.packed()];
        self.set(rank(self.target.packed()), 0);
        let mut reached = 1usize;
        let mut depth = 0u8;
        let mut top_down = true;
        loop {
            let next_code = u64::from(depth + 1) % MODULUS;
            let added = if top_down && frontier.len() * 2 <= states - reached {
                let next = self.top_down(&frontier, next_code, threads);
                let added = next.len();
                frontier = next;
                added
            } else {
                top_down = false;
                frontier = Vec::new();
                self.bottom_up(states, u64::from(depth) % MODULUS, next_code, threads)
            };
            if added == 0 {
                break;
            }
            reached += added;
            depth += 1;
        }
        self.radius = depth;
        self
    }

    /// The unreached predecessors of `frontier`, marked `next_code`.
    fn top_down(&self, frontier: &[u32], next_code: u64, threads: usize) -> Vec<u32> {
        if threads == 1 || frontier.len() < 1 << 16 {
            return self.top_down_part(frontier, next_code);
        }
        let per_thread = frontier.len().div_ceil(threads);
        let mut parts = frontier.chunks(per_thread);
        let own = parts.next().unwrap_or_default();
        std::thread::scope(|scope| {
            // The calling thread takes the first part itself.
            let others: Vec<_> = parts
                .map(|part| scope.spawn(move || self.top_down_part(part, next_code)))
                .collect();
            let mut next = self.top_down_part(own, next_code);
            for other in others {
                next.extend(other.join().expect("table build thread panicked"));
            }
            next
        })
    }

    fn top_down_part(&self, frontier: &[u32], next_code: u64) -> Vec<u32> {
        let mut next = Vec::new();
        let mut batch = Vec::with_capacity(CHUNK * self.moves.len());
        for chunk in frontier.chunks(CHUNK) {
            // Compute and prefetch a chunk's predecessors first, so that
            // their cache misses overlap.
            batch.clear();
            for &y in chunk {
                for m in 0..self.moves.len() {
                    let x = self.moves.apply_inverse(y, m);
                    let r = rank(x);
                    crate::search::prefetch(&self.codes[r / PER_WORD]);
                    batch.push((x, r));
                }
            }
            for &(x, r) in &batch {
                if self.code(r) == UNREACHED {
                    // Claim it atomically: when threads share a layer, only
                    // the one that turns "unreached" into the code keeps it.
                    let shift = BITS * (r % PER_WORD);
                    let old = self.codes[r / PER_WORD]
                        .fetch_and(!((UNREACHED ^ next_code) << shift), Relaxed);
                    if (old >> shift) & 7 == UNREACHED {
                        next.push(x);
                    }
                }
            }
        }
        next
    }

    /// Marks every unreached board with a successor coded `code` as `next`;
    /// returns how many were marked.
    fn bottom_up(&self, states: usize, code: u64, next: u64, threads: usize) -> usize {
        let words = self.codes.len();
        let per_thread = words.div_ceil(threads);
        let range = |t: usize| (t * per_thread).min(words)..((t + 1) * per_thread).min(words);
        std::thread::scope(|scope| {
            // The calling thread takes the first part itself: one thread
            // (a worker's solver thread) starts no other.
            let others: Vec<_> = (1..threads)
                .map(|t| {
                    let range = range(t);
                    scope.spawn(move || self.bottom_up_words(range, states, code, next))
                })
                .collect();
            let own = self.bottom_up_words(range(0), states, code, next);
            own + others
                .into_iter()
                .map(|w| w.join().expect("table build thread panicked"))
                .sum::<usize>()
        })
    }

    fn bottom_up_words(
        &self,
        words: std::ops::Range<usize>,
        states: usize,
        code: u64,
        next: u64,
    ) -> usize {
        let mut marked = 0;
        for w in words {
            let word = self.codes[w].load(Relaxed);
            // All three bits set means "unreached".
            let mut unreached = word & (word >> 1) & (word >> 2) & LOW_BITS;
            if unreached == 0 {
                continue;
            }
            let mut new_word = word;
            while unreached != 0 {
                let bit = unreached.trailing_zeros();
                unreached &= unreached - 1;
                let r = w * PER_WORD + bit as usize / BITS;
                if r >= states {
                    break;
                }
                let x = unrank(r);
                let hit =
                    (0..self.moves.len()).any(|m| self.code(rank(self.moves.apply(x, m))) == code);
                if hit {
                    new_word &= !((UNREACHED ^ next) << bit);
                    marked += 1;
                }
            }
            if new_word != word {
                self.codes[w].store(new_word, Relaxed);
            }
        }
        marked
    }

    #[inline(always)]
    fn code(&self, r: usize) -> u64 {
        (self.codes[r / PER_WORD].load(Relaxed) >> (BITS * (r % PER_WORD))) & 7
    }

    fn set(&self, r: usize, code: u64) {
        let shift = BITS * (r % PER_WORD);
        let word = &self.codes[r / PER_WORD];
        let old = word.load(Relaxed);
        word.store((old & !(7 << shift)) | (code << shift), Relaxed);
    }

    pub fn target(&self) -> Board {
        self.target
    }

    pub fn size(&self) -> Size {
        self.target.size()
    }

    /// The farthest distance of any board from which the target is reachable.
    pub fn radius(&self) -> u8 {
        self.radius
    }

    /// Bytes held by the table.
    pub fn bytes(&self) -> usize {
        self.codes.len() * 8
    }

    /// Solves `start -> target` by walking down the distances.
    pub fn solve_from(&self, start: Board) -> Solution {
        assert_eq!(start.size(), self.size(), "table and board sizes differ");
        let target = self.target.packed();
        let mut x = start.packed();
        let mut c = self.code(rank(x));
        if c == UNREACHED {
            return Solution::Unreachable;
        }
        let mut path = Vec::new();
        let n = self.moves.len();
        let mut neighbours = [(0u32, 0usize); MAX_MOVES];
        while x != target {
            let want = (c + MODULUS - 1) % MODULUS;
            // Every neighbour's word is prefetched before the first is read,
            // so a step costs about one cache miss, not one per neighbour
            // tried (2.1 to 2.8 us per 4x4 puzzle instead of about 5 us).
            for (m, slot) in neighbours[..n].iter_mut().enumerate() {
                let y = self.moves.apply(x, m);
                let r = rank(y);
                crate::search::prefetch(&self.codes[r / PER_WORD]);
                *slot = (y, r);
            }
            let m = neighbours[..n]
                .iter()
                .position(|&(_, r)| self.code(r) == want)
                .expect("a reachable board has a neighbour one step closer");
            path.push(self.moves.get(m));
            x = neighbours[m].0;
            c = want;
        }
        Solution::Solved(path)
    }

    /// Solves a puzzle whose target is this table's target.
    pub fn solve(&self, puzzle: &Puzzle) -> Solution {
        assert_eq!(
            puzzle.target(),
            self.target,
            "the puzzle's target is not this table's"
        );
        self.solve_from(puzzle.start())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Generator;
    use crate::search::BidirSearch;

    #[test]
    fn agrees_with_bidirectional_search_on_small_sizes() {
        let mut g = Generator::new(8);
        let mut search = BidirSearch::new();
        for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
            let target = g.board(size);
            for threads in [1, 3] {
                let table = DistanceTable::build(target, threads);
                for _ in 0..200 {
                    let p = Puzzle::new(g.board(size), target).unwrap();
                    let got = table.solve(&p);
                    assert_eq!(got.distance(), search.solve(&p).distance(), "{size}");
                    if let Some(path) = got.path() {
                        assert_eq!(crate::apply_moves(p.start(), path).unwrap(), target);
                    }
                }
            }
        }
    }
}
