//! Running a job: its puzzles are fed to the scheduler a window at a time
//! (up to [`WINDOW`] of those without a result, read from the store and
//! admitted as one request of the job's owner and priority class), and
//! the next window follows when those results are in. So a job of
//! millions of puzzles costs the coordinator one window in memory, and it
//! shares the workers with other clients like any request.

use std::sync::Arc;
use std::time::Duration;

use colball_core::Priority;
use colball_proto::egress;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::Jobs;
use super::keys::KeyHold;
use super::store::{JobRow, JobState};
use crate::coordinator::admission::{Caller, Next, Parsed, Terms};
use crate::coordinator::events::{self, BatchEvents};
use crate::error::ServerError;

/// Puzzles of one job admitted to the scheduler at a time.
pub const WINDOW: usize = 8192;

/// Groups a follower may fall behind the writer before it reads the store
/// instead.
const LIVE_GROUPS: usize = 64;

/// A job being run: how to stop it, how many of its results are stored,
/// and the results themselves as each group is stored (for followers).
#[derive(Debug)]
pub struct Run {
    pub(super) cancel: CancellationToken,
    pub(super) stored: watch::Sender<u64>,
    pub(super) live: broadcast::Sender<Live>,
    pub(super) upload: watch::Sender<Upload>,
    /// The job's key, held while the run lives.
    _key: Option<KeyHold>,
}

/// How far a job's upload is: its puzzles stored so far, of which how many
/// are valid (the others were stored with their error result), and
/// whether every puzzle has arrived (the job is sealed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Upload {
    pub puzzles: u64,
    pub valid: u64,
    pub sealed: bool,
}

/// One stored group's new results of one job, as the writer stored them.
/// A follower that keeps up takes its results from here rather than reading
/// back from the store what was just written.
pub(super) type Live = Arc<Vec<egress::PuzzleResult>>;

/// How a run ended, for its watchers.
const STOPPED: &str = "cancelled or stopped";

impl Jobs {
    /// Starts running job `seq`, of which `stored` results are stored and
    /// `upload` puzzles.
    pub(super) fn start_run(
        self: &Arc<Self>,
        seq: i64,
        stored: u64,
        upload: Upload,
        key: Option<KeyHold>,
    ) {
        let run = Run {
            _key: key,
            cancel: CancellationToken::new(),
            stored: watch::channel(stored).0,
            live: broadcast::channel(LIVE_GROUPS).0,
            upload: watch::channel(upload).0,
        };
        let cancel = run.cancel.clone();
        self.runs.insert(seq, run);
        let span = tracing::info_span!("job", job = %self.store.job_id(seq));
        self.scheduler.spawn(span, self.clone().feed(seq, cancel));
    }

    /// Stops job `seq`'s run, if it runs.
    pub(super) fn stop(&self, seq: i64) {
        if let Some((_, run)) = self.runs.remove(&seq) {
            run.cancel.cancel();
        }
    }

    /// Stops a job's run and marks it failed, saying why.
    pub(super) async fn fail(&self, job: i64, why: &str) {
        self.stop(job);
        let now_ms = events::unix_ms();
        let _ = self
            .patiently("failing a job", None, || {
                self.store.set_state(job, JobState::Failed, why, now_ms)
            })
            .await;
    }

    /// Takes up every unfinished job (at start, after a restart).
    pub(super) async fn resume(self: Arc<Self>) {
        match self
            .patiently("taking up unfinished jobs", None, || {
                self.store.unfinished()
            })
            .await
        {
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
                    self.start_run(row.seq, row.solved + row.errors, upload, None);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read unfinished jobs"),
        }
    }

    /// Deletes finished jobs older than the retention, at start and then
    /// every minute.
    pub(super) async fn retention(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.scheduler.shutdown.cancelled() => return,
            }
            let keep = self.limits.retention.as_millis() as i64;
            let before = events::unix_ms().saturating_sub(keep);
            match self.store.expire(before).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(jobs = n, "finished jobs past --job-retention-hours deleted")
                }
                Err(e) => tracing::warn!(error = %e, "cannot delete old jobs"),
            }
        }
    }

    /// Feeds a job's puzzles to the scheduler a window at a time, until
    /// every puzzle has a stored result or the job is cancelled. Watchers
    /// see the run as one batch (request `job`) of the puzzles it still
    /// had to solve.
    async fn feed(self: Arc<Self>, seq: i64, cancel: CancellationToken) {
        let Ok(Some(row)) = self
            .patiently("starting a job's run", Some(&cancel), || {
                self.store.job(seq)
            })
            .await
        else {
            self.runs.remove(&seq);
            return;
        };
        let priority = Priority::from_wire(row.priority, Priority::Bulk).unwrap_or(Priority::Bulk);
        if row.state != JobState::Receiving {
            // A job still arriving becomes RUNNING when it is sealed.
            let _ = self.store.set_state(seq, JobState::Running, "", 0).await;
        }
        let mut events = BatchEvents::accept(
            self.scheduler.events().clone(),
            row.remaining() as usize,
            "job",
            &priority.to_string(),
            &row.owner,
        );
        let caller = Caller {
            client: row.owner.clone(),
            priority,
        };
        let outcome = self.run(&row, &caller, &cancel, &mut events).await;
        events.finish(&outcome);
    }

    /// The body of [`Self::feed`]; how the run ended, for its watchers.
    async fn run(
        &self,
        row: &JobRow,
        caller: &Caller,
        cancel: &CancellationToken,
        events: &mut BatchEvents,
    ) -> String {
        let seq = row.seq;
        let Some((mut stored, mut upload)) = self
            .runs
            .get(&seq)
            .map(|r| (r.stored.subscribe(), r.upload.subscribe()))
        else {
            return STOPPED.into();
        };
        // The valid puzzles the watchers have been told of.
        let mut announced = upload.borrow().valid;
        let mut after: Option<u64> = None;
        // Results handed to the writer (and stored before this run): the
        // next window waits until all but one window of them are stored,
        // so a store slower than the workers holds back the job instead
        // of queueing its results in memory.
        let mut fed = row.solved + row.errors;
        let total = loop {
            if cancel.is_cancelled() || self.scheduler.shutting_down() {
                return STOPPED.into();
            }
            tokio::select! {
                _ = stored.wait_for(|n| *n + WINDOW as u64 >= fed) => {}
                () = cancel.cancelled() => return STOPPED.into(),
            }
            // What has arrived before this read: a chunk stored after it
            // wakes the wait below.
            let arrived = *upload.borrow_and_update();
            events.grow(arrived.valid.saturating_sub(announced));
            announced = announced.max(arrived.valid);
            let window = match self
                .patiently("reading a job's puzzles", Some(cancel), || {
                    self.store.pending(seq, after, WINDOW)
                })
                .await
            {
                Ok(w) => w,
                // Given up waiting for the store: the run was stopped.
                Err(e) if e.passing() => return STOPPED.into(),
                Err(e) => {
                    self.fail(seq, &e.to_string()).await;
                    return e.to_string();
                }
            };
            let Some(last) = window.last().map(|w| w.0) else {
                if arrived.sealed {
                    break arrived.puzzles;
                }
                // Everything stored so far is fed: wait for the next chunk.
                tokio::select! {
                    changed = upload.changed() => if changed.is_err() { return STOPPED.into() },
                    () = cancel.cancelled() => return STOPPED.into(),
                }
                continue;
            };
            let batch: Vec<Parsed> = window
                .into_iter()
                .map(|(index, id, puzzle)| Parsed {
                    index,
                    id,
                    puzzle: Ok(puzzle),
                })
                .collect();
            let n = batch.len() as u64;
            let outcome = self.run_window(seq, caller, batch, cancel, events).await;
            // Whether the job is sealed now: the window may have waited
            // out the grace period while the upload ended.
            let sealed = upload.borrow().sealed;
            match outcome {
                Ok(()) => {
                    after = Some(last);
                    fed += n;
                }
                Err(ServerError::NoWorkers(e)) if row.fail_fast && sealed => {
                    // No worker for the grace period, and someone waits.
                    let why = e.to_string();
                    self.fail(seq, &why).await;
                    return why;
                }
                Err(_) => {
                    // No worker (or shutting down, or no room): wait for a
                    // worker and retry the window; a job is not given up
                    // for lack of workers unless it asked to be, and not
                    // before it is acknowledged (then the window is tried
                    // again, and fails as it asked).
                    let mut workers = self.scheduler.workers.subscribe();
                    tokio::select! {
                        _ = workers.wait_for(|n| *n > 0) => {}
                        _ = upload.wait_for(|u| u.sealed), if !sealed => {}
                        () = cancel.cancelled() => return STOPPED.into(),
                        () = self.scheduler.shutdown.cancelled() => return STOPPED.into(),
                    }
                }
            }
        };
        // Every puzzle was admitted and answered; wait until the last
        // results are stored, then the job is done.
        tokio::select! {
            _ = stored.wait_for(|n| *n >= total) => {}
            () = cancel.cancelled() => return STOPPED.into(),
        }
        let done_ms = events::unix_ms();
        let _ = self
            .patiently("marking a job done", Some(cancel), || {
                self.store.set_state(seq, JobState::Done, "", done_ms)
            })
            .await;
        self.runs.remove(&seq);
        tracing::info!(job = %self.store.job_id(seq), puzzles = total, "job done");
        "complete".to_string()
    }

    /// Admits one window as a request of the job's owner and sends its
    /// results to the writer. `Err` when the request failed as a whole (no
    /// worker, shutdown, no room).
    async fn run_window(
        &self,
        job: i64,
        caller: &Caller,
        batch: Vec<Parsed>,
        cancel: &CancellationToken,
        events: &mut BatchEvents,
    ) -> Result<(), ServerError> {
        let terms = Terms {
            rpc: None,
            ordered: false,
            deadline: None,
        };
        let mut admitted = self
            .scheduler
            .admit(batch, caller, terms)
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "job window not admitted"))?;
        loop {
            let next = tokio::select! {
                next = admitted.next() => next,
                () = cancel.cancelled() => return Ok(()),
            };
            match next {
                Next::Results(results) => {
                    events.results(&results);
                    for result in results {
                        let _ = self.writer.send((job, result));
                    }
                }
                Next::Failed(e) => return Err(e),
                Next::Done => return Ok(()),
            }
        }
    }
}
