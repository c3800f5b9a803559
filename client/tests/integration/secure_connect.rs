//! `colball solve --connect https://... --ca FILE --token ...` against an
//! in-process TLS cluster that requires a client token, and the errors a
//! user sees when a piece is missing.

use colball_proto::Secret;
use colball_server::coordinator::{AccessConfig, Config};
use colball_testkit::LocalCluster;

use crate::common::run as colball;
use crate::pki::Pki;

const INPUT: &[u8] =
    b"2 2\nBB\nBR\nBB\nRR\n3 3\nRRR\nBBB\nRBR\nRBR\nBRG\nGGR\n2 2\nRB\nBG\nBR\nGB\n0\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solve_over_tls_with_a_token() {
    let pki = Pki::new();
    let dir = pki.write("secure-connect");
    std::fs::write(dir.join("token"), "let-me-in\n").unwrap();
    std::fs::write(dir.join("junk.pem"), "no certificate here\n").unwrap();
    let config = Config {
        access: AccessConfig {
            tls: Some(pki.server()),
            client_token: Some(Secret::new("let-me-in", "test").unwrap()),
            ..Config::default().access
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start_tls(config, 1, 1, Some(pki.client()))
        .await
        .unwrap();
    let url = cluster.url();
    let port = cluster.addr.port();
    let ca = dir.join("ca.pem").display().to_string();
    let token_file = dir.join("token").display().to_string();
    let junk = dir.join("junk.pem").display().to_string();

    let out = tokio::task::spawn_blocking(move || {
        let run = |args: &[&str], env: Option<(&str, &str)>| {
            let mut all = vec!["solve"];
            all.extend_from_slice(args);
            colball(&all, env, INPUT)
        };
        vec![
            run(
                &["--connect", &url, "--ca", &ca, "--token-file", &token_file],
                None,
            ),
            run(
                &["--connect", &url, "--ca", &ca],
                Some(("COLBALL_TOKEN", "let-me-in")),
            ),
            run(&["--connect", &url, "--ca", &ca], None),
            run(&["--connect", &url, "--ca", &ca, "--token", "guess"], None),
            run(&["--connect", &url, "--token-file", &token_file], None),
            run(
                &[
                    "--connect",
                    &url,
                    "--ca",
                    &junk,
                    "--token-file",
                    &token_file,
                ],
                None,
            ),
            run(
                &[
                    "--connect",
                    &format!("http://127.0.0.1:{port}"),
                    "--token-file",
                    &token_file,
                ],
                None,
            ),
            run(
                &[
                    "--connect",
                    &url,
                    "--ca",
                    &ca,
                    "--tls-domain",
                    "elsewhere.example",
                    "--token-file",
                    &token_file,
                ],
                None,
            ),
        ]
    })
    .await
    .unwrap();
    let stderr: Vec<String> = out
        .iter()
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    for ok in &out[..2] {
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&ok.stdout), "-1\n6\n1\n");
    }
    for (i, expect) in [
        (2, "requires a client token"),
        (3, "client token is wrong"),
        (4, "pass that CA with --ca FILE"),
        (5, "junk.pem"),
        (6, "https://"),
        (7, "cannot connect"),
    ] {
        assert_eq!(out[i].status.code(), Some(1), "case {i}: {}", stderr[i]);
        assert!(stderr[i].contains(expect), "case {i}: {}", stderr[i]);
        assert!(!stderr[i].contains("let-me-in"), "case {i}: {}", stderr[i]);
        assert!(out[i].stdout.is_empty(), "case {i}");
    }
    assert!(!stderr[3].contains("guess"), "{}", stderr[3]);
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
