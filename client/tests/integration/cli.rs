//! The `colball` binary end to end: exact output, moves, errors, generation.

use std::path::PathBuf;
use std::process::Output;

use colball_solver::format::classic;
use colball_solver::{apply_moves, parse_moves};

fn colball(args: &[&str], stdin: &[u8]) -> Output {
    crate::common::run(args, None, stdin)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn examples_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/examples");
    dir.is_dir().then_some(dir)
}

#[test]
fn solve_reproduces_every_reference_answer_byte_for_byte() {
    let Some(dir) = examples_dir() else {
        eprintln!("skipped: ../shared/examples is not beside this checkout");
        return;
    };
    for name in [
        "sample",
        "small-uniform",
        "small-walk",
        "big-uniform",
        "far",
    ] {
        let input = dir.join(format!("{name}.in"));
        let out = colball(&["solve", input.to_str().unwrap()], b"");
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let expected = std::fs::read(dir.join(format!("{name}.ans"))).unwrap();
        assert_eq!(text(&out.stdout), text(&expected), "{name}");
    }
}

#[test]
fn generated_puzzles_solve_the_same_on_any_thread_count_and_from_stdin() {
    let gen_args = [
        "gen",
        "--size",
        "2x2,3x3,4x3,4x4",
        "--count",
        "60",
        "--seed",
        "9",
    ];
    let made = colball(&gen_args, b"");
    assert!(made.status.success());
    let cases = classic::parse(&made.stdout).unwrap();
    assert_eq!(cases.len(), 60);
    let one = colball(&["solve", "--threads", "1"], &made.stdout);
    let two = colball(&["solve", "-j", "2", "-"], &made.stdout);
    assert!(one.status.success() && two.status.success());
    assert_eq!(text(&one.stdout), text(&two.stdout));
    assert_eq!(text(&one.stdout).lines().count(), 60);
    // The same seed gives the same file.
    let again = colball(&gen_args, b"");
    assert_eq!(made.stdout, again.stdout);
}

#[test]
fn moves_are_optimal_sequences_that_replay() {
    let made = colball(
        &[
            "gen",
            "--size",
            "3x4,4x4",
            "--count",
            "30",
            "--seed",
            "2",
            "--scramble",
            "8",
        ],
        b"",
    );
    let cases = classic::parse(&made.stdout).unwrap();
    let plain = colball(&["solve"], &made.stdout);
    let with = colball(&["solve", "--moves"], &made.stdout);
    assert!(with.status.success());
    for ((case, line), count) in cases
        .iter()
        .zip(text(&with.stdout).lines())
        .zip(text(&plain.stdout).lines())
    {
        let (n, moves) = line.split_once(' ').unwrap_or((line, ""));
        assert_eq!(n, count);
        let moves = parse_moves(case.puzzle.size(), moves).unwrap();
        assert_eq!(moves.len().to_string(), n);
        assert_eq!(
            apply_moves(case.puzzle.start(), &moves).unwrap(),
            case.puzzle.target()
        );
    }
}

#[test]
fn malformed_classic_input_names_file_and_line_and_fails() {
    let dir = std::env::temp_dir().join(format!("colball-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.in");
    std::fs::write(&file, "2 2\nRR\nRR\nRR\nRR\n3 3\nRRR\nRQR\n").unwrap();
    let out = colball(&["solve", file.to_str().unwrap()], b"");
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("bad.in:8:"), "{err}");
    assert!(err.contains("'Q' is not a colour"), "{err}");
    assert!(out.stdout.is_empty(), "no partial output on a bad file");

    let out = colball(&["solve", dir.join("missing.in").to_str().unwrap()], b"");
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn json_lines_solve_good_lines_and_report_bad_ones() {
    let input = br#"{"id": "a", "start": ["RRR","BBB","RBR"], "target": ["RBR","BRG","GGR"]}
{"id": "b", "start": ["RR","RR"], "target": ["RR"]}
{"start": ["BB","BR"], "target": ["BB","RR"]}
"#;
    let out = colball(&["solve", "--format", "jsonl"], input);
    assert!(!out.status.success(), "a bad line makes the exit non-zero");
    let lines: Vec<serde_json::Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["id"], "a");
    assert_eq!(lines[0]["moves"], 6);
    assert_eq!(lines[0]["solution"].as_str().unwrap().split(' ').count(), 6);
    assert!(lines[0]["time_us"].is_u64());
    assert_eq!(lines[1]["id"], "b");
    assert_eq!(lines[1]["line"], 2);
    assert!(lines[1]["error"].as_str().unwrap().contains("field target"));
    assert_eq!(lines[2]["id"], "3");
    assert_eq!(lines[2]["moves"], -1);
    assert!(text(&out.stderr).contains("<stdin>:2:"));

    // Auto-detection, and classic output for the same input.
    let classic_out = colball(&["solve", "--output", "classic"], input);
    assert_eq!(text(&classic_out.stdout), "6\nerror\n-1\n");
}

#[test]
fn gen_writes_json_lines_that_solve_reads() {
    let made = colball(
        &["gen", "--count", "5", "--size", "3x3", "--format", "jsonl"],
        b"",
    );
    let out = colball(&["solve"], &made.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 5);
    let as_classic = colball(&["gen", "--count", "5", "--size", "3x3"], b"");
    let classic_answers = colball(&["solve"], &as_classic.stdout);
    let json_answers: Vec<String> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["moves"].to_string())
        .collect();
    assert_eq!(
        json_answers.join("\n") + "\n",
        text(&classic_answers.stdout)
    );
}

#[test]
fn usage_errors_are_reported_by_clap() {
    let out = colball(&["solve", "--threads", "0"], b"");
    assert_eq!(out.status.code(), Some(2));
    let out = colball(&["gen", "--size", "5x5"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("out of range"));
}

#[test]
fn every_strategy_prints_the_same_answers() {
    let made = colball(
        &[
            "gen",
            "--size",
            "2x2,3x3,3x4",
            "--count",
            "80",
            "--seed",
            "5",
            "--scramble",
            "7",
        ],
        b"",
    );
    let outputs: Vec<String> = ["auto", "bidir", "idastar", "table"]
        .iter()
        .map(|s| {
            let out = colball(&["solve", "--strategy", s], &made.stdout);
            assert!(out.status.success(), "{s}: {}", text(&out.stderr));
            text(&out.stdout)
        })
        .collect();
    assert!(outputs.iter().all(|o| o == &outputs[0]));
    let out = colball(&["solve", "--strategy", "magic"], &made.stdout);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown strategy"));
}
