//! Input order from completion order: the one reorder buffer behind every
//! `ordered` output (the coordinator's `SolveBatch` with `ordered`, a job's
//! results followed in input order, and the client's in-process solving).
//!
//! Items arrive numbered by their input index, in any order; [`InOrder`]
//! holds those that came early and gives them out from the next index due
//! on. It holds only what it must: an item is let go the moment every one
//! before it has been.
//!
//! ```
//! use colball_solver::order::InOrder;
//!
//! let mut order = InOrder::new();
//! order.insert(1, "b");
//! assert_eq!(order.pop(), None); // 0 is not here yet
//! order.insert(0, "a");
//! assert_eq!(order.ready().collect::<Vec<_>>(), ["a", "b"]);
//! assert_eq!(order.next(), 2);
//! ```

use std::collections::BTreeMap;

/// A reorder buffer: items by index, given out in index order from
/// [`Self::next`].
#[derive(Clone, Debug)]
pub struct InOrder<T> {
    next: u64,
    early: BTreeMap<u64, T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder::new()
    }
}

impl<T> InOrder<T> {
    /// From index 0.
    pub fn new() -> InOrder<T> {
        InOrder::starting_at(0)
    }

    /// From `next` (what comes before it is taken as given out).
    pub fn starting_at(next: u64) -> InOrder<T> {
        InOrder {
            next,
            early: BTreeMap::new(),
        }
    }

    /// The index due next.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// How many items are held (came before their turn).
    pub fn held(&self) -> usize {
        self.early.len()
    }

    /// Holds `item` for its turn. An index already given out, or already
    /// held, is ignored (the first item for an index wins): `false`.
    pub fn insert(&mut self, index: u64, item: T) -> bool {
        if index < self.next || self.early.contains_key(&index) {
            return false;
        }
        self.early.insert(index, item);
        true
    }

    /// The item due next, if it is here.
    pub fn pop(&mut self) -> Option<T> {
        let item = self.early.remove(&self.next)?;
        self.next += 1;
        Some(item)
    }

    /// Every item whose turn has come, in order.
    pub fn ready(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(|| self.pop())
    }

    /// Lets go of the held item furthest ahead (its index and itself), for
    /// a holder with a bound that can fetch it again later.
    pub fn pop_furthest(&mut self) -> Option<(u64, T)> {
        self.early.pop_last()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever the arrival order and the duplicates, every index comes
        /// out once, in order, and nothing is held that could go out.
        #[test]
        fn any_arrival_order_comes_out_in_input_order(
            order in Just((0..200u64).collect::<Vec<_>>()).prop_shuffle(),
            dups in proptest::collection::vec(0..200u64, 0..50),
        ) {
            let mut buffer = InOrder::new();
            let mut out = Vec::new();
            let mut seen = std::collections::BTreeSet::new();
            let arrivals = order.iter().copied().chain(dups.iter().copied());
            for (step, index) in arrivals.enumerate() {
                prop_assert_eq!(buffer.insert(index, (index, step)), seen.insert(index));
                out.extend(buffer.ready());
                prop_assert!(!buffer.early.contains_key(&buffer.next()));
                // Held and given out: every distinct index seen, once.
                prop_assert_eq!(buffer.held() + out.len(), seen.len());
            }
            let indices: Vec<u64> = out.iter().map(|&(i, _)| i).collect();
            prop_assert_eq!(indices, (0..200).collect::<Vec<_>>());
            // The first arrival of an index is the one given out.
            for &(index, step) in &out {
                prop_assert_eq!(order[step], index);
            }
        }
    }

    #[test]
    fn a_bounded_holder_lets_the_furthest_go() {
        let mut buffer = InOrder::starting_at(5);
        assert!(!buffer.insert(4, 'x'), "already given out");
        for (i, c) in [(7, 'c'), (9, 'e'), (6, 'b')] {
            assert!(buffer.insert(i, c));
        }
        assert!(!buffer.insert(7, 'z'), "already held");
        assert_eq!(buffer.pop_furthest(), Some((9, 'e')));
        assert_eq!(buffer.pop(), None);
        buffer.insert(5, 'a');
        assert_eq!(buffer.ready().collect::<String>(), "abc");
        assert_eq!((buffer.next(), buffer.held()), (8, 0));
    }
}
