//! Results written: fenced by their windows' claims, deduplicated by the
//! windows' bitmaps, a group a window per statement.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use super::super::{StoreError, WINDOW, packing};
use super::{CHANNEL, ROW_BYTES, backend, has, mark, results_hint};

/// A result to store: its index, whether it is an error, its encoding and
/// its fence (the epoch of its window's claim it was solved under).
pub(super) type Fenced<'a> = (u64, bool, &'a [u8], Option<u64>);

/// Stores `results` of job `job` unless stored already, the job's row
/// locked first (so concurrent writers take turns), then its windows'
/// rows: the first of each index wins, by the window's bitmap. A fenced
/// result is stored only while its fence is its window's epoch, read under
/// that lock, which holds until the commit: a claim of the window (which
/// raises the epoch) waits for the results being written and then sees
/// them stored, and once it is made the older claim's results are refused.
/// The new results go in as a group a window, in one statement with the
/// windows' bitmaps and the job's counts. Whether each was new; none is
/// for a job no longer stored, nor for an index beyond its upload.
pub(super) async fn put_locked(
    tx: &deadpool_postgres::Transaction<'_>,
    job: i64,
    results: &[Fenced<'_>],
    seen: &mut Vec<((i64, u64), SeenWindow)>,
    origin: i32,
) -> Result<Vec<bool>, StoreError> {
    let Some(stored) = tx
        .query_opt(
            "SELECT stored FROM colball_jobs WHERE seq = $1 FOR UPDATE",
            &[&job],
        )
        .await
        .map_err(backend)?
    else {
        return Ok(vec![false; results.len()]);
    };
    let stored: i64 = stored.get(0);
    let wins: Vec<i64> = results
        .iter()
        .map(|r| (r.0 / WINDOW as u64) as i64)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Each window's epoch and bitmap, and its new results in order.
    let mut windows: BTreeMap<u64, (u64, Vec<u8>, Group)> = tx
        .query(
            "SELECT win, epoch, got FROM colball_windows WHERE job = $1 AND win = ANY($2) \
             ORDER BY win FOR UPDATE",
            &[&job, &wins],
        )
        .await
        .map_err(backend)?
        .iter()
        .map(|r| {
            let win = r.get::<_, i64>(0) as u64;
            (win, (r.get::<_, i64>(1) as u64, r.get(2), Vec::new()))
        })
        .collect();
    let mut counts = Counts::default();
    let mut new = Vec::with_capacity(results.len());
    // The windows this write's holder fences (its own claims).
    let mut own = BTreeSet::new();
    for &(index, error, encoded, fence) in results {
        let win = index / WINDOW as u64;
        let at = index % WINDOW as u64;
        let fresh = windows.get_mut(&win).is_some_and(|(epoch, got, group)| {
            if fence == Some(*epoch) {
                own.insert(win);
            }
            let fresh = fence.is_none_or(|f| f == *epoch) && !has(got, at);
            if fresh {
                mark(got, at);
                group.push((index, encoded));
            }
            fresh
        });
        new.push(fresh);
        if fresh {
            counts.add(error, encoded);
        }
    }
    let mut rows = GroupRows::default();
    let mut next = stored;
    for (w, (epoch, bits, group)) in windows {
        if own.contains(&w) {
            // Its holder's: as it is stored once this commits.
            seen.push((
                (job, w),
                SeenWindow {
                    epoch,
                    got: bits.clone(),
                },
            ));
        }
        if !group.is_empty() {
            next = rows.push(next, w, bits, &group);
        }
    }
    let Counts {
        solved,
        errors,
        bytes,
    } = counts;
    let GroupRows {
        pos,
        n,
        win,
        lo,
        hi,
        got,
        body,
    } = rows;
    if !pos.is_empty() {
        tx.execute(
            "WITH g AS ( \
               INSERT INTO colball_result_groups (job, pos, n, win, lo, hi, body) \
               SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::bigint[], $5::bigint[], \
                 $6::bigint[], $7::bytea[])), \
             w AS ( \
               UPDATE colball_windows w SET got = u.got, filled = w.filled + u.n \
               FROM unnest($4::bigint[], $8::bytea[], $3::int[]) AS u(win, got, n) \
               WHERE w.job = $1 AND w.win = u.win), \
             j AS ( \
               UPDATE colball_jobs SET solved = solved + $9, errors = errors + $10, \
                 stored = $11, bytes = bytes + $12 WHERE seq = $1 RETURNING seq) \
             SELECT pg_notify($13, $14) FROM j",
            &[
                &job,
                &pos,
                &n,
                &win,
                &lo,
                &hi,
                &body,
                &got,
                &solved,
                &errors,
                &next,
                &bytes,
                &CHANNEL,
                &results_hint(job, &win, origin),
            ],
        )
        .await
        .map_err(backend)?;
    }
    Ok(new)
}

/// Results of one window as a group holds them: (index, encoded result).
pub(super) type Group<'a> = Vec<(u64, &'a [u8])>;

/// What a write adds to its job's counts.
#[derive(Default)]
pub(super) struct Counts {
    solved: i64,
    errors: i64,
    bytes: i64,
}

impl Counts {
    fn add(&mut self, error: bool, encoded: &[u8]) {
        self.bytes += encoded.len() as i64 + ROW_BYTES;
        if error {
            self.errors += 1;
        } else {
            self.solved += 1;
        }
    }
}

/// The result groups a write adds, as the arrays its statement takes
/// (`colball_result_groups` columns, and each window's new bitmap).
#[derive(Default)]
pub(super) struct GroupRows {
    pos: Vec<i64>,
    n: Vec<i32>,
    win: Vec<i64>,
    lo: Vec<i64>,
    hi: Vec<i64>,
    got: Vec<Vec<u8>>,
    body: Vec<Vec<u8>>,
}

impl GroupRows {
    /// Adds window `w`'s `group` (not empty) at position `pos`, its bitmap
    /// becoming `got`; the position after it.
    fn push(&mut self, pos: i64, w: u64, got: Vec<u8>, group: &Group) -> i64 {
        self.pos.push(pos);
        self.n.push(group.len() as i32);
        self.win.push(w as i64);
        self.lo
            .push(group.iter().map(|g| g.0).min().unwrap_or(0) as i64);
        self.hi
            .push(group.iter().map(|g| g.0).max().unwrap_or(0) as i64);
        self.got.push(got);
        self.body.push(packing::pack_results(group.iter().copied()));
        pos + group.len() as i64
    }
}

/// A window as its holder last saw it stored: the epoch of its claim and
/// which indices have a result.
#[derive(Clone, Debug)]
pub(super) struct SeenWindow {
    pub(super) epoch: u64,
    pub(super) got: Vec<u8>,
}

/// Stores `results` of job `job` in one statement, if each is fenced by
/// the claim `held` knows its window by and the windows are stored as
/// `held` saw them (epoch and bitmap, compared under the rows' locks, the
/// job's row locked first): a holder writing its own windows. The new
/// windows are kept in `held`. Whether each was new, or None (nothing
/// changed) when a window is not as seen: to be written by [`put_locked`].
pub(super) async fn put_seen(
    client: &impl tokio_postgres::GenericClient,
    held: &Mutex<HashMap<(i64, u64), SeenWindow>>,
    job: i64,
    results: &[Fenced<'_>],
    origin: i32,
) -> Result<Option<Vec<bool>>, StoreError> {
    let mut windows: BTreeMap<u64, (SeenWindow, Vec<u8>, Group)> = BTreeMap::new();
    {
        let held = held.lock().unwrap_or_else(|e| e.into_inner());
        for &(index, _, _, fence) in results {
            let win = index / WINDOW as u64;
            match held.get(&(job, win)) {
                Some(seen) if fence == Some(seen.epoch) => {
                    windows
                        .entry(win)
                        .or_insert_with(|| (seen.clone(), seen.got.clone(), Vec::new()));
                }
                _ => return Ok(None),
            }
        }
    }
    let mut counts = Counts::default();
    let mut new = Vec::with_capacity(results.len());
    for &(index, error, encoded, _) in results {
        let at = index % WINDOW as u64;
        let (_, got, group) = windows
            .get_mut(&(index / WINDOW as u64))
            .expect("seen above");
        let fresh = !has(got, at);
        if fresh {
            mark(got, at);
            group.push((index, encoded));
            counts.add(error, encoded);
        }
        new.push(fresh);
    }
    windows.retain(|_, (_, _, group)| !group.is_empty());
    if windows.is_empty() {
        // Each is stored already: the bitmap only grows.
        return Ok(Some(new));
    }
    // Positions from the job's stored count, which the statement adds.
    let (mut rows, mut next) = (GroupRows::default(), 0i64);
    let (mut epoch, mut old) = (vec![], vec![]);
    for (w, (seen, bits, group)) in &windows {
        next = rows.push(next, *w, bits.clone(), group);
        epoch.push(seen.epoch as i64);
        old.push(seen.got.clone());
    }
    let Counts {
        solved,
        errors,
        bytes,
    } = counts;
    let GroupRows {
        pos: off,
        n,
        win,
        lo,
        hi,
        got,
        body,
    } = rows;
    let ok: bool = client
        .query_one(
            "WITH j AS MATERIALIZED ( \
               SELECT seq, stored FROM colball_jobs WHERE seq = $1 FOR UPDATE), \
             w AS MATERIALIZED ( \
               SELECT win, epoch, got FROM colball_windows \
               WHERE job = $1 AND win = ANY($4) AND EXISTS (SELECT 1 FROM j) \
               ORDER BY win FOR UPDATE), \
             ok AS MATERIALIZED ( \
               SELECT count(*) = cardinality($4::bigint[]) AS ok FROM w \
               JOIN unnest($4::bigint[], $9::bigint[], $10::bytea[]) AS u(win, epoch, old) \
                 ON w.win = u.win AND w.epoch = u.epoch AND w.got = u.old), \
             g AS ( \
               INSERT INTO colball_result_groups (job, pos, n, win, lo, hi, body) \
               SELECT $1, j.stored + u.off, u.n, u.win, u.lo, u.hi, u.body FROM j, ok, \
                 unnest($2::bigint[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], \
                   $7::bytea[]) AS u(off, n, win, lo, hi, body) \
               WHERE ok.ok), \
             wu AS ( \
               UPDATE colball_windows w SET got = u.got, filled = w.filled + u.n \
               FROM ok, unnest($4::bigint[], $8::bytea[], $3::int[]) AS u(win, got, n) \
               WHERE ok.ok AND w.job = $1 AND w.win = u.win), \
             ju AS ( \
               UPDATE colball_jobs j SET solved = j.solved + $11, errors = j.errors + $12, \
                 stored = j.stored + $13, bytes = j.bytes + $14 \
               FROM ok WHERE ok.ok AND j.seq = $1 RETURNING j.seq) \
             SELECT ok.ok, (SELECT count(pg_notify($15, $16)) FROM ju) FROM ok",
            &[
                &job,
                &off,
                &n,
                &win,
                &lo,
                &hi,
                &body,
                &got,
                &epoch,
                &old,
                &solved,
                &errors,
                &next,
                &bytes,
                &CHANNEL,
                &results_hint(job, &win, origin),
            ],
        )
        .await
        .map_err(backend)?
        .get(0);
    let mut held = held.lock().unwrap_or_else(|e| e.into_inner());
    for (w, (seen, bits, _)) in windows {
        if ok {
            held.insert(
                (job, w),
                SeenWindow {
                    epoch: seen.epoch,
                    got: bits,
                },
            );
        } else {
            held.remove(&(job, w));
        }
    }
    Ok(ok.then_some(new))
}
