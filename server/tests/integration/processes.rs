//! The real `colball-server` binaries as processes: a coordinator and
//! workers on loopback, killed and signalled mid-batch.
//!
//! Every child is killed when its guard drops; addresses come from the
//! coordinator's `listening ADDR` / `http ADDR` lines, and waits poll
//! `/metrics` with a bounded deadline.

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;

use crate::common::{four_by_four, mixed};
use colball_client::remote::{Client, ClientError};
use colball_testkit::procs::{self, Proc, Stderr, metric, wait_metric};
use tokio_stream::StreamExt;

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

fn coordinator(extra: &[&str]) -> procs::Coordinator {
    procs::coordinator(Path::new(BIN), "127.0.0.1:0", extra)
}

fn worker(url: &str, name: &str, extra: &[&str]) -> Proc {
    let stderr = if extra.is_empty() {
        Stderr::Warn
    } else {
        Stderr::Capture
    };
    procs::worker(Path::new(BIN), url, name, stderr, extra)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_solve_2000_mixed_puzzles_like_in_process() {
    let c = coordinator(&[]);
    let _a = worker(&c.url, "a", &[]);
    let _b = worker(&c.url, "b", &[]);
    wait_metric(&c.http, "workers", |n| n == 2).await;
    let (puzzles, answers) = mixed(21, 2000, 100);
    let mut client = Client::connect(&c.url).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, true).await.unwrap();
    let mut next = 0;
    let mut workers = HashSet::new();
    while let Some(r) = stream.next().await {
        let r = r.unwrap();
        assert_eq!(r.index, next);
        assert_eq!(r.solution.answer(), answers[r.index], "{}", r.id);
        workers.insert(r.worker.split('#').next().unwrap().to_string());
        next += 1;
    }
    assert_eq!(next, 2000);
    assert_eq!(workers.len(), 2, "{workers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_batch_loses_nothing() {
    let c = coordinator(&[]);
    let a = worker(&c.url, "a", &[]);
    let _b = worker(&c.url, "b", &[]);
    wait_metric(&c.http, "workers", |n| n == 2).await;
    let puzzles = four_by_four(22, 400);
    let mut client = Client::connect(&c.url).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    let mut results = Vec::new();
    while results.len() < 20 {
        results.push(stream.next().await.unwrap().unwrap());
    }
    drop(a); // SIGKILL
    while let Some(r) = stream.next().await {
        results.push(r.unwrap());
    }
    let mut seen = HashSet::new();
    let mut search = colball_solver::BidirSearch::new();
    for r in &results {
        assert!(seen.insert(r.index), "result {} twice", r.index);
        let answer = search.solve(&puzzles[r.index].1).answer();
        assert_eq!(r.solution.answer(), answer, "{}", r.id);
    }
    assert_eq!(seen.len(), puzzles.len());
    assert_eq!(metric(&c.http, "workers_lost_total"), 1);
    assert!(metric(&c.http, "redispatched_total") >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_stops_the_work_on_its_puzzles() {
    let c = coordinator(&[]);
    let _a = worker(&c.url, "a", &[]);
    wait_metric(&c.http, "workers", |n| n == 1).await;
    let puzzles = four_by_four(23, 3000);
    {
        let mut client = Client::connect(&c.url).await.unwrap();
        let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
        for _ in 0..5 {
            stream.next().await.unwrap().unwrap();
        }
    } // the client goes away
    wait_metric(&c.http, "pending", |n| n == 0).await;
    wait_metric(&c.http, "in_flight", |n| n == 0).await;
    let solved = metric(&c.http, "solved_total");
    assert!(solved < 1000, "{solved} solved after the client left");
    assert!(metric(&c.http, "cancelled_total") > 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_version_mismatch_is_refused() {
    let c = coordinator(&[]);
    let mut old = worker(&c.url, "old", &["--protocol-version", "99"]);
    let status = old.wait_exit();
    assert!(!status.success());
    let mut stderr = String::new();
    old.0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(
        stderr.contains("refused") && stderr.contains("protocol version 99"),
        "{stderr}"
    );
    assert_eq!(metric(&c.http, "workers"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_workers_says_so() {
    let c = coordinator(&["--worker-grace-secs", "0.3"]);
    let (puzzles, _) = mixed(24, 3, 0);
    let mut client = Client::connect(&c.url).await.unwrap();
    let Err(ClientError::Status(status)) = client.solve_stream(&puzzles, false).await else {
        panic!("expected a status");
    };
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains("no worker has joined"),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_busy_worker_without_losing_results() {
    let c = coordinator(&[]);
    let mut a = worker(&c.url, "a", &[]);
    let _b = worker(&c.url, "b", &[]);
    wait_metric(&c.http, "workers", |n| n == 2).await;
    let puzzles = four_by_four(25, 400);
    let mut client = Client::connect(&c.url).await.unwrap();
    let mut stream = client.solve_stream(&puzzles, false).await.unwrap();
    let mut seen = HashSet::new();
    while seen.len() < 20 {
        seen.insert(stream.next().await.unwrap().unwrap().index);
    }
    a.signal("TERM");
    while let Some(r) = stream.next().await {
        assert!(seen.insert(r.unwrap().index));
    }
    assert_eq!(seen.len(), puzzles.len());
    assert!(a.wait_exit().success());
    assert_eq!(metric(&c.http, "workers_lost_total"), 0);
    assert_eq!(metric(&c.http, "redispatched_total"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rereads_the_client_tokens_file() {
    use colball_client::remote::Security;
    use colball_proto::Secret;
    let dir = std::env::temp_dir().join(format!("colball-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice tok-a\n").unwrap();
    let c = coordinator(&["--client-tokens-file", tokens.to_str().unwrap()]);
    let _w = worker(&c.url, "w", &[]);
    wait_metric(&c.http, "workers", |n| n == 1).await;
    let as_client = |t: &str| Security {
        token: Some(Secret::new(t, "test").unwrap()),
        ..Security::default()
    };
    let (puzzles, _) = mixed(31, 5, 0);
    let solve = |token: &'static str| {
        let (url, puzzles, security) = (c.url.clone(), puzzles.clone(), as_client(token));
        async move {
            let mut client = Client::connect_with(&url, &security).await.unwrap();
            match client.solve_stream(&puzzles, false).await {
                Ok(stream) => stream.collect::<Vec<_>>().await.iter().all(|r| r.is_ok()),
                Err(_) => false,
            }
        }
    };
    assert!(solve("tok-a").await);
    assert!(!solve("tok-b").await, "bob has no token yet");
    std::fs::write(&tokens, "alice tok-a\nbob tok-b\n").unwrap();
    c.proc.signal("HUP");
    // The reload is asynchronous: poll, bounded.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !solve("tok-b").await {
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload the tokens"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(solve("tok-a").await);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn logs_print_plain_addresses() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Proc(
        Command::new(BIN)
            .args([
                "coordinator",
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let url = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening ").map(|a| format!("http://{a}")))
        .expect("a listening line");
    let _worker = worker(&url, "logged", &[]);
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.0.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + procs::WAIT;
    while !lines.iter().any(|l: &String| l.contains("worker joined")) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no worker joined line in {lines:#?}"));
        lines.push(line);
    }
    let http = lines
        .iter()
        .find(|l| l.contains("http endpoint listening"))
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(http.contains(" addr=127.0.0.1:"), "{http}");
    let joined = lines.iter().find(|l| l.contains("worker joined")).unwrap();
    assert!(joined.contains(" peer=127.0.0.1:"), "{joined}");
    for line in &lines {
        assert!(!line.contains("Some("), "{line}");
    }
}

#[test]
fn the_worker_lists_its_strategies_in_help() {
    let out = std::process::Command::new(BIN)
        .args(["worker", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("[default: auto] [possible values: auto, bidir, idastar, table]"),
        "{help}"
    );
}
