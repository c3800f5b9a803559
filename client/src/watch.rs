//! `colball watch`: cluster events, one line each, as they happen.
//!
//! Text lines are for people (`#12 10:04:05.120 worker joined w1#3, 4
//! slots`); JSON Lines are for machines (one object per event with
//! `sequence`, `unix_ms`, `event` and the event's fields). When the
//! connection breaks, the watcher reconnects and resumes after the last
//! event it printed, so nothing is skipped or printed twice; when the
//! coordinator no longer has that point (it restarted, or the watcher was
//! away too long), it says so and stops.

use std::io::Write;
use std::time::Duration;

use colball_proto::v1::{self, cluster_event::Kind, puzzle_result};
use serde_json::{Value, json};
use tonic::Code;

use crate::remote::{Client, ClientError, Security};

/// How `colball watch` prints events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFormat {
    Text,
    Jsonl,
}

/// What to watch and how.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    pub url: String,
    /// Resume from this sequence number (replaying retained events).
    pub from: Option<u64>,
    pub format: WatchFormat,
    /// Leave out per-puzzle result events.
    pub no_results: bool,
    /// Stop after this many printed events.
    pub count: Option<u64>,
    /// Token and TLS settings for the coordinator.
    pub security: Security,
}

/// Why watching stopped early.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("cannot resume: {0}")]
    Gone(String),
    #[error("cannot write the events: {0}")]
    Output(#[from] std::io::Error),
}

/// Prints events to `out` until `count` is reached or an error that a
/// reconnect cannot fix. Transient failures (coordinator unreachable,
/// stream broken) are retried with backoff, resuming after the last event
/// printed; `note` gets a line about each.
pub async fn watch(
    options: &WatchOptions,
    out: &mut impl Write,
    note: &mut impl FnMut(&str),
) -> Result<(), WatchError> {
    let mut next = options.from;
    let mut printed = 0u64;
    let mut backoff = Duration::from_millis(200);
    loop {
        let stream = match Client::connect_with(&options.url, &options.security).await {
            Ok(mut client) => client.watch(next).await,
            Err(e) => Err(e),
        };
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(ClientError::Status(s)) if s.code() == Code::OutOfRange => {
                return Err(WatchError::Gone(s.message().to_string()));
            }
            Err(e) if printed == 0 && next == options.from => return Err(e.into()),
            Err(e) => {
                note(&format!("{e}; retrying in {backoff:?}"));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(event)) => {
                    backoff = Duration::from_millis(200);
                    next = Some(event.sequence + 1);
                    if options.no_results && matches!(event.kind, Some(Kind::Result(_))) {
                        continue;
                    }
                    let line = match options.format {
                        WatchFormat::Text => text(&event),
                        WatchFormat::Jsonl => jsonl(&event).to_string(),
                    };
                    writeln!(out, "{line}")?;
                    out.flush()?;
                    printed += 1;
                    if options.count.is_some_and(|c| printed >= c) {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    note("the coordinator ended the stream; reconnecting");
                    break;
                }
                Err(s) if s.code() == Code::OutOfRange => {
                    return Err(WatchError::Gone(s.message().to_string()));
                }
                Err(s) => {
                    note(&format!(
                        "stream broken ({}: {}); reconnecting",
                        s.code(),
                        s.message()
                    ));
                    break;
                }
            }
        }
        tokio::time::sleep(backoff).await;
    }
}

fn clock(unix_ms: i64) -> String {
    let ms = unix_ms.rem_euclid(86_400_000);
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// One event as a line for people (times in UTC).
pub fn text(event: &v1::ClusterEvent) -> String {
    let what = match &event.kind {
        Some(Kind::BatchAccepted(b)) => format!(
            "batch {} accepted: {} puzzles ({}, {}, client {})",
            b.batch, b.puzzles, b.request, b.priority, b.client
        ),
        Some(Kind::BatchProgress(p)) => {
            format!("batch {} progress: {}/{}", p.batch, p.done, p.total)
        }
        Some(Kind::BatchFinished(f)) => format!(
            "batch {} finished ({}): {} answered, {} errors, {} unanswered of {} in {} ms",
            f.batch, f.outcome, f.solved, f.errors, f.unanswered, f.total, f.elapsed_ms
        ),
        Some(Kind::Result(r)) => {
            let (id, outcome) = match &r.result {
                Some(result) => (result.id.as_str(), result.outcome.as_ref()),
                None => ("?", None),
            };
            match outcome {
                Some(puzzle_result::Outcome::Solved(s)) if s.cached => {
                    let how = if s.shared { "shared solve" } else { "cached" };
                    format!("result batch {} {id}: {} moves ({how})", r.batch, s.moves)
                }
                Some(puzzle_result::Outcome::Solved(s)) => format!(
                    "result batch {} {id}: {} moves by {} ({}, {} us)",
                    r.batch, s.moves, s.worker, s.strategy, s.time_us
                ),
                Some(puzzle_result::Outcome::Error(e)) => {
                    format!("result batch {} {id}: error: {}", r.batch, e.message)
                }
                None => format!("result batch {} {id}: empty", r.batch),
            }
        }
        Some(Kind::WorkerJoined(w)) => format!("worker joined {}, {} slots", w.name, w.slots),
        Some(Kind::WorkerLeft(w)) => format!("worker left {}", w.name),
        Some(Kind::WorkerLost(w)) => format!(
            "worker lost {} ({}): {} re-dispatched, {} failed",
            w.name, w.reason, w.redispatched, w.failed
        ),
        Some(Kind::QueueDepth(q)) => format!(
            "queue interactive {} normal {} bulk {}",
            q.interactive, q.normal, q.bulk
        ),
        Some(Kind::WorkerQuarantined(q)) => format!(
            "worker quarantined {} ({}): {}; {} re-dispatched",
            q.name, q.reason, q.detail, q.redispatched
        ),
        Some(Kind::WorkerSlow(w)) => format!(
            "worker slow {}: every one of its {} tasks far past its expected time",
            w.name, w.tasks
        ),
        None => "unknown event (a newer coordinator?)".to_string(),
    };
    format!("#{} {} {what}", event.sequence, clock(event.unix_ms))
}

/// One event as a JSON object.
pub fn jsonl(event: &v1::ClusterEvent) -> Value {
    let (name, mut fields) = match &event.kind {
        Some(Kind::BatchAccepted(b)) => (
            "batch_accepted",
            json!({"batch": b.batch, "puzzles": b.puzzles, "request": b.request,
                   "priority": b.priority, "client": b.client}),
        ),
        Some(Kind::QueueDepth(q)) => (
            "queue_depth",
            json!({"interactive": q.interactive, "normal": q.normal, "bulk": q.bulk}),
        ),
        Some(Kind::WorkerQuarantined(q)) => (
            "worker_quarantined",
            json!({"worker": q.worker, "name": q.name, "reason": q.reason, "detail": q.detail,
                   "redispatched": q.redispatched, "until_unix_ms": q.until_unix_ms}),
        ),
        Some(Kind::WorkerSlow(w)) => (
            "worker_slow",
            json!({"worker": w.worker, "name": w.name, "tasks": w.tasks}),
        ),
        Some(Kind::BatchProgress(p)) => (
            "batch_progress",
            json!({"batch": p.batch, "done": p.done, "total": p.total}),
        ),
        Some(Kind::BatchFinished(f)) => (
            "batch_finished",
            json!({"batch": f.batch, "total": f.total, "solved": f.solved, "errors": f.errors,
                   "unanswered": f.unanswered, "outcome": f.outcome, "elapsed_ms": f.elapsed_ms}),
        ),
        Some(Kind::Result(r)) => {
            let mut fields = json!({"batch": r.batch});
            if let Some(result) = &r.result {
                fields["id"] = json!(result.id);
                fields["index"] = json!(result.index);
                match &result.outcome {
                    Some(puzzle_result::Outcome::Solved(s)) => {
                        fields["moves"] = json!(s.moves);
                        fields["solution"] = json!(s.solution);
                        fields["strategy"] = json!(s.strategy);
                        fields["worker"] = json!(s.worker);
                        fields["time_us"] = json!(s.time_us);
                        fields["cached"] = json!(s.cached);
                        fields["shared"] = json!(s.shared);
                    }
                    Some(puzzle_result::Outcome::Error(e)) => {
                        fields["error"] = json!(e.message);
                        fields["field"] = json!(e.field);
                    }
                    None => {}
                }
            }
            ("result", fields)
        }
        Some(Kind::WorkerJoined(w)) => (
            "worker_joined",
            json!({"worker": w.worker, "name": w.name, "slots": w.slots}),
        ),
        Some(Kind::WorkerLeft(w)) => ("worker_left", json!({"worker": w.worker, "name": w.name})),
        Some(Kind::WorkerLost(w)) => (
            "worker_lost",
            json!({"worker": w.worker, "name": w.name, "reason": w.reason,
                   "redispatched": w.redispatched, "failed": w.failed}),
        ),
        None => ("unknown", json!({})),
    };
    fields["sequence"] = json!(event.sequence);
    fields["unix_ms"] = json!(event.unix_ms);
    fields["event"] = json!(name);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_print_as_one_line_of_text_or_json() {
        let event = v1::ClusterEvent {
            sequence: 7,
            unix_ms: 3_723_004, // 01:02:03.004
            kind: Some(Kind::WorkerLost(v1::WorkerLost {
                worker: 3,
                name: "w#3".into(),
                reason: "missed heartbeats".into(),
                redispatched: 4,
                failed: 0,
            })),
        };
        assert_eq!(
            text(&event),
            "#7 01:02:03.004 worker lost w#3 (missed heartbeats): 4 re-dispatched, 0 failed"
        );
        let v = jsonl(&event);
        assert_eq!(v["event"], "worker_lost");
        assert_eq!(v["sequence"], 7);
        assert_eq!(v["redispatched"], 4);
        assert!(!v.to_string().contains('\n'));
    }
}
