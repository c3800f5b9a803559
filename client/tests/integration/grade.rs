//! `colball grade` end to end: answer files built from real solves and then
//! edited, every verdict, both answer formats, both report formats, exit
//! codes, and the same grading in-process and through a cluster.

use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use colball_server::coordinator::Config;
use colball_testkit::LocalCluster;
use serde_json::Value;

fn colball(args: &[&str]) -> Output {
    crate::common::run(args, None, b"")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// Writes `contents` to a fresh file under the test target directory.
fn file(name: &str, contents: &[u8]) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "grade-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn p(path: &std::path::Path) -> &str {
    path.to_str().unwrap()
}

/// Generated puzzles (classic) and their `solve --moves` answer lines.
fn puzzles(args: &[&str]) -> (Vec<u8>, Vec<String>) {
    let mut gen_args = vec!["gen"];
    gen_args.extend_from_slice(args);
    let made = colball(&gen_args);
    assert!(made.status.success());
    let input = file("p.in", &made.stdout);
    let solved = colball(&["solve", "--moves", p(&input)]);
    assert!(solved.status.success(), "{}", text(&solved.stderr));
    let lines = text(&solved.stdout).lines().map(String::from).collect();
    (made.stdout, lines)
}

/// Runs `colball grade --format jsonl` and returns the case records and the
/// summary.
fn grade_jsonl(puzzles: &str, answers: &str, extra: &[&str]) -> (Vec<Value>, Value) {
    let mut args = vec!["grade", puzzles, answers, "--format", "jsonl"];
    args.extend_from_slice(extra);
    let out = colball(&args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    parse_report(&out.stdout)
}

fn parse_report(stdout: &[u8]) -> (Vec<Value>, Value) {
    let mut records: Vec<Value> = text(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = records.pop().unwrap();
    assert!(records.iter().all(|r| r.get("summary").is_none()));
    (records, summary["summary"].clone())
}

/// Indexes of cases by kind: reachable in at least `min` moves, and
/// unreachable.
fn pick(answers: &[String], min: i64) -> (Vec<usize>, Vec<usize>) {
    let count = |l: &String| l.split(' ').next().unwrap().parse::<i64>().unwrap();
    let far = (0..answers.len())
        .filter(|&i| count(&answers[i]) >= min)
        .collect();
    let unreachable = (0..answers.len())
        .filter(|&i| count(&answers[i]) == -1)
        .collect();
    (far, unreachable)
}

fn verdicts(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["verdict"].as_str().unwrap().to_string())
        .collect()
}

/// The answers edited so that the cases get, in order: correct (moves),
/// wrong_answer, invalid_solution (illegal token), invalid_solution (misses
/// the target), not_optimal, correct (count only), malformed, correct
/// (unreachable), and the rest correct except the last, missing.
struct Crafted {
    puzzles: PathBuf,
    answers: Vec<String>,
    expected: Vec<&'static str>,
    optimum: Vec<i64>,
    /// A case answered correctly with its moves.
    correct_with_moves: usize,
}

fn crafted() -> Crafted {
    let (input, answers) = puzzles(&["--size", "2x2,3x3,3x4", "--count", "40", "--seed", "5"]);
    // The last case is left without an answer; the others get edits.
    let last = answers.len() - 1;
    let (mut far, mut unreachable) = pick(&answers, 3);
    far.retain(|&i| i != last);
    unreachable.retain(|&i| i != last);
    assert!(far.len() >= 7 && !unreachable.is_empty(), "{answers:?}");
    let optimum: Vec<i64> = answers
        .iter()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    let mut edited = answers.clone();
    let mut expected = vec!["correct"; answers.len()];
    let split = |l: &str| -> (i64, Vec<String>) {
        let mut t = l.split(' ');
        let n = t.next().unwrap().parse().unwrap();
        (n, t.map(String::from).collect())
    };
    // far[0]: kept, with its moves: correct.
    // far[1]: a wrong count without moves.
    let (n, _) = split(&answers[far[1]]);
    edited[far[1]] = (n + 1).to_string();
    expected[far[1]] = "wrong_answer";
    // far[2]: an illegal token as the second move.
    let (n, mut moves) = split(&answers[far[2]]);
    moves[1] = "c55".into();
    edited[far[2]] = format!("{n} {}", moves.join(" "));
    expected[far[2]] = "invalid_solution";
    // far[3]: the last move dropped, the count adjusted: misses the target.
    let (n, mut moves) = split(&answers[far[3]]);
    moves.pop();
    edited[far[3]] = format!("{} {}", n - 1, moves.join(" "));
    expected[far[3]] = "invalid_solution";
    // far[4]: four quarter turns of the first window first: not optimal.
    let (n, moves) = split(&answers[far[4]]);
    edited[far[4]] = format!("{} r22 r22 r22 r22 {}", n + 4, moves.join(" "));
    expected[far[4]] = "not_optimal";
    // far[5]: the count alone.
    edited[far[5]] = split(&answers[far[5]]).0.to_string();
    // An unreachable case answered with a count where -1 is right: wrong.
    edited[unreachable[0]] = "3".into();
    expected[unreachable[0]] = "wrong_answer";
    // A line that is not a number.
    edited[far[6]] = "seven".into();
    expected[far[6]] = "malformed";
    // The last case has no answer.
    edited.pop();
    expected[last] = "missing";
    Crafted {
        puzzles: file("p.in", &input),
        answers: edited,
        expected,
        optimum,
        correct_with_moves: far[0],
    }
}

#[test]
fn every_verdict_from_classic_answers_in_both_report_formats() {
    let c = crafted();
    let answers = file("a.txt", (c.answers.join("\n") + "\n").as_bytes());
    let (records, summary) = grade_jsonl(p(&c.puzzles), p(&answers), &[]);
    assert_eq!(verdicts(&records), c.expected);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r["case"], i + 1);
        assert_eq!(r["id"], (i + 1).to_string());
        assert_eq!(r["expected"], c.optimum[i], "case {}", i + 1);
    }
    // The details say what went wrong and where.
    let detail = |v: &str| -> Vec<String> {
        records
            .iter()
            .filter(|r| r["verdict"] == v)
            .map(|r| r["detail"].as_str().unwrap().to_string())
            .collect()
    };
    let invalid = detail("invalid_solution");
    assert!(
        invalid[0].starts_with("move 2 `c55`: no such window on a ")
            || invalid[1].starts_with("move 2 `c55`: no such window on a "),
        "{invalid:?}"
    );
    assert!(
        invalid
            .iter()
            .any(|d| d.contains("board differs from the target at row")),
        "{invalid:?}"
    );
    assert!(detail("malformed")[0].contains("seven"));
    let not_optimal = records
        .iter()
        .find(|r| r["verdict"] == "not_optimal")
        .unwrap();
    assert_eq!(
        not_optimal["given"].as_i64().unwrap(),
        not_optimal["expected"].as_i64().unwrap() + 4
    );
    let missing = records.iter().find(|r| r["verdict"] == "missing").unwrap();
    assert!(missing["given"].is_null());
    let count = |v: &str| c.expected.iter().filter(|e| **e == v).count();
    assert_eq!(summary["cases"], c.expected.len());
    for v in [
        "correct",
        "wrong_answer",
        "invalid_solution",
        "not_optimal",
        "missing",
        "malformed",
    ] {
        assert_eq!(summary[v], count(v), "{v}");
    }
    assert_eq!(summary["solver_bug"], 0);
    assert_eq!(summary["extra_answers"], 0);
    let score = summary["score"].as_f64().unwrap();
    assert!((score - count("correct") as f64 / c.expected.len() as f64).abs() < 1e-9);

    // The text report: a line per case and the summary.
    let out = colball(&["grade", p(&c.puzzles), p(&answers)]);
    assert_eq!(out.status.code(), Some(0));
    let report = text(&out.stdout);
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), c.expected.len() + 1);
    for (i, v) in c.expected.iter().enumerate() {
        assert!(
            lines[i].starts_with(&format!("case {}: {v}", i + 1)),
            "{}",
            lines[i]
        );
    }
    let last = lines.last().unwrap();
    assert!(
        last.starts_with(&format!("summary: {} cases: ", c.expected.len()))
            && last.contains(&format!("{} correct", count("correct"))),
        "{last}"
    );
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
}

#[test]
fn json_answers_are_graded_like_classic_ones_and_may_disagree_with_themselves() {
    let c = crafted();
    // The same edits as JSON Lines records: count and sequence split into
    // `moves` and `solution`; a count alone as `moves` only.
    let mut lines: Vec<String> = c
        .answers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut t = l.split(' ');
            let first = t.next().unwrap();
            let rest: Vec<&str> = t.collect();
            match first.parse::<i64>() {
                Err(_) => "{\"moves\": \"seven\"}".to_string(),
                Ok(n) if rest.is_empty() => serde_json::json!({"id": i + 1, "moves": n}).to_string(),
                Ok(n) => serde_json::json!({"id": (i + 1).to_string(), "moves": n, "solution": rest.join(" ")})
                    .to_string(),
            }
        })
        .collect();
    let answers = file("a.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (records, _) = grade_jsonl(p(&c.puzzles), p(&answers), &[]);
    assert_eq!(verdicts(&records), c.expected);

    // A record whose count disagrees with its own sequence; one with the
    // sequence only.
    let first_correct_with_moves = c.correct_with_moves;
    let (n, moves) = c.answers[first_correct_with_moves].split_once(' ').unwrap();
    let n: i64 = n.parse().unwrap();
    assert_eq!(records[first_correct_with_moves]["verdict"], "correct");
    lines[first_correct_with_moves] =
        serde_json::json!({"moves": n + 1, "solution": moves}).to_string();
    let answers = file("a.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (records2, _) = grade_jsonl(p(&c.puzzles), p(&answers), &[]);
    let r = &records2[first_correct_with_moves];
    assert_eq!(r["verdict"], "invalid_solution");
    assert_eq!(
        r["detail"],
        format!(
            "the answer says {} moves but its sequence has {}",
            n + 1,
            moves.split(' ').count()
        )
    );
    lines[first_correct_with_moves] = serde_json::json!({"solution": moves}).to_string();
    let answers = file("a.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (records3, _) = grade_jsonl(p(&c.puzzles), p(&answers), &[]);
    assert_eq!(records3[first_correct_with_moves]["verdict"], "correct");
    assert_eq!(records3[first_correct_with_moves]["given"], n);

    // `colball solve --output jsonl` output is an answers file.
    let solved = colball(&["solve", "--output", "jsonl", p(&c.puzzles)]);
    let answers = file("solved.jsonl", &solved.stdout);
    let (records, summary) = grade_jsonl(p(&c.puzzles), p(&answers), &[]);
    assert!(records.iter().all(|r| r["verdict"] == "correct"));
    assert_eq!(summary["score"], 1.0);
}

#[test]
fn answers_match_by_id_when_both_files_have_ids_and_extras_are_counted() {
    let made = colball(&[
        "gen", "--size", "2x3,3x3", "--count", "12", "--seed", "8", "--format", "jsonl",
    ]);
    // Rename the ids so they are not case numbers.
    let puzzles: Vec<Value> = text(&made.stdout)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v["id"] = format!("p{}", v["id"].as_str().unwrap()).into();
            v
        })
        .collect();
    let body: String = puzzles.iter().map(|v| format!("{v}\n")).collect();
    let puzzle_file = file("p.jsonl", body.as_bytes());
    let solved = colball(&["solve", "--output", "jsonl", p(&puzzle_file)]);
    assert!(solved.status.success());
    let mut lines: Vec<String> = text(&solved.stdout).lines().map(String::from).collect();
    lines.reverse();
    lines.push(r#"{"id": "nope", "moves": 3}"#.into());
    let answers = file("a.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (records, summary) = grade_jsonl(p(&puzzle_file), p(&answers), &[]);
    assert!(
        records.iter().all(|r| r["verdict"] == "correct"),
        "{records:?}"
    );
    assert_eq!(records[4]["id"], "p5");
    assert_eq!(summary["matched_by"], "id");
    assert_eq!(summary["extra_answers"], 1);

    // Classic answers with two lines too many: by position, the rest extra.
    let classic = colball(&["solve", p(&puzzle_file), "--output", "classic"]);
    let mut body = text(&classic.stdout);
    body.push_str("4\n5\n");
    let answers = file("a.txt", body.as_bytes());
    let (records, summary) = grade_jsonl(p(&puzzle_file), p(&answers), &[]);
    assert_eq!(records.len(), 12);
    assert!(records.iter().all(|r| r["verdict"] == "correct"));
    assert_eq!(summary["extra_answers"], 2);
    assert_eq!(summary["matched_by"], "position");
    let out = colball(&["grade", p(&puzzle_file), p(&answers)]);
    let report = text(&out.stdout);
    assert!(
        report.contains("extra: the answer on line 13 is beyond the last case"),
        "{report}"
    );
    assert!(
        report.contains("2 extra answers matched no case"),
        "{report}"
    );
}

#[test]
fn exit_codes_and_input_errors() {
    let (input, answers) = puzzles(&["--size", "2x3", "--count", "3", "--seed", "2"]);
    let puzzle_file = file("p.in", &input);
    let answer_file = file("a.txt", (answers.join("\n") + "\n").as_bytes());
    // Unreadable files.
    let out = colball(&["grade", "/nonexistent/p.in", p(&answer_file)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot read /nonexistent/p.in"));
    let out = colball(&["grade", p(&puzzle_file), "/nonexistent/a.txt"]);
    assert_eq!(out.status.code(), Some(1));
    // A puzzle file that does not parse: file and line named.
    let mut bad = input.clone();
    let at = text(&bad).find("\n").unwrap() + 1;
    bad[at] = b'X';
    let bad_file = file("bad.in", &bad);
    let out = colball(&["grade", p(&bad_file), p(&answer_file)]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("colball: {}:2: ", p(&bad_file))) && stderr.contains("'X'"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    // Usage errors.
    assert_eq!(colball(&["grade"]).status.code(), Some(2));
    let out = colball(&["grade", p(&puzzle_file), p(&answer_file), "--format", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    // Bad verdicts are still a successful grading.
    let wrong = file("w.txt", b"99\nnot a number\n");
    let out = colball(&["grade", "--quiet", p(&puzzle_file), p(&wrong)]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("case 3: missing"));
}

#[test]
fn solve_writes_nothing_on_stderr_in_a_pipe_and_accepts_quiet() {
    let made = colball(&[
        "gen",
        "--size",
        "2x2,2x3,3x3",
        "--count",
        "600",
        "--seed",
        "4",
    ]);
    let input = file("p.in", &made.stdout);
    let plain = colball(&["solve", p(&input)]);
    assert!(plain.status.success());
    assert!(plain.stderr.is_empty(), "{}", text(&plain.stderr));
    for args in [
        vec!["--quiet", "solve", p(&input)],
        vec!["solve", "-q", p(&input)],
    ] {
        let quiet = colball(&args);
        assert!(quiet.status.success(), "{args:?}");
        assert!(quiet.stderr.is_empty());
        assert_eq!(quiet.stdout, plain.stdout);
    }
    let answers = file("a.txt", &plain.stdout);
    let graded = colball(&["grade", p(&input), p(&answers)]);
    assert!(graded.status.success());
    assert!(graded.stderr.is_empty(), "{}", text(&graded.stderr));
    assert!(text(&graded.stdout).contains("600 cases: 600 correct; score 1.000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_grades_like_in_process_and_solves_each_puzzle_once() {
    let cluster = LocalCluster::start(Config::default(), 2, 1).await.unwrap();
    let url = cluster.url();
    let c = crafted();
    let answers = file("a.txt", (c.answers.join("\n") + "\n").as_bytes());
    let (puzzles, answers) = (p(&c.puzzles).to_string(), p(&answers).to_string());
    let run = |extra: Vec<String>| {
        let (puzzles, answers) = (puzzles.clone(), answers.clone());
        tokio::task::spawn_blocking(move || {
            let mut args = vec!["grade", &puzzles, &answers, "--format", "jsonl"];
            args.extend(extra.iter().map(String::as_str));
            let out = colball(&args);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
            out.stdout
        })
    };
    let local = run(vec![]).await.unwrap();
    let solved_before = cluster.scheduler.snapshot().0.counters.solved;
    let remote = run(vec!["--connect".into(), url.clone()]).await.unwrap();
    assert_eq!(text(&remote), text(&local));
    let (records, _) = parse_report(&remote);
    assert_eq!(verdicts(&records), c.expected);
    let solved_once = cluster.scheduler.snapshot().0.counters.solved;
    assert!(solved_once > solved_before);
    assert!(solved_once as usize <= c.expected.len());

    // A second contestant on the same puzzles: every optimum comes from the
    // coordinator's cache, the workers solve nothing.
    let again = {
        let (puzzles, answers, url) = (puzzles.clone(), answers.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            crate::common::run(
                &["grade", &puzzles, &answers, "--format", "jsonl"],
                Some(("COLBALL_CONNECT", &url)),
                b"",
            )
        })
        .await
        .unwrap()
    };
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), text(&local));
    assert_eq!(cluster.scheduler.snapshot().0.counters.solved, solved_once);
    cluster.shutdown().await;
}

#[test]
fn connect_to_nothing_is_a_clear_error() {
    let (input, answers) = puzzles(&["--size", "2x2", "--count", "2", "--seed", "1"]);
    let puzzle_file = file("p.in", &input);
    let answer_file = file("a.txt", (answers.join("\n") + "\n").as_bytes());
    let out = colball(&[
        "grade",
        p(&puzzle_file),
        p(&answer_file),
        "--connect",
        "http://127.0.0.1:1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("cannot connect to http://127.0.0.1:1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_puzzle_gets_an_error_verdict_not_a_broken_stream() {
    use colball_proto::v1::{self, solver_client::SolverClient};
    use tokio_stream::StreamExt;
    let cluster = LocalCluster::start(Config::default(), 1, 1).await.unwrap();
    let mut client = SolverClient::connect(cluster.url()).await.unwrap();
    let puzzle = |id: &str, target: &str| v1::Puzzle {
        id: id.into(),
        start: vec!["RB".into(), "GR".into()],
        target: vec!["RB".into(), target.into()],
    };
    let request = v1::GradeRequest {
        priority: 0,
        cases: vec![
            v1::GradeCase {
                puzzle: Some(puzzle("bad", "GX")),
                answer: Some(v1::Answer {
                    moves: Some(1),
                    ..Default::default()
                }),
            },
            v1::GradeCase {
                puzzle: Some(puzzle("same", "GR")),
                answer: Some(v1::Answer {
                    moves: Some(0),
                    solution: Some(String::new()),
                    ..Default::default()
                }),
            },
            v1::GradeCase {
                puzzle: Some(puzzle("none", "GR")),
                answer: None,
            },
        ],
    };
    let mut stream = client.grade(request).await.unwrap().into_inner();
    let mut results = Vec::new();
    while let Some(r) = stream.next().await {
        results.push(r.unwrap());
    }
    results.sort_by_key(|r| r.index);
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].verdict, v1::Verdict::Error as i32);
    assert_eq!(results[0].expected, None);
    assert_eq!(results[0].given, Some(1));
    assert!(
        results[0].detail.contains("\"bad\"") && results[0].detail.contains("target"),
        "{}",
        results[0].detail
    );
    assert_eq!(results[1].id, "same");
    assert_eq!(results[1].verdict, v1::Verdict::Correct as i32);
    assert_eq!(results[1].expected, Some(0));
    assert_eq!(results[2].verdict, v1::Verdict::Missing as i32);
    cluster.shutdown().await;
}
