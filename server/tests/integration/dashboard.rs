//! The web dashboard, end to end: headless Chromium renders the
//! coordinator's page while a worker joins and a batch runs, and the test
//! reads what the page shows through the DevTools protocol.
//!
//! Needs Chromium (`apt-get install chromium`; `scripts/test` installs it), or
//! the browser named by `COLBALL_CHROMIUM`.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::four_by_four;
use colball_client::jobs::Jobs;
use colball_client::remote::{Client, Security};
use colball_server::coordinator::{Config, SchedulingConfig};
use colball_testkit::LocalCluster;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(60);

/// A headless Chromium in its own process group, with a throwaway
/// profile; the whole group is killed on drop.
struct Chromium {
    child: Child,
    profile: PathBuf,
}

impl Chromium {
    /// Starts the browser; returns it and its DevTools WebSocket URL.
    fn start() -> (Chromium, String) {
        let program = std::env::var("COLBALL_CHROMIUM").ok().unwrap_or_else(|| {
            ["chromium", "chromium-browser", "google-chrome"]
                .into_iter()
                .find(|p| Command::new(p).arg("--version").output().is_ok())
                .expect(
                    "the dashboard test needs Chromium: `apt-get install chromium` \
                     (scripts/test does), or set COLBALL_CHROMIUM to a browser binary",
                )
                .to_string()
        });
        let profile =
            std::env::temp_dir().join(format!("colball-dashboard-test-{}", std::process::id()));
        let mut child = Command::new(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-background-networking",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--window-size=1200,900",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "about:blank",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let browser = Chromium { child, profile };
        // The browser prints its DevTools address once it listens.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(WAIT)
            .expect("Chromium printed no DevTools address");
        (browser, url)
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A DevTools protocol connection with one page attached.
struct DevTools {
    socket: Socket,
    next_id: u64,
    session: Option<String>,
}

impl DevTools {
    async fn connect(url: &str) -> DevTools {
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        DevTools {
            socket,
            next_id: 1,
            session: None,
        }
    }

    /// Sends one command and waits for its answer (skipping events).
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        self.socket
            .send(Message::text(message.to_string()))
            .await
            .unwrap();
        loop {
            let reply = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("DevTools did not answer")
                .unwrap()
                .unwrap();
            let Message::Text(text) = reply else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["id"] == id {
                assert!(value["error"].is_null(), "{method}: {value}");
                return value["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page and attaches to it.
    async fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": url})).await;
        let attached = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target["targetId"], "flatten": true}),
            )
            .await;
        self.session = Some(attached["sessionId"].as_str().unwrap().to_string());
    }

    /// What the page shows now.
    async fn shown(&mut self) -> Shown {
        let expression = r##"JSON.stringify({
            live: document.getElementById("connection").className === "live",
            workers: Number(document.getElementById("workers-count").textContent),
            answered: Number(document.getElementById("answered").textContent),
            names: [...document.querySelectorAll("tr.worker")].map(r => r.dataset.name),
            results: document.querySelectorAll("#results tr:not(:has(.empty))").length,
            jobs: [...document.querySelectorAll("tr.job")].map(r => ({
                id: r.dataset.id,
                state: r.className.split(" ")[1],
                percent: Number(r.dataset.percent),
                width: r.querySelector(".bar > div").style.width,
                rate: Number(r.dataset.rate),
                eta: r.dataset.eta,
            })),
            queued: ["interactive", "normal", "bulk"]
                .map(c => Number(document.getElementById("queued-" + c).textContent)),
            charts: Object.fromEntries(["throughput", "latency", "queue", "moves"].map(c => {
                const svg = document.getElementById("chart-" + c);
                return [c, {
                    points: Number(svg.dataset.points || 0),
                    max: Number(svg.dataset.max || 0),
                    total: Number(svg.dataset.total || 0),
                    drawn: svg.querySelectorAll("path.line, circle, rect").length,
                }];
            })),
        })"##;
        let value = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        serde_json::from_str(value["result"]["value"].as_str().unwrap_or("{}")).unwrap_or_default()
    }

    /// A PNG screenshot of the whole page.
    async fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }

    /// Polls the page until `ok` holds (bounded by `WAIT`); every state seen
    /// on the way goes to `seen`.
    async fn until(&mut self, seen: &mut Vec<Shown>, ok: impl Fn(&Shown) -> bool) -> Shown {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let now = self.shown().await;
            seen.push(now.clone());
            if ok(&now) {
                return now;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the dashboard never showed what was expected; last: {now:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct Shown {
    live: bool,
    workers: u64,
    answered: u64,
    names: Vec<String>,
    results: u64,
    jobs: Vec<JobShown>,
    /// The queue tiles: interactive, normal, bulk.
    queued: Vec<u64>,
    charts: Charts,
}

/// A row of the jobs table.
#[derive(Clone, Debug, Default, serde::Deserialize)]
struct JobShown {
    id: String,
    state: String,
    percent: f64,
    /// The progress bar's fill, as a CSS width.
    width: String,
    /// Results per second, and the time left ("in 12 s").
    rate: f64,
    eta: String,
}

/// What each chart says it drew.
#[derive(Clone, Debug, Default, serde::Deserialize)]
struct Charts {
    throughput: Chart,
    latency: Chart,
    queue: Chart,
    moves: Chart,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
struct Chart {
    /// Points (line charts) or bars.
    points: u64,
    max: f64,
    /// The bars' sum.
    total: u64,
    /// SVG lines, dots and bars in the chart.
    drawn: u64,
}

/// Width and height of a PNG, from its header.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_workers_joining_and_answers_rising_live() {
    let config = Config {
        scheduling: SchedulingConfig {
            heartbeat_interval: Duration::from_millis(100),
            ..Config::default().scheduling
        },
        ..Config::default()
    };
    let mut cluster = LocalCluster::start(config, 0, 1).await.unwrap();
    let http = cluster.serve_http().await.unwrap();
    let (_browser, devtools_url) = Chromium::start();
    let mut page = DevTools::connect(&devtools_url).await;
    page.open(&format!("http://{http}/")).await;

    let mut seen = Vec::new();
    let empty = page.until(&mut seen, |s| s.live).await;
    assert_eq!((empty.workers, empty.answered), (0, 0), "{empty:?}");
    assert!(empty.names.is_empty());

    // A worker joins: the same page, never reloaded, lists it.
    cluster.add_worker("dashboard-worker", 1);
    let joined = page.until(&mut seen, |s| s.workers == 1).await;
    assert!(
        joined.names[0].starts_with("dashboard-worker"),
        "{joined:?}"
    );

    // A batch of 4x4 puzzles long enough to span several updates.
    let puzzles = four_by_four(9, 1500);
    let total = puzzles.len() as u64;
    let url = cluster.url();
    let batch = tokio::spawn(async move {
        let mut client = Client::connect(&url).await.unwrap();
        let stream = client.solve_stream(&puzzles, false).await.unwrap();
        stream.collect::<Vec<_>>().await.len()
    });
    seen.clear();
    let done = page.until(&mut seen, |s| s.answered == total).await;
    assert_eq!(batch.await.unwrap() as u64, total);
    assert_eq!(done.results, 20, "recent results are listed");
    let during: Vec<u64> = seen
        .iter()
        .map(|s| s.answered)
        .filter(|&n| n > 0 && n < total)
        .collect();
    assert!(
        !during.is_empty(),
        "the count rose while the batch ran: {:?}",
        seen.iter().map(|s| s.answered).collect::<Vec<_>>()
    );
    assert!(
        seen.windows(2).all(|w| w[0].answered <= w[1].answered),
        "the count never goes down"
    );
    assert!(
        seen.iter().any(|s| s.queued[1] > 0),
        "the normal-class queue tile showed the queue: {:?}",
        seen.iter().map(|s| &s.queued).collect::<Vec<_>>()
    );

    // The charts: once the batch's last second is history, every chart
    // has drawn data.
    let drawn = page
        .until(&mut seen, |s| {
            let c = &s.charts;
            c.throughput.max > 0.0 && c.moves.total == total && c.latency.points > 0
        })
        .await;
    let c = &drawn.charts;
    assert!(c.throughput.points > 0 && c.throughput.drawn >= 1, "{c:?}");
    assert!(
        c.latency.max > 0.0 && c.latency.drawn >= 2,
        "p50 and p99: {c:?}"
    );
    assert!(
        c.queue.max > 0.0,
        "the queue was not empty during the batch: {c:?}"
    );
    assert!(c.queue.drawn >= 4, "all and three classes: {c:?}");
    assert!(
        c.moves.points >= 5 && c.moves.drawn == c.moves.points,
        "{c:?}"
    );

    // A job: listed with a progress bar that fills as it runs, its rate and
    // time left, green when done.
    assert!(drawn.jobs.is_empty(), "{:?}", drawn.jobs);
    let mut jobs = Jobs::connect(&cluster.url(), &Security::default())
        .await
        .unwrap();
    let id = jobs
        .submit(&four_by_four(10, 1500), None, "nightly")
        .await
        .unwrap()
        .id;
    seen.clear();
    let finished = page
        .until(&mut seen, |s| {
            s.jobs.first().is_some_and(|j| j.state == "done")
        })
        .await;
    let job = &finished.jobs[0];
    assert_eq!((job.id.as_str(), job.percent), (id.as_str(), 100.0));
    assert_eq!(job.width, "100%");
    // Done: its average rate, and no time left.
    assert!(job.rate > 0.0 && job.eta.is_empty(), "{job:?}");
    // Running, it showed its rate and the time left, live.
    assert!(
        seen.iter()
            .filter_map(|s| s.jobs.first())
            .any(|j| j.percent < 100.0 && j.rate > 0.0 && j.eta.starts_with("in ")),
        "no rate and ETA while it ran: {:?}",
        seen.iter().map(|s| &s.jobs).collect::<Vec<_>>()
    );
    let partial: Vec<f64> = seen
        .iter()
        .filter_map(|s| s.jobs.first())
        .map(|j| j.percent)
        .filter(|p| *p > 0.0 && *p < 100.0)
        .collect();
    assert!(
        !partial.is_empty(),
        "the bar showed the job part done: {:?}",
        seen.iter().map(|s| &s.jobs).collect::<Vec<_>>()
    );
    let png = page.screenshot().await;
    let (width, height) = png_size(&png);
    assert!(width >= 600 && height >= 600, "{width}x{height}");
    // A blank or nearly blank page compresses to a few kilobytes.
    assert!(png.len() > 30_000, "{} bytes", png.len());
    let keep = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&keep, &png).unwrap();
    eprintln!("dashboard screenshot: {}", keep.display());
    cluster.shutdown().await;
}
