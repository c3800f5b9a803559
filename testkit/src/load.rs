//! The load run shared by `cargo run --release -p colball-server --example
//! load` (the full 200,000 puzzles) and `server/tests/load.rs` (a smaller
//! count in `cargo test`): mixed-size puzzles streamed through a
//! coordinator process and worker processes on loopback, every answer
//! checked, the peak memory of each process sampled.
//!
//! The check is independent of the cluster: each returned move sequence is
//! replayed on the puzzle's start with `apply_moves` and must end on its
//! target, and each count must equal what an in-process bidirectional
//! search (no engine, no cache, no tables) finds for that puzzle.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use colball_client::remote::{Client, ClientError, RemoteSolved};
use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Puzzle, Size, Solution, apply_moves};
use tokio::sync::{Semaphore, mpsc};
use tokio_stream::StreamExt;

use crate::procs::{self, Proc, Stderr};

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub puzzles: usize,
    /// Worker processes (one solver thread each).
    pub workers: usize,
    pub seed: u64,
    /// Every `four_every`-th puzzle is a 4x4 (0: none); the rest are drawn
    /// uniformly from the sizes of at most 12 cells.
    pub four_every: usize,
    /// Puzzles per request.
    pub chunk: usize,
    /// Requests open at once.
    pub concurrency: usize,
}

/// Peak memory of one process.
#[derive(Clone, Debug)]
pub struct Peak {
    pub process: String,
    /// `VmHWM` at the end of the run: the kernel's peak resident set.
    pub hwm_kib: u64,
    /// The largest `VmRSS` seen while sampling every 50 ms.
    pub sampled_kib: u64,
}

impl Peak {
    /// The larger of the two, in KiB: the kernel updates `VmHWM` lazily, so
    /// a sample can exceed it by a few pages.
    pub fn kib(&self) -> u64 {
        self.hwm_kib.max(self.sampled_kib)
    }
}

/// What a load run measured.
#[derive(Clone, Debug)]
pub struct LoadReport {
    pub puzzles: usize,
    pub seconds: f64,
    /// Answers that failed the check (bad replay or wrong count).
    pub wrong: usize,
    /// Puzzles never answered.
    pub lost: usize,
    /// Answers received more than once.
    pub duplicates: usize,
    /// Error results from the cluster (also counted as wrong).
    pub failed: usize,
    /// Answers served from the coordinator's result cache.
    pub cached: usize,
    /// Coordinator first, then the workers, then this (client) process.
    pub peaks: Vec<Peak>,
}

impl LoadReport {
    pub fn per_second(&self) -> f64 {
        self.puzzles as f64 / self.seconds.max(1e-9)
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "puzzles      {}", self.puzzles)?;
        writeln!(f, "seconds      {:.2}", self.seconds)?;
        writeln!(f, "puzzles/s    {:.0}", self.per_second())?;
        writeln!(f, "cached       {}", self.cached)?;
        writeln!(f, "wrong        {}", self.wrong)?;
        writeln!(f, "failed       {}", self.failed)?;
        writeln!(f, "lost         {}", self.lost)?;
        writeln!(f, "duplicates   {}", self.duplicates)?;
        for p in &self.peaks {
            writeln!(
                f,
                "peak RSS     {:<12} {:>6.1} MiB (VmHWM {:.1} MiB, largest sampled VmRSS {:.1} MiB)",
                p.process,
                p.kib() as f64 / 1024.0,
                p.hwm_kib as f64 / 1024.0,
                p.sampled_kib as f64 / 1024.0
            )?;
        }
        Ok(())
    }
}

/// `n` puzzles named `p1..`: every `four_every`-th a 4x4, the rest of the
/// sizes of at most 12 cells, uniformly random boards.
pub fn puzzles(seed: u64, n: usize, four_every: usize) -> Vec<(String, Puzzle)> {
    let mut g = Generator::new(seed);
    let small: Vec<Size> = Size::ALL.into_iter().filter(|s| s.cells() <= 12).collect();
    let four = Size::new(4, 4).expect("4x4 is a size");
    (0..n)
        .map(|i| {
            let size = if four_every > 0 && i % four_every == 0 {
                four
            } else {
                g.pick(&small)
            };
            (format!("p{}", i + 1), g.uniform(size))
        })
        .collect()
}

/// Samples the resident set of some processes every 50 ms until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<u64>>,
}

impl Sampler {
    fn start(status_files: Vec<String>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut max = vec![0u64; status_files.len()];
            loop {
                for (m, file) in max.iter_mut().zip(&status_files) {
                    if let Some((_, rss)) = procs::memory_kib(file) {
                        *m = (*m).max(rss);
                    }
                }
                if flag.load(Ordering::Relaxed) {
                    return max;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Sampler { stop, thread }
    }

    fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler thread")
    }
}

/// Stands for an answer whose moves did not replay to the target: no
/// count equals it, so the check counts it wrong (once).
const BAD_REPLAY: i64 = i64::MIN;

/// One received item: the offset of its request, and the result.
type Item = (usize, Result<RemoteSolved, ClientError>);

/// Runs the load against `bin` (the `colball-server` binary). An `Err` is
/// a failure of the harness or of a whole request (a broken stream), with
/// what happened; wrong or missing answers are counted in the report.
pub async fn run(bin: &Path, config: &LoadConfig) -> Result<LoadReport, String> {
    let list = puzzles(config.seed, config.puzzles, config.four_every);
    let coordinator = procs::coordinator(bin, "127.0.0.1:0", &[]);
    let workers: Vec<Proc> = (0..config.workers)
        .map(|i| procs::worker(bin, &coordinator.url, &format!("w{i}"), Stderr::Warn, &[]))
        .collect();
    procs::wait_metric(&coordinator.http, "workers", |n| n == config.workers as u64).await;

    let mut names = vec!["coordinator".to_string()];
    let mut files = vec![format!("/proc/{}/status", coordinator.proc.pid())];
    for (i, w) in workers.iter().enumerate() {
        names.push(format!("worker w{i}"));
        files.push(format!("/proc/{}/status", w.pid()));
    }
    names.push("client".to_string());
    files.push("/proc/self/status".to_string());
    let sampler = Sampler::start(files.clone());

    let client = Client::connect(&coordinator.url)
        .await
        .map_err(|e| e.to_string())?;
    let began = Instant::now();
    let (tx, mut rx) = mpsc::channel::<Item>(4096);
    let open = Arc::new(Semaphore::new(config.concurrency.max(1)));
    let chunks: Vec<(usize, Vec<(String, Puzzle)>)> = list
        .chunks(config.chunk.max(1))
        .enumerate()
        .map(|(i, c)| (i * config.chunk.max(1), c.to_vec()))
        .collect();
    let feeder = tokio::spawn(async move {
        for (base, chunk) in chunks {
            let Ok(permit) = open.clone().acquire_owned().await else {
                return;
            };
            let (mut client, tx) = (client.clone(), tx.clone());
            tokio::spawn(async move {
                let _permit = permit;
                match client.solve_stream(&chunk, false).await {
                    Ok(stream) => {
                        tokio::pin!(stream);
                        while let Some(item) = stream.next().await {
                            if tx.send((base, item)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = tx.send((base, Err(e))).await;
                    }
                }
            });
        }
    });

    let mut times_seen = vec![0u32; list.len()];
    let mut answers: Vec<Option<i64>> = vec![None; list.len()];
    let (mut wrong, mut duplicates, mut failed, mut cached) = (0, 0, 0, 0);
    while let Some((base, item)) = rx.recv().await {
        let r = match item {
            Ok(r) => r,
            Err(ClientError::Puzzle { id, message }) => {
                eprintln!("error result for {id}: {message}");
                failed += 1;
                wrong += 1;
                continue;
            }
            Err(e) => return Err(format!("request at puzzle {base}: {e}")),
        };
        let index = base + r.index;
        let Some((_, puzzle)) = list.get(index) else {
            return Err(format!("result index {index} out of range"));
        };
        times_seen[index] += 1;
        if times_seen[index] > 1 {
            duplicates += 1;
            continue;
        }
        cached += usize::from(r.cached);
        let answer = match &r.solution {
            Solution::Solved(path) => {
                if apply_moves(puzzle.start(), path).ok() != Some(puzzle.target()) {
                    eprintln!("{}: moves do not reach the target", r.id);
                    BAD_REPLAY
                } else {
                    path.len() as i64
                }
            }
            Solution::Unreachable => -1,
        };
        answers[index] = Some(answer);
    }
    let seconds = began.elapsed().as_secs_f64();
    feeder.await.map_err(|e| e.to_string())?;

    let sampled = sampler.finish();
    let mut peaks = Vec::new();
    for ((process, file), sampled_kib) in names.into_iter().zip(&files).zip(sampled) {
        let hwm_kib = procs::memory_kib(file)
            .map(|(hwm, _)| hwm)
            .ok_or_else(|| format!("{process} is gone: cannot read {file}"))?;
        peaks.push(Peak {
            process,
            hwm_kib,
            sampled_kib,
        });
    }
    drop(workers);
    drop(coordinator);

    // The independent check of every count, after the clock stopped.
    let mut search = BidirSearch::new();
    let mut lost = 0;
    for ((_, puzzle), answer) in list.iter().zip(&answers) {
        match answer {
            Some(a) if *a == search.solve(puzzle).answer() => {}
            Some(_) => wrong += 1,
            None => lost += 1,
        }
    }
    // A puzzle with an error result is counted as failed, not lost.
    lost -= failed.min(lost);
    Ok(LoadReport {
        puzzles: list.len(),
        seconds,
        wrong,
        lost,
        duplicates,
        failed,
        cached,
        peaks,
    })
}
