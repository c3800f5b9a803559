//! The store's jobs, puzzles and results ([`JobStore`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use colball_proto::prost::Message;
use colball_proto::{egress, v1};

use super::super::{
    Entry, JobRow, JobState, JobStore, NewJob, Pending, SharedStore, StoreError, ToWrite, WINDOW,
    id_of, packing, priority_number,
};
use super::{
    Fenced, JOB_BYTES, JOB_COLUMNS, PostgresStore, ROW_BYTES, backend, decode, held_bytes,
    put_locked, put_seen, resolving, window_pending,
};

#[async_trait]
impl JobStore for PostgresStore {
    /// Up to 16,384 results a write, gathered for up to 50 ms under load:
    /// a write costs the shared database a round trip and its CPU, and
    /// every coordinator's writes land on it.
    fn write_pace(&self) -> (usize, Duration) {
        (16_384, Duration::from_millis(50))
    }

    fn durable(&self) -> bool {
        true
    }

    fn shared(&self) -> Option<&dyn SharedStore> {
        Some(self)
    }

    fn job_id(&self, seq: i64) -> String {
        id_of(seq, &self.instance)
    }

    fn job_seq(&self, id: &str) -> Option<i64> {
        super::super::seq_of(id, &self.instance)
    }

    async fn create(&self, job: NewJob) -> Result<i64, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(backend)?;
        self.room(&tx, JOB_BYTES).await?;
        let seq: i64 = tx
            .query_one(
                "INSERT INTO colball_jobs (owner, name, priority, state, created_ms, fail_fast, \
                   any_order, bytes, uploader, upload_until, webhook, trace) \
                 VALUES ($1, $2, $3, 0, $4, $5, $6, $7, $8, now() + interval '1 minute', $9, $10) \
                 RETURNING seq",
                &[
                    &job.owner,
                    &job.name,
                    &priority_number(job.priority),
                    &job.created_ms,
                    &job.fail_fast,
                    &job.any_order,
                    &JOB_BYTES,
                    &self.holder,
                    &job.webhook,
                    &job.trace,
                ],
            )
            .await
            .map_err(backend)?
            .get(0);
        tx.commit().await.map_err(backend)?;
        Ok(seq)
    }

    async fn add(&self, job: i64, first: u64, entries: Vec<Entry>) -> Result<(), StoreError> {
        let n = entries.len();
        let mut invalid = Vec::new();
        // The puzzles' bytes; the error results' are counted where they
        // are stored (`put_locked`).
        let mut bytes = 0i64;
        for (i, entry) in entries.iter().enumerate() {
            let index = first + i as u64;
            bytes += ROW_BYTES;
            match entry {
                Entry::Puzzle { id, .. } => bytes += id.len() as i64,
                Entry::Invalid(r) => invalid.push((
                    index,
                    v1::PuzzleResult { index, ..r.clone() }.encode_to_vec(),
                )),
            }
        }
        // A block per window the chunk reaches into.
        let (mut starts, mut puzzles, mut ids) = (vec![], vec![], vec![]);
        let mut at = 0;
        while at < n {
            let index = first + at as u64;
            let room = WINDOW - (index % WINDOW as u64) as usize;
            let part = &entries[at..n.min(at + room)];
            let (p, i) = packing::pack(part);
            starts.push(index as i64);
            puzzles.push(p);
            ids.push(i);
            at += part.len();
        }
        // Invalid puzzles' results come with the upload, under no claim.
        let errors: Vec<Fenced<'_>> = invalid
            .iter()
            .map(|(i, e)| (*i, true, e.as_slice(), None))
            .collect();
        let error_bytes: i64 = errors.iter().map(|e| e.2.len() as i64 + ROW_BYTES).sum();
        let (starts, ids, puzzles, errors) = (&starts, &ids, &puzzles, &errors);
        let w = WINDOW as u64;
        let (win_first, win_last) = (
            (first / w) as i64,
            ((first + n as u64).saturating_sub(1) / w) as i64,
        );
        let (end, uncapped) = ((first + n as u64) as i64, self.cap.is_none());
        resolving(|| async move {
            let mut client = self.client().await?;
            if uncapped && n > 0 && errors.is_empty() {
                // Valid puzzles under no cap: one statement, the job's row
                // locked first.
                let found: i64 = client
                    .query_one(
                        "WITH j AS MATERIALIZED ( \
                           SELECT seq FROM colball_jobs WHERE seq = $1 FOR UPDATE), \
                         b AS ( \
                           INSERT INTO colball_puzzle_blocks (job, first, puzzles, ids) \
                           SELECT $1, u.* FROM j, \
                             unnest($2::bigint[], $3::bytea[], $4::bytea[]) AS u), \
                         w AS ( \
                           INSERT INTO colball_windows (job, win) \
                           SELECT $1, generate_series($5::bigint, $6::bigint) FROM j \
                           ON CONFLICT DO NOTHING), \
                         u AS ( \
                           UPDATE colball_jobs c SET puzzles = greatest(c.puzzles, $7), \
                             bytes = c.bytes + $8 FROM j WHERE c.seq = j.seq) \
                         SELECT count(*) FROM j",
                        &[
                            &job, starts, puzzles, ids, &win_first, &win_last, &end, &bytes,
                        ],
                    )
                    .await
                    .map_err(backend)?
                    .get(0);
                return if found == 0 {
                    Err(StoreError::NoSuchJob(job))
                } else {
                    Ok(())
                };
            }
            let tx = client.transaction().await.map_err(backend)?;
            if tx
                .query_opt(
                    "SELECT 1 FROM colball_jobs WHERE seq = $1 FOR UPDATE",
                    &[&job],
                )
                .await
                .map_err(backend)?
                .is_none()
            {
                return Err(StoreError::NoSuchJob(job));
            }
            self.room(&tx, bytes + error_bytes).await?;
            if n > 0 {
                tx.execute(
                    "WITH b AS ( \
                       INSERT INTO colball_puzzle_blocks (job, first, puzzles, ids) \
                       SELECT $1, * FROM unnest($2::bigint[], $3::bytea[], $4::bytea[])) \
                     INSERT INTO colball_windows (job, win) \
                     SELECT $1, generate_series($5::bigint, $6::bigint) ON CONFLICT DO NOTHING",
                    &[&job, starts, puzzles, ids, &win_first, &win_last],
                )
                .await
                .map_err(backend)?;
            }
            if !errors.is_empty() {
                put_locked(&tx, job, errors, &mut Vec::new(), self.holder_key).await?;
            }
            tx.execute(
                "UPDATE colball_jobs SET puzzles = greatest(puzzles, $2), bytes = bytes + $3 \
                 WHERE seq = $1",
                &[&job, &end, &bytes],
            )
            .await
            .map_err(backend)?;
            tx.commit().await.map_err(backend)
        })
        .await
    }

    async fn seal(&self, job: i64, now_ms: i64) -> Result<JobRow, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "UPDATE colball_jobs SET \
               finished_ms = CASE WHEN state = 5 THEN finished_ms \
                 WHEN solved + errors >= puzzles THEN $2 ELSE 0 END, \
               state = CASE WHEN state = 5 THEN 5 \
                 WHEN solved + errors >= puzzles THEN 3 ELSE 2 END \
             WHERE seq = $1 RETURNING {JOB_COLUMNS}"
        );
        let row = client
            .query_opt(&sql, &[&job, &now_ms])
            .await
            .map_err(backend)?
            .ok_or(StoreError::NoSuchJob(job))?;
        self.hint_jobs(&client).await?;
        self.row(&row)
    }

    async fn size_bytes(&self) -> Result<u64, StoreError> {
        let client = self.client().await?;
        Ok(held_bytes(&**client).await? as u64)
    }

    async fn expire(&self, before_ms: i64) -> Result<usize, StoreError> {
        let pick = "state IN (3, 4, 5) AND finished_ms > 0 AND finished_ms < $1";
        Ok(self.delete_picked(pick, &[&before_ms], true).await? as usize)
    }

    async fn delete(&self, job: i64) -> Result<(), StoreError> {
        self.forget(|&(j, _)| j == job);
        self.delete_picked("seq = $1", &[&job], false).await?;
        Ok(())
    }

    async fn job(&self, job: i64) -> Result<Option<JobRow>, StoreError> {
        Ok(self.rows("WHERE seq = $1", &[&job]).await?.pop())
    }

    async fn list(&self, owner: &str) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            "WHERE owner = $1 AND state <> 0 ORDER BY seq DESC",
            &[&owner],
        )
        .await
    }

    async fn unfinished(&self) -> Result<Vec<JobRow>, StoreError> {
        self.rows("WHERE state IN (1, 2) ORDER BY seq", &[]).await
    }

    async fn webhooks_due(&self, now_ms: i64, limit: usize) -> Result<Vec<JobRow>, StoreError> {
        self.rows(
            "WHERE webhook IS NOT NULL AND webhook_next_ms < 9223372036854775807 \
               AND webhook_next_ms <= $1 AND state IN (3, 4, 5) \
             ORDER BY webhook_next_ms, seq LIMIT $2",
            &[&now_ms, &(limit as i64)],
        )
        .await
    }

    async fn webhook_tried(
        &self,
        job: i64,
        attempts: u32,
        next_ms: i64,
        delivered: bool,
    ) -> Result<(), StoreError> {
        let attempts = i32::try_from(attempts).unwrap_or(i32::MAX);
        self.client()
            .await?
            .execute(
                "UPDATE colball_jobs SET webhook_attempts = $2, webhook_next_ms = $3, \
                   webhook_delivered = $4 WHERE seq = $1 AND webhook IS NOT NULL",
                &[&job, &attempts, &next_ms, &delivered],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    async fn set_state(
        &self,
        job: i64,
        state: JobState,
        failure: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let finished_ms = if state.finished() { now_ms } else { 0 };
        let client = self.client().await?;
        let n = client
            .execute(
                "UPDATE colball_jobs SET state = $2, failure = $3, finished_ms = $4 \
                 WHERE seq = $1 AND state NOT IN (3, 4, 5)",
                &[&job, &(state as i16), &failure, &finished_ms],
            )
            .await
            .map_err(backend)?;
        if n > 0 && state.finished() {
            self.hint_jobs(&client).await?;
        }
        Ok(())
    }

    async fn pending(
        &self,
        job: i64,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Pending>, StoreError> {
        let from = after.map_or(0, |a| a + 1);
        let client = self.client().await?;
        let Some(row) = client
            .query_opt("SELECT puzzles FROM colball_jobs WHERE seq = $1", &[&job])
            .await
            .map_err(backend)?
        else {
            return Ok(Vec::new());
        };
        let puzzles = row.get::<_, i64>(0) as u64;
        let mut out = Vec::new();
        let mut win = from / WINDOW as u64;
        while out.len() < limit && win * (WINDOW as u64) < puzzles {
            out.extend(window_pending(&**client, job, win, from, limit - out.len(), None).await?);
            win += 1;
        }
        Ok(out)
    }

    async fn put_results(
        &self,
        results: Vec<ToWrite>,
    ) -> (Vec<ToWrite>, Result<Vec<bool>, StoreError>) {
        let encoded: Vec<Vec<u8>> = results.iter().map(|w| w.result.encode_to_vec()).collect();
        let put = async {
            let more: i64 = encoded.iter().map(|e| e.len() as i64 + ROW_BYTES).sum();
            // By job, in ascending order (so that writers never wait on each
            // other in a circle), each result's place in `results` kept.
            let mut by_job: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
            for (at, w) in results.iter().enumerate() {
                by_job.entry(w.job).or_default().push(at);
            }
            let fenced = |at: &[usize]| -> Vec<Fenced<'_>> {
                at.iter()
                    .map(|&i| {
                        let w = &results[i];
                        (
                            w.result.index,
                            w.result.error().is_some(),
                            encoded[i].as_slice(),
                            w.fence,
                        )
                    })
                    .collect()
            };
            let mut client = self.client().await?;
            let mut new = vec![false; results.len()];
            if self.cap.is_none() {
                // A holder's own windows, each job in a statement.
                let mut rest = BTreeMap::new();
                for (job, at) in by_job {
                    match put_seen(&**client, &self.held, job, &fenced(&at), self.holder_key)
                        .await?
                    {
                        Some(fresh) => at.iter().zip(fresh).for_each(|(i, f)| new[*i] = f),
                        None => {
                            rest.insert(job, at);
                        }
                    }
                }
                by_job = rest;
            }
            if by_job.is_empty() {
                return Ok(new);
            }
            let tx = client.transaction().await.map_err(backend)?;
            self.room(&tx, more).await?;
            let mut seen = Vec::new();
            for (job, at) in &by_job {
                let fresh = put_locked(&tx, *job, &fenced(at), &mut seen, self.holder_key).await?;
                at.iter().zip(fresh).for_each(|(i, f)| new[*i] = f);
            }
            tx.commit().await.map_err(backend)?;
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(seen);
            Ok(new)
        };
        let outcome = put.await;
        (results, outcome)
    }

    async fn results(
        &self,
        job: i64,
        from: u64,
        limit: usize,
        stored_order: bool,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let client = self.client().await?;
        let end = from.saturating_add(limit as u64).min(i64::MAX as u64);
        // What is stored in [from, end) by index or place, as they come.
        let mut found: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        if stored_order {
            // From the group holding place `from` on.
            let rows = client
                .query(
                    "SELECT pos, body FROM colball_result_groups WHERE job = $1 \
                       AND pos >= coalesce((SELECT max(pos) FROM colball_result_groups \
                                            WHERE job = $1 AND pos <= $2), 0) \
                       AND pos < $3 ORDER BY pos",
                    &[&job, &(from as i64), &(end as i64)],
                )
                .await
                .map_err(backend)?;
            for r in &rows {
                let first = r.get::<_, i64>(0) as u64;
                for (place, (_, bytes)) in (first..).zip(packing::unpack_results(r.get(1))) {
                    if (from..end).contains(&place) {
                        found.insert(place, bytes.to_vec());
                    }
                }
            }
        } else {
            let w = WINDOW as u64;
            let rows = client
                .query(
                    "SELECT body FROM colball_result_groups WHERE job = $1 \
                       AND win >= $2 AND win <= $3 AND hi >= $4 AND lo < $5",
                    &[
                        &job,
                        &((from / w) as i64),
                        &((end.saturating_sub(1) / w) as i64),
                        &(from as i64),
                        &(end as i64),
                    ],
                )
                .await
                .map_err(backend)?;
            for r in &rows {
                for (index, bytes) in packing::unpack_results(r.get(0)) {
                    if (from..end).contains(&index) {
                        found.insert(index, bytes.to_vec());
                    }
                }
            }
        }
        // Up to the first missing.
        Ok((from..)
            .zip(found)
            .map_while(|(want, (at, bytes))| (at == want).then(|| decode(&bytes)).flatten())
            .collect())
    }

    async fn results_after(
        &self,
        job: i64,
        from: u64,
        limit: usize,
    ) -> Result<Vec<egress::PuzzleResult>, StoreError> {
        let client = self.client().await?;
        // Windows `span` at a time from `from`'s, until `limit` are found
        // or no group is left.
        let span = (limit / WINDOW + 1) as i64;
        let mut win = (from / WINDOW as u64) as i64;
        let mut found: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        loop {
            // The groups of the first `span` windows from `win` that have
            // any result from `from` on.
            let rows = client
                .query(
                    "SELECT win, body FROM colball_result_groups WHERE job = $1 AND hi >= $3 \
                       AND win IN (SELECT DISTINCT win FROM colball_result_groups \
                                   WHERE job = $1 AND win >= $2 AND hi >= $3 \
                                   ORDER BY win LIMIT $4)",
                    &[&job, &win, &(from as i64), &span],
                )
                .await
                .map_err(backend)?;
            let mut windows = BTreeSet::new();
            for r in &rows {
                windows.insert(r.get::<_, i64>(0));
                for (index, bytes) in packing::unpack_results(r.get(1)) {
                    if index >= from {
                        found.insert(index, bytes.to_vec());
                    }
                }
            }
            match windows.last() {
                Some(last) if found.len() < limit && windows.len() as i64 == span => win = last + 1,
                _ => break,
            }
        }
        Ok(found
            .into_values()
            .take(limit)
            .map_while(|bytes| decode(&bytes))
            .collect())
    }
}
