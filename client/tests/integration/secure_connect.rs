//! `colball solve --connect https://... --ca FILE --token ...` against an
//! in-process TLS cluster that requires a client token, and the errors a
//! user sees when a piece is missing.

use std::path::PathBuf;

use colball_proto::Secret;
use colball_server::coordinator::Config;
use colball_server::testing::LocalCluster;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

use crate::common::run as colball;

const INPUT: &[u8] =
    b"2 2\nBB\nBR\nBB\nRR\n3 3\nRRR\nBBB\nRBR\nRBR\nBRG\nGGR\n2 2\nRB\nBG\nBR\nGB\n0\n";

/// A throwaway CA and a certificate it signed for localhost, written to a
/// fresh directory as `ca.pem`, `cert.pem`, `key.pem`.
fn pki() -> PathBuf {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "colball test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let dir = std::env::temp_dir().join(format!("colball-secure-connect-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    std::fs::write(dir.join("token"), "let-me-in\n").unwrap();
    std::fs::write(dir.join("junk.pem"), "no certificate here\n").unwrap();
    dir
}

fn read(dir: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solve_over_tls_with_a_token() {
    let dir = pki();
    let config = Config {
        tls: Some(ServerTlsConfig::new().identity(Identity::from_pem(
            read(&dir, "cert.pem"),
            read(&dir, "key.pem"),
        ))),
        client_token: Some(Secret::new("let-me-in", "test").unwrap()),
        ..Config::default()
    };
    let worker_tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&dir, "ca.pem")));
    let cluster = LocalCluster::start_tls(config, 1, 1, Some(worker_tls))
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
        (4, "no CA is given"),
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
