//! Symmetries of the puzzle: transformations of a (start, target) pair that
//! keep its distance, used to give equivalent puzzles one cache key.
//!
//! Three kinds, freely combined:
//!
//! 1. **Colour shift**: every cell of both boards `R -> B -> G -> R` (once or
//!    twice). A rotation permutes cells and a recolour adds 1 to four of them,
//!    both commute with adding 1 to every cell, so each move sequence solves
//!    the shifted puzzle exactly when it solves the original.
//! 2. **Quarter turns** of both boards (any number; a quarter turn of an
//!    `N x M` board is an `M x N` board, so 3x4 and 4x3 puzzles share keys).
//!    A turn maps 2x2 windows to 2x2 windows and keeps the sense of rotation,
//!    so move `m` becomes the same kind of move on the turned window.
//! 3. **Mirror, negate and swap**: mirror both boards left to right, swap
//!    B and G (`c -> -c mod 3`) and exchange start and target. Conjugating a
//!    move by "mirror and negate" gives the *inverse* move on the mirrored
//!    window (a mirror turns clockwise into counter-clockwise, negation turns
//!    `+1` into `-1`). So if `m1..mk` takes `s` to `t`, then
//!    `mirror(mk)..mirror(m1)` (same kinds, mirrored windows, reversed order)
//!    takes `σt` to `σs`, and the converse holds the same way: the distance is
//!    the same and paths map back by mirroring and reversing.
//!
//! A single mirror or a single colour swap is *not* a symmetry (each turns a
//! move into its inverse, which costs 3 rotations or 2 recolours); only the
//! combination above, with start and target exchanged, is.

use crate::board::{Board, Puzzle, Size};
use crate::moves::{MAX_MOVES, MoveTable};

/// One symmetry: turn `turns` quarter turns clockwise, then shift colours
/// `shift` times, then (if `mirror`) mirror, negate colours and swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Symmetry {
    pub turns: u8,
    pub shift: u8,
    pub mirror: bool,
}

impl Symmetry {
    pub const IDENTITY: Symmetry = Symmetry {
        turns: 0,
        shift: 0,
        mirror: false,
    };

    /// All 24 symmetries.
    pub fn all() -> impl Iterator<Item = Symmetry> {
        (0..4u8).flat_map(|turns| {
            (0..3u8).flat_map(move |shift| {
                [false, true].map(|mirror| Symmetry {
                    turns,
                    shift,
                    mirror,
                })
            })
        })
    }

    /// Those that keep the target a target (no swap): the ones usable with a
    /// distance table built for one target.
    pub fn target_preserving() -> impl Iterator<Item = Symmetry> {
        Symmetry::all().filter(|s| !s.mirror)
    }

    /// The size of the transformed boards.
    pub fn size(&self, size: Size) -> Size {
        if self.turns % 2 == 1 {
            size.transposed()
        } else {
            size
        }
    }

    /// Where cell `(r, c)` of a `size` board goes: `(row, col)` in the new size.
    fn cell(&self, size: Size, r: usize, c: usize) -> (usize, usize) {
        let (mut r, mut c) = (r, c);
        let (mut rows, mut cols) = (size.rows(), size.cols());
        for _ in 0..self.turns {
            // A quarter turn clockwise: (r, c) -> (c, rows - 1 - r).
            (r, c) = (c, rows - 1 - r);
            (rows, cols) = (cols, rows);
        }
        if self.mirror {
            c = cols - 1 - c;
        }
        (r, c)
    }

    /// Moves the cells of a packed board (no colour change).
    fn place(&self, size: Size, packed: u32) -> u32 {
        let new = self.size(size);
        let mut out = 0;
        for r in 0..size.rows() {
            for c in 0..size.cols() {
                let v = (packed >> (2 * (r * size.cols() + c))) & 3;
                let (nr, nc) = self.cell(size, r, c);
                out |= v << (2 * (nr * new.cols() + nc));
            }
        }
        out
    }

    /// `board` under every target-preserving symmetry, in the order of
    /// [`Symmetry::target_preserving`]: as `map(|s| (s.board(board), s))`,
    /// with the cells moved once per turn rather than once per symmetry
    /// (the colour shifts only recolour).
    pub fn target_images(board: Board) -> [(Board, Symmetry); 12] {
        let mut out = [(board, Symmetry::IDENTITY); 12];
        for turns in 0..4u8 {
            let turned = Symmetry {
                turns,
                shift: 0,
                mirror: false,
            }
            .board(board);
            for shift in 0..3u8 {
                let sym = Symmetry {
                    turns,
                    shift,
                    mirror: false,
                };
                let lows = 0x5555_5555 & turned.size().used_bits();
                let packed = shift_colours(turned.packed(), lows, shift);
                let image = Board::from_packed(turned.size(), packed)
                    .expect("symmetries keep boards valid");
                out[usize::from(3 * turns + shift)] = (image, sym);
            }
        }
        out
    }

    /// The transformed board (positions and colours; no swap).
    pub fn board(&self, board: Board) -> Board {
        let size = board.size();
        let new = self.size(size);
        let lows = 0x5555_5555 & new.used_bits();
        let mut s = shift_colours(self.place(size, board.packed()), lows, self.shift);
        if self.mirror {
            // Negate: swap B(01) and G(10).
            s = ((s >> 1) & lows) | ((s & lows) << 1);
        }
        Board::from_packed(new, s).expect("symmetries keep boards valid")
    }

    /// The transformed puzzle.
    pub fn puzzle(&self, puzzle: &Puzzle) -> Puzzle {
        let (s, t) = (self.board(puzzle.start()), self.board(puzzle.target()));
        let (s, t) = if self.mirror { (t, s) } else { (s, t) };
        Puzzle::new(s, t).expect("both boards transform to one size")
    }

    /// `map[m]` = the number of the move that move `m` of a `size` board
    /// becomes (same kind, transformed window).
    fn move_map(&self, size: Size) -> [u8; MAX_MOVES] {
        let from = MoveTable::new(size);
        let to = MoveTable::new(self.size(size));
        let mut map = [0u8; MAX_MOVES];
        for (m, slot) in map.iter_mut().enumerate().take(from.len()) {
            let mv = from.get(m);
            // The window's four cells, 0-based, and their images.
            let (r, c) = (mv.row as usize - 1, mv.col as usize - 1);
            let cells = [(r - 1, c - 1), (r - 1, c), (r, c - 1), (r, c)];
            let images = cells.map(|(r, c)| self.cell(size, r, c));
            let bottom = images.iter().map(|p| p.0).max().unwrap_or(0);
            let right = images.iter().map(|p| p.1).max().unwrap_or(0);
            let image = crate::moves::Move {
                kind: mv.kind,
                row: bottom as u8 + 1,
                col: right as u8 + 1,
            };
            *slot = MoveTable::index_of(to.size(), image).expect("windows map to windows") as u8;
        }
        map
    }

    /// Maps a path of the original puzzle (move numbers of `size`) to the
    /// path that solves the transformed puzzle.
    pub fn path_forward(&self, size: Size, path: &[u8]) -> Vec<u8> {
        let map = self.move_map(size);
        let mut out: Vec<u8> = path.iter().map(|&m| map[m as usize]).collect();
        if self.mirror {
            out.reverse();
        }
        out
    }

    /// Maps a path of the transformed puzzle (move numbers of the new size)
    /// back to a path of the original puzzle (move numbers of `size`).
    pub fn path_back(&self, size: Size, path: &[u8]) -> Vec<u8> {
        let map = self.move_map(size);
        let mut inverse = [0u8; MAX_MOVES];
        for (m, &image) in map.iter().enumerate().take(2 * size.windows()) {
            inverse[image as usize] = m as u8;
        }
        let mut back: Vec<u8> = path.iter().map(|&p| inverse[p as usize]).collect();
        if self.mirror {
            back.reverse();
        }
        back
    }
}

/// A cache key: the smallest transformed puzzle, by size then packed boards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CanonicalKey {
    pub size: Size,
    pub start: u32,
    pub target: u32,
}

/// The canonical form of `puzzle` under `symmetries`, and the symmetry that
/// takes `puzzle` to it.
pub fn canonical(
    puzzle: &Puzzle,
    symmetries: impl Iterator<Item = Symmetry>,
) -> (CanonicalKey, Symmetry) {
    symmetries
        .map(|sym| {
            let p = sym.puzzle(puzzle);
            let key = CanonicalKey {
                size: p.size(),
                start: p.start().packed(),
                target: p.target().packed(),
            };
            (key, sym)
        })
        .min_by_key(|(key, _)| *key)
        .expect("there is always the identity")
}

/// Shifts every cell's colour `shift` times: R(00) -> B(01) -> G(10) -> R.
/// `lows` holds the low bit of each cell of the board.
fn shift_colours(mut s: u32, lows: u32, shift: u8) -> u32 {
    for _ in 0..shift {
        let lo = s & lows;
        let hi = (s >> 1) & lows;
        s = (!(lo | hi) & lows) | (lo << 1);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::Generator;

    #[test]
    fn there_are_24_distinct_symmetries_on_square_boards() {
        let p = Generator::new(1).uniform(Size::new(4, 4).unwrap());
        let images: std::collections::HashSet<_> = Symmetry::all().map(|s| s.puzzle(&p)).collect();
        assert_eq!(images.len(), 24);
    }

    #[test]
    fn quarter_turns_transpose_and_four_return() {
        let b = Board::parse_rows(&["RGB", "BBR"]).unwrap();
        let q = Symmetry {
            turns: 1,
            ..Symmetry::IDENTITY
        };
        let turned = q.board(b);
        assert_eq!(turned.rows(), vec!["BR", "BG", "RB"]);
        let full = Symmetry {
            turns: 4,
            ..Symmetry::IDENTITY
        };
        assert_eq!(full.board(b), b);
    }

    #[test]
    fn canonical_forms_agree_across_an_orbit() {
        let mut g = Generator::new(2);
        for size in Size::ALL {
            let p = g.uniform(size);
            let (key, _) = canonical(&p, Symmetry::all());
            for sym in Symmetry::all() {
                let (other, _) = canonical(&sym.puzzle(&p), Symmetry::all());
                assert_eq!(key, other);
            }
        }
    }

    #[test]
    fn target_images_are_the_target_preserving_symmetries_in_order() {
        let mut g = Generator::new(5);
        for size in Size::ALL {
            for _ in 0..20 {
                let board = g.uniform(size).target();
                let each: Vec<(Board, Symmetry)> = Symmetry::target_preserving()
                    .map(|s| (s.board(board), s))
                    .collect();
                assert_eq!(Symmetry::target_images(board).to_vec(), each);
            }
        }
    }
}
