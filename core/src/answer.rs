//! A verified answer, as the coordinator's result cache keeps it.

use colball_proto::egress;
use ecow::EcoString;

/// A solved puzzle as the cluster reports it. (Its strings are shared, not
/// copied, by every result made from it.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedAnswer {
    pub moves: i64,
    pub solution: EcoString,
    pub strategy: EcoString,
    pub worker: EcoString,
}

impl VerifiedAnswer {
    /// The result a client gets for a puzzle answered from the cache.
    pub fn to_result(self, id: &EcoString, index: u64) -> egress::PuzzleResult {
        egress::PuzzleResult {
            id: id.clone(),
            index,
            outcome: Some(egress::Outcome::Solved(egress::Solved {
                moves: self.moves,
                solution: self.solution,
                strategy: self.strategy,
                worker: self.worker,
                time_us: 0,
                cached: true,
                shared: false,
            })),
        }
    }
}
