//! Checking an answer someone else computed: the trust boundary of the
//! cluster.
//!
//! A worker (or a coordinator, seen from a client) reports a count and a
//! move sequence. [`check_answer`] replays the sequence on the puzzle: the
//! count must equal its length and the moves must turn the start into the
//! target. A count of `-1` (unreachable) is accepted only where the checker
//! confirms it itself: only 2x2 boards have unreachable targets (see the
//! problem statement), and a 2x2 board has 81 states, so a breadth-first
//! search over them costs well under a microsecond.
//!
//! What a replay cannot show is that a valid sequence is also the shortest;
//! the coordinator's audit (re-solving a sample elsewhere) covers that.

use thiserror::Error;

use crate::board::{Board, Puzzle};
use crate::moves::{Move, MoveTable, apply_moves, parse_moves};

/// Longest answer text accepted (18 moves of 4 characters would be 72;
/// the longest optimal 4x4 answer is far shorter).
pub const MAX_SOLUTION_BYTES: usize = 4 * MAX_PATH_MOVES;

/// Longest move sequence accepted.
pub const MAX_PATH_MOVES: usize = 64;

/// Why a reported answer was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum Rejection {
    /// The text holds something that is not a move on this board.
    #[error("the sequence is not a list of moves on this board: {0}")]
    IllegalMove(String),
    /// The count is not the sequence's length.
    #[error("the count {count} disagrees with its sequence of {length} moves")]
    WrongCount { count: i64, length: usize },
    /// The moves are legal but do not end on the target.
    #[error("the sequence does not turn the start into the target")]
    MissesTarget,
    /// `-1` for a puzzle whose target can be reached.
    #[error("the target is reachable, but the answer says it is not (-1)")]
    FalseUnreachable,
    /// A count below -1, or a field too long to be an answer.
    #[error("malformed answer: {0}")]
    Malformed(String),
}

impl Rejection {
    /// A short label for metrics (`wrong_count`, `misses_target`, ...).
    pub fn label(&self) -> &'static str {
        match self {
            Rejection::IllegalMove(_) => "illegal_move",
            Rejection::WrongCount { .. } => "wrong_count",
            Rejection::MissesTarget => "misses_target",
            Rejection::FalseUnreachable => "false_unreachable",
            Rejection::Malformed(_) => "malformed",
        }
    }
}

/// Checks that `solution` (moves in the project's notation) turns the
/// puzzle's start into its target in exactly `moves` moves, or that
/// `moves == -1` and the target is in fact unreachable.
pub fn check_answer(puzzle: &Puzzle, moves: i64, solution: &str) -> Result<(), Rejection> {
    if solution.len() > MAX_SOLUTION_BYTES {
        return Err(Rejection::Malformed(format!(
            "a sequence of {} bytes (at most {MAX_SOLUTION_BYTES})",
            solution.len()
        )));
    }
    check_count(moves, !solution.trim().is_empty())?;
    let sequence =
        parse_moves(puzzle.size(), solution).map_err(|e| Rejection::IllegalMove(e.to_string()))?;
    check_moves(puzzle, moves, &sequence)
}

/// Checks that the move sequence `path` turns the puzzle's start into its
/// target in exactly `moves` moves, or that `moves == -1`, `path` is empty
/// and the target is in fact unreachable. (The wire's move indices become
/// `path` through [`crate::moves::MoveTable::move_at`].)
pub fn check_moves(puzzle: &Puzzle, moves: i64, path: &[Move]) -> Result<(), Rejection> {
    check_replay(puzzle, moves, path.len(), || {
        apply_moves(puzzle.start(), path).map_err(|e| Rejection::IllegalMove(e.to_string()))
    })
}

/// [`check_moves`] for a path of move numbers, as the worker protocol
/// carries it (see [`MoveTable::get`]): replayed on the packed board, with
/// no list of moves built.
pub fn check_indices(puzzle: &Puzzle, moves: i64, indices: &[u8]) -> Result<(), Rejection> {
    let size = puzzle.size();
    check_replay(puzzle, moves, indices.len(), || {
        MoveTable::of(size)
            .apply_indices(puzzle.start().packed(), indices)
            .map(|end| Board::from_packed_unchecked(size, end))
            .ok_or_else(|| {
                Rejection::IllegalMove(format!(
                    "a move number {} or more on a {size} board",
                    2 * size.windows()
                ))
            })
    })
}

/// What [`check_moves`] and [`check_indices`] share: the bound, the count,
/// an unreachable claim, and the end of a path of `length` moves, which
/// `end` replays.
fn check_replay(
    puzzle: &Puzzle,
    moves: i64,
    length: usize,
    end: impl FnOnce() -> Result<Board, Rejection>,
) -> Result<(), Rejection> {
    if length > MAX_PATH_MOVES {
        return Err(Rejection::Malformed(format!(
            "a sequence of {length} moves (at most {MAX_PATH_MOVES})"
        )));
    }
    check_count(moves, length > 0)?;
    if moves == -1 {
        return if reachable(puzzle.start(), puzzle.target()) {
            Err(Rejection::FalseUnreachable)
        } else {
            Ok(())
        };
    }
    if length as i64 != moves {
        return Err(Rejection::WrongCount {
            count: moves,
            length,
        });
    }
    if end()? != puzzle.target() {
        return Err(Rejection::MissesTarget);
    }
    Ok(())
}

/// The count alone: at least -1, and -1 only without moves.
fn check_count(moves: i64, has_moves: bool) -> Result<(), Rejection> {
    if moves < -1 {
        return Err(Rejection::Malformed(format!("a count of {moves}")));
    }
    if moves == -1 && has_moves {
        return Err(Rejection::Malformed(
            "a sequence given with the count -1".into(),
        ));
    }
    Ok(())
}

/// Whether `target` can be reached from `start`. Exact on every size: only
/// 2x2 boards have unreachable targets, and those are searched (81 states).
pub fn reachable(start: Board, target: Board) -> bool {
    let size = start.size();
    if size.cells() > 4 {
        return true;
    }
    let table = MoveTable::of(size);
    // A 2x2 board packs into 8 bits.
    let mut seen = [false; 256];
    let mut frontier = vec![start.packed()];
    seen[start.packed() as usize & 0xff] = true;
    while let Some(board) = frontier.pop() {
        if board == target.packed() {
            return true;
        }
        for m in 0..table.len() {
            let next = table.apply(board, m);
            if !std::mem::replace(&mut seen[next as usize & 0xff], true) {
                frontier.push(next);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Size;
    use crate::generate::Generator;
    use crate::moves::format_moves;
    use crate::search::BidirSearch;

    #[test]
    fn true_answers_pass_and_tampered_ones_fail() {
        let mut g = Generator::new(11);
        let mut search = BidirSearch::new();
        for size in [(2, 2), (2, 3), (3, 3), (3, 4), (4, 4)] {
            let size = Size::new(size.0, size.1).unwrap();
            for _ in 0..40 {
                let p = g.uniform(size);
                let s = search.solve(&p);
                let (n, text) = (s.answer(), s.notation());
                assert_eq!(check_answer(&p, n, &text), Ok(()), "{p:?}");
                assert_eq!(reachable(p.start(), p.target()), n >= 0, "{p:?}");
                if n > 0 {
                    assert!(matches!(
                        check_answer(&p, n + 1, &text),
                        Err(Rejection::WrongCount { .. })
                    ));
                    // The count matches a sequence that ends elsewhere.
                    let short: Vec<&str> = text.split(' ').skip(1).collect();
                    assert_eq!(
                        check_answer(&p, n - 1, &short.join(" ")),
                        Err(Rejection::MissesTarget),
                        "{p:?}"
                    );
                    assert_eq!(check_answer(&p, -1, ""), Err(Rejection::FalseUnreachable));
                }
                assert!(matches!(
                    check_answer(&p, 1, "r99"),
                    Err(Rejection::IllegalMove(_))
                ));
                assert!(matches!(
                    check_answer(&p, -5, ""),
                    Err(Rejection::Malformed(_))
                ));
            }
        }
    }

    #[test]
    fn every_unreachable_2x2_target_is_confirmed() {
        let size = Size::new(2, 2).unwrap();
        let mut search = BidirSearch::new();
        let mut unreachable = 0;
        for a in 0..81u32 {
            for b in 0..81u32 {
                let board = |mut r: u32| {
                    let mut packed = 0;
                    for cell in 0..4 {
                        packed |= (r % 3) << (2 * cell);
                        r /= 3;
                    }
                    Board::from_packed(size, packed).unwrap()
                };
                let p = Puzzle::new(board(a), board(b)).unwrap();
                let s = search.solve(&p);
                assert_eq!(reachable(p.start(), p.target()), s.answer() >= 0);
                if s.answer() < 0 {
                    unreachable += 1;
                    assert_eq!(check_answer(&p, -1, ""), Ok(()));
                }
            }
        }
        assert!(unreachable > 0);
    }

    #[test]
    fn move_numbers_are_checked_as_the_moves_they_name() {
        let mut g = Generator::new(12);
        let mut search = BidirSearch::new();
        for size in Size::ALL {
            let table = MoveTable::of(size);
            for _ in 0..30 {
                let p = g.uniform(size);
                let s = search.solve(&p);
                let path: Vec<Move> = s.path().map(<[Move]>::to_vec).unwrap_or_default();
                let mut indices: Vec<u8> = path
                    .iter()
                    .map(|&m| MoveTable::index_of(size, m).unwrap() as u8)
                    .collect();
                assert_eq!(table.notation(&indices), Some(format_moves(&path)));
                // 4 bytes a move are enough; one byte short is refused.
                let mut out = [0; 4 * MAX_PATH_MOVES];
                let len = table.notation_bytes(&indices, &mut out).unwrap();
                assert_eq!(&out[..len], format_moves(&path).as_bytes());
                if len > 0 {
                    assert_eq!(table.notation_bytes(&indices, &mut out[..len - 1]), None);
                }
                for count in [s.answer(), s.answer() + 1, -1, -2] {
                    assert_eq!(
                        check_indices(&p, count, &indices),
                        check_moves(&p, count, &path),
                        "{p:?} {count}"
                    );
                }
                if let Some(first) = indices.first_mut() {
                    // Another move in the first place: replayed the same way.
                    *first = (*first + 1) % table.len() as u8;
                    let changed: Vec<Move> = indices.iter().map(|&i| table.get(i.into())).collect();
                    assert_eq!(
                        check_indices(&p, s.answer(), &indices),
                        check_moves(&p, s.answer(), &changed)
                    );
                    // A number past the board's moves is refused, not read.
                    indices[0] = table.len() as u8;
                    assert_eq!(table.notation(&indices), None);
                    assert!(matches!(
                        check_indices(&p, s.answer(), &indices),
                        Err(Rejection::IllegalMove(_))
                    ));
                }
            }
        }
    }
}
