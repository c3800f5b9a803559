//! What `colball solve --connect` says when it cannot do its work: one
//! clean sentence per error, asserted whole.

use colball_proto::Secret;
use colball_server::coordinator::{AccessConfig, Config, SchedulingConfig};
use colball_testkit::LocalCluster;

use crate::common::run;
use crate::pki::Pki;

const SAMPLE: &[u8] = b"2 2\nBB\nBR\nBB\nRR\n0\n";

/// `colball solve --connect URL EXTRA...` on the sample, in a blocking
/// task: the exit code and standard error.
async fn solve(url: &str, extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![
        "solve".to_string(),
        "--connect".to_string(),
        url.to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(&args, None, SAMPLE)
    })
    .await
    .unwrap();
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_that_are_not_http_or_https_are_refused_before_dialling() {
    for (url, expected) in [
        (
            "127.0.0.1:1",
            "colball: bad coordinator URL \"127.0.0.1:1\": no scheme: write http://127.0.0.1:1 (or https://127.0.0.1:1 for TLS)\n",
        ),
        (
            "ftp://x",
            "colball: bad coordinator URL \"ftp://x\": the scheme must be http:// or https://, not ftp://\n",
        ),
        (
            "http://bad host",
            "colball: bad coordinator URL \"http://bad host\": not a valid URL (invalid uri character)\n",
        ),
    ] {
        assert_eq!(
            solve(url, &[]).await,
            (Some(1), expected.to_string()),
            "{url}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_one_sentence() {
    assert_eq!(
        solve("http://127.0.0.1:1", &[]).await,
        (
            Some(1),
            "colball: cannot connect to http://127.0.0.1:1: Connection refused (os error 111) (if the coordinator serves TLS, use an https:// URL)\n"
                .to_string()
        )
    );
    // An https:// URL needs no --ca to be dialled.
    assert_eq!(
        solve("https://127.0.0.1:1", &[]).await,
        (
            Some(1),
            "colball: cannot connect to https://127.0.0.1:1: Connection refused (os error 111)\n"
                .to_string()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_name_their_code_once() {
    let config = Config {
        scheduling: SchedulingConfig {
            worker_grace: std::time::Duration::from_secs(1),
            ..Config::default().scheduling
        },
        access: AccessConfig {
            client_token: Some(Secret::new("let-me-in", "test").unwrap()),
            ..Config::default().access
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    // No worker: the job `solve --connect` runs fails as a batch would.
    let (code, stderr) = solve(&url, &["--token", "let-me-in"]).await;
    assert_eq!(code, Some(1));
    assert!(
        stderr.starts_with("colball: job j1-")
            && stderr.ends_with(
                " failed after 0 of 1 results: no worker has joined the cluster (waited 1s); start one with `colball-server worker --coordinator URL`\n"
            )
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert_eq!(
        solve(&url, &[]).await,
        (
            Some(1),
            "colball: the cluster answered UNAUTHENTICATED: this coordinator requires a client token: pass --token or set COLBALL_TOKEN\n"
                .to_string()
        )
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_trusts_public_authorities_and_a_private_ca_is_added_with_ca() {
    let pki = Pki::new();
    let dir = pki.write("errors-tls");
    let config = Config {
        access: AccessConfig {
            tls: Some(pki.server()),
            ..Config::default().access
        },
        ..Config::default()
    };
    let cluster = LocalCluster::start_tls(config, 1, 1, Some(pki.client()))
        .await
        .unwrap();
    let url = cluster.url();
    // Without --ca the handshake runs against the public authorities,
    // which did not sign this test certificate.
    assert_eq!(
        solve(&url, &[]).await,
        (
            Some(1),
            format!(
                "colball: cannot connect to {url}: invalid peer certificate: UnknownIssuer (if the coordinator's certificate is signed by a private CA, pass that CA with --ca FILE)\n"
            )
        )
    );
    // --tls-domain works without --ca too (and still checks the chain).
    let (code, stderr) = solve(&url, &["--tls-domain", "localhost"]).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("UnknownIssuer"), "{stderr}");
    // With the private CA it solves.
    let ca = dir.join("ca.pem").display().to_string();
    let out = tokio::task::spawn_blocking(move || {
        run(&["solve", "--connect", &url, "--ca", &ca], None, SAMPLE)
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "-1\n");
    cluster.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
