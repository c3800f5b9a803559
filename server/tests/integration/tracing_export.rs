//! Spans exported over OTLP to a real receiver in the test (decoding the
//! real protobuf messages), and one trace across the cluster: a job
//! submitted over HTTP with a `traceparent` joins the submit, the job, its
//! windows, the tasks on the worker and the results written, each process
//! under its service's name (the coordinator over gRPC, the worker over
//! HTTP); `colball` passes its command's trace on to the coordinator and
//! the coordinator to the worker; a batch of tasks is a span, a puzzle is
//! not.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colball_proto::prost::Message;
use colball_testkit::procs::{self, wait_metric};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

use crate::cli_jobs::{self, colball_env, puzzles_and_answers};
use crate::common::mixed;
use crate::jobs::exchange;
use crate::json_submit::record;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// A span as received: its service, its name, its ids in hex (the
/// parent's empty for a root) and its attributes.
#[derive(Clone, Debug)]
struct Received {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
    attributes: HashMap<String, String>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the receiver has been sent, by either protocol; and the
/// `traceparent` of each webhook call it answered (`POST /hook`).
#[derive(Clone, Debug, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Received>>>,
    hooks: Arc<Mutex<Vec<String>>>,
}

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
        let mut spans = self.spans.lock().unwrap();
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
                        trace: hex(&span.trace_id),
                        id: hex(&span.span_id),
                        parent: hex(&span.parent_span_id),
                        attributes: attributes(&span.attributes),
                    });
                }
            }
        }
    }

    /// Waits (a minute at most) until a span `pick` takes has arrived.
    async fn wait_for(&self, what: &str, pick: impl Fn(&Received) -> bool) -> Received {
        self.wait_until(what, |spans| spans.iter().find(|s| pick(s)).cloned())
            .await
    }

    /// Waits (a minute at most) for a span `name` of `service`, a child of
    /// `parent` in its trace.
    async fn child(&self, parent: &Received, service: &str, name: &str) -> Received {
        let what = format!("{name} of {service} under {} {}", parent.name, parent.id);
        self.wait_for(&what, |s| {
            s.service == service
                && s.name == name
                && s.trace == parent.trace
                && s.parent == parent.id
        })
        .await
    }

    /// Waits (a minute at most) until `see` finds what it looks for in
    /// the spans received so far.
    async fn wait_until<T>(&self, what: &str, see: impl Fn(&[Received]) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(found) = see(&self.spans.lock().unwrap()) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no {what} in a minute; received: {:#?}",
                self.spans.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn count(&self) -> usize {
        self.spans.lock().unwrap().len()
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
    let hooks = receiver.hooks.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| async move {
            let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok());
            hooks
                .lock()
                .unwrap()
                .push(traceparent.unwrap_or_default().to_string());
        }),
    );
    let app = app.route(
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

/// The environment that sends a process's spans to `endpoint` over
/// `protocol`, promptly.
fn otlp<'a>(endpoint: &'a str, protocol: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]
}

/// A receiver, a coordinator exporting to it over `protocol` and a worker
/// exporting over HTTP, once the worker has joined; and the receiver's
/// HTTP endpoint.
async fn traced_cluster(protocol: &str) -> (Receiver, procs::Coordinator, procs::Proc, String) {
    let receiver = Receiver::default();
    let (grpc, http) = serve(receiver.clone()).await;
    let (grpc, http) = (format!("http://{grpc}"), format!("http://{http}"));
    let endpoint = if protocol == "grpc" { &grpc } else { &http };
    // Webhooks allowed to the receiver's `/hook`.
    let secret = std::env::temp_dir().join(format!(
        "colball-traced-hook-{}-{}",
        std::process::id(),
        protocol.replace('/', "-")
    ));
    std::fs::write(&secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let allow = format!("{http}/*");
    let c = traced_coordinator(
        endpoint,
        protocol,
        &[
            "--webhook-allow",
            &allow,
            "--webhook-secret-file",
            secret.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&secret);
    let w = traced_worker(&c, &http).await;
    (receiver, c, w, http)
}

/// A coordinator exporting to `endpoint` over `protocol`.
fn traced_coordinator(endpoint: &str, protocol: &str, extra: &[&str]) -> procs::Coordinator {
    procs::coordinator_env(
        Path::new(BIN),
        "127.0.0.1:0",
        200,
        extra,
        &otlp(endpoint, protocol),
    )
}

/// A worker of `c` exporting to `endpoint` over HTTP, once it has joined.
async fn traced_worker(c: &procs::Coordinator, endpoint: &str) -> procs::Proc {
    let w = procs::worker_env(
        Path::new(BIN),
        &c.url,
        "traced",
        &otlp(endpoint, "http/protobuf"),
    );
    wait_metric(&c.http, "workers", |n| n == 1).await;
    w
}

/// Submits `puzzles` as a JSON job over `c`'s HTTP API, called from span
/// [`CALLER`] of trace [`TRACE`], with `webhook` if any; the job's id.
async fn submit_traced(
    c: &procs::Coordinator,
    puzzles: &[(String, colball_solver::Puzzle)],
    webhook: Option<&str>,
) -> String {
    let records: Vec<_> = puzzles.iter().map(|(id, p)| record(id, p)).collect();
    let body =
        serde_json::json!({"puzzles": records, "name": "traced", "webhook": webhook}).to_string();
    let head = format!(
        "traceparent: 00-{TRACE}-{CALLER}-01\r\ntracestate: caller=1\r\ncontent-type: application/json\r\n"
    );
    let (code, _, created) = exchange(
        c.http.parse().unwrap(),
        "POST",
        "/api/v1/jobs",
        &head,
        body.as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    created["id"].as_str().unwrap().to_string()
}

/// The services' names.
const COORDINATOR: &str = "colball-coordinator";
const WORKER: &str = "colball-worker";

/// The trace and the span a client of the HTTP API says it calls from.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_s_trace_joins_its_submit_windows_tasks_on_the_worker_and_writes() {
    let (receiver, c, _w, http) = traced_cluster("grpc").await;
    let (puzzles, _) = mixed(81, 300, 0);
    let id = submit_traced(&c, &puzzles, Some(&format!("{http}/hook"))).await;

    // The submit's span is the caller's child; the job's, the submit's.
    let submit = receiver
        .wait_for("the submit's span", |s| {
            s.service == COORDINATOR && s.name == "POST /api/v1/jobs"
        })
        .await;
    assert_eq!(
        (submit.trace.as_str(), submit.parent.as_str()),
        (TRACE, CALLER),
        "{submit:?}"
    );
    assert_eq!(
        submit.attributes["http.response.status_code"], "201",
        "{submit:?}"
    );
    let job = receiver
        .wait_for("the job's span", |s| {
            s.service == COORDINATOR && s.name == "job"
        })
        .await;
    assert_eq!(job.attributes.get("job"), Some(&id), "{job:?}");
    assert_eq!(
        (job.trace.as_str(), job.parent.as_str()),
        (TRACE, submit.id.as_str()),
        "{job:?}"
    );
    // Its window, under the job; the worker's tasks under the window; the
    // results written under the job.
    let window = receiver.child(&job, COORDINATOR, "window").await;
    assert_eq!(window.attributes["puzzles"], "300", "{window:?}");
    receiver.child(&window, WORKER, "tasks").await;
    receiver.child(&job, COORDINATOR, "write").await;
    // Every task and every result reached the trace: the tasks' counts and
    // the writes' results each add up to the job's puzzles.
    let want = puzzles.len();
    let total = |name: &'static str, field: &'static str, parents: Vec<String>| {
        move |spans: &[Received]| {
            let n: usize = spans
                .iter()
                .filter(|s| s.name == name && parents.contains(&s.parent))
                .map(|s| s.attributes[field].parse::<usize>().unwrap())
                .sum();
            (n == want).then_some(n)
        }
    };
    let windows: Vec<String> = receiver
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name == "window" && s.parent == job.id)
        .map(|s| s.id.clone())
        .collect();
    receiver
        .wait_until("every task in the trace", total("tasks", "count", windows))
        .await;
    receiver
        .wait_until(
            "every result written in the trace",
            total("write", "results", vec![job.id.clone()]),
        )
        .await;
    // The webhook call carries the trace of its span, the submit's child.
    let hook = receiver
        .wait_until("the webhook call", |_| {
            receiver.hooks.lock().unwrap().first().cloned()
        })
        .await;
    let (trace, call) = hook
        .strip_prefix("00-")
        .and_then(|rest| rest.split_once('-'))
        .map(|(trace, rest)| (trace, rest.split('-').next().unwrap_or_default()))
        .unwrap_or_else(|| panic!("a webhook call with a traceparent: {hook:?}"));
    assert_eq!(trace, TRACE, "{hook}");
    let webhook = receiver
        .wait_for("the webhook call's span", |s| s.id == call)
        .await;
    assert_eq!(
        (webhook.name.as_str(), webhook.parent.as_str()),
        ("webhook", submit.id.as_str()),
        "{webhook:?}"
    );
    assert_eq!(webhook.attributes.get("job"), Some(&id), "{webhook:?}");
    // A span a batch, never one a puzzle.
    let spans = receiver.count();
    assert!(
        spans < puzzles.len(),
        "{spans} spans for {} puzzles",
        puzzles.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colball_passes_its_trace_to_the_coordinator_and_on_to_the_worker() {
    let (receiver, c, _w, http) = traced_cluster("http/protobuf").await;
    let (input, answers) = puzzles_and_answers("3x3", 40, 7);
    let solved = colball_env(
        &["solve", "--connect", &c.url],
        &input,
        &otlp(&http, "http/protobuf"),
    );
    assert!(
        solved.status.success(),
        "{}",
        cli_jobs::text(&solved.stderr)
    );
    assert_eq!(cli_jobs::text(&solved.stdout), cli_jobs::text(&answers));

    let command = receiver
        .wait_for("the command's span", |s| s.service == "colball")
        .await;
    assert_eq!(command.name, "colball solve", "{command:?}");
    assert_eq!(command.parent, "", "a root: {command:?}");
    // `colball solve --connect` submits a job and reads its results: the
    // coordinator's spans of both calls are the command's children, the
    // job the submit's, and the worker's tasks its window's.
    let submit = receiver
        .child(&command, COORDINATOR, "colball.v1.Jobs/Submit")
        .await;
    receiver
        .child(&command, COORDINATOR, "colball.v1.Jobs/Results")
        .await;
    let job = receiver.child(&submit, COORDINATOR, "job").await;
    let window = receiver.child(&job, COORDINATOR, "window").await;
    receiver.child(&window, WORKER, "tasks").await;
}

/// A job taken up by another coordinator (here, the next one on its data
/// directory) runs in its submit's trace: the submit's `traceparent` is
/// kept with the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_taken_up_after_a_restart_runs_in_its_submit_s_trace() {
    let receiver = Receiver::default();
    let (_, http) = serve(receiver.clone()).await;
    let http = format!("http://{http}");
    let dir = std::env::temp_dir().join(format!("colball-traced-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = ["--data-dir", dir.to_str().unwrap()];
    // No worker: the job waits, and is unfinished when its coordinator stops.
    let mut first = traced_coordinator(&http, "http/protobuf", &data);
    let (puzzles, _) = mixed(83, 50, 0);
    let id = submit_traced(&first, &puzzles, None).await;
    let submit = receiver
        .wait_for("the submit's span", |s| s.name == "POST /api/v1/jobs")
        .await;
    assert_eq!(submit.trace, TRACE, "{submit:?}");
    first.proc.signal("TERM");
    first.proc.wait_exit();
    let ran_first: Vec<String> = receiver
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name == "job")
        .map(|s| s.id.clone())
        .collect();

    let second = traced_coordinator(&http, "http/protobuf", &data);
    let _w = traced_worker(&second, &http).await;
    let job = receiver
        .wait_for("the second run's job span", |s| {
            s.name == "job" && s.attributes.get("job") == Some(&id) && !ran_first.contains(&s.id)
        })
        .await;
    assert_eq!(
        (job.trace.as_str(), job.parent.as_str()),
        (TRACE, submit.id.as_str()),
        "{job:?}"
    );
    let window = receiver.child(&job, COORDINATOR, "window").await;
    receiver.child(&window, WORKER, "tasks").await;
    drop(second);
    let _ = std::fs::remove_dir_all(&dir);
}
