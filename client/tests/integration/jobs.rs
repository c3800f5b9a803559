//! `colball job ...` against an in-process cluster: the id alone on
//! standard output, and results that print exactly what `colball solve`
//! prints for the same input.

use colball_server::coordinator::Config;
use colball_testkit::LocalCluster;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_any_order_job_gives_every_result_once_resumable_from_a_count() {
    let cluster = LocalCluster::start(Config::default(), 2, 1).await.unwrap();
    let url = cluster.url();
    let generated = colball(
        &[
            "gen",
            "--size",
            "2x2,3x3,4x4",
            "--count",
            "300",
            "--seed",
            "13",
            "--format",
            "jsonl",
        ],
        None,
        b"",
    );
    assert!(generated.status.success());
    let input = generated.stdout;
    let local = colball(&["solve", "--output", "jsonl"], None, &input);
    assert!(local.status.success());
    let (all, head, tail, classic) = tokio::task::spawn_blocking(move || {
        let submit = colball(
            &["job", "submit", "--any-order", "--connect", &url],
            None,
            &input,
        );
        assert!(submit.status.success(), "{}", text(&submit.stderr));
        let id = text(&submit.stdout).trim().to_string();
        let results = |extra: &[&str]| {
            let mut args = vec![
                "job",
                "results",
                &id,
                "--output",
                "jsonl",
                "--connect",
                &url,
            ];
            args.extend_from_slice(extra);
            colball(&args, None, b"")
        };
        let all = results(&["--wait"]);
        let head = results(&[]);
        let tail = results(&["--from", "100"]);
        let classic = colball(&["job", "results", &id, "--connect", &url], None, b"");
        (all, head, tail, classic)
    })
    .await
    .unwrap();
    assert!(all.status.success(), "{}", text(&all.stderr));
    // Every puzzle once, with the in-process answer (ignoring the timing
    // and strategy fields, and the order).
    let key = |line: &str| {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        (
            v["id"].as_str().unwrap().to_string(),
            v["moves"].as_i64().unwrap(),
        )
    };
    let mut got: Vec<_> = text(&all.stdout).lines().map(key).collect();
    let mut want: Vec<_> = text(&local.stdout).lines().map(key).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // The stored order is stable: read again, from 100, it is the tail.
    let all_lines: Vec<String> = text(&all.stdout).lines().map(|l| key(l).0).collect();
    let head: Vec<String> = text(&head.stdout).lines().map(|l| key(l).0).collect();
    let tail: Vec<String> = text(&tail.stdout).lines().map(|l| key(l).0).collect();
    assert_eq!(head, all_lines);
    assert_eq!(tail, all_lines[100..]);
    // Classic output names no puzzle: refused, saying why.
    assert_eq!(classic.status.code(), Some(2));
    assert!(
        text(&classic.stderr).contains("--output jsonl"),
        "{}",
        text(&classic.stderr)
    );
    cluster.shutdown().await;
}

/// `solve --connect` runs a job and reads its results while its puzzles
/// are still going up: when the first result reaches the output, the job
/// is not acknowledged yet (its owner's list, which shows acknowledged
/// jobs only, is empty), and every answer matches an in-process search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_solve_prints_results_while_its_puzzles_are_still_going_up() {
    use colball_client::jobs::{self, JobRun, Jobs};
    use colball_client::remote::Security;
    use colball_solver::generate::Generator;
    use colball_solver::{BidirSearch, Size};

    let cluster = LocalCluster::start(Config::default(), 1, 2).await.unwrap();
    let url = cluster.url();
    // Enough puzzles that sending them takes far longer than solving the
    // first window.
    let mut g = Generator::new(29);
    let size = Size::new(2, 2).unwrap();
    let puzzles: Vec<_> = (0..300_000)
        .map(|i| (format!("p{i}"), g.uniform(size)))
        .collect();
    let mut search = BidirSearch::new();
    let answers: Vec<i64> = puzzles[..2000]
        .iter()
        .map(|(_, p)| search.solve(p).answer())
        .collect();
    let outcome = tokio::task::spawn_blocking(move || {
        let mut listed_at_first = None;
        let mut got = Vec::new();
        let run = JobRun::default();
        let solved = jobs::solve_in_order(
            &url,
            &Security::default(),
            &run,
            &puzzles,
            &mut |_| {},
            |solved| {
                if listed_at_first.is_none() {
                    // Another thread, another runtime: this one is busy
                    // running the solve, which waits meanwhile.
                    let url = url.clone();
                    let listed = std::thread::spawn(move || {
                        let rt = tokio::runtime::Runtime::new().unwrap();
                        rt.block_on(async {
                            let mut jobs = Jobs::connect(&url, &Security::default()).await?;
                            jobs.list().await
                        })
                    })
                    .join()
                    .unwrap();
                    listed_at_first = Some(listed.map(|l| l.len()));
                }
                if got.len() < 2000 {
                    got.push(solved.solution.answer());
                }
                Ok::<(), std::convert::Infallible>(())
            },
        );
        (solved.is_ok(), listed_at_first, got)
    })
    .await
    .unwrap();
    let (ok, listed_at_first, got) = outcome;
    assert!(ok);
    assert_eq!(got, answers);
    assert_eq!(
        listed_at_first.map(|l| l.ok()),
        Some(Some(0)),
        "the first result came after the job was acknowledged"
    );
    cluster.shutdown().await;
}
