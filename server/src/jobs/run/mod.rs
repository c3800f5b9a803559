//! Running a job: its puzzles are fed to the scheduler a window at a time
//! (up to [`WINDOW`] of those without a result, read from the store and
//! admitted as one request of the job's owner and priority class), and
//! the next window follows when those results are in. So a job of
//! millions of puzzles costs the coordinator one window in memory, and it
//! shares the workers with other clients like any request.
//!
//! On a store shared by several coordinators, every coordinator runs
//! every unfinished job (it learns of them from the store: [`Jobs::share`]),
//! and a run claims its windows from the store under a lease: each window
//! is solved by one coordinator at a time, a job by all that have workers,
//! and a window whose coordinator died is taken over when its lease runs
//! out. Between jobs, each coordinator's scheduler keeps the class order
//! and the fair share as for any requests.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use colball_proto::egress;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

mod steps;

use super::Jobs;
use super::keys::KeyHold;
pub use super::store::WINDOW;
use super::store::{Claim, Finished, JobRow, JobState, SharedStore, StoreError, ToWrite, Wake};
use crate::coordinator::admission::{Next, Parsed, Requester, Terms};
use crate::coordinator::events::{self, RequestEvents};
use crate::error::ServerError;
use steps::{Action, Claimed, Event, Outcome, Taken, Until, Watched, WindowLoop};

/// How often a coordinator on a shared store renews its leases and looks
/// for jobs begun or ended elsewhere (hints from the store come sooner),
/// and a run with no free window looks again.
const SHARE_TICK: Duration = Duration::from_secs(1);

/// A coordinator on a shared store reads the unfinished jobs at most this
/// often on hints of jobs begun or ended elsewhere.
const SYNC_PACE: Duration = Duration::from_millis(50);

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
    pub(super) upload: watch::Sender<UploadProgress>,
    /// Hints that results of the job were stored by another coordinator
    /// (on a shared store) in the windows `.0..=.1`, to wake its followers
    /// here.
    pub(super) elsewhere: broadcast::Sender<(u64, u64)>,
    /// The job's owner, and whether its results are kept in the order they
    /// were stored (for its readers here).
    pub(super) owner: String,
    pub(super) any_order: bool,
    /// The job's key, held while the run lives.
    _key: Option<KeyHold>,
    /// The run's span (`job`): its windows' and its results' writes are
    /// its children.
    pub(super) span: tracing::Span,
}

/// How far a job's upload is: its puzzles stored so far, of which how many
/// are valid (the others were stored with their error result), and
/// whether every puzzle has arrived (the job is sealed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct UploadProgress {
    pub puzzles: u64,
    pub valid: u64,
    pub sealed: bool,
}

/// One stored group's new results of one job, as the writer stored them.
/// A follower that keeps up takes its results from here rather than reading
/// back from the store what was just written.
pub(super) type Live = Arc<Vec<egress::PuzzleResult>>;

/// What a run's waits watch: its results stored, its upload, and the
/// workers connected.
struct Watch {
    stored: watch::Receiver<u64>,
    upload: watch::Receiver<UploadProgress>,
    workers: watch::Receiver<usize>,
}

impl Watch {
    /// The counts now.
    fn seen(&mut self) -> Watched {
        Watched {
            stored: *self.stored.borrow_and_update(),
            upload: *self.upload.borrow_and_update(),
            workers: *self.workers.borrow_and_update(),
        }
    }
}

/// Where a run's windows come from: a store of this coordinator's own
/// ([`LocalWindows`]) or one shared with other coordinators ([`SharedWindows`]). The
/// window loop ([`steps`]) is the same over both.
pub(super) trait Source: Send {
    /// The next window, `stored` of this run's results being stored.
    fn take(&mut self, stored: u64) -> impl Future<Output = Result<Taken, StoreError>> + Send;
    /// The window fed, up to index `last`, has all its results stored once
    /// `fed` of this run's are.
    fn record(&mut self, last: u64, claimed: Option<Claimed>, fed: u64);
    /// Lets the windows held go back to the store (a window whose request
    /// failed), waiting for the store unless `cancel` fires.
    fn let_go(&mut self, cancel: &CancellationToken) -> impl Future<Output = ()> + Send;
    /// Marks the job done, waiting for the store unless `cancel` fires.
    fn complete(&mut self, cancel: &CancellationToken) -> impl Future<Output = ()> + Send;
    /// The run stopped short of completing: lets go of what it holds.
    fn stopped(&mut self) -> impl Future<Output = ()> + Send;
}

/// A store of this coordinator's own: the next puzzles without a result
/// after the last window's (`after`), in index order.
struct LocalWindows<'a> {
    jobs: &'a Jobs,
    job: i64,
    after: Option<u64>,
}

impl Source for LocalWindows<'_> {
    async fn take(&mut self, _stored: u64) -> Result<Taken, StoreError> {
        let window = self
            .jobs
            .store
            .pending(self.job, self.after, WINDOW)
            .await?;
        Ok(if window.is_empty() {
            Taken::Empty
        } else {
            Taken::Window(window, None)
        })
    }

    fn record(&mut self, last: u64, _claimed: Option<Claimed>, _fed: u64) {
        self.after = Some(last);
    }

    async fn let_go(&mut self, _cancel: &CancellationToken) {}

    async fn complete(&mut self, cancel: &CancellationToken) {
        let (jobs, job) = (self.jobs, self.job);
        let done_ms = events::unix_ms();
        let _ = jobs
            .patiently("marking a job done", Some(cancel), || {
                jobs.store.set_state(job, JobState::Done, "", done_ms)
            })
            .await;
    }

    async fn stopped(&mut self) {}
}

/// A store shared with other coordinators: windows claimed under a lease;
/// `ran` are those this run fed (window and claim's epoch), each with the
/// count of fed results at which its own are all stored (then it is
/// finished).
struct SharedWindows<'a> {
    jobs: &'a Jobs,
    store: &'a dyn SharedStore,
    job: i64,
    ran: VecDeque<(u64, u64, u64)>,
}

impl Source for SharedWindows<'_> {
    /// First finishes the windows whose results are all stored, then
    /// claims the next, in one call.
    async fn take(&mut self, stored: u64) -> Result<Taken, StoreError> {
        let (jobs, store) = (self.jobs, self.store);
        let finishing: Vec<(u64, u64)> = self
            .ran
            .iter()
            .take_while(|&&(_, _, at)| stored >= at)
            .map(|&(win, epoch, _)| (win, epoch))
            .collect();
        let (claim, finished) = store
            .finish_and_claim(self.job, store.holder(), jobs.limits.lease, &finishing)
            .await?;
        self.ran.drain(..finishing.len());
        for (win, how) in finished {
            if how == Finished::Lost {
                jobs.sharing.windows_lost.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    window = win,
                    "lost a window: its lease ran out (this coordinator was stopped or cut off) and another took it over; what was solved here for it was refused"
                );
            }
        }
        Ok(match claim {
            Claim::Window {
                win,
                epoch,
                pending,
                took_over,
            } => {
                let sharing = &jobs.sharing;
                sharing.windows_claimed.fetch_add(1, Ordering::Relaxed);
                if took_over {
                    sharing.windows_taken_over.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(window = win, "took over a window whose lease ran out");
                }
                Taken::Window(pending, Some((win, epoch)))
            }
            // Every window done, ours too (each of its results is stored,
            // by this run or a taker's).
            Claim::Done => Taken::Empty,
            // The rest is held elsewhere (or is ours, its results not
            // stored yet): look again when the first of ours can be
            // finished.
            Claim::Busy => Taken::Busy {
                due: self.ran.front().map(|&(_, _, at)| at),
            },
        })
    }

    fn record(&mut self, _last: u64, claimed: Option<Claimed>, fed: u64) {
        if let Some((win, epoch)) = claimed {
            self.ran.push_back((win, epoch, fed));
        }
    }

    async fn let_go(&mut self, cancel: &CancellationToken) {
        let (jobs, store, job) = (self.jobs, self.store, self.job);
        let _ = jobs
            .patiently("letting go of a job's windows", Some(cancel), || {
                store.release(job, store.holder())
            })
            .await;
    }

    async fn complete(&mut self, cancel: &CancellationToken) {
        let (jobs, store, job) = (self.jobs, self.store, self.job);
        let done_ms = events::unix_ms();
        let _ = jobs
            .patiently("marking a job done", Some(cancel), || {
                store.complete(job, done_ms)
            })
            .await;
    }

    async fn stopped(&mut self) {
        // What this run held is anyone's at once.
        let _ = self.store.release(self.job, self.store.holder()).await;
    }
}

impl Jobs {
    /// Starts running job `seq` of `owner`, of which `stored` results are
    /// stored and `upload` puzzles; `row` is its row if just read (else the
    /// run reads it). Its span (`job`) is a child of its submit's, whose
    /// `traceparent` is `trace`, wherever and whenever it runs.
    pub(super) fn start_run(
        self: &Arc<Self>,
        (seq, owner, any_order): (i64, &str, bool),
        stored: u64,
        upload: UploadProgress,
        key: Option<KeyHold>,
        (row, trace): (Option<JobRow>, Option<&str>),
    ) {
        let span = tracing::info_span!(parent: None, "job", job = %self.store.job_id(seq));
        if let Some(trace) = trace {
            crate::telemetry::context::adopt_traceparent(&span, trace);
        }
        let run = Run {
            span: span.clone(),
            owner: owner.to_string(),
            any_order,
            _key: key,
            cancel: CancellationToken::new(),
            stored: watch::channel(stored).0,
            live: broadcast::channel(LIVE_GROUPS).0,
            upload: watch::channel(upload).0,
            elsewhere: broadcast::channel(LIVE_GROUPS).0,
        };
        let cancel = run.cancel.clone();
        match self.runs.entry(seq) {
            // Running already (taken up twice at once).
            dashmap::Entry::Occupied(_) => return,
            dashmap::Entry::Vacant(v) => {
                v.insert(run);
            }
        }
        self.lifecycle
            .spawn(span, self.clone().feed(seq, cancel, row));
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

    /// Takes up every unfinished job of a store of its own (at start,
    /// after a restart).
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
                    self.take_up(row);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read unfinished jobs"),
        }
    }

    /// The store's maintenance, by its leader (on a store of its own,
    /// this coordinator): deletes finished jobs older than the retention,
    /// and on a shared store lets go of windows whose lease ran out and
    /// deletes uploads whose coordinator died. At start, then every quarter
    /// of the retention (or, on a shared store, of the lease if shorter),
    /// 1 s to a minute.
    pub(super) async fn retention(self: Arc<Self>) {
        // A shared store's leases want looking at more often than the
        // retention does.
        let mut period = self.limits.retention;
        if self.store.shared().is_some() {
            period = period.min(self.limits.lease);
        }
        let every = (period / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut tick = tokio::time::interval(every);
        while self.next_lead(&mut tick).await {
            let keep = self.limits.retention.as_millis() as i64;
            let before = events::unix_ms().saturating_sub(keep);
            match self.store.expire(before).await {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(jobs = n, "finished jobs past --job-retention-hours deleted")
                }
                Err(e) => tracing::warn!(error = %e, "cannot delete old jobs"),
            }
            if let Some(shared) = self.store.shared() {
                match shared.rescue().await {
                    Ok(r) => {
                        let s = &self.sharing;
                        s.windows_rescued.fetch_add(r.windows, Ordering::Relaxed);
                        s.uploads_rescued.fetch_add(r.uploads, Ordering::Relaxed);
                        if r.windows > 0 {
                            tracing::info!(
                                windows = r.windows,
                                "windows whose lease ran out let go"
                            );
                        }
                        if r.uploads > 0 {
                            tracing::info!(
                                jobs = r.uploads,
                                "uploads whose coordinator died deleted"
                            );
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot rescue windows"),
                }
            }
        }
    }

    /// On a shared store: renews this coordinator's leases, runs the jobs
    /// begun elsewhere and stops the runs of jobs ended elsewhere, every
    /// [`SHARE_TICK`] and on the store's hints; passes hints of results
    /// stored elsewhere on to the followers here.
    pub(super) async fn share(self: Arc<Self>) {
        let Some(shared) = self.store.shared() else {
            return;
        };
        let mut wakes = shared.wakes();
        let mut tick = tokio::time::interval(SHARE_TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut synced_at = None;
        loop {
            let renew = tokio::select! {
                _ = tick.tick() => true,
                wake = wakes.recv() => match wake {
                    Ok(Wake::Results { job, first, last }) => {
                        self.results_elsewhere(job, first, last);
                        continue;
                    }
                    Ok(Wake::Jobs) | Err(broadcast::error::RecvError::Lagged(_)) => false,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                () = self.lifecycle.cancelled() => return,
            };
            if renew {
                if let Err(e) = shared.renew(shared.holder(), self.limits.lease).await {
                    tracing::warn!(error = %e, "cannot renew this coordinator's leases");
                }
            } else {
                // Hints of jobs close together make one read: the pause,
                // then what came meanwhile.
                super::writer::coalesce(synced_at, SYNC_PACE).await;
                loop {
                    match wakes.try_recv() {
                        Ok(Wake::Results { job, first, last }) => {
                            self.results_elsewhere(job, first, last);
                        }
                        Ok(Wake::Jobs) | Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                        Err(_) => break,
                    }
                }
            }
            synced_at = Some(tokio::time::Instant::now());
            if let Err(e) = self.sync().await {
                tracing::debug!(error = %e, "cannot look for jobs begun or ended elsewhere");
            }
        }
    }

    /// Tells the followers here of job `job` that results of it were stored
    /// by another coordinator in its windows `first..=last`.
    fn results_elsewhere(&self, job: i64, first: u64, last: u64) {
        if let Some(run) = self.runs.get(&job) {
            let _ = run.elsewhere.send((first, last));
        }
    }

    /// Starts a run of each unfinished job not running here, and stops the
    /// runs of jobs finished or deleted (by another coordinator): one read
    /// of the unfinished jobs.
    async fn sync(self: &Arc<Self>) -> Result<(), StoreError> {
        // Runs of sealed jobs (a job being uploaded here is not stopped),
        // taken before the read: a job is sealed in the store before its
        // run is told, so each of these was unfinished in the store then.
        let running: Vec<i64> = self
            .runs
            .iter()
            .filter(|r| r.upload.borrow().sealed)
            .map(|r| *r.key())
            .collect();
        let mut live = HashSet::new();
        for row in self.store.unfinished().await? {
            live.insert(row.seq);
            self.take_up(row);
        }
        for seq in running.into_iter().filter(|s| !live.contains(s)) {
            self.stop(seq);
        }
        Ok(())
    }

    /// Starts running an acknowledged, unfinished job (all its puzzles
    /// stored), unless it runs here already.
    fn take_up(self: &Arc<Self>, row: JobRow) {
        if self.runs.contains_key(&row.seq) {
            return;
        }
        let upload = UploadProgress {
            puzzles: row.puzzles,
            valid: row.puzzles,
            sealed: true,
        };
        self.start_run(
            (row.seq, &row.owner, row.any_order),
            row.solved + row.errors,
            upload,
            None,
            (Some(row.clone()), row.trace.as_deref()),
        );
    }

    /// Feeds a job's puzzles to the scheduler a window at a time, until
    /// every puzzle has a stored result or the job is cancelled. Watchers
    /// see the run as one batch (request `job`) of the puzzles it still
    /// had to solve. `known` is the job's row if just read.
    async fn feed(self: Arc<Self>, seq: i64, cancel: CancellationToken, known: Option<JobRow>) {
        let row = match known {
            Some(row) => row,
            None => {
                let Ok(Some(row)) = self
                    .patiently("starting a job's run", Some(&cancel), || {
                        self.store.job(seq)
                    })
                    .await
                else {
                    self.runs.remove(&seq);
                    return;
                };
                row
            }
        };
        let priority = row.priority;
        if !matches!(row.state, JobState::Receiving | JobState::Running) {
            // A job still arriving becomes RUNNING when it is sealed.
            let _ = self.store.set_state(seq, JobState::Running, "", 0).await;
        }
        let mut events = RequestEvents::accept(
            self.scheduler.events().clone(),
            row.remaining() as usize,
            "job",
            &priority.to_string(),
            &row.owner,
        );
        let caller = Requester {
            client: row.owner.clone(),
            priority,
        };
        let outcome = self.run(&row, &caller, &cancel, &mut events).await;
        events.finish(&outcome.to_string());
    }

    /// The body of [`Self::feed`]; how the run ended, for its watchers.
    async fn run(
        &self,
        row: &JobRow,
        caller: &Requester,
        cancel: &CancellationToken,
        events: &mut RequestEvents,
    ) -> Outcome {
        match self.store.shared() {
            Some(store) => {
                let mut source = SharedWindows {
                    jobs: self,
                    store,
                    job: row.seq,
                    ran: VecDeque::new(),
                };
                self.run_windows(row, caller, cancel, events, &mut source)
                    .await
            }
            None => {
                let mut source = LocalWindows {
                    jobs: self,
                    job: row.seq,
                    after: None,
                };
                self.run_windows(row, caller, cancel, events, &mut source)
                    .await
            }
        }
    }

    /// [`Self::run`] with its windows from `source`: drives the window
    /// loop ([`WindowLoop`]), carrying out each of its actions.
    async fn run_windows(
        &self,
        row: &JobRow,
        caller: &Requester,
        cancel: &CancellationToken,
        events: &mut RequestEvents,
        source: &mut impl Source,
    ) -> Outcome {
        let seq = row.seq;
        let Some(mut watch) = self.runs.get(&seq).map(|r| Watch {
            stored: r.stored.subscribe(),
            upload: r.upload.subscribe(),
            workers: self.scheduler.workers(),
        }) else {
            return Outcome::Stopped;
        };
        let mut machine = WindowLoop::new(
            self.store.shared().is_some(),
            row.fail_fast,
            row.solved + row.errors,
            watch.upload.borrow().valid,
        );
        let mut event = Event::Woke(watch.seen());
        let outcome = loop {
            if cancel.is_cancelled() || self.lifecycle.shutting_down() {
                event = Event::Cancelled;
            }
            event = match machine.step(event) {
                Action::Wait(until) => self.wait(until, &mut watch, cancel).await,
                Action::Take { stored, grow } => {
                    events.grow(grow);
                    Event::Taken(self.take(source, stored, cancel).await)
                }
                Action::Feed(window, claimed) => {
                    let batch: Vec<Parsed> = window
                        .into_iter()
                        .map(|(index, id, puzzle)| Parsed {
                            index,
                            id,
                            puzzle: Ok(puzzle),
                        })
                        .collect();
                    let fence = claimed.map(|(_, epoch)| epoch);
                    let fed = self
                        .run_window(seq, caller, batch, fence, cancel, events)
                        .await;
                    // The upload as it is now: the window may have waited
                    // out the grace period while the upload ended.
                    Event::Fed(fed, *watch.upload.borrow())
                }
                Action::Record { last, claimed, fed } => {
                    source.record(last, claimed, fed);
                    Event::Done
                }
                Action::LetGo => {
                    source.let_go(cancel).await;
                    Event::Done
                }
                Action::Complete { total } => {
                    source.complete(cancel).await;
                    self.runs.remove(&seq);
                    tracing::info!(job = %self.store.job_id(seq), puzzles = total, "job done");
                    break Outcome::Complete;
                }
                Action::Fail(why) => {
                    self.fail(seq, &why).await;
                    break Outcome::Failed(why);
                }
                Action::End(outcome) => break outcome,
            };
        };
        if outcome != Outcome::Complete {
            source.stopped().await;
        }
        outcome
    }

    /// The next window from `source`, waiting for a store that is
    /// unavailable for now (`patiently`'s loop, spelt out: each try borrows
    /// `source` mutably, which a closure handing out futures cannot).
    async fn take(
        &self,
        source: &mut impl Source,
        stored: u64,
        cancel: &CancellationToken,
    ) -> Result<Taken, StoreError> {
        let mut patience = super::Patience::new("reading a job's puzzles");
        loop {
            match source.take(stored).await {
                Err(e)
                    if patience
                        .again(&e, self.lifecycle.shutdown(), Some(cancel))
                        .await => {}
                outcome => {
                    patience.done(outcome.is_ok());
                    return outcome;
                }
            }
        }
    }

    /// Waits until one of `until` holds, then reads the counts; or the run
    /// is cancelled (its channels closed with it) or the coordinator stops.
    async fn wait(&self, until: Until, watch: &mut Watch, cancel: &CancellationToken) -> Event {
        let Watch {
            stored,
            upload,
            workers,
        } = watch;
        let stored_reached = async {
            match until.stored {
                Some(n) => stored.wait_for(|s| *s >= n).await.is_ok(),
                None => std::future::pending().await,
            }
        };
        let upload_moved = async {
            upload
                .wait_for(|u| {
                    until.upload_past.is_some_and(|past| *u != past) || until.sealed && u.sealed
                })
                .await
                .is_ok()
        };
        let worker_there = async {
            if until.worker {
                workers.wait_for(|n| *n > 0).await.is_ok()
            } else {
                std::future::pending().await
            }
        };
        let ticked = async {
            if until.tick {
                tokio::time::sleep(SHARE_TICK).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let open = tokio::select! {
            open = stored_reached => open,
            open = upload_moved, if until.upload_past.is_some() || until.sealed => open,
            open = worker_there => open,
            () = ticked => true,
            () = cancel.cancelled() => false,
            () = self.lifecycle.cancelled() => false,
        };
        if open {
            Event::Woke(watch.seen())
        } else {
            Event::Cancelled
        }
    }

    /// Admits one window as a request of the job's owner and sends its
    /// results to the writer. `Err` when the request failed as a whole (no
    /// worker, shutdown, no room).
    async fn run_window(
        &self,
        job: i64,
        caller: &Requester,
        batch: Vec<Parsed>,
        fence: Option<u64>,
        cancel: &CancellationToken,
        events: &mut RequestEvents,
    ) -> Result<(), ServerError> {
        let span = tracing::info_span!(
            "window",
            first = batch.first().map_or(0, |p| p.index),
            puzzles = batch.len()
        );
        let terms = Terms {
            rpc: None,
            ordered: false,
            deadline: None,
            slot: None,
            span: span.clone(),
        };
        async {
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
                            let _ = self.writer.send(ToWrite { job, result, fence });
                        }
                    }
                    Next::Failed(e) => return Err(e),
                    Next::Done => return Ok(()),
                }
            }
        }
        .instrument(span)
        .await
    }
}
