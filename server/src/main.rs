//! `colball-server`: the colball cluster's coordinator and worker.
//!
//! Thin on purpose: parses flags into the library's `Config` structs, sets
//! up tracing and the shutdown signal, binds listeners and calls `run`.

/// mimalloc: the data path allocates and frees small buffers per puzzle
/// (messages, ids, move lists) from several threads, where it is faster
/// than the system allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use colball_proto::Secret;
use colball_server::jobs::webhooks::allow::Pattern;
use colball_server::jobs::webhooks::{WebhookConfig, WebhookSecret};
use colball_server::telemetry::{self, LogFormat};
use colball_server::{coordinator, http, shutdown, worker};
use tokio::net::TcpListener;

/// The colball solving cluster: one coordinator, any number of workers.
///
/// Clients (`colball solve --connect URL`) talk to the coordinator; workers
/// dial the coordinator too, so both can sit behind a load balancer or a
/// Kubernetes Service. Logs go to standard error; filter them with RUST_LOG
/// (for example RUST_LOG=debug or RUST_LOG=colball_server=debug).
#[derive(Parser, Debug)]
#[command(name = "colball-server", version, about, long_about)]
struct Cli {
    /// Log line format: `text` for people, `json` for log collectors.
    #[arg(long, value_enum, default_value_t = LogFormatArg::Text, global = true)]
    log_format: LogFormatArg,
    /// Parse the command line, print `ok` and exit: lets the deployment
    /// tests check every command line in deploy/ against the real flags.
    #[arg(long, global = true, hide = true)]
    check_args: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the coordinator: serves clients and hands their puzzles to workers.
    Coordinator(Box<CoordinatorArgs>),
    /// Run a worker: dials the coordinator and solves what it is given.
    Worker(WorkerArgs),
}

#[derive(Args, Debug)]
struct CoordinatorArgs {
    /// Address for gRPC (clients and workers). Port 0 picks a free port;
    /// the bound address is printed on standard output as `listening ADDR`.
    #[arg(long, default_value = "127.0.0.1:50051", env = "COLBALL_LISTEN")]
    listen: SocketAddr,
    /// Address for the plain-HTTP endpoint: /healthz, /readyz, /metrics.
    /// Off unless given.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// Most puzzles admitted and not yet answered, over all clients; a
    /// request over the limit gets RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = defaults().scheduling.max_pending)]
    max_pending: usize,
    /// Most puzzles in one request; a larger one gets RESOURCE_EXHAUSTED.
    #[arg(long, default_value_t = defaults().scheduling.max_batch)]
    max_batch: usize,
    /// Most requests in flight from one client, counted per IP address (all
    /// clients behind one proxy or NAT share it); one more gets
    /// RESOURCE_EXHAUSTED. 0: no limit.
    #[arg(long, default_value_t = defaults().access.max_requests_per_client)]
    max_batches_per_client: usize,
    /// Times one puzzle is dispatched (after lost workers) before it gets an
    /// error result (1 to 65535).
    #[arg(long, default_value_t = defaults().scheduling.max_attempts)]
    max_attempts: u32,
    /// How often workers must send a heartbeat, in milliseconds; a worker
    /// silent for three intervals is declared lost and its puzzles go to
    /// other workers.
    #[arg(long, default_value_t = defaults().scheduling.heartbeat_interval.as_millis() as u64)]
    heartbeat_ms: u64,
    /// How long a request waits for a first worker before UNAVAILABLE, in
    /// seconds.
    #[arg(long, default_value_t = defaults().scheduling.worker_grace.as_secs_f64())]
    worker_grace_secs: f64,
    /// Entries of the result cache (a puzzle solved before is answered
    /// without dispatch); 0 turns it off.
    #[arg(long, default_value_t = defaults().scheduling.cache_capacity)]
    cache_entries: usize,
    /// Cluster events kept in memory for watchers that resume from a
    /// sequence number (`colball watch`, the dashboard); about 200 bytes
    /// each once results fill them.
    #[arg(long, default_value_t = defaults().scheduling.events_retained)]
    events_retained: usize,
    /// Require this token from clients (`colball solve --token`); calls
    /// without it get UNAUTHENTICATED. Off unless given. Prefer the file or
    /// the environment variable: command lines are visible to other users.
    #[arg(
        long,
        env = "COLBALL_CLIENT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    client_token: Option<String>,
    /// Read the client token from a file (surrounding whitespace is dropped).
    #[arg(long, value_name = "FILE", conflicts_with = "client_token")]
    client_token_file: Option<PathBuf>,
    /// Keep durable jobs (their puzzles and results) in a SQLite database
    /// in this directory, so they survive restarts. Without it jobs live
    /// in memory and are lost when the coordinator stops.
    #[arg(long, value_name = "DIR", env = "COLBALL_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Keep durable jobs in PostgreSQL instead:
    /// postgres://USER[:PASSWORD]@HOST:PORT/DB (the password, if not in
    /// the URL, from PGPASSWORD). Never logged. ?sslmode=require for TLS,
    /// the server verified against PGSSLROOTCERT (a PEM file) or the web's
    /// roots. Any number of
    /// coordinators may share the database: each runs every job's
    /// windows it claims, and serves every job.
    #[arg(
        long,
        value_name = "URL",
        env = "COLBALL_STORE",
        hide_env_values = true,
        conflicts_with = "data_dir"
    )]
    store: Option<String>,
    /// The --store database's password, from this file (before the URL's
    /// and PGPASSWORD): a password kept out of the process's arguments and
    /// environment.
    #[arg(
        long,
        value_name = "FILE",
        env = "COLBALL_STORE_PASSWORD_FILE",
        requires = "store"
    )]
    store_password_file: Option<PathBuf>,
    /// Most puzzles in one job (at most 4,294,967,295).
    #[arg(long, default_value_t = defaults().store.max_job_puzzles)]
    max_job_puzzles: usize,
    /// Finished jobs (done, cancelled, failed) are deleted this long after
    /// they finished.
    #[arg(long, default_value_t = defaults().store.job_retention.as_secs_f64() / 3600.0)]
    job_retention_hours: f64,
    /// With --store, shared by several coordinators: how long a
    /// coordinator's claim on a window of a job's puzzles lasts unless it
    /// renews it (it does every second while it lives). When a coordinator
    /// dies, the others take its windows over once this runs out.
    #[arg(long, default_value_t = defaults().store.job_lease.as_secs_f64())]
    job_lease_secs: f64,
    /// Refuse new jobs (RESOURCE_EXHAUSTED) once the job store's data
    /// takes this many MiB; the database may not grow past twice this, and
    /// a job whose results do not fit fails, saying so (default: no
    /// limit).
    #[arg(long, value_name = "MIB")]
    max_store_mib: Option<u64>,
    /// Named client tokens: a file of `NAME TOKEN` lines (blank lines and
    /// `#` comments skipped). Each name is a client for fair sharing and
    /// per-client limits. Read again on SIGHUP; may be combined with
    /// --client-token (named `default`).
    #[arg(long, value_name = "FILE")]
    client_tokens_file: Option<PathBuf>,
    /// Per-client quotas: a file of `CLIENT QUOTA=VALUE...` lines
    /// (`queued-puzzles`, `stored-mib`, `submissions-per-minute`; `*` for
    /// every client not named). A submission over one is refused
    /// (RESOURCE_EXHAUSTED, HTTP 429 with Retry-After) naming it. Read
    /// again on SIGHUP.
    #[arg(long, env = "COLBALL_CLIENT_QUOTAS_FILE", value_name = "FILE")]
    client_quotas_file: Option<PathBuf>,
    /// URLs that jobs may name as webhooks (repeatable, or comma-separated):
    /// `SCHEME://HOST[:PORT][/PATH]`, the host a name, `*.DOMAIN` or an IP
    /// address, the port a number or `*`, the path a prefix when it ends
    /// with `*` (`https://hooks.example.com/*`, `http://127.0.0.1:*`).
    /// Loopback and private addresses are called only under a pattern
    /// naming one. None: webhooks are off. Needs --webhook-secret-file.
    #[arg(
        long,
        value_name = "PATTERN",
        env = "COLBALL_WEBHOOK_ALLOW",
        value_delimiter = ','
    )]
    webhook_allow: Vec<String>,
    /// The secret webhook calls are signed with (Standard Webhooks):
    /// a file holding `whsec_` and the base64 of 24 to 64 random bytes.
    #[arg(long, value_name = "FILE", env = "COLBALL_WEBHOOK_SECRET_FILE")]
    webhook_secret_file: Option<PathBuf>,
    /// A webhook call that fails is tried again, ever further apart (1 s,
    /// 2 s, 4 s ... at most an hour), for this long after its job
    /// finished.
    #[arg(long, default_value_t = defaults().webhooks.retry_for.as_secs_f64() / 3600.0)]
    webhook_retry_hours: f64,
    /// The HTTP API's address as others reach it (`https://colball.example.com`),
    /// for the results URL in webhook calls; default: http:// and the
    /// --http address, unless that is 0.0.0.0 or [::].
    #[arg(long, value_name = "URL", env = "COLBALL_PUBLIC_URL")]
    public_url: Option<String>,
    /// Results one request may leave unread before its remaining puzzles
    /// wait for its client to read.
    #[arg(long, default_value_t = defaults().scheduling.max_unread)]
    max_unread: usize,
    /// Most solver slots one worker may register.
    #[arg(long, default_value_t = defaults().scheduling.max_worker_slots)]
    max_worker_slots: u32,
    /// A worker holding one task longer than this is stuck: it is dropped
    /// and its tasks go to others.
    #[arg(long, default_value_t = defaults().scheduling.task_timeout.as_secs_f64())]
    task_timeout_secs: f64,
    /// How long a worker whose answer failed the check may not register
    /// again.
    #[arg(long, default_value_t = defaults().scheduling.quarantine.as_secs_f64())]
    quarantine_secs: f64,
    /// Fraction of answers re-solved on another worker to catch answers
    /// that are valid but not optimal (0: none; 1: every puzzle twice, the
    /// setting for workers nobody vouches for).
    #[arg(long, default_value_t = defaults().scheduling.audit_rate)]
    audit_rate: f64,
    /// Start a backup copy of a task on another worker (when nothing
    /// eligible is queued and one has free credit) once it is held this
    /// many times its board size's expected solve time (the p90 of recent
    /// verified answers); the first verified answer wins. 0: no backups.
    #[arg(long, default_value_t = defaults().scheduling.speculation.after)]
    backup_after: f64,
    /// Backups started in a minute stay under this fraction of the answers
    /// verified in it (at least 10 a minute are allowed).
    #[arg(long, default_value_t = defaults().scheduling.speculation.budget)]
    backup_budget: f64,
    /// A worker is marked slow (dashboard, events) while every task it
    /// holds is past this many times its expected solve time.
    #[arg(long, default_value_t = defaults().scheduling.speculation.slow_after)]
    slow_after: f64,
    /// A worker that answers nothing for this many times the expected
    /// solve time of what it holds (and at least --stuck-min-secs), while
    /// others answer, is stuck: dropped, its tasks go to others. Sizes
    /// never seen are left to --task-timeout-secs.
    #[arg(long, default_value_t = defaults().scheduling.speculation.stuck_after)]
    stuck_after: f64,
    /// The least time a worker must answer nothing before it is stuck
    /// (see --stuck-after), in seconds.
    #[arg(long, default_value_t = defaults().scheduling.speculation.stuck_min.as_secs_f64())]
    stuck_min_secs: f64,
    /// Require this token from workers (`colball-server worker --token`);
    /// without it a process cannot register as a worker. Off unless given.
    #[arg(
        long,
        env = "COLBALL_WORKER_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    worker_token: Option<String>,
    /// Read the worker token from a file (surrounding whitespace is dropped).
    #[arg(long, value_name = "FILE", conflicts_with = "worker_token")]
    worker_token_file: Option<PathBuf>,
    /// Serve gRPC over TLS with this certificate chain (PEM); needs
    /// --tls-key. Clients and workers then dial https:// (with --ca for a private CA).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

/// How a worker or client proves itself and checks the coordinator.
#[derive(Args, Debug)]
struct WorkerSecurity {
    /// The coordinator's worker token (its --worker-token). A missing or
    /// wrong token is a final refusal: the worker exits non-zero.
    #[arg(
        long,
        env = "COLBALL_WORKER_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// Read the worker token from a file (surrounding whitespace is dropped).
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    token_file: Option<PathBuf>,
    /// Also trust this private CA certificate (PEM) for an https://
    /// coordinator URL; the public certificate authorities are trusted
    /// without it.
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// The name to check in the coordinator's certificate instead of the
    /// URL's host.
    #[arg(long, value_name = "NAME")]
    tls_domain: Option<String>,
}

#[derive(Args, Debug)]
struct WorkerArgs {
    /// The coordinator's URL, or several, comma-separated (coordinators
    /// sharing one --store): when its session breaks the worker dials the
    /// next. Connection failures are retried with backoff.
    #[arg(
        long,
        default_value = "http://127.0.0.1:50051",
        env = "COLBALL_COORDINATOR"
    )]
    coordinator: String,
    /// Solver threads, which are also the puzzles solved at once (the
    /// worker's slots). Default: all cores.
    #[arg(long, short = 'j', value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Name shown in logs and results. Default: HOSTNAME-PID.
    #[arg(long)]
    name: Option<String>,
    /// On SIGTERM or Ctrl-C the worker finishes and reports what it holds;
    /// after this many seconds it leaves anyway.
    #[arg(long, default_value_t = worker_defaults().drain_timeout.as_secs_f64())]
    drain_secs: f64,
    /// How to solve: `auto` answers repeats from the shared cache, builds a
    /// distance table for targets that enough assigned puzzles share, and
    /// uses the bidirectional search otherwise; or `bidir`, `idastar`, `table`.
    #[arg(long, default_value = "auto", value_parser = strategy_parser())]
    strategy: colball_solver::Strategy,
    /// Most solved puzzles the worker's threads remember (0: no cache).
    #[arg(long, default_value_t = worker_defaults().cache_capacity)]
    cache_entries: usize,
    /// Most MiB of distance tables the worker keeps (a 4x4 table is 15.6 MiB).
    #[arg(long, default_value_t = worker_defaults().table_bytes >> 20)]
    table_mib: usize,
    /// Protocol version to register with (testing only).
    #[arg(long, hide = true)]
    protocol_version: Option<u32>,
    #[command(flatten)]
    security: WorkerSecurity,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.check_args {
        println!("ok");
        return ExitCode::SUCCESS;
    }
    // A worker's async side only speaks the protocol (its solver threads
    // do the searching), so it runs on one thread: a task or a result then
    // crosses no thread but the solver's, where a pool of runtime threads
    // woke one another for every message.
    // The coordinator serves many connections and uses every core.
    let built = match cli.command {
        Command::Worker(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        Command::Coordinator(_) => tokio::runtime::Runtime::new(),
    };
    let runtime = match built {
        Ok(r) => r,
        Err(e) => {
            eprintln!("colball-server: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let format = match cli.log_format {
        LogFormatArg::Text => LogFormat::Text,
        LogFormatArg::Json => LogFormat::Json,
    };
    let service = match cli.command {
        Command::Coordinator(_) => "colball-coordinator",
        Command::Worker(_) => "colball-worker",
    };
    let export = match telemetry::init(service, Some(format)) {
        Ok(export) => export,
        Err(e) => {
            eprintln!("colball-server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Coordinator(args) => run_coordinator(*args).await,
            Command::Worker(args) => run_worker(args).await,
        }
    });
    // The last spans go out (this waits for them).
    export.finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("colball-server: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The library's defaults are the flags' defaults: one place for each.
fn defaults() -> coordinator::Config {
    coordinator::Config::default()
}

fn worker_defaults() -> worker::WorkerConfig {
    worker::WorkerConfig::new("")
}

/// A flag's seconds as a duration (a negative or non-finite number is an
/// error naming the flag).
fn secs(flag: &str, s: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s).map_err(|e| anyhow::anyhow!("{flag}: bad duration {s}: {e}"))
}

/// The binary only converts its flags; the library checks the result
/// ([`coordinator::Config::validate`], when the coordinator starts).
fn coordinator_config(args: &CoordinatorArgs) -> anyhow::Result<coordinator::Config> {
    let scheduling = defaults().scheduling;
    Ok(coordinator::Config {
        scheduling: coordinator::SchedulingConfig {
            max_pending: args.max_pending,
            max_batch: args.max_batch,
            max_attempts: args.max_attempts,
            heartbeat_interval: Duration::from_millis(args.heartbeat_ms),
            worker_grace: secs("--worker-grace-secs", args.worker_grace_secs)?,
            cache_capacity: args.cache_entries,
            events_retained: args.events_retained,
            max_unread: args.max_unread,
            max_worker_slots: args.max_worker_slots,
            task_timeout: secs("--task-timeout-secs", args.task_timeout_secs)?,
            quarantine: secs("--quarantine-secs", args.quarantine_secs)?,
            audit_rate: args.audit_rate,
            speculation: colball_core::Speculation {
                after: args.backup_after,
                budget: args.backup_budget,
                slow_after: args.slow_after,
                stuck_after: args.stuck_after,
                stuck_min: secs("--stuck-min-secs", args.stuck_min_secs)?,
                ..scheduling.speculation
            },
            ..scheduling
        },
        access: coordinator::AccessConfig {
            client_token: Secret::from_sources(
                args.client_token.as_deref(),
                args.client_token_file.as_deref(),
                "--client-token (or COLBALL_CLIENT_TOKEN)",
            )?,
            client_tokens_file: args.client_tokens_file.clone(),
            client_quotas_file: args.client_quotas_file.clone(),
            worker_token: Secret::from_sources(
                args.worker_token.as_deref(),
                args.worker_token_file.as_deref(),
                "--worker-token (or COLBALL_WORKER_TOKEN)",
            )?,
            tls: match (&args.tls_cert, &args.tls_key) {
                (Some(cert), Some(key)) => Some(colball_proto::tls::server_config(cert, key)?),
                _ => None,
            },
            max_requests_per_client: args.max_batches_per_client,
        },
        store: coordinator::StoreConfig {
            data_dir: args.data_dir.clone(),
            url: args
                .store
                .as_deref()
                .map(|url| Secret::new(url, "--store (or COLBALL_STORE)"))
                .transpose()?,
            password: Secret::from_sources(
                None,
                args.store_password_file.as_deref(),
                "--store-password-file",
            )?,
            max_bytes: args.max_store_mib.map(|m| m.saturating_mul(1 << 20)),
            max_job_puzzles: args.max_job_puzzles,
            job_retention: secs("--job-retention-hours", args.job_retention_hours * 3600.0)?,
            job_lease: secs("--job-lease-secs", args.job_lease_secs)?,
        },
        webhooks: webhook_config(args)?,
        ..defaults()
    })
}

/// The webhook flags, read and checked.
fn webhook_config(args: &CoordinatorArgs) -> anyhow::Result<WebhookConfig> {
    let allow = args
        .webhook_allow
        .iter()
        .filter(|p| !p.trim().is_empty())
        .map(|p| Pattern::parse(p.trim()).map_err(|e| anyhow::anyhow!("--webhook-allow: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let secret = args
        .webhook_secret_file
        .as_deref()
        .map(WebhookSecret::read)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--webhook-secret-file {e}"))?;
    if let Some(url) = &args.public_url {
        let uri: axum::http::Uri = url
            .parse()
            .map_err(|e| anyhow::anyhow!("--public-url {url:?}: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            anyhow::bail!("--public-url {url:?}: expected http:// or https:// and a host");
        }
    }
    Ok(WebhookConfig {
        allow,
        secret,
        retry_for: secs("--webhook-retry-hours", args.webhook_retry_hours * 3600.0)?,
        public_url: args.public_url.clone(),
    })
}

async fn run_coordinator(args: CoordinatorArgs) -> anyhow::Result<()> {
    let mut config = coordinator_config(&args)?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr()?;
    let http_listener = match args.http {
        Some(http_addr) => Some(
            TcpListener::bind(http_addr)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {http_addr}: {e}"))?,
        ),
        None => None,
    };
    if let Some(http) = &http_listener {
        let bound = http.local_addr()?;
        if config.webhooks.public_url.is_none() && !bound.ip().is_unspecified() {
            config.webhooks.public_url = Some(format!("http://{bound}"));
        }
    }
    let shutdown = shutdown::on_signal();
    let app = colball_server::app::App::start(config, shutdown.clone()).await?;
    reload_on_sighup(app.clone());
    if let Some(http_listener) = http_listener {
        println!("http {}", http_listener.local_addr()?);
        tokio::spawn(http::run(http_listener, app.clone(), shutdown.clone()));
    }
    // Tests and scripts read the bound address from here.
    println!("listening {addr}");
    colball_server::grpc::serve(listener, app, shutdown).await?;
    Ok(())
}

/// Reads the client tokens and quotas files again on each SIGHUP; a bad
/// file is reported and what was in force stays.
fn reload_on_sighup(app: colball_server::app::App) {
    #[cfg(unix)]
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("cannot listen for SIGHUP; client tokens will not be reloaded");
            return;
        };
        while hup.recv().await.is_some() {
            match app.access.reload_tokens() {
                Ok(n) => tracing::info!(tokens = n, "client tokens reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "client tokens not reloaded; the old ones stay")
                }
            }
            match app.jobs.quotas().reload() {
                Ok(n) => tracing::info!(lines = n, "client quotas reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "client quotas not reloaded; the old ones stay")
                }
            }
        }
    });
    #[cfg(not(unix))]
    let _ = app;
}

fn worker_config(args: WorkerArgs) -> anyhow::Result<worker::WorkerConfig> {
    let mut config = worker::WorkerConfig::new(args.coordinator);
    if let Some(threads) = args.threads {
        config.threads = usize::from(threads);
    }
    if let Some(name) = args.name {
        config.name = name;
    }
    if let Some(v) = args.protocol_version {
        config.protocol_version = v;
    }
    config.strategy = args.strategy;
    config.cache_capacity = args.cache_entries;
    config.table_bytes = args.table_mib.saturating_mul(1 << 20);
    config.drain_timeout = secs("--drain-secs", args.drain_secs)?;
    let security = args.security;
    config.token = Secret::from_sources(
        security.token.as_deref(),
        security.token_file.as_deref(),
        "--token (or COLBALL_WORKER_TOKEN)",
    )?;
    if security.ca.is_some() || security.tls_domain.is_some() {
        config.tls = Some(colball_proto::tls::client_config(
            security.ca.as_deref(),
            security.tls_domain.as_deref(),
        )?);
    }
    Ok(config)
}

async fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    worker::run(worker_config(args)?, shutdown::on_signal()).await?;
    Ok(())
}

/// `--strategy`: one of the strategies' names, listed in `--help`.
fn strategy_parser() -> impl clap::builder::TypedValueParser<Value = colball_solver::Strategy> {
    use clap::builder::TypedValueParser;
    use colball_solver::Strategy;
    clap::builder::PossibleValuesParser::new(Strategy::ALL.map(Strategy::name)).map(|name| {
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_default()
    })
}
