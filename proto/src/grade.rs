//! Conversions between the Grade RPC's wire messages and the solver's
//! grading types.

use colball_solver::grade::{Claim, GivenAnswer, Graded, Verdict};

use crate::v1;

/// A solver verdict as its wire enum.
pub fn verdict_to_wire(verdict: Verdict) -> v1::Verdict {
    match verdict {
        Verdict::Correct => v1::Verdict::Correct,
        Verdict::WrongAnswer => v1::Verdict::WrongAnswer,
        Verdict::InvalidSolution => v1::Verdict::InvalidSolution,
        Verdict::NotOptimal => v1::Verdict::NotOptimal,
        Verdict::Missing => v1::Verdict::Missing,
        Verdict::Malformed => v1::Verdict::Malformed,
        Verdict::Error => v1::Verdict::Error,
        Verdict::SolverBug => v1::Verdict::SolverBug,
    }
}

/// A wire verdict (the raw enum number) as a solver verdict; `None` for
/// `VERDICT_UNSPECIFIED` or a number this build does not know.
pub fn verdict_from_wire(raw: i32) -> Option<Verdict> {
    Some(match v1::Verdict::try_from(raw).ok()? {
        v1::Verdict::Unspecified => return None,
        v1::Verdict::Correct => Verdict::Correct,
        v1::Verdict::WrongAnswer => Verdict::WrongAnswer,
        v1::Verdict::InvalidSolution => Verdict::InvalidSolution,
        v1::Verdict::NotOptimal => Verdict::NotOptimal,
        v1::Verdict::Missing => Verdict::Missing,
        v1::Verdict::Malformed => Verdict::Malformed,
        v1::Verdict::Error => Verdict::Error,
        v1::Verdict::SolverBug => Verdict::SolverBug,
    })
}

/// An answer as sent in a [`v1::GradeCase`].
pub fn answer_to_wire(answer: &GivenAnswer) -> v1::Answer {
    match &answer.claim {
        Ok(claim) => v1::Answer {
            moves: claim.count,
            solution: claim.solution.clone(),
            unreadable: String::new(),
            line: answer.line as u64,
        },
        Err(why) => v1::Answer {
            moves: None,
            solution: None,
            unreadable: why.clone(),
            line: answer.line as u64,
        },
    }
}

/// A wire answer as the solver's. An answer with neither a count nor a
/// sequence (and no reason) is unreadable.
pub fn answer_from_wire(answer: &v1::Answer) -> GivenAnswer {
    let claim = if !answer.unreadable.is_empty() {
        Err(answer.unreadable.clone())
    } else if answer.moves.is_none() && answer.solution.is_none() {
        Err("the answer holds neither a count nor a sequence".to_string())
    } else {
        Ok(Claim {
            count: answer.moves,
            solution: answer.solution.clone(),
        })
    };
    GivenAnswer {
        line: answer.line as usize,
        id: None,
        claim,
    }
}

/// One graded case as its wire result.
pub fn graded_to_wire(index: u64, id: String, graded: &Graded) -> v1::GradeResult {
    v1::GradeResult {
        index,
        id,
        verdict: verdict_to_wire(graded.verdict) as i32,
        expected: graded.expected,
        given: graded.given,
        detail: graded.detail.clone(),
    }
}

/// A wire result as a graded case; `None` when its verdict is unknown.
pub fn graded_from_wire(result: &v1::GradeResult) -> Option<Graded> {
    Some(Graded {
        verdict: verdict_from_wire(result.verdict)?,
        expected: result.expected,
        given: result.given,
        detail: result.detail.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_and_answers_round_trip() {
        for v in Verdict::ALL {
            assert_eq!(verdict_from_wire(verdict_to_wire(v) as i32), Some(v));
        }
        assert_eq!(verdict_from_wire(0), None);
        assert_eq!(verdict_from_wire(99), None);
        for text in ["6 r22 c33\n", "-1\n", "six\n", "{\"solution\": \"r22\"}\n"] {
            let a = colball_solver::grade::parse_answers(text.as_bytes()).remove(0);
            let back = answer_from_wire(&answer_to_wire(&a));
            assert_eq!((back.line, back.claim), (a.line, a.claim), "{text}");
        }
        let empty = v1::Answer::default();
        assert!(answer_from_wire(&empty).claim.is_err());
        let g = Graded {
            verdict: Verdict::NotOptimal,
            expected: Some(6),
            given: Some(8),
            detail: "d".into(),
        };
        assert_eq!(
            graded_from_wire(&graded_to_wire(3, "x".into(), &g)),
            Some(g)
        );
    }
}
