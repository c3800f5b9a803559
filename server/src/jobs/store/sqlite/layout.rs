//! How the SQLite store lays out puzzles and results.
//!
//! Rows are keyed by one integer, `job << 32 | index` ([`key`]), so a
//! job's rows are one range of the tables' rowids: inserting them appends,
//! and deleting a job deletes a range. (`--max-job-puzzles` is at most
//! `u32::MAX`, so an index fits the low half.)
//!
//! A job's puzzles are stored a chunk at a time, a row per [`CHUNK`]
//! puzzles (or fewer, at the end of a chunk as it was submitted): `puzzles` holds [`PUZZLE_BYTES`] per puzzle (its size as
//! `rows * 10 + cols`, 0 for an entry stored with its error result, then
//! its start and target boards' cells as little-endian `u32`s), `ids` each
//! puzzle's id as its length (LEB128) and bytes.
//!
//! Results are stored [`CHUNK`] to a row too, a row per aligned run of
//! indices (`results`, keyed by the [`key`] of the run's first index): its
//! `slots` hold, for each index of the run in order, 0 for a result not
//! stored yet, or the encoded result's length plus one (LEB128) and its
//! bytes; slots past the last stored one are left out. A job read in any
//! order keeps its stored order in `orders`: a row per group written,
//! keyed by the [`key`] of its first position, its `indices` the results'
//! indices in the order they were stored (little-endian `u32`s).

use colball_solver::{Board, Puzzle, Size};
use ecow::EcoString;

use super::super::Entry;

/// Puzzles a chunk row holds at most: its columns (about 2 KiB) stay
/// within a page, so a row never spills to overflow pages.
pub const CHUNK: usize = 128;

/// Bytes a puzzle takes in a chunk's `puzzles`.
pub const PUZZLE_BYTES: usize = 9;

/// The key of puzzle or result `index` of job `job`.
pub fn key(job: i64, index: u64) -> i64 {
    (job << 32) | (index & 0xffff_ffff) as i64
}

/// The keys of job `job`'s rows: `first..end`.
pub fn job_keys(job: i64) -> (i64, i64) {
    (job << 32, (job + 1) << 32)
}

/// The index of the row with key `key`.
pub fn index_of(key: i64) -> u64 {
    (key & 0xffff_ffff) as u64
}

/// The key of the results row that holds index `index` of job `job`.
pub fn slots_key(job: i64, index: u64) -> i64 {
    key(job, index - index % CHUNK as u64)
}

/// Where each result of a results row lies in its bytes, by index in its
/// run (`None` for one not stored): [`CHUNK`] of them.
pub type Slots = Vec<Option<std::ops::Range<usize>>>;

/// A results row's slots read: for each index of its run in order, where
/// its result lies in `slots` (`None` for one not stored). A damaged row
/// reads as far as it reads.
pub fn read_slots(slots: &[u8]) -> Slots {
    let mut out = Vec::with_capacity(CHUNK);
    let mut rest = slots;
    while out.len() < CHUNK && !rest.is_empty() {
        let Some(len) = take_len(&mut rest) else {
            break;
        };
        if len == 0 {
            out.push(None);
            continue;
        }
        let at = slots.len() - rest.len();
        let Some(end) = at.checked_add(len - 1).filter(|end| *end <= slots.len()) else {
            break;
        };
        out.push(Some(at..end));
        rest = &slots[end..];
    }
    out.resize(CHUNK, None);
    out
}

/// A results row's slots written from each index's result, in order.
pub fn write_slots<'a>(results: impl IntoIterator<Item = Option<&'a [u8]>>) -> Vec<u8> {
    let mut out = Vec::new();
    // Empty slots not yet written: left out if nothing follows them.
    let mut empty = 0;
    for result in results {
        match result {
            None => empty += 1,
            Some(bytes) => {
                out.resize(out.len() + empty, 0);
                empty = 0;
                put_len(&mut out, bytes.len() + 1);
                out.extend_from_slice(bytes);
            }
        }
    }
    out
}

/// An `orders` row's indices.
pub fn pack_indices(indices: &[u64]) -> Vec<u8> {
    indices
        .iter()
        .flat_map(|i| (*i as u32).to_le_bytes())
        .collect()
}

/// An `orders` row's indices read back.
pub fn unpack_indices(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(4)
        .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

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

fn put_len(out: &mut Vec<u8>, mut n: usize) {
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
fn take_len(bytes: &mut &[u8]) -> Option<usize> {
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
    fn result_slots_read_back_as_they_were_written() {
        let results: Vec<Option<Vec<u8>>> = (0..CHUNK)
            .map(|i| (i % 3 != 1 && i < 100).then(|| vec![i as u8; i % 7]))
            .collect();
        let slots = write_slots(results.iter().map(|r| r.as_deref()));
        let back = read_slots(&slots);
        assert_eq!(back.len(), CHUNK);
        for (was, at) in results.iter().zip(&back) {
            assert_eq!(was.as_deref(), at.clone().map(|r| &slots[r]));
        }
        // A damaged row loses what follows the damage, nothing more.
        let cut = read_slots(&slots[..slots.len() / 2]);
        assert!(cut.iter().flatten().count() > 10);
        for (was, at) in results.iter().zip(&cut) {
            if let Some(r) = at {
                assert_eq!(was.as_deref(), Some(&slots[r.clone()]));
            }
        }
        assert_eq!(read_slots(&[0xff; 3]).iter().flatten().count(), 0);
        let indices = [5, 0, u32::MAX as u64, 77];
        assert_eq!(
            unpack_indices(&pack_indices(&indices)).collect::<Vec<_>>(),
            indices
        );
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

    #[test]
    fn keys_keep_jobs_apart() {
        assert_eq!(slots_key(7, 130), key(7, 128));
        assert_eq!(slots_key(7, 127), key(7, 0));
        assert_eq!(index_of(key(7, 5)), 5);
        let (first, end) = job_keys(7);
        assert!(first <= key(7, 0) && key(7, u32::MAX as u64) < end);
        assert_eq!(end, job_keys(8).0);
    }
}
