-- A job's event log: appends by the API and the attempts (jobstream/events.py), and the reads of
-- the streams and of the hub that fans them out (server/events_api.py, server/hub.py).
-- NOTIFY payloads carry only identifiers, the tables are the truth: on jobstream_events,
-- "job_id:last_seq", or several of them joined by commas (jobstream/channels.py).

-- name: APPEND_EVENTS
-- Append events to a job's log. The UPDATE allocates the seq range under the job's row lock, so
-- commit order equals seq order (docs/design.md, "The event log and its seq"); the insert and
-- the NOTIFY ride in the same statement. $2 (run_token) fences the write: NULL for writes by
-- the API (no attempt involved), else the attempt's token, and then only while the job is
-- active.
-- A `done` ends the log: its last_seq then counts as the job's events (metric_totals), and the
-- scrape stops adding the job's live last_seq (it is no longer queued or running).
-- Several events (an attempt's failure: its usage, `attempt_error`, then `status` or `done`) are
-- one row, the last event's, the others in `earlier` (schema.sql, job_events.earlier), unless
-- one is a `progress` or a `token`, which are rows of their own.
WITH bumped AS (
    UPDATE jobs
       SET last_seq = last_seq + cardinality($3::text[]), updated_at = clock_timestamp()
     WHERE id = $1
       AND ($2::uuid IS NULL OR (run_token = $2 AND status IN ('running', 'cancelling')))
    RETURNING last_seq, provider
), input AS (
    SELECT cardinality($3::text[]) AS n,
           cardinality($3::text[]) > 1 AND NOT ($3::text[] && ARRAY['progress', 'token']) AS one_row
), inserted AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data, earlier)
    SELECT $1, bumped.last_seq - i.n + e.ord, $4::int, e.type, e.data, NULL::jsonb
      FROM bumped, input i,
           unnest($3::text[], $5::jsonb[]) WITH ORDINALITY AS e (type, data, ord)
     WHERE NOT i.one_row
    UNION ALL
    SELECT $1, bumped.last_seq, $4::int, ($3::text[])[i.n], ($5::jsonb[])[i.n],
           (SELECT jsonb_agg(jsonb_build_array(x.type, x.data) ORDER BY x.ord)
              FROM unnest(($3::text[])[1:i.n - 1], ($5::jsonb[])[1:i.n - 1])
                   WITH ORDINALITY AS x (type, data, ord))
      FROM bumped, input i
     WHERE i.one_row
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, events_ended)
    SELECT pg_backend_pid(), provider, last_seq FROM bumped WHERE 'done' = ANY($3::text[])
    ON CONFLICT (backend, provider) DO UPDATE
       SET events_ended = m.events_ended + EXCLUDED.events_ended
)
SELECT last_seq, pg_notify('jobstream_events', $1::text || ':' || last_seq) FROM bumped

-- name: NOTIFY_EVENTS
-- Tell followers that jobs' logs grew ($1 jobs, $2 their last seqs): one NOTIFY per 100 jobs (a
-- payload holds at most 8,000 bytes; an item "<uuid>:<seq>," at most 57). Sent by the claim and
-- the successes after their commit, as a statement of its own (jobstream/events.py, announce):
-- a transaction that notifies holds a cluster-wide lock from its commit until the commit is
-- durable, so the commits of every notifying writer queued one behind another, each waiting
-- for its own WAL flush: in a drain by two worker processes, a fifth of the successes' samples
-- in pg_stat_activity waited on it (`Lock object`). This statement writes nothing, so its
-- commit waits for no flush. A NOTIFY lost to a crash between the two is late by the hub's
-- recheck (JOBSTREAM_HUB_RECHECK_S).
SELECT count(pg_notify('jobstream_events', p.items))
  FROM (SELECT string_agg(n.job_id::text || ':' || n.seq, ',') AS items
          FROM unnest($1::uuid[], $2::bigint[]) WITH ORDINALITY AS n (job_id, seq, k)
         GROUP BY (n.k - 1) / 100) p

-- name: EVENTS_AFTER
-- From job_log_rows, not job_events: a new job's seq 1 has no row (schema.sql says why). Rows,
-- not events: a row of several events (job_events.earlier) is read whole when its last one is
-- after $2, and jobstream/events.py expands it and drops those at or before $2. Rows ordered
-- by seq are events ordered by seq, and the read stays a range of the log's key.
SELECT seq, type, attempt, data, created_at, earlier
  FROM job_log_rows
 WHERE job_id = $1 AND seq > $2
 ORDER BY seq
 LIMIT $3

-- name: EVENTS_AFTER_MANY
-- EVENTS_AFTER for many jobs at once: the hub's one read per wake-up for every job it follows
-- that has news ($1 job ids, $2 the seq each has been read up to, at most $3 rows a job).
SELECT c.job_id, e.seq, e.type, e.attempt, e.data, e.created_at, e.earlier
  FROM unnest($1::uuid[], $2::bigint[]) AS c(job_id, after)
 CROSS JOIN LATERAL (
       SELECT seq, type, attempt, data, created_at, earlier
         FROM job_log_rows
        WHERE job_id = c.job_id AND seq > c.after
        ORDER BY seq
        LIMIT $3) AS e
 ORDER BY c.job_id, e.seq

-- name: JOB_PROGRESS
-- What a stream needs to know before it starts: does the job exist, and is it finished? (Its
-- tenant too, which its streams count against.)
SELECT status, last_seq, tenant_id FROM jobs WHERE id = $1 AND tenant_id = $2

-- name: JOB_PROGRESS_BY_TOKEN
-- The same for a reader holding only the job's signed events token (a browser's EventSource,
-- which cannot send a key): the token names the job, and the job names its tenant. With the
-- tenant's key generation, which the token must still match (server/stream_tokens.py accepts):
-- a revoked or rotated key ends its tokens at the next connect, for no round trip of its own.
SELECT j.status, j.last_seq, j.tenant_id, t.key_generation,
       coalesce(t.previous_key_until > now(), false) AS previous_key_valid
  FROM jobs j JOIN tenants t ON t.id = j.tenant_id
 WHERE j.id = $1

-- name: JOB_LAST_SEQ
-- Where the hub starts reading a job it begins to follow.
SELECT last_seq FROM jobs WHERE id = $1

-- name: JOBS_LAST_SEQ
-- The hub's view of the jobs it follows: a job whose last_seq moved past what the hub read has
-- events a lost NOTIFY did not announce. One statement for every followed job.
SELECT id, last_seq FROM jobs WHERE id = ANY($1::uuid[])

-- name: LAST_PROGRESS
-- The last `progress` of a job's attempt ($1 job, $2 attempt), for its snapshot: a page opened
-- mid-run shows the bar where it is. The log's key (job_id, seq) read backwards from the end.
SELECT data FROM job_events
 WHERE job_id = $1 AND attempt = $2 AND type = 'progress'
 ORDER BY seq DESC
 LIMIT 1
