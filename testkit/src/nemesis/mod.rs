//! The nemesis run: faults injected at random into a cluster of real
//! processes on loopback while clients use it, and a checker that holds
//! what the clients were told against the guarantees RELIABILITY.md
//! gives.
//!
//! The cluster: three coordinators on a throwaway PostgreSQL, each
//! reaching it through a cuttable proxy; two honest workers naming all
//! three; a worker that lies (every answer counted one move too many) and
//! one that hangs, each started again whenever a coordinator ends its
//! session; a webhook receiver. The clients: three at a time, each
//! submitting a job (gRPC or HTTP, to any coordinator), following its
//! results (gRPC or HTTP, moving to another coordinator when a stream
//! breaks), and cancelling or deleting one job in five. The faults, drawn
//! from the seed ([`schedule`]): SIGKILL and restart of a coordinator, of
//! the leader or of a worker; SIGSTOP past the lease, then SIGCONT;
//! PostgreSQL restarted in immediate mode; a coordinator's database
//! connections cut and refused for a while; `pg_terminate_backend` on a
//! coordinator's sessions.
//!
//! The parts: [`schedule`] (the faults of a seed), `cluster` (the
//! processes and how each fault is done to them), `workload` (the
//! clients and the webhook receiver), `run` (the run and what is read
//! back) and [`check`] (the history and the guarantees).
//!
//! Run by `server/tests/nemesis.rs` (a short run of fixed seeds in the
//! test command; `NEMESIS_SEED=S` and `NEMESIS_SECS=N` choose).

pub mod check;
mod cluster;
mod run;
pub mod schedule;
mod workload;

use std::time::Duration;

pub use cluster::{Binaries, LEASE};
pub use workload::Sabotage;

/// A run that kept every guarantee.
#[derive(Debug)]
pub struct Passed {
    pub seed: u64,
    pub summary: check::Summary,
    /// Processes found exited on their own when the faults ended.
    pub exited: Vec<String>,
}

/// A run that broke one: the report to print.
#[derive(Debug)]
pub struct Failed {
    pub seed: u64,
    pub length: Duration,
    pub violation: check::Violation,
    pub faults: Vec<String>,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "nemesis seed {} failed", self.seed)?;
        write!(f, "{}", self.violation)?;
        writeln!(f, "faults injected ({}):", self.faults.len())?;
        for fault in &self.faults {
            writeln!(f, "  {fault}")?;
        }
        write!(
            f,
            "rerun: NEMESIS_SEED={} NEMESIS_SECS={} scripts/test -p colball-server --test nemesis",
            self.seed,
            self.length.as_secs()
        )
    }
}

/// Runs seed `seed` for `length` of faults and checks it.
pub async fn nemesis(bin: Binaries, seed: u64, length: Duration) -> Result<Passed, Failed> {
    sabotaged(bin, seed, length, Sabotage::None).await
}

/// [`nemesis`] with `sabotage` done to the store (a test of the checker:
/// a sabotaged run must fail).
pub async fn sabotaged(
    bin: Binaries,
    seed: u64,
    length: Duration,
    sabotage: Sabotage,
) -> Result<Passed, Failed> {
    println!("nemesis seed {seed}: {length:?} of faults");
    let ran = run::run(bin, seed, length, sabotage).await;
    match check::check(&ran.records, &ran.answers, &ran.stored) {
        Ok(summary) => Ok(Passed {
            seed,
            summary,
            exited: ran.exited,
        }),
        Err(violation) => Err(Failed {
            seed,
            length,
            violation,
            faults: ran.faults,
        }),
    }
}
