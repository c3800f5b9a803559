//! What the dashboard and `/metrics` show about the traffic, kept as the
//! event log records its events ([`TrafficStats::observe`]): the last
//! results and failures, recent solve times, totals by strategy and by
//! number of moves, the throughput over the last seconds, and a per-second
//! history of the last minutes (answers, solve-time percentiles, queue
//! depths by class) for the dashboard's charts.
//!
//! The totals that `/metrics` exports are long-lived Prometheus families
//! ([`TrafficMetrics`]), counted here as each result goes by and
//! registered once by the HTTP endpoint; the dashboard reads the same
//! counters.

use std::collections::{BTreeMap, VecDeque};

use colball_proto::egress;
use colball_proto::v1::{self, cluster_event::Kind};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use serde::Serialize;

/// Recent results and failures kept for the dashboard.
pub(super) const RECENT: usize = 20;
/// Recent solve times kept for the dashboard's percentiles.
const RECENT_TIMES: usize = 1024;
/// Seconds of per-second history kept for the dashboard's charts.
pub const HISTORY_SECS: i64 = 300;
/// The window of the throughput figure: the current second and the four
/// before it.
const RATE_SECS: i64 = 5;
/// Solve times kept per second of history for its percentiles (the first
/// ones of the second beyond that).
const TIMES_PER_SECOND: usize = 4096;

/// Upper bounds, in seconds, of the solve-time histogram's buckets: from
/// 10 us (small boards) to 1 s (the slowest 4x4 pairs take tens of ms).
fn latency_buckets() -> impl Iterator<Item = f64> {
    [
        1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0,
    ]
    .into_iter()
}

/// A result or failure as the dashboard lists it.
#[derive(Clone, Debug, Serialize)]
pub struct Recent {
    pub unix_ms: i64,
    pub id: String,
    pub text: String,
}

/// Totals and recent traffic for the dashboard and `/metrics`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Traffic {
    /// Results by how they were answered: a worker strategy (`cache` is
    /// a worker's solver cache), `result_cache` (the coordinator's result
    /// cache) or `shared` (the answer of the same puzzle pending for
    /// another request, solved once for both).
    pub by_strategy: BTreeMap<String, u64>,
    /// Error results (invalid puzzles, puzzles the cluster gave up on).
    pub errors: u64,
    pub results: Vec<Recent>,
    pub failures: Vec<Recent>,
    /// Median and 99th percentile of recent worker solve times, in us.
    pub p50_us: u64,
    pub p99_us: u64,
    pub newest_sequence: u64,
    /// Answers per second over the last [`RATE_SECS`] seconds (or since
    /// the log was created, when that is shorter).
    pub throughput: f64,
    /// Answers by their number of moves (-1: unreachable), cached ones
    /// included.
    pub by_moves: Vec<MovesCount>,
}

/// How many answers had a number of moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MovesCount {
    pub moves: i64,
    pub count: u64,
}

/// The last minutes, one entry per whole second from `start_unix_s` (the
/// current, unfinished second is left out): answers, percentiles of the
/// worker solve times of that second (`None` without any), and the queue
/// depth by class at its end.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct History {
    pub start_unix_s: i64,
    pub answered: Vec<u64>,
    pub p50_us: Vec<Option<u64>>,
    pub p99_us: Vec<Option<u64>>,
    pub queued_interactive: Vec<u64>,
    pub queued_normal: Vec<u64>,
    pub queued_bulk: Vec<u64>,
}

/// One second of history.
#[derive(Debug)]
struct Second {
    unix_s: i64,
    answered: u64,
    /// Solve times while the second is the newest; empty once closed.
    times_us: Vec<u64>,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    /// The queue depths last seen in this second.
    queued: [u64; 3],
}

impl Second {
    fn close(&mut self) {
        if self.times_us.is_empty() {
            return;
        }
        self.times_us.sort_unstable();
        self.p50_us = Some(percentile(&self.times_us, 50));
        self.p99_us = Some(percentile(&self.times_us, 99));
        self.times_us = Vec::new();
    }
}

/// The `p`th percentile of sorted, non-empty `times`.
fn percentile(times: &[u64], p: usize) -> u64 {
    times[(times.len() * p / 100).min(times.len() - 1)]
}

/// Label sets of the metric families.
pub type Labels = Vec<(String, String)>;

/// One label; the value escaped as both text formats want (prometheus-client
/// writes label values as given).
pub fn label(key: &str, value: &str) -> Labels {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    vec![(key.to_string(), escaped)]
}

/// The traffic totals `/metrics` exports: long-lived families, counted as
/// results go by (clones share their values).
#[derive(Clone, Debug)]
pub struct TrafficMetrics {
    /// Answers sent to clients, by how they were answered.
    pub answered: Family<Labels, Counter>,
    /// Error results sent to clients.
    pub result_errors: Counter,
    /// Worker solve times, in seconds.
    pub solve_latency: Histogram,
}

/// See the module documentation.
#[derive(Debug)]
pub struct TrafficStats {
    /// Members of `answered`, by strategy, for the dashboard and for
    /// counting without building a label set per result.
    by_strategy: BTreeMap<String, Counter>,
    answered: Family<Labels, Counter>,
    errors: Counter,
    latency: Histogram,
    /// The newest solved results, with their times, formatted only when
    /// the dashboard asks (a busy coordinator publishes far more than
    /// anyone reads).
    results: VecDeque<(i64, egress::PuzzleResult)>,
    failures: VecDeque<Recent>,
    times_us: VecDeque<u64>,
    pub(super) created_ms: i64,
    /// Per-second history, oldest first, only seconds with something in.
    seconds: VecDeque<Second>,
    /// The queue depths now, and at the end of the newest second dropped
    /// from the history.
    depths: [u64; 3],
    depths_before: [u64; 3],
    by_moves: BTreeMap<i64, u64>,
}

impl TrafficStats {
    /// Empty, as of `now_ms` (milliseconds since the epoch).
    pub fn new(now_ms: i64) -> TrafficStats {
        TrafficStats {
            by_strategy: BTreeMap::new(),
            answered: Family::default(),
            errors: Counter::default(),
            latency: Histogram::new(latency_buckets()),
            results: VecDeque::new(),
            failures: VecDeque::new(),
            times_us: VecDeque::new(),
            created_ms: now_ms,
            seconds: VecDeque::new(),
            depths: [0; 3],
            depths_before: [0; 3],
            by_moves: BTreeMap::new(),
        }
    }

    /// Seconds of history kept (for tests of what is dropped).
    #[cfg(test)]
    pub(super) fn seconds_kept(&self) -> usize {
        self.seconds.len()
    }

    /// The families `/metrics` registers.
    pub fn metrics(&self) -> TrafficMetrics {
        TrafficMetrics {
            answered: self.answered.clone(),
            result_errors: self.errors.clone(),
            solve_latency: self.latency.clone(),
        }
    }

    /// Counts one event of the log (at its time).
    pub fn observe(&mut self, event: &v1::ClusterEvent) {
        let now = event.unix_ms;
        match &event.kind {
            Some(Kind::QueueDepth(d)) => {
                self.depths = [d.interactive, d.normal, d.bulk];
                self.second(now).queued = [d.interactive, d.normal, d.bulk];
            }
            Some(Kind::WorkerLost(w)) => push(
                &mut self.failures,
                Recent {
                    unix_ms: now,
                    id: w.name.clone(),
                    text: format!(
                        "worker {} lost ({}): {} puzzles re-dispatched",
                        w.name, w.reason, w.redispatched
                    ),
                },
            ),
            // Results are counted by `observe_result`.
            _ => {}
        }
    }

    /// Counts one result of the log (at its time).
    pub fn observe_result(&mut self, now: i64, result: &egress::PuzzleResult) {
        match &result.outcome {
            Some(egress::Outcome::Solved(s)) => {
                let how = match (s.cached, s.shared) {
                    (true, true) => "shared",
                    (true, false) => "result_cache",
                    (false, _) => s.strategy.as_str(),
                };
                match self.by_strategy.get(how) {
                    Some(n) => {
                        n.inc();
                    }
                    None => {
                        let n = self.answered.get_or_create(&label("strategy", how)).clone();
                        n.inc();
                        self.by_strategy.insert(how.to_string(), n);
                    }
                }
                *self.by_moves.entry(s.moves).or_default() += 1;
                let second = self.second(now);
                second.answered += 1;
                if !s.cached && second.times_us.len() < TIMES_PER_SECOND {
                    second.times_us.push(s.time_us);
                }
                if !s.cached {
                    self.latency.observe(s.time_us as f64 / 1e6);
                    if self.times_us.len() == RECENT_TIMES {
                        self.times_us.pop_front();
                    }
                    self.times_us.push_back(s.time_us);
                }
                // (A copy shares the result's strings.)
                push(&mut self.results, (now, result.clone()));
            }
            Some(egress::Outcome::Error(e)) => {
                self.errors.inc();
                push(
                    &mut self.failures,
                    Recent {
                        unix_ms: now,
                        id: result.id.to_string(),
                        text: e.message.clone(),
                    },
                );
            }
            None => {}
        }
    }

    /// Totals and recent traffic as of `now` (ms since the epoch); the
    /// newest event's sequence number is the caller's.
    pub fn snapshot(&self, now: i64, newest_sequence: u64) -> Traffic {
        let mut times: Vec<u64> = self.times_us.iter().copied().collect();
        times.sort_unstable();
        let pct = |p: usize| {
            if times.is_empty() {
                0
            } else {
                percentile(&times, p)
            }
        };
        Traffic {
            throughput: self.throughput(now),
            by_moves: self
                .by_moves
                .iter()
                .map(|(&moves, &count)| MovesCount { moves, count })
                .collect(),
            by_strategy: self
                .by_strategy
                .iter()
                .map(|(how, n)| (how.clone(), n.get()))
                .collect(),
            errors: self.errors.get(),
            results: self
                .results
                .iter()
                .rev()
                .filter_map(|(at, result)| recent_result(*at, result))
                .collect(),
            failures: self.failures.iter().rev().cloned().collect(),
            p50_us: pct(50),
            p99_us: pct(99),
            newest_sequence,
        }
    }

    /// The history entry of the second holding `now_ms`, closing older
    /// ones and dropping those beyond [`HISTORY_SECS`]. A clock that went
    /// back counts as the newest second.
    fn second(&mut self, now_ms: i64) -> &mut Second {
        let now_s = now_ms.div_euclid(1000);
        self.advance(now_s);
        if self.seconds.back().is_none_or(|b| b.unix_s < now_s) {
            self.seconds.push_back(Second {
                unix_s: now_s,
                answered: 0,
                times_us: Vec::new(),
                p50_us: None,
                p99_us: None,
                queued: self.depths,
            });
        }
        self.seconds.back_mut().expect("just pushed")
    }

    /// Closes the seconds before `now_s` and drops those too old to keep.
    fn advance(&mut self, now_s: i64) {
        if let Some(back) = self.seconds.back_mut().filter(|b| b.unix_s < now_s) {
            back.close();
        }
        while let Some(front) = self.seconds.front() {
            if front.unix_s > now_s - HISTORY_SECS {
                break;
            }
            self.depths_before = front.queued;
            self.seconds.pop_front();
        }
    }

    fn throughput(&self, now_ms: i64) -> f64 {
        let now_s = now_ms.div_euclid(1000);
        let first = now_s - (RATE_SECS - 1);
        let answers: u64 = self
            .seconds
            .iter()
            .rev()
            .take_while(|s| s.unix_s >= first)
            .map(|s| s.answered)
            .sum();
        let since = (first * 1000).max(self.created_ms);
        // At least a second, so the first answers of a fresh coordinator
        // do not read as a burst.
        let span_ms = (now_ms - since).max(1000);
        answers as f64 * 1000.0 / span_ms as f64
    }

    /// The last minutes as of `now_ms`, second by second.
    pub fn history(&mut self, now_ms: i64) -> History {
        let now_s = now_ms.div_euclid(1000);
        self.advance(now_s);
        let start = (now_s - HISTORY_SECS).max(self.created_ms.div_euclid(1000));
        let mut h = History {
            start_unix_s: start,
            ..History::default()
        };
        let mut depths = self.depths_before;
        let mut kept = self.seconds.iter().peekable();
        for second in start..now_s {
            while kept.next_if(|k| k.unix_s < second).is_some() {}
            let (answered, p50, p99) = match kept.next_if(|k| k.unix_s == second) {
                Some(k) => {
                    depths = k.queued;
                    (k.answered, k.p50_us, k.p99_us)
                }
                None => (0, None, None),
            };
            h.answered.push(answered);
            h.p50_us.push(p50);
            h.p99_us.push(p99);
            h.queued_interactive.push(depths[0]);
            h.queued_normal.push(depths[1]);
            h.queued_bulk.push(depths[2]);
        }
        h
    }
}

/// A result as the dashboard lists it.
fn recent_result(unix_ms: i64, result: &egress::PuzzleResult) -> Option<Recent> {
    let s = result.solved()?;
    let text = if s.cached {
        format!("{} moves (cached)", s.moves)
    } else {
        format!(
            "{} moves by {} ({}, {} us)",
            s.moves, s.worker, s.strategy, s.time_us
        )
    };
    Some(Recent {
        unix_ms,
        id: result.id.to_string(),
        text,
    })
}

/// Appends to a ring of the newest [`RECENT`] items.
fn push<T>(ring: &mut VecDeque<T>, item: T) {
    if ring.len() == RECENT {
        ring.pop_front();
    }
    ring.push_back(item);
}
