//! The state machine's tests: scenarios, and the property test over random
//! operation sequences (`operations`).

use std::time::Duration;

use colball_proto::egress;
use colball_proto::v1::{cluster_event::Kind as EventKind, task_result};
use colball_proto::work::{outcome_from_notation, path_from_wire, task_puzzle};
use colball_solver::generate::Generator;
use colball_solver::verify::{Rejection, check_answer};
use colball_solver::{BidirSearch, Size, format_moves};
use foldhash::HashSet;

use super::*;
use crate::effect::{Effect, Effects, NoWorkers, RequestFailure};
use crate::errors::{AdmitError, LossReason, ProtocolError, RegisterError, RejectReason, Rejected};
use crate::input::{Input, Known, NewTask, RequestSpec};
use crate::limits::Speculation;
use crate::policy::{Credit, Priority, weight};

fn limits() -> Limits {
    Limits {
        max_pending: 100,
        credit: Credit {
            per_slot: 1,
            unit: weight(Size::new(3, 3).unwrap()),
        },
        audit_rate: 0.0,
        ..Limits::default()
    }
}

fn spec(client: &str, priority: Priority, total: usize) -> RequestSpec {
    RequestSpec {
        client: client.into(),
        priority,
        total,
        trace: None,
    }
}

/// An empty state with one limit changed.
fn state_with(change: impl FnOnce(&mut Limits), now: Instant) -> State {
    let mut l = limits();
    change(&mut l);
    State::new(l, now)
}

/// A state with one worker (id 1) of `slots` slots, as of `now`.
fn with_worker(slots: u32, now: Instant) -> State {
    let mut s = State::new(limits(), now);
    s.register(1, "w", None, slots, now).unwrap();
    s
}

fn puzzles(n: usize, size: Size, seed: u64) -> Vec<NewTask> {
    let mut g = Generator::new(seed);
    (0..n)
        .map(|i| NewTask {
            index: i as u64,
            id: ecow::eco_format!("p{i}"),
            puzzle: g.uniform(size),
        })
        .collect()
}

fn tasks(n: usize) -> Vec<NewTask> {
    puzzles(n, Size::new(3, 3).unwrap(), 5)
}

/// The tasks assigned in `effects`, per worker, in order.
fn assigned(effects: &Effects) -> Vec<(u64, v1::Task)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Assign { worker, tasks, .. } => Some(tasks.iter().map(|t| (*worker, *t))),
            _ => None,
        })
        .flatten()
        .collect()
}

fn delivered(effects: &Effects) -> Vec<(u64, egress::PuzzleResult)> {
    let mut out: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Deliver { request, result } => Some((*request, result.clone())),
            _ => None,
        })
        .collect();
    out.sort_by_key(|(r, res)| (*r, res.index));
    out
}

fn cancels(effects: &Effects) -> Vec<u64> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Cancel { tasks, .. } => Some(tasks.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn closed(effects: &Effects) -> Vec<(u64, LossReason)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Close { worker, reason } => Some((*worker, reason.clone())),
            _ => None,
        })
        .collect()
}

/// The true answer to an assigned task, as a worker reports it.
fn answer(task: &v1::Task) -> v1::TaskResult {
    let puzzle = task_puzzle(task).unwrap();
    let solution = BidirSearch::new().solve(&puzzle);
    solved(
        puzzle.size(),
        task.task_id,
        solution.answer(),
        &solution.notation(),
    )
}

fn solved(size: Size, task_id: u64, moves: i64, solution: &str) -> v1::TaskResult {
    v1::TaskResult {
        task_id,
        outcome: Some(outcome(size, moves, solution)),
    }
}

fn outcome(size: Size, moves: i64, solution: &str) -> task_result::Outcome {
    outcome_from_notation(size, moves, solution)
}

/// The moves of a worker's answer, in notation.
fn notation(size: Size, s: &v1::TaskSolved) -> String {
    format_moves(&path_from_wire(size, &s.path).unwrap())
}

fn outcome_moves(r: &egress::PuzzleResult) -> Option<i64> {
    match &r.outcome {
        Some(egress::Outcome::Solved(s)) => Some(s.moves),
        _ => None,
    }
}

#[test]
fn a_lone_puzzle_is_dispatched_and_answered_at_once() {
    // A worker with room for a large chunk: one puzzle does not wait
    // for the chunk to fill, nor for a tick of the clock.
    let now = Instant::now();
    let mut s = with_worker(32, now);
    let e = s
        .admit(10, spec("a", Priority::Interactive, 1), tasks(1), now)
        .unwrap();
    let sent = assigned(&e);
    assert_eq!(sent.len(), 1, "{e:?}");
    let e = s.result(1, answer(&sent[0].1), now);
    let got = delivered(&e);
    assert_eq!(got.len(), 1, "{e:?}");
    assert_eq!((got[0].0, got[0].1.index), (10, 0));
}

#[test]
fn an_index_past_32_bits_is_refused_whole_and_its_neighbours_kept() {
    // Tasks keep their index in 32 bits; no batch or job comes near,
    // but the state does not wrap one that did.
    let now = Instant::now();
    let mut s = with_worker(32, now);
    let mut big = tasks(3);
    big[2].index = u64::from(u32::MAX) + 1;
    let e = s
        .admit(10, spec("a", Priority::Normal, 3), big, now)
        .unwrap_err();
    assert!(matches!(e, AdmitError::IndexTooLarge { .. }), "{e:?}");
    assert!(e.to_string().contains("index 4294967296"), "{e}");
    assert_eq!((s.tasks.len(), s.requests.len()), (0, 0));
    let mut last = tasks(1);
    last[0].index = u64::from(u32::MAX);
    let e = s
        .admit(11, spec("a", Priority::Normal, 1), last, now)
        .unwrap();
    let e = s.result(1, answer(&assigned(&e)[0].1), now);
    assert_eq!(delivered(&e)[0].1.index, u64::from(u32::MAX));
    s.check_invariants();
}

#[test]
fn a_request_s_trace_goes_with_its_tasks_and_no_further() {
    let now = Instant::now();
    let mut s = with_worker(8, now);
    let traced: Arc<str> = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
    let mut first = spec("a", Priority::Normal, 2);
    first.trace = Some(traced.clone());
    let two = puzzles(4, Size::new(3, 3).unwrap(), 9);
    let effects = s.admit(1, first, two[..2].to_vec(), now).unwrap();
    let effects2 = s
        .admit(2, spec("b", Priority::Normal, 2), two[2..].to_vec(), now)
        .unwrap();
    let mut seen = Vec::new();
    for e in effects.iter().chain(&effects2) {
        if let Effect::Assign { tasks, traces, .. } = e {
            for t in tasks {
                seen.push((t.trace, traces.clone()));
            }
        }
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
    // The traced request's two tasks name its context; the other's none.
    assert_eq!(
        seen.iter()
            .filter(|(at, traces)| *at == 1
                && traces.len() == 1
                && Arc::ptr_eq(&traces[0], &traced))
            .count(),
        2,
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|(at, _)| *at == 0).count(),
        2,
        "{seen:?}"
    );
    // Once it ends, its context is gone from the books.
    s.end_request(1, now);
    s.check_invariants();
    assert!(s.traces.is_empty());
}

#[test]
fn credit_limits_what_a_worker_holds() {
    let now = Instant::now();
    let mut s = with_worker(2, now);
    let first = assigned(
        &s.admit(10, spec("a", Priority::Normal, 10), tasks(10), now)
            .unwrap(),
    );
    assert_eq!(first.len(), 2);
    let e = s.result(1, answer(&first[0].1), now);
    assert_eq!(assigned(&e).len(), 1);
    assert_eq!(delivered(&e).len(), 1);
}

#[test]
fn a_lost_worker_s_tasks_go_to_another_and_results_arrive_once() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    s.register(1, "a", None, 3, now).unwrap();
    let held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 3), tasks(3), now)
            .unwrap(),
    );
    assert_eq!(held.len(), 3);
    let mut got = delivered(&s.result(1, answer(&held[0].1), now));
    s.worker_lost(1, LossReason::Silent, now);
    let again = assigned(&s.register(2, "c", None, 3, now).unwrap());
    assert_eq!(again.len(), 2);
    for (_, t) in &again {
        got.extend(delivered(&s.result(2, answer(t), now)));
    }
    // A second report of a task is a protocol error: the worker is
    // lost, and nothing is delivered twice.
    let e = s.result(2, answer(&again[0].1), now);
    assert!(delivered(&e).is_empty());
    assert!(matches!(
        closed(&e)[..],
        [(2, LossReason::Protocol(ProtocolError::NotHeld(_)))]
    ));
    let indexes: Vec<u64> = got.iter().map(|(_, r)| r.index).collect();
    assert_eq!(indexes, vec![0, 1, 2]);
    assert_eq!(s.snapshot().pending, 0);
}

/// Three workers in turn take the one task and are lost with it.
fn lose_a_worker_per_attempt(s: &mut State, now: Instant) -> Effects {
    let mut effects = Vec::new();
    for round in 0..3 {
        let id = 100 + round;
        let e = s.register(id, "w", None, 1, now).unwrap();
        assert_eq!(assigned(&e).len(), 1);
        effects.extend(s.worker_lost(id, LossReason::Disconnected, now));
    }
    effects
}

#[test]
fn attempts_are_capped_with_an_error_result() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
        .unwrap();
    let got = delivered(&lose_a_worker_per_attempt(&mut s, now));
    let [(10, r)] = &got[..] else {
        panic!("one result: {got:?}")
    };
    let Some(egress::Outcome::Error(e)) = &r.outcome else {
        panic!("expected an error result");
    };
    assert!(e.message.contains("3 attempts"), "{}", e.message);
    assert_eq!(s.snapshot().pending, 0);
}

#[test]
fn admission_counts_unread_results_and_ending_frees_it() {
    let now = Instant::now();
    let mut s = with_worker(1, now);
    let running = assigned(
        &s.admit(10, spec("c", Priority::Normal, 80), tasks(80), now)
            .unwrap(),
    );
    let err = s
        .admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
        .unwrap_err();
    assert!(matches!(err, AdmitError::Overloaded { .. }), "{err}");
    // Results solved but unread still hold their places.
    let mut more = running.clone();
    for _ in 0..30 {
        let (_, t) = more.pop().unwrap();
        more.extend(assigned(&s.result(1, answer(&t), now)));
    }
    assert_eq!(s.snapshot().held, 80);
    assert!(
        s.admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
            .is_err()
    );
    // Once read and sent on, they do not.
    s.ack(10, 30, 30, now);
    assert_eq!(s.snapshot().held, 50);
    s.admit(11, spec("c", Priority::Normal, 30), tasks(30), now)
        .unwrap();
    let e = s.end_request(10, now);
    assert_eq!(cancels(&e), vec![more[0].1.task_id]);
    assert_eq!(s.snapshot().held, 30);
}

#[test]
fn a_client_that_does_not_read_stops_its_dispatch() {
    let now = Instant::now();
    let mut s = state_with(|l| l.max_unread = 4, now);
    s.register(1, "w", None, 2, now).unwrap();
    let mut held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 20), tasks(20), now)
            .unwrap(),
    );
    let mut answered = 0;
    while let Some((_, t)) = held.pop() {
        answered += 1;
        held.extend(assigned(&s.result(1, answer(&t), now)));
    }
    // Four unread results hold the rest back: what was in flight then
    // finishes, nothing more goes out.
    assert!((4..=5).contains(&answered), "{answered}");
    assert_eq!(s.snapshot().in_flight, 0);
    assert_eq!(s.snapshot().queued, 20 - answered);
    // The client reads two: two more go out.
    let e = s.ack(10, 2, 2, now);
    assert_eq!(assigned(&e).len(), 2);
}

/// Tasks 0..n where the puzzles at `repeats` are copies of puzzle 0.
fn tasks_with_repeats(n: usize, repeats: &[usize]) -> Vec<NewTask> {
    let mut t = tasks(n);
    for &i in repeats {
        t[i].puzzle = t[0].puzzle;
    }
    t
}

#[test]
fn a_puzzle_repeated_in_a_batch_is_solved_once_and_answered_for_each_copy() {
    let now = Instant::now();
    let mut s = with_worker(8, now);
    let held = assigned(
        &s.admit(
            10,
            spec("c", Priority::Normal, 6),
            tasks_with_repeats(6, &[2, 5]),
            now,
        )
        .unwrap(),
    );
    assert_eq!(held.len(), 4, "copies are not dispatched");
    assert_eq!(s.snapshot().pending, 4);
    let mut got = Vec::new();
    for (_, t) in &held {
        got.extend(delivered(&s.result(1, answer(t), now)));
    }
    got.sort_by_key(|(_, r)| r.index);
    let indexes: Vec<u64> = got.iter().map(|(_, r)| r.index).collect();
    assert_eq!(indexes, vec![0, 1, 2, 3, 4, 5]);
    for (_, r) in &got {
        assert_eq!(r.id, format!("p{}", r.index), "each copy keeps its own id");
        let Some(egress::Outcome::Solved(solved)) = &r.outcome else {
            panic!("expected an answer: {r:?}");
        };
        assert_eq!(solved.cached, [2, 5].contains(&r.index), "{r:?}");
    }
    assert_eq!(s.snapshot().counters.solved, 4);
}

#[test]
fn a_puzzle_pending_for_one_request_is_not_dispatched_again_for_another() {
    let now = Instant::now();
    let mut s = with_worker(8, now);
    let held = assigned(
        &s.admit(10, spec("a", Priority::Normal, 3), tasks(3), now)
            .unwrap(),
    );
    assert_eq!(held.len(), 3);
    // The same puzzles from another client: nothing new to dispatch.
    let e = s
        .admit(11, spec("b", Priority::Normal, 3), tasks(3), now)
        .unwrap();
    assert!(assigned(&e).is_empty());
    assert_eq!(s.snapshot().pending, 3);
    // The first client goes away: the tasks carry on for the second,
    // and the worker is told to cancel nothing.
    assert!(cancels(&s.end_request(10, now)).is_empty());
    assert_eq!(s.snapshot().pending, 3);
    let mut got = Vec::new();
    for (_, t) in &held {
        got.extend(delivered(&s.result(1, answer(t), now)));
    }
    assert!(
        got.iter().all(|(r, _)| *r == 11),
        "the ended request gets nothing"
    );
    assert_eq!(got.len(), 3);
    assert_eq!(s.snapshot().pending, 0);
    // Done tasks lead nothing: the same puzzles are dispatched again.
    let e = s
        .admit(12, spec("c", Priority::Normal, 3), tasks(3), now)
        .unwrap();
    assert_eq!(assigned(&e).len(), 3);
}

#[test]
fn a_shared_task_is_cancelled_when_every_request_waiting_for_it_ends() {
    let now = Instant::now();
    let mut s = with_worker(8, now);
    let held = assigned(
        &s.admit(10, spec("a", Priority::Normal, 2), tasks(2), now)
            .unwrap(),
    );
    s.admit(11, spec("b", Priority::Normal, 2), tasks(2), now)
        .unwrap();
    assert!(cancels(&s.end_request(10, now)).is_empty());
    let ids: Vec<u64> = held.iter().map(|(_, t)| t.task_id).collect();
    assert_eq!(cancels(&s.end_request(11, now)), ids);
    assert_eq!(s.snapshot().pending, 0);
    assert_eq!(s.snapshot().counters.cancelled, 2);
}

#[test]
fn copies_of_a_puzzle_that_fails_fail_too() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    s.admit(
        10,
        spec("c", Priority::Normal, 3),
        tasks_with_repeats(3, &[1, 2]),
        now,
    )
    .unwrap();
    let got = delivered(&lose_a_worker_per_attempt(&mut s, now));
    assert_eq!(got.len(), 3);
    for (_, r) in &got {
        let Some(egress::Outcome::Error(e)) = &r.outcome else {
            panic!("expected an error result: {r:?}");
        };
        assert!(e.message.contains(&format!("{:?}", r.id)), "{}", e.message);
        assert!(e.message.contains("3 attempts"), "{}", e.message);
    }
}

#[test]
fn requests_fail_after_the_grace_period_without_workers() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    s.admit(10, spec("c", Priority::Normal, 2), tasks(2), now)
        .unwrap();
    assert!(
        s.tick(now + Duration::from_millis(10))
            .iter()
            .all(|e| !matches!(e, Effect::Fail { .. }))
    );
    let e = s.tick(now + Duration::from_secs(11));
    let failure = e.iter().find_map(|e| match e {
        Effect::Fail {
            request: 10,
            failure,
        } => Some(failure.clone()),
        _ => None,
    });
    assert!(
        matches!(
            failure,
            Some(RequestFailure::NoWorkers(NoWorkers { ever: false, .. }))
        ),
        "{failure:?}"
    );
}

#[test]
fn a_small_request_behind_a_large_one_goes_first() {
    let now = Instant::now();
    let mut s = with_worker(2, now);
    let mut held = assigned(
        &s.admit(10, spec("big", Priority::Normal, 60), tasks(60), now)
            .unwrap(),
    );
    // Another client's two puzzles (3x3 from another seed), same class.
    let small = puzzles(2, Size::new(3, 3).unwrap(), 99);
    s.admit(11, spec("small", Priority::Normal, 2), small, now)
        .unwrap();
    let mut order = Vec::new();
    while !held.is_empty() && order.len() < 6 {
        let (_, t) = held.remove(0);
        let e = s.result(1, answer(&t), now);
        order.extend(delivered(&e).into_iter().map(|(r, _)| r));
        held.extend(assigned(&e));
    }
    // The big request's first two were already out; the small one's
    // two come within the next four dispatches, not after 58.
    let small_at: Vec<usize> = order
        .iter()
        .enumerate()
        .filter(|(_, r)| **r == 11)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(small_at.len(), 2, "{order:?}");
    assert!(small_at[1] < 6, "{order:?}");
}

#[test]
fn interactive_requests_pass_bulk_ones() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    s.admit(10, spec("a", Priority::Bulk, 5), tasks(5), now)
        .unwrap();
    s.admit(
        11,
        spec("a", Priority::Interactive, 1),
        puzzles(1, Size::new(3, 3).unwrap(), 3),
        now,
    )
    .unwrap();
    let first = assigned(&s.register(1, "w", None, 1, now).unwrap());
    assert_eq!(first.len(), 1);
    let e = s.result(1, answer(&first[0].1), now);
    assert_eq!(delivered(&e)[0].0, 11);
    assert_eq!(s.snapshot().queued_by_class, [0, 0, 4]);
}

#[test]
fn a_wrong_answer_is_never_delivered_and_its_worker_is_quarantined() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    let ip: IpAddr = "10.0.0.9".parse().unwrap();
    s.register(1, "bad", Some(ip), 2, now).unwrap();
    let held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 3), tasks(3), now)
            .unwrap(),
    );
    let size = task_puzzle(&held[0].1).unwrap().size();
    let e = s.result(1, solved(size, held[0].1.task_id, 2, "r22 c33"), now);
    assert!(delivered(&e).is_empty());
    assert!(!e.iter().any(|e| matches!(e, Effect::Cache { .. })));
    assert!(matches!(closed(&e)[..], [(1, LossReason::Quarantined(_))]));
    assert!(e.iter().any(|e| matches!(e, Effect::Publish(EventKind::WorkerQuarantined(q)) if q.reason == "misses_target" || q.reason == "wrong_count")));
    assert_eq!(s.snapshot().counters.quarantined, 1);
    // It may not come back under the same name and address...
    let err = s.register(2, "bad", Some(ip), 2, now).unwrap_err();
    assert!(matches!(err, RegisterError::Quarantined { .. }), "{err}");
    // ... but after the cool-down it may.
    assert!(
        s.register(2, "bad", Some(ip), 2, now + Duration::from_secs(601))
            .is_ok()
    );
    s.worker_lost(2, LossReason::Disconnected, now);
    // An honest worker answers all three, the rejected one without an
    // attempt counted against it.
    let again = assigned(&s.register(3, "good", Some(ip), 3, now).unwrap());
    assert_eq!(again.len(), 3);
    let mut got = Vec::new();
    for (_, t) in &again {
        got.extend(delivered(&s.result(3, answer(t), now)));
    }
    assert_eq!(got.len(), 3);
}

#[test]
fn minus_one_is_accepted_only_where_the_target_is_unreachable() {
    let now = Instant::now();
    let mut s = with_worker(1, now);
    let held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
            .unwrap(),
    );
    let size = task_puzzle(&held[0].1).unwrap().size();
    let e = s.result(1, solved(size, held[0].1.task_id, -1, ""), now);
    assert!(delivered(&e).is_empty());
    assert!(matches!(
        &closed(&e)[..],
        [(
            1,
            LossReason::Quarantined(Rejected {
                reason: RejectReason::Replay(Rejection::FalseUnreachable),
                ..
            })
        )]
    ));
}

#[test]
fn slots_are_bounded() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    assert!(matches!(
        s.register(1, "w", None, 0, now),
        Err(RegisterError::Slots { .. })
    ));
    let err = s.register(1, "w", None, 1 << 31, now).unwrap_err();
    assert!(err.to_string().contains("--max-worker-slots"), "{err}");
    assert!(s.register(1, "w", None, 256, now).is_ok());
}

#[test]
fn a_result_without_an_outcome_loses_the_worker_and_its_tasks_go_back() {
    let now = Instant::now();
    let mut s = with_worker(2, now);
    let held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 2), tasks(2), now)
            .unwrap(),
    );
    let e = s.result(
        1,
        v1::TaskResult {
            task_id: held[0].1.task_id,
            outcome: None,
        },
        now,
    );
    assert!(matches!(
        closed(&e)[..],
        [(1, LossReason::Protocol(ProtocolError::NoOutcome(_)))]
    ));
    assert_eq!(s.snapshot().queued, 2, "both tasks are queued again");
}

#[test]
fn a_worker_that_holds_a_task_too_long_is_stuck() {
    let now = Instant::now();
    let mut s = with_worker(1, now);
    s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
        .unwrap();
    // Heartbeats keep coming, the answer does not.
    let later = now + Duration::from_secs(31);
    s.heartbeat(1, None, later);
    let e = s.tick(later);
    assert!(matches!(closed(&e)[..], [(1, LossReason::Stuck)]));
    assert_eq!(s.snapshot().queued, 1);
    assert_eq!(s.snapshot().counters.timed_out, 1);
}

#[test]
fn an_audit_that_finds_a_shorter_answer_quarantines_the_first_worker() {
    let now = Instant::now();
    let mut s = state_with(|l| l.audit_rate = 1.0, now);
    s.register(1, "padder", None, 1, now).unwrap();
    let held = assigned(
        &s.admit(10, spec("c", Priority::Normal, 1), tasks(1), now)
            .unwrap(),
    );
    // A valid but padded answer: four rotations of one window.
    let honest = answer(&held[0].1);
    let Some(task_result::Outcome::Solved(h)) = &honest.outcome else {
        unreachable!()
    };
    let size = task_puzzle(&held[0].1).unwrap().size();
    let padded = solved(
        size,
        held[0].1.task_id,
        h.moves + 4,
        &format!("{} r22 r22 r22 r22", notation(size, h)),
    );
    let e = s.result(1, padded, now);
    assert_eq!(
        outcome_moves(&delivered(&e)[0].1),
        Some(h.moves + 4),
        "delivered: it replays"
    );
    assert_eq!(s.snapshot().audits, 1);
    // The audit waits for another worker.
    let audit = assigned(&s.register(2, "honest", None, 1, now).unwrap());
    assert_eq!(audit.len(), 1);
    let e = s.result(2, answer(&audit[0].1), now);
    assert!(
        matches!(
            &closed(&e)[..],
            [(
                1,
                LossReason::Quarantined(Rejected {
                    reason: RejectReason::NotOptimal { .. },
                    ..
                })
            )]
        ),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Evict { worker } if worker == "padder#1"))
    );
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Cache { answer, .. } if answer.moves == h.moves))
    );
}

mod operations {
    //! The property test: random operation sequences, invariants
    //! checked after every step.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Admit {
            n: usize,
            ready: usize,
            client: u8,
            priority: u8,
            first: usize,
            /// Tasks (bits by position) whose result the driver finds
            /// under the lock, if their puzzle is not pending.
            known: u8,
        },
        Register {
            slots: u32,
        },
        Answer {
            worker: usize,
            pick: usize,
            how: How,
        },
        Lose {
            worker: usize,
        },
        Drain {
            worker: usize,
        },
        End {
            request: usize,
        },
        Read {
            request: usize,
            n: usize,
        },
        Tick {
            ms: u64,
        },
    }

    #[derive(Clone, Copy, Debug)]
    enum How {
        Right,
        WrongCount,
        Misses,
        Padded,
        NoOutcome,
        Cancelled,
        Error,
        NotHeld,
        Late,
    }

    fn how() -> impl Strategy<Value = How> {
        prop_oneof![
            6 => Just(How::Right),
            1 => Just(How::WrongCount),
            1 => Just(How::Misses),
            1 => Just(How::Padded),
            1 => Just(How::NoOutcome),
            1 => Just(How::Cancelled),
            1 => Just(How::Error),
            1 => Just(How::NotHeld),
            1 => Just(How::Late),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (1..6usize, 0..3usize, 0..3u8, 0..3u8, 0..12usize, prop_oneof![Just(0u8), any::<u8>()]).prop_map(|(n, ready, client, priority, first, known)| Op::Admit { n, ready, client, priority, first, known }),
            2 => (0..4u32).prop_map(|slots| Op::Register { slots }),
            8 => (0..4usize, 0..8usize, how()).prop_map(|(worker, pick, how)| Op::Answer { worker, pick, how }),
            1 => (0..4usize).prop_map(|worker| Op::Lose { worker }),
            1 => (0..4usize).prop_map(|worker| Op::Drain { worker }),
            1 => (0..8usize).prop_map(|request| Op::End { request }),
            3 => (0..8usize, 1..8usize).prop_map(|(request, n)| Op::Read { request, n }),
            2 => (0..40_000u64).prop_map(|ms| Op::Tick { ms }),
        ]
    }

    /// A small pool of puzzles, so that repeats happen; 2x2 ones
    /// include unreachable targets.
    fn pool() -> Vec<(Puzzle, i64, String)> {
        let mut g = Generator::new(7);
        let mut search = BidirSearch::new();
        let mut pool = Vec::new();
        for (r, c) in [(2, 2), (2, 2), (2, 2), (2, 3), (3, 3), (2, 4)] {
            for _ in 0..2 {
                let p = g.uniform(Size::new(r, c).unwrap());
                let s = search.solve(&p);
                pool.push((p, s.answer(), s.notation()));
            }
        }
        pool
    }

    /// The driver's and the clients' side, as the test sees it.
    #[derive(Default)]
    struct World {
        workers: Vec<u64>,
        /// Tasks each worker was sent and has not answered.
        sent: HashMap<u64, Vec<u64>>,
        answered: HashMap<u64, HashSet<u64>>,
        requests: Vec<u64>,
        /// Per request: its total, the indexes answered at once, the
        /// results delivered (index -> count), read so far, failed.
        totals: HashMap<u64, usize>,
        results: HashMap<u64, HashMap<u64, usize>>,
        read: HashMap<u64, usize>,
        failed: HashSet<u64>,
        ended: HashSet<u64>,
        puzzle_at: HashMap<(u64, u64), Puzzle>,
        next_id: u64,
        /// The soonest wake the state asked for, as the driver keeps it.
        wake: Option<Instant>,
    }

    impl World {
        fn apply(&mut self, effects: Effects) {
            for e in effects {
                match e {
                    Effect::Assign {
                        worker,
                        tasks,
                        traces,
                    } => {
                        assert!(self.workers.contains(&worker), "assigned to a gone worker");
                        // Each context listed once, each named by a task,
                        // each of a request still running.
                        let named: HashSet<u32> = tasks.iter().map(|t| t.trace).collect();
                        for (at, trace) in traces.iter().enumerate() {
                            assert!(named.contains(&(at as u32 + 1)), "{trace} listed unnamed");
                            assert_eq!(
                                traces.iter().filter(|t| *t == trace).count(),
                                1,
                                "{trace} listed twice"
                            );
                            let request: u64 = trace
                                .strip_prefix("trace-")
                                .and_then(|r| r.parse().ok())
                                .expect("a trace the test gave");
                            assert!(
                                !self.ended.contains(&request),
                                "the trace of ended request {request} passed on"
                            );
                        }
                        for t in &tasks {
                            assert!(
                                t.trace as usize <= traces.len(),
                                "trace {} unlisted",
                                t.trace
                            );
                        }
                        self.sent
                            .entry(worker)
                            .or_default()
                            .extend(tasks.iter().map(|t| t.task_id));
                    }
                    Effect::Wake { at } => {
                        assert!(
                            self.wake.is_none_or(|w| at < w),
                            "a wake asked that is no sooner than one pending"
                        );
                        self.wake = Some(at);
                    }
                    Effect::Cancel { .. } | Effect::Publish(_) | Effect::Evict { .. } => {}
                    Effect::Close { worker, .. } => {
                        self.workers.retain(|w| *w != worker);
                        self.sent.remove(&worker);
                    }
                    Effect::Deliver { request, result } => {
                        assert!(
                            !self.ended.contains(&request),
                            "delivered to an ended request"
                        );
                        *self
                            .results
                            .entry(request)
                            .or_default()
                            .entry(result.index)
                            .or_default() += 1;
                        if let Some(egress::Outcome::Solved(s)) = &result.outcome {
                            let puzzle = self.puzzle_at[&(request, result.index)];
                            assert_eq!(
                                check_answer(&puzzle, s.moves, &s.solution),
                                Ok(()),
                                "an unchecked answer delivered"
                            );
                        }
                    }
                    Effect::Fail { request, .. } => {
                        self.failed.insert(request);
                    }
                    Effect::Cache { puzzle, answer } => {
                        assert_eq!(
                            check_answer(&puzzle, answer.moves, &answer.solution),
                            Ok(()),
                            "an unchecked answer cached"
                        );
                    }
                }
            }
        }

        /// The clock moves on: every worker has heartbeaten, then the
        /// housekeeping tick.
        fn tick(&mut self, s: &mut State, now: Instant) {
            for &wid in &self.workers {
                s.handle(
                    Input::Heartbeat {
                        worker: wid,
                        cache: None,
                    },
                    now,
                )
                .unwrap();
            }
            // A wake due is had with this tick.
            if self.wake.is_some_and(|at| at <= now) {
                self.wake = None;
            }
            let e = s.handle(Input::Tick, now).unwrap();
            self.apply(e);
        }

        /// Every request whose results are all in (or that failed) is
        /// ended by its stream, as the driver's forwarder does.
        fn finish(&mut self, s: &mut State, now: Instant) {
            for &r in &self.requests.clone() {
                if self.ended.contains(&r) {
                    continue;
                }
                let got = self.results.get(&r).map_or(0, |m| m.len());
                let total = self.totals[&r];
                if self.failed.contains(&r) || got == total {
                    let e = s.handle(Input::EndRequest { request: r }, now).unwrap();
                    self.ended.insert(r);
                    self.apply(e);
                }
            }
        }
    }

    /// Runs the operations, checking the invariants after each, then winds
    /// down; returns the state's counters.
    fn run(ops: Vec<Op>) -> Counters {
        let pool = pool();
        let answers: HashMap<Puzzle, (i64, String)> =
            pool.iter().map(|(p, n, t)| (*p, (*n, t.clone()))).collect();
        let start = Instant::now();
        let mut now = start;
        let mut s = State::new(
            Limits {
                max_pending: 40,
                max_unread: 3,
                credit: Credit::new(2),
                audit_rate: 0.3,
                max_attempts: 3,
                // Backups as soon as a size has one answer and a tick
                // has passed, with no budget to speak of.
                speculation: Speculation {
                    after: 2.0,
                    min_age: Duration::from_millis(1),
                    min_budget: 1000,
                    min_samples: 1,
                    ..Speculation::default()
                },
                ..Limits::default()
            },
            now,
        );
        let mut w = World {
            next_id: 1,
            ..World::default()
        };
        let mut puzzles_of: HashMap<u64, Puzzle> = HashMap::new();
        for op in ops {
            match op {
                Op::Admit {
                    n,
                    ready,
                    client,
                    priority,
                    first,
                    known,
                } => {
                    let id = w.next_id;
                    w.next_id += 1;
                    let tasks: Vec<NewTask> = (0..n)
                        .map(|i| NewTask {
                            index: (ready + i) as u64,
                            id: ecow::eco_format!("r{id}p{i}"),
                            puzzle: pool[(first + i * 5) % pool.len()].0,
                        })
                        .collect();
                    let total = ready + n;
                    let spec = RequestSpec {
                        client: format!("c{client}"),
                        priority: Priority::ALL[priority as usize],
                        total,
                        // Every other request is traced.
                        trace: (id % 2 == 0).then(|| format!("trace-{id}").into()),
                    };
                    for t in &tasks {
                        w.puzzle_at.insert((id, t.index), t.puzzle);
                    }
                    let mut lookup = |t: &NewTask| {
                        let bit = t.index - ready as u64;
                        (known >> bit & 1 == 1).then(|| egress::PuzzleResult {
                            index: t.index,
                            ..egress::PuzzleResult::default()
                        })
                    };
                    let admit = Input::Admit {
                        id,
                        spec,
                        tasks,
                        known: Some(Known(&mut lookup)),
                    };
                    // (The known results are among the effects, as deliveries.)
                    if let Ok(e) = s.handle(admit, now) {
                        w.requests.push(id);
                        w.totals.insert(id, total);
                        let m = w.results.entry(id).or_default();
                        for i in 0..ready {
                            m.insert(i as u64, 1);
                        }

                        w.apply(e);
                    }
                }
                Op::Register { slots } => {
                    let id = 1000 + w.next_id;
                    w.next_id += 1;
                    let name = format!("w{id}");
                    let register = Input::Register {
                        worker: id,
                        name: &name,
                        peer: None,
                        slots,
                    };
                    if let Ok(e) = s.handle(register, now) {
                        w.workers.push(id);
                        w.apply(e);
                    }
                }
                Op::Answer { worker, pick, how } => {
                    let Some(&wid) = w.workers.get(worker) else {
                        continue;
                    };
                    let sent = w.sent.entry(wid).or_default();
                    let task_id = match how {
                        How::NotHeld => 999_999,
                        How::Late => match w.answered.get(&wid).and_then(|a| a.iter().next()) {
                            Some(&t) => t,
                            None => continue,
                        },
                        _ => {
                            if sent.is_empty() {
                                continue;
                            }
                            sent.remove(pick % sent.len())
                        }
                    };
                    w.answered.entry(wid).or_default().insert(task_id);
                    // What the worker was asked: look the puzzle up
                    // through the state (tasks and audits).
                    let puzzle = s
                        .tasks
                        .get(task_id)
                        .map(|t| t.puzzle)
                        .or_else(|| s.audits.get(&task_id).map(|a| a.puzzle))
                        .or_else(|| puzzles_of.get(&task_id).copied());
                    let Some(puzzle) = puzzle else {
                        // A released task: its puzzle is gone; any
                        // report frees the slot.
                        let cancelled = v1::TaskResult {
                            task_id,
                            outcome: Some(task_result::Outcome::Cancelled(v1::Cancelled {})),
                        };
                        let results = Input::Results {
                            worker: wid,
                            results: vec![cancelled],
                        };
                        let e = s.handle(results, now).unwrap();
                        w.apply(e);
                        continue;
                    };
                    puzzles_of.insert(task_id, puzzle);
                    let (n, text) = answers[&puzzle].clone();
                    let size = puzzle.size();
                    let outcome = match how {
                        How::Right | How::NotHeld | How::Late => Some(outcome(size, n, &text)),
                        How::WrongCount => Some(outcome(size, n + 1, &text)),
                        How::Misses => Some(outcome(size, 1, "c22")),
                        How::Padded if n >= 0 => {
                            Some(outcome(size, n + 4, &format!("{text} r22 r22 r22 r22")))
                        }
                        How::Padded => Some(outcome(size, n, &text)),
                        How::NoOutcome => None,
                        How::Cancelled => Some(task_result::Outcome::Cancelled(v1::Cancelled {})),
                        How::Error => Some(task_result::Outcome::Error("boom".into())),
                    };
                    let results = Input::Results {
                        worker: wid,
                        results: vec![v1::TaskResult { task_id, outcome }],
                    };
                    let e = s.handle(results, now).unwrap();
                    w.apply(e);
                }
                Op::Lose { worker } => {
                    let Some(&wid) = w.workers.get(worker) else {
                        continue;
                    };
                    w.workers.retain(|x| *x != wid);
                    let lost = Input::WorkerLost {
                        worker: wid,
                        reason: LossReason::Disconnected,
                    };
                    let e = s.handle(lost, now).unwrap();
                    w.apply(e);
                }
                Op::Drain { worker } => {
                    let Some(&wid) = w.workers.get(worker) else {
                        continue;
                    };
                    let e = s.handle(Input::Drain { worker: wid }, now).unwrap();
                    w.apply(e);
                }
                Op::End { request } => {
                    let Some(&r) = w.requests.get(request) else {
                        continue;
                    };
                    if w.ended.insert(r) {
                        let e = s.handle(Input::EndRequest { request: r }, now).unwrap();
                        w.apply(e);
                    }
                }
                Op::Read { request, n } => {
                    let Some(&r) = w.requests.get(request) else {
                        continue;
                    };
                    let got = w.results.get(&r).map_or(0, |m| m.values().sum());
                    let read = w.read.entry(r).or_default();
                    *read = (*read + n).min(got);
                    let read = *read;
                    let ack = Input::Ack {
                        request: r,
                        received: read,
                        sent: read,
                    };
                    let e = s.handle(ack, now).unwrap();
                    w.apply(e);
                }
                Op::Tick { ms } => {
                    // The wakes asked for on the way, then the tick.
                    let until = now + Duration::from_millis(ms);
                    while let Some(at) = w.wake.filter(|at| *at < until) {
                        now = now.max(at);
                        w.tick(&mut s, now);
                    }
                    now = until;
                    w.tick(&mut s, now);
                }
            }
            w.finish(&mut s, now);
            s.check_invariants();
            check_world(&s, &w);
        }
        // Wind down: an honest worker answers everything, clients read.
        let honest = 5_000_000;
        let register = Input::Register {
            worker: honest,
            name: "honest",
            peer: None,
            slots: 3,
        };
        if let Ok(e) = s.handle(register, now) {
            w.workers.push(honest);
            w.apply(e);
        }
        for _ in 0..500 {
            for r in w.requests.clone() {
                let got = w.results.get(&r).map_or(0, |m| m.values().sum());
                w.read.insert(r, got);
                let ack = Input::Ack {
                    request: r,
                    received: got,
                    sent: got,
                };
                let e = s.handle(ack, now).unwrap();
                w.apply(e);
            }
            for wid in w.workers.clone() {
                // All it holds, in one message (as a worker under load
                // sends them).
                let sent = std::mem::take(w.sent.entry(wid).or_default());
                let results: Vec<v1::TaskResult> = sent
                    .into_iter()
                    .map(|task_id| {
                        let puzzle = s
                            .tasks
                            .get(task_id)
                            .map(|t| t.puzzle)
                            .or_else(|| s.audits.get(&task_id).map(|a| a.puzzle));
                        let outcome = match puzzle {
                            Some(p) => {
                                let (n, text) = answers[&p].clone();
                                outcome(p.size(), n, &text)
                            }
                            None => task_result::Outcome::Cancelled(v1::Cancelled {}),
                        };
                        v1::TaskResult {
                            task_id,
                            outcome: Some(outcome),
                        }
                    })
                    .collect();
                if !results.is_empty() {
                    let e = s
                        .handle(
                            Input::Results {
                                worker: wid,
                                results,
                            },
                            now,
                        )
                        .unwrap();
                    w.apply(e);
                }
            }
            now += Duration::from_millis(100);
            w.tick(&mut s, now);
            w.finish(&mut s, now);
            s.check_invariants();
            check_world(&s, &w);
            if w.requests.iter().all(|r| w.ended.contains(r)) {
                break;
            }
        }
        // Every request not ended by its client got all its results
        // exactly once, or failed.
        for &r in &w.requests {
            let m = w.results.get(&r).cloned().unwrap_or_default();
            if !w.failed.contains(&r) && w.ended.contains(&r) && m.len() < w.totals[&r] {
                // Only a client that went away may miss results.
                continue;
            }
            assert!(w.ended.contains(&r), "request {r} never ended");
        }
        assert!(s.requests.is_empty());
        assert!(
            s.tasks.len() == 0,
            "tasks left: {:?}",
            s.tasks.iter().map(|(id, _)| id).collect::<Vec<_>>()
        );
        assert!(s.queue.is_empty());
        assert_eq!(s.tasks.leaders(), 0);
        s.counters.clone()
    }

    /// The operations reach backups: a worker holds tasks past their
    /// expected time when a second one joins with free credit.
    #[test]
    fn a_backup_runs_through_the_same_checks() {
        let c = run(vec![
            Op::Register { slots: 1 },
            Op::Admit {
                n: 5,
                ready: 0,
                client: 0,
                priority: 0,
                first: 0,
                known: 0,
            },
            Op::Answer {
                worker: 0,
                pick: 0,
                how: How::Right,
            },
            Op::Tick { ms: 1000 },
            Op::Register { slots: 1 },
            Op::Tick { ms: 20 },
            Op::Answer {
                worker: 1,
                pick: 0,
                how: How::Right,
            },
            Op::Answer {
                worker: 0,
                pick: 0,
                how: How::Right,
            },
        ]);
        assert!(c.backups_started >= 1, "{c:?}");
        assert!(c.backups_won + c.backups_wasted >= 1, "{c:?}");
    }

    fn check_world(s: &State, w: &World) {
        for (r, m) in &w.results {
            for (index, count) in m {
                assert_eq!(*count, 1, "request {r} got index {index} {count} times");
                assert!((*index as usize) < w.totals[r]);
            }
        }
        // Work-conserving: no worker idles with credit while eligible
        // work waits.
        if s.queue.has_eligible() {
            for (id, worker) in &s.workers {
                assert!(
                    worker.draining || worker.load >= worker.credit,
                    "worker {id} idles with {} of {} while work waits",
                    worker.load,
                    worker.credit
                );
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
        #[test]
        fn invariants_hold_after_every_step(ops in proptest::collection::vec(op(), 1..80)) {
            run(ops);
        }
    }
}

/// A state whose 3x3 expected time is learned from 20 answers of 5 ms on
/// worker 1, with worker 2 (1 slot) registered afterwards; returns the
/// time after the learning.
fn learned(now: Instant) -> (State, Instant) {
    let mut s = with_worker(1, now);
    let mut at = now;
    for (n, task) in tasks(20).into_iter().enumerate() {
        let task = NewTask { index: 0, ..task };
        let held = assigned(
            &s.admit(
                100 + n as u64,
                spec("c", Priority::Normal, 1),
                vec![task],
                at,
            )
            .unwrap(),
        );
        at += Duration::from_millis(5);
        s.result(1, answer(&held[0].1), at);
        s.end_request(100 + n as u64, at);
    }
    s.tick(at);
    s.register(2, "w", None, 1, at).unwrap();
    (s, at)
}

#[test]
fn an_overdue_task_is_backed_up_and_the_first_verified_answer_wins() {
    let (mut s, now) = learned(Instant::now());
    let held = assigned(
        &s.admit(
            1,
            spec("c", Priority::Normal, 1),
            puzzles(1, Size::new(3, 3).unwrap(), 77),
            now,
        )
        .unwrap(),
    );
    assert_eq!(held.len(), 1);
    let (first, task) = held[0];
    // Not overdue yet: no backup.
    let soon = now + Duration::from_millis(50);
    assert!(assigned(&s.tick(soon)).is_empty());
    let mut e = Vec::new();
    s.dispatch(soon, None, &mut e);
    assert!(assigned(&e).is_empty(), "too early for a backup");
    // Far past 4 x 5 ms and the 100 ms floor: a copy on the other worker.
    let late = now + Duration::from_millis(300);
    let mut e = Vec::new();
    s.dispatch(late, None, &mut e);
    let copy = assigned(&e);
    assert_eq!(copy.len(), 1);
    assert_ne!(copy[0].0, first, "the backup goes to another worker");
    assert_eq!(copy[0].1.task_id, task.task_id);
    s.check_invariants();
    // At most one backup a task.
    let mut e = Vec::new();
    s.dispatch(late + Duration::from_secs(1), None, &mut e);
    assert!(assigned(&e).is_empty());
    // The backup answers first: delivered once, the first copy cancelled.
    let e = s.result(copy[0].0, answer(&task), late + Duration::from_millis(5));
    assert_eq!(delivered(&e).len(), 1);
    assert_eq!(cancels(&e), [task.task_id]);
    s.check_invariants();
    // The first copy's late answer changes nothing.
    let e = s.result(first, answer(&task), late + Duration::from_millis(9));
    assert!(delivered(&e).is_empty());
    assert!(
        closed(&e).is_empty(),
        "a late answer of a cancelled copy is no offence"
    );
    s.check_invariants();
    let c = s.snapshot().counters;
    assert_eq!(
        (c.backups_started, c.backups_won, c.backups_wasted),
        (1, 1, 0)
    );
}

/// The wake the effects ask for, if any.
fn wake(effects: &Effects) -> Option<Instant> {
    effects.iter().find_map(|e| match e {
        Effect::Wake { at } => Some(*at),
        _ => None,
    })
}

#[test]
fn a_task_becoming_overdue_is_backed_up_at_the_wake_it_asked_for() {
    let (mut s, now) = learned(Instant::now());
    let mut effects = s
        .admit(
            1,
            spec("c", Priority::Normal, 1),
            puzzles(1, Size::new(3, 3).unwrap(), 79),
            now,
        )
        .unwrap();
    let (first, task) = assigned(&effects)[0];
    // No answer comes and no input arrives: only the wakes the state asks
    // for (and no regular tick) bring the backup, once the task is 100 ms
    // old (the floor; 4 x its 5 ms expected time is less).
    let mut wakes = Vec::new();
    let copy = loop {
        // The one asked now, or one asked before and still pending.
        let at = wake(&effects)
            .or(s.wake)
            .expect("a wake is pending while a task may become overdue");
        assert!(wakes.len() < 4 && at > wakes.last().copied().unwrap_or(now));
        wakes.push(at);
        effects = s.tick(at);
        let copy = assigned(&effects);
        if !copy.is_empty() {
            break copy;
        }
    };
    let at = *wakes.last().unwrap();
    assert!(
        at > now + Duration::from_millis(100) && at <= now + Duration::from_millis(102),
        "backed up {:?} after the task was given",
        at - now
    );
    assert_eq!(copy.len(), 1);
    assert_ne!(copy[0].0, first);
    assert_eq!(copy[0].1.task_id, task.task_id);
    s.check_invariants();
    // Nothing more can become overdue: no wake asked.
    assert_eq!(wake(&s.tick(at + Duration::from_millis(1))), None);
}

#[test]
fn a_backup_that_loses_is_cancelled_and_one_lost_hands_over_to_the_first() {
    let (mut s, now) = learned(Instant::now());
    let two = puzzles(2, Size::new(3, 3).unwrap(), 78);
    let held = assigned(
        &s.admit(1, spec("c", Priority::Normal, 2), two, now)
            .unwrap(),
    );
    assert_eq!(held.len(), 2, "one task on each worker");
    let late = now + Duration::from_millis(300);
    // Each worker answers nothing; neither has free credit: no backup.
    let mut e = Vec::new();
    s.dispatch(late, None, &mut e);
    assert!(assigned(&e).is_empty(), "a backup needs free credit");
    // Worker 2 answers its own: it now has credit, and backs up worker 1's.
    let (one, two) = if held[0].0 == 1 {
        (held[0], held[1])
    } else {
        (held[1], held[0])
    };
    let e = s.result(2, answer(&two.1), late);
    assert_eq!(delivered(&e).len(), 1);
    let copy = assigned(&e);
    assert_eq!(
        copy.iter()
            .map(|(w, t)| (*w, t.task_id))
            .collect::<Vec<_>>(),
        [(2, one.1.task_id)]
    );
    // Worker 1 answers first after all: the backup is cancelled.
    let e = s.result(1, answer(&one.1), late + Duration::from_millis(1));
    assert_eq!(delivered(&e).len(), 1);
    assert_eq!(cancels(&e), [one.1.task_id]);
    s.check_invariants();
    let c = s.snapshot().counters;
    assert_eq!(
        (c.backups_started, c.backups_won, c.backups_wasted),
        (1, 0, 1)
    );
    // Worker 2 reports its cancelled copy (its answer, ignored): its slot
    // is free again.
    let e = s.result(2, answer(&one.1), late + Duration::from_millis(2));
    assert!(delivered(&e).is_empty() && closed(&e).is_empty());
    // Another: backed up, then its first worker lost; the backup carries on
    // as the task, nothing queued again.
    let three = puzzles(1, Size::new(3, 3).unwrap(), 79);
    let t = late + Duration::from_secs(1);
    let held = assigned(
        &s.admit(2, spec("c", Priority::Normal, 1), three, t)
            .unwrap(),
    );
    let (w, task) = held[0];
    let mut e = Vec::new();
    s.dispatch(t + Duration::from_millis(300), None, &mut e);
    let copy = assigned(&e);
    assert_eq!(copy.len(), 1);
    let e = s.worker_lost(w, LossReason::Disconnected, t + Duration::from_millis(301));
    assert!(assigned(&e).is_empty(), "the backup is the task now");
    assert_eq!(s.snapshot().queued, 0);
    s.check_invariants();
    let e = s.result(copy[0].0, answer(&task), t + Duration::from_millis(302));
    assert_eq!(delivered(&e).len(), 1);
    s.check_invariants();
}

#[test]
fn a_worker_that_answers_nothing_while_others_do_is_slow_then_stuck() {
    let (mut s, now) = learned(Instant::now());
    // Worker 2 takes a task and goes quiet; worker 1 keeps answering.
    let held = assigned(
        &s.admit(
            1,
            spec("c", Priority::Normal, 2),
            puzzles(2, Size::new(3, 3).unwrap(), 80),
            now,
        )
        .unwrap(),
    );
    let on_two: Vec<_> = held.iter().filter(|(w, _)| *w == 2).collect();
    assert_eq!(on_two.len(), 1);
    let on_one = held.iter().find(|(w, _)| *w == 1).unwrap();
    let t = now + Duration::from_millis(500);
    s.heartbeat(2, None, t);
    let e = s.result(1, answer(&on_one.1), t);
    // Worker 1 holds worker 2's task as a backup now (2 is overdue).
    assert_eq!(assigned(&e).len(), 1);
    let e = s.tick(t);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::Publish(EventKind::WorkerSlow(w)) if w.worker == 2)),
        "worker 2 marked slow"
    );
    assert!(s.snapshot().worker_list.iter().any(|w| w.id == 2 && w.slow));
    assert_eq!(s.snapshot().counters.workers_slow, 1);
    // Past the 2 s floor, still heartbeating, while worker 1 answered after
    // worker 2 took its task: stuck, long before the 30 s task timeout.
    let later = now + Duration::from_millis(2600);
    s.heartbeat(2, None, later);
    s.heartbeat(1, None, later);
    let e = s.tick(later);
    assert!(matches!(closed(&e)[..], [(2, LossReason::Unresponsive)]));
    assert_eq!(s.snapshot().counters.workers_stuck, 1);
    s.check_invariants();
}

#[test]
fn a_coordinator_that_was_not_running_judges_no_worker_silent_for_it() {
    let now = Instant::now();
    let mut s = with_worker(1, now);
    s.tick(now);
    // The coordinator was stopped for 10 s (past the 3 s silence
    // timeout); the worker's heartbeats of that time are still unread.
    let thawed = now + Duration::from_secs(10);
    assert!(closed(&s.tick(thawed)).is_empty());
    // Silent from then on, it is lost as usual.
    let mut t = thawed;
    let mut e = Vec::new();
    while closed(&e).is_empty() {
        t += Duration::from_millis(500);
        assert!(t < thawed + Duration::from_secs(5), "never judged silent");
        e = s.tick(t);
    }
    assert!(matches!(closed(&e)[..], [(1, LossReason::Silent)]));
    assert!(t > thawed + Duration::from_secs(3));
}

#[test]
fn an_unresponsive_worker_s_tasks_do_not_use_up_their_attempts() {
    assert!(!LossReason::Unresponsive.counts_attempt());
    assert!(LossReason::Disconnected.counts_attempt());
    assert!(LossReason::Stuck.counts_attempt());
}

#[test]
fn without_workers_a_follower_s_request_fails_too_and_gets_no_error_result() {
    let now = Instant::now();
    let mut s = State::new(limits(), now);
    // The same puzzles twice: the second request follows the first's tasks.
    s.admit(10, spec("a", Priority::Normal, 2), tasks(2), now)
        .unwrap();
    s.admit(11, spec("b", Priority::Normal, 2), tasks(2), now)
        .unwrap();
    let e = s.tick(now + Duration::from_secs(11));
    let mut failed: Vec<u64> = e
        .iter()
        .filter_map(|e| match e {
            Effect::Fail { request, .. } => Some(*request),
            _ => None,
        })
        .collect();
    // Each once, in whichever order the books give them.
    failed.sort_unstable();
    assert_eq!(failed, [10, 11], "{e:?}");
    assert!(
        delivered(&e).is_empty(),
        "no puzzle got an error result: {e:?}"
    );
    s.check_invariants();
}
