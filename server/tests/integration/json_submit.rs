//! A job submitted as one JSON document (`POST /api/v1/jobs` with
//! `Content-Type: application/json`), the form client generators take:
//! its options in any order, its results read back right, its bad records
//! refused by index and field, and its memory bounded whatever its size.

use colball_testkit::LocalCluster;

use crate::common::{mixed, quick};
use crate::jobs::{http, http_json, upload_stays_bounded};

/// A puzzle as a JSON record.
pub(crate) fn record(id: &str, p: &colball_solver::Puzzle) -> serde_json::Value {
    serde_json::json!({"id": id, "start": p.start().rows(), "target": p.target().rows()})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_submission_runs_with_its_options_and_reads_back() {
    let cluster = LocalCluster::start(quick(), 1, 2).await.unwrap();
    let addr = cluster.serve_http().await.unwrap();
    let (puzzles, answers) = mixed(61, 200, 20);
    let records: Vec<_> = puzzles.iter().map(|(id, p)| record(id, p)).collect();
    // The puzzles first, as generated clients send them; the options after.
    let body = serde_json::json!({
        "puzzles": records, "priority": "normal", "name": "from json", "any_order": false,
    });
    let (code, created) = http_json(addr, "/api/v1/jobs", None, body.to_string().as_bytes()).await;
    assert_eq!(code, 201, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(created["puzzles"], 200);
    let id = created["id"].as_str().unwrap();
    let (code, job) = http(addr, "GET", &format!("/api/v1/jobs/{id}"), None, b"").await;
    assert_eq!(code, 200, "{job}");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["name"], "from json");
    let (code, lines) = http(
        addr,
        "GET",
        &format!("/api/v1/jobs/{id}/results?follow=1"),
        None,
        b"",
    )
    .await;
    assert_eq!(code, 200);
    let results: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), 200);
    for (i, (r, answer)) in results.iter().zip(&answers).enumerate() {
        assert_eq!(r["id"], puzzles[i].0, "{r}");
        assert_eq!(r["moves"], *answer, "{r}");
    }
    // A record that does not read is refused by its index and field, and
    // nothing of its job is kept.
    let mut bad = serde_json::json!({"puzzles": [records[0], records[1], {"start": ["RB", "GQ"], "target": ["RB", "GR"]}]});
    let (code, refused) = http_json(addr, "/api/v1/jobs", None, bad.to_string().as_bytes()).await;
    assert_eq!(code, 400, "{refused}");
    assert!(refused.contains("puzzles[2]: field start"), "{refused}");
    bad["puzzles"] = serde_json::json!([records[0]]);
    bad["priority"] = "urgent".into();
    let (code, refused) = http_json(addr, "/api/v1/jobs", None, bad.to_string().as_bytes()).await;
    assert_eq!(code, 400, "{refused}");
    assert!(refused.contains("field priority"), "{refused}");
    let (code, list) = http(addr, "GET", "/api/v1/jobs", None, b"").await;
    assert_eq!(code, 200);
    let list: Vec<serde_json::Value> = serde_json::from_str(&list).unwrap();
    assert_eq!(list.len(), 1, "only the good job: {list:?}");
    cluster.shutdown().await;
}

/// A JSON submission is read as it arrives: 2,000,000 puzzles in one
/// document (about 110 MB) raise the coordinator's peak resident set by
/// less than 64 MiB, as the text upload does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_million_puzzle_json_submission_stays_within_bounded_memory() {
    const PUZZLES: usize = 2_000_000;
    let two = colball_solver::Size::new(2, 2).unwrap();
    let mut g = colball_solver::generate::Generator::new(50);
    let mut body = Vec::with_capacity(PUZZLES * 56);
    body.extend_from_slice(br#"{"puzzles": ["#);
    for i in 0..PUZZLES {
        if i > 0 {
            body.push(b',');
        }
        let p = g.uniform(two);
        body.extend_from_slice(record(&format!("p{i}"), &p).to_string().as_bytes());
    }
    body.extend_from_slice(br#"], "name": "big"}"#);
    upload_stays_bounded("json-2m", &body, PUZZLES, true).await;
}
