//! The worker protocol's packed forms (protocol 2).
//!
//! Between the coordinator and its workers a puzzle travels as its size and
//! two packed words, and an answer's moves as one byte each (the move's
//! index on the board, [`MoveTable::move_at`]). The coordinator reads a
//! client's text boards once, when it admits them; nothing on the worker
//! path parses text or builds a string per puzzle. Both directions are
//! checked here, since neither peer trusts the other: a task whose size or
//! words are not a board, or a path byte that is not a move of the board,
//! is an error that says which.

use colball_solver::{Board, Method, Move, MoveTable, Puzzle, Size};
use thiserror::Error;

use crate::v1;

/// A task that does not describe a puzzle.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BadTask {
    #[error("task {task}: size {rows}x{cols} is not a board size")]
    Size { task: u64, rows: u32, cols: u32 },
    #[error("task {task}: field {field}: {word:#010x} is not a packed {rows}x{cols} board")]
    Board {
        task: u64,
        field: &'static str,
        word: u32,
        rows: u32,
        cols: u32,
    },
}

/// A path byte that is not a move of the board.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("move {at} of the path is {index}, and a {size} board has moves 0 to {last}")]
pub struct BadMove {
    /// The position in the path, from 0.
    pub at: usize,
    pub index: u8,
    pub size: Size,
    pub last: usize,
}

/// The wire task for a puzzle.
pub fn task_to_wire(task_id: u64, puzzle: &Puzzle, target_share: u64) -> v1::Task {
    let size = puzzle.size();
    v1::Task {
        task_id,
        rows: size.rows() as u32,
        cols: size.cols() as u32,
        start: puzzle.start().packed(),
        target: puzzle.target().packed(),
        target_share,
        trace: 0,
    }
}

/// The puzzle a wire task carries, checked: a legal size and two words
/// that are boards of it.
pub fn task_puzzle(task: &v1::Task) -> Result<Puzzle, BadTask> {
    let size = Size::new(task.rows as usize, task.cols as usize).map_err(|_| BadTask::Size {
        task: task.task_id,
        rows: task.rows,
        cols: task.cols,
    })?;
    let board = |field: &'static str, word: u32| {
        Board::from_packed(size, word).ok_or(BadTask::Board {
            task: task.task_id,
            field,
            word,
            rows: task.rows,
            cols: task.cols,
        })
    };
    let start = board("start", task.start)?;
    let target = board("target", task.target)?;
    // Same size by construction.
    Puzzle::new(start, target).map_err(|_| BadTask::Size {
        task: task.task_id,
        rows: task.rows,
        cols: task.cols,
    })
}

/// A path as the wire carries it: a move index per byte.
pub fn path_to_wire(size: Size, path: &[Move]) -> Vec<u8> {
    path.iter()
        // A move off the board (a solver bug) becomes an index no board
        // has, which the coordinator refuses.
        .map(|&m| MoveTable::index_of(size, m).map_or(u8::MAX, |i| i as u8))
        .collect()
}

/// Reads a wire path on a board of `size`; bounded by the input's length.
pub fn path_from_wire(size: Size, bytes: &[u8]) -> Result<Vec<Move>, BadMove> {
    check_path(size, bytes)?;
    Ok(bytes
        .iter()
        .map(|&index| MoveTable::move_at(size, usize::from(index)))
        .collect())
}

/// That every byte of a wire path is a move of a board of `size`, without
/// reading the path into moves (the coordinator replays the bytes).
pub fn check_path(size: Size, bytes: &[u8]) -> Result<(), BadMove> {
    let count = 2 * size.windows();
    match bytes.iter().position(|&index| usize::from(index) >= count) {
        None => Ok(()),
        Some(at) => Err(BadMove {
            at,
            index: bytes[at],
            size,
            last: count - 1,
        }),
    }
}

/// A worker's answer as protocol 2 carries it: the count `moves` and the
/// moves written as `solution` in the project's notation, on a board of
/// `size` (what a scripted worker or a test sends). A token that is not a
/// move of the board becomes a byte that is not one either, so a test can
/// send lies of every kind.
pub fn outcome_from_notation(size: Size, moves: i64, solution: &str) -> v1::task_result::Outcome {
    let path: Vec<u8> = solution
        .split_whitespace()
        .map(|t| Move::parse(t).map_or(u8::MAX, |m| path_to_wire(size, &[m])[0]))
        .collect();
    v1::task_result::Outcome::Solved(v1::TaskSolved {
        moves,
        path: path.into(),
        method: v1::Method::Bidir as i32,
        time_us: 1,
    })
}

/// The wire form of what answered a task.
pub fn method_to_wire(method: Method) -> v1::Method {
    match method {
        Method::Cache => v1::Method::Cache,
        Method::Bidir => v1::Method::Bidir,
        Method::IdaStar => v1::Method::Idastar,
        Method::Table => v1::Method::Table,
    }
}

/// What answered a task, from its wire number; `None` for a number no
/// method has (refused as a malformed answer).
pub fn method_from_wire(value: i32) -> Option<Method> {
    match v1::Method::try_from(value).ok()? {
        v1::Method::Cache => Some(Method::Cache),
        v1::Method::Bidir => Some(Method::Bidir),
        v1::Method::Idastar => Some(Method::IdaStar),
        v1::Method::Table => Some(Method::Table),
        v1::Method::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_solver::MoveKind;
    use colball_solver::generate::Generator;
    use proptest::prelude::*;

    fn sizes() -> impl Strategy<Value = Size> {
        proptest::sample::select(Size::ALL.to_vec())
    }

    proptest! {
        /// Every board of every size survives the task encoding, and
        /// through prost's bytes too.
        #[test]
        fn tasks_round_trip(size in sizes(), seed in any::<u64>(), id in any::<u64>(), share in any::<u64>()) {
            let puzzle = Generator::new(seed).uniform(size);
            let wire = task_to_wire(id, &puzzle, share);
            let bytes = prost::Message::encode_to_vec(&wire);
            let back: v1::Task = prost::Message::decode(bytes.as_slice()).unwrap();
            prop_assert_eq!(back.task_id, id);
            prop_assert_eq!(back.target_share, share);
            prop_assert_eq!(task_puzzle(&back), Ok(puzzle));
        }

        /// Every move of every size survives the path encoding, in any
        /// order and number.
        #[test]
        fn paths_round_trip(size in sizes(), picks in proptest::collection::vec(any::<usize>(), 0..64)) {
            let count = 2 * size.windows();
            let path: Vec<Move> = picks.iter().map(|i| MoveTable::move_at(size, i % count)).collect();
            let bytes = path_to_wire(size, &path);
            prop_assert_eq!(bytes.len(), path.len());
            let wire = v1::TaskSolved { moves: path.len() as i64, path: bytes.into(), method: 2, time_us: 1 };
            let back: v1::TaskSolved = prost::Message::decode(prost::Message::encode_to_vec(&wire).as_slice()).unwrap();
            prop_assert_eq!(path_from_wire(size, &back.path), Ok(path));
        }

        /// A byte past the board's moves is refused, saying where.
        #[test]
        fn bytes_that_are_not_moves_are_refused(size in sizes(), at in 0usize..8, bad in any::<u8>()) {
            let count = 2 * size.windows();
            prop_assume!(usize::from(bad) >= count);
            let mut bytes = vec![0u8; 8];
            bytes[at] = bad;
            let e = path_from_wire(size, &bytes).unwrap_err();
            prop_assert_eq!(e.at, at);
            prop_assert_eq!(e.last, count - 1);
        }

        /// A word with a cell of 3, or bits beyond the board, is refused.
        #[test]
        fn words_that_are_not_boards_are_refused(size in sizes(), word in any::<u32>()) {
            let task = v1::Task { task_id: 9, rows: size.rows() as u32, cols: size.cols() as u32, start: word, target: 0, target_share: 0, trace: 0 };
            prop_assert_eq!(task_puzzle(&task).is_ok(), Board::from_packed(size, word).is_some());
        }
    }

    #[test]
    fn every_move_has_its_own_index() {
        for size in Size::ALL {
            let mut seen = std::collections::HashSet::new();
            for row in 2..=size.rows() as u8 {
                for col in 2..=size.cols() as u8 {
                    for kind in [MoveKind::Rotate, MoveKind::Recolour] {
                        let m = Move { kind, row, col };
                        let bytes = path_to_wire(size, &[m]);
                        assert!(seen.insert(bytes[0]), "{size}: {m:?}");
                        assert_eq!(path_from_wire(size, &bytes), Ok(vec![m]));
                    }
                }
            }
            assert_eq!(seen.len(), 2 * size.windows());
        }
    }

    #[test]
    fn sizes_off_the_board_are_refused() {
        for (rows, cols) in [(1, 2), (5, 4), (4, 5), (0, 0), (u32::MAX, 2)] {
            let task = v1::Task {
                task_id: 3,
                rows,
                cols,
                start: 0,
                target: 0,
                target_share: 0,
                trace: 0,
            };
            let e = task_puzzle(&task).unwrap_err();
            assert!(matches!(e, BadTask::Size { .. }), "{e}");
            assert!(e.to_string().contains("task 3"), "{e}");
        }
    }

    #[test]
    fn methods_round_trip() {
        for m in [Method::Cache, Method::Bidir, Method::IdaStar, Method::Table] {
            assert_eq!(method_from_wire(method_to_wire(m) as i32), Some(m));
        }
        assert_eq!(method_from_wire(0), None);
        assert_eq!(method_from_wire(99), None);
    }
}
