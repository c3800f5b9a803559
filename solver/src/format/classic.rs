//! The contest's classic format.
//!
//! Input: cases of a line `N M`, `N` rows of the start board and `N` rows of
//! the target board; a line whose first number is `0` ends the input, and so
//! does the end of the file. Blank lines, spaces around numbers and rows,
//! CRLF line ends and a UTF-8 byte-order mark at the start are tolerated;
//! a space between a row's letters is an error naming its column. Output:
//! one integer per case.

use thiserror::Error;

use super::{excerpt, numbered_lines};
use crate::board::{Board, BoardError, Puzzle, Size, SizeError, read_row};
use crate::search::Solution;

/// One puzzle read from a file, with the line of its `N M` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    pub line: usize,
    pub puzzle: Puzzle,
}

/// Which of a case's two boards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Start,
    Target,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Which::Start => "start",
            Which::Target => "target",
        })
    }
}

/// What is wrong, and on which line (1-based).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {kind}")]
pub struct ParseError {
    pub line: usize,
    pub kind: ParseErrorKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ParseErrorKind {
    #[error("expected the size line \"N M\" (two numbers) of case {case}, found {found:?}")]
    BadHeader { case: usize, found: String },
    #[error("case {case}: {error}")]
    Size { case: usize, error: SizeError },
    #[error(
        "case {case}: {found} in the size line is not a board size (rows and columns are 2 to 4)"
    )]
    TooLarge { case: usize, found: String },
    #[error("case {case}, {which} board, {error}")]
    Row {
        case: usize,
        which: Which,
        error: BoardError,
    },
    #[error(
        "input ends inside case {case}: the {which} board needs {expected} rows, found {found}"
    )]
    Truncated {
        case: usize,
        which: Which,
        expected: usize,
        found: usize,
    },
}

/// Reads every case; the first error stops the reading.
pub fn parse(input: &[u8]) -> Result<Vec<Case>, ParseError> {
    Cases::new(input).collect()
}

/// The cases of an input, one at a time. After an error it yields nothing.
pub struct Cases<'a> {
    lines: Box<dyn Iterator<Item = (usize, &'a [u8])> + 'a>,
    parser: Parser,
    done: bool,
}

impl std::fmt::Debug for Cases<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cases")
            .field("parser", &self.parser)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'a> Cases<'a> {
    pub fn new(input: &'a [u8]) -> Cases<'a> {
        Cases {
            lines: Box::new(numbered_lines(input)),
            parser: Parser::default(),
            done: false,
        }
    }
}

impl Iterator for Cases<'_> {
    type Item = Result<Case, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            let item = match self.lines.next() {
                Some((line, text)) => self.parser.line(line, text).transpose(),
                None => {
                    self.done = true;
                    self.parser.finish().err().map(Err)
                }
            };
            if self.parser.ended() || matches!(item, Some(Err(_))) {
                self.done = true;
            }
            if item.is_some() {
                return item;
            }
        }
        None
    }
}

/// The classic format read a line at a time, for input that arrives in
/// pieces ([`super::Reader`]); [`Cases`] reads whole inputs with it.
#[derive(Clone, Debug, Default)]
pub struct Parser {
    /// The number of the case being read (or last read).
    case: usize,
    /// The last non-blank line.
    last_line: usize,
    /// Inside a case: its boards so far.
    reading: Option<Reading>,
    /// A `0` header ended the input: later lines are ignored.
    ended: bool,
}

/// A case whose boards are being read.
#[derive(Clone, Debug)]
struct Reading {
    line: usize,
    size: Size,
    which: Which,
    row: usize,
    cells: u32,
    start: Option<Board>,
}

impl Parser {
    /// Cases begun so far: the number of the last one.
    pub fn cases(&self) -> usize {
        self.case
    }

    /// Whether a `0` header ended the input.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Reads line number `line`; a case once its last row is read. Blank
    /// lines are skipped; after an error the parser is not to be used.
    pub fn line(&mut self, line: usize, text: &[u8]) -> Result<Option<Case>, ParseError> {
        if self.ended || text.trim_ascii().is_empty() {
            return Ok(None);
        }
        self.last_line = line;
        let Some(mut reading) = self.reading.take() else {
            self.case += 1;
            self.reading = self.header(line, text)?;
            self.ended = self.reading.is_none();
            return Ok(None);
        };
        let case = self.case;
        // Each row is checked as it is read, so a bad row is reported at
        // its own line even when the file also ends too early.
        reading.cells |=
            read_row(reading.size, reading.row, text.trim_ascii()).map_err(|error| ParseError {
                line,
                kind: ParseErrorKind::Row {
                    case,
                    which: reading.which,
                    error,
                },
            })?;
        reading.row += 1;
        if reading.row < reading.size.rows() {
            self.reading = Some(reading);
            return Ok(None);
        }
        let board = Board::from_packed(reading.size, reading.cells).expect("rows were checked");
        let Some(start) = reading.start else {
            self.reading = Some(Reading {
                which: Which::Target,
                row: 0,
                cells: 0,
                start: Some(board),
                ..reading
            });
            return Ok(None);
        };
        let puzzle = Puzzle::new(start, board).expect("both boards were read at one size");
        Ok(Some(Case {
            line: reading.line,
            puzzle,
        }))
    }

    /// The input has ended: an error if it ended inside a case.
    pub fn finish(&self) -> Result<(), ParseError> {
        match &self.reading {
            Some(r) if !self.ended => Err(ParseError {
                line: self.last_line,
                kind: ParseErrorKind::Truncated {
                    case: self.case,
                    which: r.which,
                    expected: r.size.rows(),
                    found: r.row,
                },
            }),
            _ => Ok(()),
        }
    }

    /// Reads case header `N M`: the case to read, or `None` for `0`.
    fn header(&self, line: usize, header: &[u8]) -> Result<Option<Reading>, ParseError> {
        let case = self.case;
        let err = |kind| Err(ParseError { line, kind });
        let bad_header = || ParseErrorKind::BadHeader {
            case,
            found: excerpt(header),
        };
        let tokens: Vec<&[u8]> = header
            .split(u8::is_ascii_whitespace)
            .filter(|t| !t.is_empty())
            .collect();
        // A run of digits too long for a number is a size, just not one a
        // board can have.
        let too_large = tokens
            .iter()
            .take(2)
            .find(|t| t.iter().all(u8::is_ascii_digit) && parse_number(t).is_none());
        if let Some(t) = too_large {
            return err(ParseErrorKind::TooLarge {
                case,
                found: excerpt(t),
            });
        }
        let Some(rows) = tokens.first().and_then(|t| parse_number(t)) else {
            return err(bad_header());
        };
        if rows == 0 {
            return Ok(None);
        }
        let (Some(cols), 2) = (tokens.get(1).and_then(|t| parse_number(t)), tokens.len()) else {
            return err(bad_header());
        };
        let size = match Size::new(rows, cols) {
            Ok(size) => size,
            Err(error) => return err(ParseErrorKind::Size { case, error }),
        };
        Ok(Some(Reading {
            line,
            size,
            which: Which::Start,
            row: 0,
            cells: 0,
            start: None,
        }))
    }
}

fn parse_number(token: &[u8]) -> Option<usize> {
    std::str::from_utf8(token).ok()?.parse().ok()
}

/// One puzzle in the classic format, with its trailing newline.
pub fn format_case(puzzle: &Puzzle) -> String {
    let size = puzzle.size();
    let mut out = format!("{} {}\n", size.rows(), size.cols());
    for board in [puzzle.start(), puzzle.target()] {
        out.push_str(&board.to_string());
        out.push('\n');
    }
    out
}

/// One line of classic output, without newline: the answer, and with
/// `with_moves` the optimal moves after it, separated by spaces.
pub fn format_answer(solution: &Solution, with_moves: bool) -> String {
    let answer = solution.answer().to_string();
    match solution.path() {
        Some(path) if with_moves && !path.is_empty() => {
            format!("{answer} {}", solution.notation())
        }
        _ => answer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "2 2\nBB\nBR\nBB\nRR\n3 3\nRRR\nBBB\nRBR\nRBR\nBRG\nGGR\n0\n";

    fn kind(input: &str) -> (usize, ParseErrorKind) {
        let e = parse(input.as_bytes()).unwrap_err();
        (e.line, e.kind)
    }

    #[test]
    fn reads_the_sample() {
        let cases = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[1].line, 6);
        assert_eq!(cases[1].puzzle.target().rows(), vec!["RBR", "BRG", "GGR"]);
        let text: String = cases.iter().map(|c| format_case(&c.puzzle)).collect();
        assert_eq!(format!("{text}0\n"), SAMPLE);
    }

    #[test]
    fn tolerates_blank_lines_spaces_crlf_and_no_terminator() {
        let messy =
            "\r\n  2   2 \r\n BB\r\n\r\nBR  \r\nBB\r\nRR\r\n\n 3 3\nRRR\nBBB\nRBR\nRBR\nBRG\nGGR";
        let puzzles = |text: &str| -> Vec<Puzzle> {
            parse(text.as_bytes())
                .unwrap()
                .into_iter()
                .map(|c| c.puzzle)
                .collect()
        };
        assert_eq!(puzzles(messy), puzzles(SAMPLE));
    }

    #[test]
    fn stops_at_zero() {
        let cases = parse(b"2 2\nRR\nRR\nRR\nRR\n0\ngarbage after the end\n").unwrap();
        assert_eq!(cases.len(), 1);
        assert!(parse(b"0\n").unwrap().is_empty());
        assert!(parse(b"").unwrap().is_empty());
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let with_bom = [b"\xEF\xBB\xBF".as_slice(), SAMPLE.as_bytes()].concat();
        assert_eq!(parse(&with_bom).unwrap(), parse(SAMPLE.as_bytes()).unwrap());
    }

    #[test]
    fn a_huge_size_is_not_a_board_size() {
        let (line, k) = kind("\n99999999999999999999 2\n");
        assert_eq!(line, 2);
        assert_eq!(
            k.to_string(),
            "case 1: 99999999999999999999 in the size line is not a board size (rows and columns are 2 to 4)"
        );
        let (_, k) = kind("2 123456789012345678901234567890\n");
        assert!(
            k.to_string()
                .starts_with("case 1: 123456789012345678901234567890 in"),
            "{k}"
        );
        let (_, k) = kind("200 2\n");
        assert!(k.to_string().contains("size 200x2 is out of range"), "{k}");
    }

    #[test]
    fn a_space_between_letters_is_named_by_its_column() {
        let (line, k) = kind("2 2\nB B\n");
        assert_eq!(line, 2);
        assert_eq!(
            k.to_string(),
            "case 1, start board, row 1, column 2: a space between letters (write a row's letters together, like RGB)"
        );
        let (_, k) = kind("3 3\nRRR\nBBB\nRBR\nRB\tR\n");
        assert!(
            k.to_string()
                .contains("target board, row 1, column 3: a space"),
            "{k}"
        );
    }

    #[test]
    fn errors_say_what_and_where() {
        assert!(matches!(
            kind("2 x\n"),
            (1, ParseErrorKind::BadHeader { case: 1, .. })
        ));
        assert!(matches!(
            kind("2 2 2\n"),
            (1, ParseErrorKind::BadHeader { .. })
        ));
        assert!(matches!(
            kind("RR\n"),
            (1, ParseErrorKind::BadHeader { .. })
        ));
        assert!(matches!(kind("5 2\n"), (1, ParseErrorKind::Size { .. })));
        assert!(matches!(kind("1 4\n"), (1, ParseErrorKind::Size { .. })));
        let (line, k) = kind("2 2\nRR\nRR\nRR\nRGX\n");
        assert_eq!(line, 5);
        assert_eq!(
            k.to_string(),
            "case 1, target board, row 2 has 3 letters, expected 2"
        );
        let (line, k) = kind("2 2\nRR\nRR\n\nRR\nRY\n");
        assert_eq!(line, 6);
        assert!(
            k.to_string().contains("column 2: 'Y' is not a colour"),
            "{k}"
        );
        let (line, k) = kind("2 2\nRR\nRR\nRR\nRR\n2 2\nRR\n");
        assert_eq!(line, 7);
        assert_eq!(
            k,
            ParseErrorKind::Truncated {
                case: 2,
                which: Which::Start,
                expected: 2,
                found: 1
            }
        );
    }

    #[test]
    fn answers_with_and_without_moves() {
        let cases = parse(SAMPLE.as_bytes()).unwrap();
        let mut search = crate::search::BidirSearch::new();
        let s = search.solve(&cases[1].puzzle);
        assert_eq!(format_answer(&s, false), "6");
        let with = format_answer(&s, true);
        assert!(
            with.starts_with("6 ") && with.split(' ').count() == 7,
            "{with}"
        );
        assert_eq!(format_answer(&search.solve(&cases[0].puzzle), true), "-1");
    }
}
