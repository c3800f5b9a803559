//! Reading a job's results: what is stored, in input order (or, for an
//! any-order job, the order it was stored in), and with `follow` what is
//! stored next, until the last. A follower of a running job in input
//! order takes each stored group from the writer (its run's live channel)
//! instead of reading back what was just written, and reads the store only
//! for what it may have missed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use colball_proto::egress;
use colball_solver::order::InOrder;
use tokio::sync::{broadcast, mpsc};

use super::run::Live;
use super::store::JobState;
use super::store::WINDOW;
use super::writer::{coalesce, gather};
use super::{Followed, JobError, Jobs};

/// Results ahead of the next one due that a follower keeps from the live
/// groups (a slow puzzle holds the rest back); beyond, it reads the store
/// once the slow one is in. Two windows: a job's results come a window at
/// a time, so a follower that keeps up never holds more than one.
const EARLY: usize = 2 * WINDOW;

/// Results a follower reads from the store at a time (in order, or in a
/// scan past gaps): a window's, as a shared store holds them by the window
/// (a smaller read would decode the same groups again for each part).
const READ: usize = WINDOW;

/// A follower reads the store for results stored by another coordinator
/// at most this often: the hints of several of its writes make one read.
const ELSEWHERE_PACE: Duration = Duration::from_millis(100);

/// The windows a hint names that a follower keeps, from the first it
/// has not passed (a hint of every window keeps this many).
const HINTED: u64 = 64;

/// What a follower of a running job in input order holds beyond the next
/// result due: results that came ahead of it (from the writer's groups or
/// the store), at most `cap` of them, where the store may hold results
/// that it has not seen (stored before it subscribed, missed, or let go
/// when full), and the windows (of `window` results) that another
/// coordinator stored results in since the follower last read them. Those
/// are read once they are due: while the next result due is in a window
/// of this coordinator's, its groups bring it and the hints of the
/// others' windows wait.
#[derive(Clone, Debug)]
struct Ahead {
    order: InOrder<egress::PuzzleResult>,
    scan: Option<u64>,
    cap: usize,
    window: u64,
    hinted: BTreeSet<u64>,
}

impl Ahead {
    /// From `next`, just subscribed: what is already stored is scanned.
    fn new(next: u64, cap: usize, window: u64) -> Ahead {
        Ahead {
            order: InOrder::starting_at(next),
            scan: Some(next),
            cap,
            window,
            hinted: BTreeSet::new(),
        }
    }

    /// Another coordinator stored results in windows `first..=last`.
    fn hint(&mut self, first: u64, last: u64) {
        let first = first.max(self.next() / self.window);
        if first <= last {
            self.hinted
                .extend(first..=last.min(first.saturating_add(HINTED - 1)));
        }
    }

    /// Whether the window of the next result due was hinted since it was
    /// last read: the store is to be read from the next result due.
    fn due(&self) -> bool {
        self.hinted.contains(&(self.next() / self.window))
    }

    /// The next result due, if it is here.
    fn pop(&mut self) -> Option<egress::PuzzleResult> {
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

    /// What a read from `from` ([`Self::scan_from`]) found, in index
    /// order, at most `limit`: fewer means nothing more is stored beyond.
    /// The hints of the windows from `from`'s on are answered: what the
    /// read did not reach is scanned next (as room allows).
    fn scanned(&mut self, from: u64, found: Vec<egress::PuzzleResult>, limit: usize) {
        self.scan = (found.len() == limit)
            .then(|| found.last().map(|r| r.index + 1))
            .flatten();
        for r in found {
            self.keep(r);
        }
        // A window is answered from its start, or from the next due (what
        // is before it has been passed on).
        let w = self.window;
        let first = if from % w == 0 || from <= self.next() {
            from / w
        } else {
            from / w + 1
        };
        let next = self.next() / w;
        self.hinted.retain(|&h| h >= next && h < first);
    }

    /// A group the writer stored.
    fn group(&mut self, results: &[egress::PuzzleResult]) {
        for r in results {
            self.keep(r.clone());
        }
    }

    /// Keeps a result ahead (once). Past the room, the furthest one waits
    /// in the store, to be read once there is room (`next`, the nearest,
    /// always stays).
    fn keep(&mut self, r: egress::PuzzleResult) {
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

impl Jobs {
    /// Streams a job's stored results in order from `from`; with `follow`,
    /// waits for each until the last (see `Results`).
    pub fn results(
        self: &Arc<Self>,
        row: Followed,
        from: u64,
        follow: bool,
    ) -> mpsc::Receiver<Result<egress::PuzzleResult, JobError>> {
        let (tx, rx) = mpsc::channel(256);
        let span = tracing::info_span!("results", job = %row.id, from);
        let jobs = self.clone();
        self.lifecycle.spawn(span, async move {
            let seq = row.seq;
            let mut next = from;
            // The job's size, once its submission is sealed (a job followed
            // by its key while it is submitted grows until then).
            let mut total = row.total;
            // Set once the job has ended: what is stored is read to its end,
            // a batch at a time, and the stream ends.
            let mut ended = false;
            // When the last read caught up with a store that is filling
            // (under load, just after a write), the next one gathers first.
            let mut caught_up_at = None;
            // Following a running job in input order: the writer's groups as
            // they are stored, and what is ahead of the next result due.
            let mut live: Option<(broadcast::Receiver<Live>, Ahead)> = None;
            // On a shared store: hints of results stored by another
            // coordinator (they never pass through this one's writer).
            let mut elsewhere: Option<broadcast::Receiver<(u64, u64)>> = None;
            // Whether the next scan is for such a hint, and when the last
            // such scan was.
            let (mut hinted, mut hinted_at) = (false, None);
            // While following them, the store is read again each half second
            // the follower did not move on, should a group or a hint have
            // gone by unseen.
            let mut safety = tokio::time::interval(Duration::from_millis(500));
            safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut ticked_at = next;
            loop {
                if let Some((receiver, ahead)) = live.as_mut() {
                    while let Some(r) = ahead.pop() {
                        if tx.send(Ok(r)).await.is_err() {
                            return;
                        }
                    }
                    next = ahead.next();
                    if jobs.at_end(seq, &mut total, next, &tx).await {
                        return;
                    }
                    if !hinted && ahead.due() {
                        hinted = true;
                        ahead.missed();
                    }
                    if let Some(mut from) = ahead.scan_from() {
                        if std::mem::take(&mut hinted) {
                            coalesce(hinted_at, ELSEWHERE_PACE).await;
                            hinted_at = Some(tokio::time::Instant::now());
                            // The hints of the pause are answered by this read.
                            while let Some(hint) = elsewhere.as_mut().map(|e| e.try_recv()) {
                                match hint {
                                    Ok((first, last)) => ahead.hint(first, last),
                                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                        ahead.missed()
                                    }
                                    Err(_) => break,
                                }
                            }
                            // Groups received meanwhile are not read again.
                            while let Ok(group) = receiver.try_recv() {
                                ahead.group(&group);
                            }
                            match ahead.scan_from() {
                                Some(f) => from = f,
                                None => continue,
                            }
                        }
                        match jobs.store.results_after(seq, from, READ).await {
                            Ok(found) => ahead.scanned(from, found, READ),
                            Err(e) => {
                                let _ = tx.send(Err(e.into())).await;
                                return;
                            }
                        }
                        continue;
                    }
                    let mut ended_run = false;
                    let hint = async {
                        match elsewhere.as_mut() {
                            Some(e) => e.recv().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        // Stored by another coordinator: read once due.
                        hint = hint => match hint {
                            Ok((first, last)) => ahead.hint(first, last),
                            Err(broadcast::error::RecvError::Lagged(_)) => {
                                hinted = true;
                                ahead.missed();
                            }
                            Err(broadcast::error::RecvError::Closed) => elsewhere = None,
                        },
                        group = receiver.recv() => match group {
                            Ok(group) => ahead.group(&group),
                            Err(broadcast::error::RecvError::Lagged(_)) => ahead.missed(),
                            // The run ended (done, cancelled or failed): what
                            // is left is read from the store.
                            Err(broadcast::error::RecvError::Closed) => ended_run = true,
                        },
                        // Should a group go astray, the store has it.
                        _ = safety.tick() => {
                            if ahead.next() == std::mem::replace(&mut ticked_at, ahead.next()) {
                                ahead.missed();
                            }
                        }
                        () = tx.closed() => return,
                        () = jobs.lifecycle.cancelled() => {
                            let _ = tx.send(Err(JobError::ShuttingDown)).await;
                            return;
                        }
                    }
                    if ended_run {
                        live = None;
                    }
                    continue;
                }
                // Following a running job in input order: the writer's groups
                // from now on, and what was stored before is scanned.
                if follow && !ended && !row.any_order {
                    if let Some(run) = jobs.runs.get(&seq) {
                        live = Some((run.live.subscribe(), Ahead::new(next, EARLY, WINDOW as u64)));
                        elsewhere = Some(run.elsewhere.subscribe());
                        safety.reset();
                        ticked_at = next;
                        continue;
                    }
                }
                gather(caught_up_at).await;
                let read_at = tokio::time::Instant::now();
                let batch = match jobs.store.results(seq, next, READ, row.any_order).await {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
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
                if jobs.at_end(seq, &mut total, next, &tx).await {
                    return;
                }
                if got > 0 {
                    continue;
                }
                if ended || !follow {
                    return;
                }
                // Wait for more to be stored (or the job to end).
                let watched = jobs
                    .runs
                    .get(&seq)
                    .map(|r| (r.stored.subscribe(), r.elsewhere.subscribe()));
                let Some((mut stored, mut stored_elsewhere)) = watched else {
                    // Not running: finished, cancelled or failed (a last look
                    // at what is stored, then the end), or about to start.
                    let state = jobs.store.job(seq).await.ok().flatten().map(|r| r.state);
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
                    _ = stored_elsewhere.recv() => {}
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    () = tx.closed() => return,
                    () = jobs.lifecycle.cancelled() => {
                        let _ = tx.send(Err(JobError::ShuttingDown)).await;
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
        &self,
        seq: i64,
        total: &mut Option<u64>,
        next: u64,
        tx: &mpsc::Sender<Result<egress::PuzzleResult, JobError>>,
    ) -> bool {
        match self.size_reached(seq, total, next).await {
            Ok(done) => done,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                true
            }
        }
    }

    /// [`at_end`]'s question: `Err` when the job is gone.
    async fn size_reached(
        &self,
        seq: i64,
        total: &mut Option<u64>,
        next: u64,
    ) -> Result<bool, JobError> {
        if total.is_none() {
            let upload = self.runs.get(&seq).map(|run| *run.upload.borrow());
            *total = match upload {
                Some(upload) => upload.sealed.then_some(upload.puzzles),
                None => match self.store.job(seq).await? {
                    None => return Err(JobError::cut_short()),
                    Some(row) if row.state == JobState::Receiving => None,
                    Some(row) => Some(row.puzzles),
                },
            };
        }
        if !total.is_some_and(|t| next >= t) {
            return Ok(false);
        }
        // Every result is out: the stream ends once the job is marked done
        // (just after its last results are stored), so that a client that
        // asks next finds it DONE.
        let live = self.runs.get(&seq).map(|run| run.live.subscribe());
        if let Some(mut live) = live {
            let ended = async {
                while !matches!(live.recv().await, Err(broadcast::error::RecvError::Closed)) {}
            };
            let _ = tokio::time::timeout(Duration::from_secs(2), ended).await;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn result(index: u64) -> egress::PuzzleResult {
        egress::PuzzleResult {
            index,
            ..egress::PuzzleResult::default()
        }
    }

    /// How a stored group reaches the follower.
    #[derive(Clone, Copy, Debug)]
    enum Route {
        /// From this coordinator's writer.
        Live,
        /// Lost (lag, reported).
        Lost,
        /// Stored by another coordinator: a hint of its windows.
        Elsewhere,
    }

    /// One step of a job's life as a follower sees it.
    #[derive(Clone, Debug)]
    enum Op {
        /// A writer stores the results of these (not yet stored) picks.
        Store { picks: Vec<usize>, delivery: Route },
        /// The follower passes on what is due.
        Pop,
        /// The follower reads the store, if it wants to.
        Scan,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (
                proptest::collection::vec(0usize..1000, 1..12),
                prop_oneof![
                    3 => Just(Route::Live),
                    1 => Just(Route::Lost),
                    3 => Just(Route::Elsewhere),
                ],
            )
                .prop_map(|(picks, delivery)| Op::Store { picks, delivery }),
            2 => Just(Op::Pop),
            2 => Just(Op::Scan),
        ]
    }

    /// The follower's read of the store, if it wants one (as its loop:
    /// from the next due once its window is hinted); whether it read.
    fn scan(ahead: &mut Ahead, stored: &BTreeSet<u64>, limit: usize) -> bool {
        if ahead.due() {
            ahead.missed();
        }
        let Some(from) = ahead.scan_from() else {
            return false;
        };
        let found = stored
            .range(from..)
            .take(limit)
            .map(|&i| result(i))
            .collect();
        ahead.scanned(from, found, limit);
        true
    }

    /// The follower's steps until it can take none: pass on, then read.
    fn settle(ahead: &mut Ahead, stored: &BTreeSet<u64>, limit: usize, emitted: &mut Vec<u64>) {
        loop {
            while let Some(r) = ahead.pop() {
                emitted.push(r.index);
            }
            if !scan(ahead, stored, limit) {
                return;
            }
        }
    }

    /// Results stored elsewhere in a window after the next due's are read
    /// once the follower reaches that window, in one read, not at each
    /// hint.
    #[test]
    fn hints_of_windows_not_due_wait_until_they_are() {
        let stored: BTreeSet<u64> = (0..8).collect();
        let mut ahead = Ahead::new(0, 8, 4);
        ahead.scanned(0, Vec::new(), 4);
        // Window 0 is this coordinator's; another writes window 1.
        for _ in 0..3 {
            ahead.hint(1, 1);
            assert!(!ahead.due());
            assert_eq!(ahead.scan_from(), None, "read before it is due");
        }
        ahead.group(&(0..4).map(result).collect::<Vec<_>>());
        let mut emitted = Vec::new();
        while let Some(r) = ahead.pop() {
            emitted.push(r.index);
        }
        assert!(ahead.due(), "window 1 is due and was hinted");
        assert!(scan(&mut ahead, &stored, 4));
        assert!(!ahead.due());
        while let Some(r) = ahead.pop() {
            emitted.push(r.index);
        }
        assert_eq!(emitted, (0..8).collect::<Vec<_>>());
        // A hint of every window (an older coordinator's) reads at once.
        ahead.hint(0, u64::MAX);
        assert!(ahead.due());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Whatever the order results are stored in, groups lost or not,
        /// stored here or elsewhere, and however small the room ahead and
        /// the windows: the follower passes on every result once, in input
        /// order, holds at most its room, and never waits for a result
        /// already stored (no timer needed).
        #[test]
        fn a_follower_passes_on_every_stored_result_once_in_order(
            total in 1u64..60,
            before in proptest::collection::vec(0usize..1000, 0..20),
            ops in proptest::collection::vec(op(), 0..60),
            cap in 1usize..8,
            limit in 1usize..6,
            window in 1u64..9,
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
            let mut ahead = Ahead::new(0, cap, window);
            let mut emitted = Vec::new();
            for op in ops {
                match op {
                    Op::Store { picks, delivery } => {
                        let group: Vec<_> = take(&picks, &mut stored).into_iter().map(result).collect();
                        match delivery {
                            Route::Live => ahead.group(&group),
                            Route::Lost => ahead.missed(),
                            Route::Elsewhere => {
                                let wins = group.iter().map(|r| r.index / window);
                                if let (Some(first), Some(last)) = (wins.clone().min(), wins.max()) {
                                    ahead.hint(first, last);
                                }
                            }
                        }
                    }
                    Op::Pop => {
                        while let Some(r) = ahead.pop() {
                            emitted.push(r.index);
                        }
                    }
                    Op::Scan => {
                        scan(&mut ahead, &stored, limit);
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
