//! Expected solve times, learned: for each board size, how long workers
//! held a task until its verified answer, over the last [`WINDOW`]
//! answers, and the 90th percentile of those times.
//!
//! The time is the coordinator's own (from dispatch to the verified
//! answer), not what a worker reports, so a worker cannot bend it; it
//! includes the task's wait in the worker's own queue. Memory is bounded:
//! [`WINDOW`] times of 4 bytes for each of the nine sizes.

use std::collections::VecDeque;
use std::time::Duration;

use colball_solver::Size;

/// Answers kept per size.
pub const WINDOW: usize = 256;

/// Answers of a size needed before its expected time is believed, by
/// default.
pub const MIN_SAMPLES: usize = 20;

/// See the module documentation.
#[derive(Debug)]
pub struct SolveTimes {
    /// Per size (in [`Size::ALL`]'s order): recent times in microseconds,
    /// oldest first.
    recent: [VecDeque<u32>; Size::ALL.len()],
    /// Per size, the 90th percentile of `recent` when last refreshed.
    p90: [Option<Duration>; Size::ALL.len()],
}

/// One size's learned time, as `/metrics` shows it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SolveTime {
    /// `4x4`.
    pub size: String,
    /// Answers it was learned from (at most [`WINDOW`]).
    pub samples: usize,
    /// The 90th percentile, in seconds.
    pub p90_seconds: f64,
}

impl Default for SolveTimes {
    fn default() -> SolveTimes {
        SolveTimes {
            recent: std::array::from_fn(|_| VecDeque::with_capacity(WINDOW)),
            p90: [None; Size::ALL.len()],
        }
    }
}

fn slot(size: Size) -> Option<usize> {
    Size::ALL.iter().position(|s| *s == size)
}

impl SolveTimes {
    /// Notes that a task of `size` was answered `took` after its dispatch.
    pub fn record(&mut self, size: Size, took: Duration) {
        let Some(at) = slot(size) else { return };
        let recent = &mut self.recent[at];
        if recent.len() == WINDOW {
            recent.pop_front();
        }
        recent.push_back(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
    }

    /// Recomputes each size's 90th percentile from its recent answers
    /// (none for a size with fewer than `min_samples`).
    pub fn refresh(&mut self, min_samples: usize) {
        let mut sorted = Vec::with_capacity(WINDOW);
        for (recent, p90) in self.recent.iter().zip(&mut self.p90) {
            *p90 = (!recent.is_empty() && recent.len() >= min_samples).then(|| {
                sorted.clear();
                sorted.extend(recent.iter().copied());
                sorted.sort_unstable();
                let rank = (sorted.len() * 9).div_ceil(10) - 1;
                Duration::from_micros(u64::from(sorted[rank]))
            });
        }
    }

    /// How long a task of `size` is expected to be held, as of the last
    /// refresh: `None` for a size not seen often enough.
    pub fn expected(&self, size: Size) -> Option<Duration> {
        slot(size).and_then(|at| self.p90[at])
    }

    /// Every size with an expected time.
    pub fn view(&self) -> Vec<SolveTime> {
        Size::ALL
            .iter()
            .zip(&self.recent)
            .zip(&self.p90)
            .filter_map(|((size, recent), p90)| {
                p90.map(|p| SolveTime {
                    size: size.to_string(),
                    samples: recent.len(),
                    p90_seconds: p.as_secs_f64(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(rows: usize, cols: usize) -> Size {
        Size::new(rows, cols).unwrap()
    }

    #[test]
    fn the_expected_time_is_the_p90_of_the_last_window_per_size() {
        let mut t = SolveTimes::default();
        for ms in 1..MIN_SAMPLES as u64 {
            t.record(size(4, 4), Duration::from_millis(ms));
        }
        t.refresh(MIN_SAMPLES);
        assert_eq!(t.expected(size(4, 4)), None, "too few answers yet");
        t.record(size(4, 4), Duration::from_millis(20));
        t.refresh(MIN_SAMPLES);
        // 1..=20 ms: the 18th of 20 is the 90th percentile.
        assert_eq!(t.expected(size(4, 4)), Some(Duration::from_millis(18)));
        assert_eq!(t.expected(size(3, 3)), None, "sizes are apart");
        // Only the last WINDOW count: slow answers long past are forgotten.
        for _ in 0..WINDOW {
            t.record(size(4, 4), Duration::from_micros(500));
        }
        t.refresh(MIN_SAMPLES);
        assert_eq!(t.expected(size(4, 4)), Some(Duration::from_micros(500)));
        let view = t.view();
        assert_eq!(view.len(), 1);
        assert_eq!((view[0].size.as_str(), view[0].samples), ("4x4", WINDOW));
    }
}
