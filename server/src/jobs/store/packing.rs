//! How both stores pack a job's puzzles and results into bytes.
//!
//! A chunk of puzzles is two byte strings ([`pack`]): `puzzles`, holding
//! [`PUZZLE_BYTES`] per puzzle (its size as `rows * 10 + cols`, 0 for an
//! entry stored with its error result, then its start and target boards'
//! cells as little-endian `u32`s), and `ids`, each puzzle's id as its
//! length (LEB128) and bytes. A group of encoded results ([`pack_results`])
//! is each result's index, length (LEB128) and bytes. Reading is forgiving
//! of damage: a damaged chunk or group reads as far as it reads, and the
//! rest reads as missing.

use colball_solver::{Board, Puzzle, Size};
use ecow::EcoString;

use super::Entry;

/// Bytes a puzzle takes in a chunk's `puzzles`.
pub const PUZZLE_BYTES: usize = 9;

/// A group of encoded results, packed (the PostgreSQL store's result
/// groups): for each in order, its index and its length (LEB128) and its
/// bytes.
pub fn pack_results<'a>(results: impl IntoIterator<Item = (u64, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (index, bytes) in results {
        put_len(&mut out, index as usize);
        put_len(&mut out, bytes.len());
        out.extend_from_slice(bytes);
    }
    out
}

/// A packed group's results in order, each index with its bytes. A
/// damaged group reads as far as it reads.
pub fn unpack_results(group: &[u8]) -> impl Iterator<Item = (u64, &[u8])> + '_ {
    let mut rest = group;
    std::iter::from_fn(move || {
        let index = take_len(&mut rest)? as u64;
        let len = take_len(&mut rest)?;
        let Some((bytes, after)) = rest.split_at_checked(len) else {
            rest = &[];
            return None;
        };
        rest = after;
        Some((index, bytes))
    })
}

/// A chunk of entries, packed: its `puzzles` and `ids` columns.
pub fn pack(entries: &[Entry]) -> (Vec<u8>, Vec<u8>) {
    let mut puzzles = Vec::with_capacity(entries.len() * PUZZLE_BYTES);
    let mut ids = Vec::with_capacity(entries.len() * 4);
    for entry in entries {
        match entry {
            Entry::Puzzle { id, puzzle } => {
                puzzles.extend_from_slice(&pack_puzzle(puzzle));
                put_len(&mut ids, id.len());
                ids.extend_from_slice(id.as_bytes());
            }
            Entry::Invalid(_) => {
                puzzles.extend_from_slice(&[0; PUZZLE_BYTES]);
                put_len(&mut ids, 0);
            }
        }
    }
    (puzzles, ids)
}

/// A packed chunk's entries in order: each puzzle with its id, `None` for
/// an entry stored with its error (or one that does not read back).
pub fn unpack<'a>(
    puzzles: &'a [u8],
    ids: &'a [u8],
) -> impl Iterator<Item = Option<(EcoString, Puzzle)>> + 'a {
    let mut ids = ids;
    puzzles.chunks_exact(PUZZLE_BYTES).map(move |p| {
        let len = take_len(&mut ids)?;
        let Some((id, rest)) = ids.split_at_checked(len) else {
            ids = &[];
            return None;
        };
        ids = rest;
        let id = EcoString::from(std::str::from_utf8(id).ok()?);
        Some((id, unpack_puzzle(p)?))
    })
}

/// A puzzle in [`PUZZLE_BYTES`]: its size as `rows * 10 + cols`, then its
/// start and target boards' cells as little-endian `u32`s.
pub fn pack_puzzle(puzzle: &Puzzle) -> [u8; PUZZLE_BYTES] {
    let size = puzzle.size();
    let mut out = [0; PUZZLE_BYTES];
    out[0] = (size.rows() * 10 + size.cols()) as u8;
    out[1..5].copy_from_slice(&puzzle.start().packed().to_le_bytes());
    out[5..].copy_from_slice(&puzzle.target().packed().to_le_bytes());
    out
}

/// The puzzle [`pack_puzzle`] wrote, if `p` is one.
pub fn unpack_puzzle(p: &[u8]) -> Option<Puzzle> {
    let p: &[u8; PUZZLE_BYTES] = p.try_into().ok()?;
    let size = Size::new(usize::from(p[0] / 10), usize::from(p[0] % 10)).ok()?;
    let word = |at: usize| u32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
    let start = Board::from_packed(size, word(1))?;
    let target = Board::from_packed(size, word(5))?;
    Puzzle::new(start, target).ok()
}

pub(super) fn put_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads a length off the front of `bytes`. A length that does not read
/// leaves nothing behind, so the rest of the chunk reads as missing.
pub(super) fn take_len(bytes: &mut &[u8]) -> Option<usize> {
    let mut n = 0usize;
    for shift in (0..usize::BITS).step_by(7) {
        let Some((&byte, rest)) = bytes.split_first() else {
            *bytes = &[];
            return None;
        };
        *bytes = rest;
        n |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    *bytes = &[];
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use colball_proto::v1;
    use colball_solver::generate::Generator;

    #[test]
    fn chunks_read_back_as_they_were_packed() {
        let mut g = Generator::new(5);
        let mut entries: Vec<Entry> = (0..40)
            .map(|i| Entry::Puzzle {
                id: if i == 7 {
                    "é".repeat(100).into()
                } else {
                    format!("p{i}").into()
                },
                puzzle: g.uniform(Size::ALL[i % Size::ALL.len()]),
            })
            .collect();
        entries[3] = Entry::Invalid(v1::PuzzleResult::default());
        let (puzzles, ids) = pack(&entries);
        assert_eq!(puzzles.len(), 40 * PUZZLE_BYTES);
        let back: Vec<_> = unpack(&puzzles, &ids).collect();
        assert_eq!(back.len(), 40);
        for (entry, back) in entries.iter().zip(back) {
            match entry {
                Entry::Puzzle { id, puzzle } => assert_eq!(back, Some((id.clone(), *puzzle))),
                Entry::Invalid(_) => assert_eq!(back, None),
            }
        }
        // A damaged ids column loses the rest of the chunk, nothing more.
        assert_eq!(unpack(&puzzles, &ids[..5]).flatten().count(), 1);
    }

    #[test]
    fn result_groups_read_back_as_they_were_packed() {
        let results: Vec<(u64, Vec<u8>)> = [9000u64, 3, 0, 8191, 300]
            .iter()
            .map(|&i| (i, vec![i as u8; (i % 200) as usize]))
            .collect();
        let group = pack_results(results.iter().map(|(i, b)| (*i, b.as_slice())));
        let back: Vec<(u64, Vec<u8>)> = unpack_results(&group)
            .map(|(i, b)| (i, b.to_vec()))
            .collect();
        assert_eq!(back, results);
        // A damaged group loses what follows the damage, nothing more.
        assert_eq!(unpack_results(&group[..group.len() - 1]).count(), 4);
        assert_eq!(unpack_results(&[0xff; 3]).count(), 0);
    }
}
