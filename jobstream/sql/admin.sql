-- The operator's dashboard (server/admin_api.py, docs/admin.md): every tenant's jobs, read
-- through an index each, never a scan of history. The per-minute series are series.sql's.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: ADMIN_COUNTS
-- The jobs not finished, and the failed and dead ones the database still keeps, by job name,
-- tenant and status; `scheduled`: the queued ones not due yet (a delay, a retry's backoff).
-- Each branch reads one partial index: jobs_runnable_idx (queued: the backlog), the running
-- ones (jobs_active_tenant_idx: the fleet's slots), jobs_failed_groups_idx (failed and dead:
-- what retention keeps of them, in the groups' order, counted as they come). $1 now.
SELECT job_name, tenant_id, 'queued' AS status, count(*) AS n,
       count(*) FILTER (WHERE run_after > coalesce($1::timestamptz, statement_timestamp()))
         AS scheduled
  FROM jobs
 WHERE status = 'queued'
 GROUP BY job_name, tenant_id
UNION ALL
SELECT job_name, tenant_id, status, count(*), 0
  FROM jobs
 WHERE status IN ('running', 'cancelling')
 GROUP BY job_name, tenant_id, status
UNION ALL
SELECT job_name, tenant_id, status, count(*), 0
  FROM jobs
 WHERE status IN ('failed', 'dead')
 GROUP BY job_name, tenant_id, status

-- name: ADMIN_PROVIDERS
-- Each provider's attempts under way (the running jobs': jobs_active_tenant_idx) and its 429
-- pause.
SELECT coalesce(r.provider, p.provider) AS provider, coalesce(r.n, 0)::int AS in_use,
       p.paused_until
  FROM (SELECT provider, count(*) AS n FROM jobs WHERE status IN ('running', 'cancelling')
         GROUP BY provider) r
  FULL JOIN provider_state p ON p.provider = r.provider

-- name: ADMIN_WINDOW_FLOOR
-- The oldest id of a jobs page's window: the $3-th id below $1 and at or above $2, read from
-- the primary key alone (ids are version-7 UUIDs: newest first is id order). No row: fewer
-- than $3 jobs are left, and the window reaches $2.
SELECT id FROM jobs WHERE id < $1 AND id >= $2 ORDER BY id DESC OFFSET $3 - 1 LIMIT 1

-- name: ADMIN_JOBS_PAGE
-- A page of every tenant's jobs, newest first, within the ids [$2, $1): a window of the primary
-- key that ADMIN_WINDOW_FLOOR bounds, so a page reads at most that many jobs whatever matches. Filters: $3 statuses, $4 job name, $5
-- tenant, $6 the search (an id's last characters, an idempotency key, or text in the metadata);
-- each NULL for none; $8 made at or after, $9 made before (the id range holds them with a
-- margin: an id's time is its maker's clock, a moment before created_at). $7 rows at most. The cost each attempt and step of the job recorded, its
-- error's class.
SELECT j.id, j.tenant_id, j.job_name, j.status, j.created_at, j.finished_at, j.attempts,
       j.error->>'class' AS error_class, j.idempotency_key,
       (SELECT sum(a.cost_usd) FROM job_attempts a WHERE a.job_id = j.id) AS cost_usd
  FROM jobs j
 WHERE j.id < $1 AND j.id >= $2
   AND ($3::text[] IS NULL OR j.status = ANY($3::text[]))
   AND ($4::text IS NULL OR j.job_name = $4)
   AND ($5::text IS NULL OR j.tenant_id = $5)
   AND ($6::text IS NULL
        OR right(replace(j.id::text, '-', ''), length($6)) = lower($6)
        OR j.idempotency_key = $6
        OR strpos(lower(j.metadata::text), lower($6)) > 0)
   AND ($8::timestamptz IS NULL OR j.created_at >= $8)
   AND ($9::timestamptz IS NULL OR j.created_at < $9)
 ORDER BY j.id DESC
 LIMIT $7

-- name: ADMIN_FAILED_PAGE
-- ADMIN_JOBS_PAGE for failed and dead jobs alone ($3 a subset of them, no search): read from
-- jobs_failed_idx newest first, however old the history around them, so no window is needed.
-- The literal IN proves the index's predicate for any plan, generic ones included.
SELECT j.id, j.tenant_id, j.job_name, j.status, j.created_at, j.finished_at, j.attempts,
       j.error->>'class' AS error_class, j.idempotency_key,
       (SELECT sum(a.cost_usd) FROM job_attempts a WHERE a.job_id = j.id) AS cost_usd
  FROM jobs j
 WHERE j.status IN ('failed', 'dead')
   AND j.id < $1 AND j.id >= $2
   AND j.status = ANY($3::text[])
   AND ($4::text IS NULL OR j.job_name = $4)
   AND ($5::text IS NULL OR j.tenant_id = $5)
   AND ($7::timestamptz IS NULL OR j.created_at >= $7)
   AND ($8::timestamptz IS NULL OR j.created_at < $8)
 ORDER BY j.id DESC
 LIMIT $6

-- name: ADMIN_JOB
-- One job, whoever's it is: the tenant is the operator's to see.
SELECT * FROM jobs WHERE id = $1

-- name: ADMIN_ATTEMPTS
-- A job's attempts as an operator sees them: the traceback too.
-- The running one from its job's row, as SELECT_ATTEMPTS.
SELECT attempt, worker_id, outcome, error_class, error_detail, error_trace, provider, model,
       input_tokens, output_tokens, cost_usd, cost_known, price_source, started_at,
       finished_at AS ended_at
  FROM job_attempts
 WHERE job_id = $1
UNION ALL
SELECT j.attempts, j.worker_id, 'running', NULL, NULL, NULL, j.provider, j.payload->>'model',
       NULL, NULL, NULL, true, NULL, attempt_started_at(j.id, j.attempts), NULL
  FROM jobs j
 WHERE j.id = $1 AND j.status IN ('running', 'cancelling')
   AND NOT EXISTS (SELECT FROM job_attempts a WHERE a.job_id = j.id AND a.attempt = j.attempts)
 ORDER BY attempt

-- name: ADMIN_TIMELINE
-- A job's log without its text: every event but the token chunks, which are summed instead, one
-- row per run of them (their chunks, characters, first and last seq). Reads the job's events
-- by the primary key, the log of one job.
WITH log AS (
    SELECT seq, attempt, type, data, created_at,
           seq - row_number() OVER (PARTITION BY type = 'token' ORDER BY seq) AS run
      FROM job_log
     WHERE job_id = $1
)
SELECT min(seq) AS seq, min(attempt) AS attempt, 'token' AS type,
       jsonb_build_object('chunks', count(*), 'chars', sum(char_length(data->>'text')),
                          'last_seq', max(seq)) AS data,
       min(created_at) AS at
  FROM log
 WHERE type = 'token'
 GROUP BY run
UNION ALL
SELECT seq, attempt, type, data, created_at
  FROM log
 WHERE type <> 'token'
 ORDER BY seq

-- name: ADMIN_DELIVERIES
-- A job's webhook deliveries (webhook_deliveries_job_idx).
SELECT id, event, url, status, attempts, next_attempt_at, last_status_code, last_error,
       created_at
  FROM webhook_deliveries
 WHERE job_id = $1
 ORDER BY id

-- name: ADMIN_JOB_TENANT
-- Whose job this is (an operator's action runs as the job's tenant's would).
SELECT tenant_id FROM jobs WHERE id = $1

-- name: ADMIN_DEAD
-- The newest $1 failed and dead jobs (jobs_failed_idx, newest first), each with its error: the
-- dead letters, grouped by the caller.
SELECT j.id, j.status, j.finished_at, j.error->>'class' AS error_class,
       j.error->>'message' AS message
  FROM jobs j
 WHERE j.status IN ('failed', 'dead')
 ORDER BY j.id DESC
 LIMIT $1

-- name: ADMIN_WORKERS
-- Every worker row the janitor still keeps (a day after it stopped or fell silent), with its
-- state: `stopped` (a clean exit), `stale` (no heartbeat for $1 s: killed, hung or cut off),
-- else `live`. $2 now.
SELECT id, host, pid, version, job_names, slots, started_at, heartbeat_at, stopped_at,
       CASE WHEN stopped_at IS NOT NULL THEN 'stopped'
            WHEN heartbeat_at < coalesce($2::timestamptz, statement_timestamp())
                                - make_interval(secs => $1) THEN 'stale'
            ELSE 'live' END AS state
  FROM workers
 ORDER BY started_at DESC, id

-- name: ADMIN_RUNNING_ATTEMPTS
-- The attempts under way, each with its worker: the running jobs' (jobs_active_tenant_idx: as
-- many as run), whose rows hold their current attempt (job_attempts in schema.sql); oldest job
-- first.
SELECT j.worker_id, j.id AS job_id, j.attempts AS attempt, j.job_name
  FROM jobs j
 WHERE j.status IN ('running', 'cancelling')
 ORDER BY j.started_at, j.id
