//! The gRPC protocol of the colball cluster.
//!
//! The `.proto` files live in `colball/v1/` beside this crate and are
//! compiled at build time with a pure-Rust compiler (protox), so no `protoc`
//! is needed. This crate re-exports the generated messages, clients and
//! servers as [`v1`], and holds the conversions between wire messages and
//! solver types: a missing or malformed field is an [`InvalidPuzzle`] that
//! names the puzzle id and the field, never a panic.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use colball_solver::board::BoardError;
use colball_solver::{Board, Puzzle};
use ecow::EcoString;
use thiserror::Error;

#[cfg(feature = "grpc")]
pub mod auth;
pub mod egress;
pub mod grade;
pub mod ingest;
#[cfg(feature = "grpc")]
pub mod reason;
#[cfg(feature = "grpc")]
pub mod tls;
pub mod work;

#[cfg(feature = "grpc")]
pub use auth::Secret;
/// The protobuf runtime the messages are generated for (to encode and
/// decode them without depending on prost separately).
pub use prost;

/// Generated code for package `colball.v1`.
#[allow(missing_docs, missing_debug_implementations, unused_qualifications)]
#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/colball.v1.rs"));
}

/// The encoded `FileDescriptorSet` of every colball `.proto` file, for gRPC
/// server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/colball_descriptor.bin"));

/// The worker protocol version this build speaks. A worker registering with
/// another version is refused (FAILED_PRECONDITION). Bump it on any change
/// of the worker-facing messages that an older peer would misread.
///
/// Version 2 packs the worker path ([`work`]): tasks carry packed boards and
/// no client ids, answers carry move indices, results travel many to a
/// message.
pub const PROTOCOL_VERSION: u32 = 2;

/// The largest gRPC message, in bytes, that the coordinator, its workers and
/// its clients send or accept (16 MiB). A larger message is refused with
/// OUT_OF_RANGE (tonic's check) before it is decoded, so it bounds the
/// memory one request can take. A batch of 20,000 puzzles with ids of
/// [`MAX_ID_BYTES`] (the client's request chunk) encodes to about 6.5 MiB.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// The longest puzzle id accepted, in bytes; a longer one is an invalid
/// puzzle (field `id`).
pub const MAX_ID_BYTES: usize = 256;

/// How much of an over-long id error messages quote.
const QUOTED_ID_BYTES: usize = 32;

/// A puzzle on the wire that does not describe a legal puzzle.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("puzzle {id:?}: field {field}: {reason}")]
pub struct InvalidPuzzle {
    /// The puzzle's id as sent.
    pub id: String,
    /// The offending field: `puzzle`, `start` or `target`.
    pub field: &'static str,
    /// What was wrong with it.
    pub reason: String,
}

impl InvalidPuzzle {
    fn new(id: &str, field: &'static str, reason: impl ToString) -> InvalidPuzzle {
        InvalidPuzzle {
            id: id.to_string(),
            field,
            reason: reason.to_string(),
        }
    }
}

/// A puzzle as its text arrived: the client API's [`v1::Puzzle`], or the
/// coordinator's allocation-free reading of the same bytes
/// ([`ingest::Puzzle`]). [`puzzle_from_wire`] and [`batch_from_wire`] read
/// either.
pub trait PuzzleText {
    /// The id the client gave.
    fn id(&self) -> &str;
    /// The start board's rows, top first.
    fn start(&self) -> RowSlices<'_>;
    /// The target board's rows, top first.
    fn target(&self) -> RowSlices<'_>;
    /// The id, kept (inline up to 15 bytes).
    fn into_id(self) -> EcoString;
    /// Both boards, if the rows are held in a form that reads them at once
    /// and they are valid; `None` means: read the rows (which says what
    /// is wrong, if anything is).
    fn boards(&self) -> Option<(Board, Board)> {
        None
    }
}

/// A board's rows as sent, borrowed (inline up to four, as every valid
/// board has).
pub type RowSlices<'a> = smallvec::SmallVec<[&'a [u8]; 4]>;

impl PuzzleText for v1::Puzzle {
    fn id(&self) -> &str {
        &self.id
    }

    fn start(&self) -> RowSlices<'_> {
        self.start.iter().map(String::as_bytes).collect()
    }

    fn target(&self) -> RowSlices<'_> {
        self.target.iter().map(String::as_bytes).collect()
    }

    fn into_id(self) -> EcoString {
        EcoString::from(self.id)
    }
}

/// Reads a wire puzzle into a solver puzzle.
///
/// Checks the id's length ([`MAX_ID_BYTES`]), then each board: row count,
/// row lengths, letters; then that both boards have the same size. The
/// error names the field (`id`, `start` or `target`) and, for a board, the
/// row and column. Work is bounded by the input's size; nothing panics.
pub fn puzzle_from_wire<P: PuzzleText>(p: &P) -> Result<Puzzle, InvalidPuzzle> {
    let id = p.id();
    if id.len() > MAX_ID_BYTES {
        return Err(InvalidPuzzle {
            id: quote_prefix(id),
            field: "id",
            reason: format!(
                "{} bytes long; ids hold at most {MAX_ID_BYTES} bytes",
                id.len()
            ),
        });
    }
    if let Some((start, target)) = p.boards()
        && let Ok(puzzle) = Puzzle::new(start, target)
    {
        return Ok(puzzle);
    }
    let board = |field: &'static str, rows: RowSlices<'_>| -> Result<Board, InvalidPuzzle> {
        if rows.is_empty() {
            return Err(InvalidPuzzle::new(id, field, "missing (no rows)"));
        }
        Board::parse_rows(&rows).map_err(|e: BoardError| InvalidPuzzle::new(id, field, e))
    };
    let start = board("start", p.start())?;
    let target = board("target", p.target())?;
    Puzzle::new(start, target).map_err(|e| {
        InvalidPuzzle::new(
            id,
            "target",
            format!("size {} differs from the start's {}", e.target, e.start),
        )
    })
}

/// The start of an over-long id, cut at a character boundary, marked `...`.
fn quote_prefix(id: &str) -> String {
    let mut end = QUOTED_ID_BYTES.min(id.len());
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &id[..end])
}

/// A request that is wrong as a whole (rather than in one puzzle): an
/// INVALID_ARGUMENT status.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum InvalidBatch {
    #[error("field puzzles: the batch is empty; send at least one puzzle")]
    /// No puzzle at all.
    Empty,
}

/// Reads a batch: one entry per wire puzzle, in order, either the puzzle or
/// why it is invalid. Besides [`puzzle_from_wire`]'s checks, a non-empty id
/// that an earlier puzzle of the batch already used is invalid (field `id`),
/// so every result can be matched by id; empty ids are exempt (match those
/// by `index`). An empty batch is an [`InvalidBatch`]. (The errors are
/// boxed: rare, and a vector of 16-byte entries is a quarter of one that
/// holds them inline.)
#[allow(clippy::type_complexity)]
pub fn batch_from_wire<P: PuzzleText>(
    puzzles: &[P],
) -> Result<Vec<Result<Puzzle, Box<InvalidPuzzle>>>, InvalidBatch> {
    if puzzles.is_empty() {
        return Err(InvalidBatch::Empty);
    }
    // Sized once; hashed with foldhash's seeded quality hasher (the ids are
    // the client's, so a seed they cannot know, at a fraction of SipHash's
    // cost).
    let mut seen: HashMap<&str, usize, foldhash::quality::RandomState> =
        HashMap::with_capacity_and_hasher(puzzles.len(), Default::default());
    Ok(puzzles
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let id = p.id();
            if !id.is_empty() && id.len() <= MAX_ID_BYTES {
                match seen.entry(id) {
                    Entry::Occupied(first) => {
                        return Err(Box::new(InvalidPuzzle::new(
                            id,
                            "id",
                            format!(
                                "duplicate id: puzzle {index} of the batch repeats the id of puzzle {} (ids must be unique within a batch)",
                                first.get()
                            ),
                        )));
                    }
                    Entry::Vacant(slot) => {
                        slot.insert(index);
                    }
                }
            }
            puzzle_from_wire(p).map_err(Box::new)
        })
        .collect())
}

/// Writes a solver puzzle as a wire puzzle with the given id.
pub fn puzzle_to_wire(id: impl Into<String>, puzzle: &Puzzle) -> v1::Puzzle {
    v1::Puzzle {
        id: id.into(),
        start: puzzle.start().rows(),
        target: puzzle.target().rows(),
    }
}

impl v1::Job {
    /// The job's state in words (`queued`, `running`, `done`, `cancelled`,
    /// `failed`).
    pub fn state_name(&self) -> &'static str {
        match v1::JobState::try_from(self.state) {
            Ok(v1::JobState::Queued) => "queued",
            Ok(v1::JobState::Running) => "running",
            Ok(v1::JobState::Done) => "done",
            Ok(v1::JobState::Cancelled) => "cancelled",
            Ok(v1::JobState::Failed) => "failed",
            _ => "unknown",
        }
    }
}

impl v1::PuzzleResult {
    /// An error result for a puzzle that could not be read.
    pub fn invalid(index: u64, e: &InvalidPuzzle) -> v1::PuzzleResult {
        v1::PuzzleResult {
            id: e.id.clone(),
            index,
            outcome: Some(v1::puzzle_result::Outcome::Error(v1::PuzzleError {
                kind: v1::puzzle_error::Kind::Invalid as i32,
                field: e.field.to_string(),
                message: e.to_string(),
            })),
        }
    }

    /// An error result for a puzzle the cluster gave up on.
    pub fn failed(id: String, index: u64, message: String) -> v1::PuzzleResult {
        v1::PuzzleResult {
            id,
            index,
            outcome: Some(v1::puzzle_result::Outcome::Error(v1::PuzzleError {
                kind: v1::puzzle_error::Kind::Failed as i32,
                field: String::new(),
                message,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_solver::Size;
    use colball_solver::generate::Generator;

    #[test]
    fn puzzles_round_trip() {
        let mut g = Generator::new(1);
        for size in Size::ALL {
            let p = g.uniform(size);
            let wire = puzzle_to_wire("x", &p);
            assert_eq!(puzzle_from_wire(&wire), Ok(p));
        }
    }

    #[test]
    fn bad_fields_are_named_with_the_id() {
        let wire = v1::Puzzle {
            id: "p7".into(),
            start: vec!["RB".into(), "BG".into()],
            target: vec!["RB".into(), "BQ".into()],
        };
        let e = puzzle_from_wire(&wire).unwrap_err();
        assert_eq!(e.field, "target");
        let text = e.to_string();
        assert!(
            text.contains("p7") && text.contains("row 2, column 2"),
            "{text}"
        );

        let missing = v1::Puzzle {
            id: "m".into(),
            start: vec![],
            target: vec!["RB".into(), "BG".into()],
        };
        assert_eq!(puzzle_from_wire(&missing).unwrap_err().field, "start");

        let mismatch = v1::Puzzle {
            id: "s".into(),
            start: vec!["RBR".into(), "BGR".into()],
            target: vec!["RB".into(), "BG".into()],
        };
        let e = puzzle_from_wire(&mismatch).unwrap_err();
        assert!(e.to_string().contains("differs"), "{e}");
    }
}
