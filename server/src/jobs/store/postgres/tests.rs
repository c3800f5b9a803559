use std::time::Duration;

use colball_testkit::postgres::TempPostgres;

use super::super::conformance::{entries, new_job, put, solved};
use super::super::packing;
use super::super::{Claim, Entry, Finished, JobStore, Rescued, SharedStore, ToWrite, WINDOW};
use super::migrations::MIGRATIONS;
use super::session::parse_hint;
use super::*;

async fn wake(hints: &mut broadcast::Receiver<Wake>, want: Wake) {
    let heard = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if hints.recv().await.unwrap() == want {
                return;
            }
        }
    });
    heard
        .await
        .unwrap_or_else(|_| panic!("no {want:?} hint in 5 s"));
}

/// A coordinator does not hear its own hints; a results hint names
/// its windows; the payloads without windows or origin are another's,
/// of every window.
#[test]
fn hints_are_read_for_others_with_their_windows() {
    let me = 7;
    assert_eq!(parse_hint(&jobs_hint(8), me), Some(Wake::Jobs));
    assert_eq!(parse_hint(&jobs_hint(me), me), None);
    assert_eq!(parse_hint("jobs", me), Some(Wake::Jobs));
    let results = Wake::Results {
        job: 12,
        first: 3,
        last: 5,
    };
    assert_eq!(
        parse_hint(&results_hint(12, &[5, 3, 4], 8), me),
        Some(results)
    );
    assert_eq!(parse_hint(&results_hint(12, &[3], me), me), None);
    assert_eq!(
        parse_hint("r12", me),
        Some(Wake::Results {
            job: 12,
            first: 0,
            last: u64::MAX
        })
    );
    for bad in ["r", "rx", "r12:5-3:8", "r12:3:8", "jobsx", "hello"] {
        assert_eq!(parse_hint(bad, me), None, "{bad}");
    }
}

fn window(claim: Claim) -> (u64, usize, bool) {
    match claim {
        Claim::Window {
            win,
            pending,
            took_over,
            ..
        } => (win, pending.len(), took_over),
        other => panic!("no window claimed: {other:?}"),
    }
}

/// The epoch of the current claim of window `win` of `job`.
async fn epoch(s: &PostgresStore, job: i64, win: u64) -> u64 {
    let client = s.client().await.unwrap();
    let row = client
        .query_one(
            "SELECT epoch FROM colball_windows WHERE job = $1 AND win = $2",
            &[&job, &(win as i64)],
        )
        .await
        .unwrap();
    row.get::<_, i64>(0) as u64
}

/// A throwaway server, and two stores (coordinators) on its database
/// `name`.
async fn two_on(name: &str) -> (TempPostgres, String, PostgresStore, PostgresStore) {
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database(name);
    let a = PostgresStore::connect(&url, None).await.unwrap();
    let b = PostgresStore::connect(&url, None).await.unwrap();
    (server, url, a, b)
}

async fn leaders(stores: &[&PostgresStore]) -> usize {
    stores.iter().filter(|s| s.leading()).count()
}

/// Two coordinators on one database: a job's windows are split between
/// them, a window is done only once each of its puzzles has a result, a
/// lease that runs out is taken over, the job is completed once, one of
/// them leads at a time, and each hears the other's hints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinators_on_one_database_split_windows_and_take_over_lapsed_leases() {
    let (_server, url, a, b) = two_on("shared").await;
    let mut heard_by_b = b.wakes();
    let job = a.create(new_job("alice")).await.unwrap();
    let n = 2 * WINDOW + 100;
    a.add(job, 0, entries(n)).await.unwrap();
    let lease = Duration::from_secs(2);

    // Before the seal the last window is not all there: it is let go.
    assert_eq!(
        window(a.claim(job, "a", lease).await.unwrap()),
        (0, WINDOW, false)
    );
    assert_eq!(
        window(b.claim(job, "b", lease).await.unwrap()),
        (1, WINDOW, false)
    );
    assert_eq!(
        window(b.claim(job, "b", lease).await.unwrap()),
        (2, 100, false)
    );
    assert_eq!(
        b.finish(job, 2, epoch(&b, job, 2).await).await.unwrap(),
        Finished::LetGo,
        "not uploaded whole"
    );
    a.seal(job, 1).await.unwrap();
    wake(&mut heard_by_b, Wake::Jobs).await;
    assert_eq!(
        window(a.claim(job, "a", lease).await.unwrap()),
        (2, 100, false)
    );
    let a_window_2 = epoch(&a, job, 2).await;
    assert!(matches!(
        b.claim(job, "b", lease).await.unwrap(),
        Claim::Busy
    ));

    // Window 0 is finished before its results are in: let go, not done.
    assert_eq!(
        a.finish(job, 0, epoch(&a, job, 0).await).await.unwrap(),
        Finished::LetGo
    );
    assert_eq!(
        window(b.claim(job, "b", lease).await.unwrap()),
        (0, WINDOW, false)
    );
    let results =
        |range: std::ops::Range<usize>| range.map(|i| (job, solved(i as u64))).collect::<Vec<_>>();
    put(&a, results(0..WINDOW)).await;
    wake(
        &mut heard_by_b,
        Wake::Results {
            job,
            first: 0,
            last: 0,
        },
    )
    .await;
    assert_eq!(
        b.finish(job, 0, epoch(&b, job, 0).await).await.unwrap(),
        Finished::Done
    );

    // b renews its leases (windows 1); a lets its own lapse (window 2),
    // and b takes it over.
    assert_eq!(b.renew("b", lease).await.unwrap(), 1);
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    assert_eq!(
        window(b.claim(job, "b", lease).await.unwrap()),
        (1, WINDOW, false)
    );
    assert_eq!(
        window(b.claim(job, "b", lease).await.unwrap()),
        (2, 100, true)
    );
    // The leader lets go of what lapsed: nothing now.
    assert_eq!(a.rescue().await.unwrap(), Rescued::default());

    // a, back from a pause, still has window 2's old claim: its results
    // are refused and its finish leaves the window b's.
    let stale = a_window_2;
    assert!(stale < epoch(&b, job, 2).await);
    let late = (2 * WINDOW..n)
        .map(|i| ToWrite {
            fence: Some(stale),
            ..ToWrite::unfenced(job, solved(i as u64))
        })
        .collect();
    let (_, new) = a.put_results(late).await;
    assert!(new.unwrap().iter().all(|new| !new), "a stale write stored");
    assert_eq!(a.finish(job, 2, stale).await.unwrap(), Finished::Lost);
    let holder: Option<String> = a
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT holder FROM colball_windows WHERE job = $1 AND win = 2",
            &[&job],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(holder.as_deref(), Some("b"));

    // Everything stored (some twice): done once.
    put(&b, results(WINDOW..n)).await;
    put(&a, results(WINDOW..n)).await;
    for w in [1, 2] {
        assert_eq!(
            b.finish(job, w, epoch(&b, job, w).await).await.unwrap(),
            Finished::Done
        );
    }
    assert!(matches!(
        a.claim(job, "a", lease).await.unwrap(),
        Claim::Done
    ));
    assert!(b.complete(job, 9).await.unwrap());
    assert!(!a.complete(job, 10).await.unwrap(), "completed once");
    let row = a.job(job).await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.solved, row.finished_ms),
        (JobState::Done, n as u64, 9)
    );
    // Finished: not among the unfinished jobs each coordinator syncs with.
    assert!(a.unfinished().await.unwrap().iter().all(|r| r.seq != job));

    // An upload whose coordinator stopped renewing it is deleted by
    // the rescue; one still renewed is not.
    let abandoned = a.create(new_job("alice")).await.unwrap();
    a.add(abandoned, 0, entries(10)).await.unwrap();
    let kept = b.create(new_job("bob")).await.unwrap();
    assert_eq!(b.rescue().await.unwrap(), Rescued::default());
    a.renew("a", Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        b.rescue().await.unwrap(),
        Rescued {
            windows: 0,
            uploads: 1
        }
    );
    assert!(a.job(abandoned).await.unwrap().is_none());
    assert!(a.job(kept).await.unwrap().is_some());

    // A coordinator that dies (its connections close) lets go of its
    // windows at once, long before their lease runs out.
    let c = PostgresStore::connect(&url, None).await.unwrap();
    let orphan = c.create(new_job("carol")).await.unwrap();
    c.add(orphan, 0, entries(10)).await.unwrap();
    c.seal(orphan, 1).await.unwrap();
    let long = Duration::from_secs(600);
    assert_eq!(
        window(c.claim(orphan, "c", long).await.unwrap()),
        (0, 10, false)
    );
    assert!(matches!(
        b.claim(orphan, "b", long).await.unwrap(),
        Claim::Busy
    ));
    drop(c);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let taken = loop {
        match b.claim(orphan, "b", long).await.unwrap() {
            Claim::Window { took_over, .. } => break took_over,
            _ => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the dead one's window is still held"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(taken);

    // One leader; when it goes, the other leads.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while leaders(&[&a, &b]).await != 1 {
        assert!(tokio::time::Instant::now() < deadline, "no leader in 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(LEADER_TRY * 2).await;
    assert_eq!(leaders(&[&a, &b]).await, 1, "two leaders");
    let (leader, other) = if a.leading() { (a, b) } else { (b, a) };
    drop(leader);
    let deadline = tokio::time::Instant::now() + LEADER_TRY * 4;
    while !other.leading() {
        assert!(tokio::time::Instant::now() < deadline, "no new leader");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two coordinators delete, expire, renew, release and claim windows
/// of the same jobs at once: every call succeeds (the statements that
/// lock several rows lock them in one order, and a conflict the server
/// still rolls back is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deletes_renewals_and_claims_all_succeed() {
    let (_server, _, a, b) = two_on("concurrent").await;
    let lease = Duration::from_secs(30);
    let puzzles = entries(WINDOW + 10);
    for round in 0..8 {
        let mut jobs = Vec::new();
        for _ in 0..3 {
            let job = a.create(new_job("alice")).await.unwrap();
            a.add(job, 0, puzzles.clone()).await.unwrap();
            a.seal(job, 1).await.unwrap();
            a.claim(job, "a", lease).await.unwrap();
            b.claim(job, "b", lease).await.unwrap();
            jobs.push(job);
        }
        a.set_state(jobs[2], JobState::Done, "", 1).await.unwrap();
        let (deleted, expired, renewed_a, renewed_b, released, claimed) = tokio::join!(
            a.delete(jobs[0]),
            b.expire(2),
            a.renew("a", lease),
            b.renew("b", lease),
            b.release(jobs[1], "b"),
            a.claim(jobs[1], "a", lease),
        );
        deleted.unwrap_or_else(|e| panic!("round {round}: delete: {e}"));
        assert_eq!(expired.unwrap(), 1, "round {round}");
        renewed_a.unwrap_or_else(|e| panic!("round {round}: renew: {e}"));
        renewed_b.unwrap_or_else(|e| panic!("round {round}: renew: {e}"));
        released.unwrap_or_else(|e| panic!("round {round}: release: {e}"));
        claimed.unwrap_or_else(|e| panic!("round {round}: claim: {e}"));
        a.delete(jobs[1]).await.unwrap();
    }
}

/// One step of two coordinators working one job's three windows.
#[derive(Clone, Debug)]
enum WindowOp {
    Claim(usize),
    /// Every puzzle of window `.0` gets its result, under no claim.
    Solve(u64),
    /// Coordinator `.0` writes window `.1`'s results under its last
    /// claim of it.
    Write(usize, u64),
    /// Coordinator `.0` finishes window `.1` under its last claim of it.
    Finish(usize, u64),
    /// Coordinator `.0` finishes window `.1` under its last claim of it
    /// (if it has one) and claims another, in one call.
    FinishAndClaim(usize, u64),
    /// Coordinator `.0`'s leases run out.
    Lapse(usize),
    Renew(usize),
    Release(usize),
    /// Coordinator `.0` claims, and the answer is lost (its connection
    /// broke as the claim committed): it does not know the window.
    LoseClaim(usize),
}

fn step() -> impl proptest::strategy::Strategy<Value = WindowOp> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0..2usize).prop_map(WindowOp::Claim),
        1 => (0..3u64).prop_map(WindowOp::Solve),
        2 => (0..2usize, 0..3u64).prop_map(|(h, w)| WindowOp::Write(h, w)),
        3 => (0..2usize, 0..3u64).prop_map(|(h, w)| WindowOp::Finish(h, w)),
        3 => (0..2usize, 0..3u64).prop_map(|(h, w)| WindowOp::FinishAndClaim(h, w)),
        1 => (0..2usize).prop_map(WindowOp::Lapse),
        1 => (0..2usize).prop_map(WindowOp::Renew),
        1 => (0..2usize).prop_map(WindowOp::Release),
        1 => (0..2usize).prop_map(WindowOp::LoseClaim),
    ]
}

/// What the windows should be: for each, its holder (and whether its
/// lease is live), whether it is done, whether its results are stored,
/// its epoch; each coordinator's last claim of each, and whether it
/// knows it holds it.
#[derive(Clone, Debug, Default)]
struct Model {
    holder: [Option<(usize, bool)>; 3],
    done: [bool; 3],
    solved: [bool; 3],
    epoch: [u64; 3],
    claimed: [[Option<u64>; 3]; 2],
    known: [[bool; 3]; 2],
}

impl Model {
    /// Whether `h` may claim window `w`: nobody holds it under a live
    /// lease, or `h` does without knowing it.
    fn free(&self, h: usize, w: usize) -> bool {
        !self.done[w]
            && self.holder[w].is_none_or(|(o, live)| !live || (o == h && !self.known[h][w]))
    }

    /// What a claim by `h` gives, as the store decides it.
    fn claim(&mut self, h: usize) -> Result<(u64, bool), bool> {
        self.claim_other(h, None)
    }

    /// What a claim by `h` of a window other than `but` gives.
    fn claim_other(&mut self, h: usize, but: Option<usize>) -> Result<(u64, bool), bool> {
        for w in 0..3 {
            if !self.free(h, w) || but == Some(w) {
                continue;
            }
            self.epoch[w] += 1;
            if self.solved[w] {
                self.done[w] = true;
                self.holder[w] = None;
                continue;
            }
            let took_over = self.holder[w].is_some_and(|(o, _)| o != h);
            self.holder[w] = Some((h, true));
            self.claimed[h][w] = Some(self.epoch[w]);
            self.known[h][w] = true;
            return Ok((w as u64, took_over));
        }
        if self.solved.iter().all(|s| *s) {
            self.done = [true; 3];
            self.holder = [None; 3];
        }
        // Err(true): every window done.
        Err(self.done.iter().all(|d| *d))
    }

    /// What `h` finishing window `w` under its last claim gives, if it
    /// has claimed it.
    fn finish(&mut self, h: usize, w: usize) -> Option<(u64, Finished)> {
        let fence = self.claimed[h][w]?;
        self.known[h][w] = false;
        let done = self.done[w] || self.solved[w];
        let how = if fence != self.epoch[w] {
            Finished::Lost
        } else if done {
            Finished::Done
        } else {
            Finished::LetGo
        };
        self.done[w] = done;
        if fence == self.epoch[w] || done {
            self.holder[w] = None;
        }
        Some((fence, how))
    }
}

/// Whether claim `got` is what the model wanted.
fn claimed_as_wanted(want: Result<(u64, bool), bool>, got: &Claim, model: &Model) {
    match (want, got) {
        (Ok((w, over)), Claim::Window { win, took_over, .. }) => {
            assert_eq!((*win, *took_over), (w, over), "{model:?}")
        }
        (Err(false), Claim::Busy) | (Err(true), Claim::Done) => {}
        (want, got) => panic!("claim: {want:?} wanted, {got:?}: {model:?}"),
    }
}

/// Random sequences of claims, results, finishes, lapses, renewals and
/// releases by two coordinators on one job: after every step the
/// windows in the database are what the model says (holder, done,
/// epoch), a claim gives the window the model predicts (never one held
/// under a live lease, unless by its claimer, whose claim's answer was
/// lost) with a greater epoch than any before, a window is
/// done only when each of its puzzles has its result, and results
/// written or a finish under a claim no longer current (the window
/// claimed again since) change nothing.
#[test]
fn window_claims_keep_their_invariants_over_random_steps() {
    use proptest::test_runner::{Config, TestRunner};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let server = TempPostgres::start();
    let url = server.database("steps");
    let stores = runtime.block_on(async {
        [
            PostgresStore::connect(&url, None).await.unwrap(),
            PostgresStore::connect(&url, None).await.unwrap(),
        ]
    });
    let names = ["a", "b"];
    let n = 2 * WINDOW + 50;
    let puzzles = entries(n);
    let long = Duration::from_secs(60);
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let steps = proptest::collection::vec(step(), 1..40);
    let outcome = runner.run(&steps, |steps| {
        runtime.block_on(async {
            let s = &stores;
            let job = s[0].create(new_job("alice")).await.unwrap();
            s[0].add(job, 0, puzzles.clone()).await.unwrap();
            s[0].seal(job, 1).await.unwrap();
            let mut model = Model::default();
            for step in steps {
                match step {
                    WindowOp::Claim(h) => {
                        let got = s[h].claim(job, names[h], long).await.unwrap();
                        claimed_as_wanted(model.claim(h), &got, &model);
                    }
                    WindowOp::FinishAndClaim(h, w) => {
                        let i = w as usize;
                        let finished = model.finish(h, i);
                        let finishing: Vec<(u64, u64)> =
                            finished.iter().map(|&(fence, _)| (w, fence)).collect();
                        let (got, how) = s[h]
                            .finish_and_claim(job, names[h], long, &finishing)
                            .await
                            .unwrap();
                        let want: Vec<(u64, Finished)> =
                            finished.iter().map(|&(_, how)| (w, how)).collect();
                        assert_eq!(how, want, "{model:?}");
                        let but = finished.is_some().then_some(i);
                        claimed_as_wanted(model.claim_other(h, but), &got, &model);
                    }
                    WindowOp::Solve(w) => {
                        let from = w * WINDOW as u64;
                        let to = (from + WINDOW as u64).min(n as u64);
                        let results = (from..to).map(|i| (job, solved(i))).collect();
                        put(&s[0], results).await;
                        model.solved[w as usize] = true;
                    }
                    WindowOp::Write(h, w) => {
                        let i = w as usize;
                        if let Some(fence) = model.claimed[h][i] {
                            let from = w * WINDOW as u64;
                            let to = (from + WINDOW as u64).min(n as u64);
                            let results = (from..to)
                                .map(|i| ToWrite {
                                    fence: Some(fence),
                                    ..ToWrite::unfenced(job, solved(i))
                                })
                                .collect();
                            let (_, new) = s[h].put_results(results).await;
                            let stored = fence == model.epoch[i] && !model.solved[i];
                            let new = new.unwrap();
                            assert!(new.iter().all(|n| *n == stored), "{model:?}");
                            model.solved[i] |= stored;
                            // A write under the current claim tells its
                            // writer the window is its own.
                            model.known[h][i] |= fence == model.epoch[i];
                        }
                    }
                    WindowOp::Finish(h, w) => {
                        if let Some((fence, want)) = model.finish(h, w as usize) {
                            let got = s[h].finish(job, w, fence).await.unwrap();
                            assert_eq!(got, want, "{model:?}");
                        }
                    }
                    WindowOp::LoseClaim(h) => {
                        let before = model.claimed[h];
                        let got = s[h].claim(job, names[h], long).await.unwrap();
                        claimed_as_wanted(model.claim(h), &got, &model);
                        if let Claim::Window { win, .. } = got {
                            s[h].forget(|&k| k == (job, win));
                            let w = win as usize;
                            model.known[h][w] = false;
                            model.claimed[h][w] = before[w];
                        }
                    }
                    WindowOp::Lapse(h) => {
                        s[h].renew(names[h], Duration::ZERO).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        for slot in model.holder.iter_mut().flatten() {
                            if slot.0 == h {
                                slot.1 = false;
                            }
                        }
                    }
                    WindowOp::Renew(h) => {
                        s[h].renew(names[h], long).await.unwrap();
                        for (w, slot) in model.holder.iter_mut().enumerate() {
                            if let Some((o, live)) = slot {
                                if *o == h && !model.done[w] {
                                    *live = true;
                                }
                            }
                        }
                    }
                    WindowOp::Release(h) => {
                        s[h].release(job, names[h]).await.unwrap();
                        model.known[h] = [false; 3];
                        for w in 0..3 {
                            if model.holder[w].is_some_and(|(o, _)| o == h) && !model.done[w] {
                                model.holder[w] = None;
                            }
                        }
                    }
                }
                let client = s[0].client().await.unwrap();
                let rows = client
                    .query(
                        "SELECT win, holder, done, epoch FROM colball_windows \
                         WHERE job = $1 ORDER BY win",
                        &[&job],
                    )
                    .await
                    .unwrap();
                for r in &rows {
                    let w = r.get::<_, i64>(0) as usize;
                    let holder: Option<String> = r.get(1);
                    let done: bool = r.get(2);
                    assert_eq!(done, model.done[w], "window {w}: {model:?}");
                    let epoch = r.get::<_, i64>(3) as u64;
                    assert_eq!(epoch, model.epoch[w], "window {w}: {model:?}");
                    assert!(
                        !done || model.solved[w],
                        "window {w} done without its results"
                    );
                    let want = model.holder[w].map(|(h, _)| names[h].to_string());
                    if !done {
                        assert_eq!(holder, want, "window {w}: {model:?}");
                    }
                }
            }
            s[0].delete(job).await.unwrap();
        });
        Ok(())
    });
    drop(stores);
    drop(server);
    outcome.unwrap();
}

/// Writes job `seq` as the row-per-puzzle layout held it: a row per
/// puzzle, and a row per result for the indices `solved`, in that
/// (stored) order.
async fn old_job(
    client: &tokio_postgres::Client,
    seq: i64,
    state: i16,
    puzzles: &[Entry],
    solved_in_order: &[u64],
) {
    client
        .execute(
            "INSERT INTO colball_jobs (seq, owner, name, priority, state, puzzles, solved, \
               created_ms, fail_fast, any_order, stored, bytes) \
             VALUES ($1, 'alice', 'old', 0, $2, $3, $4, 1, false, false, $4, 0)",
            &[
                &seq,
                &state,
                &(puzzles.len() as i64),
                &(solved_in_order.len() as i64),
            ],
        )
        .await
        .unwrap();
    let (idx, ids, bytes): (Vec<i64>, Vec<String>, Vec<Vec<u8>>) = puzzles
        .iter()
        .enumerate()
        .map(|(i, e)| match e {
            Entry::Puzzle { id, puzzle } => (
                i as i64,
                id.to_string(),
                packing::pack_puzzle(puzzle).to_vec(),
            ),
            Entry::Invalid(_) => unreachable!("the old jobs here hold puzzles only"),
        })
        .collect();
    client
        .execute(
            "INSERT INTO colball_puzzles (job, idx, id, puzzle) \
             SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::bytea[])",
            &[&seq, &idx, &ids, &bytes],
        )
        .await
        .unwrap();
    let idx: Vec<i64> = solved_in_order.iter().map(|&i| i as i64).collect();
    let pos: Vec<i64> = (0..idx.len() as i64).collect();
    let bodies: Vec<Vec<u8>> = solved_in_order
        .iter()
        .map(|&i| solved(i).encode_to_vec())
        .collect();
    client
        .execute(
            "INSERT INTO colball_results (job, idx, pos, body) \
             SELECT $1, * FROM unnest($2::bigint[], $3::bigint[], $4::bytea[])",
            &[&seq, &idx, &pos, &bodies],
        )
        .await
        .unwrap();
}

/// A database of the row-per-puzzle layout (schema 4) holding a job
/// half done, one of its windows claimed by a coordinator that is gone,
/// and a finished job, is regrouped when a coordinator opens it: the
/// half-done job is claimed from where it was and finished, and both
/// read back whole, in index and in stored order, from any index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_the_row_layout_is_regrouped_and_its_jobs_go_on() {
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database("old");
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    client
        .batch_execute(&MIGRATIONS[..4].concat())
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TABLE colball_meta (key text PRIMARY KEY, value text NOT NULL); \
             INSERT INTO colball_meta VALUES ('schema_version', '4')",
        )
        .await
        .unwrap();
    let n = WINDOW + 300;
    let puzzles = entries(n);
    // Job 1: window 0 whole, stored out of order; window 1 a third
    // done, in two runs, and claimed (epoch 1) by a coordinator whose
    // lease has run out.
    let w = WINDOW as u64;
    let mut half: Vec<u64> = (0..w).rev().collect();
    half.extend((w..w + 50).chain(w + 200..w + 250));
    old_job(&client, 1, 2, &puzzles, &half).await;
    client
        .batch_execute(
            "INSERT INTO colball_windows (job, win, done) VALUES (1, 0, true); \
             INSERT INTO colball_windows (job, win, holder, lease_until, epoch) \
               VALUES (1, 1, 'gone', now() - interval '1 minute', 1)",
        )
        .await
        .unwrap();
    // Job 2: finished (finished jobs had no windows).
    let all: Vec<u64> = (0..n as u64).collect();
    old_job(&client, 2, 3, &puzzles, &all).await;
    client
        .batch_execute("SELECT setval('colball_jobs_seq_seq', 2)")
        .await
        .unwrap();
    drop(client);
    connection.await.unwrap().unwrap();

    let s = PostgresStore::connect(&url, None).await.unwrap();
    let check = |job: i64, results: Vec<egress::PuzzleResult>, want: &[u64]| {
        let got: Vec<u64> = results.iter().map(|r| r.index).collect();
        assert_eq!(got, want, "job {job}");
        for r in &results {
            assert_eq!(r.id, format!("p{}", r.index), "job {job}");
        }
    };
    // Job 1 reads what it had, up to its first missing index.
    check(
        1,
        s.results(1, 0, usize::MAX, false).await.unwrap(),
        &all[..w as usize + 50],
    );
    check(1, s.results(1, 0, usize::MAX, true).await.unwrap(), &half);
    check(
        1,
        s.results(1, 100, 3, true).await.unwrap(),
        &half[100..103],
    );
    // Its window 1 is taken over at a higher epoch; what is pending is
    // what had no result.
    let Claim::Window {
        win,
        epoch,
        pending,
        took_over,
    } = s.claim(1, "new", Duration::from_secs(30)).await.unwrap()
    else {
        panic!("window 1 is not claimed");
    };
    assert_eq!((win, epoch, took_over), (1, 2, true));
    let missing: Vec<u64> = (w + 50..w + 200).chain(w + 250..n as u64).collect();
    assert_eq!(pending.iter().map(|p| p.0).collect::<Vec<_>>(), missing);
    for (index, id, puzzle) in &pending {
        assert_eq!(*id, format!("p{index}"));
        let Entry::Puzzle { puzzle: was, .. } = &puzzles[*index as usize] else {
            unreachable!()
        };
        assert_eq!(puzzle, was, "puzzle {index}");
    }
    // A stale claim's results are refused; the current one's stored.
    let write = |fence| {
        missing
            .iter()
            .map(|&i| ToWrite {
                fence: Some(fence),
                ..ToWrite::unfenced(1, solved(i))
            })
            .collect::<Vec<_>>()
    };
    let (_, stale) = s.put_results(write(1)).await;
    assert!(stale.unwrap().iter().all(|new| !new));
    let (_, fresh) = s.put_results(write(epoch)).await;
    assert!(fresh.unwrap().iter().all(|new| *new));
    assert_eq!(s.finish(1, 1, epoch).await.unwrap(), Finished::Done);
    assert!(s.complete(1, 2).await.unwrap());
    let row = s.job(1).await.unwrap().unwrap();
    assert_eq!((row.state, row.solved), (JobState::Done, n as u64));
    check(1, s.results(1, 0, usize::MAX, false).await.unwrap(), &all);
    check(
        1,
        s.results(1, w + 40, 20, false).await.unwrap(),
        &all[w as usize + 40..w as usize + 60],
    );
    let stored: Vec<u64> = half.iter().chain(&missing).copied().collect();
    check(1, s.results(1, 0, usize::MAX, true).await.unwrap(), &stored);
    check(
        1,
        s.results_after(1, w + 10, 5).await.unwrap(),
        &all[w as usize + 10..w as usize + 15],
    );
    // Job 2 whole, and a new job after them.
    check(2, s.results(2, 0, usize::MAX, false).await.unwrap(), &all);
    assert_eq!(s.create(new_job("bob")).await.unwrap(), 3);
    // The old tables are gone, and deleting a job leaves none of it.
    let client = s.client().await.unwrap();
    let old: i64 = client
        .query_one(
            "SELECT count(*) FROM information_schema.tables \
             WHERE table_name IN ('colball_puzzles', 'colball_results')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(old, 0);
    s.delete(1).await.unwrap();
    for table in [
        "colball_puzzle_blocks",
        "colball_result_groups",
        "colball_windows",
    ] {
        let left: i64 = client
            .query_one(&format!("SELECT count(*) FROM {table} WHERE job = 1"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "{table}");
    }
}

/// A job's state or priority class this version does not know (a newer
/// colball's, or damage) is an error naming it, never a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_this_version_cannot_read_is_an_error() {
    let (_server, url, a, _b) = two_on("unreadable").await;
    let job = a.create(new_job("alice")).await.unwrap();
    a.add(job, 0, entries(3)).await.unwrap();
    a.seal(job, 2).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    for (set, named) in [
        ("state = 9", "state 9"),
        ("state = 3, priority = 7", "priority class 7"),
    ] {
        client
            .execute(&format!("UPDATE colball_jobs SET {set}"), &[])
            .await
            .unwrap();
        let e = a.job(job).await.unwrap_err().to_string();
        assert!(e.contains(named), "{e}");
        assert!(a.list("alice").await.is_err());
    }
    drop(client);
    connection.abort();
}
