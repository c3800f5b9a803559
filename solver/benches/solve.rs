//! Criterion benchmarks of the bidirectional search on one thread.
//!
//! `cargo bench -p colball-solver` reports the mean time per puzzle for
//! uniformly random 4x4 pairs, for 4x4 pairs 10+ moves apart, and for
//! uniformly random boards of each size up to 12 cells. `colball bench`
//! prints the same sets with percentiles and memory.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use std::hint::black_box;

use colball_solver::generate::Generator;
use colball_solver::{BidirSearch, Puzzle, Size};
use criterion::{Criterion, criterion_group, criterion_main};

/// Solves the puzzles round-robin, one per iteration.
fn bench_set(c: &mut Criterion, name: &str, puzzles: Vec<Puzzle>) {
    let mut search = BidirSearch::new();
    let mut next = 0;
    c.bench_function(name, |b| {
        b.iter(|| {
            let p = &puzzles[next % puzzles.len()];
            next += 1;
            black_box(search.solve(black_box(p)))
        })
    });
}

fn solve(c: &mut Criterion) {
    let mut g = Generator::new(1);
    let s44 = Size::new(4, 4).unwrap();
    bench_set(c, "4x4 uniform", (0..500).map(|_| g.uniform(s44)).collect());

    let mut search = BidirSearch::new();
    let far: Vec<Puzzle> = std::iter::repeat_with(|| g.uniform(s44))
        .filter(|p| search.solve(p).distance() >= Some(10))
        .take(40)
        .collect();
    bench_set(c, "4x4 10+ moves apart", far);

    let small: Vec<Puzzle> = Size::ALL
        .into_iter()
        .filter(|s| s.cells() <= 12)
        .flat_map(|s| (0..100).map(|_| g.uniform(s)).collect::<Vec<_>>())
        .collect();
    bench_set(c, "<= 12 cells uniform", small);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30);
    targets = solve
}
criterion_main!(benches);
