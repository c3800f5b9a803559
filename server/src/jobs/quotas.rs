//! Per-client quotas (`--client-quotas-file`, read again on SIGHUP): for
//! each client (a client token's name; without tokens, an IP address), its
//! most queued puzzles, most stored MiB and most submissions per minute.
//!
//! ```text
//! # CLIENT  QUOTA=VALUE ...
//! alice     queued-puzzles=2000000  stored-mib=1024  submissions-per-minute=60
//! *         queued-puzzles=200000   stored-mib=256   submissions-per-minute=10
//! ```
//!
//! `*` is every client not named; a quota not given is no limit, and a
//! client with no line (and no `*` line) has none. Queued puzzles are the
//! puzzles without a result of the client's unfinished jobs, with those of
//! the job being submitted; stored MiB, what its jobs take in the store
//! ([`JobRow::bytes`](super::JobRow::bytes)): both are read from the store,
//! so they hold across coordinators sharing one. Submissions per minute
//! are counted by each coordinator for the submissions it reads (over the
//! last 60 s, refused ones too).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

/// The quotas' window for submissions.
pub const MINUTE: Duration = Duration::from_secs(60);

/// One client's quotas; `None`: no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quota {
    pub queued_puzzles: Option<u64>,
    pub stored_mib: Option<u64>,
    pub submissions_per_minute: Option<u32>,
}

impl Quota {
    /// Whether any quota reads the client's jobs from the store.
    pub fn reads_the_store(&self) -> bool {
        self.queued_puzzles.is_some() || self.stored_mib.is_some()
    }
}

/// What a client holds in the store when it submits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Held {
    /// Puzzles without a result in its unfinished jobs.
    pub queued: u64,
    /// What its jobs take in the store.
    pub bytes: u64,
    /// Its unfinished jobs' results per second, together.
    pub rate: f64,
    /// When its first finished job's retention ends, if it has one.
    pub frees_in: Option<Duration>,
}

impl Quota {
    /// Whether `client`, holding `held`, may have a job of `puzzles`
    /// puzzles taking `bytes` more.
    pub fn check(
        &self,
        client: &str,
        held: &Held,
        puzzles: u64,
        bytes: u64,
    ) -> Result<(), OverQuota> {
        if let Some(most) = self.queued_puzzles
            && held.queued + puzzles > most
        {
            let over = held.queued + puzzles.max(1) - most;
            // At its pace, when that many have left the queue.
            let wait = if held.rate > 0.0 {
                Duration::from_secs_f64((over as f64 / held.rate).min(3600.0))
            } else {
                MINUTE
            };
            return Err(OverQuota {
                quota: "queued-puzzles",
                message: format!(
                    "client {client:?} is over its quota queued-puzzles ({most}): {} puzzles of its jobs wait for a result, and this job brings {puzzles} so far; wait for them, cancel some, or split the job",
                    held.queued
                ),
                retry_after: whole_seconds(wait),
            });
        }
        if let Some(most) = self.stored_mib
            && held.bytes + bytes > most << 20
        {
            return Err(OverQuota {
                quota: "stored-mib",
                message: format!(
                    "client {client:?} is over its quota stored-mib ({most}): its jobs take {} MiB in the store, and this job {} MiB so far; delete finished jobs, or wait for their retention to pass",
                    held.bytes >> 20,
                    bytes >> 20
                ),
                retry_after: whole_seconds(held.frees_in.unwrap_or(Duration::from_secs(3600))),
            });
        }
        Ok(())
    }
}

/// The quotas file's contents.
#[derive(Debug, Default, PartialEq, Eq)]
struct Table {
    clients: HashMap<String, Quota>,
    others: Quota,
}

/// A quotas file that cannot be used: which file, where and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}{}: {message}", line.map(|n| format!(" line {n}")).unwrap_or_default())]
pub struct QuotaFileError {
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}

/// A submission over a quota: which one, what the client holds, and when
/// to try again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverQuota {
    /// The quota's name, as in the file (`queued-puzzles`, ...).
    pub quota: &'static str,
    pub message: String,
    pub retry_after: Duration,
}

/// The quotas in force and the recent submissions.
#[derive(Debug, Default)]
pub struct Quotas {
    file: Option<PathBuf>,
    table: RwLock<Arc<Table>>,
    recent: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Quotas {
    /// The quotas of `file` (none without one).
    pub fn new(file: Option<PathBuf>) -> Result<Quotas, QuotaFileError> {
        let quotas = Quotas {
            file,
            ..Quotas::default()
        };
        quotas.reload()?;
        Ok(quotas)
    }

    /// Reads the file again; on an error the quotas in force stay. How
    /// many lines it holds.
    pub fn reload(&self) -> Result<usize, QuotaFileError> {
        let Some(path) = &self.file else {
            return Ok(0);
        };
        let table = read(path)?;
        let n = table.clients.len() + usize::from(table.others != Quota::default());
        *self.table.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
        Ok(n)
    }

    /// `client`'s quotas.
    pub fn of(&self, client: &str) -> Quota {
        let table = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        table.clients.get(client).copied().unwrap_or(table.others)
    }

    /// Counts a submission of `client` at `now`, unless it is over its
    /// submissions-per-minute quota.
    pub fn submission(&self, client: &str, now: Instant) -> Result<(), OverQuota> {
        let Some(most) = self.of(client).submissions_per_minute else {
            return Ok(());
        };
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() > 1024 {
            recent.retain(|_, times| {
                times
                    .back()
                    .is_some_and(|t| now.duration_since(*t) < MINUTE)
            });
        }
        let times = recent.entry(client.to_string()).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            times.pop_front();
        }
        if times.len() >= most as usize {
            let oldest = times.front().copied().unwrap_or(now);
            let wait = MINUTE.saturating_sub(now.duration_since(oldest));
            return Err(OverQuota {
                quota: "submissions-per-minute",
                message: format!(
                    "client {client:?} is over its quota submissions-per-minute ({most}): {} submissions in the last minute; try again in {} s",
                    times.len(),
                    whole_seconds(wait).as_secs()
                ),
                retry_after: whole_seconds(wait),
            });
        }
        times.push_back(now);
        Ok(())
    }
}

/// At least a second, in whole seconds (rounded up).
pub fn whole_seconds(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(Duration::from_secs(1))
}

fn read(path: &Path) -> Result<Table, QuotaFileError> {
    let fail = |line: Option<usize>, message: String| QuotaFileError {
        path: path.display().to_string(),
        line,
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(None, e.to_string()))?;
    parse(&text).map_err(|(line, message)| fail(Some(line), message))
}

/// The table of a quotas file's text, or the line that is wrong and why.
fn parse(text: &str) -> Result<Table, (usize, String)> {
    let mut table = Table::default();
    let mut others = false;
    for (n, line) in text.lines().enumerate() {
        let number = n + 1;
        let line = line.split('#').next().unwrap_or("").trim();
        let mut fields = line.split_whitespace();
        let Some(client) = fields.next() else {
            continue;
        };
        let mut quota = Quota::default();
        for field in fields {
            let Some((name, value)) = field.split_once('=') else {
                return Err((number, format!("{field:?}: expected QUOTA=VALUE")));
            };
            let number_of = |what: &str| -> Result<u64, (usize, String)> {
                match value.parse::<u64>() {
                    Ok(v) if v > 0 => Ok(v),
                    _ => Err((
                        number,
                        format!("{name}: {value:?} is not a {what} of at least 1"),
                    )),
                }
            };
            match name {
                "queued-puzzles" => quota.queued_puzzles = Some(number_of("count")?),
                "stored-mib" => quota.stored_mib = Some(number_of("size in MiB")?),
                "submissions-per-minute" => {
                    let v = number_of("count")?;
                    quota.submissions_per_minute = Some(u32::try_from(v).map_err(|_| {
                        (number, format!("{name}: {value} is more than {}", u32::MAX))
                    })?);
                }
                other => {
                    return Err((
                        number,
                        format!(
                            "{other:?} is no quota: expected queued-puzzles, stored-mib or submissions-per-minute"
                        ),
                    ));
                }
            }
        }
        if client == "*" {
            if std::mem::replace(&mut others, true) {
                return Err((number, "a second `*` line".into()));
            }
            table.others = quota;
        } else if table.clients.insert(client.to_string(), quota).is_some() {
            return Err((number, format!("client {client:?} has a line already")));
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_gives_each_client_its_quotas_and_the_rest_the_star_s() {
        let table = parse(
            "# quotas\n\nalice queued-puzzles=100 stored-mib=5   # big\n* submissions-per-minute=2\nbob\n",
        )
        .unwrap();
        assert_eq!(
            table.clients["alice"],
            Quota {
                queued_puzzles: Some(100),
                stored_mib: Some(5),
                submissions_per_minute: None
            }
        );
        assert_eq!(table.clients["bob"], Quota::default());
        assert_eq!(table.others.submissions_per_minute, Some(2));
    }

    #[test]
    fn a_wrong_line_is_named_with_what_is_wrong() {
        for (text, line, says) in [
            ("alice queued=5", 1, "\"queued\" is no quota"),
            ("\nalice queued-puzzles=0", 2, "at least 1"),
            ("alice stored-mib=x", 1, "stored-mib: \"x\""),
            ("alice stored-mib", 1, "expected QUOTA=VALUE"),
            ("alice\nalice", 2, "has a line already"),
            ("*\n*", 2, "a second `*` line"),
            ("a submissions-per-minute=99999999999", 1, "more than"),
        ] {
            let (n, message) = parse(text).unwrap_err();
            assert_eq!(n, line, "{text}");
            assert!(message.contains(says), "{text}: {message}");
        }
    }

    #[test]
    fn a_job_over_the_queued_or_stored_quota_is_refused_with_a_fitting_wait() {
        let quota = Quota {
            queued_puzzles: Some(1000),
            stored_mib: Some(2),
            submissions_per_minute: None,
        };
        let held = Held {
            queued: 900,
            bytes: 1 << 20,
            rate: 50.0,
            frees_in: Some(Duration::from_millis(1500)),
        };
        assert_eq!(quota.check("a", &held, 100, 1 << 20), Ok(()));
        let over = quota.check("a", &held, 300, 0).unwrap_err();
        assert_eq!(over.quota, "queued-puzzles");
        // 200 too many at 50/s.
        assert_eq!(over.retry_after, Duration::from_secs(4));
        assert!(over.message.contains("(1000)"), "{}", over.message);
        let over = quota.check("a", &held, 1, (1 << 20) + 1).unwrap_err();
        assert_eq!(
            (over.quota, over.retry_after),
            ("stored-mib", Duration::from_secs(2))
        );
        // No pace: a minute; nothing finished: an hour.
        let idle = Held {
            rate: 0.0,
            frees_in: None,
            ..held
        };
        assert_eq!(
            quota.check("a", &idle, 101, 0).unwrap_err().retry_after,
            MINUTE
        );
        assert_eq!(
            quota.check("a", &idle, 1, 2 << 20).unwrap_err().retry_after,
            Duration::from_secs(3600)
        );
        assert_eq!(
            Quota::default().check("a", &idle, u64::MAX / 2, u64::MAX / 2),
            Ok(())
        );
    }

    #[test]
    fn submissions_past_the_quota_wait_until_the_oldest_leaves_the_minute() {
        let dir = std::env::temp_dir().join(format!("colball-quotas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("quotas");
        std::fs::write(&path, "alice submissions-per-minute=2\n").unwrap();
        let quotas = Quotas::new(Some(path.clone())).unwrap();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        quotas.submission("alice", at(0)).unwrap();
        quotas.submission("alice", at(10)).unwrap();
        let over = quotas.submission("alice", at(15)).unwrap_err();
        assert_eq!(over.quota, "submissions-per-minute");
        assert_eq!(over.retry_after, Duration::from_secs(45));
        assert!(over.message.contains("alice"), "{}", over.message);
        // Others have no quota; at 60 s the first has left the minute.
        quotas.submission("bob", at(15)).unwrap();
        quotas.submission("alice", at(60)).unwrap();
        assert!(quotas.submission("alice", at(61)).is_err());
        // Read again: the new quota holds; a bad file leaves it.
        std::fs::write(&path, "alice submissions-per-minute=5\n").unwrap();
        assert_eq!(quotas.reload().unwrap(), 1);
        quotas.submission("alice", at(61)).unwrap();
        std::fs::write(&path, "alice nonsense\n").unwrap();
        let e = quotas.reload().unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(e.to_string().contains("quotas line 1:"), "{e}");
        assert_eq!(quotas.of("alice").submissions_per_minute, Some(5));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
