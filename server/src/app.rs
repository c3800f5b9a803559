//! The coordinator's parts, as its two APIs serve them: the scheduler's
//! driver ([`Scheduler`]), the jobs subsystem ([`Jobs`]) over its store,
//! access at the edge ([`Access`]) and the service's [`Lifecycle`].
//! [`crate::grpc::serve`] and [`crate::http::run`] both take an [`App`].

use std::sync::Arc;
use std::time::Duration;

use colball_proto::Secret;
use tokio_util::sync::CancellationToken;

use crate::access::Access;
use crate::auth::TokenFileError;
use crate::coordinator::{Config, ConfigError, Scheduler};
use crate::jobs::quotas::{QuotaFileError, Quotas};
use crate::jobs::{Jobs, StoreError, store};
use crate::lifecycle::Lifecycle;

/// Why the coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokens(#[from] TokenFileError),
    #[error("client quotas: {0}")]
    Quotas(#[from] QuotaFileError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct App {
    pub scheduler: Arc<Scheduler>,
    pub jobs: Arc<Jobs>,
    pub access: Arc<Access>,
    pub lifecycle: Lifecycle,
    /// Time for in-flight requests to finish after shutdown begins.
    pub drain_timeout: Duration,
}

impl App {
    /// Checks `config`, reads the client tokens and quotas, opens the job
    /// store (PostgreSQL with `--store`, SQLite on disk with `--data-dir`,
    /// else in memory) and starts the jobs (taking up unfinished ones).
    pub async fn start(config: Config, shutdown: CancellationToken) -> Result<App, StartError> {
        config.validate()?;
        let access = Arc::new(Access::new(&config.access)?);
        let quotas = Quotas::new(config.access.client_quotas_file.clone())?;
        let place = store::Place {
            url: config.store.url.as_ref().map(Secret::expose_str),
            password: config.store.password.as_ref().map(Secret::expose_str),
            data_dir: config.store.data_dir.as_deref(),
        };
        let store = store::open(place, config.store.max_bytes).await?;
        let lifecycle = Lifecycle::new(shutdown);
        let scheduler = Scheduler::new(config.scheduling, lifecycle.clone());
        let jobs = Jobs::start(
            scheduler.clone(),
            store,
            &config.store,
            config.webhooks,
            quotas,
        );
        Ok(App {
            scheduler,
            jobs,
            access,
            lifecycle,
            drain_timeout: config.drain_timeout,
        })
    }
}
