use super::super::conformance::{entries, new_job};
use super::*;
use colball_core::Priority;

#[test]
fn jobs_survive_a_reopen_and_unacknowledged_ones_do_not() {
    let dir = std::env::temp_dir().join(format!("colball-store-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = Database::open(Some(&dir), None).unwrap();
    let job = s.create(&new_job("alice")).unwrap();
    s.add(job, 0, &entries(10)).unwrap();
    s.seal(job, 2).unwrap();
    let result = egress::PuzzleResult::failed("p1".into(), 1, "no".into());
    assert_eq!(
        s.put_results(&[ToWrite::unfenced(job, result)]).unwrap(),
        [true]
    );
    let half = s.create(&new_job("bob")).unwrap();
    s.add(half, 0, &entries(2)).unwrap();
    let id = s.job_id(job);
    drop(s);
    let s = Database::open(Some(&dir), None).unwrap();
    let row = s.job(job).unwrap().unwrap();
    assert_eq!(
        (row.puzzles, row.solved, row.errors, row.owner.as_str()),
        (10, 0, 1, "alice")
    );
    assert_eq!(s.job_seq(&id), Some(job), "ids stay valid");
    assert_eq!(s.unfinished().unwrap().len(), 1);
    assert_eq!(s.pending(job, None, 100).unwrap().len(), 9);
    // A job whose puzzles never all arrived is gone after a reopen.
    assert!(s.job(half).unwrap().is_none());
    assert_eq!(s.pending(half, None, 100).unwrap().len(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A job's state or priority class this version does not know (a
/// newer colball's, or damage) is an error naming it, never a guess.
#[test]
fn a_number_this_version_cannot_read_is_an_error() {
    let dir = std::env::temp_dir().join(format!("colball-store-n-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s = Database::open(Some(&dir), None).unwrap();
    let job = s.create(&new_job("alice")).unwrap();
    s.add(job, 0, &entries(3)).unwrap();
    s.seal(job, 2).unwrap();
    assert_eq!(s.job(job).unwrap().unwrap().priority, Priority::Bulk);
    drop(s);
    for (column, value, named) in [("state", 9, "state 9"), ("priority", 7, "priority class 7")] {
        let raw = Connection::open(dir.join(FILE_NAME)).unwrap();
        raw.execute(&format!("UPDATE jobs SET {column} = ?1"), [value])
            .unwrap();
        drop(raw);
        let s = Database::open(Some(&dir), None).unwrap();
        let e = s.job(job).unwrap_err().to_string();
        assert!(e.contains(named), "{e}");
        assert!(s.list("alice").is_err());
        drop(s);
        let raw = Connection::open(dir.join(FILE_NAME)).unwrap();
        raw.execute("UPDATE jobs SET state = 3, priority = 3", [])
            .unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file of the first layout (a row per puzzle and per result), as
/// the earlier builds wrote it.
const FIRST_LAYOUT: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    INSERT INTO meta VALUES ('instance', 'abcdef012345');
    CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL,
        name TEXT NOT NULL, priority INTEGER NOT NULL, state INTEGER NOT NULL,
        puzzles INTEGER NOT NULL, solved INTEGER NOT NULL DEFAULT 0,
        errors INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
        finished_ms INTEGER NOT NULL DEFAULT 0, failure TEXT NOT NULL DEFAULT '');
    CREATE INDEX jobs_by_owner ON jobs (owner, seq);
    CREATE TABLE puzzles (job INTEGER NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL,
        size INTEGER NOT NULL, start INTEGER NOT NULL, target INTEGER NOT NULL,
        PRIMARY KEY (job, idx)) WITHOUT ROWID;
    CREATE TABLE results (job INTEGER NOT NULL, idx INTEGER NOT NULL,
        error INTEGER NOT NULL, result BLOB NOT NULL, PRIMARY KEY (job, idx)) WITHOUT ROWID;
";

#[test]
fn a_database_of_the_first_layout_is_migrated_whole() {
    let dir = std::env::temp_dir().join(format!("colball-store-v1-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let all = entries(5000);
    {
        let old = Connection::open(dir.join(FILE_NAME)).unwrap();
        old.execute_batch(FIRST_LAYOUT).unwrap();
        old.execute_batch("BEGIN").unwrap();
        old.execute(
            "INSERT INTO jobs (owner, name, priority, state, puzzles, solved, errors, created_ms) VALUES ('alice', 'old', 3, 2, 5000, 1, 1, 1)",
            [],
        )
        .unwrap();
        for (i, e) in all.iter().enumerate() {
            // Puzzle 2 was invalid: it has its error result, no puzzle row.
            let Entry::Puzzle { id, puzzle } = e else {
                unreachable!()
            };
            if i == 2 {
                continue;
            }
            let size = puzzle.size();
            old.execute(
                "INSERT INTO puzzles VALUES (1, ?1, ?2, ?3, ?4, ?5)",
                params![
                    i as i64,
                    id.as_str(),
                    (size.rows() * 10 + size.cols()) as i64,
                    puzzle.start().packed(),
                    puzzle.target().packed()
                ],
            )
            .unwrap();
        }
        for (idx, error) in [(2u64, true), (4, false)] {
            let r = v1::PuzzleResult {
                index: idx,
                id: format!("p{idx}"),
                ..Default::default()
            };
            old.execute(
                "INSERT INTO results VALUES (1, ?1, ?2, ?3)",
                params![idx as i64, error, r.encode_to_vec()],
            )
            .unwrap();
        }
        old.execute_batch("COMMIT").unwrap();
    }
    let s = Database::open(Some(&dir), None).unwrap();
    let row = s.job(1).unwrap().unwrap();
    assert_eq!(
        (row.puzzles, row.solved, row.errors, row.any_order),
        (5000, 1, 1, false)
    );
    assert_eq!(s.job_seq("j1-abcdef012345"), Some(1), "ids stay valid");
    let pending = s.pending(1, None, 10_000).unwrap();
    assert_eq!(pending.len(), 4998);
    assert!(pending.iter().all(|p| p.0 != 2 && p.0 != 4));
    for (index, id, puzzle) in &pending {
        let Entry::Puzzle { id: was, puzzle: p } = &all[*index as usize] else {
            unreachable!()
        };
        assert_eq!((id, puzzle), (was, p));
    }
    let stored: Vec<u64> = s
        .results_after(1, 0, 10)
        .unwrap()
        .iter()
        .map(|r| r.index)
        .collect();
    assert_eq!(stored, [2, 4]);
    drop(s);
    // Opened again, it is at the current version and reads the same.
    let s = Database::open(Some(&dir), None).unwrap();
    assert_eq!(s.pending(1, Some(4000), 10_000).unwrap().len(), 999);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A file of the second layout (puzzles in chunks, a row per result,
/// an any-order job's stored order in `pos`), as the earlier builds
/// wrote it, less the jobs table, which it shares with today's.
const SECOND_LAYOUT: &str = "
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    INSERT INTO meta VALUES ('instance', 'abcdef012345');
    CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT NOT NULL,
        name TEXT NOT NULL, priority INTEGER NOT NULL, state INTEGER NOT NULL,
        puzzles INTEGER NOT NULL, solved INTEGER NOT NULL DEFAULT 0,
        errors INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL,
        finished_ms INTEGER NOT NULL DEFAULT 0, failure TEXT NOT NULL DEFAULT '',
        fail_fast INTEGER NOT NULL DEFAULT 0, any_order INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX jobs_by_owner ON jobs (owner, seq);
    CREATE TABLE chunks (key INTEGER PRIMARY KEY, puzzles BLOB NOT NULL, ids BLOB NOT NULL);
    CREATE TABLE results (key INTEGER PRIMARY KEY, result BLOB NOT NULL, pos INTEGER);
    CREATE INDEX results_by_pos ON results (pos) WHERE pos IS NOT NULL;
    PRAGMA user_version = 2;
";

#[test]
fn a_database_of_the_second_layout_is_migrated_whole() {
    let dir = std::env::temp_dir().join(format!("colball-store-v2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let all = entries(300);
    // Results stored in this order, of an any-order job.
    let stored = [250u64, 3, 130, 7];
    {
        let old = Connection::open(dir.join(FILE_NAME)).unwrap();
        old.execute_batch(SECOND_LAYOUT).unwrap();
        old.execute(
            "INSERT INTO jobs (owner, name, priority, state, puzzles, solved, created_ms, any_order) VALUES ('alice', 'old', 3, 2, 300, 4, 1, 1)",
            [],
        )
        .unwrap();
        for (n, chunk) in all.chunks(layout::CHUNK).enumerate() {
            let (puzzles, ids) = packing::pack(chunk);
            old.execute(
                "INSERT INTO chunks VALUES (?1, ?2, ?3)",
                params![key(1, (n * layout::CHUNK) as u64), puzzles, ids],
            )
            .unwrap();
        }
        for (pos, index) in stored.iter().enumerate() {
            let r = v1::PuzzleResult {
                index: *index,
                id: format!("p{index}"),
                ..Default::default()
            };
            old.execute(
                "INSERT INTO results VALUES (?1, ?2, ?3)",
                params![key(1, *index), r.encode_to_vec(), key(1, pos as u64)],
            )
            .unwrap();
        }
    }
    let s = Database::open(Some(&dir), None).unwrap();
    // The migration counted the job's bytes: its chunks and results.
    let packed: usize = all
        .chunks(layout::CHUNK)
        .map(|c| {
            let (puzzles, ids) = packing::pack(c);
            puzzles.len() + ids.len()
        })
        .sum();
    let counted = s.job(1).unwrap().unwrap().bytes;
    assert!(counted > packed as u64, "{counted} bytes, {packed} packed");
    let indices = |from, stored_order| -> Vec<u64> {
        s.results(1, from, 10, stored_order)
            .unwrap()
            .iter()
            .map(|r| r.index)
            .collect()
    };
    assert_eq!(indices(0, true), stored);
    assert_eq!(indices(2, true), [130, 7]);
    let in_order: Vec<u64> = s
        .results_after(1, 0, 10)
        .unwrap()
        .iter()
        .map(|r| r.index)
        .collect();
    assert_eq!(in_order, [3, 7, 130, 250]);
    let pending = s.pending(1, None, 1000).unwrap();
    assert_eq!(pending.len(), 296);
    assert!(pending.iter().all(|p| !stored.contains(&p.0)));
    // New results go on from where the stored order ended.
    let more = [5, 3].map(|i| {
        ToWrite::unfenced(
            1,
            egress::PuzzleResult::failed(format!("p{i}").into(), i, "no".into()),
        )
    });
    assert_eq!(s.put_results(&more).unwrap(), [true, false]);
    assert_eq!(indices(0, true), [250, 3, 130, 7, 5]);
    let row = s.job(1).unwrap().unwrap();
    assert_eq!((row.solved, row.errors, row.any_order), (4, 1, true));
    assert!(row.bytes > counted, "the new result counts");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_file_is_named() {
    let dir = std::env::temp_dir().join(format!("colball-store-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(FILE_NAME),
        b"this is not a database, just some text".repeat(200),
    )
    .unwrap();
    let e = Database::open(Some(&dir), None).unwrap_err().to_string();
    assert!(e.contains(FILE_NAME), "{e}");
    assert!(e.contains("not a database"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
