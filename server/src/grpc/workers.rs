//! `colball.v1.Workers`: one session stream per worker, from its
//! registration (checked: protocol version, slots, quarantine) to its loss.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use colball_proto::PROTOCOL_VERSION;
use colball_proto::v1::{self, worker_message, workers_server::Workers};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use crate::coordinator::Scheduler;
use crate::error::ServerError;
use colball_core::{Input, LossReason};

type MessageStream = Pin<Box<dyn Stream<Item = Result<v1::CoordinatorMessage, Status>> + Send>>;

/// The worker-facing service.
#[derive(Debug)]
pub(super) struct WorkersService {
    pub(super) scheduler: Arc<Scheduler>,
}

#[tonic::async_trait]
impl Workers for WorkersService {
    type SessionStream = MessageStream;

    async fn session(
        &self,
        request: Request<Streaming<v1::WorkerMessage>>,
    ) -> Result<Response<MessageStream>, Status> {
        let peer = request.remote_addr();
        let mut inbound = request.into_inner();
        let first = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| ServerError::BadSession("no register message within 10s".into()))?
            .map_err(|s| ServerError::BadSession(s.message().to_string()))?;
        let Some(v1::WorkerMessage {
            kind: Some(worker_message::Kind::Register(register)),
        }) = first
        else {
            return Err(
                ServerError::BadSession("the first message must be register".into()).into(),
            );
        };
        if register.protocol_version != PROTOCOL_VERSION {
            tracing::warn!(peer = %crate::telemetry::addr(peer), name = %register.name, version = register.protocol_version, "worker refused: protocol version mismatch");
            return Err(ServerError::VersionMismatch {
                worker: register.protocol_version,
                coordinator: PROTOCOL_VERSION,
            }
            .into());
        }
        let scheduler = self.scheduler.clone();
        let mut name: String = register.name.chars().take(64).collect();
        if name.is_empty() {
            name = "worker".to_string();
        }
        let ip = peer.map(|p| p.ip());
        let session = match scheduler.register(&name, ip, register.slots) {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(peer = %crate::telemetry::addr(peer), %name, error = %e, "worker refused");
                return Err(ServerError::from(e).into());
            }
        };
        let worker = session.worker;
        tracing::info!(peer = %crate::telemetry::addr(peer), %name, slots = register.slots, worker, "worker joined");
        let span = tracing::info_span!("worker", worker, %name);
        scheduler.lifecycle().spawn(
            span,
            session_loop(scheduler.clone(), worker, inbound, session.stop),
        );
        // A closed session's stream ends with a status saying why, or
        // without one when there is nothing to say.
        let messages = UnboundedReceiverStream::new(session.messages).map_while(|m| match m {
            Ok(m) => Some(Ok(m)),
            Err(reason) => close_status(&reason).map(Err),
        });
        Ok(Response::new(Box::pin(messages)))
    }
}

/// Reads one worker's messages until its stream ends, the state closes its
/// session, or the coordinator shuts down.
async fn session_loop(
    scheduler: Arc<Scheduler>,
    worker: u64,
    mut inbound: Streaming<v1::WorkerMessage>,
    stop: CancellationToken,
) {
    let reason = loop {
        let message = tokio::select! {
            m = inbound.message() => m,
            () = stop.cancelled() => {
                // The state closed this session; its stream ends with a
                // status saying why. Dropping the worker's half now could
                // reset the call before that status is sent, so keep
                // reading (and ignoring) for a moment, until the worker
                // hangs up.
                let linger = async { while let Ok(Some(_)) = inbound.message().await {} };
                let _ = tokio::time::timeout(Duration::from_secs(5), linger).await;
                return;
            }
            () = scheduler.lifecycle().cancelled() => break LossReason::Shutdown,
        };
        let message = match message {
            Ok(Some(m)) => m,
            Ok(None) | Err(_) => break LossReason::Disconnected,
        };
        match message.kind {
            Some(worker_message::Kind::Heartbeat(h)) => scheduler.tell(Input::Heartbeat {
                worker,
                cache: h.cache,
            }),
            None => scheduler.tell(Input::Heartbeat {
                worker,
                cache: None,
            }),
            Some(worker_message::Kind::Draining(_)) => {
                tracing::info!(worker, "worker draining");
                scheduler.tell(Input::Drain { worker });
            }
            Some(worker_message::Kind::Results(batch)) => scheduler.tell(Input::Results {
                worker,
                results: batch.results,
            }),
            Some(worker_message::Kind::Register(_)) => {
                tracing::warn!(worker, "worker registered twice; ignored");
            }
        }
    };
    scheduler.session_ended(worker, reason);
}

/// The status a worker's stream ends with when the state closed its
/// session, when it should say why.
fn close_status(reason: &LossReason) -> Option<Status> {
    match reason {
        LossReason::Quarantined(r) => Some(Status::permission_denied(format!(
            "quarantined: {r}; this worker's answers are refused for --quarantine-secs"
        ))),
        LossReason::Protocol(e) => Some(Status::invalid_argument(format!("protocol error: {e}"))),
        LossReason::Stuck => Some(Status::deadline_exceeded(
            "a task was held past the coordinator's --task-timeout-secs; reconnect",
        )),
        LossReason::Silent => Some(Status::deadline_exceeded("heartbeats missed; reconnect")),
        LossReason::Unresponsive => Some(Status::deadline_exceeded(
            "answered nothing for many times the expected solve time while other workers answered; its tasks went elsewhere; reconnect",
        )),
        LossReason::Left | LossReason::Disconnected | LossReason::Shutdown => None,
    }
}
