//! The nemesis run itself: the cluster of real processes, the clients'
//! workload, the faults, and what is stored afterwards for the checker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_proto::v1;
use tokio_stream::StreamExt;

use super::check::{Event, History, State, Stored};
use super::cluster::{Binaries, Calls, Cluster, LEASE, keep_running, lock, seq_of};
use super::schedule::schedule;
use super::workload::{Sabotage, Work, grpc_answer, puzzles, receiver};

/// Jobs in flight at once.
pub(super) const CLIENTS: usize = 3;
/// How long, after the faults end, the clients have to finish.
pub(super) const SETTLE: Duration = Duration::from_secs(120);

/// One run's figures, for the summary.
#[derive(Debug)]
pub struct Ran {
    pub records: Vec<super::check::Record>,
    pub answers: Vec<Vec<i64>>,
    pub stored: HashMap<usize, Stored>,
    /// The faults as injected, in order.
    pub faults: Vec<String>,
    /// Processes that had exited on their own when the faults ended.
    pub exited: Vec<String>,
}

/// Runs the workload under the faults of `seed` for `length`, then reads
/// back what is stored.
pub async fn run(bin: Binaries, seed: u64, length: Duration, sabotage: Sabotage) -> Ran {
    let dir = std::env::temp_dir().join(format!("colball-nemesis-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let secret = dir.join("secret");
    std::fs::write(
        &secret,
        "whsec_bmVtZXNpcyBydW4gc2VjcmV0IGtleSAzMmJ5dGVzIQ==\n",
    )
    .expect("a secret");
    let (hooks, calls) = receiver().await;
    let cluster = Arc::new(Cluster::start(bin.clone(), hooks, &secret).await);
    let history = Arc::new(History::default());
    let running = Arc::new(AtomicBool::new(true));
    // The untrusted: a liar on one coordinator, a hung worker on another.
    let liar = keep_running(
        &bin.untrusted,
        cluster.url(1),
        "liar",
        &["--slots", "2", "--lie"],
        running.clone(),
    );
    let hung = keep_running(
        &bin.untrusted,
        cluster.url(2),
        "hung",
        &["--slots", "1"],
        running.clone(),
    );
    let work = Arc::new(Work {
        cluster: cluster.clone(),
        history: history.clone(),
        answers: Mutex::default(),
        hooks,
        seed,
        deadline: Mutex::new(Instant::now() + length + SETTLE),
    });
    // The clients: up to CLIENTS jobs at once, new ones until the end.
    let submitting = Arc::new(AtomicBool::new(true));
    let jobs = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (work, submitting, jobs) = (work.clone(), submitting.clone(), jobs.clone());
            tokio::spawn(async move {
                while submitting.load(Ordering::Relaxed) {
                    let job = jobs.fetch_add(1, Ordering::Relaxed);
                    work.client(job).await;
                }
            })
        })
        .collect();
    // The nemesis.
    // The schedule's quiet times add up to `length`; faults take time of
    // their own, so the run ends at `length` of wall time, wherever it is
    // in the schedule.
    let began = Instant::now();
    let mut faults = Vec::new();
    for step in schedule(seed, length, LEASE) {
        if began.elapsed() + step.after >= length {
            break;
        }
        tokio::time::sleep(step.after).await;
        let what = step.fault.to_string();
        history.record(Event::Fault(what.clone()));
        println!("nemesis {seed}: {what}");
        cluster.inject(&step.fault).await;
        faults.push(what);
    }
    submitting.store(false, Ordering::Relaxed);
    let exited = cluster.heal().await;
    history.record(Event::Healed);
    *lock(&work.deadline) = Instant::now() + SETTLE;
    for c in clients {
        c.await.expect("a client task");
    }
    running.store(false, Ordering::Relaxed);
    let (liars, hangs) = (liar.await.unwrap_or(0), hung.await.unwrap_or(0));
    println!("nemesis {seed}: the liar started {liars} times, the hung worker {hangs}");
    let records = history.records();
    if sabotage == Sabotage::LoseResults {
        let lost = cluster.lose_results(&records).await;
        println!("nemesis {seed}: sabotage: a result group of job seq {lost:?} deleted");
    }
    let answers = lock(&work.answers).clone();
    let stored = read_back(&cluster, &records, &calls, seed).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ran {
        records,
        answers,
        stored,
        faults,
        exited,
    }
}

/// What is stored of each acknowledged job, read once the faults have
/// ended and the clients are done.
pub(super) async fn read_back(
    cluster: &Cluster,
    records: &[super::check::Record],
    calls: &Calls,
    seed: u64,
) -> HashMap<usize, Stored> {
    let mut jobs = Jobs::connect(&cluster.url(0), &Security::default())
        .await
        .expect("coordinator 0 answers");
    let mut stored = HashMap::new();
    let mut cancelled = Vec::new();
    let mut finished = Vec::new();
    for r in records {
        let Event::Submitted { job, id, .. } = &r.event else {
            continue;
        };
        let state = job_state(&mut jobs, id).await;
        if state == State::Cancelled {
            cancelled.push((*job, id.clone()));
        }
        if state == State::Done {
            finished.push(*job);
        }
        let mut s = Stored {
            state: Some(state),
            ..Stored::default()
        };
        if s.state != Some(State::Gone) {
            let stream = jobs.results(id, 0, false).await;
            if let Ok(mut stream) = stream {
                while let Some(Ok(r)) = stream.next().await {
                    s.results.push((r.index, grpc_answer(&r)));
                }
            }
            let count = jobs.get(id).await.map_or(0, |j| j.solved + j.errors);
            s.counts = (count, count);
        }
        if let Some(seq) = seq_of(id)
            && let Ok(db) = cluster.direct().await
        {
            let row = db
                .query_one(
                    "SELECT (SELECT count(*) FROM colball_jobs WHERE seq = $1) \
                       + (SELECT count(*) FROM colball_windows WHERE job = $1) \
                       + (SELECT count(*) FROM colball_puzzle_blocks WHERE job = $1) \
                       + (SELECT count(*) FROM colball_result_groups WHERE job = $1)",
                    &[&seq],
                )
                .await;
            s.rows = row.map_or(u64::MAX, |r| r.get::<_, i64>(0) as u64);
            if s.state != Some(State::Done) {
                s.in_store = in_store(&db, seq).await;
            }
        }
        stored.insert(*job, s);
    }
    // A later job solved whole: a cancelled job's work, had it gone on,
    // would have had its chance.
    if !cancelled.is_empty() {
        let (puzzles, _) = puzzles(seed, usize::MAX / 2);
        if let Ok(accepted) = jobs.submit(&puzzles, None, "after").await
            && let Ok(mut stream) = jobs.results(&accepted.id, 0, true).await
        {
            while stream.next().await.is_some() {}
        }
        for (job, id) in cancelled {
            if let Some(s) = stored.get_mut(&job) {
                s.counts.1 = jobs.get(&id).await.map_or(0, |j| j.solved + j.errors);
            }
        }
    }
    // The finished jobs' webhooks, waited for (each is due at once).
    let deadline = Instant::now() + Duration::from_secs(60);
    let path = |job: usize| format!("/hook/{job}");
    loop {
        let have: Vec<String> = lock(calls).iter().map(|(p, _)| p.clone()).collect();
        if finished.iter().all(|&j| have.contains(&path(j))) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (job, s) in stored.iter_mut() {
        s.webhook_ids = lock(calls)
            .iter()
            .filter(|(p, _)| *p == path(*job))
            .map(|(_, id)| id.clone())
            .collect();
    }
    stored
}

/// Job `seq`'s row and windows as the database holds them, in a line.
pub(super) async fn in_store(db: &tokio_postgres::Client, seq: i64) -> String {
    let row = db
        .query_opt(
            "SELECT format('state %s, puzzles %s, solved %s, errors %s, stored %s; windows: %s', \
               state, puzzles, solved, errors, stored, \
               (SELECT string_agg(format('%s (done %s, filled %s, holder %s, epoch %s, lease %s)', \
                   win, done, filled, coalesce(holder, '-'), epoch, \
                   coalesce((lease_until - now())::text, '-')), ', ' ORDER BY win) \
                FROM colball_windows WHERE job = $1)) \
             FROM colball_jobs WHERE seq = $1",
            &[&seq],
        )
        .await;
    match row {
        Ok(Some(r)) => r.get(0),
        Ok(None) => "no row".into(),
        Err(e) => format!("not read: {e}"),
    }
}

/// Job `id`'s state, asked until the cluster answers (a minute at most).
pub(super) async fn job_state(jobs: &mut Jobs, id: &str) -> State {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match jobs.get(id).await {
            Ok(job) => match v1::JobState::try_from(job.state) {
                Ok(v1::JobState::Done) => return State::Done,
                Ok(v1::JobState::Cancelled) => return State::Cancelled,
                Ok(v1::JobState::Running | v1::JobState::Queued) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return State::Other(format!("{other:?} {}", job.failure)),
            },
            Err(colball_client::remote::ClientError::Status(s))
                if s.code() == tonic::Code::NotFound =>
            {
                return State::Gone;
            }
            Err(e) if Instant::now() >= deadline => return State::Other(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
