//! JSON Lines: one puzzle per line in, one result per line out.
//!
//! Input line: `{"id": "a1", "start": ["RGB", ...], "target": [...]}`. The
//! `id` is optional (a string or an integer; it defaults to the case number,
//! counting non-blank lines from 1); the board size follows from the rows.
//! Unknown fields are ignored. Blank lines are skipped.
//!
//! Output line: [`SolvedRecord`] for a solved case, [`ErrorRecord`] for a line
//! that could not be read. A bad line never stops the other lines.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{excerpt, numbered_lines};
use crate::board::{Board, Puzzle};
use crate::search::Solution;

/// One puzzle read from a JSON line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonCase {
    pub line: usize,
    pub id: String,
    pub puzzle: Puzzle,
}

/// A line that could not be read: its number, its id when one was readable,
/// and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {message}")]
pub struct LineError {
    pub line: usize,
    pub id: Option<String>,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(i64),
}

#[derive(Deserialize)]
struct Input {
    id: Option<Id>,
    start: Vec<String>,
    target: Vec<String>,
}

/// Reads every non-blank line; each is a case or an error for that line.
pub fn parse(input: &[u8]) -> Vec<Result<JsonCase, LineError>> {
    numbered_lines(input)
        .filter(|(_, text)| !text.trim_ascii().is_empty())
        .enumerate()
        .map(|(i, (line, text))| parse_line(line, i + 1, text))
        .collect()
}

/// Reads one line; `case` is its 1-based case number, the default id.
pub fn parse_line(line: usize, case: usize, text: &[u8]) -> Result<JsonCase, LineError> {
    let fail = |id: Option<String>, message: String| LineError { line, id, message };
    let input: Input = serde_json::from_slice(text).map_err(|e| {
        let what = e.to_string();
        let what = what.split(" at line ").next().unwrap_or(&what).to_string();
        fail(
            None,
            format!(
                "not a puzzle object: {what} (column {}) in {:?}",
                e.column(),
                excerpt(text)
            ),
        )
    })?;
    let id = match input.id {
        Some(Id::Text(s)) => s,
        Some(Id::Number(n)) => n.to_string(),
        None => case.to_string(),
    };
    let start = Board::parse_rows(&input.start)
        .map_err(|e| fail(Some(id.clone()), format!("field start: {e}")))?;
    let target = Board::parse_rows(&input.target)
        .map_err(|e| fail(Some(id.clone()), format!("field target: {e}")))?;
    let puzzle = Puzzle::new(start, target).map_err(|e| fail(Some(id.clone()), e.to_string()))?;
    Ok(JsonCase { line, id, puzzle })
}

/// The output line for a solved case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SolvedRecord {
    pub id: String,
    /// The minimum number of moves, `-1` when unreachable.
    pub moves: i64,
    /// One optimal move sequence (`r22 c34 ...`), empty when there is none.
    pub solution: String,
    /// What answered it: `cache`, `bidir`, `idastar` or `table`.
    pub strategy: String,
    /// Time spent solving this case, in microseconds.
    pub time_us: u64,
}

impl SolvedRecord {
    pub fn new(id: String, solution: &Solution, strategy: &str, time_us: u64) -> SolvedRecord {
        SolvedRecord {
            id,
            moves: solution.answer(),
            solution: solution.notation(),
            strategy: strategy.to_string(),
            time_us,
        }
    }
}

/// The output line for a case that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRecord {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub line: usize,
    pub error: String,
}

impl From<&LineError> for ErrorRecord {
    fn from(e: &LineError) -> ErrorRecord {
        ErrorRecord {
            id: e.id.clone(),
            line: e.line,
            error: e.message.clone(),
        }
    }
}

/// Serialises an output record as one line, without newline.
pub fn to_line<T: Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("records are plain data")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cases_and_defaults_ids() {
        let input = br#"{"id": "a", "start": ["RG", "BB"], "target": ["GR", "BB"]}

{"start": ["RGB", "BBB"], "target": ["RGB", "BBG"], "note": "extra"}
{"id": 7, "start": ["RR","RR"], "target": ["RR","RR"]}
"#;
        let cases: Vec<_> = parse(input).into_iter().map(Result::unwrap).collect();
        assert_eq!(cases[0].id, "a");
        assert_eq!(cases[1].id, "2");
        assert_eq!(cases[1].line, 3);
        assert_eq!(cases[1].puzzle.size().to_string(), "2x3");
        assert_eq!(cases[2].id, "7");
    }

    #[test]
    fn a_bad_line_is_an_error_for_that_line_only() {
        let input = br#"{"id": "ok", "start": ["RG", "BB"], "target": ["GR", "BB"]}
{"id": "short", "start": ["RG", "B"], "target": ["GR", "BB"]}
not json
{"id": "mix", "start": ["RG", "BB"], "target": ["GRB", "BBB"]}
{"id": "letter", "start": ["RG", "BB"], "target": ["GR", "BQ"]}
{"start": ["RG", "BB"]}
"#;
        let out = parse(input);
        assert!(out[0].is_ok());
        let errs: Vec<_> = out[1..].iter().map(|r| r.clone().unwrap_err()).collect();
        assert_eq!(errs[0].id.as_deref(), Some("short"));
        assert_eq!(
            errs[0].message,
            "field start: row 2 has 1 letters, expected 2"
        );
        assert_eq!(errs[1].line, 3);
        assert!(
            errs[1].message.starts_with("not a puzzle object"),
            "{}",
            errs[1].message
        );
        assert!(errs[2].message.contains("same size"), "{}", errs[2].message);
        assert!(
            errs[3].message.contains("field target: row 2, column 2"),
            "{}",
            errs[3].message
        );
        assert!(
            errs[4].message.contains("missing field `target`"),
            "{}",
            errs[4].message
        );
    }

    #[test]
    fn records_serialise() {
        let r = SolvedRecord::new("x".into(), &Solution::Unreachable, "bidir", 5);
        assert_eq!(
            to_line(&r),
            r#"{"id":"x","moves":-1,"solution":"","strategy":"bidir","time_us":5}"#
        );
    }
}
