//! The nemesis run itself: the cluster of real processes, the clients'
//! workload, the faults, and what is stored afterwards for the checker.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_proto::v1::{self, puzzle_result};
use colball_solver::format::classic::format_case;
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Puzzle, Size};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::StreamExt;

use super::check::{Event, History, State, Stored, Via};
use super::schedule::{COORDINATORS, Fault, WORKERS, schedule};
use crate::postgres::TempPostgres;
use crate::procs::{self, Coordinator, Proc, Stderr};
use crate::proxy::Proxy;

/// The coordinators' window leases: short, so that takeovers come within
/// the run.
pub const LEASE: Duration = Duration::from_secs(2);
/// Jobs in flight at once.
const CLIENTS: usize = 3;
/// How long, after the faults end, the clients have to finish.
const SETTLE: Duration = Duration::from_secs(120);

/// One run's figures, for the summary.
#[derive(Debug)]
pub struct Ran {
    pub records: Vec<super::check::Record>,
    pub answers: Vec<Vec<i64>>,
    pub stored: HashMap<usize, Stored>,
    /// The faults as injected, in order.
    pub faults: Vec<String>,
    /// Processes that had exited on their own when the faults ended.
    pub exited: Vec<String>,
}

/// What the run needs from outside: the server binary, the hung worker
/// binary (`colball-hung-worker`, which also lies).
#[derive(Clone, Debug)]
pub struct Binaries {
    pub server: PathBuf,
    pub untrusted: PathBuf,
}

/// The cluster under the nemesis.
struct Cluster {
    bin: Binaries,
    database: Arc<Mutex<TempPostgres>>,
    db_port: u16,
    proxies: Vec<Proxy>,
    flags: Vec<Vec<String>>,
    coordinators: Vec<Mutex<Option<Coordinator>>>,
    listen: Vec<SocketAddr>,
    http: Vec<Mutex<SocketAddr>>,
    workers: Vec<Mutex<Option<Proc>>>,
}

impl Cluster {
    async fn start(bin: Binaries, hooks: SocketAddr, secret: &Path) -> Cluster {
        let database = tokio::task::spawn_blocking(TempPostgres::start)
            .await
            .expect("PostgreSQL starts");
        let db_port = database.port;
        database.database("nemesis");
        let target: SocketAddr = ([127, 0, 0, 1], db_port).into();
        let mut proxies = Vec::new();
        let mut flags = Vec::new();
        for _ in 0..COORDINATORS {
            let proxy = Proxy::start(target).await.expect("a proxy on loopback");
            flags.push(
                [
                    "--store".to_string(),
                    format!("postgres://colball@{}/nemesis", proxy.addr),
                    "--job-lease-secs".into(),
                    LEASE.as_secs().to_string(),
                    "--webhook-allow".into(),
                    format!("http://{hooks}/*"),
                    "--webhook-secret-file".into(),
                    secret.display().to_string(),
                ]
                .to_vec(),
            );
            proxies.push(proxy);
        }
        let mut coordinators = Vec::new();
        for f in &flags {
            let bin = bin.server.clone();
            let f = f.clone();
            coordinators.push(
                tokio::task::spawn_blocking(move || start_coordinator(&bin, "127.0.0.1:0", &f))
                    .await
                    .expect("a coordinator starts"),
            );
        }
        let listen = coordinators.iter().map(|c| c.addr).collect();
        let http = coordinators
            .iter()
            .map(|c| Mutex::new(c.http.parse().expect("an HTTP address")))
            .collect();
        let cluster = Cluster {
            bin,
            database: Arc::new(Mutex::new(database)),
            db_port,
            proxies,
            flags,
            coordinators: coordinators
                .into_iter()
                .map(|c| Mutex::new(Some(c)))
                .collect(),
            listen,
            http,
            workers: (0..WORKERS).map(|_| Mutex::new(None)).collect(),
        };
        for n in 0..WORKERS {
            cluster.start_worker(n);
        }
        cluster
    }

    fn url(&self, n: usize) -> String {
        format!("http://{}", self.listen[n])
    }

    fn http(&self, n: usize) -> SocketAddr {
        *lock(&self.http[n])
    }

    fn start_worker(&self, n: usize) {
        let all: Vec<String> = (0..COORDINATORS).map(|c| self.url(c)).collect();
        let w = procs::worker(
            &self.bin.server,
            &all.join(","),
            &format!("w{n}"),
            Stderr::Quiet,
            &[],
        );
        *lock(&self.workers[n]) = Some(w);
    }

    fn pid(&self, n: usize) -> Option<u32> {
        lock(&self.coordinators[n]).as_ref().map(|c| c.proc.pid())
    }

    /// SIGKILLs coordinator `n` and starts it again on its address.
    async fn restart_coordinator(&self, n: usize) {
        if let Some(c) = lock(&self.coordinators[n]).take() {
            c.proc.kill();
        }
        let bin = self.bin.server.clone();
        let flags = self.flags[n].clone();
        let listen = self.listen[n].to_string();
        let c = tokio::task::spawn_blocking(move || start_coordinator(&bin, &listen, &flags))
            .await
            .unwrap_or_else(|_| panic!("coordinator {n} did not start again"));
        *lock(&self.http[n]) = c.http.parse().expect("an HTTP address");
        *lock(&self.coordinators[n]) = Some(c);
    }

    /// Which coordinator leads the store now, if any says so.
    fn leader(&self) -> Option<usize> {
        (0..COORDINATORS).find(|&n| {
            procs::metrics_text(&self.http(n).to_string()).is_ok_and(|m| {
                m.lines().any(|l| {
                    l.trim() == "colball_store_leader 1" || l.trim() == "colball_store_leader 1.0"
                })
            })
        })
    }

    async fn inject(&self, fault: &Fault) {
        match *fault {
            Fault::KillCoordinator(n) => self.restart_coordinator(n).await,
            Fault::KillLeader => {
                if let Some(n) = self.leader() {
                    self.restart_coordinator(n).await;
                }
            }
            Fault::KillWorker(n) => {
                if let Some(w) = lock(&self.workers[n]).take() {
                    w.kill();
                }
                self.start_worker(n);
            }
            Fault::Pause(n, length) => {
                if let Some(pid) = self.pid(n) {
                    procs::signal(pid, "STOP");
                    tokio::time::sleep(length).await;
                    procs::signal(pid, "CONT");
                }
            }
            Fault::RestartDatabase => {
                let database = self.database.clone();
                tokio::task::spawn_blocking(move || lock(&database).restart_immediate())
                    .await
                    .expect("PostgreSQL starts again");
            }
            Fault::CutDatabase(n, length) => {
                self.proxies[n].refuse(true);
                tokio::time::sleep(length).await;
                self.proxies[n].refuse(false);
            }
            Fault::TerminateSessions(n) => {
                let ports: Vec<i32> = self.proxies[n]
                    .outbound_ports()
                    .into_iter()
                    .map(i32::from)
                    .collect();
                if let Ok(db) = self.direct().await {
                    let _ = db
                        .execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                             WHERE client_port = ANY($1) AND pid <> pg_backend_pid()",
                            &[&ports],
                        )
                        .await;
                }
            }
        }
    }

    /// A session with the database, not through any coordinator's proxy.
    async fn direct(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let url = format!("postgres://colball@127.0.0.1:{}/nemesis", self.db_port);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Deletes the first result group of the first finished job that a
    /// client was told of; which job, if any.
    async fn lose_results(&self, records: &[super::check::Record]) -> Option<i64> {
        let told: Vec<i64> = records
            .iter()
            .filter_map(|r| match &r.event {
                Event::Submitted { id, .. } => seq_of(id),
                _ => None,
            })
            .collect();
        let db = self.direct().await.ok()?;
        let row = db
            .query_opt(
                "DELETE FROM colball_result_groups WHERE (job, pos) IN ( \
                   SELECT g.job, g.pos FROM colball_result_groups g \
                   JOIN colball_jobs j ON j.seq = g.job \
                   WHERE g.job = ANY($1) AND j.state = 3 ORDER BY g.job, g.pos LIMIT 1) \
                 RETURNING job",
                &[&told],
            )
            .await
            .ok()??;
        Some(row.get(0))
    }

    /// Starts again whatever has exited on its own; says what.
    async fn heal(&self) -> Vec<String> {
        let mut exited = Vec::new();
        for n in 0..COORDINATORS {
            self.proxies[n].refuse(false);
            let gone = lock(&self.coordinators[n])
                .as_mut()
                .is_none_or(|c| c.proc.0.try_wait().ok().flatten().is_some());
            if gone {
                exited.push(format!("coordinator {n}"));
                self.restart_coordinator(n).await;
            }
        }
        for n in 0..WORKERS {
            let gone = lock(&self.workers[n])
                .as_mut()
                .is_none_or(|w| w.0.try_wait().ok().flatten().is_some());
            if gone {
                exited.push(format!("worker {n}"));
                self.start_worker(n);
            }
        }
        exited
    }
}

fn start_coordinator(bin: &Path, listen: &str, flags: &[String]) -> Coordinator {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    procs::coordinator(bin, listen, &flags)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The untrusted worker `bin` (testkit's hung worker) named `name`
/// dialling `url` with `args`, started again whenever it exits (a
/// coordinator it dials ended its session, or was not there), until the
/// run ends; how many times it was started.
fn keep_running(
    bin: &Path,
    url: String,
    name: &'static str,
    args: &'static [&'static str],
    running: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    let bin = bin.to_path_buf();
    tokio::spawn(async move {
        let mut starts = 0;
        // Refused at once (quarantined), it waits longer each time.
        let mut pause = Duration::from_millis(200);
        while running.load(Ordering::Relaxed) {
            let Ok(child) = std::process::Command::new(&bin)
                .args([url.as_str(), "--name", name])
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            else {
                panic!("cannot start the {name} worker");
            };
            starts += 1;
            let began = Instant::now();
            let mut proc = Proc(child);
            while running.load(Ordering::Relaxed) && proc.0.try_wait().ok().flatten().is_none() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Dropping it kills it if the run is over.
            drop(proc);
            pause = if began.elapsed() < Duration::from_secs(1) {
                (pause * 2).min(Duration::from_secs(5))
            } else {
                Duration::from_millis(200)
            };
            tokio::time::sleep(pause).await;
        }
        starts
    })
}

/// The webhook calls received: (path, `webhook-id`).
type Calls = Arc<Mutex<Vec<(String, String)>>>;

/// A webhook receiver on loopback answering 200 to each call.
async fn receiver() -> (SocketAddr, Calls) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("its address");
    let calls: Calls = Arc::default();
    let sink = calls.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                let mut path = String::new();
                let mut id = String::new();
                let mut length = 0usize;
                let mut first = true;
                loop {
                    line.clear();
                    if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let l = line.trim_end();
                    if l.is_empty() {
                        break;
                    }
                    if first {
                        path = l.split(' ').nth(1).unwrap_or("").to_string();
                        first = false;
                    } else if let Some((k, v)) = l.split_once(':') {
                        match k.trim().to_ascii_lowercase().as_str() {
                            "webhook-id" => id = v.trim().to_string(),
                            "content-length" => length = v.trim().parse().unwrap_or(0),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; length.min(1 << 20)];
                if reader.read_exact(&mut body).await.is_err() {
                    return;
                }
                lock(&sink).push((path, id));
                let _ = reader
                    .get_mut()
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (addr, calls)
}

/// One HTTP/1.0 request; the status and the body's reader.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, BufReader<TcpStream>)> {
    let mut s = TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.0\r\nhost: nemesis\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await?;
    s.write_all(body).await?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
    loop {
        line.clear();
        if reader.read_line(&mut line).await? == 0 || line.trim_end().is_empty() {
            break;
        }
    }
    Ok((status, reader))
}

/// [`request`] with its whole body read, within 30 s.
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, String), String> {
    let exchange = async {
        let (status, mut reader) = request(addr, method, path, body).await?;
        let mut text = String::new();
        reader.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>((status, text))
    };
    match tokio::time::timeout(Duration::from_secs(30), exchange).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 30 s".into()),
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Job `job`'s puzzles (small ones: up to 12 cells) and their answers.
fn puzzles(seed: u64, job: usize) -> (Vec<(String, Puzzle)>, Vec<i64>) {
    let mut g = Generator::new(seed.wrapping_mul(1_000_003).wrapping_add(job as u64));
    let mut rng = StdRng::seed_from_u64(seed ^ (job as u64) << 32);
    let small: Vec<Size> = Size::ALL.into_iter().filter(|s| s.cells() <= 12).collect();
    let mut search = BidirSearch::new();
    let n = rng.random_range(50..1500);
    let mut puzzles = Vec::with_capacity(n);
    let mut answers = Vec::with_capacity(n);
    for i in 0..n {
        let size = g.pick(&small);
        let p = g.uniform(size);
        answers.push(search.solve(&p).answer());
        puzzles.push((format!("n{job}-{i}"), p));
    }
    (puzzles, answers)
}

/// What a client does with a job it submitted.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Follow,
    /// Cancel it once this many of its results are read.
    Cancel(usize),
    /// Delete it once this many of its results are read.
    Delete(usize),
}

/// The workload's shared parts.
struct Work {
    cluster: Arc<Cluster>,
    history: Arc<History>,
    answers: Mutex<Vec<Vec<i64>>>,
    hooks: SocketAddr,
    seed: u64,
    /// When the clients give up on a job.
    deadline: Mutex<Instant>,
}

impl Work {
    fn deadline(&self) -> Instant {
        *lock(&self.deadline)
    }

    /// Submits job `job`; its id once acknowledged.
    async fn submit(&self, job: usize, via: Via, on: usize, rng: &mut StdRng) -> Option<String> {
        let (puzzles, answers) = {
            let seed = self.seed;
            tokio::task::spawn_blocking(move || puzzles(seed, job))
                .await
                .expect("puzzles")
        };
        {
            let mut all = lock(&self.answers);
            if all.len() <= job {
                all.resize(job + 1, Vec::new());
            }
            all[job] = answers;
        }
        let webhook = format!("http://{}/hook/{job}", self.hooks);
        let name = format!("nemesis-{job}");
        let outcome = match via {
            Via::Grpc => {
                let url = self.cluster.url(on);
                let options = v1::JobOptions {
                    webhook,
                    name,
                    priority: if rng.random_bool(0.2) {
                        v1::Priority::Interactive as i32
                    } else {
                        0
                    },
                    ..Default::default()
                };
                match Jobs::connect(&url, &Security::default()).await {
                    Ok(mut jobs) => jobs
                        .submit_with(&puzzles, options)
                        .await
                        .map(|a| a.id)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            Via::Http => {
                let body: String = puzzles.iter().map(|(_, p)| format_case(p)).collect();
                let path = format!("/api/v1/jobs?name={name}&webhook={}", encode(&webhook));
                match call(self.cluster.http(on), "POST", &path, body.as_bytes()).await {
                    Ok((201, text)) => serde_json::from_str::<serde_json::Value>(&text)
                        .ok()
                        .and_then(|v| v["id"].as_str().map(String::from))
                        .ok_or(format!("201 without an id: {text}")),
                    Ok((code, text)) => Err(format!("{code}: {text}")),
                    Err(e) => Err(e),
                }
            }
        };
        match outcome {
            Ok(id) => {
                self.history.record(Event::Submitted {
                    job,
                    id: id.clone(),
                    via,
                    puzzles: puzzles.len(),
                });
                Some(id)
            }
            Err(error) => {
                self.history.record(Event::SubmitFailed { job, error });
                None
            }
        }
    }

    /// Reads job `job`'s results from index `from` on coordinator `on`
    /// until `stop` results are read or its stream ends; how many it
    /// has read then. Each is recorded.
    async fn read(
        &self,
        job: usize,
        id: &str,
        via: Via,
        on: usize,
        from: usize,
        stop: usize,
    ) -> usize {
        let mut next = from;
        let record = |index: usize, answer| {
            self.history.record(Event::Read {
                job,
                index: index as u64,
                answer,
            });
        };
        let broke = |error: String| self.history.record(Event::ReadBroke { job, error });
        match via {
            Via::Grpc => {
                let mut jobs =
                    match Jobs::connect(&self.cluster.url(on), &Security::default()).await {
                        Ok(jobs) => jobs,
                        Err(e) => {
                            broke(e.to_string());
                            return next;
                        }
                    };
                let mut stream = match jobs.results(id, next as u64, true).await {
                    Ok(s) => s,
                    Err(e) => {
                        broke(e.to_string());
                        return next;
                    }
                };
                while next < stop {
                    match tokio::time::timeout(Duration::from_secs(20), stream.next()).await {
                        Ok(Some(Ok(r))) => {
                            if r.index != next as u64 {
                                broke(format!("index {} came where {next} was due", r.index));
                                return next;
                            }
                            record(next, grpc_answer(&r));
                            next += 1;
                        }
                        Ok(Some(Err(e))) => {
                            broke(e.to_string());
                            return next;
                        }
                        Ok(None) => return next,
                        Err(_) => {
                            broke("no result in 20 s".into());
                            return next;
                        }
                    }
                }
            }
            Via::Http => {
                let path = format!("/api/v1/jobs/{id}/results?from={next}&follow=true");
                let (status, mut reader) =
                    match request(self.cluster.http(on), "GET", &path, b"").await {
                        Ok(answer) => answer,
                        Err(e) => {
                            broke(e.to_string());
                            return next;
                        }
                    };
                if status != 200 {
                    let mut text = String::new();
                    let _ = reader.read_to_string(&mut text).await;
                    broke(format!("{status}: {text}"));
                    return next;
                }
                let mut line = String::new();
                while next < stop {
                    line.clear();
                    match tokio::time::timeout(Duration::from_secs(20), reader.read_line(&mut line))
                        .await
                    {
                        Ok(Ok(0)) => return next,
                        Ok(Ok(_)) => {
                            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                                broke(format!("not JSON: {line:?}"));
                                return next;
                            };
                            if let Some(moves) = v["moves"].as_i64() {
                                record(next, Ok(moves));
                            } else if v.get("id").is_some() {
                                let error = v["error"]
                                    .as_str()
                                    .map_or_else(|| v["error"].to_string(), String::from);
                                record(next, Err(error));
                            } else {
                                broke(v["error"].to_string());
                                return next;
                            }
                            next += 1;
                        }
                        Ok(Err(e)) => {
                            broke(e.to_string());
                            return next;
                        }
                        Err(_) => {
                            broke("no result in 20 s".into());
                            return next;
                        }
                    }
                }
            }
        }
        next
    }

    /// Cancels (or deletes) job `job` until acknowledged or the deadline.
    async fn end(&self, job: usize, id: &str, delete: bool, rng: &mut StdRng) -> bool {
        // Whether an earlier try may have deleted the job: its answer was
        // lost (a coordinator killed, the database cut after the commit).
        let mut maybe_deleted = false;
        while Instant::now() < self.deadline() {
            let on = rng.random_range(0..COORDINATORS);
            // Err(true, _): the job was not found.
            let outcome = if rng.random_bool(0.5) {
                let not_found = |e: colball_client::remote::ClientError| {
                    let gone = matches!(&e, colball_client::remote::ClientError::Status(s)
                        if s.code() == tonic::Code::NotFound);
                    (gone, e.to_string())
                };
                match Jobs::connect(&self.cluster.url(on), &Security::default()).await {
                    Ok(mut jobs) if delete => jobs.delete(id).await.map_err(not_found),
                    Ok(mut jobs) => jobs.cancel(id).await.map(|_| ()).map_err(not_found),
                    Err(e) => Err((false, e.to_string())),
                }
            } else {
                let (method, path) = if delete {
                    ("DELETE", format!("/api/v1/jobs/{id}"))
                } else {
                    ("POST", format!("/api/v1/jobs/{id}/cancel"))
                };
                match call(self.cluster.http(on), method, &path, b"").await {
                    Ok((200 | 204, _)) => Ok(()),
                    Ok((code, text)) => Err((code == 404, format!("{code}: {text}"))),
                    Err(e) => Err((false, e)),
                }
            };
            match outcome {
                Ok(()) => {
                    self.history.record(if delete {
                        Event::Deleted { job }
                    } else {
                        Event::Cancelled { job }
                    });
                    return true;
                }
                // An earlier try's delete went through, its answer lost.
                Err((true, _)) if delete && maybe_deleted => {
                    self.history.record(Event::Deleted { job });
                    return true;
                }
                Err((gone, what)) => {
                    maybe_deleted |= !gone;
                    self.history.record(Event::Refused { job, what });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        false
    }

    /// One client's life for job `job`: submit, then follow, cancel or
    /// delete it.
    async fn client(&self, job: usize) {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0x5eed ^ job as u64);
        let via = if rng.random_bool(0.5) {
            Via::Grpc
        } else {
            Via::Http
        };
        let on = rng.random_range(0..COORDINATORS);
        let Some(id) = self.submit(job, via, on, &mut rng).await else {
            return;
        };
        let n = lock(&self.answers)[job].len();
        let fate = match rng.random_range(0..100) {
            0..12 => Fate::Cancel(rng.random_range(0..n)),
            12..22 => Fate::Delete(rng.random_range(0..n)),
            _ => Fate::Follow,
        };
        let stop = match fate {
            Fate::Follow => n,
            Fate::Cancel(at) | Fate::Delete(at) => at,
        };
        let mut next = 0;
        while next < stop && Instant::now() < self.deadline() {
            let on = rng.random_range(0..COORDINATORS);
            let via = if rng.random_bool(0.5) {
                Via::Grpc
            } else {
                Via::Http
            };
            let before = next;
            next = self.read(job, &id, via, on, next, stop).await;
            if next == before {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        match fate {
            Fate::Follow => {}
            Fate::Cancel(_) => {
                if self.end(job, &id, false, &mut rng).await {
                    // What it has stored is read later; the stream ends.
                    let on = rng.random_range(0..COORDINATORS);
                    self.read(job, &id, Via::Grpc, on, next, n).await;
                }
            }
            Fate::Delete(_) => {
                self.end(job, &id, true, &mut rng).await;
            }
        }
    }
}

fn grpc_answer(r: &v1::PuzzleResult) -> Result<i64, String> {
    match &r.outcome {
        Some(puzzle_result::Outcome::Solved(s)) => Ok(s.moves),
        Some(puzzle_result::Outcome::Error(e)) => Err(e.message.clone()),
        None => Err("no outcome".into()),
    }
}

/// What a run does to the store behind the cluster's back, to test the
/// checker: nothing, or, once the clients are done, one result group of
/// a finished job deleted (results a client may have read, lost).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sabotage {
    None,
    LoseResults,
}

/// Runs the workload under the faults of `seed` for `length`, then reads
/// back what is stored.
pub async fn run(bin: Binaries, seed: u64, length: Duration, sabotage: Sabotage) -> Ran {
    let dir = std::env::temp_dir().join(format!("colball-nemesis-{}-{seed}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let secret = dir.join("secret");
    std::fs::write(
        &secret,
        "whsec_bmVtZXNpcyBydW4gc2VjcmV0IGtleSAzMmJ5dGVzIQ==\n",
    )
    .expect("a secret");
    let (hooks, calls) = receiver().await;
    let cluster = Arc::new(Cluster::start(bin.clone(), hooks, &secret).await);
    let history = Arc::new(History::default());
    let running = Arc::new(AtomicBool::new(true));
    // The untrusted: a liar on one coordinator, a hung worker on another.
    let liar = keep_running(
        &bin.untrusted,
        cluster.url(1),
        "liar",
        &["--slots", "2", "--lie"],
        running.clone(),
    );
    let hung = keep_running(
        &bin.untrusted,
        cluster.url(2),
        "hung",
        &["--slots", "1"],
        running.clone(),
    );
    let work = Arc::new(Work {
        cluster: cluster.clone(),
        history: history.clone(),
        answers: Mutex::default(),
        hooks,
        seed,
        deadline: Mutex::new(Instant::now() + length + SETTLE),
    });
    // The clients: up to CLIENTS jobs at once, new ones until the end.
    let submitting = Arc::new(AtomicBool::new(true));
    let jobs = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (work, submitting, jobs) = (work.clone(), submitting.clone(), jobs.clone());
            tokio::spawn(async move {
                while submitting.load(Ordering::Relaxed) {
                    let job = jobs.fetch_add(1, Ordering::Relaxed);
                    work.client(job).await;
                }
            })
        })
        .collect();
    // The nemesis.
    // The schedule's quiet times add up to `length`; faults take time of
    // their own, so the run ends at `length` of wall time, wherever it is
    // in the schedule.
    let began = Instant::now();
    let mut faults = Vec::new();
    for step in schedule(seed, length, LEASE) {
        if began.elapsed() + step.after >= length {
            break;
        }
        tokio::time::sleep(step.after).await;
        let what = step.fault.to_string();
        history.record(Event::Fault(what.clone()));
        println!("nemesis {seed}: {what}");
        cluster.inject(&step.fault).await;
        faults.push(what);
    }
    submitting.store(false, Ordering::Relaxed);
    let exited = cluster.heal().await;
    history.record(Event::Healed);
    *lock(&work.deadline) = Instant::now() + SETTLE;
    for c in clients {
        c.await.expect("a client task");
    }
    running.store(false, Ordering::Relaxed);
    let (liars, hangs) = (liar.await.unwrap_or(0), hung.await.unwrap_or(0));
    println!("nemesis {seed}: the liar started {liars} times, the hung worker {hangs}");
    let records = history.records();
    if sabotage == Sabotage::LoseResults {
        let lost = cluster.lose_results(&records).await;
        println!("nemesis {seed}: sabotage: a result group of job seq {lost:?} deleted");
    }
    let answers = lock(&work.answers).clone();
    let stored = read_back(&cluster, &records, &calls, seed).await;
    let _ = std::fs::remove_dir_all(&dir);
    Ran {
        records,
        answers,
        stored,
        faults,
        exited,
    }
}

/// What is stored of each acknowledged job, read once the faults have
/// ended and the clients are done.
async fn read_back(
    cluster: &Cluster,
    records: &[super::check::Record],
    calls: &Calls,
    seed: u64,
) -> HashMap<usize, Stored> {
    let mut jobs = Jobs::connect(&cluster.url(0), &Security::default())
        .await
        .expect("coordinator 0 answers");
    let mut stored = HashMap::new();
    let mut cancelled = Vec::new();
    let mut finished = Vec::new();
    for r in records {
        let Event::Submitted { job, id, .. } = &r.event else {
            continue;
        };
        let state = job_state(&mut jobs, id).await;
        if state == State::Cancelled {
            cancelled.push((*job, id.clone()));
        }
        if state == State::Done {
            finished.push(*job);
        }
        let mut s = Stored {
            state: Some(state),
            ..Stored::default()
        };
        if s.state != Some(State::Gone) {
            let stream = jobs.results(id, 0, false).await;
            if let Ok(mut stream) = stream {
                while let Some(Ok(r)) = stream.next().await {
                    s.results.push((r.index, grpc_answer(&r)));
                }
            }
            let count = jobs.get(id).await.map_or(0, |j| j.solved + j.errors);
            s.counts = (count, count);
        }
        if let Some(seq) = seq_of(id)
            && let Ok(db) = cluster.direct().await
        {
            let row = db
                .query_one(
                    "SELECT (SELECT count(*) FROM colball_jobs WHERE seq = $1) \
                       + (SELECT count(*) FROM colball_windows WHERE job = $1) \
                       + (SELECT count(*) FROM colball_puzzle_blocks WHERE job = $1) \
                       + (SELECT count(*) FROM colball_result_groups WHERE job = $1)",
                    &[&seq],
                )
                .await;
            s.rows = row.map_or(u64::MAX, |r| r.get::<_, i64>(0) as u64);
            if s.state != Some(State::Done) {
                s.in_store = in_store(&db, seq).await;
            }
        }
        stored.insert(*job, s);
    }
    // A later job solved whole: a cancelled job's work, had it gone on,
    // would have had its chance.
    if !cancelled.is_empty() {
        let (puzzles, _) = puzzles(seed, usize::MAX / 2);
        if let Ok(accepted) = jobs.submit(&puzzles, None, "after").await
            && let Ok(mut stream) = jobs.results(&accepted.id, 0, true).await
        {
            while stream.next().await.is_some() {}
        }
        for (job, id) in cancelled {
            if let Some(s) = stored.get_mut(&job) {
                s.counts.1 = jobs.get(&id).await.map_or(0, |j| j.solved + j.errors);
            }
        }
    }
    // The finished jobs' webhooks, waited for (each is due at once).
    let deadline = Instant::now() + Duration::from_secs(60);
    let path = |job: usize| format!("/hook/{job}");
    loop {
        let have: Vec<String> = lock(calls).iter().map(|(p, _)| p.clone()).collect();
        if finished.iter().all(|&j| have.contains(&path(j))) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (job, s) in stored.iter_mut() {
        s.webhook_ids = lock(calls)
            .iter()
            .filter(|(p, _)| *p == path(*job))
            .map(|(_, id)| id.clone())
            .collect();
    }
    stored
}

/// Job `seq`'s row and windows as the database holds them, in a line.
async fn in_store(db: &tokio_postgres::Client, seq: i64) -> String {
    let row = db
        .query_opt(
            "SELECT format('state %s, puzzles %s, solved %s, errors %s, stored %s; windows: %s', \
               state, puzzles, solved, errors, stored, \
               (SELECT string_agg(format('%s (done %s, filled %s, holder %s, epoch %s, lease %s)', \
                   win, done, filled, coalesce(holder, '-'), epoch, \
                   coalesce((lease_until - now())::text, '-')), ', ' ORDER BY win) \
                FROM colball_windows WHERE job = $1)) \
             FROM colball_jobs WHERE seq = $1",
            &[&seq],
        )
        .await;
    match row {
        Ok(Some(r)) => r.get(0),
        Ok(None) => "no row".into(),
        Err(e) => format!("not read: {e}"),
    }
}

/// The store's sequence number of job `id`.
fn seq_of(id: &str) -> Option<i64> {
    id.strip_prefix('j')
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse().ok())
}

/// Job `id`'s state, asked until the cluster answers (a minute at most).
async fn job_state(jobs: &mut Jobs, id: &str) -> State {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match jobs.get(id).await {
            Ok(job) => match v1::JobState::try_from(job.state) {
                Ok(v1::JobState::Done) => return State::Done,
                Ok(v1::JobState::Cancelled) => return State::Cancelled,
                Ok(v1::JobState::Running | v1::JobState::Queued) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return State::Other(format!("{other:?} {}", job.failure)),
            },
            Err(colball_client::remote::ClientError::Status(s))
                if s.code() == tonic::Code::NotFound =>
            {
                return State::Gone;
            }
            Err(e) if Instant::now() >= deadline => return State::Other(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
