//! A run's window loop as a state machine, in the manner of the
//! scheduler's core: [`WindowLoop::step`] takes what happened
//! ([`Event`]) and says what to do next ([`Action`]); the driver in
//! [`super`] carries the action out against the scheduler, the store and
//! the clock, and feeds back what came of it. No channel, store or clock
//! in here: the tests below drive it with plain calls.
//!
//! The loop, for one job:
//!
//! 1. *Pace*: the next window is taken only once all but one window of
//!    the results fed are stored, so a store slower than the workers holds
//!    the job back instead of queueing its results in memory. On a shared
//!    store a window is claimed only with a worker to solve it (another
//!    coordinator may have some).
//! 2. *Take* the next window from the [`Source`](super::Source): puzzles
//!    to solve, nothing left (of what has been uploaded), or, on a shared
//!    store, nothing free now.
//! 3. *Feed* it to the scheduler as one request; its results go to the
//!    writer. A window whose request failed as a whole (no worker, no room,
//!    shutting down) is let go and tried again once a worker is there,
//!    unless the job asked to fail fast and has been sealed.
//! 4. *Finish* once the upload is sealed and nothing is left: on a store of
//!    its own when the last results are stored, on a shared store at once
//!    (every window was found done, so each result is stored).

use std::fmt;

use super::UploadProgress;
use crate::error::ServerError;
use crate::jobs::store::{Pending, StoreError, WINDOW};

/// A window claimed from a shared store: its number and the claim's epoch
/// (the fence its results are written under).
pub(crate) type Claimed = (u64, u64);

/// What a source answers for the next window.
#[derive(Debug)]
pub(crate) enum Taken {
    /// Puzzles to solve, of the window claimed (on a shared store).
    Window(Vec<Pending>, Option<Claimed>),
    /// Nothing left without a result (of what has been uploaded).
    Empty,
    /// Nothing free now; the rest is held (shared store). The run looks
    /// again once `due` of its results are stored (its first window not
    /// finished yet can be finished then), more is uploaded, or a tick
    /// passes (a holder may have died or let go meanwhile).
    Busy { due: Option<u64> },
}

/// How a run ended, for its watchers and its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every puzzle has its result stored; the job is done.
    Complete,
    /// Cancelled, deleted, ended elsewhere, or the coordinator stopping.
    Stopped,
    /// The job failed, for this reason (stored with it).
    Failed(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Complete => f.write_str("complete"),
            Outcome::Stopped => f.write_str("cancelled or stopped"),
            Outcome::Failed(why) => f.write_str(why),
        }
    }
}

/// The counts a wait wakes on, read by the driver when it wakes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Watched {
    /// This run's results stored so far (and those stored before it).
    pub(crate) stored: u64,
    /// How far the upload is.
    pub(crate) upload: UploadProgress,
    /// Workers connected to this coordinator.
    pub(crate) workers: usize,
}

/// What the driver tells the machine.
#[derive(Debug)]
pub(crate) enum Event {
    /// The run begins, or a wait ended: the counts now.
    Woke(Watched),
    /// The source's answer for the next window.
    Taken(Result<Taken, StoreError>),
    /// The window fed ended: all its results given to the writer, or the
    /// request failed as a whole; the upload as it is now.
    Fed(Result<(), ServerError>, UploadProgress),
    /// The source was told of the window fed, or let go of its windows.
    Done,
    /// The run was cancelled or the coordinator is stopping.
    Cancelled,
}

/// What a wait waits for: any one of them ends it (and cancellation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Until {
    /// At least this many results stored.
    pub(crate) stored: Option<u64>,
    /// A worker connected.
    pub(crate) worker: bool,
    /// The upload past this point (more puzzles, or sealed).
    pub(crate) upload_past: Option<UploadProgress>,
    /// The upload sealed.
    pub(crate) sealed: bool,
    /// A tick of the shared store's pace.
    pub(crate) tick: bool,
}

/// What the machine asks the driver to do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Wait; then [`Event::Woke`] (or [`Event::Cancelled`]).
    Wait(Until),
    /// Tell the watchers of `grow` more puzzles, then take the next window
    /// from the source, `stored` results being stored; then
    /// [`Event::Taken`].
    Take { stored: u64, grow: u64 },
    /// Admit these puzzles as one request; then [`Event::Fed`].
    Feed(Vec<Pending>, Option<Claimed>),
    /// Tell the source the window fed (up to index `last`) has its results
    /// all stored once `fed` of this run's are; then [`Event::Done`].
    Record {
        last: u64,
        claimed: Option<Claimed>,
        fed: u64,
    },
    /// Let the windows held go back to the store (a shared store); then
    /// [`Event::Done`].
    LetGo,
    /// Mark the job done (every puzzle of `total` has its result).
    Complete { total: u64 },
    /// Mark the job failed, saying why.
    Fail(String),
    /// The run is over: stop (on a shared store, letting go of what it
    /// holds unless it completed).
    End(Outcome),
}

/// Where the machine is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the pace, a worker, or the upload.
    Pacing,
    /// Taking the next window, of the upload as it was (`arrived`).
    Taking { arrived: UploadProgress },
    /// A window fed: its size and last index, and its claim.
    Feeding {
        n: u64,
        last: u64,
        claimed: Option<Claimed>,
    },
    /// Telling the source of the window fed.
    Recording,
    /// Letting go after a failed window; then waiting for a worker (or the
    /// seal, if the job was not sealed when it failed).
    LettingGo { sealed: bool },
    /// Waiting for a worker (or the seal) after a failed window.
    Retrying { sealed: bool },
    /// Every puzzle fed; waiting for the last results to be stored (on a
    /// store of its own).
    Finishing { total: u64 },
    /// Over.
    Ended,
}

/// The window loop of one run: see the module documentation.
#[derive(Debug)]
pub(crate) struct WindowLoop {
    /// Puzzles a window holds at most ([`WINDOW`]).
    window: u64,
    /// A shared store: windows are claimed only with a worker, a failed
    /// window is let go, and the job is done once the source says so.
    shared: bool,
    /// The job asked to fail when no worker is there for the grace period.
    fail_fast: bool,
    /// Results handed to the writer, and those stored before the run.
    fed: u64,
    /// The valid puzzles the watchers have been told of.
    announced: u64,
    /// The counts as last seen.
    seen: Watched,
    phase: Phase,
}

impl WindowLoop {
    /// The loop of a run on a `shared` store or not, of a job that asked to
    /// `fail_fast` or not, of which `stored` results were stored before it
    /// and `announced` valid puzzles are known to its watchers.
    pub(crate) fn new(shared: bool, fail_fast: bool, stored: u64, announced: u64) -> WindowLoop {
        WindowLoop::with_window(WINDOW as u64, shared, fail_fast, stored, announced)
    }

    /// [`Self::new`] with windows of `window` puzzles (small ones in tests).
    fn with_window(
        window: u64,
        shared: bool,
        fail_fast: bool,
        stored: u64,
        announced: u64,
    ) -> WindowLoop {
        WindowLoop {
            window,
            shared,
            fail_fast,
            fed: stored,
            announced,
            seen: Watched::default(),
            phase: Phase::Pacing,
        }
    }

    /// Results handed to the writer so far (and those stored before).
    #[cfg(test)]
    fn fed(&self) -> u64 {
        self.fed
    }

    /// The one step: what to do after `event`.
    pub(crate) fn step(&mut self, event: Event) -> Action {
        let phase = std::mem::replace(&mut self.phase, Phase::Ended);
        match (phase, event) {
            (Phase::Ended, _) => Action::End(Outcome::Stopped),
            (_, Event::Cancelled) => self.end(Outcome::Stopped),
            (phase, Event::Woke(seen)) => {
                self.seen = seen;
                match phase {
                    Phase::Finishing { total } => self.finish(total),
                    Phase::Retrying { .. } | Phase::Pacing => self.pace(),
                    // A wake belongs to a wait; any other phase waits for
                    // its own answer.
                    other => self.unexpected(other),
                }
            }
            (Phase::Taking { arrived }, Event::Taken(taken)) => self.taken(arrived, taken),
            (Phase::Feeding { n, last, claimed }, Event::Fed(outcome, upload)) => {
                self.seen.upload = upload;
                match outcome {
                    Ok(()) => {
                        self.fed += n;
                        self.phase = Phase::Recording;
                        Action::Record {
                            last,
                            claimed,
                            fed: self.fed,
                        }
                    }
                    Err(ServerError::NoWorkers(e)) if self.fail_fast && upload.sealed => {
                        // No worker for the grace period, and someone waits.
                        self.phase = Phase::Ended;
                        Action::Fail(e.to_string())
                    }
                    // No worker (or shutting down, or no room): wait for a
                    // worker and try the window again; a job is not given up
                    // for want of workers unless it asked to be, and not
                    // before it is sealed (then the window is tried again,
                    // and fails as it asked). A shared window goes back to
                    // the store meanwhile.
                    Err(_) if self.shared => {
                        self.phase = Phase::LettingGo {
                            sealed: upload.sealed,
                        };
                        Action::LetGo
                    }
                    Err(_) => self.retry(upload.sealed),
                }
            }
            (Phase::Recording, Event::Done) => self.pace(),
            (Phase::LettingGo { sealed }, Event::Done) => self.retry(sealed),
            (other, _) => self.unexpected(other),
        }
    }

    /// Pacing: the next window once the results fed are stored but for a
    /// window's worth, and (on a shared store) with a worker.
    fn pace(&mut self) -> Action {
        let seen = self.seen;
        if seen.stored + self.window < self.fed {
            return self.wait(Until {
                stored: Some(self.fed - self.window),
                ..Until::default()
            });
        }
        if self.shared && seen.workers == 0 {
            return self.wait(Until {
                worker: true,
                ..Until::default()
            });
        }
        let grow = seen.upload.valid.saturating_sub(self.announced);
        self.announced = self.announced.max(seen.upload.valid);
        self.phase = Phase::Taking {
            arrived: seen.upload,
        };
        Action::Take {
            stored: seen.stored,
            grow,
        }
    }

    /// The source's answer, of the upload as it was before it was asked
    /// (`arrived`): a chunk stored after that wakes the wait for more.
    fn taken(&mut self, arrived: UploadProgress, taken: Result<Taken, StoreError>) -> Action {
        match taken {
            // Given up waiting for the store: the run was stopped.
            Err(e) if e.passing() => self.end(Outcome::Stopped),
            Err(e) => {
                self.phase = Phase::Ended;
                Action::Fail(e.to_string())
            }
            Ok(Taken::Window(window, claimed)) => match window.last() {
                Some(&(last, _, _)) => {
                    self.phase = Phase::Feeding {
                        n: window.len() as u64,
                        last,
                        claimed,
                    };
                    Action::Feed(window, claimed)
                }
                None => self.pace(),
            },
            Ok(Taken::Empty) if arrived.sealed => self.finish(arrived.puzzles),
            // Everything stored so far is fed: wait for the next chunk.
            Ok(Taken::Empty) => self.wait(Until {
                upload_past: Some(arrived),
                ..Until::default()
            }),
            Ok(Taken::Busy { due }) => self.wait(Until {
                stored: due,
                upload_past: Some(arrived),
                tick: true,
                ..Until::default()
            }),
        }
    }

    /// Every puzzle of `total` fed and answered: done once the last results
    /// are stored (on a shared store every window was found done, so each
    /// result is stored already).
    fn finish(&mut self, total: u64) -> Action {
        if !self.shared && self.seen.stored < total {
            self.phase = Phase::Finishing { total };
            return Action::Wait(Until {
                stored: Some(total),
                ..Until::default()
            });
        }
        self.phase = Phase::Ended;
        Action::Complete { total }
    }

    /// After a failed window: wait for a worker, or for the seal if the
    /// job was not sealed when it failed.
    fn retry(&mut self, sealed: bool) -> Action {
        self.phase = Phase::Retrying { sealed };
        Action::Wait(Until {
            worker: true,
            sealed: !sealed,
            ..Until::default()
        })
    }

    fn wait(&mut self, until: Until) -> Action {
        self.phase = Phase::Pacing;
        Action::Wait(until)
    }

    fn end(&mut self, outcome: Outcome) -> Action {
        self.phase = Phase::Ended;
        Action::End(outcome)
    }

    /// An event the phase does not wait for: the driver's bug. Stopping is
    /// safe (the run is taken up again from the store).
    fn unexpected(&mut self, phase: Phase) -> Action {
        debug_assert!(false, "a window loop event out of turn in {phase:?}");
        tracing::error!(?phase, "a window loop event out of turn; the run stops");
        self.end(Outcome::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use colball_core::NoWorkers;
    use colball_solver::{Board, Colour, Puzzle, Size};
    use proptest::prelude::*;

    use super::*;

    fn a_puzzle() -> Puzzle {
        let board = Board::filled(Size::new(2, 2).unwrap(), Colour::Red);
        Puzzle::new(board, board).unwrap()
    }

    /// How the world answers the run at each turn: which results the
    /// writer stores, whether more is uploaded, whether workers come and go,
    /// how a fed window ends, whether a shared store has nothing free.
    #[derive(Clone, Copy, Debug)]
    enum Luck {
        /// The writer stores up to this many results in flight.
        Store(usize),
        /// A chunk of this many puzzles arrives (the last seals the job).
        UploadProgress(u64),
        /// Workers connect (true) or all leave (false).
        Workers(bool),
        /// The next window's request fails as a whole after this many of
        /// its results, for want of workers (true) or for shutdown.
        Fail(usize, bool),
        /// A shared store's next claim finds nothing free.
        Busy,
    }

    fn luck() -> impl Strategy<Value = Luck> {
        prop_oneof![
            4 => (0usize..12).prop_map(Luck::Store),
            2 => (1u64..9).prop_map(Luck::UploadProgress),
            1 => any::<bool>().prop_map(Luck::Workers),
            1 => (0usize..6, any::<bool>()).prop_map(|(n, w)| Luck::Fail(n, w)),
            1 => Just(Luck::Busy),
        ]
    }

    /// A job and its store as the run's world: the window loop under test
    /// against a model of the scheduler, the writer and the store.
    struct World {
        window: usize,
        shared: bool,
        /// Puzzles uploaded, and the job's size once sealed.
        uploaded: u64,
        size: u64,
        sealed: bool,
        /// Indices whose results are stored, and those given to the writer
        /// and not stored yet.
        stored: BTreeSet<u64>,
        writing: Vec<u64>,
        workers: usize,
        /// What is to come; when it is spent the world is kind (workers,
        /// stores, uploads), so every run must end.
        luck: std::vec::IntoIter<Luck>,
        fail_next: Option<(usize, bool)>,
        busy_next: bool,
        /// A local store's next window starts after this index.
        after: Option<u64>,
    }

    impl World {
        fn seen(&self) -> Watched {
            Watched {
                stored: self.stored.len() as u64,
                upload: UploadProgress {
                    puzzles: self.uploaded,
                    valid: self.uploaded,
                    sealed: self.sealed,
                },
                workers: self.workers,
            }
        }

        /// One turn of luck (or kindness once the luck is spent).
        fn turn(&mut self) {
            let luck = self.luck.next().unwrap_or(if !self.writing.is_empty() {
                Luck::Store(usize::MAX)
            } else if self.workers == 0 {
                Luck::Workers(true)
            } else {
                Luck::UploadProgress(7)
            });
            match luck {
                Luck::Store(n) => {
                    let n = n.min(self.writing.len());
                    for index in self.writing.drain(..n) {
                        self.stored.insert(index);
                    }
                }
                Luck::UploadProgress(n) if !self.sealed => {
                    self.uploaded = (self.uploaded + n).min(self.size);
                    self.sealed = self.uploaded == self.size;
                }
                Luck::UploadProgress(_) => {}
                Luck::Workers(on) => self.workers = usize::from(on),
                Luck::Fail(n, no_workers) => self.fail_next = Some((n, no_workers)),
                Luck::Busy => self.busy_next = true,
            }
        }

        /// Whether a wait for `until` ends now.
        fn ends(&self, until: &Until, seen: Watched) -> bool {
            until.stored.is_some_and(|n| seen.stored >= n)
                || until.worker && seen.workers > 0
                || until.upload_past.is_some_and(|u| u != seen.upload)
                || until.sealed && seen.upload.sealed
                || until.tick
        }

        /// The source's next window: puzzles uploaded without a stored
        /// result (on a local store, after the last window fed).
        fn take(&mut self) -> Taken {
            if std::mem::take(&mut self.busy_next) && self.shared {
                return Taken::Busy { due: None };
            }
            let from = if self.shared {
                0
            } else {
                self.after.map_or(0, |a| a + 1)
            };
            let pending: Vec<u64> = (from..self.uploaded)
                .filter(|i| !self.stored.contains(i))
                .filter(|i| !self.shared || !self.writing.contains(i))
                .take(self.window)
                .collect();
            if pending.is_empty() {
                let all = (0..self.uploaded).all(|i| self.stored.contains(&i));
                return if !self.shared || all {
                    Taken::Empty
                } else {
                    // Ours, their results not stored yet.
                    Taken::Busy {
                        due: Some(self.stored.len() as u64 + self.writing.len() as u64),
                    }
                };
            }
            let puzzle = a_puzzle();
            let window = pending
                .into_iter()
                .map(|i| (i, ecow::EcoString::from(format!("p{i}")), puzzle))
                .collect();
            Taken::Window(window, self.shared.then_some((0, 1)))
        }
    }

    /// Runs the loop to its end against the world; what it ended with.
    fn run(world: &mut World, fail_fast: bool, cancel_at: Option<usize>) -> Action {
        let window = world.window as u64;
        let mut machine = WindowLoop::with_window(window, world.shared, fail_fast, 0, 0);
        let mut event = Event::Woke(world.seen());
        for turn in 0.. {
            assert!(turn < 100_000, "the run never ended");
            if cancel_at == Some(turn) {
                event = Event::Cancelled;
            }
            let action = machine.step(event);
            event = match action {
                Action::Wait(until) => {
                    assert_ne!(until, Until::default(), "a wait for nothing");
                    loop {
                        world.turn();
                        if world.ends(&until, world.seen()) {
                            break;
                        }
                    }
                    Event::Woke(world.seen())
                }
                Action::Take { stored, .. } => {
                    assert!(
                        machine.fed() <= stored + window,
                        "took a window with more than one window's results unstored"
                    );
                    Event::Taken(Ok(world.take()))
                }
                Action::Feed(pending, _) => {
                    for &(index, _, _) in &pending {
                        assert!(index < world.uploaded, "fed a puzzle not uploaded");
                        assert!(!world.stored.contains(&index), "fed a stored puzzle");
                    }
                    let outcome = match world.fail_next.take() {
                        Some((n, no_workers)) => {
                            world.writing.extend(pending.iter().take(n).map(|p| p.0));
                            Err(if no_workers {
                                ServerError::NoWorkers(NoWorkers {
                                    waited: std::time::Duration::from_secs(1),
                                    ever: false,
                                })
                            } else {
                                ServerError::ShuttingDown
                            })
                        }
                        None => {
                            world.writing.extend(pending.iter().map(|p| p.0));
                            Ok(())
                        }
                    };
                    if outcome.is_ok() {
                        world.after = pending.last().map(|p| p.0);
                    }
                    world.turn();
                    Event::Fed(outcome, world.seen().upload)
                }
                Action::Record { .. } | Action::LetGo => Event::Done,
                end @ (Action::Complete { .. } | Action::Fail(_) | Action::End(_)) => {
                    return end;
                }
            };
        }
        unreachable!()
    }

    fn world(window: usize, shared: bool, size: u64, luck: Vec<Luck>) -> World {
        World {
            window,
            shared,
            uploaded: 0,
            size,
            sealed: size == 0,
            stored: BTreeSet::new(),
            writing: Vec::new(),
            workers: 1,
            luck: luck.into_iter(),
            fail_next: None,
            busy_next: false,
            after: None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever the luck, a run feeds each puzzle until its result is
        /// stored, never a stored one, keeps at most a window of results
        /// unstored beyond its pace, and completes only once the job is
        /// sealed and every result stored; it fails only when the job
        /// asked to fail fast, for want of workers, once sealed.
        #[test]
        fn a_run_feeds_each_puzzle_until_its_result_is_stored(
            window in 1usize..6,
            shared in any::<bool>(),
            fail_fast in any::<bool>(),
            size in 0u64..40,
            luck in proptest::collection::vec(luck(), 0..200),
        ) {
            let mut world = world(window, shared, size, luck);
            match run(&mut world, fail_fast, None) {
                Action::Complete { total } => {
                    prop_assert!(world.sealed);
                    prop_assert_eq!(total, size);
                    if !shared {
                        prop_assert_eq!(world.stored.len() as u64, size);
                    } else {
                        prop_assert!((0..size).all(|i| world.stored.contains(&i)));
                    }
                }
                Action::Fail(why) => {
                    prop_assert!(fail_fast, "failed without asking: {}", why);
                    prop_assert!(world.sealed);
                    prop_assert!(why.contains("no worker"), "{}", why);
                }
                other => prop_assert!(false, "ended with {:?}", other),
            }
        }

        /// A run cancelled at any point stops, and says so.
        #[test]
        fn a_cancelled_run_stops(
            shared in any::<bool>(),
            size in 1u64..30,
            cancel_at in 0usize..40,
            luck in proptest::collection::vec(luck(), 0..60),
        ) {
            let mut world = world(3, shared, size, luck);
            match run(&mut world, false, Some(cancel_at)) {
                Action::End(Outcome::Stopped) | Action::Complete { .. } => {}
                other => prop_assert!(false, "ended with {:?}", other),
            }
        }
    }

    #[test]
    fn a_store_error_fails_the_job_and_an_unavailable_store_stops_the_run() {
        let mut machine = WindowLoop::with_window(4, true, false, 0, 0);
        let seen = Watched {
            workers: 1,
            ..Watched::default()
        };
        assert!(matches!(
            machine.step(Event::Woke(seen)),
            Action::Take { stored: 0, grow: 0 }
        ));
        let failed = machine.step(Event::Taken(Err(StoreError::Backend("disk".into()))));
        assert!(matches!(failed, Action::Fail(why) if why.contains("disk")));

        let mut machine = WindowLoop::with_window(4, false, false, 0, 0);
        machine.step(Event::Woke(seen));
        let stopped = machine.step(Event::Taken(Err(StoreError::Unavailable("gone".into()))));
        assert!(matches!(stopped, Action::End(Outcome::Stopped)));
        assert_eq!(Outcome::Stopped.to_string(), "cancelled or stopped");
        assert_eq!(Outcome::Complete.to_string(), "complete");
    }

    #[test]
    fn a_shared_store_claims_only_with_a_worker_and_lets_a_failed_window_go() {
        let mut machine = WindowLoop::with_window(4, true, false, 0, 0);
        let upload = UploadProgress {
            puzzles: 3,
            valid: 3,
            sealed: true,
        };
        let idle = Watched {
            stored: 0,
            upload,
            workers: 0,
        };
        let Action::Wait(until) = machine.step(Event::Woke(idle)) else {
            panic!("claimed without a worker");
        };
        assert!(until.worker);
        let ready = Watched { workers: 1, ..idle };
        assert!(matches!(
            machine.step(Event::Woke(ready)),
            Action::Take { grow: 3, .. }
        ));
        let puzzle = a_puzzle();
        let window = vec![(0, "a".into(), puzzle), (2, "c".into(), puzzle)];
        let Action::Feed(fed, claimed) =
            machine.step(Event::Taken(Ok(Taken::Window(window, Some((0, 7))))))
        else {
            panic!("did not feed the window");
        };
        assert_eq!((fed.len(), claimed), (2, Some((0, 7))));
        let let_go = machine.step(Event::Fed(Err(ServerError::ShuttingDown), upload));
        assert!(matches!(let_go, Action::LetGo));
        let Action::Wait(until) = machine.step(Event::Done) else {
            panic!("did not wait for a worker");
        };
        assert!(until.worker && !until.sealed);
        assert_eq!(machine.fed(), 0);
    }
}
