//! Puzzle file formats: the contest's classic format and JSON Lines.

pub mod classic;
pub mod jsonl;
pub mod reader;

pub use reader::{Read, ReadError, Reader};

/// An input format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Classic,
    Jsonl,
}

impl Format {
    /// JSON Lines when the first non-blank byte opens an object, else classic.
    pub fn detect(input: &[u8]) -> Format {
        match strip_bom(input).iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::Jsonl,
            _ => Format::Classic,
        }
    }
}

/// The UTF-8 byte-order mark some editors write at the start of a file.
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// `input` without a leading UTF-8 byte-order mark.
pub fn strip_bom(input: &[u8]) -> &[u8] {
    input.strip_prefix(BOM).unwrap_or(input)
}

/// Splits input into lines numbered from 1, dropping `\n` and a `\r` before
/// it, and a byte-order mark at the start.
pub(crate) fn numbered_lines(input: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let input = strip_bom(input);
    let body = input.strip_suffix(b"\n").unwrap_or(input);
    let mut lines = body.split(|&b| b == b'\n').enumerate();
    if input.is_empty() {
        lines.next();
    }
    lines.map(|(i, line)| (i + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// A line for an error message: lossy UTF-8, shortened if long.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 40;
    let text = String::from_utf8_lossy(bytes);
    if text.chars().count() > MAX {
        let short: String = text.chars().take(MAX).collect();
        format!("{short}...")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_crlf_stripped() {
        let lines: Vec<_> = numbered_lines(b"a\r\nb\n\nc").collect();
        assert_eq!(lines, vec![(1, &b"a"[..]), (2, b"b"), (3, b""), (4, b"c")]);
        assert_eq!(numbered_lines(b"a\n").count(), 1);
        assert_eq!(numbered_lines(b"").count(), 0);
        let bom: Vec<_> = numbered_lines(b"\xEF\xBB\xBF2 2\nRR").collect();
        assert_eq!(bom, vec![(1, &b"2 2"[..]), (2, b"RR")]);
        assert_eq!(numbered_lines(b"\xEF\xBB\xBF").count(), 0);
    }

    #[test]
    fn detects_json_lines() {
        assert_eq!(Format::detect(b"\n  {\"start\":[]}"), Format::Jsonl);
        assert_eq!(Format::detect(b"2 2\nRR"), Format::Classic);
        assert_eq!(Format::detect(b""), Format::Classic);
        assert_eq!(Format::detect(b"\xEF\xBB\xBF{\"start\":[]}"), Format::Jsonl);
    }
}
