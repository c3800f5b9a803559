//! The coordinator's parts, as its two APIs serve them: the scheduler's
//! driver ([`Shared`]) and the jobs subsystem ([`Jobs`]) over its store.
//! [`crate::grpc::serve`] and [`crate::http::run`] both take an [`App`].

use std::sync::Arc;

use colball_proto::Secret;
use tokio_util::sync::CancellationToken;

use crate::coordinator::{Config, SetupError, Shared};
use crate::jobs::{Jobs, StoreError, store};

/// Why the coordinator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct App {
    pub scheduler: Arc<Shared>,
    pub jobs: Arc<Jobs>,
}

impl App {
    /// Checks `config`, reads the client tokens, opens the job store
    /// (PostgreSQL with `--store`, SQLite on disk with `--data-dir`, else
    /// in memory) and starts the jobs (taking up unfinished ones).
    pub async fn start(config: Config, shutdown: CancellationToken) -> Result<App, StartError> {
        let place = store::Place {
            url: config.store_url.as_ref().map(Secret::expose_str),
            password: config.store_password.as_ref().map(Secret::expose_str),
            data_dir: config.data_dir.as_deref(),
        };
        let store = store::open(place, config.max_store_bytes).await?;
        let scheduler = Shared::new(config, shutdown)?;
        let jobs = Jobs::start(scheduler.clone(), store, &scheduler.config);
        Ok(App { scheduler, jobs })
    }
}
