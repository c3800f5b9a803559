//! Caches shared by all solver threads of a process: solved puzzles, and
//! distance tables.
//!
//! **Solutions** are keyed by the puzzle's canonical form under all its
//! symmetries ([`crate::symmetry`]), so equivalent puzzles share one entry;
//! the stored path is the canonical puzzle's, mapped back on every hit. The
//! map is a [`DashMap`] (sharded locks, so threads rarely contend); it is
//! bounded in entries and in bytes, and evicts the oldest entries first (an
//! insertion-order queue, touched only on inserts, which follow a search and
//! are rare next to lookups).
//!
//! **Distance tables** are keyed by their canonical target (symmetries that
//! keep the target a target) and bounded in bytes; the least recently used
//! table goes first. A table being built is shared: threads that need it
//! wait for the one build instead of starting their own.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::DashMap;

use crate::board::{Board, Size};
use crate::symmetry::CanonicalKey;
use crate::table::DistanceTable;

/// Bounds of the caches.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Most solved puzzles kept; 0 turns the solution cache off.
    pub max_entries: usize,
    /// Most bytes the solution cache may hold (approximate: keys, paths and
    /// per-entry overhead).
    pub max_bytes: usize,
    /// Most bytes of distance tables kept (a 4x4 table is 15.6 MiB).
    pub max_table_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> CacheConfig {
        CacheConfig {
            max_entries: 1_000_000,
            max_bytes: 128 << 20,
            max_table_bytes: 64 << 20,
        }
    }
}

/// Counters of both caches, for logs and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub entries: u64,
    pub bytes: u64,
    pub table_builds: u64,
    pub table_hits: u64,
    pub table_evictions: u64,
    pub tables: u64,
    pub table_bytes: u64,
}

/// A cached answer in the canonical frame: move numbers, or unreachable.
pub type CachedPath = Option<Arc<[u8]>>;

/// Rough bytes of one entry: key, value, the path and map overhead.
fn entry_bytes(path: &CachedPath) -> usize {
    size_of::<CanonicalKey>() + size_of::<CachedPath>() + 48 + path.as_ref().map_or(0, |p| p.len())
}

/// Solved puzzles, shared by threads.
#[derive(Debug)]
pub struct SolutionCache {
    /// Hashed with foldhash, seeded per process (the keys come from the
    /// puzzles clients send; SipHash cost more than the lookup).
    map: DashMap<CanonicalKey, CachedPath, foldhash::quality::RandomState>,
    order: Mutex<VecDeque<CanonicalKey>>,
    bytes: AtomicUsize,
    max_entries: usize,
    max_bytes: usize,
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
}

impl SolutionCache {
    pub fn new(config: &CacheConfig) -> SolutionCache {
        SolutionCache {
            map: DashMap::default(),
            order: Mutex::new(VecDeque::new()),
            bytes: AtomicUsize::new(0),
            max_entries: config.max_entries,
            max_bytes: config.max_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            inserts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    pub fn enabled(&self) -> bool {
        self.max_entries > 0
    }

    /// The cached answer for `key`, counting a hit or a miss.
    pub fn get(&self, key: &CanonicalKey) -> Option<CachedPath> {
        let found = self.map.get(key).map(|v| v.clone());
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        found
    }

    /// Stores an answer, evicting the oldest entries beyond the bounds.
    pub fn insert(&self, key: CanonicalKey, path: CachedPath) {
        if !self.enabled() {
            return;
        }
        let bytes = entry_bytes(&path);
        if bytes > self.max_bytes {
            return;
        }
        if self.map.insert(key, path).is_some() {
            return; // Another thread stored it first; same answer.
        }
        self.inserts.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        order.push_back(key);
        while order.len() > self.max_entries || self.bytes.load(Relaxed) > self.max_bytes {
            let Some(old) = order.pop_front() else { break };
            if let Some((_, path)) = self.map.remove(&old) {
                self.bytes.fetch_sub(entry_bytes(&path), Relaxed);
                self.evictions.fetch_add(1, Relaxed);
            }
        }
    }

    fn stats(&self, s: &mut CacheStats) {
        s.hits = self.hits.load(Relaxed);
        s.misses = self.misses.load(Relaxed);
        s.inserts = self.inserts.load(Relaxed);
        s.evictions = self.evictions.load(Relaxed);
        s.entries = self.map.len() as u64;
        s.bytes = self.bytes.load(Relaxed) as u64;
    }
}

/// Key of a distance table: its canonical target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TableKey {
    pub size: Size,
    pub target: u32,
}

#[derive(Debug, Default)]
struct Tables {
    slots: HashMap<TableKey, Arc<OnceLock<Arc<DistanceTable>>>>,
    /// Least recently used first.
    recency: VecDeque<TableKey>,
}

/// Distance tables by canonical target, bounded in bytes.
#[derive(Debug)]
pub struct TableCache {
    tables: Mutex<Tables>,
    max_bytes: usize,
    builds: AtomicU64,
    hits: AtomicU64,
    evictions: AtomicU64,
}

impl TableCache {
    pub fn new(config: &CacheConfig) -> TableCache {
        TableCache {
            tables: Mutex::new(Tables::default()),
            max_bytes: config.max_table_bytes,
            builds: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The table for canonical target `target`, if it is built already.
    pub fn get(&self, target: Board) -> Option<Arc<DistanceTable>> {
        let key = TableKey {
            size: target.size(),
            target: target.packed(),
        };
        let mut tables = self.lock();
        let table = tables.slots.get(&key)?.get()?.clone();
        touch(&mut tables.recency, key);
        self.hits.fetch_add(1, Relaxed);
        Some(table)
    }

    /// The table for canonical target `target`, built (with `threads`
    /// threads) if needed. Concurrent callers for one target share one build.
    pub fn get_or_build(&self, target: Board, threads: usize) -> Arc<DistanceTable> {
        let key = TableKey {
            size: target.size(),
            target: target.packed(),
        };
        let slot = {
            let mut tables = self.lock();
            let slot = tables.slots.entry(key).or_default().clone();
            touch(&mut tables.recency, key);
            slot
        };
        let mut built = false;
        let table = slot
            .get_or_init(|| {
                built = true;
                Arc::new(DistanceTable::build(target, threads))
            })
            .clone();
        if built {
            self.builds.fetch_add(1, Relaxed);
            self.evict();
        } else {
            self.hits.fetch_add(1, Relaxed);
        }
        table
    }

    /// Drops least recently used tables while over the byte bound (always
    /// keeping the newest one).
    fn evict(&self) {
        let mut tables = self.lock();
        loop {
            let bytes: usize = tables
                .slots
                .values()
                .filter_map(|s| s.get().map(|t| t.bytes()))
                .sum();
            if bytes <= self.max_bytes || tables.recency.len() <= 1 {
                break;
            }
            let Some(old) = tables.recency.pop_front() else {
                break;
            };
            if tables.slots.remove(&old).is_some() {
                self.evictions.fetch_add(1, Relaxed);
            }
        }
    }

    fn stats(&self, s: &mut CacheStats) {
        let tables = self.lock();
        s.table_builds = self.builds.load(Relaxed);
        s.table_hits = self.hits.load(Relaxed);
        s.table_evictions = self.evictions.load(Relaxed);
        s.tables = tables.slots.values().filter(|s| s.get().is_some()).count() as u64;
        s.table_bytes = tables
            .slots
            .values()
            .filter_map(|s| s.get().map(|t| t.bytes() as u64))
            .sum();
    }
}

fn touch(recency: &mut VecDeque<TableKey>, key: TableKey) {
    if let Some(i) = recency.iter().position(|k| *k == key) {
        recency.remove(i);
    }
    recency.push_back(key);
}

/// Counters of both caches at once.
pub fn stats(solutions: &SolutionCache, tables: &TableCache) -> CacheStats {
    let mut s = CacheStats::default();
    solutions.stats(&mut s);
    tables.stats(&mut s);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u32) -> CanonicalKey {
        CanonicalKey {
            size: Size::new(3, 3).unwrap(),
            start: n,
            target: 0,
        }
    }

    #[test]
    fn bounded_in_entries_oldest_out_first() {
        let cache = SolutionCache::new(&CacheConfig {
            max_entries: 3,
            ..CacheConfig::default()
        });
        for n in 0..5 {
            cache.insert(key(n), Some(Arc::from(vec![1u8, 2])));
        }
        assert!(cache.get(&key(0)).is_none());
        assert!(cache.get(&key(1)).is_none());
        assert_eq!(cache.get(&key(4)), Some(Some(Arc::from(vec![1u8, 2]))));
        let mut s = CacheStats::default();
        cache.stats(&mut s);
        assert_eq!((s.entries, s.evictions, s.hits, s.misses), (3, 2, 1, 2));
    }

    #[test]
    fn bounded_in_bytes() {
        let one = entry_bytes(&Some(Arc::from(vec![0u8; 10])));
        let cache = SolutionCache::new(&CacheConfig {
            max_bytes: 2 * one,
            ..CacheConfig::default()
        });
        for n in 0..4 {
            cache.insert(key(n), Some(Arc::from(vec![0u8; 10])));
        }
        let mut s = CacheStats::default();
        cache.stats(&mut s);
        assert_eq!(s.entries, 2);
        assert!(s.bytes as usize <= 2 * one);
    }

    #[test]
    fn tables_are_built_once_and_evicted_by_bytes() {
        let size = Size::new(3, 3).unwrap();
        let one = DistanceTable::build(Board::filled(size, crate::Colour::Red), 1).bytes();
        let cache = TableCache::new(&CacheConfig {
            max_table_bytes: 2 * one,
            ..CacheConfig::default()
        });
        let boards: Vec<Board> = crate::Colour::ALL.map(|c| Board::filled(size, c)).to_vec();
        let a = cache.get_or_build(boards[0], 1);
        let again = cache.get_or_build(boards[0], 1);
        assert!(Arc::ptr_eq(&a, &again));
        cache.get_or_build(boards[1], 1);
        cache.get_or_build(boards[2], 1);
        let mut s = CacheStats::default();
        cache.stats(&mut s);
        assert_eq!((s.table_builds, s.tables, s.table_evictions), (3, 2, 1));
        assert!(
            cache.get(boards[0]).is_none(),
            "least recently used went first"
        );
    }
}
