//! The nemesis run (colball_testkit::nemesis) in the test command: a short
//! run of each of a fixed set of seeds, every guarantee checked against
//! what the clients were told. `NEMESIS_SEED=S` runs that seed alone,
//! `NEMESIS_SECS=N` gives each seed N seconds of faults (20 by default;
//! 600 for a release check, see docs/RELIABILITY.md). Without
//! `NEMESIS_SEED`, a last short run deletes stored results behind the
//! cluster's back and must be caught: a test of the checker itself.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::path::PathBuf;
use std::time::Duration;

use colball_testkit::nemesis::{self, Binaries, check};

/// The seeds of the short run.
const SEEDS: [u64; 3] = [1, 2, 3];

fn setting(name: &str) -> Option<u64> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name}={value:?}: {e}")),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_at_random_break_no_guarantee() {
    let bin = Binaries {
        server: PathBuf::from(env!("CARGO_BIN_EXE_colball-server")),
        untrusted: colball_testkit::hung::binary(),
    };
    let length = Duration::from_secs(setting("NEMESIS_SECS").unwrap_or(20));
    let seeds = setting("NEMESIS_SEED").map_or(SEEDS.to_vec(), |s| vec![s]);
    for seed in seeds {
        match nemesis::nemesis(bin.clone(), seed, length).await {
            Ok(passed) => {
                println!("nemesis seed {seed} passed\n{}", passed.summary);
                if !passed.exited.is_empty() {
                    println!("exited on their own: {:?}", passed.exited);
                }
                assert!(
                    passed.summary.done > 0,
                    "seed {seed}: no job finished, nothing was checked"
                );
            }
            Err(failed) => panic!("{failed}"),
        }
    }
    if setting("NEMESIS_SEED").is_some() {
        return;
    }
    // The checker itself, on a real run: a result group of a finished job
    // deleted behind the cluster's back must be caught (in the same test,
    // so that two runs never share the machine).
    let sabotage = nemesis::Sabotage::LoseResults;
    match nemesis::sabotaged(bin, SEEDS[0], Duration::from_secs(10), sabotage).await {
        Ok(passed) => panic!(
            "results deleted from the store, and the checker saw nothing:\n{}",
            passed.summary
        ),
        Err(failed) => {
            let broken = failed.violation.guarantee;
            println!("the sabotaged run was caught:\n{failed}");
            assert!(
                [check::EXACTLY_ONCE, check::READS_STORED].contains(&broken),
                "the sabotaged run broke {broken:?}, not what was done to it"
            );
        }
    }
}
