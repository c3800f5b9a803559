//! A job submitted as one JSON document (`POST /api/v1/jobs` with
//! `Content-Type: application/json`), the form client generators take:
//! `{"puzzles": [{"id": ..., "start": [...], "target": [...]}, ...],
//! "priority": ..., "name": ..., "any_order": ..., "webhook": ...}`.
//!
//! The body is read as it arrives, one puzzle record at a time, on a
//! blocking thread (JSON's members may come in any order, and generators
//! put `puzzles` first, before the options the job is created with). So
//! the puzzles read go to a temporary file, a few bytes each, until the
//! body ends and the options are known; then they are handed on to the
//! submission a chunk at a time. Memory stays bounded whatever the job's
//! size: a piece of the body, one record, one chunk. A record that does
//! not read is refused with 400 naming its index and field, a body past
//! `--max-job-puzzles` with 413, and nothing of either is kept.

use std::cell::Cell;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use colball_solver::Puzzle;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::StreamExt;

use super::api::Priority;
use crate::jobs::store::packing;
use crate::jobs::webhooks::allow::MAX_URL;
use crate::jobs::{Entry, NAME_CHARS};

/// Puzzles handed on at a time.
const CHUNK: usize = 4096;

/// Most bytes one puzzle record (or one option's value) may take.
const RECORD_BYTES: u64 = 1 << 20;

/// The options a JSON submission's body gives (each may be absent).
#[derive(Debug, Default)]
pub(super) struct BodyOptions {
    pub(super) priority: Option<Priority>,
    pub(super) name: Option<String>,
    pub(super) any_order: Option<bool>,
    pub(super) webhook: Option<String>,
}

/// Why a submission's body was refused: the status and what is wrong.
pub(super) type Refusal = (StatusCode, String);

/// A refusal as the job API answers it (`{"error": ...}`).
#[derive(Debug)]
pub(super) struct Refused(pub(super) Refusal);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let (code, message) = self.0;
        super::jobs::error(code, message)
    }
}

/// Reads a JSON submission's body: its options once the body has ended,
/// and its puzzles, a chunk at a time, after them. A body that does not
/// read, or holds more than `max_puzzles`, is refused.
pub(super) async fn read(
    body: Body,
    max_puzzles: usize,
) -> Result<
    (
        BodyOptions,
        impl tokio_stream::Stream<Item = Result<Vec<Entry>, Refused>> + Unpin,
    ),
    Refusal,
> {
    let (pieces, from_body) = mpsc::channel(8);
    let (options_tx, options_rx) = oneshot::channel();
    let (chunks_tx, chunks) = mpsc::channel(2);
    tokio::task::spawn_blocking(move || {
        let reader = BodyReader {
            pieces: from_body,
            piece: Bytes::new(),
            read: Rc::new(Cell::new(0)),
        };
        let spilled = match parse(reader, max_puzzles) {
            Ok(done) => done,
            Err(refusal) => {
                let _ = options_tx.send(Err(refusal));
                return;
            }
        };
        let (options, spill) = spilled;
        if options_tx.send(Ok(options)).is_err() {
            return;
        }
        spill.hand_on(&chunks_tx);
    });
    // The body goes to the reading thread a piece at a time; it stops
    // taking them when it refuses the body.
    let mut stream = body.into_data_stream();
    let pump = async {
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|e| format!("the request body broke off: {e}"));
            let broke = piece.is_err();
            if pieces.send(piece).await.is_err() || broke {
                break;
            }
        }
        drop(pieces);
    };
    let (_, options) = tokio::join!(pump, options_rx);
    let options = options.map_err(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the submission's reader stopped".to_string(),
        )
    })??;
    let chunks = tokio_stream::wrappers::ReceiverStream::new(chunks)
        .map(|chunk: Result<Vec<Entry>, Refusal>| chunk.map_err(Refused));
    Ok((options, chunks))
}

/// The body as the blocking parser reads it: pieces from the request, and
/// the bytes read since the last record began (a record is bounded).
struct BodyReader {
    pieces: mpsc::Receiver<Result<Bytes, String>>,
    piece: Bytes,
    read: Rc<Cell<u64>>,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.piece.is_empty() {
            match self.pieces.blocking_recv() {
                Some(Ok(piece)) => self.piece = piece,
                Some(Err(broke)) => return Err(std::io::Error::other(broke)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.piece.len());
        buf[..n].copy_from_slice(&self.piece.split_to(n));
        self.read.set(self.read.get() + n as u64);
        if self.read.get() > RECORD_BYTES + (64 << 10) {
            return Err(std::io::Error::other(format!(
                "a record or value of more than {} MiB",
                RECORD_BYTES >> 20
            )));
        }
        Ok(n)
    }
}

/// Reads the whole body: its options, and its puzzles into a spill.
fn parse(reader: BodyReader, max_puzzles: usize) -> Result<(BodyOptions, Spill), Refusal> {
    let read = reader.read.clone();
    let mut body = Document {
        spill: Spill::new().map_err(|e| cannot_keep(&e))?,
        options: BodyOptions::default(),
        puzzles: false,
        max_puzzles,
        read,
        refused: None,
    };
    let mut json = serde_json::Deserializer::from_reader(BufReader::new(reader));
    let outcome = de::Deserializer::deserialize_map(&mut json, &mut body).and_then(|()| json.end());
    if let Some(refusal) = body.refused.take() {
        return Err(refusal);
    }
    if let Err(e) = outcome {
        let message = if e.is_io() {
            format!("the request body: {e}")
        } else {
            format!("the body is not a job submission in JSON: {e}")
        };
        return Err((StatusCode::BAD_REQUEST, message));
    }
    if !body.puzzles {
        return Err((
            StatusCode::BAD_REQUEST,
            "field puzzles: missing (a list of puzzle objects)".into(),
        ));
    }
    body.spill.finish().map_err(|e| cannot_keep(&e))?;
    Ok((body.options, body.spill))
}

/// The document being read.
struct Document {
    spill: Spill,
    options: BodyOptions,
    /// Whether the `puzzles` member was read.
    puzzles: bool,
    max_puzzles: usize,
    read: Rc<Cell<u64>>,
    /// Why the body is refused, when it reads as JSON but not as a
    /// submission (the parser's own error then only stops it).
    refused: Option<Refusal>,
}

impl Document {
    /// Refuses the body: why, kept for the answer; the error stops the
    /// parser.
    fn refuse<E: de::Error>(&mut self, code: StatusCode, message: String) -> E {
        let error = E::custom(&message);
        self.refused = Some((code, message));
        error
    }

    /// An option's value, checked.
    fn option<E: de::Error>(&mut self, key: &str, value: Value) -> Result<(), E> {
        self.read_option(key, &value)
            .map_err(|message| self.refuse(StatusCode::BAD_REQUEST, message))
    }

    /// [`Self::option`]'s reading: what is wrong with it, if anything.
    fn read_option(&mut self, key: &str, value: &Value) -> Result<(), String> {
        let expected = |what: &str| format!("field {key}: expected {what}, found {value}");
        match (key, value) {
            ("priority" | "name" | "webhook" | "any_order", Value::Null) => {}
            ("priority", _) => {
                let priority = match value.as_str() {
                    Some("interactive") => Priority::Interactive,
                    Some("normal") => Priority::Normal,
                    Some("bulk") => Priority::Bulk,
                    _ => return Err(expected("one of \"interactive\", \"normal\", \"bulk\"")),
                };
                self.options.priority = Some(priority);
            }
            ("name", Value::String(n)) if n.chars().count() > NAME_CHARS => {
                return Err(format!("field name: at most {NAME_CHARS} characters"));
            }
            ("name", Value::String(n)) => self.options.name = Some(n.clone()),
            ("webhook", Value::String(w)) if w.len() > MAX_URL => {
                return Err(format!("field webhook: at most {MAX_URL} bytes"));
            }
            ("webhook", Value::String(w)) => self.options.webhook = Some(w.clone()),
            ("name" | "webhook", _) => return Err(expected("a string")),
            ("any_order", Value::Bool(b)) => self.options.any_order = Some(*b),
            ("any_order", _) => return Err(expected("true or false")),
            _ => {
                return Err(format!(
                    "field {key}: not a member of a job submission (puzzles, priority, name, any_order, webhook)"
                ));
            }
        }
        Ok(())
    }
}

impl<'de> Visitor<'de> for &mut Document {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a job submission: an object with a list of puzzles")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            self.read.set(0);
            if key == "puzzles" {
                if self.puzzles {
                    let message = "field puzzles: given twice".to_string();
                    return Err(self.refuse(StatusCode::BAD_REQUEST, message));
                }
                self.puzzles = true;
                map.next_value_seed(Puzzles(&mut *self))?;
            } else {
                let value: Value = map.next_value()?;
                self.option(&key, value)?;
            }
        }
        Ok(())
    }
}

/// The `puzzles` member: each record read, checked and spilled.
struct Puzzles<'d>(&'d mut Document);

impl<'de> DeserializeSeed<'de> for Puzzles<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Puzzles<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field puzzles: a list of puzzle objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let document = self.0;
        let mut index = 0usize;
        loop {
            document.read.set(0);
            let Some(value) = seq.next_element::<Value>()? else {
                return Ok(());
            };
            if index == document.max_puzzles {
                let message = format!(
                    "field puzzles: more than {}, the limit per job (--max-job-puzzles); split it",
                    document.max_puzzles
                );
                return Err(document.refuse(StatusCode::PAYLOAD_TOO_LARGE, message));
            }
            match colball_solver::format::jsonl::record(index + 1, &value) {
                Ok((id, puzzle)) => {
                    if let Err(e) = document.spill.put(&id, &puzzle) {
                        let (code, message) = cannot_keep(&e);
                        return Err(document.refuse(code, message));
                    }
                }
                Err(e) => {
                    let message = format!("puzzles[{index}]: {}", e.message);
                    return Err(document.refuse(StatusCode::BAD_REQUEST, message));
                }
            }
            index += 1;
        }
    }
}

/// Puzzles kept while the body arrives: an unnamed temporary file of
/// records (an id's length and bytes, then the packed puzzle).
struct Spill {
    file: BufWriter<File>,
    path: PathBuf,
    count: u64,
}

impl Spill {
    fn new() -> std::io::Result<Spill> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "colball-submission-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // Unnamed from now on where the system allows: nothing is left
        // behind whatever happens to the process.
        let _ = std::fs::remove_file(&path);
        Ok(Spill {
            file: BufWriter::new(file),
            path,
            count: 0,
        })
    }

    fn put(&mut self, id: &str, puzzle: &Puzzle) -> std::io::Result<()> {
        self.file.write_all(&(id.len() as u32).to_le_bytes())?;
        self.file.write_all(id.as_bytes())?;
        self.file.write_all(&packing::pack_puzzle(puzzle))?;
        self.count += 1;
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        self.file.get_mut().rewind()
    }

    /// Hands the puzzles on a chunk at a time, until the receiver goes.
    fn hand_on(self, to: &mpsc::Sender<Result<Vec<Entry>, Refusal>>) {
        let Spill { file, path, count } = self;
        let file = match file.into_inner() {
            Ok(file) => file,
            Err(e) => {
                let _ = to.blocking_send(Err(trouble(e.error())));
                return;
            }
        };
        let mut records = BufReader::new(file);
        let mut left = count;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            let mut chunk = Vec::with_capacity(n);
            for _ in 0..n {
                match next_record(&mut records) {
                    Ok(entry) => chunk.push(entry),
                    Err(e) => {
                        let _ = to.blocking_send(Err(trouble(&e)));
                        return;
                    }
                }
            }
            left -= n as u64;
            if to.blocking_send(Ok(chunk)).is_err() {
                break;
            }
        }
        let _ = std::fs::remove_file(path);
    }
}

/// A spill that could not be written.
fn cannot_keep(e: &std::io::Error) -> Refusal {
    (
        StatusCode::INSUFFICIENT_STORAGE,
        format!("cannot keep the puzzles while the body arrives: {e}"),
    )
}

/// A spill that could not be read back.
fn trouble(e: &std::io::Error) -> Refusal {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot read back the puzzles kept while the body arrived: {e}"),
    )
}

/// The next record of a spill.
fn next_record(records: &mut impl BufRead) -> std::io::Result<Entry> {
    let mut len = [0; 4];
    records.read_exact(&mut len)?;
    let mut id = vec![0; u32::from_le_bytes(len) as usize];
    records.read_exact(&mut id)?;
    let mut packed = [0; packing::PUZZLE_BYTES];
    records.read_exact(&mut packed)?;
    let damaged = || std::io::Error::other("a record is damaged");
    let id = String::from_utf8(id).map_err(|_| damaged())?;
    let puzzle = packing::unpack_puzzle(&packed).ok_or_else(damaged)?;
    Ok(Entry::Puzzle {
        id: id.into(),
        puzzle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(body: &str, max: usize) -> Result<(BodyOptions, Vec<Entry>), Refusal> {
        let (options, chunks) = read(Body::from(body.to_string()), max).await?;
        let chunks: Vec<_> = chunks.collect().await;
        let mut entries = Vec::new();
        for chunk in chunks {
            entries.extend(chunk.map_err(|r| r.0)?);
        }
        Ok((options, entries))
    }

    fn ids(entries: &[Entry]) -> Vec<String> {
        entries
            .iter()
            .map(|e| match e {
                Entry::Puzzle { id, .. } => id.to_string(),
                Entry::Invalid(_) => "invalid".into(),
            })
            .collect()
    }

    #[tokio::test]
    async fn options_may_come_before_or_after_the_puzzles() {
        let puzzles = r#"[{"id": "a", "start": ["RB", "GR"], "target": ["BR", "GR"]},
            {"start": ["RGB", "BBR"], "target": ["GBR", "BBR"]}, {"id": 7, "start": ["RB", "GG"], "target": ["BR", "GG"]}]"#;
        for body in [
            format!(
                r#"{{"puzzles": {puzzles}, "priority": "normal", "name": "n", "any_order": true, "webhook": null}}"#
            ),
            format!(
                r#"{{"name": "n", "priority": "normal", "any_order": true, "puzzles": {puzzles}}}"#
            ),
        ] {
            let (options, entries) = read_all(&body, 10).await.unwrap();
            assert_eq!(options.priority, Some(Priority::Normal));
            assert_eq!(options.name.as_deref(), Some("n"));
            assert_eq!(options.any_order, Some(true));
            assert_eq!(options.webhook, None);
            assert_eq!(ids(&entries), ["a", "2", "7"]);
        }
    }

    #[tokio::test]
    async fn a_body_that_is_not_a_submission_is_refused_saying_where() {
        let good = r#"{"start": ["RB", "GR"], "target": ["BR", "GR"]}"#;
        let cases = [
            (
                format!(
                    r#"{{"puzzles": [{good}, {{"start": ["RB", "GR"], "target": ["BR", "GR", "BB"]}}]}}"#
                ),
                400,
                "puzzles[1]: field target",
            ),
            (
                format!(r#"{{"puzzles": [{good}, {{"start": ["RQ"], "target": ["BR"]}}]}}"#),
                400,
                "puzzles[1]: field start",
            ),
            (
                format!(r#"{{"puzzles": [{good}, 5]}}"#),
                400,
                "puzzles[1]: expected a puzzle object",
            ),
            (
                format!(r#"{{"puzzles": [{good}], "priority": "urgent"}}"#),
                400,
                "field priority",
            ),
            (
                format!(r#"{{"puzzles": [{good}], "any_order": "yes"}}"#),
                400,
                "field any_order",
            ),
            (
                format!(r#"{{"puzzles": [{good}], "colour": 1}}"#),
                400,
                "field colour: not a member",
            ),
            (
                format!(r#"{{"puzzles": [{good}], "puzzles": []}}"#),
                400,
                "given twice",
            ),
            (
                r#"{"name": "x"}"#.to_string(),
                400,
                "field puzzles: missing",
            ),
            (
                format!(r#"{{"puzzles": [{good}, {good}, {good}]}}"#),
                413,
                "more than 2",
            ),
            (
                format!(r#"{{"puzzles": [{good}"#),
                400,
                "not a job submission in JSON",
            ),
            (r#"[1, 2]"#.to_string(), 400, "not a job submission in JSON"),
        ];
        for (body, code, says) in cases {
            let Err((got, message)) = read_all(&body, 2).await else {
                panic!("{body} was taken");
            };
            assert_eq!(got.as_u16(), code, "{body}: {message}");
            assert!(message.contains(says), "{body}: {message}");
        }
    }
}
