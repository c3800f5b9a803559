//! `colball job ...` against an in-process cluster: the id alone on
//! standard output, and results that print exactly what `colball solve`
//! prints for the same input.

use colball_server::coordinator::Config;
use colball_server::testing::LocalCluster;

use crate::common::run as colball;

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_results_print_what_solve_prints() {
    let cluster = LocalCluster::start(Config::default(), 2, 1).await.unwrap();
    let url = cluster.url();
    let generated = colball(
        &[
            "gen",
            "--size",
            "2x2,2x3,3x3,3x4",
            "--count",
            "400",
            "--seed",
            "12",
        ],
        None,
        b"",
    );
    assert!(generated.status.success());
    let input = generated.stdout;
    let local = colball(&["solve"], None, &input);
    assert!(local.status.success());
    let out = tokio::task::spawn_blocking(move || {
        let submit = colball(
            &["job", "submit", "--name", "t", "--connect", &url],
            None,
            &input,
        );
        assert!(submit.status.success(), "{}", text(&submit.stderr));
        let id = text(&submit.stdout).trim().to_string();
        assert!(id.starts_with('j') && !id.contains(' '), "{id:?}");
        let all = colball(
            &["job", "results", &id, "--wait", "--connect", &url],
            None,
            b"",
        );
        assert!(all.status.success(), "{}", text(&all.stderr));
        // From the middle, now that it is done, without waiting.
        let tail = colball(
            &["job", "results", &id, "--from", "390", "--connect", &url],
            None,
            b"",
        );
        let status = colball(
            &["job", "status", &id, "--format", "json", "--connect", &url],
            None,
            b"",
        );
        let other = colball(&["job", "status", "j424242", "--connect", &url], None, b"");
        (all, tail, status, other)
    })
    .await
    .unwrap();
    let (all, tail, status, other) = out;
    assert_eq!(text(&all.stdout), text(&local.stdout));
    let local_lines: Vec<&str> = std::str::from_utf8(&local.stdout)
        .unwrap()
        .lines()
        .collect();
    assert_eq!(text(&tail.stdout), local_lines[390..].join("\n") + "\n");
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["state"], "done");
    assert_eq!(status["puzzles"], 400);
    assert_eq!(other.status.code(), Some(1));
    assert!(
        text(&other.stderr).contains("no job \"j424242\""),
        "{}",
        text(&other.stderr)
    );
    cluster.shutdown().await;
}
