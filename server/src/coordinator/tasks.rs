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
//! (A generational arena from a crate would hide its slot numbers, and the
//! table of leaders would then need the 8-byte ids: at a million queued
//! puzzles, the difference between meeting the memory budget and not.)
//!
//! An id is `version << 32 | slot`, and versions start at 1 and skip 0 when
//! they wrap: a valid id is at least 2^32, so the state's other ids
//! (audits, counted from 1) never meet one.

use std::hash::BuildHasher;

use colball_solver::Puzzle;
use hashbrown::HashTable;

/// What the table needs of a task: the puzzle it solves.
pub trait Led {
    fn puzzle(&self) -> &Puzzle;
}

#[derive(Debug)]
struct Slot<T> {
    /// Bumped when the slot is freed, so an old id no longer matches.
    version: u32,
    task: Option<T>,
}

/// See the module documentation.
#[derive(Debug)]
pub struct TaskTable<T> {
    slots: Vec<Slot<T>>,
    /// Slots without a task, reused last freed first.
    free: Vec<u32>,
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
            slots: Vec::new(),
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
        let slots = &self.slots;
        let &slot = self
            .leaders
            .find(self.hash(puzzle), |&s| puzzle_at(slots, s) == Some(puzzle))?;
        Some(join(slot, slots[slot as usize].version))
    }

    /// Adds a task for a puzzle that has none pending, and returns its id.
    ///
    /// # Panics
    /// With 2^32 tasks pending at once.
    pub fn insert(&mut self, task: T) -> u64 {
        debug_assert!(
            self.leader(task.puzzle()).is_none(),
            "a second task for a puzzle"
        );
        let hash = self.hash(task.puzzle());
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize].task = Some(task);
                slot
            }
            None => {
                #[allow(clippy::expect_used)] // 2^32 tasks would take 256 GiB first
                let slot = u32::try_from(self.slots.len()).expect("2^32 pending tasks");
                self.slots.push(Slot {
                    version: 1,
                    task: Some(task),
                });
                slot
            }
        };
        self.len += 1;
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.leaders.insert_unique(hash, slot, |&s| {
            puzzle_at(slots, s).map_or(0, |p| hasher.hash_one(p))
        });
        join(slot, self.slots[slot as usize].version)
    }

    fn slot(&self, id: u64) -> Option<&Slot<T>> {
        let (slot, version) = split(id);
        self.slots.get(slot).filter(|s| s.version == version)
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slot(id)?.task.as_ref()
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        let (slot, version) = split(id);
        let s = self.slots.get_mut(slot).filter(|s| s.version == version)?;
        s.task.as_mut()
    }

    /// Removes a task (done, failed or no longer wanted); its puzzle has
    /// no leader after.
    pub fn remove(&mut self, id: u64) -> Option<T> {
        let hash = self.hash(self.get(id)?.puzzle());
        let (slot, _) = split(id);
        if let Ok(entry) = self.leaders.find_entry(hash, |&s| s as usize == slot) {
            entry.remove();
        }
        let s = &mut self.slots[slot];
        s.version = s.version.checked_add(1).unwrap_or(1);
        self.free.push(slot as u32);
        self.len -= 1;
        s.task.take()
    }

    pub fn clear(&mut self) {
        for id in self.iter().map(|(id, _)| id).collect::<Vec<_>>() {
            self.remove(id);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        self.slots.iter().enumerate().filter_map(|(slot, s)| {
            let task = s.task.as_ref()?;
            Some((join(slot as u32, s.version), task))
        })
    }

    /// The number of leaders (for the state's invariant checks: always
    /// [`Self::len`]).
    #[cfg(test)]
    pub fn leaders(&self) -> usize {
        self.leaders.len()
    }
}

/// The puzzle of the task in slot `s` (the leaders table holds slot
/// numbers and reaches puzzles through here).
fn puzzle_at<T: Led>(slots: &[Slot<T>], s: u32) -> Option<&Puzzle> {
    slots[s as usize].task.as_ref().map(Led::puzzle)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use colball_solver::{Board, Size};
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, PartialEq)]
    struct T(Puzzle, u32);

    impl Led for T {
        fn puzzle(&self) -> &Puzzle {
            &self.0
        }
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
                            let id = table.insert(T(puzzle(p), n));
                            prop_assert!(id >= 1 << 32);
                            prop_assert!(model.insert(id, (p, n)).is_none());
                        }
                    }
                    Op::Remove(i) => {
                        let mut ids: Vec<u64> = model.keys().copied().collect();
                        ids.sort_unstable();
                        if let Some(&id) = ids.get(i % ids.len().max(1)) {
                            let (p, v) = model.remove(&id).unwrap();
                            prop_assert_eq!(table.remove(id), Some(T(puzzle(p), v)));
                            prop_assert_eq!(table.leader(&puzzle(p)), None);
                            gone.push(id);
                        }
                    }
                    Op::Stale(i) => {
                        if let Some(&id) = gone.get(i % gone.len().max(1)) {
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
                    prop_assert_eq!(table.get(id), Some(&T(puzzle(p), v)));
                    prop_assert_eq!(table.leader(&puzzle(p)), Some(id));
                }
                prop_assert_eq!(table.iter().count(), model.len());
            }
        }
    }
}
