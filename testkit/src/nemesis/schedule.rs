//! The nemesis's faults, drawn from a seed: the same seed gives the same
//! schedule, so a failing run is rerun exactly (what the faults meet, the
//! processes' timing, still varies).

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The coordinators of a run.
pub const COORDINATORS: usize = 3;
/// Its honest worker processes.
pub const WORKERS: usize = 2;

/// One fault, with what it hits and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL coordinator `n`, then start it again on its address.
    KillCoordinator(usize),
    /// SIGKILL the store's leader (whichever coordinator it is then),
    /// then start it again.
    KillLeader,
    /// SIGKILL honest worker `n`, then start it again.
    KillWorker(usize),
    /// SIGSTOP coordinator `n` for this long (past its lease), then
    /// SIGCONT.
    Pause(usize, Duration),
    /// PostgreSQL stopped in immediate mode (as a crash) and started.
    RestartDatabase,
    /// Coordinator `n`'s connections to the database cut, and new ones
    /// refused, for this long.
    CutDatabase(usize, Duration),
    /// `pg_terminate_backend` on each of coordinator `n`'s sessions.
    TerminateSessions(usize),
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::KillCoordinator(n) => write!(f, "SIGKILL coordinator {n}"),
            Fault::KillLeader => write!(f, "SIGKILL the leader"),
            Fault::KillWorker(n) => write!(f, "SIGKILL worker {n}"),
            Fault::Pause(n, d) => write!(f, "SIGSTOP coordinator {n} for {d:?}"),
            Fault::RestartDatabase => write!(f, "PostgreSQL restarted in immediate mode"),
            Fault::CutDatabase(n, d) => {
                write!(f, "coordinator {n} cut from the database for {d:?}")
            }
            Fault::TerminateSessions(n) => {
                write!(f, "pg_terminate_backend on coordinator {n}'s sessions")
            }
        }
    }
}

/// A fault and the quiet time before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub after: Duration,
    pub fault: Fault,
}

/// The faults of a run of `length` from `seed`, for coordinators whose
/// window leases last `lease`: one every 0.5 to 2.5 s, paused past the
/// lease (1.5 to 3 leases), cut for 0.5 to 4 s.
pub fn schedule(seed: u64, length: Duration, lease: Duration) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let mut at = Duration::ZERO;
    loop {
        let after = Duration::from_millis(rng.random_range(500..2500));
        at += after;
        if at >= length {
            return steps;
        }
        let coordinator = rng.random_range(0..COORDINATORS);
        let fault = match rng.random_range(0..100) {
            0..20 => Fault::KillCoordinator(coordinator),
            20..28 => Fault::KillLeader,
            28..43 => Fault::KillWorker(rng.random_range(0..WORKERS)),
            43..58 => Fault::Pause(coordinator, lease.mul_f64(rng.random_range(1.5..3.0))),
            58..68 => Fault::RestartDatabase,
            68..85 => Fault::CutDatabase(
                coordinator,
                Duration::from_millis(rng.random_range(500..4000)),
            ),
            _ => Fault::TerminateSessions(coordinator),
        };
        steps.push(Step { after, fault });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_one_schedule_and_every_fault_class_comes_up() {
        let lease = Duration::from_secs(2);
        let length = Duration::from_secs(600);
        let a = schedule(7, length, lease);
        assert_eq!(a, schedule(7, length, lease));
        assert_ne!(a, schedule(8, length, lease));
        let total: Duration = a.iter().map(|s| s.after).sum();
        assert!(total < length);
        let class = |f: &Fault| std::mem::discriminant(f);
        let classes: std::collections::HashSet<_> = a.iter().map(|s| class(&s.fault)).collect();
        assert_eq!(classes.len(), 7, "{a:?}");
        for s in &a {
            if let Fault::Pause(_, d) = s.fault {
                assert!(d > lease, "{s:?} is not past the lease");
            }
        }
    }
}
