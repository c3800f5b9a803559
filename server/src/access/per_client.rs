//! Batches in flight per client.
//!
//! "A client" is the same identity fair sharing uses: the name of the
//! token it presented when client tokens are configured (one per grader,
//! with `--client-tokens-file`), otherwise its IP address as the
//! coordinator sees it, so every process on one machine (or behind one NAT
//! or proxy) shares the count. Behind a load balancer that does not
//! preserve source addresses, and without named tokens, every client shares
//! one count: raise `--max-batches-per-client` there, or give each client a
//! token.
//!
//! The map holds only peers with a batch in flight (an entry goes when its
//! count reaches zero), so it is bounded by the batches admitted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::ServerError;

/// Counts batches in flight per peer IP.
#[derive(Debug)]
pub struct PerClient {
    limit: usize,
    counts: Mutex<HashMap<String, usize>>,
}

/// One batch in flight; gives its place back when dropped.
#[derive(Debug)]
pub struct Slot {
    owner: Arc<PerClient>,
    client: String,
}

impl PerClient {
    /// At most `limit` batches in flight per peer (0: no limit).
    pub fn new(limit: usize) -> Arc<PerClient> {
        Arc::new(PerClient {
            limit,
            counts: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a place for a batch from `client`, or RESOURCE_EXHAUSTED when
    /// it has `limit` already.
    pub fn acquire(self: &Arc<Self>, client: &str) -> Result<Slot, ServerError> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(client.to_string()).or_insert(0);
        if self.limit > 0 && *count >= self.limit {
            return Err(ServerError::TooManyRequests {
                peer: client.to_string(),
                limit: self.limit,
            });
        }
        *count += 1;
        Ok(Slot {
            owner: self.clone(),
            client: client.to_string(),
        })
    }

    /// Batches in flight from `client`.
    pub fn in_flight(&self, client: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        counts.get(client).copied().unwrap_or(0)
    }

    /// Peers with a batch in flight.
    pub fn peers(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self
            .owner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_peer_and_forgets_idle_peers() {
        let limits = PerClient::new(2);
        let (a, b) = ("10.0.0.1", "alice");
        let s1 = limits.acquire(a).unwrap();
        let s2 = limits.acquire(a).unwrap();
        let e = limits.acquire(a).unwrap_err();
        assert!(e.to_string().contains("10.0.0.1"), "{e}");
        assert!(e.to_string().contains("--max-batches-per-client"), "{e}");
        let _other = limits.acquire(b).unwrap();
        assert_eq!(limits.in_flight(a), 2);
        drop(s1);
        let s3 = limits.acquire(a).unwrap();
        drop((s2, s3));
        assert_eq!(limits.in_flight(a), 0);
        assert_eq!(limits.peers(), 1);
    }

    #[test]
    fn zero_means_unlimited() {
        let limits = PerClient::new(0);
        let slots: Vec<_> = (0..100).map(|_| limits.acquire("x").unwrap()).collect();
        assert_eq!(limits.in_flight("x"), 100);
        drop(slots);
        assert_eq!(limits.peers(), 0);
    }
}
