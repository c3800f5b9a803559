//! Seed corpora and their mutations, shared by the fuzz-style property
//! tests of the parsers (`solver/tests/integration/parse_fuzz.rs`) and of
//! the wire conversions (`proto/tests/wire_fuzz.rs`). A dev-dependency only.

#![allow(clippy::unwrap_used)] // test support: a failure is a failed test

use proptest::prelude::*;

/// Every file of `dir` (sorted by name) as `(name, bytes)`; at least
/// `at_least` of them, or the corpus is missing.
pub fn corpus(dir: &std::path::Path, at_least: usize) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let corpus: Vec<_> = files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    assert!(corpus.len() >= at_least, "corpus missing: {dir:?}");
    corpus
}

/// One mutation of a corpus entry.
#[derive(Clone, Debug)]
pub enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    Truncate {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Splice {
        other: usize,
        from: usize,
        at: usize,
    },
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (
            any::<usize>(),
            prop::sample::select(b"RGBX0123456789 \n\r{}[]\",:".to_vec())
        )
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(other, from, at)| Mutation::Splice { other, from, at }),
    ]
}

pub fn mutate(corpus: &[(String, Vec<u8>)], seed: usize, mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = corpus[seed % corpus.len()].1.clone();
    for m in mutations {
        let len = bytes.len();
        match m {
            Mutation::Flip { at, bit } if len > 0 => bytes[at % len] ^= 1 << bit,
            Mutation::Set { at, byte } if len > 0 => bytes[at % len] = *byte,
            Mutation::Truncate { at } => bytes.truncate(at % (len + 1)),
            Mutation::Insert { at, bytes: new } => {
                let at = at % (len + 1);
                bytes.splice(at..at, new.iter().copied());
            }
            Mutation::Splice { other, from, at } => {
                let other = &corpus[other % corpus.len()].1;
                let tail = &other[from % (other.len() + 1)..];
                bytes.truncate(at % (len + 1));
                bytes.extend_from_slice(tail);
            }
            _ => {}
        }
    }
    bytes
}
