//! The progress bar `colball solve` and `colball grade` draw on standard
//! error for long batches.
//!
//! It is drawn only when standard error is a terminal and `--quiet` was not
//! given, and only for a batch of at least [`SHOW_AT`] cases or once a
//! batch has run for [`SHOW_AFTER`]; otherwise nothing is written. It is
//! cleared when the batch ends, so what stays on the terminal is the same as
//! without it.

use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Batches this large show the bar from the start.
pub const SHOW_AT: u64 = 300;
/// Smaller batches show it once they have run this long.
pub const SHOW_AFTER: Duration = Duration::from_secs(1);

/// Whether to draw: not quiet, on a terminal, and a long batch.
pub fn should_draw(quiet: bool, terminal: bool, total: u64, elapsed: Duration) -> bool {
    !quiet && terminal && (total >= SHOW_AT || elapsed >= SHOW_AFTER)
}

/// A progress bar over `total` cases that shows itself when it should.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    total: u64,
    began: Instant,
    quiet: bool,
    terminal: bool,
    shown: Cell<bool>,
}

impl Progress {
    /// A bar over `total` cases; `quiet` turns it off.
    pub fn new(total: usize, quiet: bool, message: &'static str) -> Progress {
        let total = total as u64;
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        if let Ok(style) = ProgressStyle::with_template(
            "{msg} {wide_bar} {pos}/{len} [{elapsed_precise}, eta {eta}]",
        ) {
            bar.set_style(style);
        }
        bar.set_message(message);
        let progress = Progress {
            bar,
            total,
            began: Instant::now(),
            quiet,
            terminal: std::io::stderr().is_terminal(),
            shown: Cell::new(false),
        };
        progress.maybe_show();
        progress
    }

    fn maybe_show(&self) {
        if !self.shown.get()
            && should_draw(self.quiet, self.terminal, self.total, self.began.elapsed())
        {
            // indicatif's stderr target also hides itself when standard
            // error is not a terminal.
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
    }

    /// One more case done.
    pub fn inc(&self) {
        self.bar.inc(1);
        self.maybe_show();
    }

    /// Writes a line on standard error without tearing the bar.
    pub fn eprintln(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_only_on_a_terminal_for_long_batches_unless_quiet() {
        let short = Duration::from_millis(10);
        let long = Duration::from_secs(2);
        assert!(should_draw(false, true, 1000, short));
        assert!(should_draw(false, true, 5, long));
        assert!(!should_draw(false, true, 5, short));
        assert!(!should_draw(false, false, 1000, long));
        assert!(!should_draw(true, true, 1000, long));
        // Off a terminal (as in tests), the bar never shows.
        let p = Progress::new(1000, false, "x");
        p.inc();
        assert!(!p.shown.get());
    }
}
