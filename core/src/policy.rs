//! The scheduler's policies, each a small type with its own tests, kept
//! apart from the state machine's bookkeeping (as Ballista keeps its
//! `DistributionPolicy` apart from its task states):
//!
//! - [`FairQueue`]: which queued task goes next. Strict priority between
//!   the classes ([`Priority`]); within a class, re-dispatched tasks first,
//!   then round robin between clients, and within one client round robin
//!   between its requests, one puzzle at a time (deficit round robin with a
//!   quantum of one puzzle: every client with work gets the same number of
//!   dispatches, whatever the size of its requests). A request that is
//!   held back (its client is not reading its results) leaves the rotation
//!   until it is released.
//! - [`Credit`]: how many tasks a worker may hold.
//! - [`target_shares`]: the `target_share` hints sent with the tasks.

use std::collections::VecDeque;
use std::fmt;

use colball_proto::v1;
use colball_solver::{Board, Size};
use foldhash::{HashMap, HashMapExt};

/// A request's priority class; higher classes are always dispatched first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Single puzzles and live submissions: `Solve`'s default.
    Interactive = 0,
    /// `SolveBatch`'s and `Grade`'s default.
    Normal = 1,
    /// Bulk work that may wait for everything else.
    Bulk = 2,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Normal, Priority::Bulk];

    /// The wire value, or `default` for `PRIORITY_UNSPECIFIED`; `None` for
    /// a number that names no class.
    pub fn from_wire(value: i32, default: Priority) -> Option<Priority> {
        match v1::Priority::try_from(value).ok()? {
            v1::Priority::Unspecified => Some(default),
            v1::Priority::Interactive => Some(Priority::Interactive),
            v1::Priority::Normal => Some(Priority::Normal),
            v1::Priority::Bulk => Some(Priority::Bulk),
        }
    }

    /// The wire value.
    pub fn to_wire(self) -> v1::Priority {
        match self {
            Priority::Interactive => v1::Priority::Interactive,
            Priority::Normal => v1::Priority::Normal,
            Priority::Bulk => v1::Priority::Bulk,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Normal => "normal",
            Priority::Bulk => "bulk",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Puzzles queued per class, highest first.
pub type Depths = [usize; 3];

/// One request's queued tasks and its place in the rotation.
#[derive(Debug)]
struct RequestQueue {
    client: String,
    priority: Priority,
    tasks: VecDeque<u64>,
    held: bool,
    /// Whether it is in its client's rotation now.
    listed: bool,
}

/// One class: its re-dispatched tasks, and its clients in rotation, each
/// with its requests in rotation.
#[derive(Debug, Default)]
struct Class {
    /// (request, task) pairs.
    retries: VecDeque<(u64, u64)>,
    clients: VecDeque<String>,
    requests: HashMap<String, VecDeque<u64>>,
    /// Tasks queued in this class (retries included, held ones too).
    len: usize,
}

/// See the module documentation. Holds task ids; the state machine owns
/// the tasks.
#[derive(Debug, Default)]
pub struct FairQueue {
    classes: [Class; 3],
    requests: HashMap<u64, RequestQueue>,
}

impl FairQueue {
    pub fn new() -> FairQueue {
        FairQueue::default()
    }

    /// Starts the queue of a request.
    pub fn open(&mut self, request: u64, client: &str, priority: Priority) {
        self.requests.insert(
            request,
            RequestQueue {
                client: client.to_string(),
                priority,
                tasks: VecDeque::new(),
                held: false,
                listed: false,
            },
        );
    }

    /// Makes room for `additional` more tasks of `request` (so a large
    /// request's queue takes what it needs, not up to twice that).
    pub fn reserve(&mut self, request: u64, additional: usize) {
        if let Some(q) = self.requests.get_mut(&request) {
            q.tasks.reserve_exact(additional);
        }
    }

    /// Queues a new task of `request` behind its others.
    pub fn push(&mut self, request: u64, task: u64) {
        let Some(q) = self.requests.get_mut(&request) else {
            return;
        };
        q.tasks.push_back(task);
        self.classes[q.priority as usize].len += 1;
        self.list(request);
    }

    /// Queues a task that was dispatched before (its worker was lost or
    /// gave it back): it goes first in its class, held request or not (it
    /// was admitted long ago and its result is counted already).
    pub fn push_retry(&mut self, request: u64, task: u64) {
        let Some(q) = self.requests.get(&request) else {
            debug_assert!(
                false,
                "a retry for request {request}, whose queue is closed"
            );
            return;
        };
        let class = &mut self.classes[q.priority as usize];
        class.retries.push_back((request, task));
        class.len += 1;
    }

    /// Takes the next task to dispatch, or `None` when nothing is eligible.
    pub fn pop(&mut self) -> Option<u64> {
        for class in 0..3 {
            if let Some((_, task)) = self.classes[class].retries.pop_front() {
                self.classes[class].len -= 1;
                return Some(task);
            }
            while let Some(client) = self.classes[class].clients.pop_front() {
                let Class { requests, .. } = &mut self.classes[class];
                let Some(rotation) = requests.get_mut(&client) else {
                    continue;
                };
                let Some(request) = rotation.pop_front() else {
                    requests.remove(&client);
                    continue;
                };
                let q = self
                    .requests
                    .get_mut(&request)
                    .expect("a listed request has a queue");
                let task = q.tasks.pop_front();
                if q.tasks.is_empty() || q.held {
                    q.listed = false;
                } else {
                    rotation.push_back(request);
                }
                if rotation.is_empty() {
                    requests.remove(&client);
                } else {
                    self.classes[class].clients.push_back(client);
                }
                if let Some(task) = task {
                    self.classes[class].len -= 1;
                    return Some(task);
                }
            }
        }
        None
    }

    /// Holds a request back (its tasks stay queued but are not dispatched)
    /// or releases it.
    pub fn hold(&mut self, request: u64, held: bool) {
        let Some(q) = self.requests.get_mut(&request) else {
            return;
        };
        q.held = held;
        if held {
            self.unlist(request);
        } else {
            self.list(request);
        }
    }

    /// Forgets a request and returns its queued tasks, retries included.
    pub fn close(&mut self, request: u64) -> Vec<u64> {
        self.unlist(request);
        let Some(q) = self.requests.remove(&request) else {
            return Vec::new();
        };
        let class = &mut self.classes[q.priority as usize];
        let mut tasks: Vec<u64> = Vec::from(q.tasks);
        class.retries.retain(|&(r, t)| {
            if r == request {
                tasks.push(t);
            }
            r != request
        });
        class.len -= tasks.len();
        tasks
    }

    /// Whether [`Self::pop`] would return a task.
    pub fn has_eligible(&self) -> bool {
        self.classes
            .iter()
            .any(|c| !c.retries.is_empty() || !c.clients.is_empty())
    }

    /// Queued tasks per class (held requests' included).
    pub fn depths(&self) -> Depths {
        [
            self.classes[0].len,
            self.classes[1].len,
            self.classes[2].len,
        ]
    }

    pub fn len(&self) -> usize {
        self.depths().iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every queued task id (for invariant checks).
    pub fn all_tasks(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self
            .classes
            .iter()
            .flat_map(|c| c.retries.iter().map(|&(_, t)| t))
            .collect();
        for q in self.requests.values() {
            all.extend(q.tasks.iter().copied());
        }
        all
    }

    fn list(&mut self, request: u64) {
        let Some(q) = self.requests.get_mut(&request) else {
            return;
        };
        if q.listed || q.held || q.tasks.is_empty() {
            return;
        }
        q.listed = true;
        let class = &mut self.classes[q.priority as usize];
        let rotation = class.requests.entry(q.client.clone()).or_default();
        if rotation.is_empty() {
            class.clients.push_back(q.client.clone());
        }
        rotation.push_back(request);
    }

    fn unlist(&mut self, request: u64) {
        let Some(q) = self.requests.get_mut(&request) else {
            return;
        };
        if !q.listed {
            return;
        }
        q.listed = false;
        let class = &mut self.classes[q.priority as usize];
        if let Some(rotation) = class.requests.get_mut(&q.client) {
            rotation.retain(|&r| r != request);
            if rotation.is_empty() {
                class.requests.remove(&q.client);
                class.clients.retain(|c| *c != q.client);
            }
        }
    }
}

/// How much work a worker may hold: `per_slot` 4x4 puzzles' worth per
/// solver slot, so each thread has its next puzzle at hand while it solves
/// one. Tasks are weighed by their board ([`weight`]): a slot holds 2 4x4
/// puzzles or 2,048 2x2 ones, about the same time of work, so a worker on
/// small boards is not starved by round trips between tiny batches, and an
/// interactive request never waits behind more than a few milliseconds of
/// queued work per slot. In weight units, computed in 64 bits and capped,
/// so no registration can overflow it.
#[derive(Clone, Copy, Debug)]
pub struct Credit {
    pub per_slot: u32,
    /// The weight of one credit: [`WEIGHT_4X4`] (a slot's credit counts 4x4
    /// puzzles); tests of the scheduler set their puzzles' weight, to count
    /// tasks.
    pub unit: usize,
}

impl Credit {
    /// `per_slot` 4x4 puzzles a slot.
    pub fn new(per_slot: u32) -> Credit {
        Credit {
            per_slot,
            unit: WEIGHT_4X4,
        }
    }

    pub fn of(self, slots: u32) -> usize {
        let credit = u64::from(slots)
            .saturating_mul(u64::from(self.per_slot.max(1)))
            .saturating_mul(self.unit.max(1) as u64);
        usize::try_from(credit).unwrap_or(usize::MAX)
    }

    /// The most tasks a worker of `slots` can hold at once (all of the
    /// lightest weight, plus one over): what it is told to queue for.
    pub fn max_tasks(self, slots: u32) -> usize {
        self.of(slots).saturating_add(1)
    }
}

/// A 4x4 puzzle's weight.
pub const WEIGHT_4X4: usize = 1024;

/// A task's weight in credit units: roughly its search's mean time in
/// steps of a 4x4 puzzle's 1/1024 (docs/PERFORMANCE.md: 2x2 0.3 us, 2x3
/// 1.4 us, 2x4 4 us, 3x3 6 us, 3x4 46 us, 4x4 1.75 ms), at least 1.
pub fn weight(size: Size) -> usize {
    match size.cells() {
        0..=4 => 1,
        5..=6 => 2,
        7..=9 => 4,
        10..=12 => 32,
        _ => WEIGHT_4X4,
    }
}

/// The `target_share` hints of a request's tasks, one per target in order:
/// how many puzzles with its target each of `workers` workers can expect
/// from the request (0 for a target no other task shares; saturated), so
/// that a worker's engine builds a distance table at once where one pays
/// for itself.
///
/// Each target is looked up once, numbering the distinct ones; the counts
/// are then read by number from a small vector. (Counted in a map and
/// looked up again per task, the second lookups were 3% of the
/// coordinator's CPU in the ceiling bench: a request's targets are spread
/// over a table too large for the processor's caches.)
pub fn target_shares(targets: impl ExactSizeIterator<Item = Board>, workers: usize) -> Vec<u16> {
    let workers = workers.max(1) as u64;
    let n = targets.len();
    // Every vector sized once (a request's transient memory is kept by
    // the allocator for the next one).
    let mut numbers: HashMap<Board, u32> = HashMap::with_capacity(n);
    let mut counts: Vec<u32> = Vec::with_capacity(n);
    let mut shares: Vec<u16> = Vec::with_capacity(n);
    let mut of_task: Vec<u32> = Vec::with_capacity(n);
    for t in targets {
        let number = *numbers.entry(t).or_insert_with(|| {
            counts.push(0);
            (counts.len() - 1) as u32
        });
        let count = &mut counts[number as usize];
        *count = count.saturating_add(1);
        of_task.push(number);
    }
    drop(numbers);
    shares.extend(of_task.iter().map(|&number| match counts[number as usize] {
        count if count > 1 => u16::try_from(u64::from(count).div_ceil(workers)).unwrap_or(u16::MAX),
        _ => 0,
    }));
    shares
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut FairQueue) -> Vec<u64> {
        std::iter::from_fn(|| q.pop()).collect()
    }

    #[test]
    fn higher_classes_go_first() {
        let mut q = FairQueue::new();
        q.open(1, "a", Priority::Bulk);
        q.open(2, "a", Priority::Normal);
        q.open(3, "b", Priority::Interactive);
        q.push(1, 10);
        q.push(2, 20);
        q.push(3, 30);
        q.push(1, 11);
        assert_eq!(q.depths(), [1, 1, 2]);
        assert_eq!(drain(&mut q), vec![30, 20, 10, 11]);
        assert!(q.is_empty());
    }

    #[test]
    fn clients_share_a_class_one_puzzle_each_in_turn() {
        let mut q = FairQueue::new();
        q.open(1, "big", Priority::Normal);
        for t in 100..110 {
            q.push(1, t);
        }
        // A second request of the same client, and another client's.
        q.open(2, "big", Priority::Normal);
        q.push(2, 200);
        q.push(2, 201);
        q.open(3, "small", Priority::Normal);
        q.push(3, 300);
        q.push(3, 301);
        let order = drain(&mut q);
        // big/1, small, big/2, small, big/1, big/1...
        assert_eq!(&order[..6], &[100, 300, 200, 301, 101, 201]);
        assert_eq!(order.len(), 14);
    }

    #[test]
    fn retries_go_first_within_their_class() {
        let mut q = FairQueue::new();
        q.open(1, "a", Priority::Normal);
        q.push(1, 1);
        q.push_retry(1, 9);
        q.open(2, "b", Priority::Interactive);
        q.push(2, 2);
        assert_eq!(drain(&mut q), vec![2, 9, 1]);
    }

    #[test]
    fn a_held_request_waits_and_others_pass() {
        let mut q = FairQueue::new();
        q.open(1, "a", Priority::Normal);
        q.open(2, "b", Priority::Normal);
        for t in 0..3 {
            q.push(1, 10 + t);
            q.push(2, 20 + t);
        }
        q.hold(1, true);
        assert_eq!(drain(&mut q), vec![20, 21, 22]);
        assert_eq!(q.len(), 3, "held tasks stay queued");
        q.hold(1, false);
        assert_eq!(drain(&mut q), vec![10, 11, 12]);
    }

    #[test]
    fn closing_a_request_returns_its_tasks() {
        let mut q = FairQueue::new();
        q.open(1, "a", Priority::Bulk);
        q.push(1, 1);
        q.push(1, 2);
        q.open(2, "a", Priority::Bulk);
        q.push(2, 3);
        q.push_retry(1, 4);
        assert_eq!(q.close(1), vec![1, 2, 4]);
        assert_eq!(q.depths(), [0, 0, 1]);
        assert_eq!(drain(&mut q), vec![3]);
    }

    #[test]
    fn credit_cannot_overflow() {
        let credit = Credit::new(2);
        assert_eq!(credit.of(3), 6 * WEIGHT_4X4);
        assert_eq!(credit.of(1 << 31), (1 << 32) * WEIGHT_4X4);
        assert_eq!(credit.of(u32::MAX), 2 * u32::MAX as usize * WEIGHT_4X4);
        assert_eq!(Credit::new(0).of(4), 4 * WEIGHT_4X4);
        let huge = Credit {
            per_slot: u32::MAX,
            unit: usize::MAX,
        };
        assert_eq!(huge.of(u32::MAX), usize::MAX);
        assert_eq!(huge.max_tasks(u32::MAX), usize::MAX);
    }

    #[test]
    fn weights_grow_with_the_board() {
        let weights: Vec<usize> = Size::ALL.into_iter().map(weight).collect();
        assert!(weights.windows(2).all(|w| w[0] <= w[1]), "{weights:?}");
        assert_eq!(weights[0], 1);
        assert_eq!(weight(Size::new(4, 4).unwrap()), WEIGHT_4X4);
        // A slot holds the same two 4x4 puzzles as before weights, and
        // thousands of the smallest boards.
        let credit = Credit::new(2);
        assert_eq!(credit.of(1) / weight(Size::new(4, 4).unwrap()), 2);
        assert_eq!(credit.of(1) / weights[0], 2048);
    }

    #[test]
    fn target_share_spreads_a_shared_target() {
        use colball_solver::{Colour, Size};
        let size = Size::new(3, 3).unwrap();
        let a = Board::filled(size, Colour::Red);
        let b = Board::filled(size, Colour::Blue);
        let shares = target_shares([a, b, a, a, a, a].into_iter(), 2);
        assert_eq!(shares, [3, 0, 3, 3, 3, 3], "a lone target gets no hint");
        let many = target_shares(std::iter::repeat_n(a, 200_000), 1);
        assert_eq!(many[0], u16::MAX, "saturated");
    }
}
