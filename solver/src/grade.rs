//! Grading contestants' answers against the optimal ones.
//!
//! Pure logic, no I/O: [`parse_answers`] reads an answers file,
//! [`match_answers`] pairs answers with cases, [`grade_case`] decides one
//! case given the optimal count, and [`Summary`] adds the verdicts up. The
//! `colball grade` command and the coordinator's Grade RPC both build on it,
//! so they decide every case the same way.
//!
//! # Answers files
//!
//! The format is detected like puzzle files: JSON Lines when the first
//! non-blank byte is `{`, else classic. Blank lines are skipped in both.
//!
//! - **Classic**: one answer per line, the count first (`6`, `-1`), and
//!   optionally the move sequence after it on the same line, as
//!   `colball solve --moves` prints it (`6 r22 c33 r23 c22 r33 c23`). A line
//!   with only a count is graded on the count; a line with moves is graded
//!   on the moves too.
//! - **JSON Lines**: one object per line with at least one of `moves` (the
//!   count, an integer) and `solution` (the sequence, a string); `id` (a
//!   string or an integer) is optional and other fields are ignored, so the
//!   output of `colball solve --output jsonl` is an answers file. With only
//!   `solution`, the count is the sequence's length; with both, they must
//!   agree (`"moves": -1` with an empty `solution` is just the count).
//!
//! A line that cannot be read is still an answer (its case gets the
//! [`Verdict::Malformed`] verdict naming the line), so it never shifts the
//! answers after it.
//!
//! # Matching answers to cases
//!
//! By position (the first answer is case 1), except when the answers are JSON
//! Lines, every line was readable and carries an `id`, and the puzzle file
//! has ids (JSON Lines puzzle files always do: an absent id is the case
//! number, as `colball solve` writes it). Then each answer goes to the case
//! with its id; when ids repeat, the k-th answer with an id goes to the k-th
//! case with it. Answers left over (beyond the last case, or with an id no
//! case has) are counted as extra.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::board::{Puzzle, Size};
use crate::format::{Format, excerpt, numbered_lines};
use crate::moves::{Move, MoveError, apply_moves, parse_moves};

/// What an answer claims: a count, a move sequence, or both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The claimed minimum number of moves (`-1`: unreachable).
    pub count: Option<i64>,
    /// The claimed move sequence, as written (checked when graded).
    pub solution: Option<String>,
}

/// One answer read from an answers file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GivenAnswer {
    /// Its line in the answers file, from 1 (0 when it did not come from a
    /// file).
    pub line: usize,
    /// Its `id`, when the line carried one.
    pub id: Option<String>,
    /// What it claims, or why it could not be read.
    pub claim: Result<Claim, String>,
}

impl GivenAnswer {
    /// An answer claiming only a count.
    pub fn count(count: i64) -> GivenAnswer {
        GivenAnswer {
            line: 0,
            id: None,
            claim: Ok(Claim {
                count: Some(count),
                solution: None,
            }),
        }
    }

    /// An answer claiming a sequence (its count is its length).
    pub fn sequence(solution: &str) -> GivenAnswer {
        GivenAnswer {
            line: 0,
            id: None,
            claim: Ok(Claim {
                count: None,
                solution: Some(solution.to_string()),
            }),
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Text(String),
    Number(i64),
}

#[derive(Deserialize)]
struct JsonAnswer {
    id: Option<Id>,
    moves: Option<i64>,
    solution: Option<String>,
    /// `colball solve` writes this for a puzzle line it could not read.
    error: Option<String>,
}

/// Reads an answers file (format detected, see the module documentation).
/// Never fails: an unreadable line is an answer whose claim is an error.
pub fn parse_answers(input: &[u8]) -> Vec<GivenAnswer> {
    let format = Format::detect(input);
    numbered_lines(input)
        .filter(|(_, text)| !text.trim_ascii().is_empty())
        .map(|(line, text)| match format {
            Format::Classic => classic_answer(line, text),
            Format::Jsonl => json_answer(line, text),
        })
        .collect()
}

fn classic_answer(line: usize, text: &[u8]) -> GivenAnswer {
    let text_str = String::from_utf8_lossy(text);
    let mut tokens = text_str.split_whitespace();
    let first = tokens.next().unwrap_or("");
    let claim = match first.parse::<i64>() {
        Ok(count) => {
            let rest: Vec<&str> = tokens.collect();
            Ok(Claim {
                count: Some(count),
                solution: (!rest.is_empty()).then(|| rest.join(" ")),
            })
        }
        Err(_) => Err(format!(
            "line {line}: expected a number of moves, found {:?}",
            excerpt(text.trim_ascii())
        )),
    };
    GivenAnswer {
        line,
        id: None,
        claim,
    }
}

fn json_answer(line: usize, text: &[u8]) -> GivenAnswer {
    let parsed: JsonAnswer = match serde_json::from_slice(text) {
        Ok(a) => a,
        Err(e) => {
            let what = e.to_string();
            let what = what.split(" at line ").next().unwrap_or(&what).to_string();
            return GivenAnswer {
                line,
                id: None,
                claim: Err(format!(
                    "line {line}: not an answer object: {what} (column {}) in {:?}",
                    e.column(),
                    excerpt(text)
                )),
            };
        }
    };
    let id = parsed.id.map(|id| match id {
        Id::Text(s) => s,
        Id::Number(n) => n.to_string(),
    });
    let claim = if parsed.moves.is_none() && parsed.solution.is_none() {
        Err(match parsed.error {
            Some(e) => format!("line {line}: no answer, an error record: {e}"),
            None => format!("line {line}: neither a `moves` count nor a `solution` sequence"),
        })
    } else {
        Ok(Claim {
            count: parsed.moves,
            solution: parsed.solution,
        })
    };
    GivenAnswer { line, id, claim }
}

/// Answers paired with cases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched {
    /// One slot per case, in case order; `None` when no answer matched.
    pub answers: Vec<Option<GivenAnswer>>,
    /// Answers that matched no case (beyond the last case, or with an id no
    /// case has), in file order.
    pub extra: Vec<GivenAnswer>,
    /// Whether answers were matched by id rather than position.
    pub by_id: bool,
}

/// Pairs answers with the `cases` cases of a puzzle file. `case_ids` holds
/// each case's id when the puzzle file has ids (`None` for a classic puzzle
/// file). See the module documentation for the rule.
pub fn match_answers(
    cases: usize,
    case_ids: Option<&[String]>,
    answers: Vec<GivenAnswer>,
) -> Matched {
    let by_id = !answers.is_empty() && answers.iter().all(|a| a.claim.is_ok() && a.id.is_some());
    let mut matched = vec![None; cases];
    let mut extra = Vec::new();
    match case_ids {
        Some(ids) if by_id && ids.len() == cases => {
            let mut slots: HashMap<&str, VecDeque<usize>> = HashMap::new();
            for (i, id) in ids.iter().enumerate() {
                slots.entry(id.as_str()).or_default().push_back(i);
            }
            for answer in answers {
                let slot = answer
                    .id
                    .as_deref()
                    .and_then(|id| slots.get_mut(id))
                    .and_then(VecDeque::pop_front);
                match slot {
                    Some(i) => matched[i] = Some(answer),
                    None => extra.push(answer),
                }
            }
            Matched {
                answers: matched,
                extra,
                by_id: true,
            }
        }
        _ => {
            for (i, answer) in answers.into_iter().enumerate() {
                match matched.get_mut(i) {
                    Some(slot) => *slot = Some(answer),
                    None => extra.push(answer),
                }
            }
            Matched {
                answers: matched,
                extra,
                by_id: false,
            }
        }
    }
}

/// The verdict on one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The count is optimal, and the sequence (if given) reaches the target
    /// in that many moves.
    Correct,
    /// The count differs from the optimum (no sequence was given).
    WrongAnswer,
    /// The sequence has an illegal move, does not reach the target, or
    /// disagrees with its own count.
    InvalidSolution,
    /// The sequence reaches the target, in more moves than the optimum.
    NotOptimal,
    /// No answer for this case.
    Missing,
    /// The answer's line could not be read.
    Malformed,
    /// The grader could not find the optimum (the cluster failed on the
    /// puzzle); the answer was not judged.
    Error,
    /// The sequence reaches the target in fewer moves than the "optimum", or
    /// reaches a target the solver called unreachable: the solver is wrong.
    SolverBug,
}

impl Verdict {
    /// Every verdict, in report order.
    pub const ALL: [Verdict; 8] = [
        Verdict::Correct,
        Verdict::WrongAnswer,
        Verdict::InvalidSolution,
        Verdict::NotOptimal,
        Verdict::Missing,
        Verdict::Malformed,
        Verdict::Error,
        Verdict::SolverBug,
    ];

    /// The snake_case name used in reports (`wrong_answer`).
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::WrongAnswer => "wrong_answer",
            Verdict::InvalidSolution => "invalid_solution",
            Verdict::NotOptimal => "not_optimal",
            Verdict::Missing => "missing",
            Verdict::Malformed => "malformed",
            Verdict::Error => "error",
            Verdict::SolverBug => "solver_bug",
        }
    }

    /// Reads a name written by [`Verdict::name`].
    pub fn from_name(name: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.name() == name)
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The grading of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graded {
    pub verdict: Verdict,
    /// The optimal count (`-1`: unreachable); `None` for [`Verdict::Error`].
    pub expected: Option<i64>,
    /// The answer's count (a sequence's length when only the sequence was
    /// given); `None` when missing or unreadable.
    pub given: Option<i64>,
    /// Why, for people; empty for a plain correct answer.
    pub detail: String,
}

impl Graded {
    /// The verdict for a case whose optimum could not be found.
    pub fn error(given: Option<&GivenAnswer>, message: impl Into<String>) -> Graded {
        Graded {
            verdict: Verdict::Error,
            expected: None,
            given: given
                .and_then(|g| g.claim.as_ref().ok())
                .and_then(|c| c.count),
            detail: message.into(),
        }
    }
}

/// Decides one case: `expected` is the optimal count (`-1` when the target
/// cannot be reached), `given` the matched answer.
pub fn grade_case(puzzle: &Puzzle, expected: i64, given: Option<&GivenAnswer>) -> Graded {
    let graded = |verdict, given, detail: String| Graded {
        verdict,
        expected: Some(expected),
        given,
        detail,
    };
    let Some(answer) = given else {
        return graded(Verdict::Missing, None, "no answer for this case".into());
    };
    let claim = match &answer.claim {
        Ok(claim) => claim,
        Err(message) => return graded(Verdict::Malformed, None, message.clone()),
    };
    // `colball solve --output jsonl` writes an unreachable case as
    // `"moves": -1, "solution": ""`: that is a count, not a sequence.
    let sequence = claim
        .solution
        .as_ref()
        .filter(|s| !(claim.count == Some(-1) && s.trim().is_empty()));
    let Some(text) = sequence else {
        let count = claim.count.unwrap_or(-1);
        return if count == expected {
            graded(Verdict::Correct, Some(count), String::new())
        } else {
            graded(
                Verdict::WrongAnswer,
                Some(count),
                format!("expected {expected}, given {count}"),
            )
        };
    };
    let size = puzzle.size();
    let moves = match parse_moves(size, text) {
        Ok(moves) => moves,
        Err(e) => {
            return graded(
                Verdict::InvalidSolution,
                claim.count,
                illegal_move_detail(size, &e),
            );
        }
    };
    let length = moves.len() as i64;
    if let Some(count) = claim.count.filter(|&c| c != length) {
        let detail = if count < 0 {
            format!(
                "the answer says the target is unreachable (-1) but gives a sequence of {length} moves"
            )
        } else {
            format!("the answer says {count} moves but its sequence has {length}")
        };
        return graded(Verdict::InvalidSolution, Some(count), detail);
    }
    let end = match apply_moves(puzzle.start(), &moves) {
        Ok(end) => end,
        Err(e) => return graded(Verdict::InvalidSolution, Some(length), e.to_string()),
    };
    if end != puzzle.target() {
        return graded(
            Verdict::InvalidSolution,
            Some(length),
            miss_detail(&moves, puzzle, end),
        );
    }
    if expected < 0 {
        return graded(
            Verdict::SolverBug,
            Some(length),
            format!(
                "SOLVER BUG: the solver says the target is unreachable, but this sequence of {length} moves reaches it"
            ),
        );
    }
    match length.cmp(&expected) {
        std::cmp::Ordering::Equal => graded(Verdict::Correct, Some(length), String::new()),
        std::cmp::Ordering::Greater => graded(
            Verdict::NotOptimal,
            Some(length),
            format!("reaches the target in {length} moves; the optimum is {expected}"),
        ),
        std::cmp::Ordering::Less => graded(
            Verdict::SolverBug,
            Some(length),
            format!(
                "SOLVER BUG: this sequence reaches the target in {length} moves, fewer than the solver's optimum {expected}"
            ),
        ),
    }
}

fn illegal_move_detail(size: Size, e: &MoveError) -> String {
    match e {
        MoveError::BadToken { index, token } => format!(
            "move {index} `{token}`: not a move (expected r or c and the window's bottom-right row and column, like r22)"
        ),
        MoveError::OutOfRange { index, token, .. } => format!(
            "move {index} `{token}`: no such window on a {size} board (rows 2..{}, columns 2..{})",
            size.rows(),
            size.cols()
        ),
    }
}

fn miss_detail(moves: &[Move], puzzle: &Puzzle, end: crate::board::Board) -> String {
    let target = puzzle.target();
    let size = puzzle.size();
    let mut differing = Vec::new();
    for r in 0..size.rows() {
        for c in 0..size.cols() {
            if end.get(r, c) != target.get(r, c) {
                differing.push((r, c));
            }
        }
    }
    let (r, c) = differing[0];
    let after = match moves.len() {
        0 => "with no moves".to_string(),
        1 => "after its 1 move".to_string(),
        n => format!("after all {n} moves"),
    };
    let others = match differing.len() {
        1 => String::new(),
        n => format!(" ({n} cells differ)"),
    };
    format!(
        "{after} the board differs from the target at row {} column {}: {} instead of {}{others}",
        r + 1,
        c + 1,
        end.get(r, c).letter(),
        target.get(r, c).letter(),
    )
}

/// Verdict counts and the score.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Number of cases in the puzzle file.
    pub cases: usize,
    /// How many cases got each verdict.
    pub counts: HashMap<Verdict, usize>,
    /// Answers that matched no case.
    pub extra: usize,
}

impl Summary {
    pub fn new(extra: usize) -> Summary {
        Summary {
            extra,
            ..Summary::default()
        }
    }

    /// Counts one case.
    pub fn add(&mut self, verdict: Verdict) {
        self.cases += 1;
        *self.counts.entry(verdict).or_default() += 1;
    }

    pub fn count(&self, verdict: Verdict) -> usize {
        self.counts.get(&verdict).copied().unwrap_or(0)
    }

    /// `correct / cases`, 0 when there are no cases.
    pub fn score(&self) -> f64 {
        if self.cases == 0 {
            0.0
        } else {
            self.count(Verdict::Correct) as f64 / self.cases as f64
        }
    }

    /// The summary as a JSON object: `cases`, one count per verdict,
    /// `extra_answers` and `score`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        map.insert("cases".into(), self.cases.into());
        for v in Verdict::ALL {
            map.insert(v.name().into(), self.count(v).into());
        }
        map.insert("extra_answers".into(), self.extra.into());
        map.insert("score".into(), self.score().into());
        serde_json::Value::Object(map)
    }
}

impl fmt::Display for Summary {
    /// `10 cases: 7 correct, 1 wrong_answer, ...; score 0.700 (7/10)`,
    /// listing only the verdicts that occur.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cases", self.cases)?;
        let parts: Vec<String> = Verdict::ALL
            .into_iter()
            .filter(|v| self.count(*v) > 0)
            .map(|v| format!("{} {v}", self.count(v)))
            .collect();
        if !parts.is_empty() {
            write!(f, ": {}", parts.join(", "))?;
        }
        write!(
            f,
            "; score {:.3} ({}/{})",
            self.score(),
            self.count(Verdict::Correct),
            self.cases
        )?;
        if self.extra > 0 {
            write!(
                f,
                "; {} extra answer{} matched no case",
                self.extra,
                if self.extra == 1 { "" } else { "s" }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::Board;
    use crate::search::BidirSearch;

    fn puzzle(start: &[&str], target: &[&str]) -> Puzzle {
        Puzzle::new(
            Board::parse_rows(start).unwrap(),
            Board::parse_rows(target).unwrap(),
        )
        .unwrap()
    }

    /// The statement's 3x3 sample, 6 moves apart, with its optimal moves.
    fn sample() -> (Puzzle, String) {
        let p = puzzle(&["RRR", "BBB", "RBR"], &["RBR", "BRG", "GGR"]);
        let s = BidirSearch::new().solve(&p);
        assert_eq!(s.answer(), 6);
        (p, s.notation())
    }

    fn json(line: &str) -> GivenAnswer {
        parse_answers(line.as_bytes()).remove(0)
    }

    #[test]
    fn classic_answers_with_and_without_moves() {
        let answers = parse_answers(b"6\n\n-1\n6 r22 c33\nsix\n 7  \r\n");
        assert_eq!(answers.len(), 5);
        assert_eq!(
            answers[0].claim,
            Ok(Claim {
                count: Some(6),
                solution: None
            })
        );
        assert_eq!(answers[1].line, 3);
        assert_eq!(answers[1].claim.as_ref().unwrap().count, Some(-1));
        assert_eq!(
            answers[2].claim.as_ref().unwrap().solution.as_deref(),
            Some("r22 c33")
        );
        let e = answers[3].claim.clone().unwrap_err();
        assert!(e.starts_with("line 5:") && e.contains("\"six\""), "{e}");
        assert_eq!(answers[4].claim.as_ref().unwrap().count, Some(7));
    }

    #[test]
    fn json_answers_and_their_fields() {
        let a = json(r#"{"id": "a", "moves": 6, "solution": "r22 c33", "strategy": "bidir"}"#);
        assert_eq!(a.id.as_deref(), Some("a"));
        assert_eq!(a.claim.as_ref().unwrap().count, Some(6));
        let a = json(r#"{"id": 3, "solution": "r22"}"#);
        assert_eq!(a.id.as_deref(), Some("3"));
        assert_eq!(a.claim.as_ref().unwrap().count, None);
        let a = json(r#"{"moves": -1}"#);
        assert_eq!(a.id, None);
        assert_eq!(a.claim.as_ref().unwrap().count, Some(-1));
        let e = json(r#"{"id": "x"}"#).claim.unwrap_err();
        assert!(e.contains("neither"), "{e}");
        let e = json(r#"{"id": "x", "line": 2, "error": "bad row"}"#)
            .claim
            .unwrap_err();
        assert!(e.contains("bad row"), "{e}");
        let answers = parse_answers(b"{\"moves\": 1}\nnot json\n");
        let e = answers[1].claim.clone().unwrap_err();
        assert!(e.starts_with("line 2: not an answer object"), "{e}");
        let e = json(r#"{"moves": "six"}"#).claim.unwrap_err();
        assert!(e.contains("not an answer object"), "{e}");
    }

    #[test]
    fn every_verdict() {
        let (p, best) = sample();
        let v = |given: Option<GivenAnswer>| grade_case(&p, 6, given.as_ref());

        let g = v(Some(GivenAnswer::count(6)));
        assert_eq!(
            (g.verdict, g.expected, g.given),
            (Verdict::Correct, Some(6), Some(6))
        );
        assert_eq!(
            v(Some(GivenAnswer::sequence(&best))).verdict,
            Verdict::Correct
        );

        let g = v(Some(GivenAnswer::count(7)));
        assert_eq!((g.verdict, g.given), (Verdict::WrongAnswer, Some(7)));
        assert_eq!(g.detail, "expected 6, given 7");
        assert_eq!(
            v(Some(GivenAnswer::count(-1))).verdict,
            Verdict::WrongAnswer
        );

        // An illegal token, named with its position.
        let bad = best.replacen(' ', " c44 ", 1);
        let tokens: Vec<&str> = bad.split(' ').collect();
        assert_eq!(tokens[1], "c44");
        let g = v(Some(GivenAnswer::sequence(&bad)));
        assert_eq!(g.verdict, Verdict::InvalidSolution);
        assert!(
            g.detail
                .starts_with("move 2 `c44`: no such window on a 3x3 board"),
            "{}",
            g.detail
        );
        let g = v(Some(GivenAnswer::sequence("r22 q12")));
        assert!(
            g.detail.starts_with("move 2 `q12`: not a move"),
            "{}",
            g.detail
        );

        // A sequence of the right length that misses the target.
        let mut tokens: Vec<String> = best.split(' ').map(String::from).collect();
        tokens[0] = if tokens[0].starts_with('r') {
            tokens[0].replace('r', "c")
        } else {
            tokens[0].replace('c', "r")
        };
        let g = v(Some(GivenAnswer::sequence(&tokens.join(" "))));
        assert_eq!((g.verdict, g.given), (Verdict::InvalidSolution, Some(6)));
        assert!(
            g.detail
                .starts_with("after all 6 moves the board differs from the target at row "),
            "{}",
            g.detail
        );

        // Longer but reaching the target: four rotations of one window are
        // the identity.
        let long = format!("r22 r22 r22 r22 {best}");
        let g = v(Some(GivenAnswer::sequence(&long)));
        assert_eq!((g.verdict, g.given), (Verdict::NotOptimal, Some(10)));
        assert!(g.detail.contains("optimum is 6"), "{}", g.detail);

        let g = v(None);
        assert_eq!((g.verdict, g.given), (Verdict::Missing, None));
        let g = v(Some(parse_answers(b"x\n").remove(0)));
        assert_eq!(g.verdict, Verdict::Malformed);
        assert!(g.detail.contains("line 1"), "{}", g.detail);

        // A count disagreeing with its own sequence.
        let a = json(&format!(r#"{{"moves": 5, "solution": "{best}"}}"#));
        let g = v(Some(a));
        assert_eq!((g.verdict, g.given), (Verdict::InvalidSolution, Some(5)));
        assert_eq!(g.detail, "the answer says 5 moves but its sequence has 6");
        // ... and the classic `--moves` layout.
        let a = parse_answers(format!("6 {best}\n").as_bytes()).remove(0);
        assert_eq!(v(Some(a)).verdict, Verdict::Correct);
    }

    #[test]
    fn a_shorter_sequence_is_a_loud_solver_bug() {
        let (p, best) = sample();
        // Pretend the solver said 7.
        let g = grade_case(&p, 7, Some(&GivenAnswer::sequence(&best)));
        assert_eq!(g.verdict, Verdict::SolverBug);
        assert!(g.detail.starts_with("SOLVER BUG"), "{}", g.detail);
        // Or that it said unreachable.
        let g = grade_case(&p, -1, Some(&GivenAnswer::sequence(&best)));
        assert_eq!(g.verdict, Verdict::SolverBug);
    }

    #[test]
    fn unreachable_cases() {
        // The statement's 2x2 sample: unreachable.
        let p = puzzle(&["BB", "BR"], &["BB", "RR"]);
        assert_eq!(BidirSearch::new().solve(&p).answer(), -1);
        assert_eq!(
            grade_case(&p, -1, Some(&GivenAnswer::count(-1))).verdict,
            Verdict::Correct
        );
        assert_eq!(
            grade_case(&p, -1, Some(&json(r#"{"moves": -1, "solution": ""}"#))).verdict,
            Verdict::Correct
        );
        assert_eq!(
            grade_case(&p, -1, Some(&GivenAnswer::count(2))).verdict,
            Verdict::WrongAnswer
        );
        let g = grade_case(&p, -1, Some(&GivenAnswer::sequence("r22 c22")));
        assert_eq!(g.verdict, Verdict::InvalidSolution);
        assert!(g.detail.starts_with("after all 2 moves"), "{}", g.detail);
        let g = grade_case(&p, -1, Some(&json(r#"{"moves": -1, "solution": "r22"}"#)));
        assert_eq!(g.verdict, Verdict::InvalidSolution);
        assert!(g.detail.contains("unreachable"), "{}", g.detail);
        // Start equals target: the empty sequence is optimal.
        let same = puzzle(&["RG", "BB"], &["RG", "BB"]);
        assert_eq!(
            grade_case(&same, 0, Some(&json(r#"{"solution": ""}"#))).verdict,
            Verdict::Correct
        );
        let g = grade_case(&same, 0, Some(&GivenAnswer::sequence("r22")));
        assert!(g.detail.starts_with("after its 1 move"), "{}", g.detail);
    }

    #[test]
    fn matching_by_position_and_by_id() {
        let ids: Vec<String> = ["a", "b", "a"].iter().map(|s| s.to_string()).collect();
        let answers = parse_answers(
            b"{\"id\":\"b\",\"moves\":2}\n{\"id\":\"a\",\"moves\":1}\n{\"id\":\"z\",\"moves\":9}\n{\"id\":\"a\",\"moves\":3}\n",
        );
        let m = match_answers(3, Some(&ids), answers.clone());
        assert!(m.by_id);
        let counts: Vec<Option<i64>> = m
            .answers
            .iter()
            .map(|a| a.as_ref().and_then(|a| a.claim.as_ref().unwrap().count))
            .collect();
        assert_eq!(counts, vec![Some(1), Some(2), Some(3)]);
        assert_eq!(m.extra.len(), 1);
        assert_eq!(m.extra[0].id.as_deref(), Some("z"));

        // One answer without an id: by position, the fourth is extra.
        let mut mixed = answers.clone();
        mixed[1].id = None;
        let m = match_answers(3, Some(&ids), mixed);
        assert!(!m.by_id);
        assert_eq!(m.answers[0].as_ref().unwrap().line, 1);
        assert_eq!(m.extra.len(), 1);

        // A classic puzzle file: by position, short answers leave gaps.
        let m = match_answers(5, None, answers.clone());
        assert_eq!(m.answers.len(), 5);
        assert!(m.answers[4].is_none() && m.extra.is_empty());
        let m = match_answers(2, None, answers);
        assert_eq!(m.answers.len(), 2);
        assert_eq!(m.extra.len(), 2);
    }

    #[test]
    fn summary_counts_and_scores() {
        let mut s = Summary::new(2);
        for v in [
            Verdict::Correct,
            Verdict::Correct,
            Verdict::Missing,
            Verdict::NotOptimal,
        ] {
            s.add(v);
        }
        assert_eq!(s.score(), 0.5);
        assert_eq!(
            s.to_string(),
            "4 cases: 2 correct, 1 not_optimal, 1 missing; score 0.500 (2/4); 2 extra answers matched no case"
        );
        let j = s.to_json();
        assert_eq!(j["correct"], 2);
        assert_eq!(j["wrong_answer"], 0);
        assert_eq!(j["extra_answers"], 2);
        assert_eq!(Summary::default().score(), 0.0);
        for v in Verdict::ALL {
            assert_eq!(Verdict::from_name(v.name()), Some(v));
            assert_eq!(serde_json::to_value(v).unwrap(), v.name());
        }
    }
}
