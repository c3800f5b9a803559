//! `/metrics` in the ecosystem's own tools, against a live coordinator
//! after a real batch: `promtool check metrics` accepts what a plain scrape
//! gets; the real Prometheus server scrapes the coordinator and answers a
//! query on a colball metric; and every metric the Grafana dashboard and
//! the alerting rules read is served.
//!
//! Needs Debian's `prometheus` package (`promtool` and `prometheus`), which
//! `scripts/test` installs when `promtool` is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{mixed, quick};
use colball_client::remote::Client;
use colball_testkit::LocalCluster;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;

const WAIT: Duration = Duration::from_secs(30);

/// A response: status code, headers (lower-case names), body.
struct Got {
    code: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

/// `GET path` over HTTP/1.0 with extra request headers.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Got {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.0\r\nhost: test\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut text = String::new();
    tokio::time::timeout(WAIT, s.read_to_string(&mut text))
        .await
        .unwrap()
        .unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let code = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Got {
        code,
        headers,
        body: body.to_string(),
    }
}

/// A cluster with two workers (one with a name that needs escaping in a
/// label) that has solved a batch twice (the second time from the result
/// cache), and its HTTP address.
async fn busy_cluster() -> (LocalCluster, SocketAddr) {
    let mut cluster = LocalCluster::start(quick(), 0, 1).await.unwrap();
    let http = cluster.serve_http().await.unwrap();
    cluster.add_worker("plain", 1);
    cluster.add_worker("quote\"d\\name", 1);
    assert!(cluster.wait_for_workers(2, WAIT).await);
    let (puzzles, _) = mixed(21, 200, 10);
    let mut client = Client::connect(&cluster.url()).await.unwrap();
    for _ in 0..2 {
        let stream = client.solve_stream(&puzzles, false).await.unwrap();
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 200);
    }
    (cluster, http)
}

/// Runs `promtool check metrics` on `body`: its exit status and output.
fn promtool_check(body: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "this test needs promtool: `apt-get install --no-install-recommends prometheus` \
             (scripts/test does)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The families of a Prometheus text body (from its `TYPE` lines) and the
/// sample names that have at least one sample.
fn families_and_samples(body: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let families = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    let samples = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect();
    (families, samples)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_scrape_passes_promtool_check_metrics() {
    let (cluster, http) = busy_cluster().await;
    for accept in [None, Some("text/plain"), Some("*/*")] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("accept", *a)).collect();
        let got = get(http, "/metrics", &headers).await;
        assert_eq!(got.code, 200);
        assert_eq!(
            got.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8",
            "Accept: {accept:?}"
        );
        let (ok, problems) = promtool_check(&got.body);
        assert!(
            ok && problems.trim().is_empty(),
            "promtool check metrics (Accept: {accept:?}):\n{problems}\non\n{}",
            got.body
        );
        for line in got.body.lines().filter(|l| l.starts_with("# HELP ")) {
            assert!(!line.ends_with(".."), "{line}");
            assert!(line.ends_with('.'), "{line}");
        }
        assert!(!got.body.contains("# EOF"));
        let (families, _) = families_and_samples(&got.body);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
            "colball_build_info",
            "colball_answered_total",
            "colball_solve_latency_seconds",
        ] {
            assert!(families.contains(name), "no {name} in\n{}", got.body);
        }
        let version = format!(
            "colball_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        );
        assert!(got.body.contains(&version), "{}", got.body);
        assert!(
            got.body
                .contains("colball_worker_in_flight{worker=\"quote\\\"d\\\\name#"),
            "the worker name is escaped:\n{}",
            got.body
        );
    }

    // A scraper that asks for OpenMetrics gets it: families named without
    // `_total`, and the closing `# EOF`.
    let open = get(
        http,
        "/metrics",
        &[(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )],
    )
    .await;
    assert_eq!(
        open.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(open.body.ends_with("# EOF\n"), "{}", open.body);
    assert!(open.body.contains("# TYPE colball_answered counter\n"));
    assert!(open.body.contains("# TYPE process_cpu_seconds counter\n"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_read_is_served() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("python3")
        .arg(root.join(".ci/grafana_metrics.py"))
        .current_dir(&root)
        .output()
        .expect("run python3 .ci/grafana_metrics.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wanted: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(wanted.len() > 20, "{wanted:?}");
    for name in [
        "colball_build_info",
        "colball_queue_depth",
        "colball_results_rejected_total",
        "colball_workers_quarantined_total",
    ] {
        assert!(wanted.iter().any(|w| w == name), "{name} in {wanted:?}");
    }

    let (cluster, http) = busy_cluster().await;
    let body = get(http, "/metrics", &[]).await.body;
    let (families, samples) = families_and_samples(&body);
    let missing: Vec<&String> = wanted
        .iter()
        .filter(|name| {
            let histogram = samples.contains(&format!("{name}_bucket"));
            !families.contains(*name) || !(samples.contains(*name) || histogram)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "read by the dashboard or the alerts but not served with a sample: {missing:?}\n{body}"
    );
    cluster.shutdown().await;
}

/// A Prometheus server in a throwaway directory, killed by its own PID
/// (and the directory removed) on drop.
struct PrometheusServer {
    child: Child,
    dir: PathBuf,
    addr: SocketAddr,
}

impl PrometheusServer {
    /// Starts Prometheus scraping `target` every second as job
    /// `colball-coordinator`, with the project's alerting rules loaded;
    /// waits until it says where it listens.
    fn start(target: SocketAddr) -> PrometheusServer {
        let dir = std::env::temp_dir().join(format!(
            "colball-prometheus-test-{}-{}",
            std::process::id(),
            target.port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus/alerts.yaml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: colball-coordinator\n    static_configs:\n      \
             - targets: ['{target}']\n",
            rules.canonicalize().unwrap().display()
        );
        std::fs::write(dir.join("prometheus.yml"), config).unwrap();
        let mut child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg("--web.listen-address=127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect(
                "this test needs the Prometheus server: `apt-get install \
                 --no-install-recommends prometheus` (scripts/test does)",
            );
        let stderr = child.stderr.take().unwrap();
        let mut server = PrometheusServer {
            child,
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        // With port 0 the toolkit logs the real address: `msg="Listening
        // on" address=127.0.0.1:PORT`. Its log goes on being drained.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let listening = line
                    .contains("msg=\"Listening on\"")
                    .then(|| line.find("address="))
                    .flatten();
                if let Some(at) = listening {
                    let _ = tx.send(Ok(line[at + "address=".len()..].trim().to_string()));
                } else if line.contains("level=error") {
                    let _ = tx.send(Err(line));
                }
            }
        });
        let addr = rx
            .recv_timeout(WAIT)
            .expect("Prometheus printed no listening address")
            .unwrap_or_else(|e| panic!("Prometheus failed: {e}"));
        server.addr = addr.parse().unwrap();
        server
    }

    /// Waits (bounded by `WAIT`) until Prometheus says it is ready: it
    /// answers 503 while its storage starts.
    async fn ready(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = get(self.addr, "/-/ready", &[]).await;
            if got.code == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never got ready: {} {}",
                got.code,
                got.body
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `GET /api/v1/query?query=...`: the JSON answer.
    async fn query(&self, promql: &str) -> serde_json::Value {
        let mut encoded = String::new();
        for b in promql.bytes() {
            if b.is_ascii_alphanumeric() || b == b'_' {
                encoded.push(b as char);
            } else {
                encoded.push_str(&format!("%{b:02X}"));
            }
        }
        let got = get(self.addr, &format!("/api/v1/query?query={encoded}"), &[]).await;
        serde_json::from_str(&got.body).unwrap_or_else(|e| panic!("{e}: {}", got.body))
    }

    /// Polls `promql` until it has a sample whose value `ok` accepts
    /// (bounded by `WAIT`); returns that value.
    async fn until(&self, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let deadline = Instant::now() + WAIT;
        loop {
            let answer = self.query(promql).await;
            assert_eq!(answer["status"], "success", "{promql}: {answer}");
            let value = answer["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|v| v.parse::<f64>().ok());
            if let Some(v) = value.filter(|v| ok(*v)) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus never answered {promql} as expected; last: {answer}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prometheus_server_scrapes_the_coordinator_and_answers_queries() {
    let (cluster, http) = busy_cluster().await;
    let solved = cluster.scheduler.snapshot().0.counters.solved as f64;
    assert!(solved > 0.0);
    let prometheus = PrometheusServer::start(http);
    prometheus.ready().await;

    let up = prometheus
        .until("up{job=\"colball-coordinator\"}", |v| v == 1.0)
        .await;
    assert_eq!(up, 1.0);
    let got = prometheus
        .until("colball_solved_total", |v| v == solved)
        .await;
    assert_eq!(got, solved);
    // A counter by label, a histogram through histogram_quantile, the
    // build information and a process metric, as the dashboard reads them.
    let by_strategy = prometheus
        .until("sum(colball_answered_total)", |v| v > 0.0)
        .await;
    assert_eq!(by_strategy, 400.0);
    let p99 = prometheus
        .until(
            "histogram_quantile(0.99, sum by (le) (colball_solve_latency_seconds_bucket))",
            |v| v > 0.0,
        )
        .await;
    assert!(p99 <= 1.0, "{p99}");
    prometheus
        .until(
            &format!(
                "colball_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            ),
            |v| v == 1.0,
        )
        .await;
    prometheus
        .until("process_resident_memory_bytes", |v| v > 0.0)
        .await;
    // The alerting rules load and are evaluated; a healthy cluster fires
    // none of them.
    let rules = get(prometheus.addr, "/api/v1/rules", &[]).await;
    let rules: serde_json::Value = serde_json::from_str(&rules.body).unwrap();
    let groups = rules["data"]["groups"].as_array().unwrap();
    assert!(!groups.is_empty(), "{rules}");
    let alerts = prometheus.query("ALERTS{alertstate=\"firing\"}").await;
    assert_eq!(alerts["data"]["result"], serde_json::json!([]), "{alerts}");
    drop(prometheus);
    cluster.shutdown().await;
}
