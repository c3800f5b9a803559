//! `colball solve --connect` when the connection to the coordinator breaks
//! mid-batch (as when the network fails or the coordinator restarts): the
//! command reconnects and its output is complete and identical to an
//! in-process run; with `--reconnect-secs 0` (or once that time is spent)
//! it exits non-zero at once, saying what was kept. The break is made by a
//! TCP proxy between the command and an in-process cluster.

use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_server::coordinator::Config;
use colball_testkit::LocalCluster;

use crate::common::run as colball;
use crate::proxy;

/// Waits (bounded) until the cluster has solved `n` puzzles.
async fn solved(cluster: &LocalCluster, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.scheduler.snapshot().0.counters.solved < n {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A cluster of two workers behind a proxy, and `colball solve --connect`
/// with `extra` arguments on 3000 4x4 puzzles (from `seed`) through it,
/// once 100 are solved; also the puzzles, for an in-process run.
async fn solving_through_a_proxy(
    seed: u64,
    extra: &'static [&'static str],
) -> (
    LocalCluster,
    proxy::Proxy,
    String,
    Vec<u8>,
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
        let input = generated.stdout.clone();
        move || {
            let mut args = vec!["solve", "--connect", &url];
            args.extend_from_slice(extra);
            colball(&args, None, &input)
        }
    });
    solved(&cluster, 100).await;
    (cluster, proxy, url, generated.stdout, command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_is_made_again_and_the_output_is_complete() {
    let (cluster, proxy, url, input, command) = solving_through_a_proxy(17, &[]).await;
    assert!(proxy.cut() > 0);
    solved(&cluster, 1500).await;
    assert!(
        proxy.cut() > 0,
        "the command reconnected after the first cut"
    );
    let out = tokio::time::timeout(Duration::from_secs(60), command)
        .await
        .expect("colball hung after the connection broke")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("lost the connection to the coordinator at {url}"))
            && stderr.contains("reconnecting for up to 120 s")
            && stderr.matches("reconnected to").count() == 2,
        "{stderr}"
    );
    let local = colball(&["solve"], None, &input);
    assert!(local.status.success());
    assert_eq!(out.stdout.len(), local.stdout.len());
    assert!(
        out.stdout == local.stdout,
        "the output differs from in-process"
    );
    // Read to its end, the job was deleted.
    let mut jobs = Jobs::connect(&cluster.url(), &Security::default())
        .await
        .unwrap();
    assert!(jobs.list().await.unwrap().is_empty());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_reconnecting_a_lost_connection_fails_the_command_saying_what_is_kept() {
    let (cluster, proxy, url, _, command) =
        solving_through_a_proxy(18, &["--reconnect-secs", "0"]).await;
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
            && stderr.contains("keeps jobs in memory only (no --data-dir)")
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
    let (cluster, proxy, url, _, command) =
        solving_through_a_proxy(19, &["--reconnect-secs", "5"]).await;
    // Nothing is closed and nothing arrives: only the client's HTTP/2
    // pings (every 10 s, 20 s to answer) can tell; the connections it
    // makes again hang too, and are given up after 5 s.
    proxy.freeze();
    let frozen_at = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(70), command)
        .await
        .expect("colball hung on a silent coordinator")
        .unwrap();
    let waited = frozen_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("lost the connection to the coordinator at {url}"))
            && stderr.contains("gave up after 5 s (--reconnect-secs)")
            && stderr.contains("resubmit it"),
        "{stderr}"
    );
    assert!(waited < Duration::from_secs(50), "{waited:?}");
    drop(proxy);
    cluster.shutdown().await;
}
