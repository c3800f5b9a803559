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
    case: usize,
    last_line: usize,
    done: bool,
}

impl std::fmt::Debug for Cases<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cases")
            .field("case", &self.case)
            .field("last_line", &self.last_line)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<'a> Cases<'a> {
    pub fn new(input: &'a [u8]) -> Cases<'a> {
        Cases {
            lines: Box::new(
                numbered_lines(input).filter(|(_, line)| !line.trim_ascii().is_empty()),
            ),
            case: 0,
            last_line: 0,
            done: false,
        }
    }

    fn next_case(&mut self) -> Option<Result<Case, ParseError>> {
        let (line, header) = self.lines.next()?;
        self.last_line = line;
        self.case += 1;
        let case = self.case;
        let err = |kind| Some(Err(ParseError { line, kind }));
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
            return None;
        }
        let (Some(cols), 2) = (tokens.get(1).and_then(|t| parse_number(t)), tokens.len()) else {
            return err(bad_header());
        };
        let size = match Size::new(rows, cols) {
            Ok(size) => size,
            Err(error) => return err(ParseErrorKind::Size { case, error }),
        };
        let start = match self.board(case, size, Which::Start) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let target = match self.board(case, size, Which::Target) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let puzzle = Puzzle::new(start, target).expect("both boards were read at one size");
        Some(Ok(Case { line, puzzle }))
    }

    fn board(&mut self, case: usize, size: Size, which: Which) -> Result<Board, ParseError> {
        let mut cells = 0u32;
        for r in 0..size.rows() {
            let Some((line, row)) = self.lines.next() else {
                return Err(ParseError {
                    line: self.last_line,
                    kind: ParseErrorKind::Truncated {
                        case,
                        which,
                        expected: size.rows(),
                        found: r,
                    },
                });
            };
            self.last_line = line;
            // Each row is checked as it is read, so a bad row is reported at
            // its own line even when the file also ends too early.
            cells |= read_row(size, r, row.trim_ascii()).map_err(|error| ParseError {
                line,
                kind: ParseErrorKind::Row { case, which, error },
            })?;
        }
        Ok(Board::from_packed(size, cells).expect("rows were checked"))
    }
}

impl Iterator for Cases<'_> {
    type Item = Result<Case, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.next_case();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
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
