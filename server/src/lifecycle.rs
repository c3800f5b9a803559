//! The service's lifecycle: the shutdown token every part watches and the
//! tasks shutdown waits for. The [`App`](crate::app::App) owns it; the
//! scheduler, the jobs and the services hold clones (both halves are
//! handles on one shared state).

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct Lifecycle {
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Lifecycle {
    /// A lifecycle that ends when `shutdown` is cancelled.
    pub fn new(shutdown: CancellationToken) -> Lifecycle {
        Lifecycle {
            shutdown,
            tasks: TaskTracker::new(),
        }
    }

    /// Runs `task` for a request, a job, a watcher or a worker session, in
    /// `span` (which names it: one grep of the logs for the span's id
    /// follows it); shutdown waits for it up to its deadline.
    pub fn spawn(&self, span: tracing::Span, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(task.instrument(span));
    }

    /// Tasks of requests, jobs, watchers and sessions still running.
    pub fn running_tasks(&self) -> usize {
        self.tasks.len()
    }

    /// The token cancelled when shutdown begins.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// True once shutdown has begun.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// Completes when shutdown begins.
    pub async fn cancelled(&self) {
        self.shutdown.cancelled().await;
    }

    /// Waits for the tasks of requests, jobs, watchers and sessions, up to
    /// `until`; false if some still run then. No task starts after it.
    pub async fn drain(&self, until: tokio::time::Instant) -> bool {
        self.tasks.close();
        tokio::time::timeout_at(until, self.tasks.wait())
            .await
            .is_ok()
    }
}
