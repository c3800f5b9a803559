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
    assert!(
        text(&out.stderr).contains("invalid value 'magic' for '--strategy <STRATEGY>'"),
        "{}",
        text(&out.stderr)
    );
}

/// Runs `colball solve ARGS` on `stdin`: exit code, stdout, stderr.
fn solve(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    let mut all = vec!["solve"];
    all.extend_from_slice(args);
    let out = colball(&all, stdin);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_size_too_large_for_a_number_is_not_a_board_size() {
    let (code, out, err) = solve(&[], b"99999999999999999999 2\n");
    assert_eq!(code, Some(1));
    assert_eq!(out, "");
    assert_eq!(
        err,
        "colball: <stdin>:1: case 1: 99999999999999999999 in the size line is not a board size (rows and columns are 2 to 4)\n"
    );
}

#[test]
fn a_space_between_letters_is_refused_naming_its_column() {
    let (code, _, err) = solve(&[], b"2 2\nB B\nBR\nBB\nRR\n");
    assert_eq!(code, Some(1));
    assert_eq!(
        err,
        "colball: <stdin>:2: case 1, start board, row 1, column 2: a space between letters (write a row's letters together, like RGB)\n"
    );
    // Spaces around numbers and rows are fine.
    let (code, out, _) = solve(&[], b"  2  2 \n BB \nBR\nBB\nRR\n");
    assert_eq!((code, out.as_str()), (Some(0), "-1\n"));
}

#[test]
fn a_byte_order_mark_at_the_start_is_accepted() {
    let sample = "2 2\nBB\nBR\nBB\nRR\n3 3\nRRR\nBBB\nRBR\nRBR\nBRG\nGGR\n0\n";
    let with_bom = [b"\xEF\xBB\xBF".as_slice(), sample.as_bytes()].concat();
    let (code, out, err) = solve(&[], &with_bom);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(0), "-1\n6\n", ""));
    let json =
        b"\xEF\xBB\xBF{\"id\": \"a\", \"start\": [\"BB\",\"BR\"], \"target\": [\"BB\",\"RR\"]}\n";
    let (code, out, err) = solve(&["--output", "classic"], json);
    assert_eq!((code, out.as_str(), err.as_str()), (Some(0), "-1\n", ""));
}

#[test]
fn an_empty_or_blank_input_says_it_holds_no_case() {
    for input in [&b""[..], b"\n  \n\t\n", b"0\n"] {
        let (code, out, err) = solve(&[], input);
        assert_eq!(code, Some(0), "{input:?}");
        assert_eq!(out, "");
        assert_eq!(err, "colball: <stdin> holds no case (nothing to solve)\n");
    }
    let (code, _, err) = solve(&["--format", "jsonl"], b"\n\n");
    assert_eq!(
        (code, err.as_str()),
        (
            Some(0),
            "colball: <stdin> holds no case (nothing to solve)\n"
        )
    );
    let (code, out, err) = solve(&["-q"], b"");
    assert_eq!((code, out.as_str(), err.as_str()), (Some(0), "", ""));
}

#[test]
fn an_endless_line_is_refused_after_a_mebibyte() {
    // From standard input: 3 MiB without a newline after a good case.
    let mut input = b"2 2\nRR\nRR\nRR\nRR\n".to_vec();
    input.resize(input.len() + (3 << 20), b'R');
    let (code, out, err) = solve(&[], &input);
    assert_eq!(code, Some(1));
    assert_eq!(out, "");
    assert_eq!(
        err,
        "colball: <stdin>:6: line 6 is longer than 1 MiB; this is not a puzzle file\n"
    );
    // /dev/zero, under a memory limit so that reading it whole would fail
    // rather than fill the machine.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 2000000 && exec '{}' solve /dev/zero",
            env!("CARGO_BIN_EXE_colball")
        ))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "colball: /dev/zero:1: line 1 is longer than 1 MiB; this is not a puzzle file\n"
    );
}

#[test]
fn json_lines_errors_name_the_field_in_plain_words() {
    let input = br#"{"id": 1.5, "start": ["BB","BR"], "target": ["BB","RR"]}
{"id": "s", "start": "BB", "target": ["BB","RR"]}
[1, 2]
"#;
    let (code, out, err) = solve(&[], input);
    assert_eq!(code, Some(1));
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors: Vec<&str> = records
        .iter()
        .map(|r| r["error"].as_str().unwrap())
        .collect();
    assert_eq!(
        errors,
        [
            "field id: expected a string or a whole number, found the number 1.5",
            "field start: expected a list of rows of letters, like [\"RGB\", \"BBR\"], found a string",
            "expected a puzzle object like {\"id\": \"p1\", \"start\": [...], \"target\": [...]}, found a list",
        ]
    );
    assert!(!err.contains("variant") && !err.contains("struct"), "{err}");
}

#[test]
fn a_repeated_json_lines_id_is_an_error_for_its_line_as_on_the_cluster() {
    let input = br#"{"id": "a", "start": ["BB","BR"], "target": ["BB","RR"]}
{"id": "a", "start": ["RRR","BBB","RBR"], "target": ["RBR","BRG","GGR"]}
{"id": "b", "start": ["RRR","BBB","RBR"], "target": ["RBR","BRG","GGR"]}
"#;
    let (code, out, err) = solve(&[], input);
    assert_eq!(code, Some(1), "a repeat makes the exit non-zero");
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["moves"], -1);
    assert_eq!(
        records[1],
        serde_json::json!({
            "id": "a",
            "line": 2,
            "error": "field id: \"a\" is the id of line 1 already (ids must be unique within a file)"
        })
    );
    assert_eq!(records[2]["moves"], 6);
    assert_eq!(
        err,
        "colball: <stdin>:2: field id: \"a\" is the id of line 1 already (ids must be unique within a file)\n"
    );
}

#[test]
fn bench_checks_its_far_file_before_timing_anything() {
    let out = colball(
        &[
            "bench",
            "--far",
            "/nonexistent/far.in",
            "--count",
            "1",
            "--small",
            "1",
        ],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "", "nothing was timed");
    assert_eq!(
        text(&out.stderr),
        "colball: cannot read /nonexistent/far.in: No such file or directory (os error 2)\n"
    );
    let dir = std::env::temp_dir().join(format!("colball-bench-far-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.in");
    std::fs::write(&bad, "2 2\nRR\nRX\n").unwrap();
    let out = colball(
        &["bench", "--far", bad.to_str().unwrap(), "--count", "1"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).ends_with("bad.in:3: case 1, start board, row 2, column 2: 'X' is not a colour (expected R, B or G)\n"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // The file the help names is shipped, and times.
    let help = text(&colball(&["bench", "--help"], b"").stdout);
    assert!(help.contains("docs/examples/far.in"), "{help}");
    let far = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/far.in");
    let out = colball(
        &[
            "bench",
            "--far",
            far.to_str().unwrap(),
            "--count",
            "2",
            "--small",
            "2",
        ],
        b"",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).lines().any(|l| l.starts_with("far.in ")),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn strategy_values_are_listed_in_help() {
    let help = text(&colball(&["solve", "--help"], b"").stdout);
    let strategy = help
        .split("--strategy")
        .nth(1)
        .and_then(|s| s.split("--cache-entries").next())
        .unwrap_or_else(|| panic!("{help}"));
    assert!(
        strategy.contains("[possible values: auto, bidir, idastar, table]"),
        "{strategy}"
    );
    let out = colball(&["solve", "--strategy", "fast"], b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[possible values: auto, bidir, idastar, table]"),
        "{}",
        text(&out.stderr)
    );
    let (code, out, _) = solve(&["--strategy", "idastar"], b"2 2\nBB\nBR\nBB\nRR\n");
    assert_eq!((code, out.as_str()), (Some(0), "-1\n"));
}
