//! No input bytes make the parsers panic, and every error names a real line.

use crate::mutate::{mutate, mutation};
use colball_solver::format::{classic, jsonl};
use proptest::prelude::*;

fn line_count(input: &[u8]) -> usize {
    input.split(|&b| b == b'\n').count()
}

/// Text that looks like the classic format, to reach deep into the parser.
fn classic_like() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        "[0-9]{1,2} [0-9]{1,2}",
        "[RGB]{1,5}",
        "[RGBX r\t]{0,6}",
        "[0-9 ]{0,4}",
        Just(String::new()),
        Just("0".to_string()),
        Just("2 2".to_string()),
        Just("4 4".to_string()),
    ];
    (prop::collection::vec(line, 0..40), any::<bool>())
        .prop_map(|(lines, crlf)| lines.join(if crlf { "\r\n" } else { "\n" }).into_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn classic_never_panics_on_bytes(input in prop::collection::vec(any::<u8>(), 0..512)) {
        if let Err(e) = classic::parse(&input) {
            prop_assert!(e.line >= 1 && e.line <= line_count(&input), "{e}");
        }
    }

    #[test]
    fn classic_never_panics_on_near_misses(input in classic_like()) {
        match classic::parse(&input) {
            Ok(cases) => for c in cases {
                prop_assert!(c.line >= 1 && c.line <= line_count(&input));
            },
            Err(e) => prop_assert!(e.line >= 1 && e.line <= line_count(&input), "{e}"),
        }
    }

    #[test]
    fn jsonl_never_panics(input in prop::collection::vec(any::<u8>(), 0..512)) {
        for result in jsonl::parse(&input) {
            if let Err(e) = result {
                prop_assert!(e.line >= 1 && e.line <= line_count(&input));
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn jsonl_near_misses_name_their_line(
        rows in prop::collection::vec("[RGBx]{0,5}", 0..6),
        id in prop::option::of("[a-z0-9]{0,4}"),
    ) {
        let line = serde_json::json!({"id": id, "start": rows, "target": rows}).to_string();
        let input = format!("\n{line}\n");
        let out = jsonl::parse(input.as_bytes());
        prop_assert_eq!(out.len(), 1);
        match &out[0] {
            Ok(case) => prop_assert_eq!(case.line, 2),
            Err(e) => prop_assert_eq!(e.line, 2),
        }
    }
}

// ---- The seed corpus in tests/corpus/: replayed as-is, and mutated. ----

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    crate::mutate::corpus(&dir, 6)
}

/// Runs both parsers on `input`; every error names a line of the input
/// and says something.
fn check_parsers(input: &[u8]) -> Result<(), TestCaseError> {
    let lines = line_count(input);
    match classic::parse(input) {
        Ok(cases) => {
            for c in cases {
                prop_assert!(c.line >= 1 && c.line <= lines);
            }
        }
        Err(e) => {
            prop_assert!(e.line >= 1 && e.line <= lines, "{e}");
            prop_assert!(!e.to_string().is_empty());
        }
    }
    for result in jsonl::parse(input) {
        match result {
            Ok(case) => prop_assert!(case.line >= 1 && case.line <= lines),
            Err(e) => {
                prop_assert!(e.line >= 1 && e.line <= lines);
                prop_assert!(!e.message.is_empty());
            }
        }
    }
    Ok(())
}

#[test]
fn the_corpus_replays_as_expected() {
    for (name, bytes) in corpus() {
        check_parsers(&bytes).unwrap();
        let classic = classic::parse(&bytes);
        match name.as_str() {
            "classic-sample.in" => assert_eq!(classic.unwrap().len(), 2),
            "classic-sizes.in" => assert_eq!(classic.unwrap().len(), 3),
            "classic-crlf.in" => assert_eq!(classic.unwrap().len(), 1),
            "classic-bad-letter.in" => assert_eq!(classic.unwrap_err().line, 3),
            "classic-bad-size.in" => assert_eq!(classic.unwrap_err().line, 1),
            "classic-truncated.in" => assert!(classic.is_err()),
            "jsonl-sample.jsonl" => {
                assert!(jsonl::parse(&bytes).iter().all(Result::is_ok));
            }
            "jsonl-errors.jsonl" => {
                let lines: Vec<usize> = jsonl::parse(&bytes)
                    .iter()
                    .filter_map(|r| r.as_ref().err().map(|e| e.line))
                    .collect();
                assert_eq!(lines, [1, 2, 3, 5], "{name}");
            }
            other => panic!("no expectation for corpus file {other}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn mutated_corpus_never_panics(
        seed in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let corpus = corpus();
        check_parsers(&mutate(&corpus, seed, &mutations))?;
    }
}
