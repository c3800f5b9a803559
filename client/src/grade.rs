//! `colball grade`: read a puzzle file and an answers file, find the
//! optimum of each puzzle (in-process or on a cluster) and judge each
//! answer with [`colball_solver::grade`].
//!
//! Output, one record per case in input order and then a summary:
//!
//! - `text`: `case 3 (id p3): not_optimal: reaches the target in 8 moves;
//!   the optimum is 6`, then `summary: 10 cases: ...; score 0.700 (7/10)`;
//! - `jsonl`: `{"case": 3, "id": "p3", "verdict": "not_optimal",
//!   "expected": 6, "given": 8, "detail": "..."}` per case, then
//!   `{"summary": {"cases": 10, "correct": 7, ..., "extra_answers": 0,
//!   "score": 0.7}}`.

use std::io::{self, Write};
use std::sync::Arc;

use colball_solver::format::{Format, classic, jsonl};
use colball_solver::grade::{
    GivenAnswer, Graded, Matched, Summary, Verdict, grade_case, match_answers, parse_answers,
};
use colball_solver::{Engine, Puzzle};
use thiserror::Error;

#[cfg(feature = "cluster")]
use crate::jobs::{self, JobRun};
use crate::local;
use crate::progress::Progress;
#[cfg(feature = "cluster")]
use crate::remote::{self, ClientError, SolveError};

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Text,
    Jsonl,
}

/// Where the optimal answers come from.
#[derive(Debug)]
pub enum Backend {
    /// In-process, on `threads` threads sharing `engine`.
    Local { threads: usize, engine: Arc<Engine> },
    /// On the cluster whose coordinator is at this URL.
    #[cfg(feature = "cluster")]
    Remote {
        url: String,
        security: Box<remote::Security>,
        /// The job the puzzles are solved as: priority, reconnection.
        run: JobRun,
    },
}

/// Why grading could not run.
#[derive(Debug, Error)]
pub enum GradeError {
    /// The puzzle file is unusable: `file:line: what`.
    #[error("{0}")]
    Input(String),
    #[cfg(feature = "cluster")]
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Output(#[from] io::Error),
}

/// The cases of a puzzle file with the answers matched to them.
#[derive(Debug)]
pub struct Cases {
    /// Each case's id: the JSON Lines id, or the case number.
    pub ids: Vec<String>,
    pub puzzles: Vec<Puzzle>,
    pub matched: Matched,
}

/// Reads the puzzle file (`name` for messages) and the answers file, and
/// matches them. The first unreadable puzzle is an error naming the file
/// and line; unreadable answers are not errors (see
/// [`colball_solver::grade`]).
pub fn load(puzzles: &[u8], name: &str, answers: &[u8]) -> Result<Cases, GradeError> {
    let (ids, list, have_ids) = match Format::detect(puzzles) {
        Format::Classic => {
            let cases = classic::parse(puzzles)
                .map_err(|e| GradeError::Input(format!("{name}:{}: {}", e.line, e.kind)))?;
            let ids = (1..=cases.len()).map(|i| i.to_string()).collect();
            (ids, cases.into_iter().map(|c| c.puzzle).collect(), false)
        }
        Format::Jsonl => {
            let mut ids = Vec::new();
            let mut list = Vec::new();
            for case in jsonl::parse(puzzles) {
                let case = case
                    .map_err(|e| GradeError::Input(format!("{name}:{}: {}", e.line, e.message)))?;
                ids.push(case.id);
                list.push(case.puzzle);
            }
            (ids, list, true)
        }
    };
    let matched = match_answers(
        list.len(),
        have_ids.then_some(ids.as_slice()),
        parse_answers(answers),
    );
    Ok(Cases {
        ids,
        puzzles: list,
        matched,
    })
}

/// Grades `cases` and writes the report to `out`; returns the summary.
/// `quiet` turns off the progress bar. A verdict of
/// [`Verdict::SolverBug`] is also reported on standard error, quiet or not.
pub fn run(
    cases: &Cases,
    backend: &Backend,
    format: ReportFormat,
    quiet: bool,
    out: &mut impl Write,
) -> Result<Summary, GradeError> {
    let mut summary = Summary::new(cases.matched.extra.len());
    let progress = Progress::new(cases.puzzles.len(), quiet, "grading");
    let mut emit = |index: usize, graded: Graded| -> io::Result<()> {
        progress.inc();
        summary.add(graded.verdict);
        let id = &cases.ids[index];
        if graded.verdict == Verdict::SolverBug {
            progress.eprintln(&format!(
                "colball: case {} (id {id}): {}",
                index + 1,
                graded.detail
            ));
        }
        match format {
            ReportFormat::Text => writeln!(out, "{}", text_line(index, id, &graded)),
            ReportFormat::Jsonl => writeln!(out, "{}", json_line(index, id, &graded)),
        }
    };
    match backend {
        Backend::Local { threads, engine } => {
            local::solve_in_order(&cases.puzzles, *threads, engine, |solved| {
                let index = solved.index;
                let answer = cases.matched.answers[index].as_ref();
                let graded = grade_case(&cases.puzzles[index], solved.solution.answer(), answer);
                emit(index, graded)
            })?;
        }
        #[cfg(feature = "cluster")]
        Backend::Remote { url, security, run } => {
            // The cluster finds each optimum (as a job, riding out broken
            // connections); each answer is judged here, as in-process.
            let list: Vec<(String, Puzzle)> = cases
                .ids
                .iter()
                .cloned()
                .zip(cases.puzzles.iter().copied())
                .collect();
            let mut notice = |m: &str| progress.eprintln(&format!("colball: {m}"));
            jobs::solve_in_order(url, security, run, &list, &mut notice, |solved| {
                let index = solved.index;
                let answer = cases.matched.answers[index].as_ref();
                let graded = grade_case(&cases.puzzles[index], solved.solution.answer(), answer);
                emit(index, graded)
            })
            .map_err(|e| match e {
                SolveError::Client(e) => GradeError::Client(e),
                SolveError::Output(e) => GradeError::Output(e),
            })?;
        }
    }
    drop(progress);
    match format {
        ReportFormat::Text => {
            for extra in &cases.matched.extra {
                writeln!(out, "extra: {}", describe_extra(extra))?;
            }
            writeln!(out, "summary: {summary}")?;
        }
        ReportFormat::Jsonl => {
            let mut s = summary.to_json();
            if let Some(map) = s.as_object_mut() {
                map.insert(
                    "matched_by".into(),
                    if cases.matched.by_id {
                        "id"
                    } else {
                        "position"
                    }
                    .into(),
                );
            }
            writeln!(out, "{}", serde_json::json!({ "summary": s }))?;
        }
    }
    out.flush()?;
    Ok(summary)
}

fn describe_extra(answer: &GivenAnswer) -> String {
    match &answer.id {
        Some(id) => format!(
            "the answer on line {} (id {id}) matches no case",
            answer.line
        ),
        None => format!("the answer on line {} is beyond the last case", answer.line),
    }
}

/// One case of the text report.
pub fn text_line(index: usize, id: &str, graded: &Graded) -> String {
    let case = index + 1;
    let head = if id == case.to_string() {
        format!("case {case}")
    } else {
        format!("case {case} (id {id})")
    };
    let v = graded.verdict;
    match v {
        Verdict::Correct => match graded.expected {
            Some(n) if n < 0 => format!("{head}: {v} (unreachable)"),
            Some(n) => format!("{head}: {v} ({n} moves)"),
            None => format!("{head}: {v}"),
        },
        _ => format!("{head}: {v}: {}", graded.detail),
    }
}

/// One case of the JSON Lines report.
pub fn json_line(index: usize, id: &str, graded: &Graded) -> String {
    let mut record = serde_json::json!({
        "case": index + 1,
        "id": id,
        "verdict": graded.verdict.name(),
        "expected": graded.expected,
        "given": graded.given,
    });
    if !graded.detail.is_empty() {
        if let Some(map) = record.as_object_mut() {
            map.insert("detail".into(), graded.detail.clone().into());
        }
    }
    record.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_name_the_case_and_id() {
        let g = Graded {
            verdict: Verdict::NotOptimal,
            expected: Some(6),
            given: Some(8),
            detail: "reaches the target in 8 moves; the optimum is 6".into(),
        };
        assert_eq!(
            text_line(2, "p3", &g),
            "case 3 (id p3): not_optimal: reaches the target in 8 moves; the optimum is 6"
        );
        let v: serde_json::Value = serde_json::from_str(&json_line(2, "3", &g)).unwrap();
        assert_eq!(v["case"], 3);
        assert_eq!(v["verdict"], "not_optimal");
        assert_eq!(v["expected"], 6);
        assert_eq!(v["given"], 8);
        let ok = Graded {
            verdict: Verdict::Correct,
            expected: Some(-1),
            given: Some(-1),
            detail: String::new(),
        };
        assert_eq!(text_line(0, "1", &ok), "case 1: correct (unreachable)");
        let v: serde_json::Value = serde_json::from_str(&json_line(0, "1", &ok)).unwrap();
        assert!(v.get("detail").is_none());
    }

    #[test]
    fn a_bad_puzzle_file_names_file_and_line() {
        let e = load(b"2 2\nRR\nRX\nRR\nRR\n", "p.in", b"").unwrap_err();
        assert!(e.to_string().starts_with("p.in:3: "), "{e}");
        let e = load(
            b"{\"start\": [\"RR\",\"RR\"], \"target\": [\"RR\",\"RR\"]}\n{\n",
            "p.jsonl",
            b"",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("p.jsonl:2: "), "{e}");
    }
}
