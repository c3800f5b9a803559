//! Base-3 rank of a packed board: a dense index below `3^cells`, used to
//! address flat per-board tables (visited marks, distances).
//!
//! The packed word is split into two 8-cell halves; a 64 Ki-entry table maps
//! each half to its base-3 value, so a rank costs two loads, a multiply and
//! an add.

const fn build_half_table() -> [u16; 1 << 16] {
    let mut table = [0u16; 1 << 16];
    let mut word = 0usize;
    while word < (1 << 16) {
        let mut value = 0usize;
        let mut cell = 8;
        while cell > 0 {
            cell -= 1;
            // Digit 3 never occurs in a valid board; it maps to an arbitrary
            // value that no caller relies on.
            value = value * 3 + ((word >> (2 * cell)) & 3);
        }
        table[word] = value as u16;
        word += 1;
    }
    table
}

static HALF: [u16; 1 << 16] = build_half_table();

const fn build_unrank_table() -> [u16; 6561] {
    let mut table = [0u16; 6561];
    let mut rank = 0usize;
    while rank < 6561 {
        let mut packed = 0usize;
        let mut rest = rank;
        let mut cell = 0;
        while cell < 8 {
            packed |= (rest % 3) << (2 * cell);
            rest /= 3;
            cell += 1;
        }
        table[rank] = packed as u16;
        rank += 1;
    }
    table
}

/// Packed 8-cell halves by their base-3 value.
static UNRANK_HALF: [u16; 6561] = build_unrank_table();

/// `3^8`, the number of values one half can take.
const HALF_STATES: u32 = 6561;

/// The base-3 rank of a valid packed board.
#[inline(always)]
pub fn rank(packed: u32) -> usize {
    (HALF[(packed & 0xFFFF) as usize] as u32 + HALF_STATES * HALF[(packed >> 16) as usize] as u32)
        as usize
}

/// The packed board whose rank is `rank` (the inverse of [`rank`]).
#[inline(always)]
pub fn unrank(rank: usize) -> u32 {
    let (hi, lo) = (rank / HALF_STATES as usize, rank % HALF_STATES as usize);
    UNRANK_HALF[lo] as u32 | (UNRANK_HALF[hi] as u32) << 16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_is_plain_base_three() {
        for packed in [
            0u32,
            1,
            2,
            0b0100,
            0b1001,
            0xAAAA_AAAA,
            0x5555_5555,
            0x1234_5612,
        ] {
            // Build a valid word by clearing any digit 3.
            let packed = packed & !((packed >> 1) & packed & 0x5555_5555);
            let mut expected = 0usize;
            for cell in (0..16).rev() {
                expected = expected * 3 + ((packed >> (2 * cell)) & 3) as usize;
            }
            assert_eq!(rank(packed), expected);
            assert_eq!(unrank(expected), packed);
        }
        assert_eq!(rank(0xAAAA_AAAA), 3usize.pow(16) - 1);
    }
}
