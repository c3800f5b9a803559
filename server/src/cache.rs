//! A bounded, concurrent cache of solved puzzles.
//!
//! The coordinator answers a puzzle it has solved before without dispatch
//! (workers have their own, symmetry-aware cache in the solver engine).
//! Answers are exact, so entries never go stale; when the
//! cache is full, new answers are simply not kept (memory stays bounded and
//! nothing is evicted under a reader's feet).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use colball_core::VerifiedAnswer;
use colball_solver::Puzzle;
use dashmap::DashMap;

/// Puzzle -> answer, holding at most `capacity` entries.
#[derive(Debug)]
pub struct ResultCache {
    /// foldhash, seeded per process, as the state's books.
    map: DashMap<Puzzle, VerifiedAnswer, foldhash::fast::RandomState>,
    /// Workers whose answers were evicted: later inserts of theirs (still
    /// on their way when they were caught) are refused.
    banned: DashMap<String, (), foldhash::fast::RandomState>,
    /// Entries kept, counted here: `DashMap::len` locks every shard, and
    /// every insert asks.
    len: AtomicUsize,
    capacity: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ResultCache {
    /// A cache of at most `capacity` entries; 0 turns it off.
    pub fn new(capacity: usize) -> ResultCache {
        ResultCache {
            map: DashMap::default(),
            banned: DashMap::default(),
            len: AtomicUsize::new(0),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn get(&self, puzzle: &Puzzle) -> Option<VerifiedAnswer> {
        let found = self.map.get(puzzle).map(|a| a.clone());
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        found
    }

    /// Whether the cache keeps anything (a capacity above 0).
    pub fn is_on(&self) -> bool {
        self.capacity > 0
    }

    /// A second look for a puzzle whose first look ([`Self::get`]) missed:
    /// a hit turns that miss into a hit; a miss counts nothing again.
    pub fn recheck(&self, puzzle: &Puzzle) -> Option<VerifiedAnswer> {
        let found = self.map.get(puzzle).map(|a| a.clone());
        if found.is_some() {
            self.hits.fetch_add(1, Relaxed);
            self.misses.fetch_sub(1, Relaxed);
        }
        found
    }

    /// Lookups that found an answer, and lookups that did not.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }

    /// Keeps `answer` unless the cache is full. Answers reach the cache
    /// only after their sequence was replayed, so both are valid; where
    /// one is kept already, the shorter stands (an audit's correction).
    pub fn insert(&self, puzzle: Puzzle, answer: VerifiedAnswer) {
        if self.banned.contains_key(answer.worker.as_str()) {
            return;
        }
        if let Some(mut kept) = self.map.get_mut(&puzzle) {
            if answer.moves < kept.moves {
                *kept = answer;
            }
            return;
        }
        // Room is taken before the insert, so racing inserts never keep
        // more than `capacity`.
        let room = self
            .len
            .fetch_update(Relaxed, Relaxed, |n| (n < self.capacity).then_some(n + 1))
            .is_ok();
        if room && self.map.insert(puzzle, answer).is_some() {
            // Another insert of the same puzzle came first: one entry.
            self.len.fetch_sub(1, Relaxed);
        }
    }

    /// Forgets every answer that came from `worker` (its shown name): an
    /// audit caught it answering longer than optimal. Returns how many.
    pub fn evict_worker(&self, worker: &str) -> usize {
        // Bounded: one entry per quarantined worker, at most 10,000 kept.
        if self.banned.len() < 10_000 {
            self.banned.insert(worker.to_string(), ());
        }
        let mut evicted = 0;
        self.map.retain(|_, a| {
            let keep = a.worker != worker;
            evicted += usize::from(!keep);
            keep
        });
        self.len.fetch_sub(evicted, Relaxed);
        evicted
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_solver::Size;
    use colball_solver::generate::Generator;

    #[test]
    fn holds_at_most_capacity() {
        let cache = ResultCache::new(2);
        let mut g = Generator::new(1);
        let size = Size::new(3, 3).unwrap();
        let puzzles: Vec<_> = (0..3).map(|_| g.uniform(size)).collect();
        let answer = VerifiedAnswer {
            moves: 1,
            solution: "r22".into(),
            strategy: "bidir".into(),
            worker: "w".into(),
        };
        for p in &puzzles {
            cache.insert(*p, answer.clone());
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(&puzzles[0]), Some(answer.clone()));
        assert_eq!(cache.get(&puzzles[2]), None);
        // A shorter answer replaces a kept one; a longer does not.
        let shorter = VerifiedAnswer {
            moves: 0,
            worker: "v".into(),
            ..answer.clone()
        };
        cache.insert(puzzles[0], shorter.clone());
        cache.insert(puzzles[0], answer.clone());
        assert_eq!(cache.get(&puzzles[0]), Some(shorter));
        assert_eq!(cache.evict_worker("w"), 1);
        assert_eq!(cache.len(), 1);
        // A caught worker's answer still on its way is not kept.
        cache.insert(puzzles[2], answer.clone());
        assert_eq!(cache.get(&puzzles[2]), None);
        // The evicted entry's room is free again, and only its room.
        let other = VerifiedAnswer {
            worker: "x".into(),
            ..answer.clone()
        };
        cache.insert(puzzles[1], other.clone());
        assert_eq!(cache.get(&puzzles[1]), Some(other.clone()));
        cache.insert(g.uniform(size), other);
        assert_eq!(cache.len(), 2);
    }
}
