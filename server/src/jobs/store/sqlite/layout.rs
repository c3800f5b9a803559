//! How the SQLite store lays out puzzles and results.
//!
//! Rows are keyed by one integer, `job << 32 | index` ([`key`]), so a
//! job's rows are one range of the tables' rowids: inserting them appends,
//! and deleting a job deletes a range. (`--max-job-puzzles` is at most
//! `u32::MAX`, so an index fits the low half.)
//!
//! A job's puzzles are stored a chunk at a time, a row per [`CHUNK`]
//! puzzles (or fewer, at the end of a chunk as it was submitted), packed
//! as both stores pack a chunk ([`packing::pack`]).
//!
//! Results are stored [`CHUNK`] to a row too, a row per aligned run of
//! indices (`results`, keyed by the [`key`] of the run's first index): its
//! `slots` hold, for each index of the run in order, 0 for a result not
//! stored yet, or the encoded result's length plus one (LEB128) and its
//! bytes; slots past the last stored one are left out. A job read in any
//! order keeps its stored order in `orders`: a row per group written,
//! keyed by the [`key`] of its first position, its `indices` the results'
//! indices in the order they were stored (little-endian `u32`s).

use super::super::packing::{put_len, take_len};

/// Puzzles a chunk row holds at most: its columns (about 2 KiB) stay
/// within a page, so a row never spills to overflow pages.
pub const CHUNK: usize = 128;

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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn keys_keep_jobs_apart() {
        assert_eq!(slots_key(7, 130), key(7, 128));
        assert_eq!(slots_key(7, 127), key(7, 0));
        assert_eq!(index_of(key(7, 5)), 5);
        let (first, end) = job_keys(7);
        assert!(first <= key(7, 0) && key(7, u32::MAX as u64) < end);
        assert_eq!(end, job_keys(8).0);
    }
}
