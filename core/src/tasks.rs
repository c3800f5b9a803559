//! The coordinator's table of pending tasks, one per distinct puzzle.
//!
//! Tasks live in numbered slots that carry a version: a task's id is its
//! slot's version and number, so tasks admitted together sit together in
//! memory, a freed slot is reused, and a stale id (a report of a task long
//! gone whose slot now holds another) finds nothing. Beside them, the
//! leaders: for each pending puzzle, the slot of its task, in a hash table
//! that stores only slot numbers (4 bytes) and compares puzzles through the
//! slots. A task is the leader of its puzzle for its whole life, so the two
//! always hold the same tasks.
//!
//! Memory, at a million queued puzzles (docs/PERFORMANCE.md):
//! - The slots grow a chunk of [`CHUNK`] at a time, never copied. A single
//!   vector grew by doubling: its step from 524,288 to 1,048,576 slots
//!   took a new 75.5 MB block and left the 37.7 MB one before it to the
//!   allocator, which kept its pages.
//! - A live task keeps its slot's version itself ([`Led::version`]), in
//!   room its fields leave, and a free slot's next version waits in the
//!   free list: a slot is the task and nothing more (64 bytes, where a
//!   version beside it took 72).
//! - A generational arena from a crate would hide its slot numbers, and the
//!   table of leaders would then need the 8-byte ids.
//!
//! An id is `version << 32 | slot`, and versions start at 1 and skip 0 when
//! they wrap: a valid id is at least 2^32, so the state's other ids
//! (audits, counted from 1) never meet one.

use std::hash::BuildHasher;

use colball_solver::Puzzle;
use hashbrown::HashTable;

/// What the table needs of a task: the puzzle it solves, and room for its
/// slot's version (set by the table; whatever a task is made with is
/// overwritten when it is inserted).
pub trait Led {
    fn puzzle(&self) -> &Puzzle;
    fn version(&self) -> u32;
    fn set_version(&mut self, version: u32);
}

/// Slots per chunk (256 KiB of 64-byte tasks; a few under test, so that
/// the property test crosses chunks).
const CHUNK: usize = if cfg!(test) { 16 } else { 4096 };

/// See the module documentation.
#[derive(Debug)]
pub struct TaskTable<T> {
    /// Slot `s` is `chunks[s / CHUNK][s % CHUNK]`; every chunk is full
    /// length, and the slots below `used` have been handed out.
    chunks: Vec<Box<[Option<T>]>>,
    used: usize,
    /// Slots without a task and the version their next task takes, reused
    /// last freed first.
    free: Vec<(u32, u32)>,
    len: usize,
    leaders: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

fn join(slot: u32, version: u32) -> u64 {
    u64::from(version) << 32 | u64::from(slot)
}

impl<T: Led> TaskTable<T> {
    pub fn new() -> Self {
        TaskTable {
            chunks: Vec::new(),
            used: 0,
            free: Vec::new(),
            len: 0,
            leaders: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn hash(&self, puzzle: &Puzzle) -> u64 {
        self.hasher.hash_one(puzzle)
    }

    /// The task of `puzzle`, if one is pending.
    pub fn leader(&self, puzzle: &Puzzle) -> Option<u64> {
        let chunks = &self.chunks;
        let &slot = self
            .leaders
            .find(self.hash(puzzle), |&s| puzzle_at(chunks, s) == Some(puzzle))?;
        let task = task_at(chunks, slot as usize)?;
        Some(join(slot, task.version()))
    }

    /// Adds a task for a puzzle that has none pending, and returns its id.
    ///
    /// # Panics
    /// With 2^32 tasks pending at once.
    pub fn insert(&mut self, mut task: T) -> u64 {
        debug_assert!(
            self.leader(task.puzzle()).is_none(),
            "a second task for a puzzle"
        );
        let hash = self.hash(task.puzzle());
        let (slot, version) = self.free.pop().unwrap_or_else(|| {
            #[allow(clippy::expect_used)] // 2^32 tasks would take 256 GiB first
            let slot = u32::try_from(self.used).expect("2^32 pending tasks");
            if self.used == self.chunks.len() * CHUNK {
                self.chunks.push((0..CHUNK).map(|_| None).collect());
            }
            self.used += 1;
            (slot, 1)
        });
        task.set_version(version);
        let s = slot as usize;
        self.chunks[s / CHUNK][s % CHUNK] = Some(task);
        self.len += 1;
        let (chunks, hasher) = (&self.chunks, &self.hasher);
        self.leaders.insert_unique(hash, slot, |&s| {
            puzzle_at(chunks, s).map_or(0, |p| hasher.hash_one(p))
        });
        join(slot, version)
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        let (slot, version) = split(id);
        task_at(&self.chunks, slot).filter(|t| t.version() == version)
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (slot, version) = split(id);
        let task = self.chunks.get_mut(slot / CHUNK)?[slot % CHUNK].as_mut()?;
        (task.version() == version).then_some(task)
    }

    /// Reads what removing task `id` will read (its slot and its puzzle's
    /// leader entry), changing nothing: see [`super::state`]'s `touch`.
    pub fn touch(&self, id: u64) {
        let Some(task) = self.get(id) else { return };
        let slot = split(id).0;
        let hash = self.hash(task.puzzle());
        std::hint::black_box(self.leaders.find(hash, |&s| s as usize == slot));
    }

    /// Removes a task (done, failed or no longer wanted); its puzzle has
    /// no leader after.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let hash = self.hash(self.get(id)?.puzzle());
        let (slot, version) = split(id);
        if let Ok(entry) = self.leaders.find_entry(hash, |&s| s as usize == slot) {
            entry.remove();
        }
        self.free
            .push((slot as u32, version.checked_add(1).unwrap_or(1)));
        self.len -= 1;
        self.chunks[slot / CHUNK][slot % CHUNK].take()
    }

    pub fn clear(&mut self) {
        for id in self.iter().map(|(id, _)| id).collect::<Vec<_>>() {
            self.remove(id);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .enumerate()
            .filter_map(|(slot, task)| {
                let task = task.as_ref()?;
                Some((join(slot as u32, task.version()), task))
            })
    }

    /// The number of leaders (for the state's invariant checks: always
    /// [`Self::len`]).
    #[cfg(test)]
    pub fn leaders(&self) -> usize {
        self.leaders.len()
    }
}

/// The task in slot `s`, if any.
fn task_at<T>(chunks: &[Box<[Option<T>]>], s: usize) -> Option<&T> {
    chunks.get(s / CHUNK)?[s % CHUNK].as_ref()
}

/// The puzzle of the task in slot `s` (the leaders table holds slot
/// numbers and reaches puzzles through here).
fn puzzle_at<T: Led>(chunks: &[Box<[Option<T>]>], s: u32) -> Option<&Puzzle> {
    task_at(chunks, s as usize).map(Led::puzzle)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use colball_solver::{Board, Size};
    use proptest::prelude::*;

    use super::*;

    /// A puzzle, a number to tell tasks apart, and the slot's version.
    #[derive(Debug)]
    struct T(Puzzle, u32, u32);

    impl Led for T {
        fn puzzle(&self) -> &Puzzle {
            &self.0
        }
        fn version(&self) -> u32 {
            self.2
        }
        fn set_version(&mut self, version: u32) {
            self.2 = version;
        }
    }

    fn task(t: Option<&T>) -> Option<(Puzzle, u32)> {
        t.map(|t| (t.0, t.1))
    }

    fn puzzle(n: u8) -> Puzzle {
        let size = Size::new(2, 2).unwrap();
        // Four cells of three colours: x's base-3 digits, two bits each.
        let board = |x: u8| {
            let cells = (0..4).fold(0, |w, i| w | (u32::from(x) / 3u32.pow(i) % 3) << (2 * i));
            Board::from_packed(size, cells).unwrap()
        };
        Puzzle::new(board(n), board(n / 81)).unwrap()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8),
        Remove(usize),
        /// A report of an id that was once valid.
        Stale(usize),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(Op::Insert),
            3 => any::<usize>().prop_map(Op::Remove),
            2 => any::<usize>().prop_map(Op::Stale),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// Against a plain map of ids: every live id finds its task and
        /// its puzzle's leader is it; a removed id finds nothing, even
        /// after its slot is reused; ids are never 0 and never below 2^32.
        #[test]
        fn the_table_agrees_with_a_map_of_ids(ops in prop::collection::vec(op(), 1..200)) {
            let mut table = TaskTable::new();
            let mut model: HashMap<u64, (u8, u32)> = HashMap::new();
            let mut gone: Vec<u64> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                let n = n as u32;
                match op {
                    Op::Insert(p) => {
                        if let Some(id) = table.leader(&puzzle(p)) {
                            let (q, _) = model[&id];
                            prop_assert_eq!(q, p);
                        } else {
                            prop_assert!(model.values().all(|(q, _)| *q != p));
                            let id = table.insert(T(puzzle(p), n, 0));
                            prop_assert!(id >= 1 << 32);
                            prop_assert_eq!(table.get(id).map(|t| t.2), Some((id >> 32) as u32));
                            prop_assert!(model.insert(id, (p, n)).is_none());
                        }
                    }
                    Op::Remove(i) => {
                        let mut ids: Vec<u64> = model.keys().copied().collect();
                        ids.sort_unstable();
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            // Touched first, as results are: it changes
                            // nothing (checked after every step).
                            table.touch(id);
                            let (p, v) = model.remove(&id).unwrap();
                            prop_assert_eq!(task(table.remove(id).as_ref()), Some((puzzle(p), v)));
                            prop_assert_eq!(table.leader(&puzzle(p)), None);
                            gone.push(id);
                        }
                    }
                    Op::Stale(i) => {
                        if let Some(&id) = gone.get(i % gone.len().max(1)) {
                            table.touch(id);
                            prop_assert!(table.get(id).is_none());
                            prop_assert!(table.remove(id).is_none());
                        }
                    }
                    Op::Clear => {
                        table.clear();
                        gone.extend(model.drain().map(|(id, _)| id));
                    }
                }
                prop_assert_eq!(table.len(), model.len());
                prop_assert_eq!(table.leaders(), model.len());
                for (&id, &(p, v)) in &model {
                    prop_assert_eq!(task(table.get(id)), Some((puzzle(p), v)));
                    prop_assert_eq!(table.leader(&puzzle(p)), Some(id));
                }
                prop_assert_eq!(table.iter().count(), model.len());
            }
        }
    }
}
