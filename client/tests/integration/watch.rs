//! `colball watch` against an in-process cluster on loopback: every event
//! as a line, resuming from a sequence number, and a clear error when the
//! resume point is gone.

use colball_server::coordinator::Config;
use colball_testkit::LocalCluster;

/// Runs `colball ARGS` off the async threads, so the cluster keeps serving.
async fn colball(args: Vec<String>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::common::run(&args, None, b"")
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_every_event_and_resumes_from_a_sequence_number() {
    let cluster = LocalCluster::start(Config::default(), 1, 1).await.unwrap();
    let url = cluster.url();
    let generated = crate::common::run(
        &["gen", "--size", "3x3", "--count", "25", "--seed", "4"],
        None,
        b"",
    );
    let solved = tokio::task::spawn_blocking({
        let url = url.clone();
        move || crate::common::run(&["solve", "--connect", &url], None, &generated.stdout)
    })
    .await
    .unwrap();
    assert!(solved.status.success());
    let newest = cluster.scheduler.traffic().newest_sequence;
    // A join, an accept, 25 results, 1 progress event per tenth, a finish.
    assert!(newest >= 28, "{newest}");

    let count = newest.to_string();
    let out = colball(args(&[
        "watch",
        "--connect",
        &url,
        "--from",
        "1",
        "--format",
        "jsonl",
        "--count",
        &count,
    ]))
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=newest).collect::<Vec<_>>());
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "worker_joined");
    assert_eq!(names[1], "batch_accepted");
    assert_eq!(names.iter().filter(|n| **n == "result").count(), 25);
    assert_eq!(*names.last().unwrap(), "batch_finished");
    let finished = events.last().unwrap();
    assert_eq!(finished["solved"], 25);
    assert_eq!(finished["outcome"], "complete");

    // Text, without results, resuming in the middle.
    let out = colball(args(&[
        "watch",
        "--connect",
        &url,
        "--from",
        "2",
        "--no-results",
        "--count",
        "2",
    ]))
    .await;
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("#2 ") && lines[0].contains("batch 1 accepted: 25 puzzles"));
    assert!(
        lines[1].contains("progress") || lines[1].contains("finished"),
        "{text}"
    );

    // A point the coordinator never had: a clear error, not a hang.
    let out = colball(args(&["watch", "--connect", &url, "--from", "100000"])).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot resume") && err.contains("retains events"),
        "{err}"
    );
    cluster.shutdown().await;
}
