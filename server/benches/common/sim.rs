//! What the benches that simulate a cluster share: worker sessions that
//! speak the real protocol and answer at once from answers computed before
//! the clock starts, and a throwaway PostgreSQL server whose costs can be
//! read. Included by the benches that use it (`#[path]`), not by all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use colball_proto::v1::workers_client::WorkersClient;
use colball_proto::v1::{self, coordinator_message, task_result, worker_message};
use colball_proto::work::path_to_wire;
use colball_proto::{MAX_MESSAGE_BYTES, PROTOCOL_VERSION};
use colball_solver::{BidirSearch, Puzzle};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use super::common;

/// Sessions a connection carries.
pub const SESSIONS_PER_CONNECTION: usize = 50;

/// Answers by (start, target) words: the count and the path's bytes.
pub type Answers = HashMap<(u32, u32), (i64, Vec<u8>)>;

/// Solves every puzzle before the clock starts, on two threads.
pub fn answers(puzzles: &[(String, Puzzle)]) -> Answers {
    let halves: Vec<Answers> = std::thread::scope(|s| {
        let handles: Vec<_> = puzzles
            .chunks(puzzles.len().div_ceil(2))
            .map(|part| {
                s.spawn(move || {
                    let mut search = BidirSearch::new();
                    part.iter()
                        .map(|(_, p)| {
                            let s = search.solve(p);
                            let path = s
                                .path()
                                .map(|m| path_to_wire(p.size(), m))
                                .unwrap_or_default();
                            (
                                (p.start().packed(), p.target().packed()),
                                (s.answer(), path),
                            )
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    halves.into_iter().flatten().collect()
}

/// One simulated worker session: registers with `slots`, answers every
/// assignment at once in one message (unless `mute`), heartbeats every
/// 50 ms. Ends when the coordinator closes the stream or `stop` fires.
pub async fn session(
    channel: Channel,
    answers: Arc<Answers>,
    slots: u32,
    mute: bool,
    stop: tokio_util::sync::CancellationToken,
) {
    let (out, rx) = mpsc::channel(256);
    out.send(v1::WorkerMessage {
        kind: Some(worker_message::Kind::Register(v1::Register {
            protocol_version: PROTOCOL_VERSION,
            name: "sim".into(),
            slots,
        })),
    })
    .await
    .unwrap();
    let mut inbound = WorkersClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
        .session(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let mut beat = tokio::time::interval(Duration::from_millis(50));
    loop {
        let message = tokio::select! {
            m = inbound.message() => m,
            _ = beat.tick() => {
                let _ = out.try_send(v1::WorkerMessage {
                    kind: Some(worker_message::Kind::Heartbeat(v1::Heartbeat { cache: None })),
                });
                continue;
            }
            () = stop.cancelled() => return,
        };
        let Ok(Some(message)) = message else { return };
        let Some(coordinator_message::Kind::Assign(assign)) = message.kind else {
            continue;
        };
        if mute {
            continue;
        }
        let results = assign
            .tasks
            .iter()
            .map(|t| {
                let (moves, path) = answers[&(t.start, t.target)].clone();
                v1::TaskResult {
                    task_id: t.task_id,
                    outcome: Some(task_result::Outcome::Solved(v1::TaskSolved {
                        moves,
                        path: path.into(),
                        method: v1::Method::Bidir as i32,
                        time_us: 0,
                    })),
                }
            })
            .collect();
        let message = v1::WorkerMessage {
            kind: Some(worker_message::Kind::Results(v1::Results { results })),
        };
        if out.send(message).await.is_err() {
            return;
        }
    }
}

/// Starts `n` sessions on `n / 50` connections.
pub async fn sessions(
    url: &str,
    n: usize,
    answers: &Arc<Answers>,
    mute: bool,
    stop: &tokio_util::sync::CancellationToken,
) {
    let mut channel = None;
    for i in 0..n {
        if i % SESSIONS_PER_CONNECTION == 0 {
            let endpoint = Endpoint::from_shared(url.to_string()).unwrap();
            channel = Some(endpoint.connect().await.unwrap());
        }
        tokio::spawn(session(
            channel.clone().unwrap(),
            answers.clone(),
            2,
            mute,
            stop.clone(),
        ));
    }
}

/// A throwaway PostgreSQL server for `VIA=pgjob`, with
/// `pg_stat_statements`.
pub struct Database {
    pub server: colball_testkit::postgres::TempPostgres,
    pub url: String,
}

/// What the database has done so far.
pub struct Costs {
    pub statements: f64,
    pub rows: f64,
    pub transactions: f64,
    /// CPU seconds of the postmaster and its backends.
    pub cpu: f64,
}

impl Database {
    pub fn start() -> Database {
        let server = colball_testkit::postgres::TempPostgres::start_with(&[
            "shared_preload_libraries=pg_stat_statements",
        ]);
        let url = server.database("bench");
        Database { server, url }
    }

    /// A connection of the bench's own.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client
    }

    pub async fn costs(&self) -> Costs {
        let client = self.client().await;
        client
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .await
            .unwrap();
        // The coordinator's statements only (not these).
        let row = client
            .query_one(
                "SELECT coalesce(sum(calls), 0)::float8, coalesce(sum(rows), 0)::float8 \
                 FROM pg_stat_statements WHERE query LIKE '%colball_%' AND query NOT LIKE '%pg_stat%'",
                &[],
            )
            .await
            .unwrap();
        let transactions: i64 = client
            .query_one(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = 'bench'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        Costs {
            statements: row.get(0),
            rows: row.get(1),
            transactions: transactions as f64,
            cpu: tree_cpu_seconds(self.server.pid()),
        }
    }
}

impl Database {
    /// The `n` statements of the coordinators' called most so far: calls,
    /// rows, and the statement's first 100 characters.
    #[allow(dead_code)] // each bench includes this module; not all of them use it
    pub async fn top(&self, n: i64) -> Vec<(i64, i64, String)> {
        let client = self.client().await;
        client
            .query(
                "SELECT calls, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 100) \
                 FROM pg_stat_statements WHERE query LIKE '%colball_%' AND query NOT LIKE '%pg_stat%' \
                 ORDER BY calls DESC LIMIT $1",
                &[&n],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }
}

/// CPU seconds of process `pid`, its reaped children and its live ones
/// (the postmaster, the backends that ended, and those running).
pub fn tree_cpu_seconds(pid: u32) -> f64 {
    let own =
        common::stat_fields(format!("/proc/{pid}/stat")).map_or(0.0, |f| common::ticks(&f, 11..15));
    let children: f64 = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| common::stat_fields(e.path().join("stat")))
        .filter(|f| f.get(1).is_some_and(|p| *p == pid.to_string()))
        .map(|f| common::ticks(&f, 11..13))
        .sum();
    (own + children) / common::clock_ticks()
}
