//! How fast a job goes: the rate of its recent results, and when it ends
//! at that rate.
//!
//! A job's counts are sampled each time its status is read (`Get`, `List`,
//! the HTTP API, the dashboard), at most every [`EVERY`], and the rate is
//! taken over the samples of the last [`WINDOW`]. Reading from the store's
//! counts, not from this coordinator's own work, keeps the rate right when
//! several coordinators share a job. Until two samples a second apart
//! exist (the first read), the rate is the average since the job was
//! submitted; a finished job's is the average over its life.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::JobRow;

/// Samples older than this are dropped (the newest two are kept).
pub const WINDOW: Duration = Duration::from_secs(20);
/// Reads closer together than this add no sample.
pub const EVERY: Duration = Duration::from_millis(200);
/// Most samples kept per job (`WINDOW / EVERY`).
const MOST: usize = 100;
/// Jobs sampled before the ones not read for a [`WINDOW`] are forgotten.
const FORGET_PAST: usize = 1024;

/// A job's pace: recent results per second and the estimated end.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pace {
    /// Results (solved and errors) per second.
    pub rate: f64,
    /// When the job ends at that rate (its end, once finished), in
    /// milliseconds since the Unix epoch; 0 when unknown (no progress).
    pub eta_unix_ms: i64,
}

/// The samples of the jobs whose status is read.
#[derive(Debug, Default)]
pub struct Speedometer {
    samples: DashMap<i64, VecDeque<(Instant, u64)>>,
}

impl Speedometer {
    /// Samples `row` (read at `now`, `now_ms` on the wall clock) and gives
    /// its pace.
    pub fn observe(&self, row: &JobRow, now: Instant, now_ms: i64) -> Pace {
        let done = row.solved + row.errors;
        if row.state.finished() {
            self.samples.remove(&row.seq);
            let rate = per_second(done, row.finished_ms - row.created_ms);
            return Pace {
                rate,
                eta_unix_ms: row.finished_ms,
            };
        }
        if self.samples.len() > FORGET_PAST {
            self.samples.retain(|_, s| {
                s.back()
                    .is_some_and(|(at, _)| now.duration_since(*at) < WINDOW)
            });
        }
        let mut samples = self.samples.entry(row.seq).or_default();
        if samples
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= EVERY)
        {
            samples.push_back((now, done));
        }
        while samples.len() > MOST
            || (samples.len() > 2
                && samples
                    .front()
                    .is_some_and(|(at, _)| now.duration_since(*at) > WINDOW))
        {
            samples.pop_front();
        }
        let rate = match (samples.front(), samples.back()) {
            (Some((t0, d0)), Some((t1, d1)))
                if t1.duration_since(*t0) >= Duration::from_secs(1) =>
            {
                d1.saturating_sub(*d0) as f64 / t1.duration_since(*t0).as_secs_f64()
            }
            _ => per_second(done, now_ms - row.created_ms),
        };
        drop(samples);
        let remaining = row.remaining();
        let eta_unix_ms = if remaining == 0 {
            now_ms
        } else if rate > 0.0 {
            now_ms + (remaining as f64 / rate * 1000.0).ceil() as i64
        } else {
            0
        };
        Pace { rate, eta_unix_ms }
    }

    /// Forgets a deleted job.
    pub fn forget(&self, seq: i64) {
        self.samples.remove(&seq);
    }
}

/// `done` results over `ms` milliseconds, per second (0 over no time).
fn per_second(done: u64, ms: i64) -> f64 {
    if ms <= 0 {
        0.0
    } else {
        done as f64 * 1000.0 / ms as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::JobState;

    fn row(state: JobState, solved: u64) -> JobRow {
        JobRow {
            seq: 1,
            id: "j1".into(),
            owner: "a".into(),
            name: String::new(),
            priority: colball_core::Priority::Bulk,
            state,
            puzzles: 10_000,
            solved,
            errors: 0,
            created_ms: 1_000_000,
            finished_ms: 0,
            failure: String::new(),
            fail_fast: false,
            any_order: false,
            bytes: 0,
            webhook: None,
            trace: None,
        }
    }

    #[test]
    fn the_first_read_gives_the_average_since_submission() {
        let meter = Speedometer::default();
        let pace = meter.observe(&row(JobState::Running, 2_000), Instant::now(), 1_010_000);
        // 2,000 in 10 s; 8,000 to go at 200/s: 40 s.
        assert_eq!(pace.rate, 200.0);
        assert_eq!(pace.eta_unix_ms, 1_050_000);
    }

    #[test]
    fn later_reads_give_the_recent_rate_and_forget_older_samples() {
        let meter = Speedometer::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        meter.observe(&row(JobState::Running, 0), at(0), 1_000_000);
        // 1,000 in the first 2 s: 500/s.
        let pace = meter.observe(&row(JobState::Running, 1_000), at(2), 1_002_000);
        assert_eq!(pace.rate, 500.0);
        assert_eq!(pace.eta_unix_ms, 1_002_000 + 18_000);
        // Nothing more for 22 s: the first sample leaves the window, and
        // over the two left the job made no progress.
        let pace = meter.observe(&row(JobState::Running, 1_000), at(24), 1_024_000);
        assert_eq!(pace.rate, 0.0);
        assert_eq!(pace.eta_unix_ms, 0, "no progress: no estimate");
        meter.observe(&row(JobState::Running, 1_000), at(50), 1_050_000);
        // 100 more in the last second: 100/s, over the newest samples.
        // Reads closer than EVERY add no sample.
        meter.observe(&row(JobState::Running, 1_100), at(51), 1_051_000);
        let pace = meter.observe(
            &row(JobState::Running, 5_000),
            at(51) + EVERY / 2,
            1_051_100,
        );
        assert_eq!(pace.rate, 100.0, "{pace:?}");
    }

    #[test]
    fn a_finished_job_has_its_average_and_is_forgotten() {
        let meter = Speedometer::default();
        meter.observe(&row(JobState::Running, 10), Instant::now(), 1_001_000);
        let mut done = row(JobState::Done, 10_000);
        done.finished_ms = 1_004_000;
        let pace = meter.observe(&done, Instant::now(), 1_009_000);
        assert_eq!(
            pace,
            Pace {
                rate: 2_500.0,
                eta_unix_ms: 1_004_000
            }
        );
        assert!(meter.samples.is_empty());
    }
}
