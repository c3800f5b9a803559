//! The in-memory job store: the coordinator's store without `--data-dir`.
//! Jobs live as long as the process. Each call takes one lock for a few
//! microseconds and never blocks on I/O, so it runs on the async thread
//! that calls it.
//!
//! A job's puzzles and results sit in vectors indexed by puzzle index;
//! results are kept encoded, as the SQLite store keeps them. Its size (what
//! `--max-store-mib` limits) is the bytes of ids and encoded results plus
//! a fixed cost per puzzle, result and job; a write that would pass the
//! cap is refused whole, as a transaction would be.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use colball_proto::prost::Message;
use colball_proto::{egress, v1};
use colball_solver::Puzzle;
use ecow::EcoString;

use super::{
    Entry, JobRow, JobState, JobStore, NewJob, Pending, StoreError, ToWrite, Webhook, id_of,
};

/// What a job costs beyond its puzzles and results, for the size.
const JOB_BYTES: u64 = 256;
/// What a puzzle or a result costs beyond its id or encoding.
const ROW_BYTES: u64 = 24;

/// See the module documentation.
#[derive(Debug)]
pub struct MemoryStore {
    books: Mutex<Books>,
    instance: String,
    cap: Option<u64>,
}

#[derive(Debug, Default)]
struct Books {
    last_seq: i64,
    jobs: BTreeMap<i64, StoredJob>,
    bytes: u64,
}

#[derive(Debug)]
struct StoredJob {
    row: JobRow,
    /// By index: the puzzle, or `None` for one stored with its error.
    puzzles: Vec<Option<(EcoString, Puzzle)>>,
    /// By index: the encoded result.
    results: Vec<Option<Box<[u8]>>>,
    /// Indices in the order their results were stored (any-order jobs).
    order: Vec<u64>,
    bytes: u64,
}

impl StoredJob {
    /// Its row, with its bytes.
    fn row(&self) -> JobRow {
        JobRow {
            bytes: self.bytes,
            ..self.row.clone()
        }
    }

    /// Stores result `r` of puzzle `index` unless it has one; whether it
    /// was new.
    fn put(&mut self, index: u64, encoded: Box<[u8]>, error: bool) -> bool {
        let Ok(at) = usize::try_from(index) else {
            return false;
        };
        if self.results.len() <= at {
            self.results.resize(at + 1, None);
        }
        if self.results[at].is_some() {
            return false;
        }
        self.bytes += encoded.len() as u64 + ROW_BYTES;
        self.results[at] = Some(encoded);
        if self.row.any_order {
            self.order.push(index);
        }
        if error {
            self.row.errors += 1;
        } else {
            self.row.solved += 1;
        }
        true
    }

    fn has_result(&self, index: usize) -> bool {
        self.results.get(index).is_some_and(Option::is_some)
    }
}

fn decode(bytes: &[u8]) -> Option<egress::PuzzleResult> {
    egress::PuzzleResult::decode(bytes).ok()
}

impl MemoryStore {
    /// An empty store that may not hold more than `cap` bytes.
    pub fn new(cap: Option<u64>) -> MemoryStore {
        MemoryStore {
            books: Mutex::default(),
            instance: super::instance_key(),
            cap,
        }
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses `more` bytes past the cap.
    fn room(&self, books: &Books, more: u64) -> Result<(), StoreError> {
        match self.cap {
            Some(cap) if books.bytes + more > cap => Err(StoreError::Full(format!(
                "{} bytes held, {more} more asked, {cap} at most",
                books.bytes
            ))),
            _ => Ok(()),
        }
    }

    fn rows(&self, keep: impl Fn(&JobRow) -> bool) -> Vec<JobRow> {
        self.books()
            .jobs
            .values()
            .filter(|j| keep(&j.row))
            .map(StoredJob::row)
            .collect()
    }
}

#[async_trait]
impl JobStore for MemoryStore {
    fn durable(&self) -> bool {
        false
    }

    fn job_id(&self, seq: i64) -> String {
        id_of(seq, &self.instance)
    }

    fn job_seq(&self, id: &str) -> Option<i64> {
        super::seq_of(id, &self.instance)
    }

    async fn create(&self, job: NewJob) -> Result<i64, StoreError> {
        let mut books = self.books();
        self.room(&books, JOB_BYTES)?;
        books.last_seq += 1;
        let seq = books.last_seq;
        let row = JobRow {
            seq,
            id: self.job_id(seq),
            owner: job.owner,
            name: job.name,
            priority: job.priority,
            state: JobState::Receiving,
            puzzles: 0,
            solved: 0,
            errors: 0,
            created_ms: job.created_ms,
            finished_ms: 0,
            failure: String::new(),
            fail_fast: job.fail_fast,
            any_order: job.any_order,
            bytes: 0,
            webhook: job.webhook.map(Webhook::new),
            trace: job.trace,
        };
        books.bytes += JOB_BYTES;
        books.jobs.insert(
            seq,
            StoredJob {
                row,
                puzzles: Vec::new(),
                results: Vec::new(),
                order: Vec::new(),
                bytes: JOB_BYTES,
            },
        );
        Ok(seq)
    }

    async fn add(&self, job: i64, first: u64, entries: Vec<Entry>) -> Result<(), StoreError> {
        let encoded: Vec<Option<Box<[u8]>>> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| match e {
                Entry::Puzzle { .. } => None,
                Entry::Invalid(r) => Some(
                    v1::PuzzleResult {
                        index: first + i as u64,
                        ..r.clone()
                    }
                    .encode_to_vec()
                    .into_boxed_slice(),
                ),
            })
            .collect();
        let more: u64 = entries
            .iter()
            .zip(&encoded)
            .map(|(e, r)| {
                let id = match e {
                    Entry::Puzzle { id, .. } => id.len() as u64,
                    Entry::Invalid(_) => 0,
                };
                id + ROW_BYTES + r.as_ref().map_or(0, |r| r.len() as u64 + ROW_BYTES)
            })
            .sum();
        let mut books = self.books();
        self.room(&books, more)?;
        let Some(stored) = books.jobs.get_mut(&job) else {
            return Err(StoreError::NoSuchJob(job));
        };
        let before = stored.bytes;
        let at = usize::try_from(first).unwrap_or(usize::MAX);
        if stored.puzzles.len() < at {
            stored.puzzles.resize(at, None);
        }
        for (i, (entry, result)) in entries.into_iter().zip(encoded).enumerate() {
            match entry {
                Entry::Puzzle { id, puzzle } => {
                    stored.bytes += id.len() as u64 + ROW_BYTES;
                    stored.puzzles.push(Some((id, puzzle)));
                }
                Entry::Invalid(_) => {
                    stored.bytes += ROW_BYTES;
                    stored.puzzles.push(None);
                    if let Some(r) = result {
                        stored.put(first + i as u64, r, true);
                    }
                }
            }
        }
        stored.row.puzzles = stored.puzzles.len() as u64;
        let grown = stored.bytes - before;
        books.bytes += grown;
        Ok(())
    }

    async fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError> {
        let mut books = self.books();
        let stored = books.jobs.get_mut(&job).ok_or(StoreError::NoSuchJob(job))?;
        let row = &mut stored.row;
        if row.state != JobState::Failed {
            if row.solved + row.errors >= row.puzzles {
                row.state = JobState::Done;
                row.finished_ms = now_ms;
            } else {
                row.state = JobState::Running;
                row.finished_ms = 0;
            }
        }
        Ok(stored.row())
    }

    async fn size_bytes(&self) -> Result<u64, StoreError> {
        Ok(self.books().bytes)
    }

    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        let mut books = self.books();
        let old: Vec<i64> = books
            .jobs
            .values()
            .filter(|j| {
                j.row.state.finished() && j.row.finished_ms > 0 && j.row.finished_ms < before_ms
            })
            .map(|j| j.row.seq)
            .collect();
        for seq in &old {
            if let Some(job) = books.jobs.remove(seq) {
                books.bytes -= job.bytes;
            }
        }
        Ok(old.len())
    }

    async fn delete(&self, job: i64) -> Result<(), StoreError> {
        let mut books = self.books();
        if let Some(job) = books.jobs.remove(&job) {
            books.bytes -= job.bytes;
        }
        Ok(())
    }

    async fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError> {
        Ok(self.books().jobs.get(&job).map(StoredJob::row))
    }

    async fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError> {
        let mut rows = self.rows(|r| r.owner == owner && r.state != JobState::Receiving);
        rows.reverse();
        Ok(rows)
    }

    async fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        Ok(self.rows(|r| matches!(r.state, JobState::Queued | JobState::Running)))
    }

    async fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if let Some(stored) = self.books().jobs.get_mut(&job)
            && !stored.row.state.finished()
        {
            stored.row.state = state;
            stored.row.failure = failure.to_string();
            stored.row.finished_ms = if state.finished() { now_ms } else { 0 };
        }
        Ok(())
    }

    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let books = self.books();
        let Some(stored) = books.jobs.get(&job) else {
            return Ok(Vec::new());
        };
        let from = after.map_or(0, |a| {
            usize::try_from(a).unwrap_or(usize::MAX).saturating_add(1)
        });
        Ok(stored
            .puzzles
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(i, _)| !stored.has_result(*i))
            .filter_map(|(i, p)| {
                p.as_ref()
                    .map(|(id, puzzle)| (i as u64, id.clone(), *puzzle))
            })
            .take(limit)
            .collect())
    }

    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        let encoded: Vec<Box<[u8]>> = results
            .iter()
            .map(|w| w.result.encode_to_vec().into_boxed_slice())
            .collect();
        let more = encoded.iter().map(|e| e.len() as u64 + ROW_BYTES).sum();
        let mut books = self.books();
        if let Err(e) = self.room(&books, more) {
            return (results, Err(e));
        }
        let mut new = vec![false; results.len()];
        let mut grown = 0;
        for ((w, bytes), new) in results.iter().zip(encoded).zip(&mut new) {
            let r = &w.result;
            if let Some(stored) = books.jobs.get_mut(&w.job) {
                let before = stored.bytes;
                *new = stored.put(r.index, bytes, r.error().is_some());
                grown += stored.bytes - before;
            }
        }
        books.bytes += grown;
        drop(books);
        (results, Ok(new))
    }

    async fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let books = self.books();
        let Some(stored) = books.jobs.get(&job) else {
            return Ok(Vec::new());
        };
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        let found: Vec<egress::PuzzleResult> = if stored_order {
            stored
                .order
                .iter()
                .skip(from)
                .take(limit)
                .map_while(|&i| stored.results[i as usize].as_deref().and_then(decode))
                .collect()
        } else {
            stored
                .results
                .iter()
                .skip(from)
                .take(limit)
                .map_while(|r| r.as_deref().and_then(decode))
                .collect()
        };
        Ok(found)
    }

    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let books = self.books();
        let Some(stored) = books.jobs.get(&job) else {
            return Ok(Vec::new());
        };
        let from = usize::try_from(from).unwrap_or(usize::MAX);
        Ok(stored
            .results
            .iter()
            .skip(from)
            .flatten()
            .take(limit)
            .map_while(|r| decode(r))
            .collect())
    }

    async fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError> {
        let mut due = self.rows(|r| {
            r.state.finished()
                && r.webhook
                    .as_ref()
                    .is_some_and(|w| w.next_ms != Webhook::NO_MORE && w.next_ms <= now_ms)
        });
        due.sort_by_key(|r| (r.webhook.as_ref().map_or(0, |w| w.next_ms), r.seq));
        due.truncate(limit);
        Ok(due)
    }

    async fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError> {
        let mut books = self.books();
        if let Some(w) = books
            .jobs
            .get_mut(&job)
            .and_then(|j| j.row.webhook.as_mut())
        {
            w.attempts = attempts;
            w.next_ms = next_ms;
            w.delivered = delivered;
        }
        Ok(())
    }
}
