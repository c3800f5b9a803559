//! Spans exported over OTLP to a real receiver in the test (decoding the
//! real protobuf messages): the coordinator over gRPC, the worker over
//! HTTP with protobuf bodies, each under its service's name, with a job's
//! id on its span; and a batch of tasks a span, not a puzzle.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_proto::prost::Message;
use colball_testkit::procs;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use crate::common::mixed;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// A span as received: its service, its name and its attributes.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    attributes: HashMap<String, String>,
}

/// What the receiver has been sent, by either protocol.
#[derive(Clone, Debug, Default)]
struct Receiver(Arc<Mutex<Vec<Received>>>);

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

impl Receiver {
    fn take(&self, request: ExportTraceServiceRequest) {
        let mut spans = self.0.lock().unwrap();
        for resource in request.resource_spans {
            let service = resource
                .resource
                .as_ref()
                .map(|r| attributes(&r.attributes))
                .and_then(|a| a.get("service.name").cloned())
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Received {
                        service: service.clone(),
                        name: span.name.clone(),
                        attributes: attributes(&span.attributes),
                    });
                }
            }
        }
    }

    /// Waits (a minute at most) until a span `pick` takes has arrived.
    async fn wait_for(&self, what: &str, pick: impl Fn(&Received) -> bool) -> Received {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(span) = self.0.lock().unwrap().iter().find(|s| pick(s)) {
                return span.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {what} in a minute; received: {:?}",
                self.0.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.take(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// Serves the receiver on loopback: OTLP over gRPC, and over HTTP
/// (`POST /v1/traces`, a protobuf body). The addresses.
async fn serve(receiver: Receiver) -> (std::net::SocketAddr, std::net::SocketAddr) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc.local_addr().unwrap();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc)),
    );
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            match ExportTraceServiceRequest::decode(body) {
                Ok(request) => {
                    receiver.take(request);
                    (
                        axum::http::StatusCode::OK,
                        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
                        ExportTraceServiceResponse {
                            partial_success: None,
                        }
                        .encode_to_vec(),
                    )
                }
                Err(_) => (
                    axum::http::StatusCode::BAD_REQUEST,
                    [(axum::http::header::CONTENT_TYPE, "text/plain")],
                    b"not an OTLP trace request".to_vec(),
                ),
            }
        }),
    );
    tokio::spawn(async move { axum::serve(http, app).await });
    (grpc_addr, http_addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_reach_an_otlp_receiver_under_each_service_s_name() {
    let receiver = Receiver::default();
    let (grpc, http) = serve(receiver.clone()).await;
    let grpc_endpoint = format!("http://{grpc}");
    let c = procs::coordinator_env(
        Path::new(BIN),
        "127.0.0.1:0",
        200,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &grpc_endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let http_endpoint = format!("http://{http}");
    let _w = procs::worker_env(
        Path::new(BIN),
        &c.url,
        "traced",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &http_endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let (puzzles, _) = mixed(81, 300, 0);
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let id = jobs.submit(&puzzles, None, "traced").await.unwrap().id;
    let job = receiver
        .wait_for("the job's span from colball-coordinator", |s| {
            s.service == "colball-coordinator"
                && s.name == "job"
                && s.attributes.get("job") == Some(&id)
        })
        .await;
    assert_eq!(job.name, "job");
    let tasks = receiver
        .wait_for("a batch of tasks' span from colball-worker", |s| {
            s.service == "colball-worker" && s.name == "tasks"
        })
        .await;
    let count: usize = tasks.attributes["count"].parse().unwrap();
    assert!(count >= 1, "{tasks:?}");
    // A span a batch, never one a puzzle.
    let spans = receiver.0.lock().unwrap().len();
    assert!(
        spans < puzzles.len(),
        "{spans} spans for {} puzzles",
        puzzles.len()
    );
}
