//! Submitting a job: its puzzles arrive in chunks (from the gRPC `Submit`
//! stream or an HTTP upload, parsed by the API layer) and are stored as
//! they come.
//!
//! A job runs while it is uploaded: its run starts once its first chunk is
//! stored and follows the chunks as they come, so the workers solve while
//! the rest of a large job is still arriving. The job is acknowledged (and
//! readable) once every puzzle is stored; an upload that fails stops the
//! run and deletes the job and its results. On a shared store, chunks
//! after the first that come close together are stored as one (a
//! statement a few windows long).

use std::sync::Arc;
use std::time::{Duration, Instant};

use colball_core::Priority;
use colball_proto::egress;
use tokio_stream::{Stream, StreamExt};

use super::keys::{KeyHold, check_key};
use super::quotas::Held;
use super::run::UploadProgress;
use super::store::{Entry, JobRow, NewJob, WINDOW};
use super::{JobError, Jobs, SubmitError};
use crate::coordinator::events;

/// Puzzles of an upload's chunks that come close together stored in one
/// write to a shared store, at most (beyond its first chunk, which starts
/// the run at once). A store of the coordinator's own writes each chunk:
/// its writes are cheap, and the coordinator's memory holds one chunk.
const GATHER: usize = 4 * WINDOW;

/// How long a chunk waits for the next one to be stored with it.
const GATHER_WAIT: Duration = Duration::from_millis(20);

/// Most characters in a job's name.
pub const NAME_CHARS: usize = 256;

/// A job to submit, as an API layer read it from its request.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// Its name, for people (at most [`NAME_CHARS`] characters).
    pub name: String,
    pub priority: Priority,
    /// Fail the job when no worker is connected for the grace period.
    pub fail_fast: bool,
    /// Its results are read in the order they are stored.
    pub any_order: bool,
    /// The client's key for it: its results are readable by the key before
    /// its upload ends.
    pub key: Option<String>,
    /// The puzzles it announces: the upload must hold exactly these.
    pub puzzles: Option<u64>,
    /// The URL to call once it finishes.
    pub webhook: Option<String>,
}

impl JobSpec {
    /// A job of `priority`, with nothing else asked.
    pub fn new(priority: Priority) -> JobSpec {
        JobSpec {
            name: String::new(),
            priority,
            fail_fast: false,
            any_order: false,
            key: None,
            puzzles: None,
            webhook: None,
        }
    }
}

impl Jobs {
    /// Stores a job of `client` from chunks of puzzles and starts it; the
    /// job's row once every puzzle is stored. On any failure nothing of it
    /// is kept.
    pub async fn submit<E>(
        self: &Arc<Self>,
        client: &str,
        spec: JobSpec,
        chunks: impl Stream<Item = Result<Vec<Entry>, E>> + Unpin,
    ) -> Result<JobRow, SubmitError<E>> {
        let mut chunks = chunks.fuse();
        if spec.name.chars().count() > NAME_CHARS {
            let message = format!("field name: at most {NAME_CHARS} characters");
            return Err(JobError::Invalid(message).into());
        }
        if let Some(key) = &spec.key {
            check_key(key, "options.key")?;
        }
        let webhook = match spec.webhook.as_deref() {
            None => None,
            Some(url) => Some(
                self.webhooks
                    .check(url)
                    .map_err(|why| JobError::Invalid(format!("field webhook: {why}")))?,
            ),
        };
        let limit = self.limits.max_job_puzzles;
        if let Some(announced) = spec.puzzles.filter(|&n| n > limit as u64) {
            return Err(JobError::TooBig(format!(
                "field options.puzzles: {announced} puzzles is more than {limit}, the limit per job (--max-job-puzzles); split it"
            ))
            .into());
        }
        // The job's runs join the trace of the call that submits it.
        let trace = crate::telemetry::context::traceparent(&tracing::Span::current());
        let quotas = &self.quotas;
        quotas
            .submission(client, Instant::now())
            .map_err(JobError::OverQuota)?;
        let quota = quotas.of(client);
        let held = if quota.reads_the_store() {
            self.held(client).await?
        } else {
            Held::default()
        };
        quota
            .check(client, &held, 0, 0)
            .map_err(JobError::OverQuota)?;
        self.check_room().await?;
        let seq = self
            .store
            .create(NewJob {
                owner: client.to_string(),
                name: spec.name.clone(),
                priority: spec.priority,
                fail_fast: spec.fail_fast,
                any_order: spec.any_order,
                created_ms: events::unix_ms(),
                webhook,
                trace: trace.clone(),
            })
            .await?;
        let mut unsealed = Unsealed {
            jobs: self.clone(),
            seq,
            settled: false,
            key: None,
        };
        let mut upload = UploadProgress::default();
        let outcome: Result<(), SubmitError<E>> = async {
            if let Some(key) = &spec.key {
                unsealed.key = Some(self.keys.take(client, key, seq)?);
            }
            while let Some(chunk) = chunks.next().await {
                let mut chunk = chunk.map_err(SubmitError::Upload)?;
                if chunk.is_empty() {
                    // Nothing to store (and not the chunk that starts the run).
                    continue;
                }
                let count = upload.puzzles;
                if count > 0 && self.store.shared().is_some() {
                    let until = tokio::time::Instant::now() + GATHER_WAIT;
                    while chunk.len() < GATHER {
                        match tokio::time::timeout_at(until, chunks.next()).await {
                            Ok(Some(more)) => chunk.extend(more.map_err(SubmitError::Upload)?),
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
                let n = chunk.len() as u64;
                if let Some(announced) = spec.puzzles.filter(|&a| count + n > a) {
                    return Err(JobError::Invalid(format!(
                        "field puzzles: more puzzles than the {announced} its options announced (field options.puzzles)"
                    ))
                    .into());
                }
                if count + n > limit as u64 {
                    return Err(JobError::TooBig(format!(
                        "the job holds more than {limit} puzzles, the limit per job (--max-job-puzzles); split it"
                    ))
                    .into());
                }
                // Error results carry their index in the job.
                let mut invalid = Vec::new();
                for (index, entry) in (count..).zip(&mut chunk) {
                    if let Entry::Invalid(r) = entry {
                        r.index = index;
                        invalid.push(egress::PuzzleResult::from(r.clone()));
                    }
                }
                let valid = n - invalid.len() as u64;
                quota
                    .check(client, &held, count + n, 0)
                    .map_err(JobError::OverQuota)?;
                self.check_room().await?;
                self.store.add(seq, count, chunk).await?;
                if quota.stored_mib.is_some() {
                    let bytes = self.store.job(seq).await?.map_or(0, |row| row.bytes);
                    quota
                        .check(client, &held, count + n, bytes)
                        .map_err(JobError::OverQuota)?;
                }
                upload.puzzles += n;
                upload.valid += valid;
                if count == 0 {
                    // The run starts with the first chunk.
                    self.start_run(
                        (seq, client, spec.any_order),
                        n - valid,
                        upload,
                        unsealed.key.take(),
                        (None, trace.as_deref()),
                    );
                } else {
                    if let Some(run) = self.runs.get(&seq) {
                        run.upload.send_replace(upload);
                        // Their error results are stored already:
                        // followers get them as a stored group.
                        if !invalid.is_empty() {
                            let _ = run.live.send(Arc::new(invalid));
                        }
                    }
                    self.stored(seq, n - valid);
                }
            }
            if upload.puzzles == 0 {
                return Err(JobError::Invalid("field puzzles: the job holds no puzzle".into()).into());
            }
            if let Some(announced) = spec.puzzles.filter(|&a| upload.puzzles != a) {
                return Err(JobError::Incomplete(format!(
                    "the submission ended after {} of the {announced} puzzles its options announced (field options.puzzles); nothing of it is kept: submit it again",
                    upload.puzzles
                ))
                .into());
            }
            Ok(())
        }
        .await;
        if let Err(e) = outcome {
            unsealed.abandon();
            let _ = self.store.delete(seq).await;
            return Err(e);
        }
        let row = self.store.seal(seq, events::unix_ms()).await?;
        unsealed.settled = true;
        tracing::info!(job = %row.id(), puzzles = upload.puzzles, client, priority = %spec.priority, "job accepted");
        if let Some(run) = self.runs.get(&seq) {
            upload.sealed = true;
            run.upload.send_replace(upload);
        }
        Ok(row)
    }

    /// What `client` holds in the store now, for its quotas.
    async fn held(&self, client: &str) -> Result<Held, JobError> {
        let now_ms = events::unix_ms();
        let mut held = Held::default();
        for row in self.store.list(client).await? {
            held.bytes += row.bytes;
            if row.state.finished() {
                let ends = row.finished_ms + self.limits.retention.as_millis() as i64;
                let wait = Duration::from_millis(ends.saturating_sub(now_ms).max(0) as u64);
                held.frees_in = Some(held.frees_in.map_or(wait, |w| w.min(wait)));
            } else {
                held.queued += row.remaining();
                held.rate += self.status(row).pace.rate;
            }
        }
        Ok(held)
    }

    /// Refuses more puzzles when the store has reached `--max-store-mib`.
    async fn check_room(&self) -> Result<(), JobError> {
        let Some(limit) = self.limits.max_store_bytes else {
            return Ok(());
        };
        let size = self.store.size_bytes().await?;
        if size >= limit {
            return Err(JobError::StoreLimit {
                held_mib: size >> 20,
                limit_mib: limit >> 20,
            });
        }
        Ok(())
    }
}

/// A job whose upload is under way. If the upload ends without sealing it
/// (an error, or the submission's future dropped because the client went
/// away mid-upload), its run is stopped and, for a dropped upload, the job
/// deleted: nothing of an unacknowledged job is kept, or solved on.
struct Unsealed {
    jobs: Arc<Jobs>,
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
        self.jobs.stop(self.seq);
    }
}

impl Drop for Unsealed {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.abandon();
        let (jobs, seq) = (self.jobs.clone(), self.seq);
        tracing::info!(job = %jobs.store.job_id(seq), "submission cut short; its puzzles are dropped");
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = jobs.store.delete(seq).await;
            });
        }
    }
}
