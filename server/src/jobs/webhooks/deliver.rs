//! Calling the webhooks of finished jobs. Once a second the coordinator
//! that leads the store's maintenance asks the store for the calls due
//! ([`JobStore::webhooks_due`]) and makes each (at most [`CONCURRENT`] at
//! a time), then records it ([`JobStore::webhook_tried`]):
//!
//! - a 2xx answer: delivered, never called again;
//! - anything else (another status, no connection, no answer within
//!   [`CALL_TIMEOUT`]): called again after 1 s, 2 s, 4 s ... (at most an
//!   hour apart) until `--webhook-retry-hours` after the job finished,
//!   then given up;
//! - a URL no pattern allows any more, or a host whose addresses are all
//!   refused: given up at once, said in the log.
//!
//! A call is recorded after it is made, so a coordinator that dies in
//! between makes it again after its restart: at least once, with the same
//! `webhook-id`, which receivers use to drop repeats.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use super::WebhookSecret;
use super::allow::{self, is_public};
use crate::coordinator::events;
use crate::jobs::store::{JobRow, JobState, Webhook};
use crate::jobs::{JobStore, Jobs};
use crate::telemetry;

/// Longest a call may take, connection included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest to wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Calls in flight at once.
pub const CONCURRENT: usize = 16;
/// The longest pause between two tries of one call.
const MAX_PAUSE: Duration = Duration::from_secs(3600);

/// A call's body: what the job is, as Standard Webhooks lays events out
/// (`type`, `timestamp`, `data`).
#[derive(Debug, Serialize)]
struct Call<'a> {
    /// `job.done`, `job.cancelled` or `job.failed`.
    r#type: String,
    /// When the job finished (RFC 3339, UTC).
    timestamp: String,
    data: CallData<'a>,
}

#[derive(Debug, Serialize)]
struct CallData<'a> {
    id: &'a str,
    name: &'a str,
    state: &'static str,
    puzzles: u64,
    solved: u64,
    errors: u64,
    created_unix_ms: i64,
    finished_unix_ms: i64,
    failure: &'a str,
    /// Where its results are read (NDJSON; `?format=csv` for CSV).
    results_url: String,
}

fn state_name(state: JobState) -> &'static str {
    match state {
        JobState::Done => "done",
        JobState::Cancelled => "cancelled",
        JobState::Failed => "failed",
        JobState::Queued => "queued",
        JobState::Running => "running",
        JobState::Receiving => "receiving",
    }
}

/// The body of the call for finished job `row`, the same on every try.
fn body(row: &JobRow, public_url: Option<&str>) -> Vec<u8> {
    let state = state_name(row.state);
    let finished =
        std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(row.finished_ms).unwrap_or(0));
    let call = Call {
        r#type: format!("job.{state}"),
        timestamp: humantime::format_rfc3339_millis(finished).to_string(),
        data: CallData {
            id: &row.id,
            name: &row.name,
            state,
            puzzles: row.puzzles,
            solved: row.solved,
            errors: row.errors,
            created_unix_ms: row.created_ms,
            finished_unix_ms: row.finished_ms,
            failure: &row.failure,
            results_url: format!(
                "{}/api/v1/jobs/{}/results",
                public_url.unwrap_or("").trim_end_matches('/'),
                row.id
            ),
        },
    };
    serde_json::to_vec(&call).expect("a call's body serializes")
}

/// The call's `webhook-id`: the same on every try of it.
pub fn call_id(row: &JobRow) -> String {
    format!("msg_{}.{}", row.id, state_name(row.state))
}

/// The pause before try `attempt + 1`, after `attempt` tries failed.
fn pause(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(12)).min(MAX_PAUSE)
}

/// How a call went.
enum CallOutcome {
    Delivered,
    /// Worth trying again later.
    Failed(String),
    /// Never to be made: the URL is not allowed (any more).
    Refused(String),
}

/// Two HTTP clients: one that connects only to public addresses, one to
/// any (for URLs whose pattern names a private address). Neither follows
/// redirects or uses a proxy, so a call goes only where it was checked to
/// go.
struct HttpClients {
    public: reqwest::Client,
    any: reqwest::Client,
}

impl HttpClients {
    fn new() -> Result<HttpClients, reqwest::Error> {
        Ok(HttpClients {
            public: client(true)?,
            any: client(false)?,
        })
    }

    /// Calls `url` with `body`, signed with `secret`, from `span` (whose
    /// trace context the call carries when spans are exported).
    async fn call(
        &self,
        url: &str,
        allowed: &[allow::Pattern],
        secret: &WebhookSecret,
        (id, span): (&str, &tracing::Span),
        body: &[u8],
    ) -> CallOutcome {
        let (target, private_ok) = match allow::check(url, allowed) {
            Ok(checked) => checked,
            Err(why) => return CallOutcome::Refused(why),
        };
        // An address written in the URL is not resolved: check it here.
        if let Ok(ip) = target.host.trim_matches(['[', ']']).parse::<IpAddr>()
            && !private_ok
            && !is_public(ip)
        {
            return CallOutcome::Refused(format!(
                "{ip} is not a public address, and no --webhook-allow pattern names it"
            ));
        }
        let client = if private_ok { &self.any } else { &self.public };
        let mut request = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        for (name, value) in secret.headers(id, events::unix_ms() / 1000, body) {
            request = request.header(name, value);
        }
        let mut traced = Vec::new();
        telemetry::context::inject(span, |name, value| traced.push((name, value)));
        for (name, value) in traced {
            request = request.header(name, value);
        }
        match request.send().await {
            // The answer's body is never read: a call costs its headers.
            Ok(answer) if answer.status().is_success() => CallOutcome::Delivered,
            Ok(answer) => CallOutcome::Failed(format!("answered {}", answer.status())),
            Err(e) => CallOutcome::Failed(describe(&e)),
        }
    }
}

/// A failed call's error with its causes (reqwest's own message leaves
/// them out).
fn describe(e: &reqwest::Error) -> String {
    let mut text = if e.is_timeout() {
        format!("no answer within {} s", CALL_TIMEOUT.as_secs())
    } else {
        e.to_string()
    };
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn client(public_only: bool) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .user_agent(concat!("colball/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(Resolver { public_only }))
        .build()
}

/// Resolves a host's name, keeping only the addresses it may call.
struct Resolver {
    public_only: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let public_only = self.public_only;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| !public_only || is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address ({} refused: loopback, private or reserved)",
                    all.len()
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

impl Jobs {
    /// Calls the webhooks of finished jobs while the coordinator lives;
    /// see the module documentation.
    pub(in crate::jobs) async fn deliver(self: Arc<Self>) {
        let caller = match HttpClients::new() {
            Ok(caller) => Arc::new(caller),
            Err(e) => {
                tracing::error!(error = %e, "cannot make the webhooks' HTTP client; no webhook will be called");
                return;
            }
        };
        let calling = Arc::new(Mutex::new(HashSet::<i64>::new()));
        let slots = Arc::new(Semaphore::new(CONCURRENT));
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut said = false;
        while self.next_lead(&mut tick).await {
            let due = match self
                .store
                .webhooks_due(events::unix_ms(), 4 * CONCURRENT)
                .await
            {
                Ok(due) => {
                    said = false;
                    due
                }
                Err(e) => {
                    if !said {
                        tracing::warn!(error = %e, "cannot read the webhook calls due");
                        said = true;
                    }
                    continue;
                }
            };
            for row in due {
                if !calling
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(row.seq)
                {
                    continue;
                }
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (jobs, caller, calling) = (self.clone(), caller.clone(), calling.clone());
                tokio::spawn(async move {
                    let seq = row.seq;
                    jobs.call(&caller, row).await;
                    calling
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&seq);
                    drop(slot);
                });
            }
        }
    }

    /// Makes the call of finished job `row` and records how it went.
    async fn call(&self, caller: &HttpClients, row: JobRow) {
        let Some(hook) = row.webhook.clone() else {
            return;
        };
        let config = &self.webhooks;
        let attempts = hook.attempts.saturating_add(1);
        // A span a call, in the trace of the job's submit.
        let span = tracing::info_span!(parent: None, "webhook", job = %row.id, attempt = attempts, otel.kind = "client");
        if let Some(trace) = &row.trace {
            telemetry::context::adopt_traceparent(&span, trace);
        }
        let outcome = match &config.secret {
            Some(secret) => {
                let body = body(&row, config.public_url.as_deref());
                caller
                    .call(
                        &hook.url,
                        &config.allow,
                        secret,
                        (&call_id(&row), &span),
                        &body,
                    )
                    .instrument(span.clone())
                    .await
            }
            None => CallOutcome::Refused("webhooks are off on this coordinator".into()),
        };
        let now = events::unix_ms();
        let counts = &self.webhook_calls;
        let count = |n: &std::sync::atomic::AtomicU64| {
            n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        };
        let (next_ms, delivered) = match outcome {
            CallOutcome::Delivered => {
                tracing::debug!(job = %row.id, attempts, "webhook delivered");
                count(&counts.delivered);
                (Webhook::NO_MORE, true)
            }
            CallOutcome::Refused(why) => {
                tracing::warn!(job = %row.id, url = %hook.url, "webhook not called: {why}");
                count(&counts.given_up);
                (Webhook::NO_MORE, false)
            }
            CallOutcome::Failed(why) => {
                let next = now.saturating_add(pause(attempts).as_millis() as i64);
                let until = row
                    .finished_ms
                    .saturating_add(config.retry_for.as_millis() as i64);
                if next > until {
                    tracing::warn!(
                        job = %row.id, url = %hook.url, attempts,
                        "webhook call failed ({why}); given up after --webhook-retry-hours"
                    );
                    count(&counts.given_up);
                    (Webhook::NO_MORE, false)
                } else {
                    tracing::info!(
                        job = %row.id, url = %hook.url, attempts,
                        "webhook call failed ({why}); trying again in {} s",
                        (next - now) / 1000
                    );
                    count(&counts.failed);
                    (next, false)
                }
            }
        };
        let store: &dyn JobStore = &*self.store;
        let recorded = self
            .patiently("recording a webhook call", None, || {
                store.webhook_tried(row.seq, attempts, next_ms, delivered)
            })
            .await;
        if let Err(e) = recorded {
            tracing::warn!(job = %row.id, error = %e, "cannot record a webhook call; it will be made again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> JobRow {
        JobRow {
            seq: 7,
            id: "j7-5f3a9c21d0b4".into(),
            owner: "alice".into(),
            name: "night run".into(),
            priority: colball_core::Priority::Bulk,
            state: JobState::Done,
            puzzles: 300,
            solved: 299,
            errors: 1,
            created_ms: 1_796_399_000_000,
            finished_ms: 1_796_400_000_123,
            failure: String::new(),
            fail_fast: false,
            any_order: false,
            bytes: 0,
            webhook: Some(Webhook::new("https://hooks.example.com/x".into())),
            trace: None,
        }
    }

    #[test]
    fn a_call_says_what_finished_and_where_its_results_are() {
        let body: serde_json::Value =
            serde_json::from_slice(&body(&row(), Some("https://colball.example.com/"))).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "job.done",
                "timestamp": "2026-12-04T16:00:00.123Z",
                "data": {
                    "id": "j7-5f3a9c21d0b4",
                    "name": "night run",
                    "state": "done",
                    "puzzles": 300,
                    "solved": 299,
                    "errors": 1,
                    "created_unix_ms": 1_796_399_000_000_i64,
                    "finished_unix_ms": 1_796_400_000_123_i64,
                    "failure": "",
                    "results_url": "https://colball.example.com/api/v1/jobs/j7-5f3a9c21d0b4/results",
                }
            })
        );
        assert_eq!(call_id(&row()), "msg_j7-5f3a9c21d0b4.done");
    }

    #[test]
    fn tries_are_spaced_ever_further_apart_up_to_an_hour() {
        let pauses: Vec<u64> = (1..=14).map(|a| pause(a).as_secs()).collect();
        assert_eq!(
            pauses,
            [
                1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600
            ]
        );
    }
}
