//! An in-process cluster on loopback, for tests and benchmarks: a
//! coordinator on `127.0.0.1:0` and N workers, all stopped when the
//! [`LocalCluster`] is dropped.

use std::net::SocketAddr;
use std::sync::Arc;

use colball_proto::Secret;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use colball_server::app::App;
use colball_server::coordinator::{self, Scheduler};
use colball_server::worker;

/// A running coordinator and its workers.
#[derive(Debug)]
pub struct LocalCluster {
    pub addr: SocketAddr,
    /// The scheduler's driver (its snapshot and traffic).
    pub scheduler: Arc<Scheduler>,
    /// The coordinator's parts, as its APIs serve them.
    pub app: App,
    shutdown: CancellationToken,
    workers: Vec<(
        CancellationToken,
        JoinHandle<Result<(), worker::WorkerError>>,
    )>,
    coordinator: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
    /// The worker token of the coordinator's config, given to workers.
    worker_token: Option<Secret>,
    /// For a TLS coordinator: the workers' TLS settings (the CA).
    worker_tls: Option<tonic::transport::ClientTlsConfig>,
}

impl LocalCluster {
    /// Starts a coordinator with `config` and `workers` workers of
    /// `threads` threads each. Must be called inside a tokio runtime.
    pub async fn start(
        config: coordinator::Config,
        workers: usize,
        threads: usize,
    ) -> std::io::Result<LocalCluster> {
        LocalCluster::start_tls(config, workers, threads, None).await
    }

    /// Like [`Self::start`]; with `worker_tls` (the CA that signed the
    /// certificate in `config.access.tls`) the URL is `https://localhost:PORT`.
    pub async fn start_tls(
        config: coordinator::Config,
        workers: usize,
        threads: usize,
        worker_tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> std::io::Result<LocalCluster> {
        let worker_token = config.access.worker_token.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shutdown = CancellationToken::new();
        let app = App::start(config, shutdown.clone())
            .await
            .map_err(std::io::Error::other)?;
        let coordinator = tokio::spawn(colball_server::grpc::serve(
            listener,
            app.clone(),
            shutdown.clone(),
        ));
        let mut cluster = LocalCluster {
            addr,
            scheduler: app.scheduler.clone(),
            app,
            shutdown,
            workers: Vec::new(),
            coordinator: Some(coordinator),
            worker_token,
            worker_tls,
        };
        for i in 0..workers {
            cluster.add_worker(&format!("w{i}"), threads);
        }
        Ok(cluster)
    }

    /// Serves the coordinator's HTTP endpoint (dashboard, metrics, probes)
    /// on `127.0.0.1:0`; returns its address. It stops with the cluster.
    pub async fn serve_http(&self) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(colball_server::http::run(
            listener,
            self.app.clone(),
            self.shutdown.clone(),
        ));
        Ok(addr)
    }

    /// The URL clients and workers dial.
    pub fn url(&self) -> String {
        if self.worker_tls.is_some() {
            format!("https://localhost:{}", self.addr.port())
        } else {
            format!("http://{}", self.addr)
        }
    }

    /// A worker config for this cluster.
    pub fn worker_config(&self, name: &str, threads: usize) -> worker::WorkerConfig {
        let mut config = worker::WorkerConfig::new(self.url());
        config.name = name.to_string();
        config.threads = threads;
        config.token = self.worker_token.clone();
        config.tls = self.worker_tls.clone();
        config
    }

    /// Starts one more worker; returns its index (for [`Self::stop_worker`]).
    pub fn add_worker(&mut self, name: &str, threads: usize) -> usize {
        self.spawn_worker(self.worker_config(name, threads))
    }

    /// Starts a worker with an explicit config.
    pub fn spawn_worker(&mut self, config: worker::WorkerConfig) -> usize {
        let token = CancellationToken::new();
        let handle = tokio::spawn(worker::run(config, token.clone()));
        self.workers.push((token, handle));
        self.workers.len() - 1
    }

    /// Asks a worker to drain and leave; waits for it.
    pub async fn stop_worker(&mut self, index: usize) -> Option<Result<(), worker::WorkerError>> {
        let (token, handle) = self.workers.get_mut(index)?;
        token.cancel();
        handle.await.ok()
    }

    /// Waits for a worker to end on its own (for example when refused).
    pub async fn join_worker(&mut self, index: usize) -> Option<Result<(), worker::WorkerError>> {
        let (_, handle) = self.workers.get_mut(index)?;
        handle.await.ok()
    }

    /// Waits until `n` workers are registered (bounded by `timeout`).
    pub async fn wait_for_workers(&self, n: usize, timeout: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if self.scheduler.snapshot().0.workers >= n {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        false
    }

    /// Shuts everything down and waits for the coordinator.
    pub async fn shutdown(mut self) {
        for (token, _) in &self.workers {
            token.cancel();
        }
        self.shutdown.cancel();
        if let Some(c) = self.coordinator.take() {
            let _ = c.await;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for (token, handle) in &self.workers {
            token.cancel();
            handle.abort();
        }
        self.shutdown.cancel();
    }
}
