//! Boards: legal sizes, the three colours, and the packed 2-bit board.
//!
//! A board of up to 16 cells fits one `u32`: cell `(r, c)` (0-based) is cell
//! index `r * cols + c` and lives in bits `2*index .. 2*index+2`, holding
//! `0 = R`, `1 = B`, `2 = G`. Unused high bits are always zero, so two boards of
//! one size are equal exactly when their packed words are, and the base-3 rank
//! of a board (see [`crate::rank`]) is a dense index below `3^cells`.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The largest number of cells a board may have.
pub const MAX_CELLS: usize = 16;

/// A legal board size: `2 <= rows, cols <= 4` and `rows * cols <= 16`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Size {
    rows: u8,
    cols: u8,
}

/// A size outside the legal range.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "size {rows}x{cols} is out of range: rows and columns must each be 2 to 4, with rows*cols <= 16"
)]
pub struct SizeError {
    pub rows: usize,
    pub cols: usize,
}

impl Size {
    /// Every legal size, smallest first.
    pub const ALL: [Size; 9] = [
        Size { rows: 2, cols: 2 },
        Size { rows: 2, cols: 3 },
        Size { rows: 3, cols: 2 },
        Size { rows: 2, cols: 4 },
        Size { rows: 4, cols: 2 },
        Size { rows: 3, cols: 3 },
        Size { rows: 3, cols: 4 },
        Size { rows: 4, cols: 3 },
        Size { rows: 4, cols: 4 },
    ];

    /// Checks the bounds of the puzzle statement.
    pub fn new(rows: usize, cols: usize) -> Result<Size, SizeError> {
        if (2..=4).contains(&rows) && (2..=4).contains(&cols) && rows * cols <= MAX_CELLS {
            Ok(Size {
                rows: rows as u8,
                cols: cols as u8,
            })
        } else {
            Err(SizeError { rows, cols })
        }
    }

    pub fn rows(self) -> usize {
        self.rows as usize
    }

    pub fn cols(self) -> usize {
        self.cols as usize
    }

    pub fn cells(self) -> usize {
        self.rows() * self.cols()
    }

    /// Number of 2x2 windows, `(rows-1)*(cols-1)`; each has two moves.
    pub fn windows(self) -> usize {
        (self.rows() - 1) * (self.cols() - 1)
    }

    /// Number of boards of this size, `3^cells`.
    pub fn state_count(self) -> usize {
        3usize.pow(self.cells() as u32)
    }

    /// Mask of the packed bits this size uses.
    pub(crate) fn used_bits(self) -> u32 {
        if self.cells() == MAX_CELLS {
            u32::MAX
        } else {
            (1u32 << (2 * self.cells())) - 1
        }
    }

    /// The same board shape turned a quarter: rows and columns swapped.
    pub fn transposed(self) -> Size {
        Size {
            rows: self.cols,
            cols: self.rows,
        }
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

/// Parsing `"4x4"` (also `4X4`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SizeParseError {
    #[error("'{0}' is not a size: expected ROWSxCOLS, like 4x4")]
    Syntax(String),
    #[error(transparent)]
    Range(#[from] SizeError),
}

impl FromStr for Size {
    type Err = SizeParseError;

    fn from_str(s: &str) -> Result<Size, SizeParseError> {
        let syntax = || SizeParseError::Syntax(s.to_string());
        let (r, c) = s.trim().split_once(['x', 'X']).ok_or_else(syntax)?;
        let r: usize = r.trim().parse().map_err(|_| syntax())?;
        let c: usize = c.trim().parse().map_err(|_| syntax())?;
        Ok(Size::new(r, c)?)
    }
}

/// One of the three ball colours. The discriminant is the packed value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Colour {
    Red = 0,
    Blue = 1,
    Green = 2,
}

impl Colour {
    pub const ALL: [Colour; 3] = [Colour::Red, Colour::Blue, Colour::Green];

    /// `R`, `B` or `G` (upper case only, as in the puzzle statement).
    pub fn from_letter(letter: u8) -> Option<Colour> {
        match letter {
            b'R' => Some(Colour::Red),
            b'B' => Some(Colour::Blue),
            b'G' => Some(Colour::Green),
            _ => None,
        }
    }

    pub fn letter(self) -> char {
        match self {
            Colour::Red => 'R',
            Colour::Blue => 'B',
            Colour::Green => 'G',
        }
    }

    fn from_bits(bits: u32) -> Colour {
        match bits & 3 {
            0 => Colour::Red,
            1 => Colour::Blue,
            _ => Colour::Green,
        }
    }

    /// The colour a recolour move turns this one into: R -> B -> G -> R.
    pub fn next(self) -> Colour {
        Colour::from_bits((self as u32 + 1) % 3)
    }
}

/// What is wrong with a board given as rows of letters. Rows and columns are
/// 1-based, as a person counts them.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BoardError {
    #[error("expected {expected} rows, found {found}")]
    RowCount { expected: usize, found: usize },
    #[error("row {row} has {found} letters, expected {expected}")]
    RowLength {
        row: usize,
        expected: usize,
        found: usize,
    },
    #[error("row {row}, column {col}: {found:?} is not a colour (expected R, B or G)")]
    BadLetter { row: usize, col: usize, found: char },
    /// Letters are written together: `RGB`, not `R G B`.
    #[error(
        "row {row}, column {col}: a space between letters (write a row's letters together, like RGB)"
    )]
    Space { row: usize, col: usize },
    #[error(transparent)]
    Size(#[from] SizeError),
}

/// A board: its size and its packed cells.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Board {
    size: Size,
    cells: u32,
}

/// A byte's colour code (`R=0 B=1 G=2`, as [`Colour`] numbers them), or
/// `0xff` for a byte that is no colour's letter ([`Board::from_letters`]).
const LETTER_CODES: [u8; 256] = {
    let mut codes = [0xff; 256];
    codes[b'R' as usize] = Colour::Red as u8;
    codes[b'B' as usize] = Colour::Blue as u8;
    codes[b'G' as usize] = Colour::Green as u8;
    codes
};

impl Board {
    /// A board of one colour.
    pub fn filled(size: Size, colour: Colour) -> Board {
        let mut cells = 0;
        for i in 0..size.cells() {
            cells |= (colour as u32) << (2 * i);
        }
        Board { size, cells }
    }

    /// Reads `size.rows()` rows of `size.cols()` letters each.
    pub fn from_rows<S: AsRef<[u8]>>(size: Size, rows: &[S]) -> Result<Board, BoardError> {
        if rows.len() != size.rows() {
            return Err(BoardError::RowCount {
                expected: size.rows(),
                found: rows.len(),
            });
        }
        let mut cells = 0u32;
        for (r, row) in rows.iter().enumerate() {
            cells |= read_row(size, r, row.as_ref())?;
        }
        Ok(Board { size, cells })
    }

    /// A board of `size` from its letters, row after row with nothing
    /// between them; `None` unless there is one letter for each cell and
    /// each is `R`, `G` or `B` (the rows' own reading, [`Board::from_rows`],
    /// says what is wrong).
    pub fn from_letters(size: Size, letters: &[u8]) -> Option<Board> {
        if letters.len() != size.cells() {
            return None;
        }
        // Without a branch a letter: a byte's code from a table, where
        // anything but a colour's letter has the high bit set.
        let (mut cells, mut seen) = (0u32, 0u8);
        for (i, &b) in letters.iter().enumerate() {
            let code = LETTER_CODES[usize::from(b)];
            seen |= code;
            cells |= u32::from(code & 3) << (2 * i);
        }
        (seen & 0x80 == 0).then_some(Board { size, cells })
    }

    /// Reads rows of letters whose count and length give the size.
    pub fn parse_rows<S: AsRef<[u8]>>(rows: &[S]) -> Result<Board, BoardError> {
        let cols = rows.first().map_or(0, |r| char_count(r.as_ref()));
        let size = Size::new(rows.len(), cols)?;
        Board::from_rows(size, rows)
    }

    /// A board from its packed word; `None` if a cell holds 3 or bits beyond
    /// the board's cells are set.
    pub fn from_packed(size: Size, cells: u32) -> Option<Board> {
        let hi = (cells >> 1) & 0x5555_5555;
        let lo = cells & 0x5555_5555;
        if cells & !size.used_bits() != 0 || hi & lo != 0 {
            return None;
        }
        Some(Board { size, cells })
    }

    /// Trusted constructor for words produced by the move functions.
    pub(crate) fn from_packed_unchecked(size: Size, cells: u32) -> Board {
        debug_assert!(Board::from_packed(size, cells).is_some());
        Board { size, cells }
    }

    pub fn size(&self) -> Size {
        self.size
    }

    /// The packed cells (2 bits each, row-major, `R=0 B=1 G=2`).
    pub fn packed(&self) -> u32 {
        self.cells
    }

    /// The colour at 0-based `(row, col)`.
    pub fn get(&self, row: usize, col: usize) -> Colour {
        assert!(row < self.size.rows() && col < self.size.cols());
        Colour::from_bits(self.cells >> (2 * (row * self.size.cols() + col)))
    }

    /// A copy with 0-based `(row, col)` set to `colour`.
    pub fn with(mut self, row: usize, col: usize, colour: Colour) -> Board {
        assert!(row < self.size.rows() && col < self.size.cols());
        let shift = 2 * (row * self.size.cols() + col);
        self.cells = (self.cells & !(3 << shift)) | ((colour as u32) << shift);
        self
    }

    /// The rows as strings of letters.
    pub fn rows(&self) -> Vec<String> {
        (0..self.size.rows())
            .map(|r| {
                (0..self.size.cols())
                    .map(|c| self.get(r, c).letter())
                    .collect()
            })
            .collect()
    }
}

impl fmt::Debug for Board {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Board({} {})", self.size, self.rows().join("/"))
    }
}

impl fmt::Display for Board {
    /// One row per line, no trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rows().join("\n"))
    }
}

/// A start and a target of the same size.
///
/// Held as the two packed words and the size once: 12 bytes, not the 16
/// of two boards (queues of a million puzzles hold one each).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Puzzle {
    start: u32,
    target: u32,
    size: Size,
}

const _: () = assert!(size_of::<Puzzle>() == 12);

impl fmt::Debug for Puzzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Puzzle")
            .field("start", &self.start())
            .field("target", &self.target())
            .finish()
    }
}

/// Start and target of different sizes.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("start is {start} but target is {target}: both boards must have the same size")]
pub struct SizeMismatch {
    pub start: Size,
    pub target: Size,
}

impl Puzzle {
    pub fn new(start: Board, target: Board) -> Result<Puzzle, SizeMismatch> {
        if start.size() != target.size() {
            return Err(SizeMismatch {
                start: start.size(),
                target: target.size(),
            });
        }
        Ok(Puzzle {
            start: start.cells,
            target: target.cells,
            size: start.size,
        })
    }

    pub fn size(&self) -> Size {
        self.size
    }

    pub fn start(&self) -> Board {
        Board {
            size: self.size,
            cells: self.start,
        }
    }

    pub fn target(&self) -> Board {
        Board {
            size: self.size,
            cells: self.target,
        }
    }
}

/// Reads row `r` (0-based) of a board of `size`: its packed bits, in place.
pub(crate) fn read_row(size: Size, r: usize, row: &[u8]) -> Result<u32, BoardError> {
    // A row of the right letters takes one pass; anything else the slow
    // reading below, which says what is wrong and where.
    if row.len() == size.cols() {
        let mut cells = 0u32;
        let shift = 2 * r * size.cols();
        let all = row
            .iter()
            .enumerate()
            .all(|(c, &b)| match Colour::from_letter(b) {
                Some(colour) => {
                    cells |= (colour as u32) << (shift + 2 * c);
                    true
                }
                None => false,
            });
        if all {
            return Ok(cells);
        }
    }
    // Before the length: a space is not a letter to count.
    if let Some(at) = row.iter().position(|&b| b == b' ' || b == b'\t') {
        return Err(BoardError::Space {
            row: r + 1,
            col: char_count(&row[..at]) + 1,
        });
    }
    let letters = char_count(row);
    if letters != size.cols() {
        return Err(BoardError::RowLength {
            row: r + 1,
            expected: size.cols(),
            found: letters,
        });
    }
    let mut cells = 0u32;
    for (c, &b) in row.iter().enumerate() {
        let colour = Colour::from_letter(b).ok_or_else(|| BoardError::BadLetter {
            row: r + 1,
            col: char_count(&row[..c]) + 1,
            found: first_char(&row[c..]),
        })?;
        cells |= (colour as u32) << (2 * (r * size.cols() + c));
    }
    Ok(cells)
}

/// Letters in a row as a person counts them (UTF-8 aware, so a stray `é` is
/// one letter, not two).
fn char_count(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| (b & 0xC0) != 0x80).count()
}

/// The character starting at `bytes`, or U+FFFD if it is not valid UTF-8.
fn first_char(bytes: &[u8]) -> char {
    let len = bytes.len().min(4);
    (1..=len)
        .find_map(|n| std::str::from_utf8(&bytes[..n]).ok())
        .and_then(|s| s.chars().next())
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_sizes_are_exactly_the_nine() {
        let mut legal = Vec::new();
        for r in 0..=6 {
            for c in 0..=6 {
                if let Ok(s) = Size::new(r, c) {
                    legal.push(s);
                }
            }
        }
        legal.sort();
        let mut all = Size::ALL.to_vec();
        all.sort();
        assert_eq!(legal, all);
    }

    #[test]
    fn size_parses_and_prints() {
        let s: Size = "3x4".parse().unwrap();
        assert_eq!((s.rows(), s.cols()), (3, 4));
        assert_eq!(s.to_string(), "3x4");
        assert!(matches!(
            "5x2".parse::<Size>(),
            Err(SizeParseError::Range(_))
        ));
        assert!(matches!(
            "44".parse::<Size>(),
            Err(SizeParseError::Syntax(_))
        ));
    }

    #[test]
    fn rows_round_trip() {
        let b = Board::parse_rows(&["RGB", "BBR"]).unwrap();
        assert_eq!(b.size().to_string(), "2x3");
        assert_eq!(b.rows(), vec!["RGB", "BBR"]);
        assert_eq!(b.get(0, 1), Colour::Green);
        assert_eq!(Board::from_packed(b.size(), b.packed()), Some(b));
    }

    #[test]
    fn board_errors_name_the_place() {
        let size = Size::new(2, 2).unwrap();
        assert_eq!(
            Board::from_rows(size, &["RG", "RXB"]),
            Err(BoardError::RowLength {
                row: 2,
                expected: 2,
                found: 3
            })
        );
        assert_eq!(
            Board::from_rows(size, &["RG", "Ré"]),
            Err(BoardError::BadLetter {
                row: 2,
                col: 2,
                found: 'é'
            })
        );
        assert!(matches!(
            Board::parse_rows(&["RGBRG", "RGBRG"]),
            Err(BoardError::Size(_))
        ));
    }

    #[test]
    fn packed_rejects_invalid_words() {
        let size = Size::new(2, 2).unwrap();
        assert!(Board::from_packed(size, 0b11).is_none());
        assert!(Board::from_packed(size, 1 << 8).is_none());
        assert!(Board::from_packed(size, 0b10_01_00_10).is_some());
    }

    #[test]
    fn colours_cycle() {
        assert_eq!(Colour::Red.next(), Colour::Blue);
        assert_eq!(Colour::Blue.next(), Colour::Green);
        assert_eq!(Colour::Green.next(), Colour::Red);
    }
}
