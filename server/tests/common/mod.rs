//! Helpers of the server's integration tests: puzzles with known answers
//! and a scripted fake worker. What other crates' tests share (processes,
//! the proxy, certificates, the load run) is in `colball-testkit`.

#![allow(dead_code)]

use std::time::Duration;

use colball_proto::PROTOCOL_VERSION;
use colball_proto::v1::workers_client::WorkersClient;
use colball_proto::v1::{self, coordinator_message, worker_message};
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Puzzle, Size};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

/// A coordinator config for tests: heartbeats every 100 ms (a lost worker
/// is noticed within a few hundred ms) and a 5 s wait for a first worker.
pub fn quick() -> colball_server::coordinator::Config {
    let mut config = colball_server::coordinator::Config::default();
    config.scheduling.heartbeat_interval = Duration::from_millis(100);
    config.scheduling.worker_grace = Duration::from_secs(5);
    config
}

/// `n` puzzles of mixed sizes (mostly small, every `four_every`-th 4x4),
/// named `p1..`, with their answers from an in-process search.
pub fn mixed(seed: u64, n: usize, four_every: usize) -> (Vec<(String, Puzzle)>, Vec<i64>) {
    let mut g = Generator::new(seed);
    let small: Vec<Size> = Size::ALL.into_iter().filter(|s| s.cells() <= 12).collect();
    let four = Size::new(4, 4).unwrap();
    let mut search = BidirSearch::new();
    let mut puzzles = Vec::new();
    let mut answers = Vec::new();
    for i in 0..n {
        let size = if four_every > 0 && i % four_every == 0 {
            four
        } else {
            g.pick(&small)
        };
        let p = g.uniform(size);
        answers.push(search.solve(&p).answer());
        puzzles.push((format!("p{}", i + 1), p));
    }
    (puzzles, answers)
}

/// Solves `n` mixed puzzles through `client` and checks every answer.
pub async fn solves(client: &mut colball_client::remote::Client, seed: u64, n: usize) {
    let (puzzles, answers) = mixed(seed, n, 10);
    let results: Vec<_> = client
        .solve_stream(&puzzles, true)
        .await
        .unwrap()
        .collect::<Vec<_>>()
        .await;
    assert_eq!(results.len(), n);
    for (r, answer) in results.into_iter().zip(answers) {
        assert_eq!(r.unwrap().solution.answer(), answer);
    }
}

/// `n` uniformly random 4x4 puzzles (slow enough to still be running).
pub fn four_by_four(seed: u64, n: usize) -> Vec<(String, Puzzle)> {
    let mut g = Generator::new(seed);
    let four = Size::new(4, 4).unwrap();
    (0..n)
        .map(|i| (format!("q{}", i + 1), g.uniform(four)))
        .collect()
}

/// A worker driven by the test: it registers and then does only what the
/// test makes it do.
pub struct FakeWorker {
    pub out: mpsc::Sender<v1::WorkerMessage>,
    pub inbound: Streaming<v1::CoordinatorMessage>,
}

impl FakeWorker {
    /// Joins and sends a heartbeat every 50 ms while it lives.
    pub async fn join(url: &str, slots: u32) -> Result<FakeWorker, tonic::Status> {
        FakeWorker::join_as(url, "fake", slots).await
    }

    /// Like [`Self::join`], under another name.
    pub async fn join_as(url: &str, name: &str, slots: u32) -> Result<FakeWorker, tonic::Status> {
        let fake = FakeWorker::register(url, name, slots).await?;
        let out = fake.out.clone();
        tokio::spawn(async move {
            let beat = v1::WorkerMessage {
                kind: Some(worker_message::Kind::Heartbeat(v1::Heartbeat {
                    cache: None,
                })),
            };
            while out.send(beat.clone()).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Ok(fake)
    }

    /// Joins and never sends a heartbeat.
    pub async fn silent(url: &str, slots: u32) -> Result<FakeWorker, tonic::Status> {
        FakeWorker::register(url, "fake", slots).await
    }

    async fn register(url: &str, name: &str, slots: u32) -> Result<FakeWorker, tonic::Status> {
        FakeWorker::register_speaking(url, name, slots, PROTOCOL_VERSION).await
    }

    /// Registers saying it speaks protocol `version` (`Register` reads the
    /// same in every version, so this is what an older worker sends).
    pub async fn register_speaking(
        url: &str,
        name: &str,
        slots: u32,
        version: u32,
    ) -> Result<FakeWorker, tonic::Status> {
        let mut client = WorkersClient::connect(url.to_string()).await.unwrap();
        let (out, rx) = mpsc::channel(64);
        out.send(v1::WorkerMessage {
            kind: Some(worker_message::Kind::Register(v1::Register {
                protocol_version: version,
                name: name.into(),
                slots,
            })),
        })
        .await
        .unwrap();
        let inbound = client.session(ReceiverStream::new(rx)).await?.into_inner();
        Ok(FakeWorker { out, inbound })
    }

    /// The kind of the next message, within 10 s (`None` when the stream
    /// ended or nothing came).
    pub async fn next(&mut self) -> Option<coordinator_message::Kind> {
        tokio::time::timeout(Duration::from_secs(10), self.inbound.message())
            .await
            .ok()?
            .ok()?
            .and_then(|m| m.kind)
    }

    /// Task ids of assignments until `n` are held.
    pub async fn take(&mut self, n: usize) -> Vec<u64> {
        let mut ids = Vec::new();
        while ids.len() < n {
            match self.next().await {
                Some(coordinator_message::Kind::Assign(a)) => {
                    ids.extend(a.tasks.iter().map(|t| t.task_id))
                }
                Some(_) => {}
                None => break,
            }
        }
        ids
    }

    /// Waits for a cancel message; returns its task ids.
    pub async fn cancelled(&mut self) -> Vec<u64> {
        loop {
            match self.next().await {
                Some(coordinator_message::Kind::Cancel(c)) => return c.task_ids,
                Some(_) => {}
                None => return Vec::new(),
            }
        }
    }
}
