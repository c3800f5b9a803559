//! The coordinator's writing of results: the same bytes as
//! [`v1::PuzzleResult`], built without a heap allocation per string.
//!
//! A delivered result passes through the coordinator's state, the
//! request's outbox, the event log's retained ring and the response
//! stream. As the generated [`v1::PuzzleResult`] it held four `String`s
//! (the client's id, the solution, the strategy and the worker's name):
//! four allocations and four frees per puzzle, a copy of each into the
//! event log, and another for every later occurrence of the same puzzle.
//! Here each is an [`EcoString`]: inline up to 15 bytes (an id, a strategy,
//! a worker's name, a short solution), and otherwise shared by reference
//! count, so that copying a result for the event log or a follower copies
//! no text.
//!
//! Only the coordinator's side changes. The messages on the wire are
//! `colball.v1` ones, byte for byte (tested both ways): clients, grpcurl
//! and the job store read what they always read. The coordinator's
//! `Solve` and `SolveBatch` write this type
//! ([`crate::ingest::solver_server`]).

use ecow::EcoString;
use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};

use crate::ingest::{encode_text, merge_text, text_len};
use crate::{InvalidPuzzle, v1};

/// `colball.v1.PuzzleResult` as the coordinator writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PuzzleResult {
    /// Field 1: the puzzle's id as the client gave it.
    pub id: EcoString,
    /// Field 2: its position in its batch.
    pub index: u64,
    /// Fields 3 and 4 (a `oneof`).
    pub outcome: Option<Outcome>,
}

/// `colball.v1.PuzzleResult.outcome`.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Solved(Solved),
    /// Rare (an invalid puzzle, or one the cluster gave up on): kept as the
    /// generated message.
    Error(v1::PuzzleError),
}

/// `colball.v1.Solved` as the coordinator writes it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Solved {
    /// Field 1.
    pub moves: i64,
    /// Field 2.
    pub solution: EcoString,
    /// Field 3.
    pub strategy: EcoString,
    /// Field 4.
    pub worker: EcoString,
    /// Field 5.
    pub time_us: u64,
    /// Field 6.
    pub cached: bool,
    /// Field 7.
    pub shared: bool,
}

impl PuzzleResult {
    /// An error result for a puzzle that could not be read.
    pub fn invalid(index: u64, e: &InvalidPuzzle) -> PuzzleResult {
        v1::PuzzleResult::invalid(index, e).into()
    }

    /// An error result for a puzzle the cluster gave up on.
    pub fn failed(id: EcoString, index: u64, message: String) -> PuzzleResult {
        PuzzleResult {
            id,
            index,
            outcome: Some(Outcome::Error(v1::PuzzleError {
                kind: v1::puzzle_error::Kind::Failed as i32,
                field: String::new(),
                message,
            })),
        }
    }

    /// The answer, if the puzzle was solved.
    pub fn solved(&self) -> Option<&Solved> {
        match &self.outcome {
            Some(Outcome::Solved(s)) => Some(s),
            _ => None,
        }
    }

    /// The error, if it was not.
    pub fn error(&self) -> Option<&v1::PuzzleError> {
        match &self.outcome {
            Some(Outcome::Error(e)) => Some(e),
            _ => None,
        }
    }
}

impl From<PuzzleResult> for v1::PuzzleResult {
    fn from(r: PuzzleResult) -> v1::PuzzleResult {
        v1::PuzzleResult {
            id: r.id.into(),
            index: r.index,
            outcome: r.outcome.map(|o| match o {
                Outcome::Solved(s) => v1::puzzle_result::Outcome::Solved(s.into()),
                Outcome::Error(e) => v1::puzzle_result::Outcome::Error(e),
            }),
        }
    }
}

impl From<v1::PuzzleResult> for PuzzleResult {
    fn from(r: v1::PuzzleResult) -> PuzzleResult {
        PuzzleResult {
            id: r.id.into(),
            index: r.index,
            outcome: r.outcome.map(|o| match o {
                v1::puzzle_result::Outcome::Solved(s) => Outcome::Solved(s.into()),
                v1::puzzle_result::Outcome::Error(e) => Outcome::Error(e),
            }),
        }
    }
}

impl From<Solved> for v1::Solved {
    fn from(s: Solved) -> v1::Solved {
        // Every field named: a new one does not compile until it is
        // converted here.
        let Solved {
            moves,
            solution,
            strategy,
            worker,
            time_us,
            cached,
            shared,
        } = s;
        v1::Solved {
            moves,
            solution: solution.into(),
            strategy: strategy.into(),
            worker: worker.into(),
            time_us,
            cached,
            shared,
        }
    }
}

impl From<v1::Solved> for Solved {
    fn from(s: v1::Solved) -> Solved {
        let v1::Solved {
            moves,
            solution,
            strategy,
            worker,
            time_us,
            cached,
            shared,
        } = s;
        Solved {
            moves,
            solution: solution.into(),
            strategy: strategy.into(),
            worker: worker.into(),
            time_us,
            cached,
            shared,
        }
    }
}

/// A string field, left out when empty (proto3's default).
fn encode_string(tag: u32, text: &EcoString, buf: &mut impl BufMut) {
    if !text.is_empty() {
        encode_text(tag, text.as_bytes(), buf);
    }
}

fn string_len(tag: u32, text: &EcoString) -> usize {
    if text.is_empty() {
        0
    } else {
        text_len(tag, text.as_bytes())
    }
}

impl prost::Message for PuzzleResult {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_string(1, &self.id, buf);
        if self.index != 0 {
            encoding::uint64::encode(2, &self.index, buf);
        }
        match &self.outcome {
            Some(Outcome::Solved(s)) => encoding::message::encode(3, s, buf),
            Some(Outcome::Error(e)) => encoding::message::encode(4, e, buf),
            None => {}
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => self.id = merge_text(wire_type, buf, ctx)?,
            2 => encoding::uint64::merge(wire_type, &mut self.index, buf, ctx)?,
            // A oneof's message merges into the same variant, and replaces
            // another (as prost's generated code does).
            3 => {
                let mut s = match self.outcome.take() {
                    Some(Outcome::Solved(s)) => s,
                    _ => Solved::default(),
                };
                encoding::message::merge(wire_type, &mut s, buf, ctx)?;
                self.outcome = Some(Outcome::Solved(s));
            }
            4 => {
                let mut e = match self.outcome.take() {
                    Some(Outcome::Error(e)) => e,
                    _ => v1::PuzzleError::default(),
                };
                encoding::message::merge(wire_type, &mut e, buf, ctx)?;
                self.outcome = Some(Outcome::Error(e));
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        string_len(1, &self.id)
            + if self.index != 0 {
                encoding::uint64::encoded_len(2, &self.index)
            } else {
                0
            }
            + match &self.outcome {
                Some(Outcome::Solved(s)) => encoding::message::encoded_len(3, s),
                Some(Outcome::Error(e)) => encoding::message::encoded_len(4, e),
                None => 0,
            }
    }

    fn clear(&mut self) {
        *self = PuzzleResult::default();
    }
}

impl prost::Message for Solved {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if self.moves != 0 {
            encoding::int64::encode(1, &self.moves, buf);
        }
        encode_string(2, &self.solution, buf);
        encode_string(3, &self.strategy, buf);
        encode_string(4, &self.worker, buf);
        if self.time_us != 0 {
            encoding::uint64::encode(5, &self.time_us, buf);
        }
        if self.cached {
            encoding::bool::encode(6, &self.cached, buf);
        }
        if self.shared {
            encoding::bool::encode(7, &self.shared, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        match tag {
            1 => encoding::int64::merge(wire_type, &mut self.moves, buf, ctx)?,
            2 => self.solution = merge_text(wire_type, buf, ctx)?,
            3 => self.strategy = merge_text(wire_type, buf, ctx)?,
            4 => self.worker = merge_text(wire_type, buf, ctx)?,
            5 => encoding::uint64::merge(wire_type, &mut self.time_us, buf, ctx)?,
            6 => encoding::bool::merge(wire_type, &mut self.cached, buf, ctx)?,
            7 => encoding::bool::merge(wire_type, &mut self.shared, buf, ctx)?,
            _ => encoding::skip_field(wire_type, tag, buf, ctx)?,
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        (if self.moves != 0 {
            encoding::int64::encoded_len(1, &self.moves)
        } else {
            0
        }) + string_len(2, &self.solution)
            + string_len(3, &self.strategy)
            + string_len(4, &self.worker)
            + if self.time_us != 0 {
                encoding::uint64::encoded_len(5, &self.time_us)
            } else {
                0
            }
            + if self.cached { 2 } else { 0 }
            + if self.shared { 2 } else { 0 }
    }

    fn clear(&mut self) {
        *self = Solved::default();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use prost::Message;

    use super::*;

    /// Any text: empty, inline (up to 15 bytes) and shared, not only
    /// ASCII.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            "[a-z0-9 #-]{1,15}",
            "[a-zé0-9 ]{16,40}",
            any::<String>(),
        ]
    }

    fn solved() -> impl Strategy<Value = v1::Solved> {
        (
            any::<i64>(),
            (text(), text(), text()),
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(moves, (solution, strategy, worker), time_us, cached, shared)| v1::Solved {
                    moves,
                    solution,
                    strategy,
                    worker,
                    time_us,
                    cached,
                    shared,
                },
            )
    }

    fn error() -> impl Strategy<Value = v1::PuzzleError> {
        (0..4i32, text(), text()).prop_map(|(kind, field, message)| v1::PuzzleError {
            kind,
            field,
            message,
        })
    }

    fn result() -> impl Strategy<Value = v1::PuzzleResult> {
        (
            text(),
            prop_oneof![Just(0u64), any::<u64>()],
            prop_oneof![
                Just(None),
                solved().prop_map(|s| Some(v1::puzzle_result::Outcome::Solved(s))),
                error().prop_map(|e| Some(v1::puzzle_result::Outcome::Error(e))),
            ],
        )
            .prop_map(|(id, index, outcome)| v1::PuzzleResult { id, index, outcome })
    }

    proptest! {
        /// Ours encodes to the generated message's bytes, and each reads
        /// the other's.
        #[test]
        fn results_write_and_read_as_the_generated_messages_do(generated in result()) {
            let ours = PuzzleResult::from(generated.clone());
            let bytes = generated.encode_to_vec();
            prop_assert_eq!(ours.encoded_len(), bytes.len());
            prop_assert_eq!(ours.encode_to_vec(), bytes.clone());
            prop_assert_eq!(&PuzzleResult::decode(bytes.as_slice()).unwrap(), &ours);
            prop_assert_eq!(v1::PuzzleResult::from(ours), generated);
        }

        /// Any bytes at all: read as the generated type reads them (the
        /// same fields, or an error for the same inputs), never a panic.
        #[test]
        fn any_bytes_decode_or_fail_as_the_generated_messages_do(
            bytes in prop::collection::vec(any::<u8>(), 0..64),
        ) {
            let generated = v1::PuzzleResult::decode(bytes.as_slice());
            let ours = PuzzleResult::decode(bytes.as_slice());
            prop_assert_eq!(generated.is_ok(), ours.is_ok(), "{:?} / {:?}", generated, ours);
            if let (Ok(g), Ok(o)) = (generated, ours) {
                prop_assert_eq!(v1::PuzzleResult::from(o), g);
            }
        }
    }

    #[test]
    fn a_oneof_merges_into_its_variant_and_replaces_the_other() {
        let solved = |moves| v1::PuzzleResult {
            outcome: Some(v1::puzzle_result::Outcome::Solved(v1::Solved {
                moves,
                ..Default::default()
            })),
            ..Default::default()
        };
        let failed = v1::PuzzleResult::failed("p".into(), 1, "gone".into());
        for parts in [
            vec![solved(3), failed.clone()],
            vec![failed.clone(), solved(4)],
            vec![solved(5), solved(0)],
        ] {
            let bytes: Vec<u8> = parts.iter().flat_map(Message::encode_to_vec).collect();
            let generated = v1::PuzzleResult::decode(bytes.as_slice()).unwrap();
            let ours = PuzzleResult::decode(bytes.as_slice()).unwrap();
            assert_eq!(v1::PuzzleResult::from(ours), generated);
        }
    }

    #[test]
    fn short_strings_stay_inline() {
        let r = PuzzleResult::from(v1::PuzzleResult {
            id: "p-123456789".into(),
            outcome: Some(v1::puzzle_result::Outcome::Solved(v1::Solved {
                solution: "r11 c11 r11".into(),
                strategy: "bidir".into(),
                worker: "w1#12".into(),
                ..Default::default()
            })),
            ..Default::default()
        });
        let copy = r.clone();
        let s = copy.solved().unwrap();
        // Inline strings live in the value itself: the copy's bytes are
        // its own.
        for (a, b) in [
            (r.id.as_str(), copy.id.as_str()),
            (r.solved().unwrap().solution.as_str(), s.solution.as_str()),
        ] {
            assert_eq!(a, b);
            assert_ne!(a.as_ptr(), b.as_ptr());
        }
        // A longer one is shared, not copied.
        let long = EcoString::from("r11 c22 r21 c12 r22 c11");
        assert_eq!(long.clone().as_ptr(), long.as_ptr());
    }
}
