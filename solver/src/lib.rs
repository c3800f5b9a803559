//! The colball puzzle, solved exactly.
//!
//! - [`board`]: sizes, colours, the packed board and puzzles;
//! - [`moves`]: the two moves, their notation and packed application;
//! - [`search`]: exact searches returning an optimal move sequence;
//! - [`format`]: the classic contest format and JSON Lines;
//! - [`generate`]: reproducible random puzzles;
//! - [`grade`]: verdicts on contestants' answers;
//! - [`verify`]: replaying an answer computed elsewhere (a worker's);
//! - [`order`]: results back in input order from completion order.
//!
//! This crate has no async runtime, no networking and no CLI: the `colball`
//! command, the workers and the tests all build on it.

pub mod board;
pub mod cache;
pub mod engine;
pub mod format;
pub mod generate;
pub mod grade;
pub mod moves;
pub mod order;
pub mod rank;
pub mod search;
pub mod symmetry;
pub mod table;
pub mod verify;

pub use board::{Board, Colour, Puzzle, Size};
pub use engine::{Answer, Engine, EngineConfig, Method, Solver, Strategy};
pub use moves::{Move, MoveKind, MoveTable, apply_moves, format_moves, parse_moves};
pub use search::{BidirSearch, IdaStar, Solution};
