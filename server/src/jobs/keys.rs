//! Job keys (`JobOptions.key`): a client names the job it is submitting,
//! and can read its results by that name before the submission is
//! acknowledged (what `colball solve --connect` does, to stream results
//! while it uploads). A key is held while the job's submission or run
//! lives.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::Notify;

use super::JobError;

/// How long a read by key waits for the submission to begin.
const KEY_WAIT: Duration = Duration::from_secs(10);

/// The keys of the jobs being submitted or run, by owner and key, and a
/// signal when one is taken.
#[derive(Debug, Default)]
pub struct Keys {
    held: Arc<DashMap<(String, String), i64>>,
    taken: Notify,
}

/// A job's hold on its key: while its submission or its run lives (the
/// upload's guard holds it, then the run); dropping it frees the key.
#[derive(Debug)]
pub struct KeyHold {
    held: Arc<DashMap<(String, String), i64>>,
    key: (String, String),
    seq: i64,
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        self.held.remove_if(&self.key, |_, seq| *seq == self.seq);
    }
}

/// Checks a job key (`JobOptions.key`, `ResultsRequest.key`).
pub fn check_key(key: &str, field: &str) -> Result<(), JobError> {
    let ok = (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(JobError::Invalid(format!(
            "field {field}: 1 to 64 letters, digits, '-' or '_'"
        )))
    }
}

impl Keys {
    /// Names job `seq` of `client` by `key`; refused while another job of
    /// the client holds the key.
    pub fn take(&self, client: &str, key: &str, seq: i64) -> Result<KeyHold, JobError> {
        let named = (client.to_string(), key.to_string());
        match self.held.entry(named.clone()) {
            Entry::Occupied(_) => {
                return Err(JobError::KeyTaken(format!(
                    "field key: a job of this client with key {key:?} is being submitted or run"
                )));
            }
            Entry::Vacant(free) => {
                free.insert(seq);
            }
        }
        self.taken.notify_waiters();
        Ok(KeyHold {
            held: self.held.clone(),
            key: named,
            seq,
        })
    }

    /// The job of `client` holding `key`, waiting up to [`KEY_WAIT`] for a
    /// submission that has not begun yet.
    pub async fn find(&self, client: &str, key: &str) -> Result<i64, JobError> {
        let wanted = (client.to_string(), key.to_string());
        let found = tokio::time::timeout(KEY_WAIT, async {
            loop {
                let notified = self.taken.notified();
                if let Some(seq) = self.held.get(&wanted).map(|s| *s) {
                    return seq;
                }
                notified.await;
            }
        })
        .await;
        found.map_err(|_| Keys::gone(key))
    }

    pub(super) fn gone(key: &str) -> JobError {
        JobError::NotFound(format!("no job with key {key:?} is being submitted or run"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_held_once_per_client_until_its_hold_drops() {
        let keys = Keys::default();
        let hold = keys.take("alice", "k", 1).unwrap();
        assert!(matches!(
            keys.take("alice", "k", 2),
            Err(JobError::KeyTaken(_))
        ));
        let other = keys.take("bob", "k", 3).unwrap();
        assert_eq!(keys.find("alice", "k").await.unwrap(), 1);
        assert_eq!(keys.find("bob", "k").await.unwrap(), 3);
        drop(hold);
        let again = keys.take("alice", "k", 4).unwrap();
        assert_eq!(keys.find("alice", "k").await.unwrap(), 4);
        drop((again, other));
        assert!(check_key("a-b_C9", "key").is_ok());
        for bad in ["", "a b", &"x".repeat(65)] {
            assert!(
                matches!(check_key(bad, "key"), Err(JobError::Invalid(_))),
                "{bad:?}"
            );
        }
    }
}
