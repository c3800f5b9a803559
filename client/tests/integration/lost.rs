//! `colball solve --connect` when the connection to the coordinator breaks
//! mid-batch (as when the coordinator crashes or restarts): the command
//! exits non-zero, at once, saying the connection was lost and the batch
//! must be resubmitted. The break is made by a TCP proxy between the
//! command and an in-process cluster, which drops every connection.

use std::time::{Duration, Instant};

use colball_server::coordinator::Config;
use colball_server::testing::LocalCluster;

use crate::common::run as colball;
use crate::proxy;

/// A cluster of two workers behind a proxy, and `colball solve --connect`
/// on 3000 4x4 puzzles (from `seed`) through it, once 100 are solved.
async fn solving_through_a_proxy(
    seed: u64,
) -> (
    LocalCluster,
    proxy::Proxy,
    String,
    tokio::task::JoinHandle<std::process::Output>,
) {
    let cluster = LocalCluster::start(Config::default(), 2, 1).await.unwrap();
    assert!(cluster.wait_for_workers(2, Duration::from_secs(20)).await);
    let proxy = proxy::Proxy::start(cluster.addr).await.unwrap();
    let seed = seed.to_string();
    let generated = colball(
        &["gen", "--size", "4x4", "--count", "3000", "--seed", &seed],
        None,
        b"",
    );
    assert!(generated.status.success());
    let url = proxy.url();
    let command = tokio::task::spawn_blocking({
        let url = url.clone();
        move || colball(&["solve", "--connect", &url], None, &generated.stdout)
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.shared.snapshot().0.counters.solved < 100 {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (cluster, proxy, url, command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_coordinator_connection_fails_the_command_with_resubmit_advice() {
    let (cluster, proxy, url, command) = solving_through_a_proxy(17).await;
    assert!(proxy.cut() > 0);
    let out = tokio::time::timeout(Duration::from_secs(20), command)
        .await
        .expect("colball hung after the connection broke")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("lost the connection to the coordinator at {url}"))
            && stderr.contains("of 3000 results")
            && stderr.contains("resubmit it"),
        "{stderr}"
    );
    // What was printed before the break is a prefix of the answers.
    let printed = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(printed < 3000, "{printed}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_coordinator_fails_the_command_within_the_keepalive_timeout() {
    let (cluster, proxy, url, command) = solving_through_a_proxy(18).await;
    // Nothing is closed and nothing arrives: only the client's HTTP/2
    // pings (every 10 s, 20 s to answer) can tell.
    proxy.freeze();
    let frozen_at = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), command)
        .await
        .expect("colball hung on a silent coordinator")
        .unwrap();
    let waited = frozen_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("lost the connection to the coordinator at {url}"))
            && stderr.contains("resubmit it"),
        "{stderr}"
    );
    assert!(waited < Duration::from_secs(45), "{waited:?}");
    drop(proxy);
    cluster.shutdown().await;
}
