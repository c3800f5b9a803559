//! In-process batch solving: one solver per thread, results in input order.
//!
//! All threads share one [`Engine`]: its solution cache and distance tables
//! serve every thread, and the whole batch is announced to it first so that
//! `auto` can see which targets are worth a table.
//!
//! Worker threads take the next unsolved case from a shared counter, so a
//! slow case never holds up the others, and send results to the caller's
//! thread, which hands them out strictly in input order as soon as every
//! earlier case is done. The channel is bounded, so a slow consumer slows the
//! workers instead of buffering without limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use colball_solver::order::InOrder;
use colball_solver::{Engine, Method, Puzzle, Solution, Solver};

/// One solved case.
#[derive(Clone, Debug)]
pub struct SolvedCase {
    pub index: usize,
    pub solution: Solution,
    /// What answered it: cache, bidir, idastar or table.
    pub method: Method,
    pub elapsed: Duration,
}

/// The number of threads to use when the user did not say: all cores.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Solves `puzzles` on `threads` threads and calls `on_result` once per
/// puzzle, in input order. Stops early (returning the error) if `on_result`
/// fails, for example when the output pipe is closed.
pub fn solve_in_order<E>(
    puzzles: &[Puzzle],
    threads: usize,
    engine: &Arc<Engine>,
    mut on_result: impl FnMut(SolvedCase) -> Result<(), E>,
) -> Result<(), E> {
    let threads = threads.clamp(1, puzzles.len().max(1));
    engine.announce(puzzles);
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::sync_channel::<SolvedCase>(threads * 64);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            let engine = Arc::clone(engine);
            scope.spawn(move || {
                let mut solver = Solver::new(engine);
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(puzzle) = puzzles.get(index) else {
                        break;
                    };
                    let began = Instant::now();
                    let answer = solver.solve(puzzle);
                    let solved = SolvedCase {
                        index,
                        solution: answer.solution,
                        method: answer.method,
                        elapsed: began.elapsed(),
                    };
                    if tx.send(solved).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut pending = InOrder::new();
        // The receiver moves into this loop, so returning drops it: a
        // worker blocked in `send` on a full channel then gets an error
        // and ends, and the scope can join them.
        for solved in rx {
            pending.insert(solved.index as u64, solved);
            while let Some(solved) = pending.pop() {
                if let Err(e) = on_result(solved) {
                    // Stop the workers: they see the counter past the end.
                    next.store(puzzles.len(), Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_solver::generate::Generator;
    use colball_solver::{EngineConfig, Size};

    fn engine() -> Arc<Engine> {
        Engine::new(EngineConfig::default())
    }

    #[test]
    fn results_come_in_input_order_with_any_thread_count() {
        let mut g = Generator::new(3);
        let sizes = [Size::new(2, 2).unwrap(), Size::new(3, 3).unwrap()];
        let puzzles: Vec<_> = (0..200)
            .map(|_| {
                let size = g.pick(&sizes);
                g.uniform(size)
            })
            .collect();
        let mut single = Vec::new();
        solve_in_order(&puzzles, 1, &engine(), |s| {
            single.push((s.index, s.solution.answer()));
            Ok::<_, ()>(())
        })
        .unwrap();
        let mut multi = Vec::new();
        solve_in_order(&puzzles, 3, &engine(), |s| {
            multi.push((s.index, s.solution.answer()));
            Ok::<_, ()>(())
        })
        .unwrap();
        assert_eq!(single, multi);
        assert_eq!(
            multi.iter().map(|r| r.0).collect::<Vec<_>>(),
            (0..200).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_failing_consumer_stops_the_batch() {
        let mut g = Generator::new(4);
        let puzzles: Vec<_> = (0..50)
            .map(|_| g.uniform(Size::new(2, 3).unwrap()))
            .collect();
        let mut seen = 0;
        let result = solve_in_order(&puzzles, 2, &engine(), |_| {
            seen += 1;
            if seen == 5 { Err("closed") } else { Ok(()) }
        });
        assert_eq!(result, Err("closed"));
        assert_eq!(seen, 5);
    }

    /// A consumer that fails while the workers are blocked on a full
    /// channel (`colball solve big.in | head`): the batch still ends.
    #[test]
    fn a_consumer_failing_on_a_full_channel_does_not_hang_the_batch() {
        let mut g = Generator::new(5);
        let threads = 2;
        // Far more than the channel holds (64 per thread).
        let puzzles: Vec<_> = (0..threads * 64 * 8)
            .map(|_| g.uniform(Size::new(2, 2).unwrap()))
            .collect();
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let result = solve_in_order(&puzzles, threads, &engine(), |_| {
                // Time for the workers to fill the channel and block.
                std::thread::sleep(Duration::from_millis(300));
                Err("closed pipe")
            });
            let _ = done.send(result);
        });
        let result = finished
            .recv_timeout(Duration::from_secs(20))
            .expect("the batch hung after its consumer failed");
        assert_eq!(result, Err("closed pipe"));
    }
}
