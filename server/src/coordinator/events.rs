//! The coordinator's event log: every batch, result and worker change as a
//! numbered [`v1::ClusterEvent`], for watchers (`Watch` RPC, `colball
//! watch`) and the dashboard.
//!
//! Events get consecutive sequence numbers from 1. The newest
//! `capacity` events are retained, so a watcher can resume from a sequence
//! number it saw (after a reconnect, say) as long as that point is still
//! retained; live events are fanned out through a bounded broadcast
//! channel. A watcher that falls behind the channel catches up from the
//! retained events, and is told clearly (OUT_OF_RANGE) when even those have
//! moved past it. Publishing never waits for a watcher.
//!
//! Every event it records is also counted by the [traffic
//! statistics](super::traffic) (the dashboard's figures and the traffic
//! totals of `/metrics`), under the same lock: a group of results is one
//! step of both, and the figures match the sequence numbers.
//!
//! Results are most of the events, one per puzzle answered, so a result is
//! retained as the coordinator wrote it ([`egress::PuzzleResult`]): once
//! the ring is full, recording a solved result copies no text and
//! allocates nothing (its strings are inline or shared with the result
//! sent to the client, and it is written into the entry it pushes out; an
//! error result's message is copied). The ring's entries are boxed, so
//! that the ring grows by copying pointers: entries inline (about 130
//! bytes each) were copied, and briefly held twice, each time the ring
//! doubled on its way to 100,000 (up to 20 MiB; the 2,000,000-puzzle job
//! test's bound on the coordinator's peak memory caught it, twice). A
//! result becomes a [`v1::ClusterEvent`] only for a watcher: on the live
//! channel while one is subscribed, and when one resumes from the
//! retained events.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use colball_proto::egress;
use colball_proto::v1::{self, cluster_event::Kind};
use tokio::sync::broadcast;

use super::traffic::{History, Traffic, TrafficMetrics, TrafficStats};

/// Events retained for resuming watchers by default.
pub const DEFAULT_RETAINED: usize = 100_000;
/// A retained range did not contain the requested resume point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot resume from event {requested}: this coordinator retains events {oldest} to {newest}; resume from {oldest} or watch from now"
)]
pub struct Gone {
    pub requested: u64,
    pub oldest: u64,
    pub newest: u64,
}

#[derive(Debug)]
struct Inner {
    next: u64,
    next_batch: u64,
    retained: VecDeque<Box<Retained>>,
    capacity: usize,
    traffic: TrafficStats,
}

/// A retained event: a result as the coordinator wrote it, or any other
/// event (boxed: they are few, and a result's entry is smaller).
#[derive(Debug)]
enum Retained {
    Result {
        sequence: u64,
        unix_ms: i64,
        batch: u64,
        result: egress::PuzzleResult,
    },
    Other(Box<v1::ClusterEvent>),
}

impl Retained {
    fn sequence(&self) -> u64 {
        match self {
            Retained::Result { sequence, .. } => *sequence,
            Retained::Other(event) => event.sequence,
        }
    }

    /// The event as watchers receive it.
    fn to_event(&self) -> v1::ClusterEvent {
        match self {
            Retained::Result {
                sequence,
                unix_ms,
                batch,
                result,
            } => v1::ClusterEvent {
                sequence: *sequence,
                unix_ms: *unix_ms,
                kind: Some(Kind::Result(v1::ResultEvent {
                    batch: *batch,
                    result: Some(result.clone().into()),
                })),
            },
            Retained::Other(event) => (**event).clone(),
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub struct EventLog {
    inner: Mutex<Inner>,
    live: broadcast::Sender<Arc<v1::ClusterEvent>>,
}

/// Where a new watcher starts: the retained events it asked for, then the
/// live ones after them.
#[derive(Debug)]
pub struct Subscription {
    /// The sequence number just before the first event the watcher gets.
    pub after: u64,
    pub backlog: Vec<Arc<v1::ClusterEvent>>,
    pub live: broadcast::Receiver<Arc<v1::ClusterEvent>>,
}

pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl EventLog {
    /// A log retaining the newest `capacity` events (at least 1).
    pub fn new(capacity: usize) -> EventLog {
        EventLog {
            inner: Mutex::new(Inner {
                next: 1,
                next_batch: 1,
                retained: VecDeque::new(),
                capacity: capacity.max(1),
                traffic: TrafficStats::new(unix_ms()),
            }),
            live: broadcast::channel(4096).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Nothing under this lock can leave it half-updated.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A number for a new request.
    pub fn next_batch(&self) -> u64 {
        let mut inner = self.lock();
        let batch = inner.next_batch;
        inner.next_batch += 1;
        batch
    }

    /// Records `kind` as the next event and sends it to live watchers.
    pub fn publish(&self, kind: Kind) {
        self.publish_at(kind, unix_ms());
    }

    /// Records `kinds` as the next events, in order, under one lock and at
    /// one time (a batch's results as they arrive together).
    pub fn publish_all(&self, kinds: impl IntoIterator<Item = Kind>) {
        let now = unix_ms();
        let mut inner = self.lock();
        for kind in kinds {
            self.record(&mut inner, kind, now);
        }
    }

    /// [`Self::publish`] at a given time (milliseconds since the epoch).
    fn publish_at(&self, kind: Kind, now: i64) {
        let mut inner = self.lock();
        self.record(&mut inner, kind, now);
    }

    /// One event, under the lock (a result is kept as one, whoever
    /// published it).
    fn record(&self, inner: &mut Inner, kind: Kind, now: i64) {
        if let Kind::Result(v1::ResultEvent {
            batch,
            result: Some(result),
        }) = kind
        {
            self.record_result(inner, batch, result.into(), now);
            return;
        }
        let event = v1::ClusterEvent {
            sequence: inner.next,
            unix_ms: now,
            kind: Some(kind),
        };
        inner.traffic.observe(&event);
        self.keep(inner, Retained::Other(Box::new(event)));
    }

    /// One result of request `batch`, under the lock.
    fn record_result(&self, inner: &mut Inner, batch: u64, result: egress::PuzzleResult, now: i64) {
        inner.traffic.observe_result(now, &result);
        let event = Retained::Result {
            sequence: inner.next,
            unix_ms: now,
            batch,
            result,
        };
        self.keep(inner, event);
    }

    /// Numbers the event recorded (already counted), sends it to live
    /// watchers and retains it, pushing the oldest out of a full ring.
    fn keep(&self, inner: &mut Inner, event: Retained) {
        inner.next += 1;
        // Sent under the lock so live order is sequence order; subscribing
        // takes the lock too, so no watcher misses an event here.
        if self.live.receiver_count() > 0 {
            let _ = self.live.send(Arc::new(event.to_event()));
        }
        let oldest = if inner.retained.len() == inner.capacity {
            inner.retained.pop_front()
        } else {
            None
        };
        let entry = match oldest {
            // Written over in place (its old contents dropped): no
            // allocation.
            Some(mut oldest) => {
                *oldest = event;
                oldest
            }
            None => Box::new(event),
        };
        inner.retained.push_back(entry);
    }

    /// Starts a watcher: from `from` (retained events first), or from now.
    pub fn subscribe(&self, from: Option<u64>) -> Result<Subscription, Gone> {
        let inner = self.lock();
        // Subscribing under the lock: nothing is published between the
        // backlog and the first live event.
        let live = self.live.subscribe();
        let (after, backlog) = match from {
            None => (inner.next - 1, Vec::new()),
            Some(from) => (from.saturating_sub(1), since(&inner, from)?),
        };
        Ok(Subscription {
            after,
            backlog,
            live,
        })
    }

    /// The retained events from `from` on, for a watcher that fell behind.
    pub fn since(&self, from: u64) -> Result<Vec<Arc<v1::ClusterEvent>>, Gone> {
        since(&self.lock(), from)
    }

    /// Totals and recent traffic.
    pub fn traffic(&self) -> Traffic {
        self.traffic_at(unix_ms())
    }

    fn traffic_at(&self, now: i64) -> Traffic {
        let inner = self.lock();
        inner.traffic.snapshot(now, inner.next - 1)
    }

    /// The last minutes, second by second, for the dashboard's charts.
    pub fn history(&self) -> History {
        self.lock().traffic.history(unix_ms())
    }

    /// The traffic totals `/metrics` exports (long-lived families).
    pub fn metrics(&self) -> TrafficMetrics {
        self.lock().traffic.metrics()
    }
}

fn since(inner: &Inner, from: u64) -> Result<Vec<Arc<v1::ClusterEvent>>, Gone> {
    let newest = inner.next - 1;
    let oldest = inner.retained.front().map_or(inner.next, |e| e.sequence());
    // `newest + 1` is "the next event": resuming there is just watching.
    if from < oldest || from > newest + 1 {
        return Err(Gone {
            requested: from,
            oldest,
            newest,
        });
    }
    let skip = (from - oldest) as usize;
    Ok(inner
        .retained
        .iter()
        .skip(skip)
        .map(|e| Arc::new(e.to_event()))
        .collect())
}

/// Follows one request for the event log: numbers it, announces it, and
/// reports its results, progress and end.
#[derive(Debug)]
pub struct RequestEvents {
    log: Arc<EventLog>,
    batch: u64,
    total: u64,
    solved: u64,
    errors: u64,
    next_progress: u64,
    started: std::time::Instant,
    finished: bool,
}

impl RequestEvents {
    /// Announces a request of `total` puzzles (`request` names the RPC)
    /// of a priority class from a client.
    pub fn accept(
        log: Arc<EventLog>,
        total: usize,
        request: &str,
        priority: &str,
        client: &str,
    ) -> RequestEvents {
        let batch = log.next_batch();
        log.publish(Kind::BatchAccepted(v1::BatchAccepted {
            batch,
            puzzles: total as u64,
            request: request.to_string(),
            priority: priority.to_string(),
            client: client.to_string(),
        }));
        let total = total as u64;
        RequestEvents {
            log,
            batch,
            total,
            solved: 0,
            errors: 0,
            next_progress: progress_step(total),
            started: std::time::Instant::now(),
            finished: false,
        }
    }

    /// Counts `more` puzzles into the batch (a job's chunks that arrived
    /// after it was announced); its progress and end report the new total.
    pub fn grow(&mut self, more: u64) {
        self.total += more;
    }

    /// Reports one result (and progress at every tenth of the batch).
    pub fn result(&mut self, result: &egress::PuzzleResult) {
        self.results(std::slice::from_ref(result));
    }

    /// Reports results that arrived together, as one step of the log, and
    /// progress at every tenth of the batch they pass.
    pub fn results(&mut self, results: &[egress::PuzzleResult]) {
        if results.is_empty() {
            return;
        }
        let step = progress_step(self.total);
        let now = unix_ms();
        let log = &self.log;
        let mut inner = log.lock();
        for result in results {
            match result.outcome {
                Some(egress::Outcome::Error(_)) => self.errors += 1,
                _ => self.solved += 1,
            }
            // (A copy shares the result's strings.)
            log.record_result(&mut inner, self.batch, result.clone(), now);
            let done = self.solved + self.errors;
            if done >= self.next_progress && done < self.total {
                let progress = Kind::BatchProgress(v1::BatchProgress {
                    batch: self.batch,
                    done,
                    total: self.total,
                });
                log.record(&mut inner, progress, now);
                self.next_progress = done + step;
            }
        }
    }

    /// Reports the end of the request; `outcome` is `complete` or why not.
    pub fn finish(&mut self, outcome: &str) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let done = self.solved + self.errors;
        self.log.publish(Kind::BatchFinished(v1::BatchFinished {
            batch: self.batch,
            total: self.total,
            solved: self.solved,
            errors: self.errors,
            unanswered: self.total.saturating_sub(done),
            outcome: outcome.to_string(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
        }));
    }
}

impl Drop for RequestEvents {
    fn drop(&mut self) {
        // A request abandoned without a word (its future was dropped).
        self.finish("client gone");
    }
}

/// Results between progress events: a tenth of the batch; batches under 20
/// puzzles get none.
fn progress_step(total: u64) -> u64 {
    if total < 20 { u64::MAX } else { total / 10 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator::traffic::{HISTORY_SECS, MovesCount, RECENT};

    fn joined(n: u64) -> Kind {
        Kind::WorkerJoined(v1::WorkerJoined {
            worker: n,
            name: format!("w{n}"),
            slots: 1,
        })
    }

    #[test]
    fn resume_replays_retained_events_then_follows_live() {
        let log = EventLog::new(3);
        for n in 1..=5 {
            log.publish(joined(n));
        }
        // Events 3, 4 and 5 are retained.
        let gone = log.subscribe(Some(2)).unwrap_err();
        assert_eq!(
            gone,
            Gone {
                requested: 2,
                oldest: 3,
                newest: 5
            }
        );
        assert!(gone.to_string().contains("retains events 3 to 5"));
        assert!(log.subscribe(Some(7)).is_err(), "beyond the newest + 1");
        let mut sub = log.subscribe(Some(4)).unwrap();
        let seqs: Vec<u64> = sub.backlog.iter().map(|e| e.sequence).collect();
        assert_eq!(seqs, [4, 5]);
        log.publish(joined(6));
        assert_eq!(sub.live.try_recv().unwrap().sequence, 6);
        assert!(log.subscribe(Some(7)).unwrap().backlog.is_empty());
    }

    fn solved(moves: i64, time_us: u64, cached: bool) -> Kind {
        Kind::Result(v1::ResultEvent {
            batch: 1,
            result: Some(v1::PuzzleResult {
                outcome: Some(v1::puzzle_result::Outcome::Solved(v1::Solved {
                    moves,
                    strategy: "bidir".into(),
                    time_us,
                    cached,
                    ..Default::default()
                })),
                ..Default::default()
            }),
        })
    }

    fn depth(interactive: u64, normal: u64, bulk: u64) -> Kind {
        Kind::QueueDepth(v1::QueueDepth {
            interactive,
            normal,
            bulk,
        })
    }

    /// A log created at `t0` (ms since the epoch).
    fn log_at(t0: i64) -> EventLog {
        let log = EventLog::new(100);
        log.lock().traffic.created_ms = t0;
        log
    }

    #[test]
    fn throughput_counts_the_last_five_seconds_or_since_the_start() {
        let t0 = 1_000_000_000;
        let log = log_at(t0);
        assert_eq!(log.traffic_at(t0 + 10).throughput, 0.0);
        // 300 answers in the first two seconds.
        for i in 0..300 {
            log.publish_at(solved(5, 100, false), t0 + i * 2000 / 300);
        }
        let early = log.traffic_at(t0 + 2000).throughput;
        assert!((early - 150.0).abs() < 1e-9, "{early}");
        // Shortly after a fresh start it is over at least one second.
        let log = log_at(t0);
        log.publish_at(solved(5, 100, false), t0 + 10);
        assert_eq!(log.traffic_at(t0 + 20).throughput, 1.0);
        // Later, over the current second and the four before it.
        let log = log_at(t0);
        for sec in 0..20 {
            for _ in 0..10 {
                log.publish_at(solved(5, 100, false), t0 + sec * 1000 + 500);
            }
        }
        let late = log.traffic_at(t0 + 19_500).throughput;
        assert!((late - 50.0 / 4.5).abs() < 1e-9, "{late}");
        assert_eq!(log.traffic_at(t0 + 60_000).throughput, 0.0, "gone quiet");
    }

    #[test]
    fn history_has_every_second_with_answers_percentiles_and_depths() {
        let t0 = 1_000_000_000;
        let log = log_at(t0);
        log.publish_at(depth(0, 7, 2), t0 + 100);
        for us in 1..=100 {
            log.publish_at(solved(3, us, false), t0 + 200);
        }
        log.publish_at(solved(-1, 0, true), t0 + 300);
        // Nothing in the second second; the queue drains in the third.
        log.publish_at(depth(1, 0, 0), t0 + 2100);
        log.publish_at(solved(4, 9, false), t0 + 2200);
        let h = log.lock().traffic.history(t0 + 4500);
        assert_eq!(h.start_unix_s, t0 / 1000);
        assert_eq!(h.answered, [101, 0, 1, 0]);
        assert_eq!(h.p50_us, [Some(51), None, Some(9), None]);
        assert_eq!(h.p99_us, [Some(100), None, Some(9), None]);
        assert_eq!(h.queued_interactive, [0, 0, 1, 1]);
        assert_eq!(h.queued_normal, [7, 7, 0, 0]);
        assert_eq!(h.queued_bulk, [2, 2, 0, 0]);
        let by_moves = log.traffic_at(t0 + 4500).by_moves;
        assert_eq!(
            by_moves,
            [
                MovesCount {
                    moves: -1,
                    count: 1
                },
                MovesCount {
                    moves: 3,
                    count: 100
                },
                MovesCount { moves: 4, count: 1 },
            ]
        );
        // Only the last HISTORY_SECS seconds are kept; the depths carry
        // over from the seconds dropped.
        let later = t0 + (HISTORY_SECS + 10) * 1000;
        let h = log.lock().traffic.history(later);
        assert_eq!(h.answered.len(), HISTORY_SECS as usize);
        assert_eq!(h.start_unix_s, later / 1000 - HISTORY_SECS);
        assert!(h.answered.iter().all(|&n| n == 0));
        assert!(h.queued_interactive.iter().all(|&n| n == 1));
        assert_eq!(
            log.lock().traffic.seconds_kept(),
            0,
            "nothing older is kept"
        );
    }

    fn answer(id: &str, moves: i64, solution: &str, worker: &str) -> egress::PuzzleResult {
        egress::PuzzleResult {
            id: id.into(),
            index: moves as u64,
            outcome: Some(egress::Outcome::Solved(egress::Solved {
                moves,
                solution: solution.into(),
                strategy: "bidir".into(),
                worker: worker.into(),
                time_us: 7,
                cached: moves % 2 == 0,
                shared: moves % 3 == 0,
            })),
        }
    }

    #[test]
    fn a_full_ring_keeps_every_event_whole() {
        // Results of every shape pushing each other out: solved ones with
        // inline and shared strings, errors, and other events between them.
        let results = [
            answer("first-id-longer-than-inline", 3, "r22 c23 r23", "w-1"),
            answer("p2", 1, "c22", "another-worker-name"),
            egress::PuzzleResult::failed("p3".into(), 3, "gave up".into()),
            answer("p4", 6, "r22 c33 r23 c22 r33 c23", "w-1"),
            answer("", 0, "", "w-2"),
            egress::PuzzleResult::failed("p6".into(), 6, "gave up again".into()),
            answer("p7", 2, "r22 c22", "w-3"),
        ];
        let log = Arc::new(EventLog::new(3));
        let mut watcher = log.subscribe(None).unwrap();
        let mut batch =
            RequestEvents::accept(log.clone(), results.len(), "solve_batch", "normal", "c");
        let mut sent = Vec::new();
        for (n, r) in results.iter().enumerate() {
            batch.results(std::slice::from_ref(r));
            if n % 3 == 1 {
                log.publish(joined(n as u64));
            }
            sent.push(v1::PuzzleResult::from(r.clone()));
        }
        // The watcher saw each result as it was, in sequence order.
        let mut live = Vec::new();
        let mut last = 0;
        while let Ok(e) = watcher.live.try_recv() {
            assert_eq!(e.sequence, last + 1, "consecutive");
            last = e.sequence;
            if let Some(Kind::Result(r)) = &e.kind {
                live.push(r.result.clone().unwrap());
            }
        }
        assert_eq!(live, sent);
        // The ring holds the newest three, whole.
        let newest = log.since(last - 2).unwrap();
        let kept: Vec<_> = newest.iter().map(|e| (*e.as_ref()).clone()).collect();
        assert_eq!(kept.len(), 3);
        assert_eq!(
            kept[2].kind,
            Some(Kind::Result(v1::ResultEvent {
                batch: 1,
                result: Some(sent[6].clone()),
            }))
        );
        assert!(kept.iter().map(|e| e.sequence).eq(last - 2..=last));
        // The dashboard's recent results are as sent too.
        let recent = log.traffic().results;
        assert_eq!(recent[0].id, "p7");
        assert_eq!(recent.len(), 5, "solved results only");
    }

    #[test]
    fn batches_report_progress_by_tenths_and_finish_once() {
        let log = Arc::new(EventLog::new(1000));
        let mut sub = log.subscribe(None).unwrap();
        let mut batch = RequestEvents::accept(log.clone(), 40, "solve_batch", "normal", "c");
        for i in 0..40 {
            batch.result(&egress::PuzzleResult::failed(
                format!("p{i}").into(),
                i,
                "x".into(),
            ));
        }
        batch.finish("complete");
        drop(batch);
        let mut progress = Vec::new();
        let mut finished = Vec::new();
        while let Ok(e) = sub.live.try_recv() {
            match e.kind.clone() {
                Some(Kind::BatchProgress(p)) => progress.push(p.done),
                Some(Kind::BatchFinished(f)) => finished.push(f),
                _ => {}
            }
        }
        assert_eq!(progress, [4, 8, 12, 16, 20, 24, 28, 32, 36]);
        assert_eq!(finished.len(), 1, "finish and drop report once");
        assert_eq!(finished[0].errors, 40);
        assert_eq!(finished[0].outcome, "complete");
        assert_eq!(log.traffic().errors, 40);
        assert_eq!(log.traffic().failures.len(), RECENT);
    }
}
