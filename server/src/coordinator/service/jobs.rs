//! `colball.v1.Jobs`: durable jobs over gRPC (the runs themselves are
//! [`crate::coordinator::jobs`]; the HTTP job API shares them).

use std::pin::Pin;
use std::sync::Arc;

use colball_proto::v1::jobs_server::Jobs;
use colball_proto::v1::{self, submit_request};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::client_of;
use crate::coordinator::{Shared, jobs};
use crate::store::JobRow;

/// The client-facing job service.
#[derive(Debug)]
pub struct JobsService {
    pub shared: Arc<Shared>,
}

type ResultStream = Pin<Box<dyn Stream<Item = Result<v1::PuzzleResult, Status>> + Send>>;

impl JobsService {
    async fn owned(&self, id: &str, client: &str) -> Result<JobRow, Status> {
        jobs::owned(&self.shared, id, client).await
    }
}

#[tonic::async_trait]
impl Jobs for JobsService {
    async fn submit(
        &self,
        request: Request<Streaming<v1::SubmitRequest>>,
    ) -> Result<Response<v1::JobAccepted>, Status> {
        let client = client_of(&request);
        let mut inbound = request.into_inner();
        let first = inbound.message().await?;
        let Some(v1::SubmitRequest {
            kind: Some(submit_request::Kind::Options(options)),
        }) = first
        else {
            return Err(Status::invalid_argument(
                "field options: the first message of Submit must carry the job's options",
            ));
        };
        let chunks = inbound.map(|m| match m?.kind {
            Some(submit_request::Kind::Puzzles(chunk)) => Ok(chunk.puzzles),
            _ => Err(Status::invalid_argument(
                "field puzzles: only the first message of Submit carries options",
            )),
        });
        let row = jobs::submit_job(&self.shared, &client, options, chunks).await?;
        Ok(Response::new(v1::JobAccepted {
            id: row.id(),
            puzzles: row.puzzles,
            durable: self.shared.store.durable(),
        }))
    }

    async fn get(&self, request: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        let client = client_of(&request);
        let row = self.owned(&request.into_inner().id, &client).await?;
        Ok(Response::new(row.to_wire()))
    }

    async fn list(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::JobList>, Status> {
        let client = client_of(&request);
        let store = self.shared.store.clone();
        let rows = jobs::blocking(move || store.list(&client)).await?;
        Ok(Response::new(v1::JobList {
            jobs: rows.iter().map(|r| r.to_wire()).collect(),
        }))
    }

    async fn cancel(&self, request: Request<v1::JobRef>) -> Result<Response<v1::Job>, Status> {
        let client = client_of(&request);
        let row = self.owned(&request.into_inner().id, &client).await?;
        let row = jobs::cancel_job(&self.shared, row).await?;
        Ok(Response::new(row.to_wire()))
    }

    async fn delete(
        &self,
        request: Request<v1::JobRef>,
    ) -> Result<Response<v1::DeleteJobResponse>, Status> {
        let client = client_of(&request);
        jobs::delete_job(&self.shared, &request.into_inner().id, &client).await?;
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
                jobs::keyed(&self.shared, &request.key, &client).await?,
                true,
            )
        } else {
            (self.owned(&request.id, &client).await?, request.follow)
        };
        let rx = jobs::results_of(&self.shared, row, request.from_index, follow);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
