//! The measurements behind `colball bench`: time per puzzle on one thread.

use std::fmt;
use std::time::{Duration, Instant};

use colball_solver::{BidirSearch, Puzzle};

/// Timing of one set of puzzles.
#[derive(Clone, Debug)]
pub struct Stats {
    pub count: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Stats {
    fn from_times(mut times: Vec<Duration>) -> Stats {
        times.sort();
        let count = times.len();
        let pick = |q: f64| {
            if count == 0 {
                Duration::ZERO
            } else {
                times[((count as f64 * q).ceil() as usize).clamp(1, count) - 1]
            }
        };
        let total: Duration = times.iter().sum();
        Stats {
            count,
            mean: if count == 0 {
                Duration::ZERO
            } else {
                total / count as u32
            },
            p50: pick(0.50),
            p99: pick(0.99),
            max: times.last().copied().unwrap_or_default(),
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>7} {:>11} {:>11} {:>11} {:>11}",
            self.count,
            human(self.mean),
            human(self.p50),
            human(self.p99),
            human(self.max)
        )
    }
}

/// A duration with a unit that keeps 3 significant digits readable.
pub fn human(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Solves every puzzle on this thread with `search` and times each one:
/// the statistics of the whole set, and of each distance (`-1` for
/// unreachable) in increasing order. `search` should be warm (its table
/// allocated) for steady-state figures.
pub fn time_each(search: &mut BidirSearch, puzzles: &[Puzzle]) -> (Stats, Vec<(i64, Stats)>) {
    let mut all = Vec::with_capacity(puzzles.len());
    let mut by_distance = std::collections::BTreeMap::<i64, Vec<Duration>>::new();
    for p in puzzles {
        let began = Instant::now();
        let solution = std::hint::black_box(search.solve(std::hint::black_box(p)));
        let elapsed = began.elapsed();
        all.push(elapsed);
        by_distance
            .entry(solution.answer())
            .or_default()
            .push(elapsed);
    }
    let by_distance = by_distance
        .into_iter()
        .map(|(d, times)| (d, Stats::from_times(times)))
        .collect();
    (Stats::from_times(all), by_distance)
}

/// Peak resident memory of this process, where the OS tells it (Linux).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_ranks() {
        let times = (1..=100).map(Duration::from_millis).collect();
        let s = Stats::from_times(times);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        assert_eq!(s.mean, Duration::from_micros(50_500));
    }
}
