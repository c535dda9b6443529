-- The janitor (worker/janitor.py, jobstream/retention.py): retention, compaction, the counters'
-- upkeep.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: TRY_LOCK
-- One janitor at a time across every worker: a session lock held for a round of batches.
SELECT pg_try_advisory_lock($1)

-- name: UNLOCK
SELECT pg_advisory_unlock($1)

-- name: JANITOR_TRANSACTION
-- The janitor's commits do not wait for their WAL to reach the disk: a batch that a crash loses
-- was settling or deleting jobs that stay as they were until the next round does it again, with
-- its counters, and no reader can have relied on it. The claims' and appends' commits, which do
-- wait, then share the disk with fewer flushes. LOCAL, for this batch's transaction only: the
-- connection goes back to the pool, whose release keeps session state (jobstream/db.py), and a
-- session-wide SET once made every later commit on it asynchronous, token appends and successes
-- included, which a crash could then lose after a follower had read them.
SET LOCAL synchronous_commit = off

-- name: SETTLE_JOBS
-- Settle up to $3 finished jobs, oldest first, $2 s after they ended: compact each log and give
-- the job its expiry. Parameters: $1 now, $2 JOBSTREAM_COMPACT_AFTER_S, $3 batch, $4
-- JOBSTREAM_RETENTION_S (for a job that asked for no retain_s), $5 most characters per compacted
-- event. Only finished jobs are touched, which no claim and no append writes, so nothing the hot
-- path does waits on this statement's row locks.
-- - `picked`: the jobs, locked; their retention is their retain_s or the default, capped by the
--   tenant's max_retain_s (least ignores a NULL cap).
-- - `tokens`: their token events, in runs of consecutive seqs (a run breaks at any other event).
--   `kept`: the event belongs to the last attempt, whose text is the job's (the accepted one's,
--   or what a failed job showed); every earlier attempt was superseded by a `reset`.
-- - `folded`: each run of the last attempt becomes parts of about $5 characters (a part is cut at
--   an event's boundary), each part one event at the seq of its last event, holding the part's
--   text and `from_seq`, the first seq it stands for; a superseded run becomes one empty event.
--   The seqs in between are deleted. A reader from before `from_seq` reads the same text; a
--   reader whose cursor is inside [from_seq, seq) gets `resync` (server/tail.py). A run already
--   one event of the last attempt stays as it is.
-- - `settled`: expires_at, which takes the job out of jobs_unsettled_idx into jobs_expiry_idx.
WITH picked AS (
    SELECT j.id, j.attempts, j.finished_at,
           least(coalesce(j.retain_s, $4), t.max_retain_s) AS retain_s
      FROM jobs j
      LEFT JOIN tenants t ON t.id = j.tenant_id
     WHERE j.finished_at IS NOT NULL AND j.expires_at IS NULL
       AND j.finished_at <= coalesce($1::timestamptz, statement_timestamp())
                            - make_interval(secs => $2)
     ORDER BY j.finished_at
     LIMIT $3
       FOR NO KEY UPDATE OF j SKIP LOCKED
), tokens AS (
    SELECT e.job_id, e.seq, e.data->>'text' AS text, e.attempt = p.attempts AS kept,
           e.seq - row_number() OVER (PARTITION BY e.job_id ORDER BY e.seq) AS run
      FROM picked p
      JOIN job_events e ON e.job_id = p.id
     WHERE e.type = 'token'
), parts AS (
    SELECT job_id, seq, text, kept, run,
           CASE WHEN kept
                THEN (sum(length(text)) OVER (PARTITION BY job_id, run ORDER BY seq)
                      - length(text)) / $5
                ELSE 0 END AS part
      FROM tokens
), folded AS (
    SELECT job_id, min(seq) AS first_seq, max(seq) AS seq, bool_and(kept) AS kept,
           string_agg(text, '' ORDER BY seq) AS text
      FROM parts
     GROUP BY job_id, run, part
), changed AS (
    SELECT * FROM folded WHERE first_seq < seq OR NOT kept
), removed AS (
    DELETE FROM job_events e
     USING changed c
     WHERE e.job_id = c.job_id AND e.seq >= c.first_seq AND e.seq < c.seq
    RETURNING e.job_id
), rewritten AS (
    UPDATE job_events e
       SET data = CASE WHEN c.first_seq = c.seq THEN jsonb_build_object('text', '')
                       ELSE jsonb_build_object('text', CASE WHEN c.kept THEN c.text ELSE '' END,
                                               'from_seq', c.first_seq) END
      FROM changed c
     WHERE e.job_id = c.job_id AND e.seq = c.seq
), settled AS (
    UPDATE jobs j
       SET expires_at = p.finished_at + make_interval(secs => p.retain_s)
      FROM picked p
     WHERE j.id = p.id
    RETURNING j.id
), tally AS (
    SELECT (SELECT count(*) FROM settled) AS jobs, (SELECT count(*) FROM removed) AS removed
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_compacted, events_compacted)
    SELECT pg_backend_pid(), '', jobs, removed FROM tally WHERE jobs > 0
    ON CONFLICT (backend, provider) DO UPDATE
       SET jobs_compacted = m.jobs_compacted + EXCLUDED.jobs_compacted,
           events_compacted = m.events_compacted + EXCLUDED.events_compacted
)
SELECT jobs, removed FROM tally

-- name: DELETE_EXPIRED_JOBS
-- Delete up to $2 jobs whose expiry has passed, oldest first, with every row that belongs to
-- them (delete_jobs in schema.sql: a pending webhook delivery goes too, as retention outranks a
-- receiver that never answers), leaving a tombstone ($3) so that the id answers 410 for a while.
-- $1 now. The rows are locked first and skipped if taken (an API call on a finished job holds
-- one for a moment).
WITH doomed AS (
    SELECT id
      FROM jobs
     WHERE expires_at <= coalesce($1::timestamptz, statement_timestamp())
     ORDER BY expires_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    SELECT * FROM delete_jobs(ARRAY(SELECT id FROM doomed))
), buried AS (
    -- With the job's idempotency key and request hash: the key makes no second job while the
    -- tombstone is kept (INSERT_JOBS).
    INSERT INTO job_tombstones (id, tenant_id, deleted_at, idempotency_key, request_hash)
    SELECT id, tenant_id, coalesce($1::timestamptz, statement_timestamp()), idempotency_key,
           request_hash
      FROM gone
     WHERE $3
    ON CONFLICT (id) DO NOTHING
), unstored AS (
    -- The tenants' storage bound frees what their deleted jobs booked (INSERT_JOBS), on this
    -- backend's shards, in tenant order as every multi-tenant ledger write takes them.
    INSERT INTO tenant_ledger AS l (tenant_id, shard, stored_bytes)
    SELECT tenant_id, pg_backend_pid() % 16, -sum(input_bytes)
      FROM gone
     GROUP BY tenant_id
    HAVING sum(input_bytes) > 0
     ORDER BY tenant_id
    ON CONFLICT (tenant_id, shard) DO UPDATE SET stored_bytes = l.stored_bytes + EXCLUDED.stored_bytes
), tally AS (
    SELECT count(*) AS jobs, coalesce(max(rows_deleted), 0) AS removed FROM gone
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_deleted, rows_deleted)
    SELECT pg_backend_pid(), '', jobs, removed FROM tally WHERE jobs > 0
    ON CONFLICT (backend, provider) DO UPDATE
       SET jobs_deleted = m.jobs_deleted + EXCLUDED.jobs_deleted,
           rows_deleted = m.rows_deleted + EXCLUDED.rows_deleted
)
SELECT jobs, removed FROM tally

-- name: PRUNE_TOMBSTONES
-- Tombstones older than $2 s go, $3 at a time ($1 now).
DELETE FROM job_tombstones
 WHERE id IN (SELECT id
                FROM job_tombstones
               WHERE deleted_at < coalesce($1::timestamptz, statement_timestamp())
                                  - make_interval(secs => $2)
               ORDER BY deleted_at
               LIMIT $3)

-- name: PRUNE_WORKERS
-- The rows of workers stopped, or silent (killed), for more than $2 s ($1 now): every claim that
-- computes a fair share reads the table, so it keeps the recent fleet only. An operator still
-- sees a crashed worker for that long.
DELETE FROM workers
 WHERE coalesce(stopped_at, heartbeat_at)
       < coalesce($1::timestamptz, statement_timestamp()) - make_interval(secs => $2)

-- name: TOMBSTONE
-- Is a deleted job's id remembered? Asked only when a job is not found: 410 rather than 404.
-- Another tenant's tombstone is not this caller's business ($2 NULL: the job's signed token).
SELECT deleted_at FROM job_tombstones WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)

-- name: FOLD_METRIC_TOTALS
-- The counters of backends that are gone move to backend 0, so that the table keeps a row per
-- live backend: their rows and backend 0's of the same providers are deleted, and one row a
-- provider, their sums, takes their place. Nothing but this statement writes backend 0, and
-- only the janitor, under its lock, runs it: an insert, not an upsert. A backend that reused a
-- pid meanwhile may be writing its row: the DELETE waits for its commit and folds what it
-- wrote, and its next write makes a new row.
WITH gone AS (
    DELETE FROM metric_totals t
     WHERE t.backend <> 0
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = t.backend)
    RETURNING t.*
), folded AS (
    DELETE FROM metric_totals t
     WHERE t.backend = 0 AND t.provider IN (SELECT provider FROM gone)
    RETURNING t.*
), sums AS (
    SELECT * FROM gone UNION ALL SELECT * FROM folded
)
INSERT INTO metric_totals (
    backend, provider, jobs_created, jobs_accepted, charged_usd, attempts_started, retries,
    succeeded, failed, unknown, cancelled, lost, interrupted, cost_usd, cost_unknown,
    events_ended, queue_wait_counts, queue_wait_s, run_counts, run_s, jobs_compacted,
    events_compacted, jobs_deleted, rows_deleted)
SELECT 0, provider, sum(jobs_created), sum(jobs_accepted), sum(charged_usd),
       sum(attempts_started), sum(retries), sum(succeeded), sum(failed), sum(unknown),
       sum(cancelled), sum(lost), sum(interrupted), sum(cost_usd), sum(cost_unknown),
       sum(events_ended), sum_counts(queue_wait_counts), sum(queue_wait_s),
       sum_counts(run_counts), sum(run_s), sum(jobs_compacted), sum(events_compacted),
       sum(jobs_deleted), sum(rows_deleted)
  FROM sums
 GROUP BY provider
