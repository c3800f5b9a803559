//! A bounded, in-`cargo test` stand-in for cargo-fuzz on the wire side:
//! arbitrary and mutated bytes decoded as the request messages, then
//! converted to solver puzzles. Nothing panics or hangs, and every invalid
//! puzzle is named by its id and a field.
//!
//! The seed corpus in `tests/corpus/` (encoded requests: valid, malformed,
//! duplicate ids, an empty batch, worker messages) is replayed as-is and
//! mutated with byte flips, truncations, insertions and splices.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use colball_mutate as mutate;

use std::path::PathBuf;

use colball_proto::prost::Message;
use colball_proto::v1;
use colball_proto::{InvalidBatch, InvalidPuzzle, MAX_ID_BYTES, batch_from_wire, puzzle_from_wire};
use mutate::{mutate, mutation};
use proptest::prelude::*;

fn corpus() -> Vec<(String, Vec<u8>)> {
    mutate::corpus(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"),
        8,
    )
}

/// Checks one conversion error against the puzzle it came from.
fn check_error(p: &v1::Puzzle, e: &InvalidPuzzle) -> Result<(), TestCaseError> {
    prop_assert!(
        ["id", "start", "target"].contains(&e.field),
        "field {}",
        e.field
    );
    if p.id.len() > MAX_ID_BYTES {
        prop_assert_eq!(e.field, "id");
        let quoted = e.id.strip_suffix("...").unwrap();
        prop_assert!(p.id.starts_with(quoted) && quoted.len() <= 32);
    } else {
        prop_assert_eq!(&e.id, &p.id);
    }
    let text = e.to_string();
    prop_assert!(
        text.starts_with(&format!("puzzle {:?}: field {}: ", e.id, e.field)),
        "{}",
        text
    );
    prop_assert!(text.len() < 600, "{} bytes of message", text.len());
    Ok(())
}

/// Decodes `bytes` as every message a peer can send and converts what
/// decodes. Returns how many puzzles were converted.
fn exercise(bytes: &[u8]) -> Result<usize, TestCaseError> {
    let mut converted = 0;
    if let Ok(batch) = v1::SolveBatchRequest::decode(bytes) {
        match batch_from_wire(&batch.puzzles) {
            Err(InvalidBatch::Empty) => prop_assert!(batch.puzzles.is_empty()),
            Ok(results) => {
                prop_assert_eq!(results.len(), batch.puzzles.len());
                for (i, (p, r)) in batch.puzzles.iter().zip(&results).enumerate() {
                    converted += 1;
                    match r {
                        Ok(puzzle) => {
                            prop_assert_eq!(&puzzle.start().rows(), &p.start);
                            prop_assert_eq!(&puzzle.target().rows(), &p.target);
                            // A valid non-empty id is the first of its kind.
                            if !p.id.is_empty() {
                                prop_assert!(!batch.puzzles[..i].iter().any(|q| q.id == p.id));
                            }
                        }
                        Err(e) => check_error(p, e)?,
                    }
                }
            }
        }
    }
    if let Ok(one) = v1::SolveRequest::decode(bytes) {
        if let Some(p) = &one.puzzle {
            converted += 1;
            if let Err(e) = puzzle_from_wire(p) {
                check_error(p, &e)?;
            }
        }
    }
    if let Ok(m) = v1::CoordinatorMessage::decode(bytes) {
        if let Some(v1::coordinator_message::Kind::Assign(a)) = m.kind {
            for t in &a.tasks {
                converted += 1;
                // Any bytes: a puzzle or an error naming the task.
                if let Err(e) = colball_proto::work::task_puzzle(t) {
                    prop_assert!(
                        e.to_string().contains(&format!("task {}", t.task_id)),
                        "{}",
                        e
                    );
                }
            }
        }
    }
    let _ = v1::WorkerMessage::decode(bytes);
    Ok(converted)
}

#[test]
fn the_corpus_replays_as_expected() {
    let corpus = corpus();
    for (name, bytes) in &corpus {
        exercise(bytes).unwrap();
        if name.starts_with("batch-") {
            let batch = v1::SolveBatchRequest::decode(bytes.as_slice()).unwrap();
            let results = batch_from_wire(&batch.puzzles);
            let fields: Vec<_> = match &results {
                Err(e) => vec![e.to_string()],
                Ok(r) => r
                    .iter()
                    .map(|r| {
                        r.as_ref()
                            .map_or_else(|e| e.field.to_string(), |_| "ok".into())
                    })
                    .collect(),
            };
            let expected: &[&str] = match name.as_str() {
                "batch-valid.bin" => &["ok", "ok"],
                "batch-bad-letter.bin" => &["start", "ok"],
                "batch-size-mismatch.bin" => &["target"],
                "batch-ragged.bin" => &["start"],
                "batch-duplicate-ids.bin" => &["ok", "id", "ok", "ok"],
                "batch-missing-target.bin" => &["target"],
                "batch-long-id.bin" => &["id"],
                "batch-empty.bin" => {
                    &["field puzzles: the batch is empty; send at least one puzzle"]
                }
                other => panic!("no expectation for corpus file {other}"),
            };
            assert_eq!(fields, expected, "{name}");
        }
    }
}

/// A wire puzzle built to reach every check: ids of every length class,
/// boards of plausible and absurd shapes.
fn wire_puzzle() -> impl Strategy<Value = v1::Puzzle> {
    let id = prop_oneof![
        Just(String::new()),
        "[a-z0-9]{1,4}",
        ".{0,8}",
        (MAX_ID_BYTES - 2..MAX_ID_BYTES + 3).prop_map(|n| "é".repeat(n / 2)),
    ];
    let row = prop_oneof![
        4 => "[RGB]{2,4}",
        1 => "[RGBrgbX é]{0,6}",
        1 => (0usize..40).prop_map(|n| "R".repeat(n)),
    ];
    let board = prop::collection::vec(row, 0..7);
    (id, board.clone(), board).prop_map(|(id, start, target)| v1::Puzzle { id, start, target })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutated_corpus_never_panics(
        seed in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let corpus = corpus();
        let bytes = mutate(&corpus, seed, &mutations);
        exercise(&bytes)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        exercise(&bytes)?;
    }

    #[test]
    fn wire_puzzles_convert_or_name_id_and_field(
        puzzles in prop::collection::vec(wire_puzzle(), 1..6),
    ) {
        let request = v1::SolveBatchRequest {
            puzzles,
            ordered: false,
            priority: 0,
        };
        // Through the encoder and decoder too: what a peer would send.
        let bytes = request.encode_to_vec();
        let converted = exercise(&bytes)?;
        prop_assert!(converted >= request.puzzles.len());
    }
}
