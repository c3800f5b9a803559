//! The nemesis run's cluster: a throwaway PostgreSQL, the coordinators
//! behind their cuttable proxies, and the workers, honest and not.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::check::Event;
use super::schedule::{COORDINATORS, Fault, WORKERS};
use crate::postgres::TempPostgres;
use crate::procs::{self, Coordinator, Proc, Stderr};
use crate::proxy::Proxy;

/// The coordinators' window leases: short, so that takeovers come within
/// the run.
pub const LEASE: Duration = Duration::from_secs(2);

/// What the run needs from outside: the server binary, the hung worker
/// binary (`colball-hung-worker`, which also lies).
#[derive(Clone, Debug)]
pub struct Binaries {
    pub server: PathBuf,
    pub untrusted: PathBuf,
}

/// The store's sequence number of job `id`.
pub(super) fn seq_of(id: &str) -> Option<i64> {
    id.strip_prefix('j')
        .and_then(|r| r.split('-').next())
        .and_then(|s| s.parse().ok())
}

/// The cluster under the nemesis.
pub(super) struct Cluster {
    pub(super) bin: Binaries,
    pub(super) database: Arc<Mutex<TempPostgres>>,
    pub(super) db_port: u16,
    pub(super) proxies: Vec<Proxy>,
    pub(super) flags: Vec<Vec<String>>,
    pub(super) coordinators: Vec<Mutex<Option<Coordinator>>>,
    pub(super) listen: Vec<SocketAddr>,
    pub(super) http: Vec<Mutex<SocketAddr>>,
    pub(super) workers: Vec<Mutex<Option<Proc>>>,
}

impl Cluster {
    pub(super) async fn start(bin: Binaries, hooks: SocketAddr, secret: &Path) -> Cluster {
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

    pub(super) fn url(&self, n: usize) -> String {
        format!("http://{}", self.listen[n])
    }

    pub(super) fn http(&self, n: usize) -> SocketAddr {
        *lock(&self.http[n])
    }

    pub(super) fn start_worker(&self, n: usize) {
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

    pub(super) fn pid(&self, n: usize) -> Option<u32> {
        lock(&self.coordinators[n]).as_ref().map(|c| c.proc.pid())
    }

    /// SIGKILLs coordinator `n` and starts it again on its address.
    pub(super) async fn restart_coordinator(&self, n: usize) {
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
    pub(super) fn leader(&self) -> Option<usize> {
        (0..COORDINATORS).find(|&n| {
            procs::metrics_text(&self.http(n).to_string()).is_ok_and(|m| {
                m.lines().any(|l| {
                    l.trim() == "colball_store_leader 1" || l.trim() == "colball_store_leader 1.0"
                })
            })
        })
    }

    pub(super) async fn inject(&self, fault: &Fault) {
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
    pub(super) async fn direct(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let url = format!("postgres://colball@127.0.0.1:{}/nemesis", self.db_port);
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Deletes the first result group of the first finished job that a
    /// client was told of; which job, if any.
    pub(super) async fn lose_results(&self, records: &[super::check::Record]) -> Option<i64> {
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
    pub(super) async fn heal(&self) -> Vec<String> {
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

pub(super) fn start_coordinator(bin: &Path, listen: &str, flags: &[String]) -> Coordinator {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    procs::coordinator(bin, listen, &flags)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The untrusted worker `bin` (testkit's hung worker) named `name`
/// dialling `url` with `args`, started again whenever it exits (a
/// coordinator it dials ended its session, or was not there), until the
/// run ends; how many times it was started.
pub(super) fn keep_running(
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
pub(super) type Calls = Arc<Mutex<Vec<(String, String)>>>;
