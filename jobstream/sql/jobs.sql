-- The jobs as the API sees them (jobstream/jobs.py): read, list, cancel, retry, delete.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: SELECT_JOB
SELECT * FROM jobs WHERE id = $1 AND tenant_id = $2

-- name: SELECT_JOB_FOR_UPDATE
SELECT * FROM jobs WHERE id = $1 AND tenant_id = $2 FOR UPDATE

-- name: SELECT_ATTEMPTS
-- The ended attempts' rows, and the running one from its job's row and, for its start, the
-- event row that opened its log (attempt_started_at, schema.sql): its `job_attempts` row is
-- written at its end (schema.sql says why), unless a worker of version 22 claimed it.
SELECT attempt, worker_id, started_at, finished_at, outcome, error_class, error_detail, provider,
       model, input_tokens, output_tokens, cost_usd, cost_known, price_source, cancel_confirmed
  FROM job_attempts
 WHERE job_id = $1
UNION ALL
SELECT j.attempts, j.worker_id, attempt_started_at(j.id, j.attempts), NULL, 'running', NULL,
       NULL, j.provider, j.payload->>'model', NULL, NULL, NULL, true, NULL, NULL
  FROM jobs j
 WHERE j.id = $1 AND j.status IN ('running', 'cancelling')
   AND NOT EXISTS (SELECT FROM job_attempts a WHERE a.job_id = j.id AND a.attempt = j.attempts)
 ORDER BY attempt

-- name: LIST_JOBS
-- Keyset pagination, newest first; ($3, $4) is the last row of the previous page.
SELECT j.*
  FROM tenant_jobs t
  JOIN jobs j ON j.id = t.job_id
 WHERE t.tenant_id = $1
   AND ($2::text IS NULL OR j.status = $2)
   AND ($3::timestamptz IS NULL OR (t.created_at, t.job_id) < ($3, $4::uuid))
 ORDER BY t.created_at DESC, t.job_id DESC
 LIMIT $5

-- name: CANCEL_QUEUED
UPDATE jobs
   SET status = 'cancelled',
       cancel_requested_at = coalesce($2::timestamptz, statement_timestamp()),
       finished_at = coalesce($2::timestamptz, statement_timestamp()),
       updated_at = coalesce($2::timestamptz, statement_timestamp()),
       run_token = NULL, lease_until = NULL,
       error = '{"class": "cancelled", "message": "cancelled before it started"}'
 WHERE id = $1 AND status = 'queued'
RETURNING *

-- name: REQUEST_CANCEL_RUNNING
UPDATE jobs
   SET status = 'cancelling',
       cancel_requested_at = coalesce($2::timestamptz, statement_timestamp()),
       updated_at = coalesce($2::timestamptz, statement_timestamp())
 WHERE id = $1 AND status = 'running'
RETURNING *, pg_notify('jobstream_cancel', id::text)

-- name: RETRY_DEAD
-- An operator's second chance for a dead job ($1): a new job ($2) that asks for the same work,
-- queued from now with a fresh set of attempts, its own log (opened by a `queued` status naming
-- `retry_of`) and its own reservation of the same estimate (on this connection's ledger row, as
-- every booking: ledger.sql). The dead job stays dead, its log ends with its one `done`; it only
-- gains `retried_as`. Run under the dead job's row lock (jobs.retry_dead): one retry per job. No
-- idempotency key: the create's key still names the dead job, which now links to this one.
WITH old AS (
    SELECT * FROM jobs WHERE id = $1 AND status = 'dead' AND retried_as IS NULL
), created AS (
    INSERT INTO jobs (id, tenant_id, request_hash, provider, priority, payload, metadata,
                      max_attempts, webhook_url, estimate_usd, reserved_usd, run_after, last_seq,
                      created_at, updated_at, retry_of, retain_s, job_name)
    SELECT $2, tenant_id, request_hash, provider, priority, payload, metadata, max_attempts,
           webhook_url, estimate_usd, estimate_usd,
           coalesce($3::timestamptz, statement_timestamp()), 1,
           coalesce($3::timestamptz, statement_timestamp()),
           coalesce($3::timestamptz, statement_timestamp()), id, retain_s, job_name
      FROM old
    RETURNING *
), listed AS (
    INSERT INTO tenant_jobs (tenant_id, created_at, job_id)
    SELECT tenant_id, created_at, id FROM created
), linked AS (
    UPDATE jobs
       SET retried_as = created.id, updated_at = coalesce($3::timestamptz, statement_timestamp())
      FROM created
     WHERE jobs.id = created.retry_of
), logged AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, 1, 0, 'status', jsonb_build_object('status', 'queued', 'retry_of', retry_of)
      FROM created
), booked AS (
    INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd)
    SELECT tenant_id, pg_backend_pid() % 16, reserved_usd
      FROM created
     WHERE reserved_usd > 0
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_created)
    SELECT pg_backend_pid(), provider, 1 FROM created
    ON CONFLICT (backend, provider) DO UPDATE
       SET jobs_created = m.jobs_created + EXCLUDED.jobs_created
)
SELECT *, pg_notify('jobstream_jobs', provider) FROM created

-- name: DELETE_FINISHED_JOB
-- DELETE /v1/responses/{id} (jobs.delete_finished).
-- A finished job goes with every row that belongs to it (delete_jobs in schema.sql, as for
-- DELETE_EXPIRED_JOBS); an unfinished one stays, as its worker still writes to it. The row is
-- locked first, as every writer of a job locks it, so a job cannot finish between the check and
-- the delete. Returns `finished` (true: deleted), or no row when the tenant has no such job.
-- `gone` is read by the last SELECT: a CTE that only reads, and that nothing reads, never runs.
WITH job AS (
    SELECT id, status IN ('succeeded', 'failed', 'cancelled', 'dead') AS finished
      FROM jobs
     WHERE id = $1 AND tenant_id = $2
       FOR UPDATE
), gone AS (
    SELECT * FROM delete_jobs(ARRAY(SELECT id FROM job WHERE finished))
), unstored AS (
    -- What the job booked on the tenant's storage bound (INSERT_JOBS) is free again. An
    -- explicit delete leaves no tombstone: its idempotency key may make a new job at once.
    INSERT INTO tenant_ledger AS l (tenant_id, shard, stored_bytes)
    SELECT tenant_id, pg_backend_pid() % 16, -input_bytes FROM gone WHERE input_bytes > 0
    ON CONFLICT (tenant_id, shard) DO UPDATE SET stored_bytes = l.stored_bytes + EXCLUDED.stored_bytes
)
SELECT finished, (SELECT count(*) FROM gone) AS deleted FROM job
