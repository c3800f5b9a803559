//! Durable jobs (`colball.v1.Jobs`): submit a puzzle set, get an id, come
//! back for the results. The puzzles and results live in the
//! [`Store`](crate::store::Store); this module runs the jobs.
//!
//! A running job is fed to the scheduler a window at a time: up to
//! [`WINDOW`] of its puzzles without a result are read from the store and
//! admitted as one request of the job's owner and priority class, and the
//! next window follows when those results are in. So a job of millions of
//! puzzles costs the coordinator one window in memory, and it shares the
//! workers with other clients like any request. Results go to the store
//! through one writer task that groups them (one transaction per group);
//! `Results` streams only what is stored. A follower of a running job in
//! input order takes each stored group from the writer ([`Run`]'s live
//! channel) instead of reading back what was just written, and reads the
//! store only for what it may have missed. After a restart, unfinished jobs
//! are taken up again and only puzzles without a stored result are solved.
//!
//! A job runs while it is uploaded: its run starts once its first chunk is
//! stored and follows the chunks as they come ([`Run`]'s upload channel),
//! so the workers solve while the rest of a large job is still arriving.
//! The job is acknowledged (and readable) once every puzzle is stored; an
//! upload that fails stops the run and deletes the job and its results.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colball_proto::puzzle_from_wire;
use colball_proto::{egress, v1};
use colball_solver::order::InOrder;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry as KeyEntry;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::admission::{Caller, Next, Parsed, Terms};
use super::events::BatchEvents;
use super::{Shared, events};
use crate::store::{Entry, JobFlags, JobRow, JobState, Store, StoreError};
use colball_core::Priority;

/// Puzzles of one job admitted to the scheduler at a time.
pub const WINDOW: usize = 8192;

/// Results the writer puts in one transaction at most.
const GROUP: usize = 4096;

/// A job being run: how to stop it, how many of its results are stored,
/// and the results themselves as each group is stored (for `Results`
/// followers).
#[derive(Debug)]
pub struct Run {
    cancel: CancellationToken,
    stored: watch::Sender<u64>,
    live: broadcast::Sender<Live>,
    upload: watch::Sender<Upload>,
    /// The job's key, held while the run lives.
    _key: Option<KeyHold>,
}

/// How far a job's upload is: its puzzles stored so far, of which how many
/// are valid (the others were stored with their error result), and
/// whether every puzzle has arrived (the job is sealed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Upload {
    puzzles: u64,
    valid: u64,
    sealed: bool,
}

/// One stored group's new results of one job, as the writer stored them.
/// A follower that keeps up takes its results from here rather than reading
/// back from the store what was just written.
type Live = Arc<Vec<v1::PuzzleResult>>;

/// Groups a follower may fall behind the writer before it reads the store
/// instead.
const LIVE_GROUPS: usize = 64;

/// Results ahead of the next one due that a follower keeps from the live
/// groups (a slow puzzle holds the rest back); beyond, it reads the store
/// once the slow one is in. Two windows: a job's results come a window at
/// a time, so a follower that keeps up never holds more than one.
const EARLY: usize = 2 * WINDOW;

/// What the writer is sent: a job's result to store.
pub type ToWrite = (i64, egress::PuzzleResult);

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        tracing::error!(error = %e, "job store");
        match e {
            StoreError::Full(_) => Status::resource_exhausted(e.to_string()),
            _ => Status::internal(e.to_string()),
        }
    }
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(StoreError::Task(e.to_string())))
}

/// How long the writer and the followers gather under load: a write (or a
/// read) less than this after the last one waits for the rest of it, so
/// results stream through the store in groups instead of one transaction
/// and one thread hop each. After a pause nothing waits: a lone result is
/// written and read at once.
const COALESCE: Duration = Duration::from_millis(1);

/// Waits, if the last step was less than [`COALESCE`] ago, for the rest of
/// that time.
async fn coalesce(last: Option<tokio::time::Instant>) {
    if let Some(at) = last {
        if at.elapsed() < COALESCE {
            tokio::time::sleep_until(at + COALESCE).await;
        }
    }
}

/// Writes results in groups until every sender is gone.
pub async fn writer(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<ToWrite>) {
    let mut group = Vec::with_capacity(GROUP);
    let mut last_write = None;
    while rx.recv_many(&mut group, GROUP).await > 0 {
        if group.len() < GROUP {
            coalesce(last_write).await;
            while group.len() < GROUP {
                match rx.try_recv() {
                    Ok(item) => group.push(item),
                    Err(_) => break,
                }
            }
        }
        last_write = Some(tokio::time::Instant::now());
        let batch = std::mem::take(&mut group);
        // Results per job: one update of each job's count per group.
        let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
        for (job, _) in &batch {
            *counts.entry(*job).or_default() += 1;
        }
        let store = shared.store.clone();
        let written = blocking(move || Ok((store.put_results(&batch), batch))).await;
        let (outcome, batch) = match written {
            Ok(written) => written,
            Err(e) => (Err(e), Vec::new()),
        };
        match outcome {
            Ok(new) => {
                live(&shared, batch, &new);
                for (job, n) in counts {
                    stored(&shared, job, n);
                }
            }
            Err(e) if batch.is_empty() => {
                // The task itself failed, and took the group with it.
                for job in counts.into_keys() {
                    not_stored(&shared, job, &e).await;
                }
            }
            Err(e) => {
                // Once more a job at a time: only the jobs whose results
                // cannot be stored fail; the others go on.
                tracing::warn!(error = %e, "a group of results not stored; storing it job by job");
                let mut by_job: BTreeMap<i64, Vec<ToWrite>> = BTreeMap::new();
                for item in batch {
                    by_job.entry(item.0).or_default().push(item);
                }
                for (job, results) in by_job {
                    let n = results.len() as u64;
                    let store = shared.store.clone();
                    let written =
                        blocking(move || Ok((store.put_results(&results), results))).await;
                    match written {
                        Ok((Ok(new), results)) => {
                            live(&shared, results, &new);
                            stored(&shared, job, n);
                        }
                        Ok((Err(e), _)) | Err(e) => not_stored(&shared, job, &e).await,
                    }
                }
            }
        }
    }
}

/// Hands the results of a stored group that were new (`new[i]` for
/// `written[i]`) to the followers of their jobs, a group per job; nothing
/// is built for a job nobody follows.
fn live(shared: &Shared, written: Vec<ToWrite>, new: &[bool]) {
    // `None` for a job nobody follows.
    let mut by_job: BTreeMap<i64, Option<Vec<v1::PuzzleResult>>> = BTreeMap::new();
    for ((job, result), _) in written.into_iter().zip(new).filter(|(_, new)| **new) {
        let group = by_job.entry(job).or_insert_with(|| {
            let followed = shared
                .runs
                .get(&job)
                .is_some_and(|run| run.live.receiver_count() > 0);
            followed.then(Vec::new)
        });
        if let Some(group) = group {
            group.push(result.into());
        }
    }
    for (job, results) in by_job {
        let Some(results) = results else { continue };
        if let Some(run) = shared.runs.get(&job) {
            // No receiver left is not an error.
            let _ = run.live.send(Arc::new(results));
        }
    }
}

/// Tells job `job`'s followers that `n` more of its results are stored.
fn stored(shared: &Shared, job: i64, n: u64) {
    if let Some(run) = shared.runs.get(&job) {
        run.stored.send_modify(|stored| *stored += n);
    }
}

/// Fails job `job`, whose results could not be stored.
async fn not_stored(shared: &Arc<Shared>, job: i64, e: &StoreError) {
    tracing::error!(job = %shared.store.job_id(job), error = %e, "results not stored; the job fails");
    fail(shared, job, &format!("results could not be stored: {e}")).await;
}

async fn fail(shared: &Arc<Shared>, job: i64, why: &str) {
    if let Some((_, run)) = shared.runs.remove(&job) {
        run.cancel.cancel();
    }
    let store = shared.store.clone();
    let why = why.to_string();
    let _ = blocking(move || store.set_state(job, JobState::Failed, &why, events::unix_ms())).await;
}

/// Deletes finished jobs older than the retention, at start and then
/// every minute.
pub async fn retention(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shared.shutdown.cancelled() => return,
        }
        let keep = shared.config.job_retention.as_millis() as i64;
        let before = events::unix_ms().saturating_sub(keep);
        let store = shared.store.clone();
        match blocking(move || store.expire(before)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "finished jobs past --job-retention-hours deleted"),
            Err(e) => tracing::warn!(error = %e, "cannot delete old jobs"),
        }
    }
}

/// Refuses more puzzles when the store has reached `--max-store-mib`.
async fn check_room(shared: &Arc<Shared>) -> Result<(), Status> {
    let Some(limit) = shared.config.max_store_bytes else {
        return Ok(());
    };
    let store = shared.store.clone();
    let size = blocking(move || store.size_bytes()).await?;
    if size >= limit {
        return Err(Status::resource_exhausted(format!(
            "the job store holds {} MiB, its limit (--max-store-mib) is {} MiB: delete finished jobs, or wait for their retention to pass",
            size >> 20,
            limit >> 20
        )));
    }
    Ok(())
}

/// Takes up every unfinished job (at start, after a restart).
pub async fn resume(shared: Arc<Shared>) {
    let store = shared.store.clone();
    match blocking(move || store.unfinished()).await {
        Ok(rows) => {
            if !rows.is_empty() {
                tracing::info!(jobs = rows.len(), "taking up unfinished jobs");
            }
            for row in rows {
                let upload = Upload {
                    puzzles: row.puzzles,
                    valid: row.puzzles,
                    sealed: true,
                };
                start(&shared, row.seq, row.solved + row.errors, upload, None);
            }
        }
        Err(e) => tracing::error!(error = %e, "cannot read unfinished jobs"),
    }
}

/// Starts running job `seq`, of which `stored` results are stored and
/// `upload` puzzles.
fn start(shared: &Arc<Shared>, seq: i64, stored: u64, upload: Upload, key: Option<KeyHold>) {
    let run = Run {
        _key: key,
        cancel: CancellationToken::new(),
        stored: watch::channel(stored).0,
        live: broadcast::channel(LIVE_GROUPS).0,
        upload: watch::channel(upload).0,
    };
    let cancel = run.cancel.clone();
    shared.runs.insert(seq, run);
    let span = tracing::info_span!("job", job = %shared.store.job_id(seq));
    shared.spawn(span, feed(shared.clone(), seq, cancel));
}

/// Feeds a job's puzzles to the scheduler a window at a time, until every
/// puzzle has a stored result or the job is cancelled. Watchers see the
/// run as one batch (request `job`) of the puzzles it still had to solve.
async fn feed(shared: Arc<Shared>, seq: i64, cancel: CancellationToken) {
    let store = shared.store.clone();
    let Ok(Some(row)) = blocking({
        let store = store.clone();
        move || store.job(seq)
    })
    .await
    else {
        shared.runs.remove(&seq);
        return;
    };
    let priority = Priority::from_wire(row.priority, Priority::Bulk).unwrap_or(Priority::Bulk);
    if row.state != JobState::Receiving {
        // A job still arriving becomes RUNNING when it is sealed.
        let store = store.clone();
        let _ = blocking(move || store.set_state(seq, JobState::Running, "", 0)).await;
    }
    let remaining = row.puzzles.saturating_sub(row.solved + row.errors);
    let mut events = BatchEvents::accept(
        shared.events.clone(),
        remaining as usize,
        "job",
        &priority.to_string(),
        &row.owner,
    );
    let caller = Caller {
        client: row.owner.clone(),
        priority,
    };
    let outcome = run_job(&shared, &row, &caller, &cancel, &mut events).await;
    events.finish(&outcome);
}

/// The body of [`feed`]; how the run ended, for its watchers.
async fn run_job(
    shared: &Arc<Shared>,
    row: &JobRow,
    caller: &Caller,
    cancel: &CancellationToken,
    events: &mut BatchEvents,
) -> String {
    let seq = row.seq;
    let store = shared.store.clone();
    let stopped = || "cancelled or stopped".to_string();
    let Some((mut stored, mut upload)) = shared
        .runs
        .get(&seq)
        .map(|r| (r.stored.subscribe(), r.upload.subscribe()))
    else {
        return stopped();
    };
    // The valid puzzles the watchers have been told of.
    let mut announced = upload.borrow().valid;
    let mut after: Option<u64> = None;
    // Results handed to the writer (and stored before this run): the
    // next window waits until all but one window of them are stored, so a
    // store slower than the workers holds back the job instead of
    // queueing its results in memory.
    let mut fed = row.solved + row.errors;
    let total = loop {
        if cancel.is_cancelled() || shared.shutting_down() {
            return stopped();
        }
        tokio::select! {
            _ = stored.wait_for(|n| *n + WINDOW as u64 >= fed) => {}
            () = cancel.cancelled() => return stopped(),
        }
        // What has arrived before this read: a chunk stored after it wakes
        // the wait below.
        let arrived = *upload.borrow_and_update();
        events.grow(arrived.valid.saturating_sub(announced));
        announced = announced.max(arrived.valid);
        let window = {
            let store = store.clone();
            blocking(move || store.pending(seq, after, WINDOW)).await
        };
        let window = match window {
            Ok(w) => w,
            Err(e) => {
                fail(shared, seq, &e.to_string()).await;
                return e.to_string();
            }
        };
        let Some(last) = window.last().map(|w| w.0) else {
            if arrived.sealed {
                break arrived.puzzles;
            }
            // Everything stored so far is fed: wait for the next chunk.
            tokio::select! {
                changed = upload.changed() => if changed.is_err() { return stopped() },
                () = cancel.cancelled() => return stopped(),
            }
            continue;
        };
        let batch: Vec<Parsed> = window
            .into_iter()
            .map(|(index, id, puzzle)| Parsed {
                index,
                id: id.into(),
                puzzle: Ok(puzzle),
            })
            .collect();
        let n = batch.len() as u64;
        let outcome = run_window(shared, seq, caller, batch, cancel, events).await;
        // Whether the job is sealed now: the window may have waited out
        // the grace period while the upload ended.
        let sealed = upload.borrow().sealed;
        match outcome {
            Ok(()) => {
                after = Some(last);
                fed += n;
            }
            Err(status)
                if row.fail_fast
                    && sealed
                    && status.code() == tonic::Code::Unavailable
                    && !shared.shutting_down() =>
            {
                // No worker for the grace period, and someone waits.
                fail(shared, seq, status.message()).await;
                return status.message().to_string();
            }
            Err(_) => {
                // No worker (or shutting down, or no room): wait for a
                // worker and retry the window; a job is not given up for
                // lack of workers unless it asked to be, and not before it
                // is acknowledged (then the window is tried again, and
                // fails as it asked).
                let mut workers = shared.workers.subscribe();
                tokio::select! {
                    _ = workers.wait_for(|n| *n > 0) => {}
                    _ = upload.wait_for(|u| u.sealed), if !sealed => {}
                    () = cancel.cancelled() => return stopped(),
                    () = shared.shutdown.cancelled() => return stopped(),
                }
            }
        }
    };
    // Every puzzle was admitted and answered; wait until the last results
    // are stored, then the job is done.
    tokio::select! {
        _ = stored.wait_for(|n| *n >= total) => {}
        () = cancel.cancelled() => return stopped(),
    }
    let _ = blocking(move || store.set_state(seq, JobState::Done, "", events::unix_ms())).await;
    shared.runs.remove(&seq);
    tracing::info!(job = %shared.store.job_id(seq), puzzles = total, "job done");
    "complete".to_string()
}

/// Admits one window as a request of the job's owner and sends its
/// results to the writer. `Err` when the request failed as a whole (no
/// worker, shutdown, no room).
async fn run_window(
    shared: &Arc<Shared>,
    job: i64,
    caller: &Caller,
    batch: Vec<Parsed>,
    cancel: &CancellationToken,
    events: &mut BatchEvents,
) -> Result<(), Status> {
    let terms = Terms {
        rpc: None,
        ordered: false,
        deadline: None,
    };
    let mut admitted = shared.admit(batch, caller, terms).await.map_err(|e| {
        tracing::warn!(error = %e, "job window not admitted");
        Status::from(e)
    })?;
    loop {
        let next = tokio::select! {
            next = admitted.next() => next,
            () = cancel.cancelled() => return Ok(()),
        };
        match next {
            Next::Results(results) => {
                events.results(&results);
                for result in results {
                    let _ = shared.writer.send((job, result));
                }
            }
            Next::Failed(e) => return Err(e.into()),
            Next::Done => return Ok(()),
        }
    }
}

/// Stores a job of `client` from chunks of puzzles and starts it; the
/// job's row once every puzzle is stored. On any failure nothing of it is
/// kept. Shared by the gRPC and HTTP APIs.
pub async fn submit_job(
    shared: &Arc<Shared>,
    client: &str,
    options: v1::JobOptions,
    mut chunks: impl Stream<Item = Result<Vec<v1::Puzzle>, Status>> + Unpin,
) -> Result<JobRow, Status> {
    let priority = Priority::from_wire(options.priority, Priority::Bulk).ok_or_else(|| {
        Status::invalid_argument(format!(
            "field priority: {} names no priority class",
            options.priority
        ))
    })?;
    if options.name.len() > 256 {
        return Err(Status::invalid_argument("field name: at most 256 bytes"));
    }
    if !options.key.is_empty() {
        check_key(&options.key, "options.key")?;
    }
    if options.puzzles > shared.config.max_job_puzzles as u64 {
        return Err(Status::resource_exhausted(format!(
            "field options.puzzles: {} puzzles is more than {}, the limit per job (--max-job-puzzles); split it",
            options.puzzles, shared.config.max_job_puzzles
        )));
    }
    let wire_priority = match priority {
        Priority::Interactive => v1::Priority::Interactive,
        Priority::Normal => v1::Priority::Normal,
        Priority::Bulk => v1::Priority::Bulk,
    } as i32;
    check_room(shared).await?;
    let store = shared.store.clone();
    let (owner, name) = (client.to_string(), options.name.clone());
    let flags = JobFlags {
        fail_fast: options.fail_without_workers,
        any_order: options.any_order,
    };
    let seq =
        blocking(move || store.create(&owner, &name, wire_priority, flags, events::unix_ms()))
            .await?;
    let mut unsealed = Unsealed {
        shared: shared.clone(),
        seq,
        settled: false,
        key: None,
    };
    let limit = shared.config.max_job_puzzles;
    let mut upload = Upload {
        puzzles: 0,
        valid: 0,
        sealed: false,
    };
    let outcome: Result<(), Status> = async {
        if !options.key.is_empty() {
            unsealed.key = Some(take_key(shared, client, &options.key, seq)?);
        }
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            if chunk.is_empty() {
                // Nothing to store (and not the chunk that starts the run).
                continue;
            }
            let count = upload.puzzles;
            if options.puzzles != 0 && count + chunk.len() as u64 > options.puzzles {
                return Err(Status::invalid_argument(format!(
                    "field puzzles: more puzzles than the {} its options announced (field options.puzzles)",
                    options.puzzles
                )));
            }
            if count as usize + chunk.len() > limit {
                return Err(Status::resource_exhausted(format!(
                    "the job holds more than {limit} puzzles, the limit per job (--max-job-puzzles); split it"
                )));
            }
            let entries: Vec<Entry> = chunk
                .into_iter()
                .enumerate()
                .map(|(i, wire)| match puzzle_from_wire(&wire) {
                    Ok(puzzle) => Entry::Puzzle { id: wire.id, puzzle },
                    Err(e) => Entry::Invalid(v1::PuzzleResult::invalid(count + i as u64, &e)),
                })
                .collect();
            let n = entries.len() as u64;
            let invalid: Vec<v1::PuzzleResult> = entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Invalid(r) => Some(r.clone()),
                    Entry::Puzzle { .. } => None,
                })
                .collect();
            let valid = n - invalid.len() as u64;
            check_room(shared).await?;
            let store = shared.store.clone();
            blocking(move || store.add(seq, count, &entries)).await?;
            upload.puzzles += n;
            upload.valid += valid;
            if count == 0 {
                // The run starts with the first chunk.
                start(shared, seq, n - valid, upload, unsealed.key.take());
            } else {
                if let Some(run) = shared.runs.get(&seq) {
                    run.upload.send_replace(upload);
                    // Their error results are stored already: followers
                    // get them as a stored group.
                    if !invalid.is_empty() {
                        let _ = run.live.send(Arc::new(invalid));
                    }
                }
                stored(shared, seq, n - valid);
            }
        }
        if upload.puzzles == 0 {
            return Err(Status::invalid_argument("field puzzles: the job holds no puzzle"));
        }
        if options.puzzles != 0 && upload.puzzles != options.puzzles {
            return Err(Status::aborted(format!(
                "the submission ended after {} of the {} puzzles its options announced (field options.puzzles); nothing of it is kept: submit it again",
                upload.puzzles, options.puzzles
            )));
        }
        Ok(())
    }
    .await;
    if let Err(status) = outcome {
        unsealed.abandon();
        let store = shared.store.clone();
        let _ = blocking(move || store.delete(seq)).await;
        return Err(status);
    }
    let store = shared.store.clone();
    let row = blocking(move || store.seal(seq, events::unix_ms())).await?;
    unsealed.settled = true;
    tracing::info!(job = %row.id(), puzzles = upload.puzzles, client, %priority, "job accepted");
    if let Some(run) = shared.runs.get(&seq) {
        upload.sealed = true;
        run.upload.send_replace(upload);
    }
    Ok(row)
}

/// A job whose upload is under way. If the upload ends without sealing it
/// (an error, or the submission's future dropped because the client went
/// away mid-upload), its run is stopped and, for a dropped upload, the job
/// deleted: nothing of an unacknowledged job is kept, or solved on.
struct Unsealed {
    shared: Arc<Shared>,
    seq: i64,
    /// Nothing is left for the guard to do: the job was sealed, or
    /// abandoned by the upload that deletes it.
    settled: bool,
    /// The job's key until its run holds it.
    key: Option<KeyHold>,
}

impl Unsealed {
    /// Stops the job's run (the caller deletes the job).
    fn abandon(&mut self) {
        self.settled = true;
        if let Some((_, run)) = self.shared.runs.remove(&self.seq) {
            run.cancel.cancel();
        }
    }
}

impl Drop for Unsealed {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.abandon();
        let (store, seq) = (self.shared.store.clone(), self.seq);
        tracing::info!(job = %store.job_id(seq), "submission cut short; its puzzles are dropped");
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(blocking(move || store.delete(seq)));
        }
    }
}

/// Results a follower reads from the store at a time (in order, or in a
/// scan past gaps).
const READ: usize = 1024;

/// What a follower's stream ends with when the coordinator shuts down.
fn shutdown_status() -> Status {
    colball_proto::reason::shutting_down(
        "the coordinator is shutting down; ask again from the last index read",
    )
}

/// What a follower of a running job in input order holds beyond the next
/// result due: results that came ahead of it (from the writer's groups or
/// the store), at most `cap` of them, and where the store may hold
/// results that it has not seen (stored before it subscribed, missed, or
/// let go when full).
#[derive(Clone, Debug)]
struct Ahead {
    order: InOrder<v1::PuzzleResult>,
    scan: Option<u64>,
    cap: usize,
}

impl Ahead {
    /// From `next`, just subscribed: what is already stored is scanned.
    fn new(next: u64, cap: usize) -> Ahead {
        Ahead {
            order: InOrder::starting_at(next),
            scan: Some(next),
            cap,
        }
    }

    /// The next result due, if it is here.
    fn pop(&mut self) -> Option<v1::PuzzleResult> {
        self.order.pop()
    }

    /// The index of the next result due.
    fn next(&self) -> u64 {
        self.order.next()
    }

    /// Where to read the store from now, if it should be read: while there
    /// is room for what a read brings, or when the read would start at the
    /// next result due (which makes room for itself).
    fn scan_from(&self) -> Option<u64> {
        self.scan
            .filter(|&at| self.order.held() < self.cap || at <= self.next())
            .map(|at| at.max(self.next()))
    }

    /// What a read from [`Self::scan_from`] found, in index order, at most
    /// `limit`: fewer means nothing more is stored beyond.
    fn scanned(&mut self, found: Vec<v1::PuzzleResult>, limit: usize) {
        self.scan = (found.len() == limit)
            .then(|| found.last().map(|r| r.index + 1))
            .flatten();
        for r in found {
            self.keep(r);
        }
    }

    /// A group the writer stored.
    fn group(&mut self, results: &[v1::PuzzleResult]) {
        for r in results {
            self.keep(r.clone());
        }
    }

    /// Keeps a result ahead (once). Past the room, the furthest one waits
    /// in the store, to be read once there is room (`next`, the nearest,
    /// always stays).
    fn keep(&mut self, r: v1::PuzzleResult) {
        if self.order.insert(r.index, r) && self.order.held() > self.cap {
            if let Some((far, _)) = self.order.pop_furthest() {
                self.scan = Some(self.scan.map_or(far, |at| at.min(far)));
            }
        }
    }

    /// Groups may have gone by unseen (lagged, or a long quiet): the store
    /// is read again from the next result due.
    fn missed(&mut self) {
        self.scan = Some(self.next());
    }
}

/// Streams a job's stored results in order from `from`; with `follow`,
/// waits for each until the last (see `Results`).
pub fn results_of(
    shared: &Arc<Shared>,
    row: JobRow,
    from: u64,
    follow: bool,
) -> mpsc::Receiver<Result<v1::PuzzleResult, Status>> {
    let (tx, rx) = mpsc::channel(256);
    let span = tracing::info_span!("results", job = %row.id(), from);
    let shared = shared.clone();
    shared.clone().spawn(span, async move {
        let seq = row.seq;
        let mut next = from;
        // The job's size, once its submission is sealed (a job followed
        // by its key while it is submitted grows until then).
        let mut total = (row.state != JobState::Receiving).then_some(row.puzzles);
        // Set once the job has ended: what is stored is read to its end,
        // a batch at a time, and the stream ends.
        let mut ended = false;
        // When the last read caught up with a store that is filling
        // (under load, just after a write), the next one gathers first.
        let mut caught_up_at = None;
        // Following a running job in input order: the writer's groups as
        // they are stored, and what is ahead of the next result due.
        let mut live: Option<(broadcast::Receiver<Live>, Ahead)> = None;
        // While following them, the store is read again every half second
        // whatever the traffic, should a group have gone by unseen.
        let mut safety = tokio::time::interval(Duration::from_millis(500));
        safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if let Some((receiver, ahead)) = live.as_mut() {
                while let Some(r) = ahead.pop() {
                    if tx.send(Ok(r)).await.is_err() {
                        return;
                    }
                }
                next = ahead.next();
                if at_end(&shared, seq, &mut total, next, &tx).await {
                    return;
                }
                if let Some(from) = ahead.scan_from() {
                    let store = shared.store.clone();
                    match blocking(move || store.results_after(seq, from, READ)).await {
                        Ok(found) => ahead.scanned(found, READ),
                        Err(e) => {
                            let _ = tx.send(Err(Status::from(e))).await;
                            return;
                        }
                    }
                    continue;
                }
                let mut ended_run = false;
                tokio::select! {
                    group = receiver.recv() => match group {
                        Ok(group) => ahead.group(&group),
                        Err(broadcast::error::RecvError::Lagged(_)) => ahead.missed(),
                        // The run ended (done, cancelled or failed): what
                        // is left is read from the store.
                        Err(broadcast::error::RecvError::Closed) => ended_run = true,
                    },
                    // Should a group go astray, the store has it.
                    _ = safety.tick() => ahead.missed(),
                    () = tx.closed() => return,
                    () = shared.shutdown.cancelled() => {
                        let _ = tx.send(Err(shutdown_status())).await;
                        return;
                    }
                }
                if ended_run {
                    live = None;
                }
                continue;
            }
            coalesce(caught_up_at).await;
            let read_at = tokio::time::Instant::now();
            let store = shared.store.clone();
            let from = next;
            let any_order = row.any_order;
            let batch = match blocking(move || store.results(seq, from, READ, any_order)).await {
                Ok(b) => b,
                Err(e) => {
                    let _ = tx.send(Err(Status::from(e))).await;
                    return;
                }
            };
            let got = batch.len();
            // Results came, but fewer than asked: they are streaming in.
            // (After an empty read the next result is read at once.)
            caught_up_at = (got > 0 && got < READ).then_some(read_at);
            for r in batch {
                if tx.send(Ok(r)).await.is_err() {
                    return;
                }
            }
            next += got as u64;
            // Every result read: the stream ends now, not after one more
            // (gathering) read.
            if at_end(&shared, seq, &mut total, next, &tx).await {
                return;
            }
            if got > 0 {
                continue;
            }
            if ended || !follow {
                return;
            }
            // Follow the writer's groups from here (input order only);
            // what was stored before the subscription is scanned once.
            if !any_order {
                if let Some(run) = shared.runs.get(&seq) {
                    live = Some((run.live.subscribe(), Ahead::new(next, EARLY)));
                    safety.reset();
                    continue;
                }
            }
            // Wait for more to be stored (or the job to end).
            let stored = shared.runs.get(&seq).map(|r| r.stored.subscribe());
            let Some(mut stored) = stored else {
                // Not running: finished, cancelled or failed (a last look
                // at what is stored, then the end), or about to start.
                let store = shared.store.clone();
                let state = blocking(move || store.job(seq))
                    .await
                    .ok()
                    .flatten()
                    .map(|r| r.state);
                match state {
                    Some(s) if !s.finished() => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    _ => ended = true,
                }
                continue;
            };
            stored.borrow_and_update();
            tokio::select! {
                _ = stored.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(500)) => {}
                () = tx.closed() => return,
                () = shared.shutdown.cancelled() => {
                    let _ = tx.send(Err(shutdown_status())).await;
                    return;
                }
            }
        }
    });
    rx
}

/// Whether a follower at `next` of job `seq` ends here: it has every
/// result (the job's size is learnt once its submission is sealed), or the
/// job followed while it was submitted is gone (its submission was cut
/// short), which it tells the follower on `tx`.
async fn at_end(
    shared: &Arc<Shared>,
    seq: i64,
    total: &mut Option<u64>,
    next: u64,
    tx: &mpsc::Sender<Result<v1::PuzzleResult, Status>>,
) -> bool {
    match size_reached(shared, seq, total, next).await {
        Ok(done) => done,
        Err(status) => {
            let _ = tx.send(Err(status)).await;
            true
        }
    }
}

/// [`at_end`]'s question: `Err` when the job is gone.
async fn size_reached(
    shared: &Arc<Shared>,
    seq: i64,
    total: &mut Option<u64>,
    next: u64,
) -> Result<bool, Status> {
    if total.is_none() {
        let upload = shared.runs.get(&seq).map(|run| *run.upload.borrow());
        *total = match upload {
            Some(upload) => upload.sealed.then_some(upload.puzzles),
            None => {
                let store = shared.store.clone();
                match blocking(move || store.job(seq)).await? {
                    None => return Err(cut_short()),
                    Some(row) if row.state == JobState::Receiving => None,
                    Some(row) => Some(row.puzzles),
                }
            }
        };
    }
    if !total.is_some_and(|t| next >= t) {
        return Ok(false);
    }
    // Every result is out: the stream ends once the job is marked done
    // (just after its last results are stored), so that a client that
    // asks next finds it DONE.
    let live = shared.runs.get(&seq).map(|run| run.live.subscribe());
    if let Some(mut live) = live {
        let ended = async {
            while !matches!(live.recv().await, Err(broadcast::error::RecvError::Closed)) {}
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), ended).await;
    }
    Ok(true)
}

fn cut_short() -> Status {
    Status::aborted(
        "the job's submission was cut short before it was sealed; nothing of it is kept: submit it again",
    )
}

/// How long `Results` by key waits for the submission to begin.
const KEY_WAIT: Duration = Duration::from_secs(10);

/// Checks a job key (`JobOptions.key`, `ResultsRequest.key`).
pub fn check_key(key: &str, field: &str) -> Result<(), Status> {
    let ok = (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "field {field}: 1 to 64 letters, digits, '-' or '_'"
        )))
    }
}

/// The job of `client` submitted with `key`, being submitted or run:
/// waits up to [`KEY_WAIT`] for a submission that has not begun yet.
pub async fn keyed(shared: &Arc<Shared>, key: &str, client: &str) -> Result<JobRow, Status> {
    check_key(key, "key")?;
    let wanted = (client.to_string(), key.to_string());
    let found = tokio::time::timeout(KEY_WAIT, async {
        loop {
            let notified = shared.keys_changed.notified();
            if let Some(seq) = shared.job_keys.get(&wanted).map(|s| *s) {
                return seq;
            }
            notified.await;
        }
    })
    .await;
    let gone = || Status::not_found(format!("no job with key {key:?} is being submitted or run"));
    let seq = found.map_err(|_| gone())?;
    let store = shared.store.clone();
    match blocking(move || store.job(seq)).await? {
        Some(row) if row.owner == client => Ok(row),
        _ => Err(gone()),
    }
}

/// Job keys (`JobOptions.key`) of the jobs being submitted or run, by
/// owner and key.
pub type JobKeys = Arc<DashMap<(String, String), i64>>;

/// A job's hold on its key: while its submission or its run lives (the
/// upload's guard holds it, then the run); dropping it frees the key.
#[derive(Debug)]
pub struct KeyHold {
    keys: JobKeys,
    key: (String, String),
    seq: i64,
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        self.keys.remove_if(&self.key, |_, held| *held == self.seq);
    }
}

/// Names job `seq` of `client` by `key`; ALREADY_EXISTS while another job
/// of the client holds the key.
fn take_key(shared: &Arc<Shared>, client: &str, key: &str, seq: i64) -> Result<KeyHold, Status> {
    let named = (client.to_string(), key.to_string());
    match shared.job_keys.entry(named.clone()) {
        KeyEntry::Occupied(_) => {
            return Err(Status::already_exists(format!(
                "field key: a job of this client with key {key:?} is being submitted or run"
            )));
        }
        KeyEntry::Vacant(free) => {
            free.insert(seq);
        }
    }
    shared.keys_changed.notify_waiters();
    Ok(KeyHold {
        keys: shared.job_keys.clone(),
        key: named,
        seq,
    })
}

fn not_found(id: &str) -> Status {
    Status::not_found(format!(
        "no job {id:?}: it does not exist, was deleted, or belongs to another client"
    ))
}

/// Cancels a job (found with [`owned`]) unless it has finished, and
/// returns it as it is now.
pub async fn cancel_job(shared: &Arc<Shared>, row: JobRow) -> Result<JobRow, Status> {
    if !row.state.finished() {
        if let Some((_, run)) = shared.runs.remove(&row.seq) {
            run.cancel.cancel();
        }
        let store = shared.store.clone();
        let seq = row.seq;
        blocking(move || store.set_state(seq, JobState::Cancelled, "", events::unix_ms())).await?;
    }
    let store = shared.store.clone();
    let seq = row.seq;
    Ok(blocking(move || store.job(seq)).await?.unwrap_or(row))
}

/// Cancels a job of `client` if needed and deletes it.
pub async fn delete_job(shared: &Arc<Shared>, id: &str, client: &str) -> Result<(), Status> {
    let row = owned(shared, id, client).await?;
    if let Some((_, run)) = shared.runs.remove(&row.seq) {
        run.cancel.cancel();
    }
    let store = shared.store.clone();
    let seq = row.seq;
    blocking(move || store.delete(seq)).await?;
    Ok(())
}

/// The job `id` if it belongs to `client`; NOT_FOUND otherwise (whether it
/// exists or not, so ids do not leak).
pub async fn owned(shared: &Arc<Shared>, id: &str, client: &str) -> Result<JobRow, Status> {
    let seq = shared.store.job_seq(id).ok_or_else(|| not_found(id))?;
    let store = shared.store.clone();
    let row = blocking(move || store.job(seq)).await?;
    match row {
        Some(row) if row.owner == client && row.state != JobState::Receiving => Ok(row),
        _ => Err(not_found(id)),
    }
}

/// The store for a coordinator's config: capped at twice
/// `--max-store-mib`, room for the results of jobs admitted under it.
pub fn open_store(
    dir: Option<&std::path::Path>,
    limit: Option<u64>,
) -> Result<Arc<Store>, StoreError> {
    Store::open(dir, limit.map(|l| l.saturating_mul(2))).map(Arc::new)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn result(index: u64) -> v1::PuzzleResult {
        v1::PuzzleResult {
            index,
            ..v1::PuzzleResult::default()
        }
    }

    /// One step of a job's life as a follower sees it.
    #[derive(Clone, Debug)]
    enum Op {
        /// The writer stores the results of these (not yet stored) picks,
        /// and the group reaches the follower or is lost (lag, reported).
        Store { picks: Vec<usize>, delivered: bool },
        /// The follower passes on what is due.
        Pop,
        /// The follower reads the store, if it wants to.
        Scan,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (proptest::collection::vec(0usize..1000, 1..12), proptest::bool::weighted(0.8))
                .prop_map(|(picks, delivered)| Op::Store { picks, delivered }),
            2 => Just(Op::Pop),
            2 => Just(Op::Scan),
        ]
    }

    /// The follower's steps until it can take none: pass on, then read.
    fn settle(ahead: &mut Ahead, stored: &BTreeSet<u64>, limit: usize, emitted: &mut Vec<u64>) {
        loop {
            while let Some(r) = ahead.pop() {
                emitted.push(r.index);
            }
            let Some(from) = ahead.scan_from() else {
                return;
            };
            let found = stored
                .range(from..)
                .take(limit)
                .map(|&i| result(i))
                .collect();
            ahead.scanned(found, limit);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever the order results are stored in, groups lost or not,
        /// and however small the room ahead: the follower passes on every
        /// result once, in input order, holds at most its room, and never
        /// waits for a result already stored (no timer needed).
        #[test]
        fn a_follower_passes_on_every_stored_result_once_in_order(
            total in 1u64..60,
            before in proptest::collection::vec(0usize..1000, 0..20),
            ops in proptest::collection::vec(op(), 0..60),
            cap in 1usize..8,
            limit in 1usize..6,
        ) {
            let mut stored = BTreeSet::new();
            let mut unstored: Vec<u64> = (0..total).collect();
            let mut take = |picks: &[usize], stored: &mut BTreeSet<u64>| -> Vec<u64> {
                let mut group = Vec::new();
                for &p in picks {
                    if unstored.is_empty() {
                        break;
                    }
                    let i = unstored.remove(p % unstored.len());
                    stored.insert(i);
                    group.push(i);
                }
                group
            };
            // Stored before the follower subscribed.
            take(&before, &mut stored);
            let mut ahead = Ahead::new(0, cap);
            let mut emitted = Vec::new();
            for op in ops {
                match op {
                    Op::Store { picks, delivered } => {
                        let group: Vec<_> = take(&picks, &mut stored).into_iter().map(result).collect();
                        if delivered {
                            ahead.group(&group);
                        } else {
                            ahead.missed();
                        }
                    }
                    Op::Pop => {
                        while let Some(r) = ahead.pop() {
                            emitted.push(r.index);
                        }
                    }
                    Op::Scan => {
                        if let Some(from) = ahead.scan_from() {
                            let found = stored.range(from..).take(limit).map(|&i| result(i)).collect();
                            ahead.scanned(found, limit);
                        }
                    }
                }
                prop_assert!(ahead.order.held() <= cap, "{} held ahead", ahead.order.held());
                prop_assert_eq!(ahead.next(), emitted.len() as u64);
                prop_assert!(emitted.iter().enumerate().all(|(i, &e)| e == i as u64 && stored.contains(&e)));
                // Nothing stored and due would wait, were the follower to
                // settle now (on a copy: the run goes on unsettled).
                let mut probe = Vec::new();
                settle(&mut ahead.clone(), &stored, limit, &mut probe);
                let due = (emitted.len() as u64..).take_while(|i| stored.contains(i)).count();
                prop_assert_eq!(probe.len(), due, "stored results left waiting");
            }
            // The rest, stored in one group that arrives.
            let rest: Vec<_> = take(&[0; 1000], &mut stored).into_iter().map(result).collect();
            ahead.group(&rest);
            settle(&mut ahead, &stored, limit, &mut emitted);
            prop_assert_eq!(emitted, (0..total).collect::<Vec<_>>());
        }
    }
}
