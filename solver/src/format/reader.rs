//! A puzzle file read as it arrives: pieces of any size go in, puzzles
//! come out, and only the line being read is held. The format is detected
//! from the first non-blank line (as [`Format::detect`] does), and each is
//! read by the same line parser as a whole file, with the same messages:
//! the classic format by [`classic::Parser`], JSON Lines by
//! [`jsonl::Parser`]. The first error ends the reading.

use super::{BOM, Format, classic, jsonl};
use crate::board::Puzzle;

/// The longest line a reader takes: far more than any puzzle needs, so
/// that a stream without line ends cannot fill the memory.
pub const MAX_LINE: usize = 1 << 20;

/// One puzzle read: its line, its id (for the classic format, its case
/// number) and the puzzle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub line: usize,
    pub id: String,
    pub puzzle: Puzzle,
}

/// What is wrong, and on which line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ReadError {
    pub line: usize,
    pub message: String,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Reader {
    /// The line being read, until its end arrives.
    partial: Vec<u8>,
    /// Lines read so far.
    lines: usize,
    /// The format, once a non-blank line has shown it.
    parser: Option<Parser>,
}

#[derive(Debug)]
enum Parser {
    Classic(classic::Parser),
    Jsonl(jsonl::Parser),
}

impl Reader {
    pub fn new() -> Reader {
        Reader::default()
    }

    /// The format, once known.
    pub fn format(&self) -> Option<Format> {
        self.parser.as_ref().map(|p| match p {
            Parser::Classic(_) => Format::Classic,
            Parser::Jsonl(_) => Format::Jsonl,
        })
    }

    /// Reads the next piece of the input; the puzzles it completes go to
    /// `out`.
    pub fn push(&mut self, mut piece: &[u8], out: &mut Vec<Read>) -> Result<(), ReadError> {
        while let Some(end) = piece.iter().position(|&b| b == b'\n') {
            let (head, rest) = piece.split_at(end);
            piece = &rest[1..];
            if self.partial.is_empty() {
                self.line(head, out)?;
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.line(&line, out)?;
                line.clear();
                self.partial = line;
            }
        }
        if self.partial.len() + piece.len() > MAX_LINE {
            return Err(ReadError {
                line: self.lines + 1,
                message: format!("longer than {MAX_LINE} bytes; no puzzle's line is that long"),
            });
        }
        self.partial.extend_from_slice(piece);
        Ok(())
    }

    /// The input has ended: reads its last line, and checks that it did
    /// not end inside a case.
    pub fn finish(mut self, out: &mut Vec<Read>) -> Result<(), ReadError> {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, out)?;
        }
        match &self.parser {
            Some(Parser::Classic(p)) => p.finish().map_err(classic_error),
            _ => Ok(()),
        }
    }

    /// One line, without its `\n`.
    fn line(&mut self, text: &[u8], out: &mut Vec<Read>) -> Result<(), ReadError> {
        self.lines += 1;
        let line = self.lines;
        let mut text = text.strip_suffix(b"\r").unwrap_or(text);
        if line == 1 {
            text = text.strip_prefix(BOM).unwrap_or(text);
        }
        let parser = match &mut self.parser {
            Some(parser) => parser,
            None if text.trim_ascii().is_empty() => return Ok(()),
            None => self.parser.insert(match Format::detect(text) {
                Format::Classic => Parser::Classic(classic::Parser::default()),
                Format::Jsonl => Parser::Jsonl(jsonl::Parser::default()),
            }),
        };
        match parser {
            Parser::Classic(p) => {
                if let Some(case) = p.line(line, text).map_err(classic_error)? {
                    let id = p.cases().to_string();
                    out.push(Read {
                        line: case.line,
                        id,
                        puzzle: case.puzzle,
                    });
                }
            }
            Parser::Jsonl(p) => match p.line(line, text) {
                Some(Ok(case)) => out.push(Read {
                    line,
                    id: case.id,
                    puzzle: case.puzzle,
                }),
                Some(Err(e)) => {
                    return Err(ReadError {
                        line: e.line,
                        message: e.message,
                    });
                }
                None => {}
            },
        }
        Ok(())
    }
}

fn classic_error(e: classic::ParseError) -> ReadError {
    ReadError {
        line: e.line,
        message: e.kind.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::format::jsonl::JsonCase;

    /// Reads `input` cut into pieces at `cuts`.
    fn read_in_pieces(input: &[u8], cuts: &[usize]) -> Result<Vec<Read>, ReadError> {
        let mut reader = Reader::new();
        let mut out = Vec::new();
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        cuts.sort_unstable();
        for cut in cuts.into_iter().chain([input.len()]) {
            reader.push(&input[at..cut], &mut out)?;
            at = cut;
        }
        reader.finish(&mut out)?;
        Ok(out)
    }

    /// What the whole-file parsers make of `input`, as a reader gives it.
    fn whole(input: &[u8]) -> Result<Vec<Read>, ReadError> {
        match Format::detect(input) {
            Format::Classic => classic::Cases::new(input)
                .enumerate()
                .map(|(i, c)| {
                    c.map(|c| Read {
                        line: c.line,
                        id: (i + 1).to_string(),
                        puzzle: c.puzzle,
                    })
                    .map_err(classic_error)
                })
                .collect(),
            Format::Jsonl => jsonl::parse(input)
                .into_iter()
                .map(|c| {
                    c.map(|JsonCase { line, id, puzzle }| Read { line, id, puzzle })
                        .map_err(|e| ReadError {
                            line: e.line,
                            message: e.message,
                        })
                })
                .collect(),
        }
    }

    const CLASSIC: &str = "\u{feff}2 2\r\nRG\r\nBB\r\n\r\nGR\r\nBB\r\n  3 3\nRRR\nGGG\nBBB\n\nBBB\nGGG\nRRR\n0\nnot read\n";
    const JSONL: &str = "\n{\"id\": \"a\", \"start\": [\"RG\", \"BB\"], \"target\": [\"GR\", \"BB\"]}\n\n{\"start\": [\"RG\", \"BB\"], \"target\": [\"BB\", \"GR\"]}";

    #[test]
    fn both_formats_read_as_the_whole_file_parsers_read_them() {
        for input in [CLASSIC, JSONL] {
            let read = read_in_pieces(input.as_bytes(), &[]).unwrap();
            assert_eq!(read.len(), 2, "{input:?}");
            assert_eq!(Ok(read), whole(input.as_bytes()));
        }
        let read = read_in_pieces(JSONL.as_bytes(), &[]).unwrap();
        assert_eq!((read[0].id.as_str(), read[1].id.as_str()), ("a", "2"));
        assert_eq!((read[0].line, read[1].line), (2, 4));
    }

    #[test]
    fn errors_name_their_line_as_the_whole_file_parsers_do() {
        for bad in [
            "2 2\nRG\nBB\nGR\n",
            "2 2\nRG\nBX\nGR\nBB\n",
            "2 9\n",
            "{\"start\": 3}\n",
            "{\"id\": 1, \"start\": [\"RG\", \"BB\"], \"target\": [\"GR\", \"BB\"]}\n{\"id\": \"1\", \"start\": [\"RG\", \"BB\"], \"target\": [\"GR\", \"BB\"]}",
        ] {
            let e = read_in_pieces(bad.as_bytes(), &[3, 7]).unwrap_err();
            assert_eq!(Err(e), whole(bad.as_bytes()).map(|_| ()), "{bad:?}");
        }
    }

    #[test]
    fn a_line_past_the_limit_is_refused_without_being_held() {
        let mut reader = Reader::new();
        let mut out = Vec::new();
        reader.push(b"2 2\nRG\n", &mut out).unwrap();
        let e = reader
            .push(&vec![b'R'; MAX_LINE + 1], &mut out)
            .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("longer than"), "{e}");
        assert!(reader.partial.len() <= MAX_LINE);
    }

    proptest! {
        /// However the input is cut, the reader finds what the whole-file
        /// parsers find: the same puzzles, or the same first error.
        #[test]
        fn any_cuts_read_the_same(
            input in prop_oneof![
                Just(CLASSIC.to_string()),
                Just(JSONL.to_string()),
                Just(CLASSIC[..40].to_string()),
                Just(JSONL[..70].to_string()),
            ],
            cuts in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let expected = whole(input.as_bytes());
            let got = read_in_pieces(input.as_bytes(), &cuts);
            match expected {
                Ok(all) => prop_assert_eq!(got, Ok(all)),
                Err(e) => prop_assert_eq!(got.map(|_| ()), Err(e)),
            }
        }
    }
}
