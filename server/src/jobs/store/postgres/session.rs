//! A coordinator's session with the store: its live lock, the hints
//! between coordinators (`LISTEN`/`NOTIFY`) and the leader's lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio_postgres::AsyncMessage;
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::sync::CancellationToken;

use super::super::Wake;
use super::{CHANNEL, Failure, LEADER_LOCK, LEADER_TRY, LIVE_CLASS};

/// What a coordinator's session keeps up: the hints it passes on, whether
/// it leads, whether it holds its live lock, and that lock's key.
pub(super) struct Session {
    pub(super) wakes: broadcast::Sender<Wake>,
    pub(super) leading: Arc<AtomicBool>,
    pub(super) alive: Arc<AtomicBool>,
    pub(super) holder_key: i32,
}

/// A coordinator's session with the store, for as long as the store
/// lives: connected again and again (100 ms doubling to 5 s between
/// tries) while the database is unreachable.
pub(super) async fn session(
    config: tokio_postgres::Config,
    tls: MakeRustlsConnect,
    me: Session,
    stop: CancellationToken,
) {
    let mut pause = Duration::from_millis(100);
    loop {
        let began = tokio::time::Instant::now();
        tokio::select! {
            ended = session_once(&config, &tls, &me) => {
                if let Err(e) = ended {
                    tracing::debug!(error = %Failure::from(e).0, "the job store's session ended");
                }
            }
            () = stop.cancelled() => return,
        }
        me.alive.store(false, Ordering::Relaxed);
        if me.leading.swap(false, Ordering::Relaxed) {
            tracing::warn!("no longer leading the job store's maintenance: its session ended");
        }
        if began.elapsed() > Duration::from_secs(10) {
            pause = Duration::from_millis(100);
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// One connection of [`session`]: takes its live lock, listens for hints
/// and passes them on, and tries for the leader's lock every
/// [`LEADER_TRY`] until it holds it (then checks that its connection
/// lives). Ends with the connection.
pub(super) async fn session_once(
    config: &tokio_postgres::Config,
    tls: &MakeRustlsConnect,
    me: &Session,
) -> Result<(), tokio_postgres::Error> {
    let (wakes, leading) = (&me.wakes, &*me.leading);
    let (client, mut connection) = config.connect(tls.clone()).await?;
    let (tx, mut hints) = mpsc::unbounded_channel();
    // The connection is driven here, its notifications passed on.
    let drive = async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    let _ = tx.send(n.payload().to_string());
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            }
        }
    };
    let work = async {
        let live: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, $2)",
                &[&LIVE_CLASS, &me.holder_key],
            )
            .await?
            .get(0);
        if !live {
            // Another process drew the same key (one chance in 2^31): this
            // one claims nothing until a session of it holds the lock.
            tracing::warn!("the job store's live lock of this coordinator is held by another");
        }
        me.alive.store(live, Ordering::Relaxed);
        client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
        // Whatever was missed while not listening: look again.
        let _ = wakes.send(Wake::Jobs);
        let mut tick = tokio::time::interval(LEADER_TRY);
        loop {
            tokio::select! {
                hint = hints.recv() => match hint.as_deref().and_then(|h| parse_hint(h, me.holder_key)) {
                    Some(wake) => { let _ = wakes.send(wake); }
                    None if hint.is_none() => return Ok(()),
                    None => {}
                },
                _ = tick.tick() => {
                    if leading.load(Ordering::Relaxed) {
                        client.simple_query("SELECT 1").await?;
                    } else {
                        let got: bool = client
                            .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
                            .await?
                            .get(0);
                        if got {
                            leading.store(true, Ordering::Relaxed);
                            tracing::info!("leading the job store's maintenance");
                        }
                    }
                }
            }
        }
    };
    tokio::select! {
        ended = drive => ended,
        ended = work => ended,
    }
}

/// The payload of a hint that a job appeared or ended, from the
/// coordinator whose live key is `origin`.
pub(super) fn jobs_hint(origin: i32) -> String {
    format!("jobs:{origin}")
}

/// The payload of a hint that results of job `job` were stored in its
/// windows `wins` (not empty) by the coordinator whose live key is
/// `origin`.
pub(super) fn results_hint(job: i64, wins: &[i64], origin: i32) -> String {
    let first = wins.iter().min().copied().unwrap_or(0);
    let last = wins.iter().max().copied().unwrap_or(0);
    format!("r{job}:{first}-{last}:{origin}")
}

/// A hint's payload ([`jobs_hint`], [`results_hint`]) as a wake for the
/// coordinator whose live key is `me`: none for its own hints, nor for a
/// payload it cannot read. A payload without windows or origin (`jobs`,
/// `r` and a job's number) is read as every window's, from another.
pub(super) fn parse_hint(payload: &str, me: i32) -> Option<Wake> {
    let mine = |origin: Option<&str>| origin.is_some_and(|o| o.parse() == Ok(me));
    if let Some(rest) = payload.strip_prefix("jobs") {
        let origin = rest.strip_prefix(':');
        return (rest.is_empty() || origin.is_some() && !mine(origin)).then_some(Wake::Jobs);
    }
    let mut parts = payload.strip_prefix('r')?.splitn(3, ':');
    let job = parts.next()?.parse().ok()?;
    let (first, last) = match parts.next() {
        None => (0, u64::MAX),
        Some(wins) => {
            let (first, last) = wins.split_once('-')?;
            (first.parse().ok()?, last.parse().ok()?)
        }
    };
    if mine(parts.next()) || first > last {
        return None;
    }
    Some(Wake::Results { job, first, last })
}
