//! The web dashboard, end to end: headless Chromium renders the
//! coordinator's page while a worker joins and a batch runs, and the test
//! reads what the page shows through the DevTools protocol.
//!
//! Needs Chromium (`apt-get install chromium`; `.ci/run` installs it), or
//! the browser named by `COLBALL_CHROMIUM`.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::four_by_four;
use colball_client::remote::Client;
use colball_server::coordinator::Config;
use colball_server::testing::LocalCluster;
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
                     (.ci/run does), or set COLBALL_CHROMIUM to a browser binary",
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
        })"##;
        let value = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        serde_json::from_str(value["result"]["value"].as_str().unwrap_or("{}")).unwrap_or_default()
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_workers_joining_and_answers_rising_live() {
    let config = Config {
        heartbeat_interval: Duration::from_millis(100),
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
    cluster.shutdown().await;
}
