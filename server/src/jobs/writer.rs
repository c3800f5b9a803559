//! The writer: every job's results go to the store through this one task,
//! which groups them (one transaction per group) and then tells the
//! followers of each job what was stored.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use colball_proto::egress;
use tokio::sync::mpsc;

use super::store::{StoreError, ToWrite};
use super::{Jobs, Patience};

/// How long the followers gather under load: a read less than this after
/// the last one waits for the rest of it, so results stream through the
/// store in groups instead of one query and one thread hop each. After a
/// pause nothing waits: a lone result is read at once. (The writer's pace
/// is its store's, [`JobStore::write_pace`](super::store::JobStore::write_pace).)
const COALESCE: Duration = Duration::from_millis(1);

/// Waits, if the last step was less than `every` ago, for the rest of
/// that time.
pub(super) async fn coalesce(last: Option<tokio::time::Instant>, every: Duration) {
    if let Some(at) = last {
        if at.elapsed() < every {
            tokio::time::sleep_until(at + every).await;
        }
    }
}

/// [`coalesce`] at the followers' pace.
pub(super) async fn gather(last: Option<tokio::time::Instant>) {
    coalesce(last, COALESCE).await
}

impl Jobs {
    /// Writes results in groups until every sender is gone.
    pub(super) async fn write(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<ToWrite>) {
        // A shared database pays a round trip and its own CPU for each
        // write: its store gathers longer, in bigger groups.
        let (most, every) = self.store.write_pace();
        let mut group = Vec::with_capacity(most);
        let mut last_write = None;
        while rx.recv_many(&mut group, most).await > 0 {
            if group.len() < most {
                coalesce(last_write, every).await;
                while group.len() < most {
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
            for w in &batch {
                *counts.entry(w.job).or_default() += 1;
            }
            // A span per job in the group, in its job's trace, while the
            // group is written.
            let _spans = self.write_spans(&counts);
            match self.put_patiently(batch).await {
                (batch, Ok(new)) => {
                    self.live(batch, &new);
                    for (job, n) in counts {
                        self.stored(job, n);
                    }
                }
                (batch, Err(e)) if batch.is_empty() => {
                    // The store lost the group with its error.
                    for job in counts.into_keys() {
                        self.not_stored(job, &e).await;
                    }
                }
                (batch, Err(e)) => {
                    // Once more a job at a time: only the jobs whose
                    // results cannot be stored fail; the others go on.
                    tracing::warn!(error = %e, "a group of results not stored; storing it job by job");
                    let mut by_job: BTreeMap<i64, Vec<ToWrite>> = BTreeMap::new();
                    for item in batch {
                        by_job.entry(item.job).or_default().push(item);
                    }
                    for (job, results) in by_job {
                        let n = results.len() as u64;
                        match self.put_patiently(results).await {
                            (results, Ok(new)) => {
                                self.live(results, &new);
                                self.stored(job, n);
                            }
                            (_, Err(e)) => self.not_stored(job, &e).await,
                        }
                    }
                }
            }
        }
    }

    /// A span `write` for each job of a group (its results in it), a child
    /// of the job's span; none when spans are not exported, or for a job
    /// that does not run here (a window claimed from another's job).
    fn write_spans(&self, counts: &BTreeMap<i64, u64>) -> Vec<tracing::Span> {
        if !colball_telemetry::exporting() {
            return Vec::new();
        }
        counts
            .iter()
            .filter_map(|(job, results)| {
                let run = self.runs.get(job)?;
                Some(tracing::info_span!(parent: &run.span, "write", results))
            })
            .collect()
    }

    /// Stores a group, trying again while the store is unavailable for
    /// now: results are never dropped for a database restarting (the
    /// runs wait for them meanwhile).
    async fn put_patiently(
        &self,
        mut group: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        let mut patience = Patience::new("storing results");
        loop {
            match self.store.put_results(group).await {
                // (A group the store lost with its error is not tried again.)
                (back, Err(e))
                    if !back.is_empty()
                        && patience.again(&e, self.lifecycle.shutdown(), None).await =>
                {
                    group = back;
                }
                (back, outcome) => {
                    patience.done(outcome.is_ok());
                    return (back, outcome);
                }
            }
        }
    }

    /// Hands the results of a stored group that were new (`new[i]` for
    /// `written[i]`) to the followers of their jobs, a group per job;
    /// nothing is built for a job nobody follows.
    fn live(&self, written: Vec<ToWrite>, new: &[bool]) {
        // `None` for a job nobody follows.
        let mut by_job: BTreeMap<i64, Option<Vec<egress::PuzzleResult>>> = BTreeMap::new();
        for (ToWrite { job, result, .. }, _) in
            written.into_iter().zip(new).filter(|(_, new)| **new)
        {
            let group = by_job.entry(job).or_insert_with(|| {
                let followed = self
                    .runs
                    .get(&job)
                    .is_some_and(|run| run.live.receiver_count() > 0);
                followed.then(Vec::new)
            });
            if let Some(group) = group {
                group.push(result);
            }
        }
        for (job, results) in by_job {
            let Some(results) = results else { continue };
            if let Some(run) = self.runs.get(&job) {
                // No receiver left is not an error.
                let _ = run.live.send(Arc::new(results));
            }
        }
    }

    /// Tells job `job`'s followers that `n` more of its results are stored.
    pub(super) fn stored(&self, job: i64, n: u64) {
        if let Some(run) = self.runs.get(&job) {
            run.stored.send_modify(|stored| *stored += n);
        }
    }

    /// Fails job `job`, whose results could not be stored.
    async fn not_stored(&self, job: i64, e: &StoreError) {
        tracing::error!(job = %self.store.job_id(job), error = %e, "results not stored; the job fails");
        self.fail(job, &format!("results could not be stored: {e}"))
            .await;
    }
}
