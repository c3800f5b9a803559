//! Reproducible puzzle generation for tests, benchmarks and `colball gen`.
//!
//! A seeded xoshiro256++ generator makes the same puzzles for the same seed
//! on every machine and every version of this crate.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::board::{Board, Colour, Puzzle, Size};
use crate::moves::MoveTable;

/// A seeded source of boards and puzzles.
#[derive(Clone, Debug)]
pub struct Generator {
    rng: Xoshiro256PlusPlus,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        }
    }

    /// A uniformly random board.
    pub fn board(&mut self, size: Size) -> Board {
        let mut board = Board::filled(size, Colour::Red);
        for r in 0..size.rows() {
            for c in 0..size.cols() {
                board = board.with(r, c, Colour::ALL[self.rng.random_range(0..3)]);
            }
        }
        board
    }

    /// Start and target drawn independently and uniformly.
    pub fn uniform(&mut self, size: Size) -> Puzzle {
        let start = self.board(size);
        let target = self.board(size);
        Puzzle::new(start, target).expect("same size")
    }

    /// A uniform start and a target `moves` random moves away from it (so at
    /// most `moves` apart).
    pub fn scrambled(&mut self, size: Size, moves: usize) -> Puzzle {
        let start = self.board(size);
        let table = MoveTable::new(size);
        let mut packed = start.packed();
        for _ in 0..moves {
            packed = table.apply(packed, self.rng.random_range(0..table.len()));
        }
        let target = Board::from_packed(size, packed).expect("moves keep boards valid");
        Puzzle::new(start, target).expect("same size")
    }

    /// `uniform` when `scramble` is `None`, else `scrambled`.
    pub fn puzzle(&mut self, size: Size, scramble: Option<usize>) -> Puzzle {
        match scramble {
            None => self.uniform(size),
            Some(k) => self.scrambled(size, k),
        }
    }

    /// A uniformly random index below `len` (which must not be 0).
    pub fn index(&mut self, len: usize) -> usize {
        self.rng.random_range(0..len)
    }

    /// One of `sizes`, chosen uniformly.
    pub fn pick(&mut self, sizes: &[Size]) -> Size {
        sizes[self.rng.random_range(0..sizes.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_puzzles() {
        let size = Size::new(4, 4).unwrap();
        let a: Vec<_> = (0..5).map(|_| Generator::new(9).uniform(size)).collect();
        let mut g = Generator::new(9);
        assert_eq!(a[0], g.uniform(size));
        assert_ne!(g.uniform(size), a[0]);
    }
}
