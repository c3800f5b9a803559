//! Exact searches. Every search returns a [`Solution`]: one optimal move
//! sequence, or [`Solution::Unreachable`].

mod bidir;
mod idastar;

pub use bidir::BidirSearch;
pub(crate) use bidir::prefetch;
pub use idastar::IdaStar;

use crate::moves::{Move, format_moves};

/// The outcome of an exact search.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Solution {
    /// One optimal move sequence (empty when start equals target).
    Solved(Vec<Move>),
    /// No sequence of moves turns the start into the target.
    Unreachable,
}

impl Solution {
    /// The minimum number of moves, or `None` when unreachable.
    pub fn distance(&self) -> Option<usize> {
        match self {
            Solution::Solved(path) => Some(path.len()),
            Solution::Unreachable => None,
        }
    }

    /// The answer as the classic output prints it: the distance, or `-1`.
    pub fn answer(&self) -> i64 {
        self.distance().map_or(-1, |d| d as i64)
    }

    /// The optimal moves, if any.
    pub fn path(&self) -> Option<&[Move]> {
        match self {
            Solution::Solved(path) => Some(path),
            Solution::Unreachable => None,
        }
    }

    /// The moves in notation (`r22 c34 ...`), empty when there are none.
    pub fn notation(&self) -> String {
        self.path().map(format_moves).unwrap_or_default()
    }
}
