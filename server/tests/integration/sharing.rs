//! A cluster shared by several clients: named client tokens tell them
//! apart for per-client limits and events, a reload changes who may call,
//! and the HTTP endpoint's `/api` (which shows puzzle data) asks for a
//! token too.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{FakeWorker, four_by_four, quick};
use colball_client::remote::{Client, ClientError, Security};
use colball_proto::Secret;
use colball_proto::v1::cluster_event::Kind;
use colball_server::coordinator::{AccessConfig, Config};
use colball_testkit::LocalCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::Code;

fn as_client(token: &str) -> Security {
    Security {
        token: Some(Secret::new(token, "test").unwrap()),
        ..Security::default()
    }
}

/// `GET path` with an optional bearer token: the status code.
async fn status_of(addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = token.map_or_else(String::new, |t| format!("authorization: Bearer {t}\r\n"));
    s.write_all(format!("GET {path} HTTP/1.0\r\nhost: test\r\n{auth}\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = vec![0; 12];
    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut head))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&head[9..12]).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_tokens_tell_clients_apart_and_reload() {
    let dir = std::env::temp_dir().join(format!("colball-sharing-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "# graders\nalice tok-alice\nbob tok-bob\n").unwrap();
    let config = Config {
        access: AccessConfig {
            client_tokens_file: Some(tokens.clone()),
            max_requests_per_client: 1,
            ..quick().access
        },
        ..quick()
    };
    let cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let url = cluster.url();
    // A worker that holds what it is given keeps alice's batch open.
    let mut fake = FakeWorker::join(&url, 1).await.unwrap();
    let mut watcher = Client::connect_with(&url, &as_client("tok-bob"))
        .await
        .unwrap();
    let mut events = watcher.watch(None).await.unwrap();

    let mut alice = Client::connect_with(&url, &as_client("tok-alice"))
        .await
        .unwrap();
    let _open = alice
        .solve_stream(&four_by_four(1, 4), false)
        .await
        .unwrap();
    fake.take(1).await;
    // Alice is at her limit; bob, from the same address, is not.
    let Err(ClientError::Status(status)) = alice.solve_stream(&four_by_four(2, 1), false).await
    else {
        panic!("alice's second request was admitted")
    };
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(
        status.message().contains("client alice already has 1"),
        "{status:?}"
    );
    let mut bob = Client::connect_with(&url, &as_client("tok-bob"))
        .await
        .unwrap();
    let _bobs = bob.solve_stream(&four_by_four(3, 1), false).await.unwrap();
    // Watchers see who asked, and in which class.
    let mut accepted = Vec::new();
    while accepted.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(Kind::BatchAccepted(b)) = event.kind {
            accepted.push((b.client, b.priority));
        }
    }
    assert_eq!(
        accepted,
        vec![
            ("alice".to_string(), "normal".to_string()),
            ("bob".to_string(), "normal".to_string())
        ]
    );

    // Bob's token is withdrawn; carol gets one. No restart.
    std::fs::write(&tokens, "alice tok-alice\ncarol tok-carol\n").unwrap();
    assert_eq!(cluster.app.access.reload_tokens().unwrap(), 2);
    let Err(ClientError::Status(status)) = bob.solve_stream(&four_by_four(4, 1), false).await
    else {
        panic!("bob's withdrawn token was accepted")
    };
    assert_eq!(status.code(), Code::Unauthenticated);
    let mut carol = Client::connect_with(&url, &as_client("tok-carol"))
        .await
        .unwrap();
    // Carol's batch stays open (the fake worker holds its task), so what
    // follows does not race the release of a dropped batch's slot.
    let _carols = carol
        .solve_stream(&four_by_four(5, 1), false)
        .await
        .unwrap();
    // A broken file is refused, naming its line, and changes nothing: carol
    // is still known as carol (her limit, not her token, refuses her second).
    std::fs::write(&tokens, "alice\n").unwrap();
    let e = cluster.app.access.reload_tokens().unwrap_err();
    assert!(e.to_string().contains(":1:"), "{e}");
    let Err(ClientError::Status(status)) = carol.solve_stream(&four_by_four(6, 1), false).await
    else {
        panic!("carol's second request was admitted past her limit")
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("client carol already has 1"),
        "{status:?}"
    );

    // /api shows puzzle data: it asks for a client token; the rest is open.
    let http = cluster.serve_http().await.unwrap();
    assert_eq!(status_of(http, "/api/status", None).await, 401);
    assert_eq!(
        status_of(http, "/api/status", Some("tok-nobody")).await,
        401
    );
    assert_eq!(status_of(http, "/api/status", Some("tok-alice")).await, 200);
    assert_eq!(
        status_of(http, "/api/status?token=tok-carol", None).await,
        200
    );
    for open in ["/", "/metrics", "/healthz"] {
        assert_eq!(status_of(http, open, None).await, 200, "{open}");
    }
    drop(fake);
    cluster.shutdown().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
