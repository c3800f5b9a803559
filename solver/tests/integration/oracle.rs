//! The fast solver against an independent, obviously-correct oracle.
//!
//! The oracle below shares no code with the solver: it keeps a board as a
//! plain `Vec<u8>` of colour numbers, implements the two moves straight from
//! the puzzle statement, and runs a textbook breadth-first search over a
//! `HashMap`. It is slow and simple on purpose.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

use colball_solver::generate::Generator;
use colball_solver::{Board, Puzzle, Size, Solution, apply_moves};

/// A board as the oracle sees it: row-major colours, 0 = R, 1 = B, 2 = G,
/// in the first `rows * cols` entries (the rest stay 0).
type Cells = [u8; 16];

fn cells_of(board: &Board) -> Cells {
    let mut cells = [0u8; 16];
    let letters = board.rows().concat();
    for (k, c) in letters.chars().enumerate() {
        cells[k] = "RBG".find(c).unwrap() as u8;
    }
    cells
}

/// Every board one move away, per the statement: for each bottom-right cell
/// (i, j), 2 <= i <= N, 2 <= j <= M, rotate the window clockwise or recolour it.
fn neighbours(cells: &Cells, rows: usize, cols: usize) -> Vec<Cells> {
    let mut out = Vec::new();
    for_each_neighbour(cells, rows, cols, |n| out.push(n));
    out
}

/// The four cells of every window, per the statement: for each bottom-right
/// cell (i, j), 2 <= i <= N, 2 <= j <= M, as (top-left, top-right,
/// bottom-right, bottom-left).
fn windows(rows: usize, cols: usize) -> impl Iterator<Item = [usize; 4]> {
    (1..rows).flat_map(move |i| {
        (1..cols).map(move |j| {
            [
                (i - 1) * cols + (j - 1),
                (i - 1) * cols + j,
                i * cols + j,
                i * cols + (j - 1),
            ]
        })
    })
}

fn for_each_neighbour(cells: &Cells, rows: usize, cols: usize, mut out: impl FnMut(Cells)) {
    for [tl, tr, br, bl] in windows(rows, cols) {
        // Rotate clockwise: top-left -> top-right -> bottom-right -> bottom-left.
        let mut rotated = *cells;
        rotated[tr] = cells[tl];
        rotated[br] = cells[tr];
        rotated[bl] = cells[br];
        rotated[tl] = cells[bl];
        out(rotated);
        // Recolour: R -> B -> G -> R.
        let mut recoloured = *cells;
        for k in [tl, tr, br, bl] {
            recoloured[k] = (cells[k] + 1) % 3;
        }
        out(recoloured);
    }
}

/// Distances from `start` to every board reachable from it.
fn distances_from(start: &Cells, rows: usize, cols: usize) -> HashMap<Cells, u32> {
    breadth_first(start, |cells| neighbours(cells, rows, cols))
}

/// Plain breadth-first search from `root`, stepping with `step`.
fn breadth_first(root: &Cells, step: impl Fn(&Cells) -> Vec<Cells>) -> HashMap<Cells, u32> {
    let mut dist = HashMap::new();
    let mut queue = VecDeque::new();
    dist.insert(*root, 0);
    queue.push_back(*root);
    while let Some(cells) = queue.pop_front() {
        let d = dist[&cells];
        for next in step(&cells) {
            if let Entry::Vacant(slot) = dist.entry(next) {
                slot.insert(d + 1);
                queue.push_back(next);
            }
        }
    }
    dist
}

/// The distance from `start` to `target`, searching no deeper than `limit`.
fn distance_within(
    start: &Cells,
    target: &Cells,
    rows: usize,
    cols: usize,
    limit: u32,
) -> Option<u32> {
    let mut dist = HashMap::new();
    let mut queue = VecDeque::new();
    dist.insert(*start, 0u32);
    queue.push_back(*start);
    while let Some(cells) = queue.pop_front() {
        let d = dist[&cells];
        if &cells == target {
            return Some(d);
        }
        if d == limit {
            continue;
        }
        for next in neighbours(&cells, rows, cols) {
            if let Entry::Vacant(slot) = dist.entry(next) {
                slot.insert(d + 1);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Checks one answer of the fast solver: the distance is the oracle's, and
/// the path replays from start to target with exactly that many moves.
fn check(puzzle: &Puzzle, solution: &Solution, expected: Option<u32>) {
    assert_eq!(
        solution.distance().map(|d| d as u32),
        expected,
        "distance for {puzzle:?}"
    );
    if let Some(path) = solution.path() {
        let end = apply_moves(puzzle.start(), path).unwrap();
        assert_eq!(
            end,
            puzzle.target(),
            "path {} does not reach the target",
            solution.notation()
        );
    }
}

fn board_from_cells(size: Size, cells: &Cells) -> Board {
    let rows: Vec<String> = cells[..size.cells()]
        .chunks(size.cols())
        .map(|row| row.iter().map(|&c| ['R', 'B', 'G'][c as usize]).collect())
        .collect();
    Board::from_rows(size, &rows).unwrap()
}

#[test]
fn agrees_with_the_oracle_on_thousands_of_cases_of_every_size_up_to_4x3() {
    let mut g = Generator::new(2024);
    let mut search = colball_solver::BidirSearch::new();
    let mut checked = 0;
    for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
        for _ in 0..2 {
            let start = g.board(size);
            let dist = distances_from(&cells_of(&start), size.rows(), size.cols());
            // Uniform targets (unreachable ones too on 2x2), scrambled ones,
            // and the farthest boards of all.
            let far = *dist.values().max().unwrap();
            let mut targets: Vec<Board> = (0..250).map(|_| g.board(size)).collect();
            targets.extend((0..100).map(|k| g.scrambled(size, k % 12).target()));
            targets.extend(
                dist.iter()
                    .filter(|(_, d)| **d == far)
                    .take(20)
                    .map(|(c, _)| board_from_cells(size, c)),
            );
            for target in targets {
                let puzzle = Puzzle::new(start, target).unwrap();
                // Scrambled targets start from another board; re-anchor them.
                let expected = dist.get(&cells_of(&target)).copied();
                check(&puzzle, &search.solve(&puzzle), expected);
                checked += 1;
            }
        }
    }
    assert!(checked >= 5000, "{checked}");
}

#[test]
fn agrees_with_the_oracle_on_a_sample_of_4x4_cases() {
    let size = Size::new(4, 4).unwrap();
    let mut g = Generator::new(77);
    let mut search = colball_solver::BidirSearch::new();
    for k in 0..40 {
        let puzzle = g.scrambled(size, k % 7);
        let (start, target) = (cells_of(&puzzle.start()), cells_of(&puzzle.target()));
        let expected = distance_within(&start, &target, 4, 4, 6);
        assert!(
            expected.is_some(),
            "a target {k} random moves away is within {k} moves"
        );
        check(&puzzle, &search.solve(&puzzle), expected);
    }
}

/// A full breadth-first search of the 4x4 graph (all 3^16 boards) from one
/// board, plain but with an array instead of a hash map so it fits in a test.
#[test]
fn agrees_with_a_full_4x4_breadth_first_search_at_every_distance() {
    let size = Size::new(4, 4).unwrap();
    let mut g = Generator::new(4242);
    let root = g.board(size);
    let index = |cells: &Cells| {
        cells
            .iter()
            .rev()
            .fold(0usize, |acc, &c| acc * 3 + c as usize)
    };
    let cells_at = |mut i: usize| -> Cells {
        let mut cells = [0u8; 16];
        for c in cells.iter_mut() {
            *c = (i % 3) as u8;
            i /= 3;
        }
        cells
    };
    const UNSEEN: u8 = u8::MAX;
    let mut dist = vec![UNSEEN; 3usize.pow(16)];
    let mut layer = vec![index(&cells_of(&root))];
    dist[layer[0]] = 0;
    let mut depth = 0u8;
    let mut layer_sizes = vec![1usize];
    while !layer.is_empty() {
        let mut next = Vec::new();
        for &i in &layer {
            for_each_neighbour(&cells_at(i), 4, 4, |n| {
                let j = index(&n);
                if dist[j] == UNSEEN {
                    dist[j] = depth + 1;
                    next.push(j);
                }
            });
        }
        depth += 1;
        if !next.is_empty() {
            layer_sizes.push(next.len());
        }
        layer = next;
    }
    // PROBLEM.md: every board is reachable, the farthest lie 12 or 13 away.
    assert_eq!(layer_sizes.iter().sum::<usize>(), 3usize.pow(16));
    assert!(matches!(layer_sizes.len() - 1, 12 | 13), "{layer_sizes:?}");

    // Some boards at every distance, in both directions.
    let mut per_distance = vec![0; layer_sizes.len()];
    let mut i = 0usize;
    let mut step = 7_919usize;
    while per_distance.iter().any(|&n| n < 6) && i < dist.len() {
        let d = dist[i] as usize;
        if per_distance[d] < 6 {
            per_distance[d] += 1;
            let other = board_from_cells(size, &cells_at(i));
            let forward = Puzzle::new(root, other).unwrap();
            check(&forward, &search_once(&forward), Some(d as u32));
        }
        i += step;
        step = step * 31 % 100_003 + 1;
    }
    // Uniform pairs: the distance of most random pairs.
    for _ in 0..150 {
        let other = g.board(size);
        let d = dist[index(&cells_of(&other))] as u32;
        let forward = Puzzle::new(root, other).unwrap();
        check(&forward, &search_once(&forward), Some(d));
    }
}

fn search_once(puzzle: &Puzzle) -> Solution {
    thread_local! {
        static SEARCH: std::cell::RefCell<colball_solver::BidirSearch> = Default::default();
    }
    SEARCH.with(|s| s.borrow_mut().solve(puzzle))
}

#[test]
fn facts_of_the_statement_hold_up_to_3x4() {
    let mut g = Generator::new(5);
    for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
        let start = g.board(size);
        let reached = distances_from(&cells_of(&start), size.rows(), size.cols()).len();
        if size.cells() == 4 {
            assert!(reached <= 12, "2x2 reaches at most 12 boards");
        } else {
            assert_eq!(
                reached,
                size.state_count(),
                "{size} is one connected component"
            );
        }
    }
    // On 2x2 every start reaches exactly 12 boards, and the fast solver says
    // -1 exactly for the other 69.
    let size = Size::new(2, 2).unwrap();
    let mut search = colball_solver::BidirSearch::new();
    let all: Vec<Board> = (0..81)
        .map(|i| {
            let mut cells = [0u8; 16];
            for (k, c) in cells.iter_mut().take(4).enumerate() {
                *c = (i / 3usize.pow(k as u32)) as u8 % 3;
            }
            board_from_cells(size, &cells)
        })
        .collect();
    let rotate = |b: Board| {
        colball_solver::Move::parse("r22")
            .unwrap()
            .apply(b)
            .unwrap()
    };
    for &start in &all {
        let dist = distances_from(&cells_of(&start), 2, 2);
        // 4 rotations x 3 recolours: 12 boards, fewer only when the start
        // looks the same after a half turn (RRRR reaches 3, RBRB reaches 6).
        let symmetric = rotate(rotate(start)) == start;
        assert_eq!(
            dist.len() == 12,
            !symmetric,
            "{start:?} reaches {}",
            dist.len()
        );
        assert!(dist.len() <= 12);
        for &target in &all {
            let puzzle = Puzzle::new(start, target).unwrap();
            check(
                &puzzle,
                &search.solve(&puzzle),
                dist.get(&cells_of(&target)).copied(),
            );
        }
    }
}

/// Every board one move *before* `cells`: the inverse moves, straight from
/// the statement (rotate counter-clockwise, recolour R -> G -> B -> R).
fn predecessors(cells: &Cells, rows: usize, cols: usize) -> Vec<Cells> {
    let mut out = Vec::new();
    for [tl, tr, br, bl] in windows(rows, cols) {
        let mut rotated = *cells;
        rotated[tl] = cells[tr];
        rotated[tr] = cells[br];
        rotated[br] = cells[bl];
        rotated[bl] = cells[tl];
        out.push(rotated);
        let mut recoloured = *cells;
        for k in [tl, tr, br, bl] {
            recoloured[k] = (cells[k] + 2) % 3;
        }
        out.push(recoloured);
    }
    out
}

/// Distances from every board that can reach `target`, to `target`.
fn distances_to(target: &Cells, rows: usize, cols: usize) -> HashMap<Cells, u32> {
    breadth_first(target, |cells| predecessors(cells, rows, cols))
}

#[test]
fn every_strategy_agrees_with_the_oracle_up_to_4x3() {
    use colball_solver::cache::CacheConfig;
    use colball_solver::{Engine, EngineConfig, Solver, Strategy};
    let mut g = Generator::new(31);
    for size in Size::ALL.into_iter().filter(|s| s.cells() <= 12) {
        let target = g.board(size);
        let dist = distances_to(&cells_of(&target), size.rows(), size.cols());
        let starts: Vec<Board> = (0..120)
            .map(|i| {
                if i % 3 == 0 {
                    // Near the target too, where IDA* and auto's IDA* step act.
                    let p = g.scrambled(size, i % 7);
                    board_from_cells(size, &cells_of(&p.start()))
                } else {
                    g.board(size)
                }
            })
            .collect();
        for strategy in Strategy::ALL {
            let engine = Engine::new(EngineConfig {
                strategy,
                cache: CacheConfig {
                    max_entries: 0,
                    ..CacheConfig::default()
                },
                ..EngineConfig::default()
            });
            let mut solver = Solver::new(engine.clone());
            // Announce enough copies for auto to choose the table too.
            let shared: Vec<Puzzle> = starts
                .iter()
                .map(|&s| Puzzle::new(s, target).unwrap())
                .collect();
            if strategy == Strategy::Auto {
                for _ in 0..colball_solver::engine::break_even(size) / 120 + 1 {
                    engine.announce(&shared);
                }
            }
            for p in &shared {
                let answer = solver.solve(p);
                check(
                    p,
                    &answer.solution,
                    dist.get(&cells_of(&p.start())).copied(),
                );
            }
        }
    }
}

#[test]
fn idastar_and_a_4x4_table_agree_on_4x4_samples() {
    use colball_solver::IdaStar;
    use colball_solver::table::DistanceTable;
    let size = Size::new(4, 4).unwrap();
    let mut g = Generator::new(78);
    let mut ida = IdaStar::new();
    for k in 0..30 {
        let puzzle = g.scrambled(size, k % 7);
        let (start, target) = (cells_of(&puzzle.start()), cells_of(&puzzle.target()));
        let expected = distance_within(&start, &target, 4, 4, 6);
        check(&puzzle, &ida.solve(&puzzle), expected);
    }
    // The table against the (oracle-checked) bidirectional search, at every
    // distance a uniform start reaches.
    let target = g.board(size);
    let table = DistanceTable::build(target, 2);
    let mut bidir = colball_solver::BidirSearch::new();
    for _ in 0..150 {
        let p = Puzzle::new(g.board(size), target).unwrap();
        let expected = bidir.solve(&p).distance().map(|d| d as u32);
        check(&p, &table.solve(&p), expected);
    }
}
