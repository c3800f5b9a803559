//! The gRPC services, served on one listener by [`serve`]: the
//! client-facing `colball.v1.Solver` ([`solver`], with `Grade` in
//! [`grade`]) and `colball.v1.Jobs` ([`jobs`]), the worker-facing
//! `colball.v1.Workers` ([`workers`]), `grpc.health.v1` and server
//! reflection. Each turns calls into operations on the scheduler's driver
//! or the jobs and adds no policy of its own. Their errors become gRPC
//! statuses here, in one place each (`From<ServerError>` below,
//! `From<JobError>` in [`jobs`]).

mod grade;
mod jobs;
mod solver;
mod workers;

use std::sync::Arc;
use std::time::Duration;

use colball_core::Priority;
use colball_proto::MAX_MESSAGE_BYTES;
use colball_proto::egress;
use colball_proto::ingest::jobs_server::JobsServer;
use colball_proto::ingest::solver_server::SolverServer;
use colball_proto::v1::workers_server::WorkersServer;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Request, Status};

use crate::app::{App, StartError};
use crate::auth::{self, Identity, Role};
use crate::coordinator::{Config, Scheduler, housekeeping};
use crate::error::ServerError;
use crate::lifecycle::Lifecycle;
use crate::telemetry;
use colball_core::RegisterError;
use solver::SolverService;
use workers::WorkersService;

/// A stream of results, as `SolveBatch` and a job's `Results` answer.
type ResultStream = std::pin::Pin<
    Box<dyn tokio_stream::Stream<Item = Result<egress::PuzzleResult, Status>> + Send>,
>;

/// Serves until `shutdown` is cancelled, then ends every stream and waits
/// up to `drain_timeout` for connections to close.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), RunError> {
    let app = App::start(config, shutdown.clone()).await?;
    serve(listener, app, shutdown).await?;
    Ok(())
}

/// Why the coordinator could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Transport(#[from] tonic::transport::Error),
}

/// Serves the services of `app` on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    app: App,
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "coordinator listening");
    }
    let scheduler = app.scheduler.clone();
    let housekeeping = tokio::spawn(housekeeping(scheduler.clone()));
    let drain_timeout = app.drain_timeout;
    // When the drain ends: `drain_timeout` after the shutdown began.
    let drain_until = Arc::new(std::sync::OnceLock::new());
    let closer = {
        let scheduler = scheduler.clone();
        let shutdown = shutdown.clone();
        let drain_until = drain_until.clone();
        async move {
            shutdown.cancelled().await;
            let _ = drain_until.set(tokio::time::Instant::now() + drain_timeout);
            tracing::info!("coordinator shutting down");
            scheduler.shut_down();
        }
    };
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = app.access.tls() {
        builder = builder.tls_config(tls.clone())?;
    }
    let client_auth = auth::check_clients(app.access.tokens().clone());
    let worker_auth = auth::check(app.access.worker_token(), Role::Worker);
    let solver = SolverServer::new(SolverService {
        scheduler: scheduler.clone(),
        access: app.access.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let job_service = JobsServer::new(jobs::JobsService {
        jobs: app.jobs.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let workers = WorkersServer::new(WorkersService {
        scheduler: scheduler.clone(),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // Health stays open (probes carry no token); reflection describes the
    // client API, so it asks for the client token like the API itself.
    let (health, health_service) = tonic_health::server::health_reporter();
    health_initial(&health).await;
    let health_task = tokio::spawn(report_health(
        scheduler.clone(),
        app.lifecycle.clone(),
        health,
    ));
    let (reflection_v1, reflection_v1alpha) = reflection();
    let server = builder
        .trace_fn(call_span)
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(InterceptedService::new(solver, client_auth.clone()))
        .add_service(InterceptedService::new(job_service, client_auth.clone()))
        .add_service(InterceptedService::new(workers, worker_auth))
        .add_service(health_service)
        .add_optional_service(
            reflection_v1.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .add_optional_service(
            reflection_v1alpha.map(|r| InterceptedService::new(r, client_auth.clone())),
        )
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener).map(|s| {
                s.inspect(|s| {
                    // Small replies must not wait for a delayed ACK.
                    let _ = s.set_nodelay(true);
                })
            }),
            closer,
        );
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(drain_timeout).await;
        } => {
            tracing::warn!("drain timeout passed; closing remaining connections");
            Ok(())
        }
    };
    // The requests', jobs' and sessions' own tasks end with their streams;
    // what is still running at the deadline is dropped with the runtime.
    let until = drain_until
        .get()
        .copied()
        .unwrap_or_else(|| tokio::time::Instant::now() + drain_timeout);
    if !app.lifecycle.drain(until).await {
        tracing::warn!(
            tasks = app.lifecycle.running_tasks(),
            "drain timeout passed with tasks still running"
        );
    }
    housekeeping.abort();
    health_task.abort();
    result
}

/// gRPC server reflection (v1, and v1alpha for older tools) over the
/// colball and health services, so grpcurl and other generic clients can
/// list and call them without the `.proto` files.
fn reflection() -> (
    Option<
        tonic_reflection::server::v1::ServerReflectionServer<
            impl tonic_reflection::server::v1::ServerReflection,
        >,
    >,
    Option<
        tonic_reflection::server::v1alpha::ServerReflectionServer<
            impl tonic_reflection::server::v1alpha::ServerReflection,
        >,
    >,
) {
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(colball_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let warn = |e: tonic_reflection::server::Error| {
        tracing::error!(error = %e, "server reflection disabled: bad descriptor set");
    };
    (
        builder().build_v1().map_err(warn).ok(),
        builder().build_v1alpha().map_err(warn).ok(),
    )
}

fn service_names() -> (&'static str, &'static str) {
    (
        <SolverServer<SolverService> as tonic::server::NamedService>::NAME,
        <WorkersServer<WorkersService> as tonic::server::NamedService>::NAME,
    )
}

/// The statuses before the first worker: set before serving, so no early
/// health check finds a service unknown.
async fn health_initial(health: &tonic_health::server::HealthReporter) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let (solver, workers) = service_names();
    health.set_service_status(workers, Serving).await;
    health.set_service_status(solver, NotServing).await;
}

/// Keeps `grpc.health.v1` in step with the cluster: the server (service
/// `""`) and `colball.v1.Workers` serve while the coordinator runs;
/// `colball.v1.Solver` serves only while at least one worker is connected
/// (like `/readyz`). Everything turns NOT_SERVING at shutdown.
async fn report_health(
    scheduler: Arc<Scheduler>,
    lifecycle: Lifecycle,
    mut health: tonic_health::server::HealthReporter,
) {
    use tonic_health::ServingStatus::{NotServing, Serving};
    let (solver, workers) = service_names();
    let mut count = scheduler.workers();
    let mut last = None;
    loop {
        let ready = *count.borrow_and_update() > 0 && !lifecycle.shutting_down();
        // The count is republished on every housekeeping tick; health
        // watchers hear only real changes.
        if last != Some(ready) {
            last = Some(ready);
            health
                .set_service_status(solver, if ready { Serving } else { NotServing })
                .await;
        }
        tokio::select! {
            changed = count.changed() => if changed.is_err() { break },
            () = lifecycle.cancelled() => break,
        }
    }
    for service in ["", solver, workers] {
        health.set_service_status(service, NotServing).await;
    }
    // Dropping the statuses ends every health Watch stream, so health
    // watchers do not hold the shutdown up until the drain timeout.
    for service in ["", solver, workers] {
        health.clear_service_status(service).await;
    }
}
impl From<ServerError> for Status {
    fn from(e: ServerError) -> Status {
        let code = match &e {
            ServerError::InvalidPuzzle(_)
            | ServerError::InvalidBatch(_)
            | ServerError::MissingPuzzle
            | ServerError::BadSession(_)
            | ServerError::BadPriority(_) => Code::InvalidArgument,
            ServerError::Register(RegisterError::Slots { .. }) => Code::InvalidArgument,
            ServerError::Register(RegisterError::Quarantined { .. }) => Code::PermissionDenied,
            ServerError::Admit(_)
            | ServerError::BatchTooLarge { .. }
            | ServerError::TooManyRequests { .. } => Code::ResourceExhausted,
            ServerError::NoWorkers { .. } | ServerError::ShuttingDown => Code::Unavailable,
            ServerError::DeadlineExceeded => Code::DeadlineExceeded,
            ServerError::VersionMismatch { .. } => Code::FailedPrecondition,
        };
        if let ServerError::ShuttingDown = e {
            return colball_proto::reason::shutting_down(e.to_string());
        }
        Status::new(code, e.to_string())
    }
}

/// The client a call counts for: its token's name, or its IP address.
fn client_of<T>(request: &Request<T>) -> String {
    if let Some(Identity(name)) = request.extensions().get::<Identity>() {
        return name.to_string();
    }
    request
        .remote_addr()
        .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string())
}

/// The priority of a request: its field, or the RPC's default.
fn priority(value: i32, default: Priority) -> Result<Priority, ServerError> {
    Priority::from_wire(value, default).ok_or(ServerError::BadPriority(value))
}

/// Reads the `grpc-timeout` header (`<digits><unit>`, unit one of H M S m u n).
fn grpc_timeout(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}
/// A span for each client's call (`rpc` named after its method), in the
/// trace its `traceparent` metadata names, if any. Health probes and
/// workers' sessions (which have their own span) get none.
fn call_span(request: &tonic::codegen::http::Request<()>) -> tracing::Span {
    let method = request.uri().path();
    if method.starts_with("/grpc.health.") || method.starts_with("/colball.v1.Workers/") {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "rpc",
        otel.name = method.trim_start_matches('/'),
        otel.kind = "server",
        rpc.system = "grpc",
    );
    telemetry::adopt_headers(&span, request.headers());
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        let mut m = tonic::metadata::MetadataMap::new();
        m.insert("grpc-timeout", "250m".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
        m.insert("grpc-timeout", "3S".parse().unwrap());
        assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(3)));
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(grpc_timeout(&m), None);
    }
}
