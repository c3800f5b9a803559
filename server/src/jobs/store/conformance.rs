//! What every [`JobStore`] must do, checked on each implementation: the
//! in-memory store, SQLite in memory and on disk, and PostgreSQL (a
//! throwaway server of the test's own).

use std::path::PathBuf;
use std::sync::Arc;

use colball_core::Priority;
use colball_proto::{egress, v1};
use colball_solver::Size;
use colball_solver::generate::Generator;

use colball_testkit::postgres::TempPostgres;

use super::memory::MemoryStore;
use super::postgres::PostgresStore;
use super::sqlite::SqliteStore;
use super::{Entry, JobState, JobStore, NewJob, StoreError, ToWrite};

/// A store to check, the directory it keeps, if any, and its server.
struct Subject {
    store: Arc<dyn JobStore>,
    dir: Option<PathBuf>,
    _server: Option<TempPostgres>,
}

impl Drop for Subject {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn subjects(test: &str, cap: Option<u64>) -> Vec<(&'static str, Subject)> {
    let dir = std::env::temp_dir().join(format!("colball-conf-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = tokio::task::spawn_blocking(TempPostgres::start)
        .await
        .unwrap();
    let url = server.database("conformance");
    vec![
        (
            "memory",
            Subject {
                store: Arc::new(MemoryStore::new(cap)),
                dir: None,
                _server: None,
            },
        ),
        (
            "sqlite in memory",
            Subject {
                store: Arc::new(SqliteStore::open(None, cap).unwrap()),
                dir: None,
                _server: None,
            },
        ),
        (
            "sqlite on disk",
            Subject {
                store: Arc::new(SqliteStore::open(Some(&dir), cap).unwrap()),
                dir: Some(dir),
                _server: None,
            },
        ),
        (
            "postgres",
            Subject {
                store: Arc::new(PostgresStore::connect(&url, cap).await.unwrap()),
                dir: None,
                _server: Some(server),
            },
        ),
    ]
}

pub(super) fn entries(n: usize) -> Vec<Entry> {
    let mut g = Generator::new(4);
    (0..n)
        .map(|i| Entry::Puzzle {
            id: format!("p{i}").into(),
            puzzle: g.uniform(Size::ALL[i % Size::ALL.len()]),
        })
        .collect()
}

pub(super) fn solved(index: u64) -> egress::PuzzleResult {
    v1::PuzzleResult {
        id: format!("p{index}"),
        index,
        outcome: Some(v1::puzzle_result::Outcome::Solved(v1::Solved {
            moves: 3,
            ..Default::default()
        })),
    }
    .into()
}

/// A submit's `traceparent`, as a job keeps it.
const TRACE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

pub(super) fn new_job(owner: &str) -> NewJob {
    NewJob {
        owner: owner.into(),
        name: String::new(),
        priority: Priority::Bulk,
        fail_fast: false,
        any_order: false,
        created_ms: 1,
        webhook: None,
        trace: None,
    }
}

fn indices(results: &[egress::PuzzleResult]) -> Vec<u64> {
    results.iter().map(|r| r.index).collect()
}

pub(super) async fn put(s: &dyn JobStore, results: Vec<(i64, egress::PuzzleResult)>) -> Vec<bool> {
    let n = results.len();
    let results = results
        .into_iter()
        .map(|(job, r)| ToWrite::unfenced(job, r))
        .collect();
    let (back, new) = s.put_results(results).await;
    assert_eq!(back.len(), n, "the results come back");
    new.unwrap()
}

#[tokio::test]
async fn a_job_goes_in_is_sealed_and_its_results_read_back() {
    for (name, subject) in subjects("life", None).await {
        let s = &*subject.store;
        let job = s
            .create(NewJob {
                name: "night run".into(),
                trace: Some(TRACE.into()),
                ..new_job("alice")
            })
            .await
            .unwrap();
        let all = entries(10);
        s.add(job, 0, all[..6].to_vec()).await.unwrap();
        s.add(job, 6, all[6..].to_vec()).await.unwrap();
        assert!(
            s.list("alice").await.unwrap().is_empty(),
            "{name}: an unacknowledged job is not listed"
        );
        assert_eq!(s.unfinished().await.unwrap(), [], "{name}");
        let row = s.seal(job, 2).await.unwrap();
        assert_eq!(
            (row.state, row.puzzles, row.remaining()),
            (JobState::Running, 10, 10)
        );
        assert_eq!(row.trace.as_deref(), Some(TRACE), "{name}");
        // Its bytes count its puzzles: at least their ids' bytes.
        let ids: u64 = all
            .iter()
            .map(|e| match e {
                Entry::Puzzle { id, .. } => id.len() as u64,
                Entry::Invalid(_) => 0,
            })
            .sum();
        let stored = row.bytes;
        assert!(stored >= ids && ids > 0, "{name}: {stored} bytes");
        assert_eq!(
            (row.name.as_str(), row.owner.as_str()),
            ("night run", "alice")
        );
        assert_eq!(s.job_seq(&row.id), Some(job), "{name}");
        assert_eq!(s.job_seq(&format!("j{job}-000000000000")), None, "{name}");
        let pending = s.pending(job, None, 4).await.unwrap();
        assert_eq!(
            pending.iter().map(|p| p.0).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        for (p, e) in pending.iter().zip(&all) {
            let Entry::Puzzle { id, puzzle } = e else {
                unreachable!()
            };
            assert_eq!(
                (&p.1, &p.2),
                (id, puzzle),
                "{name}: puzzles come back as they went in"
            );
        }
        let new = put(
            s,
            vec![(job, solved(0)), (job, solved(1)), (job, solved(3))],
        )
        .await;
        assert_eq!(new, [true; 3], "{name}");
        assert_eq!(
            put(s, vec![(job, solved(1))]).await,
            [false],
            "{name}: kept once"
        );
        // And its results (once each).
        let with_results = s.job(job).await.unwrap().unwrap().bytes;
        assert!(with_results > stored, "{name}: {with_results} bytes");
        put(s, vec![(job, solved(0))]).await;
        assert_eq!(s.job(job).await.unwrap().unwrap().bytes, with_results);
        assert_eq!(s.list("alice").await.unwrap()[0].bytes, with_results);
        // In order up to the first gap; after it, gaps and all.
        assert_eq!(
            indices(&s.results(job, 0, 100, false).await.unwrap()),
            [0, 1]
        );
        assert_eq!(indices(&s.results(job, 3, 100, false).await.unwrap()), [3]);
        assert_eq!(indices(&s.results(job, 1, 1, false).await.unwrap()), [1]);
        assert_eq!(
            indices(&s.results_after(job, 1, 100).await.unwrap()),
            [1, 3]
        );
        assert_eq!(indices(&s.results_after(job, 0, 2).await.unwrap()), [0, 1]);
        assert_eq!(s.pending(job, None, 100).await.unwrap().len(), 7, "{name}");
        assert_eq!(
            s.pending(job, Some(3), 100).await.unwrap()[0].0,
            4,
            "{name}"
        );
        let row = s.job(job).await.unwrap().unwrap();
        assert_eq!(
            (row.solved, row.errors, row.remaining()),
            (3, 0, 7),
            "{name}"
        );
        assert_eq!(s.unfinished().await.unwrap().len(), 1, "{name}");
        assert_eq!(s.list("alice").await.unwrap().len(), 1, "{name}");
        assert!(s.list("bob").await.unwrap().is_empty(), "{name}");
        s.set_state(job, JobState::Failed, "why", 9).await.unwrap();
        let row = s.job(job).await.unwrap().unwrap();
        assert_eq!(
            (row.state, row.failure.as_str(), row.finished_ms),
            (JobState::Failed, "why", 9)
        );
        // A finished job's state stays: a late run or cancel changes nothing.
        for late in [JobState::Running, JobState::Cancelled, JobState::Done] {
            s.set_state(job, late, "", 10).await.unwrap();
            let row = s.job(job).await.unwrap().unwrap();
            assert_eq!(
                (row.state, row.failure.as_str(), row.finished_ms),
                (JobState::Failed, "why", 9),
                "{name}: {late:?} after it failed"
            );
        }
        assert_eq!(s.unfinished().await.unwrap(), [], "{name}");
        assert!(s.size_bytes().await.unwrap() > 0, "{name}");
    }
}

#[tokio::test]
async fn one_group_over_two_jobs_counts_each_job_s_new_results() {
    for (name, subject) in subjects("group", None).await {
        let s = &*subject.store;
        let (a, b) = (
            s.create(new_job("a")).await.unwrap(),
            s.create(new_job("b")).await.unwrap(),
        );
        for job in [a, b] {
            s.add(job, 0, entries(3)).await.unwrap();
            s.seal(job, 2).await.unwrap();
        }
        let failed = egress::PuzzleResult::failed("p1".into(), 1, "no worker".into());
        let gone = s.create(new_job("c")).await.unwrap();
        s.delete(gone).await.unwrap();
        let group = vec![
            (b, solved(0)),
            (a, solved(0)),
            (b, failed),
            (a, solved(0)),
            (gone, solved(0)),
            (b, solved(2)),
        ];
        assert_eq!(
            put(s, group).await,
            [true, true, true, false, false, true],
            "{name}"
        );
        let row = s.job(b).await.unwrap().unwrap();
        assert_eq!((row.solved, row.errors), (2, 1), "{name}");
        let row = s.job(a).await.unwrap().unwrap();
        assert_eq!((row.solved, row.errors), (1, 0), "{name}");
        assert!(s.job(gone).await.unwrap().is_none(), "{name}");
        // Newest first.
        s.create(new_job("a")).await.unwrap();
        let later = s.create(new_job("a")).await.unwrap();
        s.add(later, 0, entries(1)).await.unwrap();
        s.seal(later, 3).await.unwrap();
        let listed: Vec<i64> = s.list("a").await.unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(listed, [later, a], "{name}");
    }
}

#[tokio::test]
async fn invalid_puzzles_are_stored_with_their_error_and_a_job_of_them_is_done_when_sealed() {
    for (name, subject) in subjects("invalid", None).await {
        let s = &*subject.store;
        let job = s.create(new_job("a")).await.unwrap();
        let bad = v1::PuzzleResult {
            id: "x".into(),
            outcome: Some(v1::puzzle_result::Outcome::Error(v1::PuzzleError {
                message: "bad".into(),
                ..Default::default()
            })),
            ..Default::default()
        };
        let mut chunk = entries(2);
        chunk.insert(1, Entry::Invalid(bad.clone()));
        s.add(job, 0, chunk).await.unwrap();
        let row = s.job(job).await.unwrap().unwrap();
        assert_eq!((row.puzzles, row.errors), (3, 1), "{name}");
        let pending: Vec<u64> = s
            .pending(job, None, 9)
            .await
            .unwrap()
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(pending, [0, 2], "{name}");
        // The error result carries its index in the job.
        assert_eq!(
            s.results_after(job, 0, 9).await.unwrap(),
            [egress::PuzzleResult::from(v1::PuzzleResult {
                index: 1,
                ..bad.clone()
            })]
        );
        put(s, vec![(job, solved(0)), (job, solved(2))]).await;
        let row = s.seal(job, 5).await.unwrap();
        assert_eq!((row.state, row.finished_ms), (JobState::Done, 5), "{name}");
        // A job that failed while it was uploaded stays failed.
        let failed = s.create(new_job("a")).await.unwrap();
        s.add(failed, 0, entries(2)).await.unwrap();
        s.set_state(failed, JobState::Failed, "no room", 4)
            .await
            .unwrap();
        assert_eq!(
            s.seal(failed, 6).await.unwrap().state,
            JobState::Failed,
            "{name}"
        );
        assert!(
            matches!(s.seal(999, 1).await, Err(StoreError::NoSuchJob(999))),
            "{name}"
        );
    }
}

#[tokio::test]
async fn an_any_order_job_reads_its_results_in_the_order_they_were_stored() {
    for (name, subject) in subjects("any", None).await {
        let s = &*subject.store;
        let job = s
            .create(NewJob {
                any_order: true,
                ..new_job("a")
            })
            .await
            .unwrap();
        s.add(job, 0, entries(6)).await.unwrap();
        s.seal(job, 1).await.unwrap();
        let order = [4, 1, 5, 0, 3, 2];
        put(s, vec![(job, solved(4)), (job, solved(1))]).await;
        // A repeat is ignored and takes no place in the order.
        let rest: Vec<_> = [1, 5, 0, 3, 2].iter().map(|&i| (job, solved(i))).collect();
        assert_eq!(
            put(s, rest).await,
            [false, true, true, true, true],
            "{name}"
        );
        assert_eq!(
            indices(&s.results(job, 0, 100, true).await.unwrap()),
            order,
            "{name}"
        );
        assert_eq!(
            indices(&s.results(job, 4, 100, true).await.unwrap()),
            order[4..],
            "{name}"
        );
        assert_eq!(
            indices(&s.results(job, 1, 2, true).await.unwrap()),
            order[1..3],
            "{name}"
        );
        // In input order nothing is missing either.
        assert_eq!(
            s.results(job, 0, 100, false).await.unwrap().len(),
            6,
            "{name}"
        );
    }
}

#[tokio::test]
async fn retention_deletes_only_jobs_finished_before_the_cut() {
    for (name, subject) in subjects("expire", None).await {
        let s = &*subject.store;
        let job = s.create(new_job("a")).await.unwrap();
        s.add(job, 0, entries(3)).await.unwrap();
        s.seal(job, 1).await.unwrap();
        assert_eq!(s.expire(i64::MAX).await.unwrap(), 0, "{name}: not finished");
        s.set_state(job, JobState::Done, "", 100).await.unwrap();
        assert_eq!(
            s.expire(100).await.unwrap(),
            0,
            "{name}: finished at the cut, not before"
        );
        assert_eq!(s.expire(101).await.unwrap(), 1, "{name}");
        assert!(s.job(job).await.unwrap().is_none(), "{name}");
        assert!(s.pending(job, None, 9).await.unwrap().is_empty(), "{name}");
        assert!(
            s.results_after(job, 0, 9).await.unwrap().is_empty(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_capped_store_refuses_whole_writes_past_its_cap_and_reuses_freed_room() {
    let cap = 256 * 1024;
    for (name, subject) in subjects("cap", Some(cap)).await {
        let s = &*subject.store;
        let empty = s.size_bytes().await.unwrap();
        let mut jobs = Vec::new();
        let full = loop {
            let job = match s.create(new_job("a")).await {
                Ok(job) => job,
                Err(e) => break e,
            };
            jobs.push(job);
            if let Err(e) = s.add(job, 0, entries(500)).await {
                break e;
            }
            let results: Vec<_> = (0..500)
                .map(|i| ToWrite::unfenced(job, solved(i)))
                .collect();
            let before = s.job(job).await.unwrap().unwrap();
            let (_, stored) = s.put_results(results).await;
            if let Err(e) = stored {
                // Nothing of a refused group is kept.
                assert_eq!(s.job(job).await.unwrap().unwrap(), before, "{name}");
                break e;
            }
            assert!(jobs.len() < 100, "{name}: never full");
        };
        assert!(matches!(full, StoreError::Full(_)), "{name}: {full}");
        assert!(
            full.to_string().contains("--max-store-mib"),
            "{name}: {full}"
        );
        let size = s.size_bytes().await.unwrap();
        assert!(size <= cap && size > cap / 2, "{name}: {size} of {cap}");
        for job in &jobs {
            s.delete(*job).await.unwrap();
        }
        assert!(s.size_bytes().await.unwrap() <= empty + 8192, "{name}");
        let job = s.create(new_job("a")).await.unwrap();
        s.add(job, 0, entries(500)).await.unwrap();
    }
}

#[tokio::test]
async fn a_finished_job_s_webhook_is_due_until_its_calls_are_recorded() {
    use super::Webhook;
    for (name, subject) in subjects("webhooks", None).await {
        let s = &*subject.store;
        let hooked = s
            .create(NewJob {
                webhook: Some("http://127.0.0.1:9/hook".into()),
                ..new_job("alice")
            })
            .await
            .unwrap();
        let plain = s.create(new_job("alice")).await.unwrap();
        for job in [hooked, plain] {
            s.add(job, 0, entries(2)).await.unwrap();
            s.seal(job, 5).await.unwrap();
        }
        let row = s.job(hooked).await.unwrap().unwrap();
        assert_eq!(
            row.webhook,
            Some(Webhook::new("http://127.0.0.1:9/hook".into())),
            "{name}"
        );
        assert_eq!(s.job(plain).await.unwrap().unwrap().webhook, None, "{name}");
        // Running: nothing is due.
        assert!(
            s.webhooks_due(i64::MAX - 1, 10).await.unwrap().is_empty(),
            "{name}"
        );
        for job in [hooked, plain] {
            s.set_state(job, JobState::Done, "", 10).await.unwrap();
        }
        let due = s.webhooks_due(10, 10).await.unwrap();
        assert_eq!(
            due.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [hooked],
            "{name}"
        );
        // A failed call: due again at 2,000, not before.
        s.webhook_tried(hooked, 1, 2_000, false).await.unwrap();
        assert!(
            s.webhooks_due(1_999, 10).await.unwrap().is_empty(),
            "{name}"
        );
        let again = s.webhooks_due(2_000, 10).await.unwrap();
        assert_eq!(
            again[0].webhook,
            Some(Webhook {
                url: "http://127.0.0.1:9/hook".into(),
                attempts: 1,
                next_ms: 2_000,
                delivered: false,
            }),
            "{name}"
        );
        // Delivered: never due again.
        s.webhook_tried(hooked, 2, Webhook::NO_MORE, true)
            .await
            .unwrap();
        assert!(
            s.webhooks_due(i64::MAX - 1, 10).await.unwrap().is_empty(),
            "{name}"
        );
        let row = s.job(hooked).await.unwrap().unwrap();
        assert_eq!(
            row.webhook.map(|w| (w.attempts, w.delivered)),
            Some((2, true)),
            "{name}"
        );
        // A call recorded for a job without a webhook, or one deleted,
        // changes nothing.
        s.webhook_tried(plain, 1, 0, true).await.unwrap();
        assert_eq!(s.job(plain).await.unwrap().unwrap().webhook, None, "{name}");
        s.delete(hooked).await.unwrap();
        s.webhook_tried(hooked, 3, 0, false).await.unwrap();
        assert!(
            s.webhooks_due(i64::MAX - 1, 10).await.unwrap().is_empty(),
            "{name}"
        );
    }
}
