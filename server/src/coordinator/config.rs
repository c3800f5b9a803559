//! The coordinator's settings: every default, and the one place they are
//! checked ([`Config::validate`]). The binary's flags take their defaults
//! from [`Config::default`] and convert into a `Config`; nothing else
//! checks or clamps them.

use std::time::Duration;

use colball_proto::Secret;

use super::events;
#[cfg(test)]
use crate::app::{App, StartError};
use colball_core::policy::Credit;
use colball_core::{Limits, MAX_ATTEMPTS, Speculation};

/// Coordinator settings, in groups: the scheduling, access at the edge,
/// the job store and the webhooks. `Config::default()` suits one machine;
/// [`Config::validate`] checks every group.
#[derive(Clone, Debug)]
pub struct Config {
    /// How the scheduler shares its workers out.
    pub scheduling: SchedulingConfig,
    /// Who may call, and how much at once.
    pub access: AccessConfig,
    /// Where the jobs are kept, and their limits.
    pub store: StoreConfig,
    /// The jobs' webhooks: which URLs, signed how, tried how long.
    pub webhooks: crate::jobs::webhooks::WebhookConfig,
    /// Time for in-flight requests to finish after shutdown begins.
    pub drain_timeout: Duration,
}

/// The scheduler's settings: its limits, the workers' credit and
/// liveness, backups, audits, the result cache and the event log.
#[derive(Clone, Debug)]
pub struct SchedulingConfig {
    /// Most results admitted and not yet read by their clients, over all
    /// clients (queued, in flight, solved and unread).
    pub max_pending: usize,
    /// Most puzzles in one request.
    pub max_batch: usize,
    /// Results one request may leave unread before its remaining tasks
    /// wait for its client to read.
    pub max_unread: usize,
    /// Dispatches of one puzzle before it gets an error result.
    pub max_attempts: u32,
    /// Tasks a worker may hold per slot: 2 lets each solver thread have the
    /// next puzzle at hand while it solves one, so no thread idles for a
    /// network round trip; a slow worker still holds only twice its slots.
    pub credit_per_slot: u32,
    /// Most slots one worker may register.
    pub max_worker_slots: u32,
    /// Most tasks in one assignment message.
    pub max_chunk: usize,
    /// How often workers send heartbeats.
    pub heartbeat_interval: Duration,
    /// Heartbeat intervals of silence after which a worker is lost.
    pub missed_heartbeats: u32,
    /// Longest a worker may hold one task before it counts as stuck.
    pub task_timeout: Duration,
    /// How long a request waits for a first worker before UNAVAILABLE.
    pub worker_grace: Duration,
    /// How long a worker whose answer failed the check may not register
    /// again.
    pub quarantine: Duration,
    /// Fraction of answers re-solved on another worker to catch answers
    /// that replay but are not optimal (0: none; 1: every puzzle twice).
    pub audit_rate: f64,
    /// Backup copies of overdue tasks, and slow and stuck workers: see
    /// [`Speculation`].
    pub speculation: Speculation,
    /// Entries of the result cache (0 turns it off).
    pub cache_capacity: usize,
    /// Cluster events kept for watchers that resume from a sequence number.
    pub events_retained: usize,
}

/// Access at the edge (see [`crate::access`]): tokens, TLS and each
/// client's requests in flight.
#[derive(Clone, Debug, Default)]
pub struct AccessConfig {
    /// The token clients must send (`Solver`), named `default`; `None`
    /// (and no tokens file): anyone may call.
    pub client_token: Option<Secret>,
    /// A file of `name token` lines: more client tokens, each naming its
    /// client for fair sharing and limits. Read again on SIGHUP
    /// ([`crate::access::Access::reload_tokens`]).
    pub client_tokens_file: Option<std::path::PathBuf>,
    /// Per-client quotas (see [`crate::jobs::quotas`]), read again on
    /// SIGHUP.
    pub client_quotas_file: Option<std::path::PathBuf>,
    /// The token workers must send (`Workers`); `None`: anyone may join.
    pub worker_token: Option<Secret>,
    /// TLS for the gRPC port; `None`: plaintext.
    pub tls: Option<tonic::transport::ServerTlsConfig>,
    /// Most requests (batches or single puzzles) in flight per client
    /// (0: no limit; `--max-batches-per-client`); see
    /// [`crate::access::per_client`].
    pub max_requests_per_client: usize,
}

/// The job store: where it lives, how much it may hold, and how long.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Where the job store lives (`None`: in memory, lost on restart).
    pub data_dir: Option<std::path::PathBuf>,
    /// A PostgreSQL job store's URL (`--store`), instead of `data_dir`.
    pub url: Option<Secret>,
    /// Its password (`--store-password-file`), before the URL's and
    /// `PGPASSWORD`.
    pub password: Option<Secret>,
    /// Most bytes the job store may take before `Submit` is refused
    /// (`None`: no limit).
    pub max_bytes: Option<u64>,
    /// Most puzzles in one job.
    pub max_job_puzzles: usize,
    /// Finished jobs are deleted this long after they finished.
    pub job_retention: Duration,
    /// On a store several coordinators share: how long a claim on a
    /// job's window lasts unless its coordinator renews it (every second
    /// while it lives); another takes the window over once it runs out.
    pub job_lease: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            scheduling: SchedulingConfig::default(),
            access: AccessConfig {
                max_requests_per_client: 64,
                ..AccessConfig::default()
            },
            store: StoreConfig::default(),
            webhooks: crate::jobs::webhooks::WebhookConfig::default(),
            drain_timeout: Duration::from_secs(10),
        }
    }
}

impl Default for SchedulingConfig {
    fn default() -> SchedulingConfig {
        SchedulingConfig {
            max_pending: 1_000_000,
            max_batch: 200_000,
            max_unread: 16_384,
            max_attempts: 3,
            credit_per_slot: 2,
            max_worker_slots: 256,
            max_chunk: 1024,
            heartbeat_interval: Duration::from_secs(1),
            missed_heartbeats: 3,
            task_timeout: Duration::from_secs(30),
            worker_grace: Duration::from_secs(10),
            quarantine: Duration::from_secs(600),
            audit_rate: 0.01,
            speculation: Speculation::default(),
            cache_capacity: 1_000_000,
            events_retained: events::DEFAULT_RETAINED,
        }
    }
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            data_dir: None,
            url: None,
            password: None,
            max_bytes: None,
            max_job_puzzles: 10_000_000,
            job_retention: Duration::from_secs(168 * 3600),
            job_lease: Duration::from_secs(10),
        }
    }
}

/// A setting out of its range: what is wrong, naming the setting (and the
/// command-line flag that sets it).
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub field: &'static str,
    /// The flag of `colball-server coordinator` ("" for a setting that has
    /// none).
    pub flag: &'static str,
    pub problem: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.flag.is_empty() {
            write!(f, "Config::{}: {}", self.field, self.problem)
        } else {
            write!(
                f,
                "{} (Config::{}): {}",
                self.flag, self.field, self.problem
            )
        }
    }
}

impl Config {
    /// Checks every setting's range; the one place the coordinator's
    /// settings are checked (the binary only converts its flags).
    /// [`crate::app::App::start`] refuses a config that fails.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (sc, st) = (&self.scheduling, &self.store);
        let bad = |field, flag, problem: String| {
            Err(ConfigError {
                field,
                flag,
                problem,
            })
        };
        let at_least_one = [
            (sc.max_batch, "scheduling.max_batch", "--max-batch"),
            (sc.max_pending, "scheduling.max_pending", "--max-pending"),
            (sc.max_unread, "scheduling.max_unread", "--max-unread"),
            (sc.max_chunk, "scheduling.max_chunk", ""),
            (
                st.max_job_puzzles,
                "store.max_job_puzzles",
                "--max-job-puzzles",
            ),
            (
                sc.credit_per_slot as usize,
                "scheduling.credit_per_slot",
                "",
            ),
            (
                sc.max_worker_slots as usize,
                "scheduling.max_worker_slots",
                "--max-worker-slots",
            ),
            (
                sc.missed_heartbeats as usize,
                "scheduling.missed_heartbeats",
                "",
            ),
            (
                sc.events_retained,
                "scheduling.events_retained",
                "--events-retained",
            ),
        ];
        for (value, field, flag) in at_least_one {
            if value == 0 {
                return bad(field, flag, "must be at least 1, not 0".into());
            }
        }
        if sc.max_batch > colball_proto::ingest::MAX_PUZZLES {
            return bad(
                "scheduling.max_batch",
                "--max-batch",
                format!(
                    "must be at most {} (a request keeps no more), not {}",
                    colball_proto::ingest::MAX_PUZZLES,
                    sc.max_batch
                ),
            );
        }
        if st.max_job_puzzles > u32::MAX as usize {
            return bad(
                "store.max_job_puzzles",
                "--max-job-puzzles",
                format!(
                    "must be at most {} (a pending task keeps its index in 32 bits), not {}",
                    u32::MAX,
                    st.max_job_puzzles
                ),
            );
        }
        if !(1..=MAX_ATTEMPTS).contains(&sc.max_attempts) {
            return bad(
                "scheduling.max_attempts",
                "--max-attempts",
                format!("must be 1 to {}, not {}", MAX_ATTEMPTS, sc.max_attempts),
            );
        }
        if sc.heartbeat_interval < Duration::from_millis(10) {
            return bad(
                "scheduling.heartbeat_interval",
                "--heartbeat-ms",
                format!(
                    "must be at least 10 ms, not {} ms",
                    sc.heartbeat_interval.as_millis()
                ),
            );
        }
        if !self.webhooks.allow.is_empty() && self.webhooks.secret.is_none() {
            return bad(
                "webhooks.secret",
                "--webhook-secret-file",
                "is needed with --webhook-allow: every webhook call is signed".into(),
            );
        }
        if self.webhooks.retry_for.is_zero() {
            return bad(
                "webhooks.retry_for",
                "--webhook-retry-hours",
                "must be more than 0".into(),
            );
        }
        if sc.task_timeout.is_zero() {
            return bad(
                "scheduling.task_timeout",
                "--task-timeout-secs",
                "must be more than 0".into(),
            );
        }
        let sp = &sc.speculation;
        if !(sp.after == 0.0 || (1.0..=1000.0).contains(&sp.after)) {
            return bad(
                "scheduling.speculation.after",
                "--backup-after",
                format!(
                    "must be 0 (no backups) or between 1 and 1000, not {}",
                    sp.after
                ),
            );
        }
        if !(0.0..=1.0).contains(&sp.budget) {
            return bad(
                "scheduling.speculation.budget",
                "--backup-budget",
                format!("must be between 0 and 1, not {}", sp.budget),
            );
        }
        if !(1.0..=1000.0).contains(&sp.slow_after) {
            return bad(
                "scheduling.speculation.slow_after",
                "--slow-after",
                format!("must be between 1 and 1000, not {}", sp.slow_after),
            );
        }
        if !(1.0..=100_000.0).contains(&sp.stuck_after) {
            return bad(
                "scheduling.speculation.stuck_after",
                "--stuck-after",
                format!("must be between 1 and 100000, not {}", sp.stuck_after),
            );
        }
        if !(Duration::from_secs(2)..=Duration::from_secs(3600)).contains(&st.job_lease) {
            return bad(
                "store.job_lease",
                "--job-lease-secs",
                format!(
                    "must be 2 to 3600 seconds (it is renewed every second), not {}",
                    st.job_lease.as_secs_f64()
                ),
            );
        }
        if sp.stuck_min.is_zero() {
            return bad(
                "scheduling.speculation.stuck_min",
                "--stuck-min-secs",
                "must be more than 0".into(),
            );
        }
        if !(0.0..=1.0).contains(&sc.audit_rate) {
            return bad(
                "scheduling.audit_rate",
                "--audit-rate",
                format!("must be between 0 and 1, not {}", sc.audit_rate),
            );
        }
        Ok(())
    }
}

impl SchedulingConfig {
    /// The state machine's limits (from a validated config).
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_pending: self.max_pending,
            max_attempts: self.max_attempts,
            credit: Credit::new(self.credit_per_slot),
            max_chunk: self.max_chunk,
            max_unread: self.max_unread,
            max_worker_slots: self.max_worker_slots,
            task_timeout: self.task_timeout,
            silence_timeout: self.heartbeat_interval * self.missed_heartbeats,
            worker_grace: self.worker_grace,
            quarantine: self.quarantine,
            audit_rate: self.audit_rate,
            max_audits: 10_000,
            cache_results: self.cache_capacity > 0,
            speculation: self.speculation.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;

    use super::*;

    #[test]
    fn a_config_is_checked_in_one_place_naming_what_is_wrong() {
        assert!(Config::default().validate().is_ok());
        type Spoil = fn(&mut Config);
        let cases: [(Spoil, &str); 14] = [
            (|c| c.scheduling.max_attempts = 0, "--max-attempts"),
            (
                |c| c.store.max_job_puzzles = u32::MAX as usize + 1,
                "--max-job-puzzles",
            ),
            (|c| c.scheduling.max_attempts = 70_000, "--max-attempts"),
            (|c| c.scheduling.max_batch = 0, "--max-batch"),
            (|c| c.scheduling.max_batch = 1_000_001, "--max-batch"),
            (|c| c.scheduling.max_unread = 0, "--max-unread"),
            (|c| c.scheduling.audit_rate = f64::NAN, "--audit-rate"),
            (
                |c| c.scheduling.heartbeat_interval = Duration::from_millis(1),
                "--heartbeat-ms",
            ),
            (
                |c| c.scheduling.credit_per_slot = 0,
                "Config::scheduling.credit_per_slot",
            ),
            (|c| c.scheduling.speculation.after = 0.5, "--backup-after"),
            (
                |c| c.scheduling.speculation.budget = f64::NAN,
                "--backup-budget",
            ),
            (
                |c| c.scheduling.speculation.slow_after = 0.0,
                "--slow-after",
            ),
            (
                |c| c.scheduling.speculation.stuck_after = f64::INFINITY,
                "--stuck-after",
            ),
            (
                |c| c.scheduling.speculation.stuck_min = Duration::ZERO,
                "--stuck-min-secs",
            ),
        ];
        for (spoil, named) in cases {
            let mut config = Config::default();
            spoil(&mut config);
            let e = config.validate().expect_err(named).to_string();
            assert!(e.contains(named), "{e}");
        }
        // The coordinator refuses to start on one.
        let mut config = Config::default();
        config.scheduling.max_attempts = 0;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let refused = runtime
            .block_on(App::start(config, CancellationToken::new()))
            .map(drop);
        assert!(matches!(refused, Err(StartError::Config(_))));
    }

    #[test]
    fn a_worker_config_is_checked_before_dialling() {
        let mut config = crate::worker::WorkerConfig::new("http://127.0.0.1:1");
        assert!(config.validate().is_ok());
        config.backoff_initial = config.backoff_max * 2;
        assert!(config.validate().is_err());
        config = crate::worker::WorkerConfig::new("http://127.0.0.1:1");
        config.name = " ".into();
        let e = config.validate().unwrap_err().to_string();
        assert!(e.contains("--name"), "{e}");
    }
}
