//! `colball solve --connect` against an in-process cluster on loopback:
//! the same output as the in-process mode.

use colball_server::coordinator::Config;
use colball_testkit::LocalCluster;

use crate::common::run as colball;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_prints_what_in_process_prints() {
    let cluster = LocalCluster::start(Config::default(), 2, 1).await.unwrap();
    let url = cluster.url();
    let generated = colball(
        &[
            "gen",
            "--size",
            "2x2,2x3,3x3,4x3",
            "--count",
            "300",
            "--seed",
            "9",
        ],
        None,
        b"",
    );
    assert!(generated.status.success());
    let input = generated.stdout;
    let local = colball(&["solve", "--strategy", "bidir", "--moves"], None, &input);
    assert!(local.status.success());
    let remote = tokio::task::spawn_blocking({
        let (url, input) = (url.clone(), input.clone());
        move || colball(&["solve", "--moves", "--connect", &url], None, &input)
    })
    .await
    .unwrap();
    assert!(
        remote.status.success(),
        "{}",
        String::from_utf8_lossy(&remote.stderr)
    );
    // The counts are byte-identical; each sequence is *an* optimal one (the
    // workers' strategies and caches may pick another of equal length), so
    // it must replay from start to target in exactly that many moves.
    let counts = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(counts(&remote.stdout), counts(&local.stdout));
    let cases = colball_solver::format::classic::parse(&input).unwrap();
    for (case, line) in cases
        .iter()
        .zip(String::from_utf8_lossy(&remote.stdout).lines())
    {
        let (n, moves) = line.split_once(' ').unwrap_or((line, ""));
        let moves = colball_solver::parse_moves(case.puzzle.size(), moves).unwrap();
        if n != "-1" {
            assert_eq!(moves.len().to_string(), n);
            let end = colball_solver::apply_moves(case.puzzle.start(), &moves).unwrap();
            assert_eq!(end, case.puzzle.target());
        }
    }

    // The URL can come from COLBALL_CONNECT; JSON Lines output too.
    let local = colball(&["solve", "--output", "jsonl"], None, &input);
    let remote = tokio::task::spawn_blocking(move || {
        colball(
            &["solve", "--output", "jsonl"],
            Some(("COLBALL_CONNECT", &url)),
            &input,
        )
    })
    .await
    .unwrap();
    assert!(remote.status.success());
    let answers = |out: &[u8]| -> Vec<(String, i64)> {
        String::from_utf8_lossy(out)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["id"].as_str().unwrap().to_string(),
                    v["moves"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(answers(&remote.stdout), answers(&local.stdout));
    cluster.shutdown().await;
}

#[test]
fn connect_to_nothing_is_a_clear_error() {
    let out = colball(
        &["solve", "--connect", "http://127.0.0.1:1"],
        None,
        b"2 2\nRB\nBG\nBR\nGB\n0\n",
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot connect to http://127.0.0.1:1"),
        "{stderr}"
    );
}
