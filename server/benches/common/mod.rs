//! What the cluster benchmarks share: settings from the environment and
//! reproducible batches.

use colball_solver::generate::Generator;
use colball_solver::{Puzzle, Size};
use tokio_stream::{Stream, StreamExt};

/// A number from the environment variable `name`, or `default`.
pub fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `n` uniformly random puzzles of `size`, named `p0..`.
pub fn batch(seed: u64, size: Size, n: usize) -> Vec<(String, Puzzle)> {
    let mut g = Generator::new(seed);
    (0..n).map(|i| (format!("p{i}"), g.uniform(size))).collect()
}

/// `n` uniformly random puzzles of every size up to 12 cells, named `s0..`.
#[allow(dead_code)] // each bench includes this module; not all of them use it
pub fn small(seed: u64, n: usize) -> Vec<(String, Puzzle)> {
    let mut g = Generator::new(seed);
    let sizes: Vec<Size> = Size::ALL.into_iter().filter(|s| s.cells() <= 12).collect();
    (0..n)
        .map(|i| {
            let size = g.pick(&sizes);
            (format!("s{i}"), g.uniform(size))
        })
        .collect()
}

/// Reads a result stream to its end, every item an answer; how many came.
#[allow(dead_code)] // each bench includes this module; not all of them use it
pub async fn count_all<T, E: std::fmt::Debug>(stream: impl Stream<Item = Result<T, E>>) -> usize {
    let mut stream = std::pin::pin!(stream);
    let mut n = 0;
    while let Some(r) = stream.next().await {
        r.unwrap();
        n += 1;
    }
    n
}

/// CPU seconds (user + system) the process `pid` has used.
#[allow(dead_code)] // each bench includes this module; not all of them use it
pub fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(format!("/proc/{pid}/stat"))
}

/// CPU seconds (user + system) the calling thread has used.
#[allow(dead_code)] // each bench includes this module; not all of them use it
pub fn thread_cpu_seconds() -> f64 {
    stat_cpu_seconds("/proc/thread-self/stat")
}

/// User + system time from a `/proc` stat file, in seconds (0 for a
/// thread or process that has gone).
#[allow(dead_code)]
pub fn stat_cpu_seconds(path: impl AsRef<std::path::Path>) -> f64 {
    stat_fields(path).map_or(0.0, |f| ticks(&f, 11..13) / clock_ticks())
}

/// The fields of a `/proc` stat file after the command name (which is in
/// parentheses): state (0), ppid (1), ..., utime (11), stime, cutime,
/// cstime (14); `None` for a thread or process that has gone.
#[allow(dead_code)]
pub fn stat_fields(path: impl AsRef<std::path::Path>) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(path).ok()?;
    Some(
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// The sum of stat fields `at` (clock ticks).
#[allow(dead_code)]
pub fn ticks(fields: &[String], at: std::ops::Range<usize>) -> f64 {
    fields[at].iter().map(|v| v.parse::<f64>().unwrap()).sum()
}

/// The colball-server binary to measure: `built` (this build's), or the
/// one `COLBALL_SERVER` names (another commit's, for a ratio measured side
/// by side).
#[allow(dead_code)] // each bench includes this module; not all of them use it
pub fn server_bin(built: &str) -> std::path::PathBuf {
    std::env::var_os("COLBALL_SERVER").map_or_else(|| built.into(), Into::into)
}

#[allow(dead_code)]
pub fn clock_ticks() -> f64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}
