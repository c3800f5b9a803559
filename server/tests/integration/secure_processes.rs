//! The real binaries with tokens and TLS: flags, files and environment
//! variables; a refused worker exits non-zero at once; bad files are named.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::solves;
use colball_client::remote::{Client, Security};
use colball_proto::Secret;
use colball_testkit::pki::Pki;

const WAIT: Duration = Duration::from_secs(20);

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Waits (bounded) for the process to exit; returns its status and
    /// standard error.
    fn finish(&mut self) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        if let Some(mut e) = self.0.stderr.take() {
            e.read_to_string(&mut stderr).unwrap();
        }
        (status, stderr)
    }
}

fn server() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_colball-server"));
    c.env("RUST_LOG", "warn")
        .env_remove("COLBALL_CLIENT_TOKEN")
        .env_remove("COLBALL_WORKER_TOKEN");
    c
}

/// Starts a coordinator; returns it and its gRPC port.
fn coordinator(args: &[&str], env: &[(&str, &str)]) -> (Proc, u16) {
    let mut child = server()
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--heartbeat-ms",
            "200",
        ])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let proc = Proc(child);
    loop {
        let line = lines.next().expect("coordinator exited early").unwrap();
        if let Some(addr) = line.strip_prefix("listening ") {
            let port = addr.rsplit(':').next().unwrap().parse().unwrap();
            return (proc, port);
        }
    }
}

fn worker(url: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    Proc(
        server()
            .args(["worker", "--coordinator", url, "--threads", "1"])
            .args(args)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_with_tokens_from_files_and_environment() {
    let pki = Pki::new();
    let dir = pki.write("secure-processes");
    std::fs::write(dir.join("worker-token"), "w-token\n").unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let (_coordinator, port) = coordinator(
        &[
            "--tls-cert",
            &path("cert.pem"),
            "--tls-key",
            &path("key.pem"),
            "--worker-token-file",
            &path("worker-token"),
        ],
        &[("COLBALL_CLIENT_TOKEN", "c-token")],
    );
    let url = format!("https://localhost:{port}");
    let _worker = worker(
        &url,
        &["--ca", &path("ca.pem")],
        &[("COLBALL_WORKER_TOKEN", "w-token")],
    );

    let security = Security {
        token: Some(Secret::new("c-token", "test").unwrap()),
        tls: Some(pki.client()),
        ca_file: None,
    };
    let mut client = Client::connect_with(&url, &security).await.unwrap();
    solves(&mut client, 31, 50).await;

    // A worker with the client's token, or none, is refused and exits.
    for token in [Some("c-token"), None] {
        let mut args = vec!["--ca".to_string(), path("ca.pem")];
        if let Some(t) = token {
            args.extend(["--token".to_string(), t.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, stderr) = worker(&url, &args, &[]).finish();
        assert!(!status.success());
        assert!(
            stderr.contains("refused") && stderr.contains("worker token"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("c-token") && !stderr.contains("w-token"),
            "{stderr}"
        );
    }

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_and_empty_tokens_are_named() {
    let pki = Pki::new();
    let dir = pki.write("bad-files");
    std::fs::write(dir.join("empty"), "\n").unwrap();
    std::fs::write(dir.join("junk.pem"), "junk\n").unwrap();
    let path = |name: &str| dir.join(name).display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "coordinator".into(),
                "--tls-cert".into(),
                path("junk.pem"),
                "--tls-key".into(),
                path("key.pem"),
            ],
            "junk.pem",
        ),
        (
            vec![
                "coordinator".into(),
                "--tls-cert".into(),
                path("cert.pem"),
                "--tls-key".into(),
                path("missing.pem"),
            ],
            "missing.pem",
        ),
        (
            vec![
                "coordinator".into(),
                "--tls-cert".into(),
                path("cert.pem"),
                "--tls-key".into(),
                path("cert.pem"),
            ],
            "PRIVATE KEY",
        ),
        (
            vec![
                "coordinator".into(),
                "--client-token-file".into(),
                path("empty"),
            ],
            "is empty",
        ),
        (
            vec!["coordinator".into(), "--worker-token".into(), String::new()],
            "is empty",
        ),
        (
            vec!["worker".into(), "--token-file".into(), path("nothing-here")],
            "nothing-here",
        ),
        (
            vec!["worker".into(), "--coordinator".into(), "ftp://x".into()],
            "bad coordinator URL \"ftp://x\": the scheme must be http:// or https://, not ftp://",
        ),
        (
            vec![
                "worker".into(),
                "--coordinator".into(),
                "127.0.0.1:1".into(),
            ],
            "no scheme: write http://127.0.0.1:1",
        ),
        (
            vec!["worker".into(), "--ca".into(), path("junk.pem")],
            "junk.pem",
        ),
    ];
    for (args, expect) in cases {
        let mut child = Proc(
            server()
                .args(&args)
                .args(if args[0] == "coordinator" {
                    vec!["--listen", "127.0.0.1:0"]
                } else {
                    vec![]
                })
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let (status, stderr) = child.finish();
        assert!(!status.success(), "{args:?}");
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_lose_surrounding_whitespace_wherever_they_come_from() {
    // As `export COLBALL_CLIENT_TOKEN="$(cat file; echo)"` or a Secret with
    // a final newline would set them.
    let (_coordinator, port) = coordinator(
        &[],
        &[
            ("COLBALL_CLIENT_TOKEN", "c-token\n"),
            ("COLBALL_WORKER_TOKEN", " w-token\r\n"),
        ],
    );
    let url = format!("http://127.0.0.1:{port}");
    let _worker = worker(&url, &[], &[("COLBALL_WORKER_TOKEN", "w-token\n")]);
    let _flagged = worker(&url, &["--token", "\tw-token "], &[]);
    for token in ["c-token", "c-token\n"] {
        let security = Security {
            token: Some(Secret::new(token, "test").unwrap()),
            tls: None,
            ca_file: None,
        };
        let mut client = Client::connect_with(&url, &security).await.unwrap();
        solves(&mut client, 32, 30).await;
    }
    // Whitespace inside a token is still refused, and only whitespace is
    // an empty token.
    for (value, expect) in [
        ("c token", "cannot travel in gRPC metadata"),
        (" \n", "is empty"),
    ] {
        let mut child = Proc(
            server()
                .args(["coordinator", "--listen", "127.0.0.1:0"])
                .env("COLBALL_CLIENT_TOKEN", value)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let (status, stderr) = child.finish();
        assert!(!status.success(), "{value:?}");
        assert!(stderr.contains(expect), "{value:?}: {stderr}");
    }
}
