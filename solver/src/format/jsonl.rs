//! JSON Lines: one puzzle per line in, one result per line out.
//!
//! Input line: `{"id": "a1", "start": ["RGB", ...], "target": [...]}`. The
//! `id` is optional (a string or an integer; it defaults to the case number,
//! counting non-blank lines from 1); the board size follows from the rows.
//! Unknown fields are ignored. Blank lines are skipped, and so is a UTF-8
//! byte-order mark at the start. A non-empty id may appear only once: a
//! repeat is an error for its line (field `id`), as in a gRPC batch.
//!
//! Output line: [`SolvedRecord`] for a solved case, [`ErrorRecord`] for a line
//! that could not be read. A bad line never stops the other lines.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
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

/// Reads every non-blank line; each is a case or an error for that line.
/// A non-empty id that an earlier line already has (given, or defaulted
/// to its case number) makes its line an error naming field `id`.
pub fn parse(input: &[u8]) -> Vec<Result<JsonCase, LineError>> {
    let mut parser = Parser::default();
    numbered_lines(input)
        .filter_map(|(line, text)| parser.line(line, text))
        .collect()
}

/// JSON Lines read a line at a time, for input that arrives in pieces
/// ([`super::Reader`]); [`parse`] reads whole inputs with it.
#[derive(Clone, Debug, Default)]
pub struct Parser {
    /// Non-blank lines so far: the case number of the last one.
    case: usize,
    /// The line of each non-empty id seen.
    seen: HashMap<String, usize>,
}

impl Parser {
    /// Reads line number `line`: `None` for a blank line, else its case
    /// or what is wrong with it.
    pub fn line(&mut self, line: usize, text: &[u8]) -> Option<Result<JsonCase, LineError>> {
        if text.trim_ascii().is_empty() {
            return None;
        }
        self.case += 1;
        Some(self.case_of(line, text))
    }

    fn case_of(&mut self, line: usize, text: &[u8]) -> Result<JsonCase, LineError> {
        let case = parse_line(line, self.case, text)?;
        if case.id.is_empty() {
            return Ok(case);
        }
        if let Some(&first) = self.seen.get(&case.id) {
            return Err(LineError {
                line,
                id: Some(case.id.clone()),
                message: format!(
                    "field id: {:?} is the id of line {first} already (ids must be unique within a file)",
                    case.id
                ),
            });
        }
        self.seen.insert(case.id.clone(), line);
        Ok(case)
    }
}

/// What a JSON value is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// A board field: a list of strings, one per row.
fn rows<'v>(field: &str, value: Option<&'v Value>) -> Result<Vec<&'v str>, String> {
    let expected = "expected a list of rows of letters, like [\"RGB\", \"BBR\"]";
    let list = match value {
        None => return Err(format!("field {field}: missing ({expected})")),
        Some(Value::Array(list)) => list,
        Some(other) => return Err(format!("field {field}: {expected}, found {}", kind(other))),
    };
    list.iter()
        .enumerate()
        .map(|(i, row)| {
            row.as_str().ok_or_else(|| {
                format!(
                    "field {field}: row {} is {}, not a string of letters",
                    i + 1,
                    kind(row)
                )
            })
        })
        .collect()
}

/// A puzzle record that could not be read: its id when one was readable,
/// and what is wrong (naming the field).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{message}")]
pub struct RecordError {
    pub id: Option<String>,
    pub message: String,
}

/// Reads one line; `case` is its 1-based case number, the default id.
pub fn parse_line(line: usize, case: usize, text: &[u8]) -> Result<JsonCase, LineError> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        let what = e.to_string();
        let what = what.split(" at line ").next().unwrap_or(&what).to_string();
        LineError {
            line,
            id: None,
            message: format!(
                "not valid JSON: {what} at column {} in {:?}",
                e.column(),
                excerpt(text)
            ),
        }
    })?;
    let (id, puzzle) = record(case, &value).map_err(|e| LineError {
        line,
        id: e.id,
        message: e.message,
    })?;
    Ok(JsonCase { line, id, puzzle })
}

/// A puzzle record read as JSON already (a line's, or an element of a
/// list): its id (`case`, its 1-based number, when it has none) and its
/// puzzle, or what is wrong with it.
pub fn record(case: usize, value: &Value) -> Result<(String, Puzzle), RecordError> {
    let fail = |id: Option<String>, message: String| RecordError { id, message };
    let Value::Object(fields) = value else {
        return Err(fail(
            None,
            format!(
                "expected a puzzle object like {{\"id\": \"p1\", \"start\": [...], \"target\": [...]}}, found {}",
                kind(value)
            ),
        ));
    };
    let id = match fields.get("id") {
        None | Some(Value::Null) => case.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        Some(other) => {
            let found = match other {
                Value::Number(n) => format!("the number {n}"),
                other => kind(other).to_string(),
            };
            return Err(fail(
                None,
                format!("field id: expected a string or a whole number, found {found}"),
            ));
        }
    };
    let board = |field: &str| {
        let rows = rows(field, fields.get(field)).map_err(|m| fail(Some(id.clone()), m))?;
        Board::parse_rows(&rows).map_err(|e| fail(Some(id.clone()), format!("field {field}: {e}")))
    };
    let start = board("start")?;
    let target = board("target")?;
    let puzzle = Puzzle::new(start, target)
        .map_err(|e| fail(Some(id.clone()), format!("field target: {e}")))?;
    Ok((id, puzzle))
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
        assert_eq!(
            errs[1].message,
            "not valid JSON: expected ident at column 2 in \"not json\""
        );
        assert!(errs[2].message.contains("same size"), "{}", errs[2].message);
        assert!(
            errs[3].message.contains("field target: row 2, column 2"),
            "{}",
            errs[3].message
        );
        assert_eq!(
            errs[4].message,
            "field target: missing (expected a list of rows of letters, like [\"RGB\", \"BBR\"])"
        );
    }

    /// The message of the only line of `text`.
    fn message(text: &str) -> String {
        match &parse(text.as_bytes())[..] {
            [Err(e)] => e.message.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn messages_name_the_field_in_plain_words() {
        let ok = r#""start": ["RG", "BB"], "target": ["GR", "BB"]"#;
        assert_eq!(
            message(&format!(r#"{{"id": 1.5, {ok}}}"#)),
            "field id: expected a string or a whole number, found the number 1.5"
        );
        assert_eq!(
            message(&format!(r#"{{"id": ["a"], {ok}}}"#)),
            "field id: expected a string or a whole number, found a list"
        );
        assert_eq!(
            message(r#"{"start": "RG", "target": ["GR", "BB"]}"#),
            "field start: expected a list of rows of letters, like [\"RGB\", \"BBR\"], found a string"
        );
        assert_eq!(
            message(r#"{"start": ["RG", 5], "target": ["GR", "BB"]}"#),
            "field start: row 2 is a number, not a string of letters"
        );
        assert_eq!(
            message(r#"["RG", "BB"]"#),
            "expected a puzzle object like {\"id\": \"p1\", \"start\": [...], \"target\": [...]}, found a list"
        );
        assert_eq!(
            message(r#"{"start": ["R G", "BB"], "target": ["GR", "BB"]}"#),
            "field start: row 1, column 2: a space between letters (write a row's letters together, like RGB)"
        );
        for m in [
            message(&format!(r#"{{"id": 1.5, {ok}}}"#)),
            message(r#"{"start": 3}"#),
        ] {
            assert!(!m.contains("variant") && !m.contains("struct"), "{m}");
        }
        // Large whole numbers are ids too; null is no id.
        let big = format!(r#"{{"id": 18446744073709551615, {ok}}}"#);
        assert_eq!(
            parse(big.as_bytes())[0].as_ref().unwrap().id,
            "18446744073709551615"
        );
        let null = format!(r#"{{"id": null, {ok}}}"#);
        assert_eq!(parse(null.as_bytes())[0].as_ref().unwrap().id, "1");
    }

    #[test]
    fn a_repeated_id_is_an_error_for_the_later_line() {
        let ok = r#""start": ["RG", "BB"], "target": ["GR", "BB"]"#;
        let input = format!(
            "{{\"id\": \"a\", {ok}}}\n{{{ok}}}\n{{\"id\": \"a\", {ok}}}\n{{\"id\": 2, {ok}}}\n\
             {{\"id\": \"\", {ok}}}\n{{\"id\": \"\", {ok}}}\n"
        );
        let out = parse(input.as_bytes());
        assert_eq!(out.len(), 6);
        assert!(out[0].is_ok() && out[1].is_ok());
        let e = out[2].as_ref().unwrap_err();
        assert_eq!((e.line, e.id.as_deref()), (3, Some("a")));
        assert_eq!(
            e.message,
            "field id: \"a\" is the id of line 1 already (ids must be unique within a file)"
        );
        // Line 2 has no id: its id is its case number, 2.
        let e = out[3].as_ref().unwrap_err();
        assert!(e.message.contains("is the id of line 2 already"), "{e}");
        assert!(out[4].is_ok() && out[5].is_ok(), "empty ids may repeat");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let input = b"\xEF\xBB\xBF{\"start\": [\"RG\", \"BB\"], \"target\": [\"GR\", \"BB\"]}\n";
        assert_eq!(parse(input)[0].as_ref().unwrap().line, 1);
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
