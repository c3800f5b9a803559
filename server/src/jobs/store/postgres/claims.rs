//! Windows claimed under a lease, finished, released and rescued
//! ([`SharedStore`]), and a window's pending puzzles read by its bitmap.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::super::{
    Claim, Finished, Pending, Rescued, SharedStore, StoreError, WINDOW, Wake, packing,
};
use super::{LIVE_CLASS, PostgresStore, SeenWindow, backend, resolving};

/// The keys of the coordinators alive now (a common table expression:
/// their live locks, [`LIVE_CLASS`]).
pub(super) const LIVE_KEYS: &str = "live AS (SELECT objid::bigint AS key FROM pg_locks \
     WHERE locktype = 'advisory' AND objsubid = 2 AND classid = 1668246626 AND granted \
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))";

/// Whether a window may be claimed: nobody holds it, its lease ran out,
/// or its holder is dead (no live lock), as a condition (with [`LIVE_KEYS`]).
pub(super) const WINDOW_FREE: &str = "holder IS NULL OR lease_until < now() \
     OR holder_key IS NULL OR holder_key NOT IN (SELECT key FROM live)";

const _: () = assert!(LIVE_CLASS == 1668246626);

// The SQL below spells the window's size out.
const _: () = assert!(WINDOW == 8192);

/// An update of `set` on the windows `pick` picks (conditions on
/// `colball_windows`), locked in ascending order first: the order every
/// statement that touches several windows keeps (deletes too, after the
/// jobs' rows), so that they never deadlock.
pub(super) fn ordered(set: &str, pick: &str) -> String {
    format!(
        "UPDATE colball_windows w SET {set} FROM (SELECT job, win FROM colball_windows \
         WHERE {pick} ORDER BY job, win FOR UPDATE) o WHERE w.job = o.job AND w.win = o.win"
    )
}

/// Whether window `w` of job `j` is done: all its puzzles are there (the
/// job is sealed, or its upload went past the window) and each has its
/// result, as a condition.
pub(super) const WINDOW_DONE: &str = "(j.state <> 0 OR j.puzzles >= (w.win + 1) * 8192) \
     AND w.filled >= least(j.puzzles - w.win * 8192, 8192)";

/// An update that finishes windows `wins` of job `job` (SQL expressions,
/// the windows an array), each under the claim of its epoch in `epochs`:
/// each window is done if [`WINDOW_DONE`], and let go unless it was
/// claimed again since. Locks the windows in ascending order first, and
/// returns each window finished, whether it is done and whether the claim
/// was still its own (see [`finished_as`]).
pub(super) fn finish_windows(job: &str, wins: &str, epochs: &str) -> String {
    format!(
        "UPDATE colball_windows w SET done = w.done OR {WINDOW_DONE}, \
           holder = CASE WHEN w.epoch = f.epoch THEN NULL ELSE w.holder END, \
           lease_until = CASE WHEN w.epoch = f.epoch THEN NULL ELSE w.lease_until END \
         FROM colball_jobs j, unnest({wins}::bigint[], {epochs}::bigint[]) f(win, epoch), \
           (SELECT win FROM colball_windows WHERE job = {job} AND win = ANY({wins}) \
            ORDER BY win FOR UPDATE) o \
         WHERE j.seq = w.job AND w.job = {job} AND w.win = f.win AND o.win = f.win \
         RETURNING w.win, w.done, w.epoch = f.epoch AS ours"
    )
}

/// What became of a window [`finish_windows`] returned: `done`, and whether
/// the claim finishing it was still its own.
pub(super) fn finished_as(done: bool, ours: bool) -> Finished {
    if !ours {
        Finished::Lost
    } else if done {
        Finished::Done
    } else {
        Finished::LetGo
    }
}

/// Whether index `at` of a window has a result, by the window's bitmap.
pub(super) fn has(got: &[u8], at: u64) -> bool {
    got.get((at / 8) as usize)
        .is_some_and(|byte| byte >> (at % 8) & 1 == 1)
}

/// Marks index `at` of a window as having a result in its bitmap.
pub(super) fn mark(got: &mut Vec<u8>, at: u64) {
    let byte = (at / 8) as usize;
    if got.len() <= byte {
        got.resize(WINDOW / 8, 0);
    }
    got[byte] |= 1 << (at % 8);
}

/// Up to `limit` puzzles of window `win` of `job`, from index `from` on,
/// that have no result yet (by `got`, its bitmap, when known), in index
/// order.
pub(super) async fn window_pending(
    client: &impl tokio_postgres::GenericClient,
    job: i64,
    win: u64,
    from: u64,
    limit: usize,
    got: Option<Vec<u8>>,
) -> Result<Vec<Pending>, StoreError> {
    let got: Vec<u8> = match got {
        Some(got) => got,
        None => client
            .query_opt(
                "SELECT got FROM colball_windows WHERE job = $1 AND win = $2",
                &[&job, &(win as i64)],
            )
            .await
            .map_err(backend)?
            .map_or_else(Vec::new, |r| r.get(0)),
    };
    let first = win * WINDOW as u64;
    let blocks = client
        .query(
            "SELECT first, puzzles, ids FROM colball_puzzle_blocks \
             WHERE job = $1 AND first >= $2 AND first < $3 ORDER BY first",
            &[&job, &(first as i64), &((first + WINDOW as u64) as i64)],
        )
        .await
        .map_err(backend)?;
    Ok(unpack_pending(
        blocks
            .iter()
            .map(|b| (b.get::<_, i64>(0) as u64, b.get(1), b.get(2))),
        &got,
        first,
        from,
        limit,
    ))
}

/// The puzzles of window `first`'s `blocks` (each its first index, packed
/// puzzles and ids) from index `from` that have no result by its bitmap
/// `got` (nor an error stored with them), up to `limit`.
pub(super) fn unpack_pending<'b>(
    blocks: impl Iterator<Item = (u64, &'b [u8], &'b [u8])>,
    got: &[u8],
    first: u64,
    from: u64,
    limit: usize,
) -> Vec<Pending> {
    let mut out = Vec::new();
    for (start, puzzles, ids) in blocks {
        let entries = packing::unpack(puzzles, ids);
        for (index, entry) in (start..).zip(entries) {
            if index < from || has(got, index - first) {
                continue;
            }
            // None: an entry stored with its error result (so not here).
            if let Some((id, puzzle)) = entry {
                out.push((index, id, puzzle));
                if out.len() == limit {
                    return out;
                }
            }
        }
    }
    out
}

#[async_trait]
impl SharedStore for PostgresStore {
    async fn finish_and_claim(
        &self,
        job: i64,
        holder: &str,
        lease: Duration,
        finishing: &[(u64, u64)],
    ) -> Result<(Claim, Vec<(u64, Finished)>), StoreError> {
        let mut finishing = finishing.to_vec();
        finishing.sort_unstable();
        self.forget(|&(j, w)| j == job && finishing.iter().any(|f| f.0 == w));
        let (wins, epochs): (Vec<i64>, Vec<i64>) =
            finishing.iter().map(|&(w, e)| (w as i64, e as i64)).unzip();
        if !self.alive.load(Ordering::Relaxed) {
            // Until the session holds the live lock, a claim would look
            // dead to the others at once.
            let mut finished = Vec::new();
            for &(win, epoch) in &finishing {
                finished.push((win, self.finish(job, win, epoch).await?));
            }
            return Ok((Claim::Busy, finished));
        }
        // The windows of the job this process knows it holds. Any other
        // the store says it holds is one it lost track of (a claim whose
        // answer was lost with its connection, a release that failed): its
        // own to claim again, else nobody would (its leases are renewed).
        let known: Vec<i64> = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|&&(j, _)| j == job)
            .map(|&(_, w)| w as i64)
            .collect();
        let client = self.client().await?;
        let lease = lease.as_secs_f64();
        let key = i64::from(self.holder_key);
        // One statement: the finished windows (locked in ascending order),
        // the claim of the first free window among the others, and either
        // its puzzles' blocks or, with none free, whether the job has all
        // its results and how many of its windows are still open. Rows:
        // kind 0 the claim, 1 a block of it, 2 a window finished, 3 the job.
        let sql = format!(
            "WITH {LIVE_KEYS}, \
             finishing AS ({}), \
             free AS ( \
               SELECT win, holder FROM colball_windows \
               WHERE job = $1 AND NOT done AND win <> ALL($7) \
                 AND ({WINDOW_FREE} OR (holder = $2 AND win <> ALL($8))) \
               ORDER BY win LIMIT 1 FOR UPDATE SKIP LOCKED), \
             claimed AS ( \
               UPDATE colball_windows w SET holder = $2, holder_key = $4, epoch = w.epoch + 1, \
                 lease_until = now() + make_interval(secs => $3) \
               FROM free WHERE w.job = $1 AND w.win = free.win \
               RETURNING w.win, free.holder, w.epoch, w.got) \
             SELECT 0, win, holder, epoch, NULL::boolean, NULL::boolean, got, NULL::bytea \
               FROM claimed \
             UNION ALL \
             SELECT 1, b.first, NULL, NULL, NULL, NULL, b.puzzles, b.ids \
               FROM colball_puzzle_blocks b, claimed c \
               WHERE b.job = $1 AND b.first >= c.win * 8192 AND b.first < (c.win + 1) * 8192 \
             UNION ALL \
             SELECT 2, win, NULL, NULL, done, ours, NULL, NULL FROM finishing \
             UNION ALL \
             SELECT 3, \
               (SELECT count(*) FROM colball_windows WHERE job = $1 AND NOT done AND win <> ALL($5)) \
                 + (SELECT count(*) FROM finishing WHERE NOT done), \
               NULL, NULL, \
               (SELECT state IN (1, 2) AND solved + errors >= puzzles FROM colball_jobs \
                WHERE seq = $1), \
               NULL, NULL, NULL \
             WHERE NOT EXISTS (SELECT 1 FROM claimed) \
             ORDER BY 1, 2",
            finish_windows("$1", "$5", "$6")
        );
        // A window of `finishing` not stored any more (its job is gone) is
        // done; none of them is claimed, in the first try or the next.
        let mut finished: Vec<(u64, Finished)> = finishing
            .iter()
            .map(|&(w, _)| (w, Finished::Done))
            .collect();
        let but = wins.clone();
        let (mut wins, mut epochs) = (wins, epochs);
        loop {
            let rows = client
                .query(
                    &sql,
                    &[&job, &holder, &lease, &key, &wins, &epochs, &but, &known],
                )
                .await
                .map_err(backend)?;
            let mut claimed = None;
            let mut blocks: Vec<(u64, &[u8], &[u8])> = Vec::new();
            let mut open = None;
            for r in &rows {
                match r.get::<_, i32>(0) {
                    0 => claimed = Some(r),
                    1 => blocks.push((r.get::<_, i64>(1) as u64, r.get(6), r.get(7))),
                    2 => {
                        let win = r.get::<_, i64>(1) as u64;
                        if let Some(f) = finished.iter_mut().find(|f| f.0 == win) {
                            f.1 = finished_as(r.get(4), r.get(5));
                        }
                    }
                    _ => open = Some((r.get::<_, i64>(1), r.get::<_, Option<bool>>(4))),
                }
            }
            (wins, epochs) = (Vec::new(), Vec::new());
            let Some(claimed) = claimed else {
                let (open, solved) = open.unwrap_or((0, None));
                if open == 0 {
                    return Ok((Claim::Done, finished));
                }
                // Each puzzle has its result (a window's holder may have
                // died after storing them, before it marked the window
                // done): the windows are all done.
                if solved == Some(true) {
                    client
                        .execute(
                            &ordered(
                                "done = true, holder = NULL, lease_until = NULL",
                                "job = $1 AND NOT done",
                            ),
                            &[&job],
                        )
                        .await
                        .map_err(backend)?;
                    return Ok((Claim::Done, finished));
                }
                return Ok((Claim::Busy, finished));
            };
            let win = claimed.get::<_, i64>(1) as u64;
            let before: Option<String> = claimed.get(2);
            let epoch = claimed.get::<_, i64>(3) as u64;
            let got: Vec<u8> = claimed.get(6);
            let first = win * WINDOW as u64;
            let pending = unpack_pending(blocks.into_iter(), &got, first, first, WINDOW);
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((job, win), SeenWindow { epoch, got });
            if !pending.is_empty() {
                let claim = Claim::Window {
                    win,
                    epoch,
                    pending,
                    took_over: before.is_some_and(|b| b != holder),
                };
                return Ok((claim, finished));
            }
            // Nothing to solve in it: done (then the next), or (its upload
            // not there yet) let go and waited for.
            if self.finish(job, win, epoch).await? != Finished::Done {
                return Ok((Claim::Busy, finished));
            }
        }
    }

    async fn finish(&self, job: i64, win: u64, epoch: u64) -> Result<Finished, StoreError> {
        self.forget(|&(j, w)| (j, w) == (job, win));
        let client = self.client().await?;
        let row = client
            .query_opt(
                &finish_windows("$1", "$2", "$3"),
                &[&job, &vec![win as i64], &vec![epoch as i64]],
            )
            .await
            .map_err(backend)?;
        // A window of a job gone is done.
        Ok(row.map_or(Finished::Done, |r| finished_as(r.get(1), r.get(2))))
    }

    async fn release(&self, job: i64, holder: &str) -> Result<(), StoreError> {
        self.forget(|&(j, _)| j == job);
        let sql = ordered(
            "holder = NULL, lease_until = NULL",
            "job = $1 AND holder = $2 AND NOT done",
        );
        resolving(|| async {
            let client = self.client().await?;
            client
                .execute(&sql, &[&job, &holder])
                .await
                .map_err(backend)
        })
        .await?;
        Ok(())
    }

    async fn renew(&self, holder: &str, lease: Duration) -> Result<u64, StoreError> {
        let lease = lease.as_secs_f64();
        let uploads = "UPDATE colball_jobs j SET upload_until = now() + make_interval(secs => $2) \
             FROM (SELECT seq FROM colball_jobs WHERE uploader = $1 AND state = 0 \
                   ORDER BY seq FOR UPDATE) o WHERE j.seq = o.seq";
        let windows = ordered(
            "lease_until = now() + make_interval(secs => $2)",
            "holder = $1 AND NOT done",
        );
        resolving(|| async {
            let client = self.client().await?;
            client
                .execute(uploads, &[&self.holder, &lease])
                .await
                .map_err(backend)?;
            client
                .execute(&windows, &[&holder, &lease])
                .await
                .map_err(backend)
        })
        .await
    }

    async fn complete(&self, job: i64, now_ms: i64) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE colball_jobs SET state = 3, finished_ms = $2 \
                 WHERE seq = $1 AND state IN (1, 2) AND solved + errors >= puzzles",
                &[&job, &now_ms],
            )
            .await
            .map_err(backend)?;
        if n > 0 {
            self.hint_jobs(&client).await?;
        }
        Ok(n > 0)
    }

    fn leading(&self) -> bool {
        self.leading.load(Ordering::Relaxed)
    }

    async fn rescue(&self) -> Result<Rescued, StoreError> {
        let sql = format!(
            "WITH {LIVE_KEYS} {}",
            ordered(
                "holder = NULL, holder_key = NULL, lease_until = NULL",
                &format!("holder IS NOT NULL AND NOT done AND ({WINDOW_FREE})"),
            )
        );
        let windows = resolving(|| async {
            let client = self.client().await?;
            client.execute(&sql, &[]).await.map_err(backend)
        })
        .await?;
        let uploads = self
            .delete_picked("state = 0 AND upload_until < now()", &[], true)
            .await?;
        Ok(Rescued { windows, uploads })
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn wakes(&self) -> broadcast::Receiver<Wake> {
        self.wakes.subscribe()
    }
}
