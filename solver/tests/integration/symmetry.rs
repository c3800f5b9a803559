//! Brute force over random puzzles: every symmetry the cache uses keeps the
//! answer, and paths mapped between frames solve their puzzles. The
//! transformations that look like symmetries but are not (a mirror alone, a
//! colour swap alone) are shown to change some answers.

use colball_solver::generate::Generator;
use colball_solver::symmetry::Symmetry;
use colball_solver::{
    BidirSearch, Board, Engine, EngineConfig, Method, MoveTable, Puzzle, Size, Solver, apply_moves,
};

fn indices(size: Size, solution: &colball_solver::Solution) -> Vec<u8> {
    solution
        .path()
        .unwrap()
        .iter()
        .map(|&m| MoveTable::index_of(size, m).unwrap() as u8)
        .collect()
}

fn moves(size: Size, path: &[u8]) -> Vec<colball_solver::Move> {
    path.iter()
        .map(|&i| MoveTable::move_at(size, i as usize))
        .collect()
}

#[test]
fn every_symmetry_keeps_the_distance_and_paths_map_both_ways() {
    let mut g = Generator::new(100);
    let mut search = BidirSearch::new();
    let mut checked = 0;
    for size in Size::ALL {
        let pairs = if size.cells() == 16 { 8 } else { 60 };
        for _ in 0..pairs {
            let p = g.uniform(size);
            let original = search.solve(&p);
            for sym in Symmetry::all() {
                let q = sym.puzzle(&p);
                let turned = search.solve(&q);
                assert_eq!(turned.distance(), original.distance(), "{sym:?} on {p:?}");
                if original.path().is_none() {
                    continue;
                }
                // The transformed puzzle's path, mapped back, solves the original...
                let back = moves(size, &sym.path_back(size, &indices(q.size(), &turned)));
                assert_eq!(apply_moves(p.start(), &back).unwrap(), p.target());
                // ...and the original's path, mapped forward, solves the transformed one.
                let fwd = moves(q.size(), &sym.path_forward(size, &indices(size, &original)));
                assert_eq!(apply_moves(q.start(), &fwd).unwrap(), q.target());
                checked += 1;
            }
        }
    }
    assert!(checked > 10_000, "{checked}");
}

#[test]
fn cached_paths_mapped_back_solve_every_equivalent_puzzle() {
    let mut g = Generator::new(101);
    let engine = Engine::new(EngineConfig::default());
    let mut solver = Solver::new(engine.clone());
    for size in Size::ALL.into_iter().filter(|s| s.cells() >= 9) {
        for _ in 0..10 {
            let p = g.uniform(size);
            let first = solver.solve(&p);
            for sym in Symmetry::all() {
                let q = sym.puzzle(&p);
                let a = solver.solve(&q);
                assert_eq!(a.method, Method::Cache);
                assert_eq!(a.solution.distance(), first.solution.distance());
                let path = a.solution.path().unwrap();
                assert_eq!(apply_moves(q.start(), path).unwrap(), q.target());
            }
        }
    }
    let stats = engine.stats();
    assert_eq!(stats.hits, 4 * 10 * 24, "{stats:?}");
}

/// A mirror alone turns clockwise into counter-clockwise, and a colour swap
/// alone turns each recolour into its inverse: neither keeps distances.
#[test]
fn a_mirror_or_a_colour_swap_alone_is_not_a_symmetry() {
    let size = Size::new(3, 3).unwrap();
    let mirror = |b: Board| {
        let rows: Vec<String> = b.rows().iter().map(|r| r.chars().rev().collect()).collect();
        Board::from_rows(size, &rows).unwrap()
    };
    let swap = |b: Board| {
        let rows: Vec<String> = b
            .rows()
            .iter()
            .map(|r| {
                r.chars()
                    .map(|c| match c {
                        'B' => 'G',
                        'G' => 'B',
                        c => c,
                    })
                    .collect()
            })
            .collect();
        Board::from_rows(size, &rows).unwrap()
    };
    let mut g = Generator::new(102);
    let mut search = BidirSearch::new();
    let (mut mirror_differs, mut swap_differs) = (false, false);
    for _ in 0..200 {
        let p = g.uniform(size);
        let d = search.solve(&p).distance();
        let m = Puzzle::new(mirror(p.start()), mirror(p.target())).unwrap();
        let s = Puzzle::new(swap(p.start()), swap(p.target())).unwrap();
        mirror_differs |= search.solve(&m).distance() != d;
        swap_differs |= search.solve(&s).distance() != d;
    }
    assert!(mirror_differs && swap_differs);
}
