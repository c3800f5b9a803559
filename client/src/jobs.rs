//! Durable jobs on a colball cluster (`colball.v1.Jobs`): submit a puzzle
//! set, get its id, and read its results later, from any index, as often
//! as needed. The commands behind `colball job ...`.

use colball_proto::MAX_MESSAGE_BYTES;
use colball_proto::auth::Bearer;
use colball_proto::puzzle_to_wire;
use colball_proto::v1::jobs_client::JobsClient;
use colball_proto::v1::{self, submit_request};
use colball_solver::Puzzle;
use tokio_stream::{Stream, StreamExt};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::remote::{self, ClientError, Security};

/// Puzzles per message of a submission (well under the message limit).
pub const SUBMIT_CHUNK: usize = 10_000;

/// A connection to a coordinator's job service.
#[derive(Clone, Debug)]
pub struct Jobs {
    inner: JobsClient<InterceptedService<Channel, Bearer>>,
}

impl Jobs {
    pub async fn connect(url: &str, security: &Security) -> Result<Jobs, ClientError> {
        let channel = remote::channel(url, security).await?;
        let inner = JobsClient::with_interceptor(channel, Bearer::new(security.token.as_ref()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Jobs { inner })
    }

    /// Submits `puzzles` (with their ids) as one job; returns its id once
    /// the coordinator has stored them all.
    pub async fn submit(
        &mut self,
        puzzles: &[(String, Puzzle)],
        priority: Option<v1::Priority>,
        name: &str,
    ) -> Result<v1::JobAccepted, ClientError> {
        let mut messages = vec![v1::SubmitRequest {
            kind: Some(submit_request::Kind::Options(v1::JobOptions {
                priority: priority.unwrap_or(v1::Priority::Unspecified) as i32,
                name: name.to_string(),
            })),
        }];
        for chunk in puzzles.chunks(SUBMIT_CHUNK) {
            messages.push(v1::SubmitRequest {
                kind: Some(submit_request::Kind::Puzzles(v1::PuzzleChunk {
                    puzzles: chunk
                        .iter()
                        .map(|(id, p)| puzzle_to_wire(id.clone(), p))
                        .collect(),
                })),
            });
        }
        Ok(self
            .inner
            .submit(tokio_stream::iter(messages))
            .await?
            .into_inner())
    }

    pub async fn get(&mut self, id: &str) -> Result<v1::Job, ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        Ok(self.inner.get(r).await?.into_inner())
    }

    pub async fn list(&mut self) -> Result<Vec<v1::Job>, ClientError> {
        Ok(self
            .inner
            .list(v1::ListJobsRequest {})
            .await?
            .into_inner()
            .jobs)
    }

    pub async fn cancel(&mut self, id: &str) -> Result<v1::Job, ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        Ok(self.inner.cancel(r).await?.into_inner())
    }

    pub async fn delete(&mut self, id: &str) -> Result<(), ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        self.inner.delete(r).await?;
        Ok(())
    }

    /// The job's results in input order from `from`; with `follow`, until
    /// the last.
    pub async fn results(
        &mut self,
        id: &str,
        from: u64,
        follow: bool,
    ) -> Result<impl Stream<Item = Result<v1::PuzzleResult, ClientError>> + use<>, ClientError>
    {
        let request = v1::ResultsRequest {
            id: id.to_string(),
            from_index: from,
            follow,
        };
        let stream = self.inner.results(request).await?.into_inner();
        Ok(stream.map(|r| r.map_err(ClientError::Status)))
    }
}

/// A job as one line for people.
pub fn job_line(job: &v1::Job) -> String {
    let mut line = format!(
        "{} {} {} puzzles: {} solved, {} errors, {} remaining",
        job.id,
        job.state_name(),
        job.puzzles,
        job.solved,
        job.errors,
        job.remaining
    );
    if !job.name.is_empty() {
        line.push_str(&format!(" ({})", job.name));
    }
    if !job.failure.is_empty() {
        line.push_str(&format!(": {}", job.failure));
    }
    line
}

/// A job as a JSON object.
pub fn job_json(job: &v1::Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "name": job.name,
        "state": job.state_name(),
        "puzzles": job.puzzles,
        "solved": job.solved,
        "errors": job.errors,
        "remaining": job.remaining,
        "created_unix_ms": job.created_unix_ms,
        "finished_unix_ms": job.finished_unix_ms,
        "failure": job.failure,
    })
}
