//! Webhooks end to end: a real receiver (`server/tests/webhooks/receiver.py`,
//! verifying each call with the Standard Webhooks reference library) on a
//! loopback port, and a coordinator process calling it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_proto::v1;
use colball_testkit::procs::{self, Proc, Stderr};

use crate::http_api::{python, workspace};
use crate::jobs::http;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// The receiver process and the calls it has had.
struct Receiver {
    _proc: Proc,
    port: u16,
    calls: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Receiver {
    fn start(secret: &Path, gate: &Path) -> Receiver {
        let script = workspace().join("server/tests/webhooks/receiver.py");
        let mut child = Command::new(python())
            .arg(&script)
            .arg(secret)
            .arg(gate)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {}: {e}; this test needs standardwebhooks of scripts/test-requirements.txt \
                     (scripts/test installs it and sets COLBALL_PYTHON)",
                    python()
                )
            });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let proc = Proc(child);
        let first = lines
            .next()
            .expect("the receiver exited before listening")
            .unwrap();
        let port = serde_json::from_str::<serde_json::Value>(&first).unwrap()["port"]
            .as_u64()
            .unwrap() as u16;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let sink = calls.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&line).unwrap());
            }
        });
        Receiver {
            _proc: proc,
            port,
            calls,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The calls on `path` so far.
    fn calls_on(&self, path: &str) -> Vec<serde_json::Value> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c["path"] == path)
            .cloned()
            .collect()
    }

    /// Waits (up to `limit`) until the calls on `path` satisfy `done`.
    async fn wait_for(
        &self,
        path: &str,
        limit: Duration,
        done: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + limit;
        loop {
            let calls = self.calls_on(path);
            if done(&calls) {
                return calls;
            }
            assert!(
                Instant::now() < deadline,
                "calls on {path} after {limit:?}: {calls:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `url` for a query string.
fn encoded(url: &str) -> String {
    url.replace('%', "%25")
        .replace(':', "%3A")
        .replace('/', "%2F")
        .replace('?', "%3F")
        .replace('&', "%26")
}

fn puzzles(n: usize, seed: u64, size: (usize, usize)) -> String {
    let size = colball_solver::Size::new(size.0, size.1).unwrap();
    let mut g = colball_solver::generate::Generator::new(seed);
    let mut text = String::new();
    for _ in 0..n {
        text.push_str(&colball_solver::format::classic::format_case(
            &g.uniform(size),
        ));
    }
    text
}

/// A job's status over HTTP.
async fn status(http_addr: std::net::SocketAddr, id: &str) -> serde_json::Value {
    let (code, body) = http(http_addr, "GET", &format!("/api/v1/jobs/{id}"), None, b"").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Each finished job (done, cancelled) gets one signed call, verified by
/// the reference library, with its id, state, counts and a results URL
/// that serves its results; a receiver answering 500 twice sees the call
/// again 1 s and 2 s later with the same id; a call still pending when the
/// coordinator is SIGKILLed is made after it restarts on its data; a URL
/// outside `--webhook-allow` is refused at submission, over HTTP and gRPC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_call_their_webhooks_signed_retried_and_durably() {
    let dir = std::env::temp_dir().join(format!("colball-webhooks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    let key: [u8; 32] = rand::random();
    std::fs::write(
        &secret,
        format!(
            "whsec_{}\n",
            base64::engine::general_purpose::STANDARD.encode(key)
        ),
    )
    .unwrap();
    let gate = dir.join("gate");
    std::fs::write(&gate, "closed").unwrap();
    let receiver = Receiver::start(&secret, &gate);
    let data = dir.join("data");
    let allow = format!("http://127.0.0.1:{}/*", receiver.port);
    let flags = [
        "--data-dir",
        data.to_str().unwrap(),
        "--webhook-allow",
        &allow,
        "--webhook-secret-file",
        secret.to_str().unwrap(),
    ];
    let bin = Path::new(BIN);
    let c = procs::coordinator(bin, "127.0.0.1:0", &flags);
    let http_addr: std::net::SocketAddr = c.http.parse().unwrap();
    let _w = procs::worker(bin, &c.url, "w", Stderr::Quiet, &[]);

    // Outside the allowed pattern: refused at submission, saying why.
    for url in [
        format!("http://127.0.0.2:{}/x", receiver.port),
        "https://example.com/hook".to_string(),
        format!("http://user:pw@127.0.0.1:{}/x", receiver.port),
    ] {
        let path = format!("/api/v1/jobs?webhook={}", encoded(&url));
        let (code, body) = http(http_addr, "POST", &path, None, b"2 2\nRB\n").await;
        assert_eq!(code, 400, "{url}: {body}");
        assert!(body.contains("field webhook"), "{url}: {body}");
    }
    let mut jobs = Jobs::connect(&c.url, &Security::default()).await.unwrap();
    let two = colball_solver::Size::new(2, 2).unwrap();
    let mut g = colball_solver::generate::Generator::new(5);
    let few: Vec<_> = (0..5).map(|i| (format!("g{i}"), g.uniform(two))).collect();
    let refused = jobs
        .submit_with(
            &few,
            v1::JobOptions {
                webhook: "https://example.com/hook".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    let colball_client::remote::ClientError::Status(status_) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(status_.code(), tonic::Code::InvalidArgument);
    assert!(
        status_
            .message()
            .contains("matches no --webhook-allow pattern"),
        "{status_:?}"
    );
    assert!(
        jobs.list().await.unwrap().is_empty(),
        "nothing of a refused job is kept"
    );

    // A job done: one call, signed, saying what finished.
    let submit = |path: &str| {
        format!(
            "/api/v1/jobs?name=hooked&webhook={}",
            encoded(&receiver.url(path))
        )
    };
    let (code, created) = http(
        http_addr,
        "POST",
        &submit("/ok/a"),
        None,
        puzzles(50, 1, (2, 2)).as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let a = serde_json::from_str::<serde_json::Value>(&created).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let calls = receiver
        .wait_for("/ok/a", Duration::from_secs(30), |c| !c.is_empty())
        .await;
    let call = &calls[0];
    assert_eq!(call["verified"], true, "{call}");
    assert_eq!(call["id"], format!("msg_{a}.done"));
    let body = &call["body"];
    assert_eq!(body["type"], "job.done");
    assert_eq!(body["data"]["id"], a.as_str());
    assert_eq!(body["data"]["name"], "hooked");
    assert_eq!(body["data"]["state"], "done");
    assert_eq!(body["data"]["puzzles"], 50);
    assert_eq!(body["data"]["solved"], 50);
    let results_url = body["data"]["results_url"].as_str().unwrap();
    let results_path = results_url
        .strip_prefix(&format!("http://{}", c.http))
        .unwrap_or_else(|| panic!("{results_url} is not on {}", c.http));
    let (code, results) = http(http_addr, "GET", results_path, None, b"").await;
    assert_eq!((code, results.lines().count()), (200, 50), "{results}");
    let hook = &status(http_addr, &a).await["webhook"];
    assert_eq!(
        (hook["delivered"].as_bool(), hook["attempts"].as_u64()),
        (Some(true), Some(1)),
        "{hook}"
    );

    // Answered 500 twice: tried again 1 s and 2 s later, same id.
    let (code, created) = http(
        http_addr,
        "POST",
        &submit("/fail-twice/b"),
        None,
        puzzles(20, 2, (2, 3)).as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let b = serde_json::from_str::<serde_json::Value>(&created).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let calls = receiver
        .wait_for("/fail-twice/b", Duration::from_secs(30), |c| {
            c.iter().any(|c| c["status"] == 200)
        })
        .await;
    let statuses: Vec<_> = calls
        .iter()
        .map(|c| c["status"].as_u64().unwrap())
        .collect();
    assert_eq!(statuses, [500, 500, 200]);
    assert!(
        calls
            .iter()
            .all(|c| c["verified"] == true && c["id"] == format!("msg_{b}.done"))
    );
    let at: Vec<f64> = calls.iter().map(|c| c["at"].as_f64().unwrap()).collect();
    assert!(at[1] - at[0] >= 0.9 && at[2] - at[1] >= 1.9, "{at:?}");
    let hook = &status(http_addr, &b).await["webhook"];
    assert_eq!(
        (hook["delivered"].as_bool(), hook["attempts"].as_u64()),
        (Some(true), Some(3)),
        "{hook}"
    );

    // A job cancelled (over gRPC, its webhook in the options).
    let mut g = colball_solver::generate::Generator::new(9);
    let four = colball_solver::Size::new(4, 4).unwrap();
    let many: Vec<_> = (0..2000)
        .map(|i| (format!("h{i}"), g.uniform(four)))
        .collect();
    let accepted = jobs
        .submit_with(
            &many,
            v1::JobOptions {
                webhook: receiver.url("/ok/cancelled"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    jobs.cancel(&accepted.id).await.unwrap();
    let calls = receiver
        .wait_for("/ok/cancelled", Duration::from_secs(30), |c| !c.is_empty())
        .await;
    assert_eq!(calls[0]["verified"], true);
    assert_eq!(calls[0]["body"]["type"], "job.cancelled");
    assert_eq!(calls[0]["id"], format!("msg_{}.cancelled", accepted.id));

    // Pending across a SIGKILL: the gate answers 503 until it opens, which
    // it does only once the coordinator is dead; a new one on the same
    // data makes the call.
    let (code, created) = http(
        http_addr,
        "POST",
        &submit("/gate/e"),
        None,
        puzzles(10, 3, (2, 2)).as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let e = serde_json::from_str::<serde_json::Value>(&created).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    receiver
        .wait_for("/gate/e", Duration::from_secs(30), |c| !c.is_empty())
        .await;
    // Counted in /metrics: the three delivered, b's two failures (and
    // the gate's, maybe, by now).
    procs::wait_metric(&c.http, "webhooks_delivered_total", |n| n == 3).await;
    assert!(procs::metric(&c.http, "webhook_calls_failed_total") >= 2);
    assert_eq!(procs::metric(&c.http, "webhooks_given_up_total"), 0);
    c.proc.kill();
    std::fs::remove_file(&gate).unwrap();
    let before = receiver.calls_on("/gate/e").len();
    let c = procs::coordinator(bin, "127.0.0.1:0", &flags);
    let calls = receiver
        .wait_for("/gate/e", Duration::from_secs(30), |c| {
            c.iter().any(|c| c["status"] == 200)
        })
        .await;
    assert!(calls.len() > before, "{calls:#?}");
    let last = calls.last().unwrap();
    assert_eq!(
        (last["verified"].as_bool(), last["id"].as_str()),
        (Some(true), Some(format!("msg_{e}.done").as_str()))
    );
    let hook = &status(c.http.parse().unwrap(), &e).await["webhook"];
    assert_eq!(hook["delivered"], true, "{hook}");
    // Each call is recorded once made: all of them, but one made just
    // before the SIGKILL, whose record the kill may have cut short.
    let attempts = hook["attempts"].as_u64().unwrap() as usize;
    assert!(
        (calls.len() - 1..=calls.len()).contains(&attempts),
        "{hook}: {calls:#?}"
    );
    // Each delivered call was made once: none of the others came again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(receiver.calls_on("/ok/a").len(), 1);
    assert_eq!(receiver.calls_on("/fail-twice/b").len(), 3);
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}
