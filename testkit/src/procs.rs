//! Real `colball-server` processes on loopback, for the process, load and
//! chaos tests and the `load` example (which includes this file by path,
//! so nothing here may use `env!("CARGO_BIN_EXE_...")`: callers pass the
//! binary).
//!
//! Every child is killed when its [`Proc`] drops; addresses come from the
//! coordinator's `listening ADDR` / `http ADDR` lines, and waits poll
//! `/metrics` with a bounded deadline.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any wait on a process or a metric may take.
pub const WAIT: Duration = Duration::from_secs(20);

/// A child process, killed (SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Sends a signal by name (`TERM`, `KILL`, ...).
    pub fn signal(&self, name: &str) {
        signal(self.0.id(), name);
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Waits (bounded by [`WAIT`]) for the process to exit.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `(VmHWM, VmRSS)` in KiB from `/proc/PID/status`: the peak and the
    /// current resident set. `None` once the process is gone.
    pub fn memory_kib(&self) -> Option<(u64, u64)> {
        memory_kib(&format!("/proc/{}/status", self.0.id()))
    }
}

/// `(VmHWM, VmRSS)` in KiB from a `/proc/.../status` file.
pub fn memory_kib(status_file: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(status_file).ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// A coordinator process and where it listens.
#[derive(Debug)]
pub struct Coordinator {
    pub proc: Proc,
    /// The gRPC address (`listening ADDR`).
    pub addr: SocketAddr,
    pub url: String,
    /// The plain-HTTP address (`http ADDR`).
    pub http: String,
}

fn command(bin: &Path, log: &str) -> Command {
    let mut c = Command::new(bin);
    c.env("RUST_LOG", log);
    c
}

/// Starts a coordinator on `listen` (`127.0.0.1:0` for a fresh port) with
/// its HTTP endpoint on a fresh port and 200 ms heartbeats, and waits for
/// its address lines.
pub fn coordinator(bin: &Path, listen: &str, extra: &[&str]) -> Coordinator {
    coordinator_beating(bin, listen, 200, extra)
}

/// [`coordinator`] with heartbeats every `heartbeat_ms`.
pub fn coordinator_beating(
    bin: &Path,
    listen: &str,
    heartbeat_ms: u64,
    extra: &[&str],
) -> Coordinator {
    coordinator_env(bin, listen, heartbeat_ms, extra, &[])
}

/// [`coordinator_beating`] with these environment variables set.
pub fn coordinator_env(
    bin: &Path,
    listen: &str,
    heartbeat_ms: u64,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Coordinator {
    let heartbeat_ms = heartbeat_ms.to_string();
    let mut child = command(bin, "warn")
        .envs(env.iter().copied())
        .args([
            "coordinator",
            "--listen",
            listen,
            "--http",
            "127.0.0.1:0",
            "--heartbeat-ms",
            &heartbeat_ms,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let proc = Proc(child);
    let mut addr = None;
    let mut http = None;
    while addr.is_none() || http.is_none() {
        let line = lines
            .next()
            .expect("coordinator exited early")
            .expect("read coordinator output");
        if let Some(a) = line.strip_prefix("listening ") {
            addr = Some(a.parse::<SocketAddr>().expect("listening address"));
        } else if let Some(a) = line.strip_prefix("http ") {
            http = Some(a.to_string());
        }
    }
    let addr = addr.expect("listening line");
    Coordinator {
        proc,
        addr,
        url: format!("http://{addr}"),
        http: http.expect("http line"),
    }
}

/// How a worker's standard error is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// Inherited, with warnings on (`RUST_LOG=warn`).
    Warn,
    /// Inherited, errors only: for tests that make workers reconnect often.
    Quiet,
    /// Piped, for tests that read it.
    Capture,
}

/// Starts a one-thread worker named `name` dialling `url`.
pub fn worker(bin: &Path, url: &str, name: &str, stderr: Stderr, extra: &[&str]) -> Proc {
    worker_threads(bin, url, name, stderr, 1, extra)
}

/// [`worker`] with `threads` solver threads.
pub fn worker_threads(
    bin: &Path,
    url: &str,
    name: &str,
    stderr: Stderr,
    threads: usize,
    extra: &[&str],
) -> Proc {
    spawn_worker(bin, url, name, stderr, threads, extra, &[])
}

/// [`worker`] with these environment variables set.
pub fn worker_env(bin: &Path, url: &str, name: &str, env: &[(&str, &str)]) -> Proc {
    spawn_worker(bin, url, name, Stderr::Warn, 1, &[], env)
}

fn spawn_worker(
    bin: &Path,
    url: &str,
    name: &str,
    stderr: Stderr,
    threads: usize,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Proc {
    let threads = threads.to_string();
    let log = if stderr == Stderr::Quiet {
        "error"
    } else {
        "warn"
    };
    let mut c = command(bin, log);
    c.envs(env.iter().copied())
        .args([
            "worker",
            "--coordinator",
            url,
            "--threads",
            &threads,
            "--name",
            name,
        ])
        .args(extra);
    if stderr == Stderr::Capture {
        c.stderr(Stdio::piped());
    }
    Proc(
        c.spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display())),
    )
}

/// Sends process `pid` a signal by name.
pub fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// A process stopped and continued in turn (SIGSTOP for `stopped`, then
/// SIGCONT for `running`), so that it stays connected but runs at a
/// fraction of its speed; continued for good when dropped.
#[derive(Debug)]
pub struct DutyCycle {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DutyCycle {
    pub fn start(pid: u32, stopped: Duration, running: Duration) -> DutyCycle {
        let (stop, stopping) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            loop {
                signal(pid, "STOP");
                let end = stopping.recv_timeout(stopped);
                signal(pid, "CONT");
                if end != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                    || stopping.recv_timeout(running)
                        != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
                {
                    return;
                }
            }
        });
        DutyCycle {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for DutyCycle {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// All of the coordinator's `/metrics`, or the connection error.
pub fn metrics_text(http: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(http)?;
    s.set_read_timeout(Some(WAIT))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    Ok(body)
}

/// One value from the coordinator's `/metrics` (`colball_NAME`).
pub fn metric(http: &str, name: &str) -> u64 {
    let body = metrics_text(http).unwrap_or_else(|e| panic!("GET http://{http}/metrics: {e}"));
    let key = format!("colball_{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no metric {name} in {body}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("metric {name}: {e}"))
}

/// Polls `/metrics` until `name` satisfies `ok`, within [`WAIT`].
pub async fn wait_metric(http: &str, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + WAIT;
    loop {
        let v = metric(http, name);
        if ok(v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{name} stuck at {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A coordinator on a fresh job store (a data dir, or a PostgreSQL
/// database) and its one-thread workers, for the tests that kill the
/// coordinator and start it again on its store.
#[derive(Debug)]
pub struct Durable {
    pub coordinator: Coordinator,
    /// Its `--data-dir` (removed on drop), or none for a `--store`.
    pub data: std::path::PathBuf,
    /// The coordinator's store flag and its value.
    store: [String; 2],
    bin: std::path::PathBuf,
    _workers: Vec<Proc>,
}

impl Durable {
    /// Starts it with `workers` workers on `colball-NAME-PID` in the temp
    /// dir, and waits until they have registered.
    pub async fn start(bin: &Path, name: &str, workers: usize) -> Durable {
        let data = std::env::temp_dir().join(format!("colball-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let dir = data.to_str().expect("a UTF-8 temp dir").to_string();
        Durable::start_on(bin, ["--data-dir".into(), dir], data, workers).await
    }

    /// Like [`Self::start`], on the PostgreSQL database at `url`.
    pub async fn start_postgres(bin: &Path, url: &str, workers: usize) -> Durable {
        Durable::start_on(
            bin,
            ["--store".into(), url.into()],
            Default::default(),
            workers,
        )
        .await
    }

    async fn start_on(
        bin: &Path,
        store: [String; 2],
        data: std::path::PathBuf,
        workers: usize,
    ) -> Durable {
        let coordinator = coordinator(bin, "127.0.0.1:0", &[&store[0], &store[1]]);
        let _workers = (0..workers)
            .map(|i| worker(bin, &coordinator.url, &format!("w{i}"), Stderr::Quiet, &[]))
            .collect();
        wait_metric(&coordinator.http, "workers", |n| n == workers as u64).await;
        Durable {
            coordinator,
            data,
            store,
            bin: bin.to_path_buf(),
            _workers,
        }
    }

    /// SIGKILLs the coordinator (and reaps it); its store stays.
    pub fn kill(&mut self) {
        let old = &mut self.coordinator.proc.0;
        let _ = old.kill();
        let _ = old.wait();
    }

    /// SIGKILLs the coordinator and starts another on the same address
    /// and store (the workers find it on their own).
    pub fn kill_and_restart(&mut self) {
        self.kill();
        let listen = self.coordinator.addr.to_string();
        self.coordinator = coordinator(&self.bin, &listen, &[&self.store[0], &self.store[1]]);
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if !self.data.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.data);
        }
    }
}

/// Waits until `received` reaches `moment` (within a minute), then prints
/// that kill `kill` comes now: for tests that kill a process when a run
/// of results is that far.
pub async fn wait_to_kill(received: &std::sync::atomic::AtomicUsize, moment: u64, kill: usize) {
    use std::sync::atomic::Ordering;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (received.load(Ordering::Relaxed) as u64) < moment {
        assert!(Instant::now() < deadline, "no progress before kill {kill}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!(
        "kill {kill} at {} results",
        received.load(Ordering::Relaxed)
    );
}

/// `count` random moments in `1..below` (sorted), from a seed printed for
/// a rerun.
pub fn random_moments(count: usize, below: u64) -> Vec<u64> {
    use rand::{Rng, SeedableRng};
    let seed: u64 = rand::random();
    println!("random moments from seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut moments: Vec<u64> = (0..count).map(|_| rng.random_range(1..below)).collect();
    moments.sort_unstable();
    moments
}
