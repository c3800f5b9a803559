//! The hung worker (`colball-hung-worker`, this crate's binary) as a
//! process: it registers, heartbeats, takes tasks and never answers.
//!
//! The binary sits beside the test or benchmark that runs it (cargo puts
//! both in `target/PROFILE`): `cargo test --workspace` builds it, as does
//! `cargo build -p colball-testkit --bins [--release]` before a benchmark.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::procs::Proc;

const NAME: &str = "colball-hung-worker";

/// A running hung worker.
#[derive(Debug)]
pub struct HungWorker {
    /// Killed by its PID when dropped.
    pub proc: Proc,
    held: Arc<AtomicUsize>,
}

impl HungWorker {
    /// Starts one named `name` with `slots` slots dialling `url`, and waits
    /// until the coordinator has taken its registration.
    pub fn start(url: &str, name: &str, slots: u32) -> HungWorker {
        let bin = binary();
        let mut child = Command::new(&bin)
            .args([url, "--name", name, "--slots", &slots.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let proc = Proc(child);
        match lines.next() {
            Some(Ok(line)) if line == "registered" => {}
            other => panic!("{NAME} did not register: {other:?}"),
        }
        let held = Arc::new(AtomicUsize::new(0));
        let count = held.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("held ").and_then(|n| n.parse().ok()) {
                    count.store(n, Ordering::Relaxed);
                }
            }
        });
        HungWorker { proc, held }
    }

    /// Tasks it has been given so far (and holds, unanswered).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

/// The binary's path: beside the running test's or benchmark's own
/// (`target/PROFILE/deps/NAME-HASH` -> `target/PROFILE/colball-hung-worker`).
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("a test runs from target/PROFILE/deps");
    let bin = profile.join(format!("{NAME}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo build -p colball-testkit --bins` \
         (add --release for a benchmark); `cargo test --workspace` and scripts/test build it",
        bin.display()
    );
    bin
}
