//! The two moves, their notation, and fast packed application.
//!
//! A move names the 2x2 window by its bottom-right cell `(i, j)`, 1-based, with
//! `2 <= i <= rows` and `2 <= j <= cols`: `rIJ` rotates the window clockwise,
//! `cIJ` recolours it (`R -> B -> G -> R`).
//!
//! [`MoveTable`] numbers the moves of one size `0..2*windows` (window-major,
//! rotation before recolour) and applies them to packed words with a handful
//! of shifts and masks. It also records which move orders are redundant
//! because the two moves commute, which the searches use to prune.

use std::fmt;

use thiserror::Error;

use crate::board::{Board, Size};

/// Rotate clockwise, or recolour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MoveKind {
    Rotate,
    Recolour,
}

/// One move: a kind and the window's bottom-right cell (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Move {
    pub kind: MoveKind,
    pub row: u8,
    pub col: u8,
}

impl Move {
    /// Whether this move's window lies on a board of `size`.
    pub fn fits(self, size: Size) -> bool {
        (2..=size.rows()).contains(&(self.row as usize))
            && (2..=size.cols()).contains(&(self.col as usize))
    }

    /// Parses one token such as `r22` or `c34`.
    pub fn parse(token: &str) -> Option<Move> {
        let bytes = token.as_bytes();
        if bytes.len() != 3 || !bytes[1].is_ascii_digit() || !bytes[2].is_ascii_digit() {
            return None;
        }
        let kind = match bytes[0] {
            b'r' => MoveKind::Rotate,
            b'c' => MoveKind::Recolour,
            _ => return None,
        };
        Some(Move {
            kind,
            row: bytes[1] - b'0',
            col: bytes[2] - b'0',
        })
    }

    /// Applies this move to `board`.
    pub fn apply(self, board: Board) -> Result<Board, MoveError> {
        let index =
            MoveTable::index_of(board.size(), self).ok_or_else(|| MoveError::OutOfRange {
                index: 1,
                token: self.to_string(),
                size: board.size(),
            })?;
        let table = MoveTable::of(board.size());
        Ok(Board::from_packed_unchecked(
            board.size(),
            table.apply(board.packed(), index),
        ))
    }
}

impl Move {
    /// The move's three characters (`r22`): rows and columns are 2 to 4.
    fn chars(self) -> [char; 3] {
        let k = match self.kind {
            MoveKind::Rotate => 'r',
            MoveKind::Recolour => 'c',
        };
        let digit = |d: u8| char::from_digit(u32::from(d), 10).unwrap_or('?');
        [k, digit(self.row), digit(self.col)]
    }
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [k, r, c] = self.chars();
        write!(f, "{k}{r}{c}")
    }
}

/// Writes moves in the project's notation, separated by single spaces
/// (without the formatting machinery: the coordinator writes one per
/// result).
pub fn format_moves(moves: &[Move]) -> String {
    let mut out = String::with_capacity(moves.len() * 4);
    for (i, m) in moves.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.extend(m.chars());
    }
    out
}

/// A move sequence that cannot be read or applied. `index` is 1-based.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MoveError {
    #[error(
        "move {index} {token:?} is not a move: expected r or c followed by the row and column digits of the window's bottom-right cell, like r22"
    )]
    BadToken { index: usize, token: String },
    #[error(
        "move {index} {token:?} has no window on a {size} board: the bottom-right cell must be in rows 2..{} and columns 2..{}",
        size.rows(),
        size.cols()
    )]
    OutOfRange {
        index: usize,
        token: String,
        size: Size,
    },
}

/// Reads a whitespace-separated move sequence for a board of `size`.
pub fn parse_moves(size: Size, text: &str) -> Result<Vec<Move>, MoveError> {
    text.split_whitespace()
        .enumerate()
        .map(|(i, token)| {
            let m = Move::parse(token).ok_or_else(|| MoveError::BadToken {
                index: i + 1,
                token: token.to_string(),
            })?;
            if !m.fits(size) {
                return Err(MoveError::OutOfRange {
                    index: i + 1,
                    token: token.to_string(),
                    size,
                });
            }
            Ok(m)
        })
        .collect()
}

/// Applies `moves` in order to `board`; the error names the first move that
/// has no window on this board.
pub fn apply_moves(board: Board, moves: &[Move]) -> Result<Board, MoveError> {
    let table = MoveTable::of(board.size());
    let mut packed = board.packed();
    for (i, &m) in moves.iter().enumerate() {
        // `ok_or_else`: the error's text is built only for an error.
        let index = MoveTable::index_of(board.size(), m).ok_or_else(|| MoveError::OutOfRange {
            index: i + 1,
            token: m.to_string(),
            size: board.size(),
        })?;
        packed = table.apply(packed, index);
    }
    Ok(Board::from_packed_unchecked(board.size(), packed))
}

/// The precomputed form of one move on packed words.
#[derive(Clone, Copy, Debug)]
struct Op {
    /// Bit offset of the window's top-left cell; the top-right cell follows it.
    top: u32,
    /// Bit offset of the window's bottom-left cell; the bottom-right follows.
    bottom: u32,
    /// The low bit of each of the window's four cells.
    lows: u32,
    recolour: bool,
}

/// Most moves on any board (4x4: 9 windows, 2 kinds).
pub const MAX_MOVES: usize = 18;

/// Bit set of the recolour moves in a [`MoveTable`] (the odd numbers); the
/// rotations are the rest.
pub const RECOLOUR_MOVES: u32 = 0xAAAA_AAAA & ((1 << MAX_MOVES) - 1);

/// All moves of one size, numbered `0..len()`: move `2*w` rotates window `w`,
/// `2*w + 1` recolours it; windows are numbered row-major by top-left cell.
#[derive(Clone, Debug)]
pub struct MoveTable {
    size: Size,
    ops: Vec<Op>,
    moves: Vec<Move>,
    /// `redundant_after[l]`: bit `m` is set when move `m` may be skipped right
    /// after move `l` because the two commute and `m < l` (the order `l, m`
    /// reaches the same board as `m, l`, which the search generates anyway).
    redundant_after: [u32; MAX_MOVES],
}

impl MoveTable {
    /// The table of `size`, built once per process and shared (checking a
    /// reported answer needs one per answer).
    pub fn of(size: Size) -> &'static MoveTable {
        static TABLES: std::sync::OnceLock<Vec<MoveTable>> = std::sync::OnceLock::new();
        let tables = TABLES.get_or_init(|| Size::ALL.into_iter().map(MoveTable::new).collect());
        let at = Size::ALL.iter().position(|&s| s == size).unwrap_or(0);
        &tables[at]
    }

    pub fn new(size: Size) -> MoveTable {
        let cols = size.cols() as u32;
        let mut ops = Vec::with_capacity(2 * size.windows());
        let mut moves = Vec::with_capacity(2 * size.windows());
        let mut windows = Vec::new();
        for r in 0..size.rows() as u32 - 1 {
            for c in 0..cols - 1 {
                let tl = r * cols + c;
                let bl = tl + cols;
                let lows =
                    (1 << (2 * tl)) | (1 << (2 * tl + 2)) | (1 << (2 * bl)) | (1 << (2 * bl + 2));
                for recolour in [false, true] {
                    ops.push(Op {
                        top: 2 * tl,
                        bottom: 2 * bl,
                        lows,
                        recolour,
                    });
                    moves.push(Move {
                        kind: if recolour {
                            MoveKind::Recolour
                        } else {
                            MoveKind::Rotate
                        },
                        row: (r + 2) as u8,
                        col: (c + 2) as u8,
                    });
                    windows.push((r, c));
                }
            }
        }
        let mut redundant_after = [0u32; MAX_MOVES];
        for l in 0..moves.len() {
            for m in 0..l {
                let (wl, wm) = (windows[l], windows[m]);
                let disjoint = wl.0.abs_diff(wm.0) > 1 || wl.1.abs_diff(wm.1) > 1;
                let both_recolour = ops[l].recolour && ops[m].recolour;
                // A recolour adds 1 to each cell of its window and a rotation
                // only permutes those cells, so on one window they commute.
                let same_window_mixed = wl == wm && ops[l].recolour != ops[m].recolour;
                if disjoint || both_recolour || same_window_mixed {
                    redundant_after[l] |= 1 << m;
                }
            }
        }
        MoveTable {
            size,
            ops,
            moves,
            redundant_after,
        }
    }

    pub fn size(&self) -> Size {
        self.size
    }

    /// Number of moves, `2 * windows`.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The move numbered `index`.
    pub fn get(&self, index: usize) -> Move {
        self.moves[index]
    }

    /// The move numbered `index` on a board of `size` (as [`MoveTable::get`],
    /// without building a table).
    pub fn move_at(size: Size, index: usize) -> Move {
        let window = index / 2;
        Move {
            kind: if index % 2 == 1 {
                MoveKind::Recolour
            } else {
                MoveKind::Rotate
            },
            row: (window / (size.cols() - 1) + 2) as u8,
            col: (window % (size.cols() - 1) + 2) as u8,
        }
    }

    /// The number of `m` on a board of `size`, if its window fits.
    pub fn index_of(size: Size, m: Move) -> Option<usize> {
        if !m.fits(size) {
            return None;
        }
        let window = (m.row as usize - 2) * (size.cols() - 1) + (m.col as usize - 2);
        Some(2 * window + (m.kind == MoveKind::Recolour) as usize)
    }

    /// Bit set of moves to skip right after move `last` (see the field doc).
    #[inline(always)]
    pub fn redundant_after(&self, last: usize) -> u32 {
        self.redundant_after[last]
    }

    /// Applies move `index`, known to be a recolour when `RECOLOUR` and a
    /// rotation otherwise, or its inverse when `INVERSE`. Hot loops split the
    /// moves by kind (see [`RECOLOUR_MOVES`]) and call this branch-free form.
    #[inline(always)]
    pub fn apply_kind<const RECOLOUR: bool, const INVERSE: bool>(
        &self,
        packed: u32,
        index: usize,
    ) -> u32 {
        let op = self.ops[index];
        debug_assert_eq!(op.recolour, RECOLOUR);
        match (RECOLOUR, INVERSE) {
            (true, false) => recolour(packed, op.lows),
            (true, true) => recolour_inverse(packed, op.lows),
            (false, false) => rotate(packed, op.top, op.bottom),
            (false, true) => rotate_inverse(packed, op.top, op.bottom),
        }
    }

    /// Applies the moves numbered `indices` (the worker protocol's form of
    /// a path) to a packed board; `None` if one is not a move of this size.
    pub fn apply_indices(&self, mut packed: u32, indices: &[u8]) -> Option<u32> {
        for &index in indices {
            let op = *self.ops.get(usize::from(index))?;
            packed = if op.recolour {
                recolour(packed, op.lows)
            } else {
                rotate(packed, op.top, op.bottom)
            };
        }
        Some(packed)
    }

    /// The notation of the moves numbered `indices`, space-separated (as
    /// [`format_moves`] writes them); `None` if one is not a move of this
    /// size.
    pub fn notation(&self, indices: &[u8]) -> Option<String> {
        let mut out = vec![0; 4 * indices.len()];
        let len = self.notation_bytes(indices, &mut out)?;
        out.truncate(len);
        String::from_utf8(out).ok()
    }

    /// [`Self::notation`], written as ASCII into `out` (4 bytes a move
    /// are always enough): the length written, or `None` if one is not a
    /// move of this size or `out` is too short. (No allocation: the
    /// coordinator writes every answer's notation on a stack buffer.)
    pub fn notation_bytes(&self, indices: &[u8], out: &mut [u8]) -> Option<usize> {
        let mut len = 0;
        for (i, &index) in indices.iter().enumerate() {
            let token = self.moves.get(usize::from(index))?.chars().map(|c| c as u8);
            let at = len + usize::from(i > 0);
            out.get_mut(at..at + 3)?.copy_from_slice(&token);
            if i > 0 {
                out[len] = b' ';
            }
            len = at + 3;
        }
        Some(len)
    }

    /// Applies move `index` to a packed board.
    #[inline(always)]
    pub fn apply(&self, packed: u32, index: usize) -> u32 {
        let op = self.ops[index];
        // Both are a few instructions; computing both and selecting avoids a
        // branch that the search's move order makes hard to predict.
        let (a, b) = (recolour(packed, op.lows), rotate(packed, op.top, op.bottom));
        if op.recolour { a } else { b }
    }

    /// Applies the inverse of move `index` (counter-clockwise rotation, or
    /// recolour `R -> G -> B -> R`).
    #[inline(always)]
    pub fn apply_inverse(&self, packed: u32, index: usize) -> u32 {
        let op = self.ops[index];
        let (a, b) = (
            recolour_inverse(packed, op.lows),
            rotate_inverse(packed, op.top, op.bottom),
        );
        if op.recolour { a } else { b }
    }
}

/// Clockwise: top-left -> top-right -> bottom-right -> bottom-left -> top-left.
#[inline(always)]
fn rotate(s: u32, top: u32, bottom: u32) -> u32 {
    // `t` holds top-left (bits 0-1) and top-right (bits 2-3); `b` holds
    // bottom-left and bottom-right likewise.
    let t = (s >> top) & 0xF;
    let b = (s >> bottom) & 0xF;
    let new_t = (b & 3) | ((t & 3) << 2);
    let new_b = (b >> 2) | (t & 0xC);
    (s & !((0xF << top) | (0xF << bottom))) | (new_t << top) | (new_b << bottom)
}

#[inline(always)]
fn rotate_inverse(s: u32, top: u32, bottom: u32) -> u32 {
    let t = (s >> top) & 0xF;
    let b = (s >> bottom) & 0xF;
    let new_t = (t >> 2) | ((b >> 2) << 2);
    let new_b = ((b & 3) << 2) | (t & 3);
    (s & !((0xF << top) | (0xF << bottom))) | (new_t << top) | (new_b << bottom)
}

/// `R(00) -> B(01) -> G(10) -> R` on the four cells whose low bits are `lows`:
/// the new high bit is the old low bit, the new low bit is set where both were
/// clear.
#[inline(always)]
fn recolour(s: u32, lows: u32) -> u32 {
    let lo = s & lows;
    let hi = (s >> 1) & lows;
    let new_lo = !(lo | hi) & lows;
    (s & !(lows | (lows << 1))) | new_lo | (lo << 1)
}

/// `R(00) -> G(10) -> B(01) -> R`: the new low bit is the old high bit, the new
/// high bit is set where both were clear.
#[inline(always)]
fn recolour_inverse(s: u32, lows: u32) -> u32 {
    let lo = s & lows;
    let hi = (s >> 1) & lows;
    let new_hi = !(lo | hi) & lows;
    (s & !(lows | (lows << 1))) | hi | (new_hi << 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(rows: &[&str]) -> Board {
        Board::parse_rows(rows).unwrap()
    }

    #[test]
    fn shared_tables_are_those_of_their_size() {
        for size in Size::ALL {
            let shared = MoveTable::of(size);
            assert_eq!(shared.size(), size);
            assert_eq!(shared.len(), MoveTable::new(size).len());
        }
    }

    #[test]
    fn rotation_follows_the_statement() {
        // Window r22 on 2x2: TL->TR, TR->BR, BR->BL, BL->TL.
        let b = board(&["RB", "GR"]);
        let m = Move::parse("r22").unwrap();
        assert_eq!(m.apply(b).unwrap().rows(), vec!["GR", "RB"]);
    }

    #[test]
    fn recolour_follows_the_statement() {
        let b = board(&["RBG", "GGR", "BBB"]);
        let m = Move::parse("c33").unwrap();
        assert_eq!(m.apply(b).unwrap().rows(), vec!["RBG", "GRB", "BGG"]);
    }

    #[test]
    fn inverses_undo_every_move_on_every_size() {
        for size in Size::ALL {
            let table = MoveTable::new(size);
            assert_eq!(table.len(), 2 * size.windows());
            let mut s = 0x2461_9A58u32 & size.used_bits();
            s &= !((s >> 1) & s & 0x5555_5555);
            for i in 0..table.len() {
                let t = table.apply(s, i);
                assert!(Board::from_packed(size, t).is_some());
                assert_eq!(table.apply_inverse(t, i), s);
                assert_eq!(MoveTable::index_of(size, table.get(i)), Some(i));
                assert_eq!(MoveTable::move_at(size, i), table.get(i));
                s = t;
            }
        }
    }

    #[test]
    fn orders_of_the_moves() {
        let table = MoveTable::new(Size::new(3, 3).unwrap());
        let s = board(&["RBG", "GGR", "BRB"]).packed();
        for i in 0..table.len() {
            let order = if i % 2 == 0 { 4 } else { 3 };
            let mut t = s;
            for k in 1..=order {
                t = table.apply(t, i);
                assert_eq!(t == s, k == order, "move {i} power {k}");
            }
        }
    }

    #[test]
    fn redundant_orders_really_commute() {
        for size in Size::ALL {
            let table = MoveTable::new(size);
            let mut s = 0x9158_6A24u32 & size.used_bits();
            s &= !((s >> 1) & s & 0x5555_5555);
            for l in 0..table.len() {
                for m in 0..table.len() {
                    let commute =
                        table.apply(table.apply(s, l), m) == table.apply(table.apply(s, m), l);
                    if table.redundant_after(l) >> m & 1 == 1 {
                        assert!(m < l && commute, "{size}: {l} then {m}");
                    }
                }
            }
        }
    }

    #[test]
    fn notation_round_trips_and_errors_name_the_move() {
        let size = Size::new(3, 4).unwrap();
        let moves = parse_moves(size, "  r22 c34\tr33 ").unwrap();
        assert_eq!(format_moves(&moves), "r22 c34 r33");
        assert_eq!(
            parse_moves(size, "r22 c44"),
            Err(MoveError::OutOfRange {
                index: 2,
                token: "c44".into(),
                size
            })
        );
        assert_eq!(
            parse_moves(size, "r22 x12"),
            Err(MoveError::BadToken {
                index: 2,
                token: "x12".into()
            })
        );
        assert!(parse_moves(size, "r2").is_err());
        assert!(parse_moves(size, "r222").is_err());
    }
}
