//! `colball.v1.Jobs`: durable jobs over gRPC. The jobs themselves are
//! [`crate::jobs`]; this service reads the calls, turns `Submit`'s stream
//! into chunks of puzzles, and maps [`JobError`] to statuses.

use std::sync::Arc;

use colball_proto::ingest::jobs_server::Jobs as JobsRpc;
use colball_proto::ingest::{self, MAX_PUZZLES, Submitted};
use colball_proto::{puzzle_from_wire, v1};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use colball_core::Priority;

use super::{ResultStream, client_of};
use crate::jobs::store::JobState;
use crate::jobs::{Entry, JobError, JobSpec, JobView, Jobs, StoreError, SubmitError};

/// The client-facing job service.
#[derive(Debug)]
pub struct JobsService {
    pub jobs: Arc<Jobs>,
}

impl From<JobError> for Status {
    fn from(e: JobError) -> Status {
        match e {
            JobError::Invalid(m) => Status::invalid_argument(m),
            JobError::TooBig(_) | JobError::StoreLimit { .. } => {
                Status::resource_exhausted(e.to_string())
            }
            JobError::KeyTaken(m) => Status::already_exists(m),
            JobError::NotFound(m) => Status::not_found(m),
            JobError::OverQuota(over) => {
                colball_proto::reason::over_quota(over.message, over.quota, over.retry_after)
            }
            JobError::Incomplete(m) => Status::aborted(m),
            JobError::ShuttingDown => colball_proto::reason::shutting_down(e.to_string()),
            JobError::Store(e) => {
                tracing::error!(error = %e, "job store");
                match e {
                    StoreError::Full(_) => Status::resource_exhausted(e.to_string()),
                    StoreError::Unavailable(_) | StoreError::Conflict(_) => {
                        Status::unavailable(e.to_string())
                    }
                    _ => Status::internal(e.to_string()),
                }
            }
        }
    }
}

/// `Submit`'s options read into the job's spec: an unset field is the
/// default (a bulk job, no key, no webhook, no count announced).
fn spec(options: v1::JobOptions) -> Result<JobSpec, JobError> {
    let priority = Priority::from_wire(options.priority, Priority::Bulk).ok_or_else(|| {
        JobError::Invalid(format!(
            "field priority: {} names no priority class",
            options.priority
        ))
    })?;
    let given = |text: String| (!text.is_empty()).then_some(text);
    Ok(JobSpec {
        name: options.name,
        priority,
        fail_fast: options.fail_without_workers,
        any_order: options.any_order,
        key: given(options.key),
        puzzles: (options.puzzles != 0).then_some(options.puzzles),
        webhook: given(options.webhook),
    })
}

/// A job on the wire.
fn job(view: JobView) -> v1::Job {
    let webhook_next_ms = view.webhook_next_ms();
    let JobView { row, pace } = view;
    let remaining = row.remaining();
    let state = match row.state {
        JobState::Receiving => v1::JobState::Unspecified,
        JobState::Queued => v1::JobState::Queued,
        JobState::Running => v1::JobState::Running,
        JobState::Done => v1::JobState::Done,
        JobState::Cancelled => v1::JobState::Cancelled,
        JobState::Failed => v1::JobState::Failed,
    };
    v1::Job {
        id: row.id,
        name: row.name,
        state: state as i32,
        priority: row.priority.to_wire() as i32,
        puzzles: row.puzzles,
        solved: row.solved,
        errors: row.errors,
        remaining,
        created_unix_ms: row.created_ms,
        finished_unix_ms: row.finished_ms,
        failure: row.failure,
        any_order: row.any_order,
        rate: pace.rate,
        eta_unix_ms: pace.eta_unix_ms,
        webhook: row.webhook.map(|w| v1::WebhookStatus {
            url: w.url,
            attempts: w.attempts,
            delivered: w.delivered,
            next_unix_ms: webhook_next_ms,
        }),
    }
}

/// A chunk of `Submit`'s puzzles, read: each puzzle parsed, or the error
/// result it gets (its index is set when it is stored).
fn entries(chunk: ingest::PuzzleChunk) -> Result<Vec<Entry>, Status> {
    if chunk.beyond > 0 {
        return Err(Status::resource_exhausted(format!(
            "field puzzles: a chunk of more than {MAX_PUZZLES} puzzles; send smaller chunks"
        )));
    }
    Ok(chunk
        .puzzles
        .into_iter()
        .map(|wire| match puzzle_from_wire(&wire) {
            Ok(puzzle) => Entry::Puzzle {
                id: wire.id,
                puzzle,
            },
            Err(e) => Entry::Invalid(v1::PuzzleResult::invalid(0, &e)),
        })
        .collect())
}

#[tonic::async_trait]
impl JobsRpc for JobsService {
    async fn submit(
        &self,
        request: Request<Streaming<ingest::SubmitRequest>>,
    ) -> Result<Response<v1::JobAccepted>, Status> {
        let client = client_of(&request);
        let mut inbound = request.into_inner();
        let first = inbound.message().await?;
        let Some(ingest::SubmitRequest {
            kind: Some(Submitted::Options(options)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "field options: the first message of Submit must carry the job's options",
            ));
        };
        let chunks = inbound.map(|m| match m?.kind {
            Some(Submitted::Puzzles(chunk)) => entries(chunk),
            _ => Err(Status::invalid_argument(
                "field puzzles: only the first message of Submit carries options",
            )),
        });
        let spec = spec(options)?;
        let row = match self.jobs.submit(&client, spec, chunks).await {
            Ok(row) => row,
            Err(SubmitError::Job(e)) => return Err(e.into()),
            Err(SubmitError::Upload(status)) => return Err(status),
        };
        Ok(Response::new(v1::JobAccepted {
            id: row.id(),
            puzzles: row.puzzles,
            durable: self.jobs.durable(),
        }))
    }

    async fn get(&self, request: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        let client = client_of(&request);
        let row = self.jobs.owned(&request.into_inner().id, &client).await?;
        Ok(Response::new(job(self.jobs.status(row))))
    }

    async fn list(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::JobList>, Status> {
        let client = client_of(&request);
        let rows = self.jobs.list(&client).await?;
        Ok(Response::new(v1::JobList {
            jobs: rows.into_iter().map(|r| job(self.jobs.status(r))).collect(),
        }))
    }

    async fn cancel(&self, request: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        let client = client_of(&request);
        let row = self.jobs.cancel(&request.into_inner().id, &client).await?;
        Ok(Response::new(job(self.jobs.status(row))))
    }

    async fn delete(
        &self,
        request: Request<v1::JobRef>,
    ) -> Result<Response<v1::DeleteJobResponse>, Status> {
        let client = client_of(&request);
        self.jobs.delete(&request.into_inner().id, &client).await?;
        Ok(Response::new(v1::DeleteJobResponse {}))
    }

    type ResultsStream = ResultStream;

    async fn results(
        &self,
        request: Request<v1::ResultsRequest>,
    ) -> Result<Response<ResultStream>, Status> {
        let client = client_of(&request);
        let request = request.into_inner();
        // A job read by its key may still be growing: its stream always
        // follows it to its end.
        let (row, follow) = if request.id.is_empty() && !request.key.is_empty() {
            (
                self.jobs.followed_by_key(&request.key, &client).await?,
                true,
            )
        } else {
            (
                self.jobs.followed(&request.id, &client).await?,
                request.follow,
            )
        };
        let rx = self.jobs.results(row, request.from_index, follow);
        let results = ReceiverStream::new(rx).map(|r| r.map_err(Status::from));
        Ok(Response::new(Box::pin(results)))
    }
}
