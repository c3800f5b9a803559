//! Durable jobs on a colball cluster (`colball.v1.Jobs`): submit a puzzle
//! set, get its id, and read its results later, from any index, as often
//! as needed. The commands behind `colball job ...`.

use std::time::{Duration, Instant};

use colball_proto::MAX_MESSAGE_BYTES;
use colball_proto::puzzle_to_wire;
use colball_proto::v1::jobs_client::JobsClient;
use colball_proto::v1::{self, submit_request};
use colball_solver::Puzzle;
use tokio_stream::{Stream, StreamExt};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::remote::{self, ClientError, Outgoing, RemoteSolved, Security, SolveError};

/// Puzzles per message of a submission (well under the message limit).
pub const SUBMIT_CHUNK: usize = 10_000;

/// A connection to a coordinator's job service.
#[derive(Clone, Debug)]
pub struct Jobs {
    inner: JobsClient<InterceptedService<Channel, Outgoing>>,
}

impl Jobs {
    pub async fn connect(url: &str, security: &Security) -> Result<Jobs, ClientError> {
        let channel = remote::channel(url, security).await?;
        let inner = JobsClient::with_interceptor(channel, Outgoing::new(security.token.as_ref()))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Jobs { inner })
    }

    /// Connects to the first of `urls` (coordinators sharing one store)
    /// that answers; which one. When none does, the first one's error.
    pub async fn connect_first(
        urls: &[String],
        security: &Security,
    ) -> Result<(Jobs, usize), ClientError> {
        let mut first = None;
        for (at, url) in urls.iter().enumerate() {
            match Jobs::connect(url, security).await {
                Ok(jobs) => return Ok((jobs, at)),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(first.unwrap_or_else(|| ClientError::BadUrl {
            url: String::new(),
            reason: "no coordinator URL".into(),
        }))
    }

    /// Submits `puzzles` (with their ids) as one job; returns its id once
    /// the coordinator has stored them all.
    pub async fn submit(
        &mut self,
        puzzles: &[(String, Puzzle)],
        priority: Option<v1::Priority>,
        name: &str,
    ) -> Result<v1::JobAccepted, ClientError> {
        let options = v1::JobOptions {
            priority: priority.unwrap_or(v1::Priority::Unspecified) as i32,
            name: name.to_string(),
            ..v1::JobOptions::default()
        };
        self.submit_with(puzzles, options).await
    }

    /// [`Self::submit`] with every option (`options.puzzles`, when 0, is
    /// set to the number of puzzles).
    pub async fn submit_with(
        &mut self,
        puzzles: &[(String, Puzzle)],
        mut options: v1::JobOptions,
    ) -> Result<v1::JobAccepted, ClientError> {
        // Announced, so that a stream cut short is never sealed as a
        // smaller job.
        if options.puzzles == 0 {
            options.puzzles = puzzles.len() as u64;
        }
        let mut messages = vec![v1::SubmitRequest {
            kind: Some(submit_request::Kind::Options(options)),
        }];
        for chunk in puzzles.chunks(SUBMIT_CHUNK) {
            messages.push(v1::SubmitRequest {
                kind: Some(submit_request::Kind::Puzzles(v1::PuzzleChunk {
                    puzzles: chunk
                        .iter()
                        .map(|(id, p)| puzzle_to_wire(id.clone(), p))
                        .collect(),
                })),
            });
        }
        Ok(self
            .inner
            .submit(tokio_stream::iter(messages))
            .await?
            .into_inner())
    }

    /// A call that proves the coordinator answers (and takes the token):
    /// it asks for a job that cannot exist, and NOT_FOUND is the answer.
    pub async fn probe(&mut self) -> Result<(), ClientError> {
        match self.get("").await {
            Err(ClientError::Status(s)) if s.code() == tonic::Code::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    pub async fn get(&mut self, id: &str) -> Result<v1::Job, ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        Ok(self.inner.get(r).await?.into_inner())
    }

    pub async fn list(&mut self) -> Result<Vec<v1::Job>, ClientError> {
        Ok(self
            .inner
            .list(v1::ListJobsRequest {})
            .await?
            .into_inner()
            .jobs)
    }

    pub async fn cancel(&mut self, id: &str) -> Result<v1::Job, ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        Ok(self.inner.cancel(r).await?.into_inner())
    }

    pub async fn delete(&mut self, id: &str) -> Result<(), ClientError> {
        let r = v1::JobRef { id: id.to_string() };
        self.inner.delete(r).await?;
        Ok(())
    }

    /// The job's results in input order from `from`; with `follow`, until
    /// the last.
    pub async fn results(
        &mut self,
        id: &str,
        from: u64,
        follow: bool,
    ) -> Result<impl Stream<Item = Result<v1::PuzzleResult, ClientError>> + use<>, ClientError>
    {
        let request = v1::ResultsRequest {
            id: id.to_string(),
            from_index: from,
            follow,
            key: String::new(),
        };
        let stream = self.inner.results(request).await?.into_inner();
        Ok(stream.map(|r| r.map_err(ClientError::Status)))
    }

    /// Follows the results, from the first, of the job being submitted
    /// with `key` (`JobOptions.key`), while its puzzles are still being
    /// sent.
    pub async fn results_by_key(
        &mut self,
        key: &str,
    ) -> Result<impl Stream<Item = Result<v1::PuzzleResult, ClientError>> + use<>, ClientError>
    {
        let request = v1::ResultsRequest {
            key: key.to_string(),
            from_index: 0,
            follow: true,
            ..v1::ResultsRequest::default()
        };
        let stream = self.inner.results(request).await?.into_inner();
        Ok(stream.map(|r| r.map_err(ClientError::Status)))
    }
}

/// A job as one line for people, its pace read at `now_unix_ms`.
pub fn job_line(job: &v1::Job, now_unix_ms: i64) -> String {
    let mut line = format!(
        "{} {} {} puzzles: {} solved, {} errors, {} remaining",
        job.id,
        job.state_name(),
        job.puzzles,
        job.solved,
        job.errors,
        job.remaining
    );
    let finished = job.finished_unix_ms > 0;
    if job.rate > 0.0 {
        line.push_str(&format!(", {:.0} puzzles/s", job.rate));
    }
    if !finished && job.remaining > 0 && job.eta_unix_ms > 0 {
        let secs = ((job.eta_unix_ms - now_unix_ms).max(0) as u64).div_ceil(1000);
        line.push_str(&format!(", about {secs} s to go"));
    }
    if !job.name.is_empty() {
        line.push_str(&format!(" ({})", job.name));
    }
    if !job.failure.is_empty() {
        line.push_str(&format!(": {}", job.failure));
    }
    if let Some(hook) = &job.webhook {
        line.push_str(&format!("; webhook {}", webhook_state(hook, finished)));
    }
    line
}

/// How a job's webhook call stands, in words.
fn webhook_state(hook: &v1::WebhookStatus, finished: bool) -> String {
    let tries = match hook.attempts {
        1 => "1 call".to_string(),
        n => format!("{n} calls"),
    };
    if hook.delivered {
        format!("delivered ({tries})")
    } else if !finished {
        "to call once it finishes".to_string()
    } else if hook.next_unix_ms > 0 && hook.attempts == 0 {
        "due".to_string()
    } else if hook.next_unix_ms > 0 {
        format!("failed so far ({tries}), trying again")
    } else {
        format!("given up ({tries})")
    }
}

/// A job as a JSON object.
pub fn job_json(job: &v1::Job) -> serde_json::Value {
    serde_json::json!({
        "id": job.id,
        "name": job.name,
        "state": job.state_name(),
        "puzzles": job.puzzles,
        "solved": job.solved,
        "errors": job.errors,
        "remaining": job.remaining,
        "created_unix_ms": job.created_unix_ms,
        "finished_unix_ms": job.finished_unix_ms,
        "failure": job.failure,
        "any_order": job.any_order,
        "rate": job.rate,
        "eta_unix_ms": job.eta_unix_ms,
        "webhook": job.webhook.as_ref().map(|w| serde_json::json!({
            "url": w.url,
            "attempts": w.attempts,
            "delivered": w.delivered,
            "next_unix_ms": w.next_unix_ms,
        })),
    })
}

/// How [`solve_in_order`] runs a batch as a job.
#[derive(Clone, Debug)]
pub struct JobRun {
    /// The job's priority class (`None`: normal, a person waiting).
    pub priority: Option<v1::Priority>,
    /// A name for people (`colball job list` shows it).
    pub name: String,
    /// How long to keep trying to reach the coordinator again after the
    /// connection breaks, counted from the break (zero: not at all).
    pub reconnect: Duration,
    /// Cancel the job when the process gets SIGINT (Ctrl-C), and return
    /// [`ClientError::Interrupted`].
    pub cancel_on_interrupt: bool,
}

impl Default for JobRun {
    fn default() -> JobRun {
        JobRun {
            priority: None,
            name: String::new(),
            reconnect: DEFAULT_RECONNECT,
            cancel_on_interrupt: false,
        }
    }
}

pub use crate::DEFAULT_RECONNECT;

/// The first wait between two attempts to reconnect; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The least time one attempt to reconnect is given, however little is
/// left of `--reconnect-secs` (a connection that hangs is given up).
const ATTEMPT: Duration = Duration::from_secs(5);

/// Solves `puzzles` (with their ids) on the cluster at `url` as a durable
/// job, calling `on_result` once per puzzle in input order, like
/// `local::solve_in_order`; blocks the calling thread (it runs its own
/// small runtime). `notice` hears of breaks and reconnections, for people.
///
/// When the connection breaks (the coordinator crashed, restarted or shut
/// down, the network failed), it reconnects with backoff for up to
/// `run.reconnect` and reads on from the first result not yet passed on:
/// nothing is passed on twice or skipped. A job the coordinator no longer
/// has (it restarted without `--data-dir`) is [`ClientError::JobLost`].
/// Each answer is replayed against its puzzle; a wrong one stops the run.
/// A finished job is deleted; on a failure of the cluster's or of
/// `on_result`, it is cancelled.
pub fn solve_in_order<E>(
    url: &str,
    security: &Security,
    run: &JobRun,
    puzzles: &[(String, Puzzle)],
    notice: &mut dyn FnMut(&str),
    on_result: impl FnMut(RemoteSolved) -> Result<(), E>,
) -> Result<(), SolveError<E>> {
    let runtime = remote::runtime()?;
    runtime.block_on(async {
        let urls = remote::urls(url)?;
        let (jobs, at) = Jobs::connect_first(&urls, security).await?;
        let mut follower = BatchJob {
            urls,
            at,
            security,
            run,
            puzzles,
            jobs,
            job: None,
            next: 0,
            lost_since: None,
        };
        let outcome = {
            let solving = follower.solve(notice, on_result);
            tokio::pin!(solving);
            tokio::select! {
                outcome = &mut solving => Some(outcome),
                () = interrupted(run.cancel_on_interrupt) => None,
            }
        };
        match outcome {
            Some(Ok(())) => {
                // Every result is passed on: the job has served its
                // purpose.
                follower.finish(false).await;
                Ok(())
            }
            Some(Err(e)) => {
                // A broken connection keeps the job for a later
                // `colball job results`; any other failure ends it.
                if !matches!(
                    e,
                    SolveError::Client(
                        ClientError::ConnectionLost { .. } | ClientError::JobLost { .. }
                    )
                ) {
                    follower.finish(true).await;
                }
                Err(e)
            }
            None => {
                follower.finish(true).await;
                Err(ClientError::Interrupted {
                    job: follower.job.map(|(id, _)| id),
                    received: follower.next as usize,
                    total: puzzles.len(),
                }
                .into())
            }
        }
    })
}

/// Resolves on SIGINT when `enabled`; never otherwise.
async fn interrupted(enabled: bool) {
    if !enabled || tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One batch followed as a job (see [`solve_in_order`]).
struct BatchJob<'a> {
    /// The coordinators (sharing one store), and which one is dialled.
    urls: Vec<String>,
    at: usize,
    security: &'a Security,
    run: &'a JobRun,
    puzzles: &'a [(String, Puzzle)],
    jobs: Jobs,
    /// The job's id and whether the coordinator keeps it on disk, once
    /// submitted.
    job: Option<(String, bool)>,
    /// The index of the next result to pass on.
    next: u64,
    /// When the connection broke, until the result stream opens again.
    lost_since: Option<Instant>,
}

type ResultStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<v1::PuzzleResult, ClientError>> + Send>>;

/// The next item of a stream that may be absent (never, then).
async fn next_of<S: Stream + Unpin>(stream: &mut Option<S>) -> Option<S::Item> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// How long a run that failed while its job was being submitted waits
/// for an acknowledgment already on its way.
const ACK_GRACE: Duration = Duration::from_millis(200);

/// A job key for one submission: 32 random hex digits.
fn fresh_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Why [`redial`] found no coordinator.
enum Redial {
    /// None answered by the deadline; the last reason.
    GaveUp(String),
    /// One answered with a failure that is no break (a refused token).
    Fatal(ClientError),
}

/// Dials the coordinators after `at` in turn (the same one again when
/// there is one), each once before a wait, waits doubling from
/// [`FIRST_BACKOFF`] to [`MAX_BACKOFF`], until one answers or `deadline`;
/// `at` is left at the one that answered. `last` says why the connection
/// was lost.
async fn redial(
    urls: &[String],
    at: &mut usize,
    security: &Security,
    deadline: Instant,
    mut last: String,
) -> Result<Jobs, Redial> {
    let mut backoff = FIRST_BACKOFF;
    let mut tried = 0;
    loop {
        if Instant::now() >= deadline {
            return Err(Redial::GaveUp(last));
        }
        *at = (*at + 1) % urls.len();
        tried += 1;
        let attempt = deadline
            .saturating_duration_since(Instant::now())
            .max(ATTEMPT);
        match tokio::time::timeout(attempt, Jobs::connect(&urls[*at], security)).await {
            Ok(Ok(jobs)) => return Ok(jobs),
            Ok(Err(e)) => match Break::from(e) {
                Break::Gone(reason) => last = reason,
                Break::Fatal(e) => return Err(Redial::Fatal(e)),
            },
            Err(_) => last = format!("no connection within {} s", attempt.as_secs()),
        }
        if tried % urls.len() != 0 {
            continue;
        }
        if Instant::now() + backoff >= deadline {
            return Err(Redial::GaveUp(last));
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Where [`read_results`] reads: the coordinators (sharing one store),
/// how it proves itself, and how long it redials after a break.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    pub urls: &'a [String],
    pub security: &'a Security,
    pub reconnect: Duration,
}

/// Reads job `id`'s results from `from` on, of `total` (following them
/// with `follow`) on `jobs`, connected to `reader.urls[*at]`, and passes each
/// to `on_result`. When the connection breaks (the coordinator died or
/// went away), dials the next coordinator (or the same one again) for up
/// to `reader.reconnect` and reads on from the next result due: nothing
/// passed on twice or skipped. `notice` hears of breaks, for people.
#[allow(clippy::too_many_arguments)] // the reader, the job, and the callbacks
pub async fn read_results<E>(
    reader: Reader<'_>,
    jobs: &mut Jobs,
    at: &mut usize,
    id: &str,
    (from, total): (u64, u64),
    follow: bool,
    notice: &mut dyn FnMut(&str),
    mut on_result: impl FnMut(v1::PuzzleResult) -> Result<(), E>,
) -> Result<(), SolveError<E>> {
    let mut next = from;
    let mut lost_since: Option<Instant> = None;
    loop {
        let reason = match jobs.results(id, next, follow).await {
            Ok(mut stream) => {
                if lost_since.take().is_some() {
                    notice(&format!(
                        "reconnected to {}; reading on from result {next}",
                        reader.urls[*at]
                    ));
                }
                loop {
                    match stream.next().await {
                        Some(Ok(r)) => {
                            next += 1;
                            on_result(r).map_err(SolveError::Output)?;
                        }
                        Some(Err(e)) => match Break::from(e) {
                            Break::Gone(reason) => break reason,
                            Break::Fatal(e) => return Err(e.into()),
                        },
                        None => return Ok(()),
                    }
                }
            }
            Err(e) => match Break::from(e) {
                Break::Gone(reason) => reason,
                Break::Fatal(e) => return Err(e.into()),
            },
        };
        let lost = |last: String, at: usize| ClientError::ConnectionLost {
            url: reader.urls[at].clone(),
            received: next as usize,
            total: total as usize,
            reason: last,
            advice: format!(
                "`colball job results {id} --from {next} --wait` prints the rest once a coordinator is back"
            ),
        };
        if reader.reconnect.is_zero() {
            return Err(lost(reason, *at).into());
        }
        let since = *lost_since.get_or_insert_with(|| {
            notice(&format!(
                "lost the connection to the coordinator at {} at result {next} ({reason}); reconnecting for up to {} s",
                reader.urls[*at],
                reader.reconnect.as_secs()
            ));
            Instant::now()
        });
        match redial(
            reader.urls,
            at,
            reader.security,
            since + reader.reconnect,
            reason,
        )
        .await
        {
            Ok(again) => *jobs = again,
            Err(Redial::GaveUp(last)) => return Err(lost(last, *at).into()),
            Err(Redial::Fatal(e)) => return Err(e.into()),
        }
    }
}

/// Why a call on the coordinator did not go through.
enum Break {
    /// The connection (or the coordinator) went away: try again.
    Gone(String),
    /// Anything else: the end of the run.
    Fatal(ClientError),
}

impl From<ClientError> for Break {
    fn from(e: ClientError) -> Break {
        match e {
            ClientError::Status(status) if remote::connection_gone(&status) => {
                Break::Gone(remote::status_reason(&status))
            }
            ClientError::Connect { reason, .. } => Break::Gone(reason),
            other => Break::Fatal(other),
        }
    }
}

impl BatchJob<'_> {
    /// The coordinator dialled now.
    fn url(&self) -> &str {
        &self.urls[self.at]
    }

    async fn solve<E>(
        &mut self,
        notice: &mut dyn FnMut(&str),
        mut on_result: impl FnMut(RemoteSolved) -> Result<(), E>,
    ) -> Result<(), SolveError<E>> {
        let list: Vec<Puzzle> = self.puzzles.iter().map(|(_, p)| *p).collect();
        let total = self.puzzles.len() as u64;
        let options = v1::JobOptions {
            priority: self.run.priority.unwrap_or(v1::Priority::Normal) as i32,
            name: self.run.name.clone(),
            // Someone waits: no worker is an error, as for a batch.
            fail_without_workers: true,
            any_order: false,
            // Results are read as the puzzles go up (see `early`).
            key: fresh_key(),
            puzzles: total,
            webhook: String::new(),
        };
        // Whether the coordinator answers at all: a failure of the probe is
        // not a break to ride out but a wrong URL, port or scheme. It runs
        // beside the first submission (one round trip, not two); only when
        // that submission fails too does the probe's answer decide.
        let mut probe = self.jobs.clone();
        let (probed, first) = tokio::join!(
            probe.probe(),
            self.early(options.clone(), &list, &mut on_result)
        );
        let first = first?;
        if first.is_err() {
            if let Err(e) = probed {
                return Err(match Break::from(e) {
                    Break::Gone(reason) => self
                        .connection_lost(reason + remote::connect_hint(self.url()), Duration::ZERO),
                    Break::Fatal(e) => e,
                }
                .into());
            }
        }
        // Submit; a submission cut short was not acknowledged, and is made
        // again in full (under a new key; its results are read from the
        // next one due).
        let mut first = Some(first);
        let (id, durable) = loop {
            let submitted = match first.take() {
                Some(outcome) => outcome,
                None => {
                    let options = v1::JobOptions {
                        key: fresh_key(),
                        ..options.clone()
                    };
                    self.jobs.submit_with(self.puzzles, options).await
                }
            };
            match submitted {
                Ok(accepted) => break (accepted.id, accepted.durable),
                Err(e) => match Break::from(e) {
                    Break::Gone(reason) => self.reconnect(reason, notice).await?,
                    Break::Fatal(e) => return Err(e.into()),
                },
            }
        };
        self.job = Some((id.clone(), durable));
        while self.next < total {
            let reason = match self.open_results(&id, notice).await {
                Ok(mut stream) => loop {
                    match stream.next().await {
                        Some(Ok(r)) => {
                            if r.index != self.next {
                                return Err(ClientError::Protocol(format!(
                                    "result {} arrived when {} was due",
                                    r.index, self.next
                                ))
                                .into());
                            }
                            let solved = remote::convert(r, &list)?;
                            self.next += 1;
                            on_result(solved).map_err(SolveError::Output)?;
                        }
                        Some(Err(e)) => match Break::from(e) {
                            Break::Gone(reason) => break reason,
                            Break::Fatal(e) => return Err(self.lost_if_missing(e).into()),
                        },
                        None if self.next >= total => break String::new(),
                        None => {
                            // The stream ended early: the job was stopped
                            // (cancelled, failed), or the coordinator is
                            // going away.
                            self.ended_early(&id).await?;
                            break "the result stream ended early".to_string();
                        }
                    }
                },
                Err(Break::Gone(reason)) => reason,
                Err(Break::Fatal(e)) => return Err(self.lost_if_missing(e).into()),
            };
            if self.next < total {
                self.reconnect(reason, notice).await?;
            }
        }
        Ok(())
    }

    /// The first submission, with the job's results read by its key at
    /// the same time, from the first, as they come: the results passed on
    /// while the puzzles go up, then the submission's outcome. Reading by
    /// key stops at its first failure (the submission's outcome decides
    /// what follows; the job's results are read on by id from the next
    /// one due).
    async fn early<E>(
        &mut self,
        options: v1::JobOptions,
        list: &[Puzzle],
        on_result: &mut impl FnMut(RemoteSolved) -> Result<(), E>,
    ) -> Result<Result<v1::JobAccepted, ClientError>, SolveError<E>> {
        let total = self.puzzles.len() as u64;
        let mut reader = self.jobs.clone();
        let key = options.key.clone();
        let submit = self.jobs.submit_with(self.puzzles, options);
        tokio::pin!(submit);
        let results = async { reader.results_by_key(&key).await.ok() };
        tokio::pin!(results);
        let mut stream = None;
        let mut opened = false;
        let failure: SolveError<E> = loop {
            tokio::select! {
                outcome = &mut submit => return Ok(outcome),
                s = &mut results, if !opened => {
                    opened = true;
                    stream = s;
                }
                item = next_of(&mut stream), if stream.is_some() => match item {
                    Some(Ok(r)) if r.index == self.next && self.next < total => {
                        let solved = match remote::convert(r, list) {
                            Ok(solved) => solved,
                            Err(e) => break e.into(),
                        };
                        self.next += 1;
                        if let Err(e) = on_result(solved) {
                            break SolveError::Output(e);
                        }
                    }
                    Some(Ok(r)) => {
                        break ClientError::Protocol(format!(
                            "result {} arrived when {} was due",
                            r.index, self.next
                        ))
                        .into();
                    }
                    // Ended or broken: the submission's outcome decides.
                    Some(Err(_)) | None => stream = None,
                },
            }
        };
        // The run ends here. An upload still under way is cut short by
        // dropping it (the coordinator keeps nothing of it); a job sealed
        // whose acknowledgment is on its way is named, so that the end of
        // the run cancels it rather than leave it running unowned.
        drop(stream);
        if let Ok(Ok(accepted)) = tokio::time::timeout(ACK_GRACE, &mut submit).await {
            self.job = Some((accepted.id, accepted.durable));
        }
        Err(failure)
    }

    /// NOT_FOUND for the job being followed means the coordinator lost it.
    fn lost_if_missing(&self, e: ClientError) -> ClientError {
        match (&e, &self.job) {
            (ClientError::Status(s), Some((id, durable))) if s.code() == tonic::Code::NotFound => {
                ClientError::JobLost {
                    url: self.url().to_string(),
                    job: id.clone(),
                    durable: *durable,
                    received: self.next as usize,
                    total: self.puzzles.len(),
                }
            }
            _ => e,
        }
    }

    /// After a stream that ended before the last result: the job's end,
    /// if it ended (cancelled or failed), as an error.
    async fn ended_early(&mut self, id: &str) -> Result<(), ClientError> {
        let job = match self.jobs.get(id).await {
            Ok(job) => job,
            Err(e) => {
                return match Break::from(e) {
                    Break::Gone(_) => Ok(()),
                    Break::Fatal(e) => Err(self.lost_if_missing(e)),
                };
            }
        };
        let state = v1::JobState::try_from(job.state).unwrap_or_default();
        let ended = match state {
            v1::JobState::Cancelled => Some("was cancelled"),
            v1::JobState::Failed => Some("failed"),
            _ => None,
        };
        if let Some(ended) = ended {
            return Err(ClientError::JobEnded {
                job: id.to_string(),
                state: ended.to_string(),
                failure: job.failure,
                received: self.next as usize,
                total: self.puzzles.len(),
            });
        }
        Ok(())
    }

    /// Connects again, with backoff, until `--reconnect-secs` after the
    /// break (the first of a run of breaks with no result read between).
    async fn reconnect(
        &mut self,
        reason: String,
        notice: &mut dyn FnMut(&str),
    ) -> Result<(), ClientError> {
        let window = self.run.reconnect;
        if window.is_zero() {
            return Err(self.connection_lost(reason, window));
        }
        let since = match self.lost_since {
            Some(since) => since,
            None => {
                notice(&format!(
                    "lost the connection to the coordinator at {} after {} of {} results ({reason}); reconnecting for up to {} s (--reconnect-secs)",
                    self.url(),
                    self.next,
                    self.puzzles.len(),
                    window.as_secs()
                ));
                *self.lost_since.insert(Instant::now())
            }
        };
        match redial(
            &self.urls,
            &mut self.at,
            self.security,
            since + window,
            reason,
        )
        .await
        {
            Ok(jobs) => {
                self.jobs = jobs;
                Ok(())
            }
            Err(Redial::GaveUp(last)) => Err(self.connection_lost(last, window)),
            Err(Redial::Fatal(e)) => Err(e),
        }
    }

    /// Opens the job's result stream from the next index. After a break,
    /// within [`ATTEMPT`] (a connection that hangs is a break again), and
    /// the break is over once it opens.
    async fn open_results(
        &mut self,
        id: &str,
        notice: &mut dyn FnMut(&str),
    ) -> Result<ResultStream, Break> {
        let open = self.jobs.results(id, self.next, true);
        let stream = if self.lost_since.is_some() {
            match tokio::time::timeout(ATTEMPT, open).await {
                Ok(opened) => opened?,
                Err(_) => {
                    return Err(Break::Gone(format!(
                        "no answer within {} s",
                        ATTEMPT.as_secs()
                    )));
                }
            }
        } else {
            open.await?
        };
        if self.lost_since.take().is_some() {
            notice(&format!(
                "reconnected to {}; reading on from result {}",
                self.url(),
                self.next
            ));
        }
        Ok(Box::pin(stream))
    }

    /// The end of the run for a connection given up on after trying to
    /// reconnect for `window` (zero: not tried), saying what is kept.
    fn connection_lost(&self, reason: String, window: Duration) -> ClientError {
        ClientError::ConnectionLost {
            url: self.url().to_string(),
            received: self.next as usize,
            total: self.puzzles.len(),
            reason,
            advice: self.advice(window),
        }
    }

    /// What a person can do after giving up on the connection.
    fn advice(&self, window: Duration) -> String {
        let tried = if window.is_zero() {
            String::new()
        } else {
            format!("gave up after {} s (--reconnect-secs); ", window.as_secs())
        };
        match &self.job {
            None => format!("{tried}the batch was not submitted: resubmit it"),
            Some((id, true)) => format!(
                "{tried}job {id} is kept on the coordinator's disk: `colball job results {id} --from {} --wait` prints the rest once it is back",
                self.next
            ),
            Some((id, false)) => format!(
                "{tried}the coordinator keeps jobs in memory only (no --data-dir), so if it restarted, job {id} was lost: resubmit it"
            ),
        }
    }

    /// Deletes the job (done: `cancel` false) or cancels it, at best
    /// effort, within a few seconds.
    async fn finish(&mut self, cancel: bool) {
        let Some((id, _)) = self.job.clone() else {
            return;
        };
        let call = async {
            if cancel {
                self.jobs.cancel(&id).await.map(drop)
            } else {
                self.jobs.delete(&id).await
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(3), call).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(state: v1::JobState, webhook: Option<v1::WebhookStatus>) -> v1::Job {
        v1::Job {
            id: "j7-5f3a9c21d0b4".into(),
            state: state as i32,
            puzzles: 10,
            solved: 10,
            finished_unix_ms: if state == v1::JobState::Running { 0 } else { 5 },
            webhook,
            ..Default::default()
        }
    }

    #[test]
    fn a_job_s_line_says_how_its_webhook_call_stands() {
        let hook = |attempts, delivered, next_unix_ms| {
            Some(v1::WebhookStatus {
                url: "https://hooks.example.com/x".into(),
                attempts,
                delivered,
                next_unix_ms,
            })
        };
        let done = v1::JobState::Done;
        for (job, says) in [
            (job(done, None), None),
            (
                job(v1::JobState::Running, hook(0, false, 0)),
                Some("to call once it finishes"),
            ),
            (job(done, hook(0, false, 5)), Some("due")),
            (job(done, hook(1, true, 0)), Some("delivered (1 call)")),
            (
                job(done, hook(2, false, 9)),
                Some("failed so far (2 calls), trying again"),
            ),
            (job(done, hook(12, false, 0)), Some("given up (12 calls)")),
        ] {
            let line = job_line(&job, 0);
            match says {
                Some(says) => assert!(line.ends_with(&format!("; webhook {says}")), "{line}"),
                None => assert!(!line.contains("webhook"), "{line}"),
            }
            assert_eq!(
                job_json(&job)["webhook"]["attempts"].as_u64(),
                job.webhook.as_ref().map(|w| u64::from(w.attempts))
            );
        }
    }
}
