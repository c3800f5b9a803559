//! What the nemesis run's clients were told (the history) and the checker
//! that holds it against the guarantees the docs give, with the answers
//! computed in-process before the run and what is stored after it.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A result as a client sees it: the moves, or the error it carried.
pub type Answer = Result<i64, String>;

/// How a client reached the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Grpc,
    Http,
}

/// One client-visible event. `job` is the workload's number for the job
/// (its puzzles and answers), known before any id is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A submit acknowledged with the job's id.
    Submitted {
        job: usize,
        id: String,
        via: Via,
        puzzles: usize,
    },
    /// A submit that failed: the job may or may not exist, and is not
    /// checked.
    SubmitFailed { job: usize, error: String },
    /// A result read (index, moves, or the error it carried).
    Read {
        job: usize,
        index: u64,
        answer: Result<i64, String>,
    },
    /// A results stream that broke off (the reader goes on elsewhere).
    ReadBroke { job: usize, error: String },
    /// A cancel acknowledged.
    Cancelled { job: usize },
    /// A delete acknowledged.
    Deleted { job: usize },
    /// A cancel or delete that failed (retried).
    Refused { job: usize, what: String },
    /// A fault the nemesis injected.
    Fault(String),
    /// Every fault undone: all processes running, the database reachable.
    Healed,
}

impl Event {
    fn job(&self) -> Option<usize> {
        match self {
            Event::Submitted { job, .. }
            | Event::SubmitFailed { job, .. }
            | Event::Read { job, .. }
            | Event::ReadBroke { job, .. }
            | Event::Cancelled { job }
            | Event::Deleted { job }
            | Event::Refused { job, .. } => Some(*job),
            Event::Fault(_) | Event::Healed => None,
        }
    }
}

/// An event and when it came, from the run's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub at: Duration,
    pub event: Event,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>9.3}s {:?}", self.at.as_secs_f64(), self.event)
    }
}

/// The history, recorded by every client task at once.
#[derive(Debug)]
pub struct History {
    start: Instant,
    records: Mutex<Vec<Record>>,
}

impl Default for History {
    fn default() -> History {
        History {
            start: Instant::now(),
            records: Mutex::default(),
        }
    }
}

impl History {
    pub fn record(&self, event: Event) {
        let at = self.start.elapsed();
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Record { at, event });
    }

    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A job's state as the cluster reports it after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Done,
    Cancelled,
    /// Not found (deleted).
    Gone,
    /// Anything else, by name (still running when the run gave up on it).
    Other(String),
}

/// What is stored of one acknowledged job after the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    pub state: Option<State>,
    /// Its results read back from index 0 (index, moves or error).
    pub results: Vec<(u64, Result<i64, String>)>,
    /// Its results stored when the run's other work was done, and again
    /// once a later job had been solved: a cancelled job's two counts.
    pub counts: (u64, u64),
    /// Rows of it left in the database (a deleted job's).
    pub rows: u64,
    /// The `webhook-id` of each call of its webhook.
    pub webhook_ids: Vec<String>,
    /// What the database holds of it (its row's state and counts, each
    /// window's claim), for the message of a job that did not finish.
    pub in_store: String,
}

/// The first guarantee a history breaks.
#[derive(Debug, PartialEq, Eq)]
pub struct Violation {
    pub guarantee: &'static str,
    pub job: usize,
    pub detail: String,
    /// The job's last events and the faults among them.
    pub around: Vec<Record>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "violated: {}", self.guarantee)?;
        writeln!(f, "job {}: {}", self.job, self.detail)?;
        writeln!(f, "events around it:")?;
        for r in &self.around {
            writeln!(f, "  {r}")?;
        }
        Ok(())
    }
}

/// What a passing history held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub acknowledged: usize,
    pub unacknowledged: usize,
    pub done: usize,
    pub cancelled: usize,
    pub deleted: usize,
    pub results_checked: usize,
    /// Results that are the attempt cap's error, not an answer.
    pub gave_up: usize,
    pub reads_checked: usize,
    pub streams_broken: usize,
    pub webhook_calls: usize,
    pub faults: BTreeMap<String, usize>,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "jobs acknowledged {} (done {}, cancelled {}, deleted {}), submits unacknowledged {}",
            self.acknowledged, self.done, self.cancelled, self.deleted, self.unacknowledged
        )?;
        writeln!(
            f,
            "results checked {} (the attempt cap's error {}), reads checked {}, streams broken and resumed {}, webhook calls {}",
            self.results_checked,
            self.gave_up,
            self.reads_checked,
            self.streams_broken,
            self.webhook_calls
        )?;
        let faults: usize = self.faults.values().sum();
        write!(f, "faults {faults}:")?;
        for (class, n) in &self.faults {
            write!(f, " {class}: {n};")?;
        }
        Ok(())
    }
}

pub const EXACTLY_ONCE: &str = "every index of an acknowledged job has exactly one result, the in-process answer \
     (or the attempt cap's error)";
pub const READS_STORED: &str = "nothing read differs from what is finally stored";
pub const NO_WRONG_ANSWER: &str = "no wrong answer is ever delivered";
pub const FINISHES: &str = "an acknowledged job that is not cancelled or deleted finishes";
pub const CANCEL_STOPS: &str = "a cancelled job's work stops";
pub const DELETE_REMOVES: &str = "a deleted job is gone, and its rows with it";
pub const WEBHOOK_ONCE_STABLE: &str =
    "the webhook of each finished job is called at least once, with one stable id";

/// Holds `records` against the guarantees: `answers[job]` are job `job`'s
/// in-process answers, `stored[job]` what is stored of each acknowledged
/// job after the run.
pub fn check(
    records: &[Record],
    answers: &[Vec<i64>],
    stored: &HashMap<usize, Stored>,
) -> Result<Summary, Violation> {
    let mut summary = Summary::default();
    let mut acknowledged: BTreeMap<usize, usize> = BTreeMap::new();
    let (mut cancelled, mut deleted) = (Vec::new(), Vec::new());
    let mut reads: HashMap<usize, Vec<(u64, &Answer)>> = HashMap::new();
    for r in records {
        match &r.event {
            Event::Submitted { job, puzzles, .. } => {
                acknowledged.insert(*job, *puzzles);
            }
            Event::SubmitFailed { .. } => summary.unacknowledged += 1,
            Event::Read { job, index, answer } => {
                reads.entry(*job).or_default().push((*index, answer));
            }
            Event::ReadBroke { .. } => summary.streams_broken += 1,
            Event::Cancelled { job } => cancelled.push(*job),
            Event::Deleted { job } => deleted.push(*job),
            Event::Fault(what) => {
                *summary.faults.entry(class(what)).or_default() += 1;
            }
            Event::Refused { .. } | Event::Healed => {}
        }
    }
    summary.acknowledged = acknowledged.len();
    let fail = |guarantee, job, detail: String| Violation {
        guarantee,
        job,
        detail,
        around: around(records, job),
    };
    // The attempt cap's error (RELIABILITY.md) is the one error a puzzle
    // may get: when every worker that took it was lost, three times.
    let wrong = |answer: &Answer, truth: i64| answer.as_ref() != Ok(&truth) && !gave_up(answer);
    // Every read, of any job, acknowledged or not.
    for (&job, seen) in &reads {
        for &(index, answer) in seen {
            let truth = answers[job].get(index as usize).copied();
            match truth {
                Some(truth) if !wrong(answer, truth) => summary.reads_checked += 1,
                _ => {
                    return Err(fail(
                        NO_WRONG_ANSWER,
                        job,
                        format!("index {index} read {answer:?}, the answer is {truth:?}"),
                    ));
                }
            }
        }
    }
    for (&job, &puzzles) in &acknowledged {
        let is_deleted = deleted.contains(&job);
        let is_cancelled = cancelled.contains(&job) && !is_deleted;
        let s = stored.get(&job).cloned().unwrap_or_default();
        if is_deleted {
            summary.deleted += 1;
            if s.state != Some(State::Gone) || s.rows != 0 {
                return Err(fail(
                    DELETE_REMOVES,
                    job,
                    format!("after its delete: {:?}, {} rows", s.state, s.rows),
                ));
            }
            continue;
        }
        let mut by_index: BTreeMap<u64, &Result<i64, String>> = BTreeMap::new();
        for (index, answer) in &s.results {
            if by_index.insert(*index, answer).is_some() {
                return Err(fail(EXACTLY_ONCE, job, format!("index {index} twice")));
            }
            let truth = answers[job].get(*index as usize).copied();
            if truth.is_none_or(|t| wrong(answer, t)) {
                return Err(fail(
                    EXACTLY_ONCE,
                    job,
                    format!("index {index} stored {answer:?}, the answer is {truth:?}"),
                ));
            }
            summary.results_checked += 1;
            summary.gave_up += usize::from(gave_up(answer));
        }
        for &(index, answer) in reads.get(&job).into_iter().flatten() {
            if by_index.get(&index) != Some(&answer) {
                return Err(fail(
                    READS_STORED,
                    job,
                    format!(
                        "index {index} read {answer:?}, stored {:?}",
                        by_index.get(&index)
                    ),
                ));
            }
        }
        if is_cancelled {
            summary.cancelled += 1;
            if !matches!(s.state, Some(State::Cancelled | State::Done)) || s.counts.0 != s.counts.1
            {
                return Err(fail(
                    CANCEL_STOPS,
                    job,
                    format!(
                        "after its cancel: {:?}, results stored {} then {}",
                        s.state, s.counts.0, s.counts.1
                    ),
                ));
            }
            continue;
        }
        if s.state != Some(State::Done) {
            return Err(fail(
                FINISHES,
                job,
                format!(
                    "it ended {:?} with {} results of {puzzles} read back; in the database: {}",
                    s.state,
                    s.results.len(),
                    s.in_store
                ),
            ));
        }
        summary.done += 1;
        if by_index.len() != puzzles {
            let missing = (0..puzzles as u64).find(|i| !by_index.contains_key(i));
            return Err(fail(
                EXACTLY_ONCE,
                job,
                format!(
                    "{} results of {puzzles}; the first missing is {missing:?}",
                    by_index.len()
                ),
            ));
        }
        let ids = &s.webhook_ids;
        if ids.is_empty() || ids.iter().any(|id| *id != ids[0]) {
            return Err(fail(
                WEBHOOK_ONCE_STABLE,
                job,
                format!("its webhook's calls had ids {ids:?}"),
            ));
        }
        summary.webhook_calls += ids.len();
    }
    Ok(summary)
}

/// Whether `answer` is the attempt cap's error: the puzzle's workers
/// were lost, each time, `--max-attempts` times.
fn gave_up(answer: &Answer) -> bool {
    answer.as_ref().is_err_and(|e| {
        e.contains("gave up after") && e.ends_with("attempts: every worker that took it was lost")
    })
}

/// A fault's class: its text without its length, numbers as `N`.
fn class(fault: &str) -> String {
    let mut class = String::new();
    for c in fault.split(" for ").next().unwrap_or(fault).chars() {
        if !c.is_ascii_digit() {
            class.push(c);
        } else if !class.ends_with('N') {
            class.push('N');
        }
    }
    class
}

/// The last events of `job`, with the faults from just before the first
/// of them on.
fn around(records: &[Record], job: usize) -> Vec<Record> {
    let mine: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.event.job() == Some(job))
        .map(|(i, _)| i)
        .collect();
    // Its first events (how it began) and its last (how it ended), with
    // the faults from its first on.
    let shown: Vec<usize> = mine
        .iter()
        .take(6)
        .chain(mine.iter().rev().take(12))
        .copied()
        .collect();
    let (Some(&first), Some(&last)) = (mine.first(), mine.last()) else {
        return Vec::new();
    };
    records
        .iter()
        .enumerate()
        .take(last + 1)
        .skip(first)
        .filter(|(i, r)| shown.contains(i) || r.event.job().is_none())
        .map(|(_, r)| r.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(event: Event) -> Record {
        Record {
            at: Duration::ZERO,
            event,
        }
    }

    fn submitted(job: usize, puzzles: usize) -> Record {
        at(Event::Submitted {
            job,
            id: format!("j{job}-x"),
            via: Via::Grpc,
            puzzles,
        })
    }

    fn read(job: usize, index: u64, moves: i64) -> Record {
        at(Event::Read {
            job,
            index,
            answer: Ok(moves),
        })
    }

    fn done(answers: &[i64]) -> Stored {
        Stored {
            state: Some(State::Done),
            results: answers
                .iter()
                .enumerate()
                .map(|(i, &m)| (i as u64, Ok(m)))
                .collect(),
            webhook_ids: vec!["msg_1".into(), "msg_1".into()],
            ..Stored::default()
        }
    }

    /// One job of three puzzles, read whole, finished and its webhook
    /// called twice with one id: the history the others break.
    fn good() -> (Vec<Record>, Vec<Vec<i64>>, HashMap<usize, Stored>) {
        let answers = vec![vec![3, 5, 7]];
        let records = vec![
            submitted(0, 3),
            read(0, 0, 3),
            at(Event::Fault("SIGKILL coordinator 1".into())),
            read(0, 1, 5),
            read(0, 2, 7),
        ];
        let stored = HashMap::from([(0, done(&answers[0]))]);
        (records, answers, stored)
    }

    #[test]
    fn a_clean_history_passes_and_is_counted() {
        let (records, answers, stored) = good();
        let summary = check(&records, &answers, &stored).unwrap();
        assert_eq!(
            (summary.acknowledged, summary.done, summary.results_checked),
            (1, 1, 3)
        );
        assert_eq!(summary.reads_checked, 3);
        assert_eq!(summary.faults["SIGKILL coordinator N"], 1);
    }

    fn violated(
        records: &[Record],
        answers: &[Vec<i64>],
        stored: &HashMap<usize, Stored>,
    ) -> &'static str {
        check(records, answers, stored).unwrap_err().guarantee
    }

    #[test]
    fn each_broken_guarantee_is_named() {
        let (records, answers, stored) = good();
        // A result stored twice, one lost, one wrong.
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().results.push((1, Ok(5)));
        assert_eq!(violated(&records, &answers, &s), EXACTLY_ONCE);
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().results.pop();
        assert_eq!(violated(&records[..3], &answers, &s), EXACTLY_ONCE);
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().results[2].1 = Ok(8);
        assert_eq!(violated(&records[..3], &answers, &s), EXACTLY_ONCE);
        // A wrong answer read (the untrusted worker's), and a read that is
        // not what is stored: a wrong read is named first.
        let mut r = records.clone();
        r.push(read(0, 2, 9));
        assert_eq!(violated(&r, &answers, &stored), NO_WRONG_ANSWER);
        let mut r = records.clone();
        r.push(at(Event::Read {
            job: 0,
            index: 2,
            answer: Err("no workers".into()),
        }));
        assert_eq!(violated(&r, &answers, &stored), NO_WRONG_ANSWER);
        // Not finished.
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().state = Some(State::Other("running".into()));
        assert_eq!(violated(&records, &answers, &s), FINISHES);
        // A webhook never called, or called with two ids.
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().webhook_ids.clear();
        assert_eq!(violated(&records, &answers, &s), WEBHOOK_ONCE_STABLE);
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().webhook_ids[1] = "msg_2".into();
        assert_eq!(violated(&records, &answers, &s), WEBHOOK_ONCE_STABLE);
    }

    #[test]
    fn the_attempt_cap_s_error_is_the_one_error_allowed() {
        let (mut records, answers, mut stored) = good();
        let cap = "puzzle \"p2\": gave up after 3 attempts: every worker that took it was lost";
        records.push(at(Event::Read {
            job: 0,
            index: 1,
            answer: Err(cap.into()),
        }));
        records.retain(|r| {
            !matches!(
                r.event,
                Event::Read {
                    index: 1,
                    answer: Ok(_),
                    ..
                }
            )
        });
        stored.get_mut(&0).unwrap().results[1].1 = Err(cap.into());
        let summary = check(&records, &answers, &stored).unwrap();
        assert_eq!(summary.gave_up, 1);
        stored.get_mut(&0).unwrap().results[1].1 = Err("puzzle \"p2\": no workers".into());
        assert_eq!(violated(&records, &answers, &stored), EXACTLY_ONCE);
    }

    #[test]
    fn a_read_must_be_what_is_stored() {
        // Two results for index 1 (the second a fresh answer, equal to the
        // truth) where one was read: the stored one differs from the read
        // only if an answer changed, which a wrong stored answer shows.
        let answers = vec![vec![3, 5]];
        let records = vec![submitted(0, 2), read(0, 0, 3), read(0, 1, 5)];
        let mut stored = HashMap::from([(0, done(&answers[0]))]);
        stored.get_mut(&0).unwrap().results[1].1 = Err("lost".into());
        assert_eq!(violated(&records, &answers, &stored), EXACTLY_ONCE);
        // A read of an index the stored job does not hold.
        let mut stored = HashMap::from([(0, done(&answers[0]))]);
        stored.get_mut(&0).unwrap().results.truncate(1);
        stored.get_mut(&0).unwrap().state = Some(State::Cancelled);
        let mut records = records;
        records.push(at(Event::Cancelled { job: 0 }));
        assert_eq!(violated(&records, &answers, &stored), READS_STORED);
    }

    #[test]
    fn cancelled_and_deleted_jobs_are_held_to_their_own_guarantees() {
        let answers = vec![vec![3, 5], vec![4]];
        let mut records = vec![
            submitted(0, 2),
            submitted(1, 1),
            read(0, 0, 3),
            at(Event::Cancelled { job: 0 }),
            at(Event::Deleted { job: 1 }),
        ];
        let cancelled = Stored {
            state: Some(State::Cancelled),
            results: vec![(0, Ok(3))],
            counts: (1, 1),
            ..Stored::default()
        };
        let gone = Stored {
            state: Some(State::Gone),
            ..Stored::default()
        };
        let stored = HashMap::from([(0, cancelled.clone()), (1, gone.clone())]);
        let summary = check(&records, &answers, &stored).unwrap();
        assert_eq!((summary.cancelled, summary.deleted), (1, 1));
        let mut s = stored.clone();
        s.get_mut(&0).unwrap().counts = (1, 2);
        assert_eq!(violated(&records, &answers, &s), CANCEL_STOPS);
        let mut s = stored.clone();
        s.get_mut(&1).unwrap().rows = 3;
        assert_eq!(violated(&records, &answers, &s), DELETE_REMOVES);
        let mut s = stored;
        s.get_mut(&1).unwrap().state = Some(State::Done);
        let v = check(&records, &answers, &s).unwrap_err();
        assert_eq!(v.guarantee, DELETE_REMOVES);
        assert!(v.to_string().contains("Deleted { job: 1 }"), "{v}");
        // An unacknowledged submit is not held to anything.
        records.push(at(Event::SubmitFailed {
            job: 1,
            error: "unavailable".into(),
        }));
        records.retain(|r| !matches!(r.event, Event::Submitted { job: 1, .. }));
        records.retain(|r| !matches!(r.event, Event::Deleted { job: 1 }));
        let summary = check(&records, &answers, &HashMap::from([(0, cancelled)])).unwrap();
        assert_eq!((summary.acknowledged, summary.unacknowledged), (1, 1));
    }
}
