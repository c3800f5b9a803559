//! Running the real `colball` binary from the integration tests.

use std::io::{ErrorKind, Write};
use std::process::{Command, Output, Stdio};

/// Runs `colball ARGS` with `stdin` as input and optionally one environment
/// variable set; `COLBALL_CONNECT` from the test's own environment is
/// removed so that only what a test sets counts.
pub fn run(args: &[&str], env: Option<(&str, &str)>, stdin: &[u8]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_colball"));
    command
        .env_remove("COLBALL_CONNECT")
        .env_remove("COLBALL_TOKEN");
    if let Some((k, v)) = env {
        command.env(k, v);
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command that fails on its arguments exits without reading its
    // input, so a broken pipe here is expected and its exit status is what
    // the test looks at; any other write error is a real failure.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), ErrorKind::BrokenPipe, "writing to colball: {e}");
    }
    child.wait_with_output().unwrap()
}
