//! Reading puzzle files: a path or standard input, with lines capped.

use std::io::{self, Read};
use std::path::PathBuf;

use anyhow::{Context, Result};

/// The longest line an input file may have: a puzzle line is a few dozen
/// bytes (a JSON line with a 256-byte id a few hundred).
pub(crate) const MAX_LINE_BYTES: usize = 1 << 20;

/// Reads a file, or standard input for `None` or `-`; returns the bytes and
/// the name to use in messages. Reading stops with an error naming the line
/// at the first line longer than [`MAX_LINE_BYTES`] (so `/dev/zero` or a
/// binary file is refused after a mebibyte, not read whole).
pub(crate) fn read_input(path: Option<&PathBuf>) -> Result<(Vec<u8>, String)> {
    match path {
        Some(p) if p.as_os_str() != "-" => {
            let name = p.display().to_string();
            let file =
                std::fs::File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
            let bytes = read_capped(file, &name)?;
            Ok((bytes, name))
        }
        _ => {
            let name = "<stdin>".to_string();
            let bytes = read_capped(io::stdin().lock(), &name)?;
            Ok((bytes, name))
        }
    }
}

/// Reads `from` to its end, refusing a line longer than [`MAX_LINE_BYTES`].
pub(crate) fn read_capped(mut from: impl Read, name: &str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    // The current line: its number and the bytes of it read so far.
    let mut line = 1usize;
    let mut line_len = 0usize;
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) => return Ok(bytes),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot read {name}")),
        };
        let mut pieces = chunk[..n].split(|&b| b == b'\n');
        line_len += pieces.next().map_or(0, <[u8]>::len);
        for piece in pieces {
            if line_len > MAX_LINE_BYTES {
                break;
            }
            line += 1;
            line_len = piece.len();
        }
        if line_len > MAX_LINE_BYTES {
            anyhow::bail!(
                "{name}:{line}: line {line} is longer than {} MiB; this is not a puzzle file",
                MAX_LINE_BYTES >> 20
            );
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
}
