//! The HTTP job API as a product, checked by the tools its users reach
//! for: its OpenAPI document by `openapi-spec-validator`, the live API
//! against that document by Schemathesis (a property-based API tester),
//! and the Python client (`clients/python`) by its own pytest suite
//! against a real coordinator and worker. Also its CSV results and the
//! pace (rate, ETA) in a job's status.
//!
//! The Python tools are pinned in `scripts/test-requirements.txt`;
//! `scripts/test` installs them into a virtualenv and names its Python in
//! `COLBALL_PYTHON` (otherwise `python3`, which must have them).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use colball_proto::v1;
use colball_testkit::LocalCluster;
use colball_testkit::procs::{self, Proc, Stderr};

use crate::common::{mixed, quick};
use crate::jobs::http;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

pub(crate) fn python() -> String {
    std::env::var("COLBALL_PYTHON").unwrap_or_else(|_| "python3".into())
}

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `python ARGS` with `env` for at most `limit`, stopping it by its
/// PID past that, in a directory of its own (the tools write caches
/// there): whether it succeeded, and what it printed.
fn run_python(args: &[&str], env: &[(&str, &str)], limit: Duration) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!(
        "colball-python-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("out");
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new(python())
        .args(args)
        .envs(env.iter().copied())
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; this test needs the Python tools of scripts/test-requirements.txt \
                 (scripts/test installs them and sets COLBALL_PYTHON)",
                python()
            )
        });
    let status = wait_for_exit(Proc(child), limit);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::remove_dir_all(&dir).unwrap();
    match status {
        Some(status) => (status.success(), text),
        None => (false, format!("stopped after {limit:?}:\n{text}")),
    }
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Submits `body` over HTTP: the job's id.
async fn submit(addr: std::net::SocketAddr, body: &str) -> String {
    let (code, created) = http(addr, "POST", "/api/v1/jobs", None, body.as_bytes()).await;
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    created["id"].as_str().unwrap().to_string()
}

/// GETs `path` from `http` (host:port) as JSON.
async fn get_json(http_addr: &str, path: &str) -> serde_json::Value {
    let (code, body) = http(http_addr.parse().unwrap(), "GET", path, None, b"").await;
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route_and_validates() {
    let c = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &[]);
    let doc = get_json(&c.http, "/api/v1/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths: Vec<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        paths,
        [
            "/api/v1/jobs",
            "/api/v1/jobs/{id}",
            "/api/v1/jobs/{id}/cancel",
            "/api/v1/jobs/{id}/results"
        ]
    );
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let responses = op["responses"].as_object().unwrap();
            assert_eq!(
                responses["401"]["content"]["application/json"]["schema"]["$ref"],
                "#/components/schemas/ApiError",
                "{method} {path}"
            );
            assert!(op["operationId"].is_string(), "{method} {path}");
        }
    }
    assert_eq!(operations, 6);
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    for schema in ["Job", "Submitted", "ApiError", "ResultRecord"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema}");
    }
    // The real validator passes it, and fails a broken copy of it (so it
    // does check).
    let dir = std::env::temp_dir().join(format!("colball-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("openapi.json");
    std::fs::write(&good, doc.to_string()).unwrap();
    let mut broken = doc.clone();
    broken["paths"]["/api/v1/jobs"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] =
        serde_json::json!({"type": "no-such-type"});
    let bad = dir.join("broken.json");
    std::fs::write(&bad, broken.to_string()).unwrap();
    let limit = Duration::from_secs(120);
    let validate = |file: &Path| {
        run_python(
            &["-m", "openapi_spec_validator", file.to_str().unwrap()],
            &[],
            limit,
        )
    };
    let (ok, out) = validate(&good);
    assert!(ok, "openapi-spec-validator refused the document:\n{out}");
    let (ok, out) = validate(&bad);
    assert!(
        !ok,
        "openapi-spec-validator passed a broken document:\n{out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Schemathesis generates requests from the document (valid ones and
/// broken ones), sends them to a live coordinator with a worker, and
/// checks every answer: no 5xx, each status, content type and body as the
/// document says. Bounded in examples per operation and in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_off_the_document() {
    let dir = std::env::temp_dir().join(format!("colball-schemathesis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice alice-token\n").unwrap();
    let c = procs::coordinator(
        Path::new(BIN),
        "127.0.0.1:0",
        &[
            "--client-tokens-file",
            tokens.to_str().unwrap(),
            "--max-job-puzzles",
            "100000",
        ],
    );
    let _w = procs::worker(Path::new(BIN), &c.url, "st", Stderr::Quiet, &[]);
    let url = format!("http://{}/api/v1/openapi.json", c.http);
    let config = workspace().join("server/tests/schemathesis");
    let (ok, out) = run_python(
        &[
            "-m",
            "schemathesis.cli",
            "--config-file",
            config.join("schemathesis.toml").to_str().unwrap(),
            "run",
            &url,
            "--header",
            "Authorization: Bearer alice-token",
            "--checks",
            "all",
            "--max-examples",
            "40",
            "--seed",
            "1",
            "--request-timeout",
            "20",
            "--generation-database",
            "none",
            "--no-color",
        ],
        &[
            ("SCHEMATHESIS_HOOKS", "hooks"),
            ("PYTHONPATH", config.to_str().unwrap()),
            ("COLBALL_OPENAPI_URL", &url),
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "schemathesis:\n{out}");
    // It did test: every operation, in every phase.
    for line in ["Tested: 6", "Examples", "Coverage", "Fuzzing", "Stateful"] {
        assert!(
            out.contains(line),
            "{line:?} not in Schemathesis' report:\n{out}"
        );
    }
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `clients/python`'s pytest suite, against this build's coordinator and
/// worker (it starts its own).
#[test]
fn the_python_client_s_tests_pass() {
    let client = Path::new(BIN).with_file_name("colball");
    assert!(
        client.exists(),
        "{} is missing: run the workspace's tests (cargo test --workspace), which build it",
        client.display()
    );
    let src = workspace().join("clients/python/src");
    let tests = workspace().join("clients/python/tests");
    let (ok, out) = run_python(
        &[
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            tests.to_str().unwrap(),
        ],
        &[
            ("COLBALL_SERVER_BIN", BIN),
            ("COLBALL_CLIENT_BIN", client.to_str().unwrap()),
            ("PYTHONPATH", src.to_str().unwrap()),
        ],
        Duration::from_secs(300),
    );
    assert!(ok, "pytest clients/python:\n{out}");
    assert!(out.contains(" passed"), "{out}");
}

/// `?format=csv`: a header row and one row per puzzle, the same results as
/// the NDJSON, with ids that need quoting quoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_as_csv_are_the_ndjson_results_in_rows() {
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let addr = cluster.serve_http().await.unwrap();
    let (puzzles, answers) = mixed(5, 60, 0);
    let mut body = String::new();
    for (i, (_, p)) in puzzles.iter().enumerate() {
        // Ids with a comma and a quote in them.
        let id = format!("p{i},\"x\"");
        let record = serde_json::json!({
            "id": id, "start": p.start().rows(), "target": p.target().rows()
        });
        body.push_str(&format!("{record}\n"));
    }
    let id = submit(addr, &body).await;
    let results = format!("/api/v1/jobs/{id}/results?follow=1");
    let (_, ndjson) = http(addr, "GET", &results, None, b"").await;
    let (code, csv) = http(addr, "GET", &format!("{results}&format=csv"), None, b"").await;
    assert_eq!(code, 200);
    let mut reader = csv::Reader::from_reader(csv.as_bytes());
    assert_eq!(
        reader.headers().unwrap(),
        vec!["id", "moves", "solution", "strategy", "time_us", "error"]
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let records: Vec<serde_json::Value> = ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!((rows.len(), records.len()), (60, 60));
    for (i, ((row, record), answer)) in rows.iter().zip(&records).zip(&answers).enumerate() {
        assert_eq!(row[0], format!("p{i},\"x\""));
        assert_eq!(row[1], answer.to_string());
        assert_eq!(record["moves"], *answer);
        for (n, field) in [(0, "id"), (2, "solution"), (3, "strategy")] {
            assert_eq!(&row[n], record[field].as_str().unwrap(), "{field}");
        }
        assert_eq!(row[4], record["time_us"].to_string());
        assert_eq!(&row[5], "");
    }
    // A format it does not know: 400, naming it.
    let (code, body) = http(addr, "GET", &format!("{results}&format=xls"), None, b"").await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("xls"), "{body}");
    cluster.shutdown().await;
}

/// A job's status carries its pace: while it runs, the recent rate and an
/// estimated end in the future; once done, its average rate and its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_s_status_has_its_rate_and_an_estimated_end() {
    // 10,000 4x4 puzzles on one worker thread: many seconds of work (it is
    // cancelled once read).
    let cluster = LocalCluster::start(quick(), 1, 1).await.unwrap();
    let addr = cluster.serve_http().await.unwrap();
    let mut g = colball_solver::generate::Generator::new(11);
    let four = colball_solver::Size::new(4, 4).unwrap();
    let mut body = String::new();
    for _ in 0..10_000 {
        let p = g.uniform(four);
        body.push_str(&format!(
            "4 4\n{}\n{}\n",
            p.start().rows().join("\n"),
            p.target().rows().join("\n")
        ));
    }
    let id = submit(addr, &body).await;
    let status = || async {
        let (_, body) = http(addr, "GET", &format!("/api/v1/jobs/{id}"), None, b"").await;
        serde_json::from_str::<serde_json::Value>(&body).unwrap()
    };
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    // Read it every 300 ms for 2 s: the rate comes from these reads.
    let mut last = status().await;
    for _ in 0..7 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        last = status().await;
    }
    assert_eq!(last["state"], "running", "{last}");
    let rate = last["rate"].as_f64().unwrap();
    let solved = last["solved"].as_u64().unwrap();
    assert!(rate > 0.0 && solved > 0, "{last}");
    // Over 2 s, the rate can be no more than what was solved by then.
    assert!(rate <= solved as f64, "{last}");
    let eta = last["eta_unix_ms"].as_i64().unwrap();
    let remaining = last["remaining"].as_u64().unwrap() as f64;
    let expected = now_ms() as f64 + remaining / rate * 1000.0;
    assert!(
        (eta as f64 - expected).abs() < 2_000.0,
        "eta {eta}, expected about {expected}: {last}"
    );
    // Through gRPC too.
    let mut jobs = colball_client::jobs::Jobs::connect(
        &cluster.url(),
        &colball_client::remote::Security::default(),
    )
    .await
    .unwrap();
    let job = jobs.get(&id).await.unwrap();
    assert!(job.rate > 0.0 && job.eta_unix_ms > 0, "{job:?}");
    jobs.cancel(&id).await.unwrap();
    let cancelled = status().await;
    assert_eq!(cancelled["state"], "cancelled");
    let (done, created) = (
        cancelled["finished_unix_ms"].as_i64().unwrap(),
        cancelled["created_unix_ms"].as_i64().unwrap(),
    );
    assert_eq!(cancelled["eta_unix_ms"].as_i64().unwrap(), done);
    let finished = cancelled["solved"].as_u64().unwrap() + cancelled["errors"].as_u64().unwrap();
    let average = finished as f64 * 1000.0 / (done - created) as f64;
    assert!(
        (cancelled["rate"].as_f64().unwrap() - average).abs() < 1e-6,
        "{cancelled}"
    );
    assert_eq!(job.state, v1::JobState::Running as i32);
    cluster.shutdown().await;
}

/// A classic puzzle file of `n` 2x2 puzzles (ids `PREFIX1..`, each id
/// padded to `id_bytes`), as JSON Lines.
fn puzzle_file(prefix: &str, n: usize, id_bytes: usize) -> String {
    let mut body = String::new();
    for i in 0..n {
        let id = format!(
            "{prefix}{i:0>width$}",
            width = id_bytes.saturating_sub(prefix.len())
        );
        body.push_str(&format!(
            "{{\"id\": \"{id}\", \"start\": [\"RG\", \"BB\"], \"target\": [\"GR\", \"BB\"]}}\n"
        ));
    }
    body
}

/// Per-client quotas on a coordinator process without workers (so jobs
/// stay queued): over its queued-puzzle quota a client is refused, over
/// HTTP (429, Retry-After) and gRPC (RESOURCE_EXHAUSTED with the reason
/// and a retry delay), the quota named, and nothing of the refused job
/// kept, while another client is served; the stored-MiB and per-minute
/// quotas likewise; a new quotas file holds after SIGHUP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_quota_is_refused_naming_it_while_another_is_served() {
    use crate::jobs::http_with_head;
    let dir = std::env::temp_dir().join(format!("colball-quotas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(
        &tokens,
        "alice a-token\nbob b-token\ncarol c-token\ndave d-token\n",
    )
    .unwrap();
    let quotas = dir.join("quotas");
    let quota_lines = |alice_queued: u64| {
        format!(
            "alice queued-puzzles={alice_queued}\ncarol stored-mib=1\ndave submissions-per-minute=2\n* queued-puzzles=100000\n"
        )
    };
    std::fs::write(&quotas, quota_lines(1000)).unwrap();
    let c = procs::coordinator(
        Path::new(BIN),
        "127.0.0.1:0",
        &[
            "--client-tokens-file",
            tokens.to_str().unwrap(),
            "--client-quotas-file",
            quotas.to_str().unwrap(),
        ],
    );
    let addr: std::net::SocketAddr = c.http.parse().unwrap();
    let post = |token: &'static str, body: String| async move {
        http_with_head(addr, "POST", "/api/v1/jobs", Some(token), body.as_bytes()).await
    };
    let jobs_of = |token: &'static str| async move {
        let (_, body) = http(addr, "GET", "/api/v1/jobs", Some(token), b"").await;
        serde_json::from_str::<Vec<serde_json::Value>>(&body).unwrap()
    };
    // Alice: 800 queued, then 300 more is over 1,000.
    let (code, _, body) = post("a-token", puzzle_file("a", 800, 4)).await;
    assert_eq!(code, 201, "{body}");
    let (code, head, body) = post("a-token", puzzle_file("b", 300, 4)).await;
    assert_eq!(code, 429, "{body}");
    assert!(
        body.contains("queued-puzzles (1000)") && body.contains("alice"),
        "{body}"
    );
    assert!(head.to_lowercase().contains("retry-after: 60"), "{head}");
    assert_eq!(jobs_of("a-token").await.len(), 1, "nothing of it is kept");
    // Bob (the `*` line) is served meanwhile.
    let (code, _, body) = post("b-token", puzzle_file("c", 5000, 4)).await;
    assert_eq!(code, 201, "{body}");
    // Over gRPC: RESOURCE_EXHAUSTED, its reason and its wait.
    let security = colball_client::remote::Security {
        token: Some(colball_proto::Secret::new("a-token", "token").unwrap()),
        ..Default::default()
    };
    let mut alice = colball_client::jobs::Jobs::connect(&c.url, &security)
        .await
        .unwrap();
    let two = colball_solver::Size::new(2, 2).unwrap();
    let mut g = colball_solver::generate::Generator::new(3);
    let puzzles: Vec<_> = (0..300)
        .map(|i| (format!("g{i}"), g.uniform(two)))
        .collect();
    let refused = alice.submit(&puzzles, None, "").await.unwrap_err();
    let colball_client::remote::ClientError::Status(status) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.message().contains("queued-puzzles"), "{status:?}");
    assert_eq!(
        colball_proto::reason::of(&status).as_deref(),
        Some(colball_proto::reason::OVER_QUOTA)
    );
    // Carol: 1 MiB at most; 20,000 puzzles with 64-byte ids are more.
    let (code, _, body) = post("c-token", puzzle_file("d", 20_000, 64)).await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("stored-mib (1)"), "{body}");
    assert!(jobs_of("c-token").await.is_empty());
    let (code, _, body) = post("c-token", puzzle_file("e", 100, 4)).await;
    assert_eq!(code, 201, "{body}");
    // Dave: two submissions a minute.
    for _ in 0..2 {
        assert_eq!(post("d-token", puzzle_file("f", 1, 4)).await.0, 201);
    }
    let (code, head, body) = post("d-token", puzzle_file("f", 1, 4)).await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("submissions-per-minute (2)"), "{body}");
    let wait: u64 = head
        .lines()
        .find_map(|l| {
            l.to_lowercase()
                .strip_prefix("retry-after: ")
                .map(str::to_string)
        })
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{head}");
    // A new file, read on SIGHUP: alice may queue 2,000 now.
    std::fs::write(&quotas, quota_lines(2000)).unwrap();
    c.proc.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _, body) = post("a-token", puzzle_file("h", 300, 4)).await;
        if code == 201 {
            break;
        }
        assert_eq!(code, 429, "{body}");
        assert!(Instant::now() < deadline, "the new quotas did not hold");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A client generated from the served document by a mainstream generator
/// (openapi-python-client, pinned in scripts/test-requirements.txt) runs a
/// job end to end as a new user would: submit in JSON, status, results,
/// a bad record refused, cancel and delete. A change that breaks client
/// generators fails here.
#[test]
fn a_generated_python_client_runs_a_job_end_to_end() {
    let c = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &[]);
    let _w = procs::worker(Path::new(BIN), &c.url, "gen", Stderr::Quiet, &[]);
    let dir = std::env::temp_dir().join(format!(
        "colball-generated-py-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let generated = workspace().join("server/tests/generated");
    let (ok, out) = run_python(
        &[
            "-m",
            "openapi_python_client",
            "generate",
            "--url",
            &format!("http://{}/api/v1/openapi.json", c.http),
            "--meta",
            "none",
            "--output-path",
            dir.join("colball_generated").to_str().unwrap(),
            "--config",
            generated.join("python-config.yaml").to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(120),
    );
    assert!(ok, "openapi-python-client generate:\n{out}");
    let cases_file = dir.join("cases.json");
    std::fs::write(&cases_file, generated_client_cases(71).to_string()).unwrap();
    let (ok, out) = run_python(
        &[
            generated.join("python_e2e.py").to_str().unwrap(),
            dir.to_str().unwrap(),
            &format!("http://{}", c.http),
            cases_file.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(300),
    );
    assert!(ok, "the generated Python client:\n{out}");
    assert!(out.contains("generated python client: ok"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same through TypeScript: types generated from the served document
/// by openapi-typescript, calls through openapi-fetch, the test compiled
/// by tsc in strict mode (so a document whose types no longer fit fails
/// to compile) and run by Node. The tools are pinned in
/// `server/tests/generated/typescript` (scripts/test installs them and
/// names their folder in `COLBALL_NODE_TOOLS`).
#[test]
fn a_generated_typescript_client_runs_a_job_end_to_end() {
    let tools = PathBuf::from(std::env::var("COLBALL_NODE_TOOLS").unwrap_or_else(|_| {
        panic!(
            "COLBALL_NODE_TOOLS is not set: this test needs the Node tools of \
             server/tests/generated/typescript (scripts/test installs them and sets it)"
        )
    }));
    let modules = tools.join("node_modules");
    let c = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &[]);
    let _w = procs::worker(Path::new(BIN), &c.url, "gen-ts", Stderr::Quiet, &[]);
    let dir = std::env::temp_dir().join(format!(
        "colball-generated-ts-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let source = workspace().join("server/tests/generated/typescript/e2e.ts");
    std::fs::copy(&source, dir.join("e2e.ts")).unwrap();
    std::fs::write(dir.join("package.json"), r#"{"type": "module"}"#).unwrap();
    std::os::unix::fs::symlink(&modules, dir.join("node_modules")).unwrap();
    let node = |args: &[&str], what: &str| {
        let (ok, out) = run_node(&dir, args, Duration::from_secs(300));
        assert!(ok, "{what}:\n{out}");
        out
    };
    let url = format!("http://{}/api/v1/openapi.json", c.http);
    let generator = modules.join("openapi-typescript/bin/cli.js");
    node(
        &[generator.to_str().unwrap(), &url, "-o", "schema.d.ts"],
        "openapi-typescript",
    );
    let tsc = modules.join("typescript/bin/tsc");
    node(
        &[
            tsc.to_str().unwrap(),
            "--strict",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--target",
            "es2022",
            "--types",
            "node",
            "--skipLibCheck",
            "--outDir",
            "out",
            "e2e.ts",
        ],
        "tsc (the test against the generated types)",
    );
    std::fs::write(
        dir.join("cases.json"),
        generated_client_cases(73).to_string(),
    )
    .unwrap();
    let out = node(
        &["out/e2e.js", &format!("http://{}", c.http), "cases.json"],
        "the generated TypeScript client",
    );
    assert!(out.contains("generated typescript client: ok"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What the generated clients' end-to-end programs read: 60 small
/// puzzles (from `seed`) as JSON records with their answers, and 3,000
/// 4x4 ones that keep a job running long enough to cancel it.
fn generated_client_cases(seed: u64) -> serde_json::Value {
    let (puzzles, answers) = mixed(seed, 60, 0);
    let slow = crate::common::four_by_four(seed + 1, 3000);
    let records = |puzzles: &[(String, colball_solver::Puzzle)]| {
        puzzles
            .iter()
            .map(|(id, p)| crate::json_submit::record(id, p))
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "puzzles": records(&puzzles),
        "answers": answers,
        "slow": records(&slow),
    })
}

/// Runs `node ARGS` in `dir` for at most `limit`, stopping it by its PID
/// past that: whether it succeeded, and what it printed.
fn run_node(dir: &Path, args: &[&str], limit: Duration) -> (bool, String) {
    let log = dir.join(format!("node-{}.out", rand_suffix()));
    let out = std::fs::File::create(&log).unwrap();
    let child = Command::new("node")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot run node: {e}; scripts/test installs Node (Debian's nodejs)")
        });
    let status = wait_for_exit(Proc(child), limit);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match status {
        Some(status) => (status.success(), text),
        None => (false, format!("stopped after {limit:?}:\n{text}")),
    }
}

/// Waits up to `limit` for `child` to exit; past that it is stopped by its
/// PID (dropping it) and there is no status.
fn wait_for_exit(mut child: Proc, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
