//! The load run of `cargo run --release -p colball-server --example load`
//! at a size `cargo test` can afford: 20,000 mixed puzzles (every 50th a
//! 4x4) through a coordinator process and two worker processes on
//! loopback. Every answer is checked (moves replayed, counts against an
//! in-process search), each exactly once, and each process's peak resident
//! set stays under a bound.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::Path;
use std::time::{Duration, Instant};

use colball_testkit::load::{self, LoadConfig};

/// Peak resident set allowed for every process, in MiB. At this size the
/// measured peaks (docs/RELIABILITY.md) are 18 MiB for the coordinator
/// (its tasks, per-request channels, a result cache of at most 20,000
/// answers), 23 MiB for a worker (solver buffers, a solution cache, no
/// distance table: no 4x4 target repeats often enough to pay for one) and
/// 13 MiB for the client. 64 MiB is about three times the largest, room for
/// allocator and machine variance; memory kept per result at 2 KiB or more
/// (20,000 results) would pass it, as would building a 4x4 table (15.6 MiB)
/// per worker where none pays off.
const PEAK_MIB: u64 = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_mixed_puzzles_every_answer_once_and_correct() {
    let config = LoadConfig {
        puzzles: 20_000,
        workers: 2,
        seed: 31,
        four_every: 50,
        chunk: 5_000,
        concurrency: 2,
    };
    let began = Instant::now();
    let report = load::run(Path::new(env!("CARGO_BIN_EXE_colball-server")), &config)
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(report.puzzles, 20_000);
    assert_eq!(report.wrong, 0);
    assert_eq!(report.failed, 0);
    assert_eq!(report.lost, 0);
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.peaks.len(), 4, "{:?}", report.peaks);
    for p in &report.peaks {
        assert!(p.hwm_kib > 0 && p.sampled_kib > 0, "{p:?}");
        assert!(p.kib() < PEAK_MIB << 10, "{p:?} over {PEAK_MIB} MiB");
    }
    assert!(began.elapsed() < Duration::from_secs(60), "{report}");
}
