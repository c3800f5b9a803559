//! The reference answers in the shared examples are reproduced exactly.
//!
//! The examples live beside the repository (`../shared/examples`), not in it;
//! on a clone without them this test says so and checks nothing else.

use std::path::PathBuf;

use colball_solver::BidirSearch;
use colball_solver::format::classic;

fn examples_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/examples");
    dir.is_dir().then_some(dir)
}

#[test]
fn reference_answers_are_reproduced_exactly() {
    let Some(dir) = examples_dir() else {
        eprintln!("skipped: ../shared/examples is not beside this checkout");
        return;
    };
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "in"))
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no *.in files in {}", dir.display());
    let mut search = BidirSearch::new();
    for input in inputs {
        let cases = classic::parse(&std::fs::read(&input).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", input.display()));
        let expected = std::fs::read_to_string(input.with_extension("ans")).unwrap();
        let got: String = cases
            .iter()
            .map(|c| format!("{}\n", search.solve(&c.puzzle).answer()))
            .collect();
        assert_eq!(got, expected, "{}", input.display());
    }
}
