//! The nemesis run's workload: the clients that submit, follow, cancel
//! and delete jobs over gRPC and HTTP, and the webhook receiver.

use std::net::SocketAddr;
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

use super::check::{Event, History, Via};
use super::cluster::{Calls, Cluster, lock};
use super::schedule::COORDINATORS;

/// A webhook receiver on loopback answering 200 to each call.
pub(super) async fn receiver() -> (SocketAddr, Calls) {
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
pub(super) async fn request(
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
pub(super) async fn call(
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

pub(super) fn encode(text: &str) -> String {
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
pub(super) fn puzzles(seed: u64, job: usize) -> (Vec<(String, Puzzle)>, Vec<i64>) {
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
pub(super) enum Fate {
    Follow,
    /// Cancel it once this many of its results are read.
    Cancel(usize),
    /// Delete it once this many of its results are read.
    Delete(usize),
}

/// The workload's shared parts.
pub(super) struct Work {
    pub(super) cluster: Arc<Cluster>,
    pub(super) history: Arc<History>,
    pub(super) answers: Mutex<Vec<Vec<i64>>>,
    pub(super) hooks: SocketAddr,
    pub(super) seed: u64,
    /// When the clients give up on a job.
    pub(super) deadline: Mutex<Instant>,
}

impl Work {
    pub(super) fn deadline(&self) -> Instant {
        *lock(&self.deadline)
    }

    /// Submits job `job`; its id once acknowledged.
    pub(super) async fn submit(
        &self,
        job: usize,
        via: Via,
        on: usize,
        rng: &mut StdRng,
    ) -> Option<String> {
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
    pub(super) async fn read(
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
    pub(super) async fn end(&self, job: usize, id: &str, delete: bool, rng: &mut StdRng) -> bool {
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
    pub(super) async fn client(&self, job: usize) {
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

pub(super) fn grpc_answer(r: &v1::PuzzleResult) -> Result<i64, String> {
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
