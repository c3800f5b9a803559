//! The `colball` command against real coordinator processes that are
//! SIGKILLed mid-job and restarted on their data dir: `colball solve
//! --connect` and `colball job results --wait` print byte for byte what an
//! in-process `colball solve` prints.
//!
//! The `colball` binary belongs to the client package; `cargo test
//! --workspace` (the README's test command) builds it beside
//! `colball-server` before any test runs.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use colball_client::jobs::Jobs;
use colball_client::remote::Security;
use colball_testkit::procs::{self, wait_metric};

const BIN: &str = env!("CARGO_BIN_EXE_colball-server");

/// The `colball` binary of the same build.
fn colball_bin() -> PathBuf {
    let path = Path::new(BIN).with_file_name("colball");
    assert!(
        path.exists(),
        "{} is missing: run the workspace's tests (cargo test --workspace), which build it",
        path.display()
    );
    path
}

/// Runs `colball ARGS` with `stdin`; its output.
pub(crate) fn colball(args: &[&str], stdin: &[u8]) -> Output {
    colball_env(args, stdin, &[])
}

/// [`colball`] with `env` set.
pub(crate) fn colball_env(args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(colball_bin())
        .args(args)
        .env_remove("COLBALL_CONNECT")
        .env_remove("COLBALL_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

pub(crate) fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Generated puzzles and what in-process `colball solve` prints for them.
pub(crate) fn puzzles_and_answers(sizes: &str, count: usize, seed: u64) -> (Vec<u8>, Vec<u8>) {
    let count = count.to_string();
    let seed = seed.to_string();
    let generated = colball(
        &["gen", "--size", sizes, "--count", &count, "--seed", &seed],
        b"",
    );
    assert!(generated.status.success());
    let local = colball(&["solve"], &generated.stdout);
    assert!(local.status.success());
    (generated.stdout, local.stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solve_connect_across_a_coordinator_kill_prints_what_in_process_prints() {
    let mut cluster = procs::Durable::start(Path::new(BIN), "cli-solve-kill", 2).await;
    let (input, local) = puzzles_and_answers("3x3,4x4", 3000, 21);
    let url = cluster.coordinator.url.clone();
    let command =
        tokio::task::spawn_blocking(move || colball(&["solve", "--connect", &url], &input));
    wait_metric(&cluster.coordinator.http, "solved_total", |n| n >= 300).await;
    cluster.kill_and_restart();
    let out = tokio::time::timeout(Duration::from_secs(120), command)
        .await
        .expect("colball solve --connect did not finish")
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("reconnected to"), "{stderr}");
    assert_eq!(out.stdout.len(), local.len());
    assert!(out.stdout == local, "the output differs from in-process");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_job_survives_three_kills_and_its_results_print_what_solve_prints() {
    const PUZZLES: usize = 20_000;
    let mut cluster = procs::Durable::start(Path::new(BIN), "cli-job-kill3", 2).await;
    let (input, local) = puzzles_and_answers("2x2,2x3,3x3,3x4,4x4", PUZZLES, 22);
    let submit = colball(
        &["job", "submit", "--connect", &cluster.coordinator.url],
        &input,
    );
    assert!(submit.status.success(), "{}", text(&submit.stderr));
    let id = text(&submit.stdout).trim().to_string();
    for moment in procs::random_moments(3, PUZZLES as u64 * 9 / 10) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut jobs = Jobs::connect(&cluster.coordinator.url, &Security::default())
            .await
            .unwrap();
        loop {
            let job = jobs.get(&id).await.unwrap();
            if job.solved + job.errors >= moment || job.remaining == 0 {
                println!("kill at {} results stored", job.solved + job.errors);
                break;
            }
            assert!(Instant::now() < deadline, "no progress");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.kill_and_restart();
    }
    let (url, job) = (cluster.coordinator.url.clone(), id.clone());
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || {
            colball(&["job", "results", &job, "--wait", "--connect", &url], b"")
        }),
    )
    .await
    .expect("job results --wait did not finish")
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), local.len());
    assert!(
        out.stdout == local,
        "the job's results differ from in-process"
    );
    // In a pipe, no progress bar.
    assert!(
        !text(&out.stderr).contains(&format!("/{PUZZLES}")),
        "{}",
        text(&out.stderr)
    );
    // Its status, with its pace: its average rate once done.
    let url = &cluster.coordinator.url;
    let status = colball(&["job", "status", &id, "--connect", url], b"");
    let line = text(&status.stdout);
    assert!(
        line.starts_with(&format!(
            "{id} done {PUZZLES} puzzles: {PUZZLES} solved, 0 errors, 0 remaining, "
        )) && line.trim_end().ends_with(" puzzles/s"),
        "{line}"
    );
    let status = colball(
        &["job", "status", &id, "--format", "json", "--connect", url],
        b"",
    );
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(json["rate"].as_f64().unwrap() > 0.0, "{json}");
    assert_eq!(json["eta_unix_ms"], json["finished_unix_ms"], "{json}");
}

/// On a terminal (a pseudo-terminal from `script`), `colball job results
/// --wait` draws its progress bar on standard error, and `--quiet` does
/// not; the results on standard output are the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_results_wait_draws_a_progress_bar_on_a_terminal_only() {
    const PUZZLES: usize = 3000;
    let coordinator = procs::coordinator(Path::new(BIN), "127.0.0.1:0", &[]);
    let _w = procs::worker(
        Path::new(BIN),
        &coordinator.url,
        "w",
        procs::Stderr::Quiet,
        &[],
    );
    let (input, local) = puzzles_and_answers("2x2,2x3,3x3", PUZZLES, 31);
    let submit = colball(&["job", "submit", "--connect", &coordinator.url], &input);
    assert!(submit.status.success(), "{}", text(&submit.stderr));
    let id = text(&submit.stdout).trim().to_string();
    let dir = std::env::temp_dir().join(format!("colball-bar-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let on_terminal = |quiet: bool| {
        let out = dir.join(format!("out-{quiet}"));
        let command = format!(
            "'{}' {} job results {id} --wait --connect {} > '{}'",
            colball_bin().display(),
            if quiet { "--quiet" } else { "" },
            coordinator.url,
            out.display()
        );
        // `script` runs the command on a pseudo-terminal and copies what
        // it writes there (its standard error) to its own output.
        let session = Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .expect("script (util-linux) runs");
        assert!(session.status.success(), "{}", text(&session.stderr));
        (text(&session.stdout), std::fs::read(&out).unwrap())
    };
    let (terminal, results) = on_terminal(false);
    assert!(
        terminal.contains("results") && terminal.contains(&format!("/{PUZZLES}")),
        "no bar on the terminal: {terminal:?}"
    );
    assert!(results == local, "the results differ from in-process");
    let (terminal, results) = on_terminal(true);
    assert!(!terminal.contains(&format!("/{PUZZLES}")), "{terminal:?}");
    assert!(results == local);
    std::fs::remove_dir_all(&dir).unwrap();
}
