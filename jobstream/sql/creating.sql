-- Creating jobs (jobstream/creates.py): the insert, the workers' wake-up, and the tenant's budget and
-- create rate.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: INSERT_JOBS
-- Create jobs, one or a batch, in one statement: the rows and their reservations on the
-- tenant's ledger (the workers' wake-up is NOTIFY_RUNNABLE, sent after). A job's log opens
-- with its `queued` event at seq 1 (last_seq 1), which has no row: the job_log view gives it.
-- $1 is a JSON array of the jobs, one array per job, its fields by position as `item` names
-- them (jobstream/new_jobs.py, _insert_row, writes them in this order): one parameter that the
-- client encodes in one call, where thirteen arrays cost asyncpg a type check and an encoding
-- per element, 11 µs a job of the server's time (a third of what the statement costs it).
-- Arrays, not objects: jsonb sorts and searches every object's keys, and a batch's statements
-- took 18.5 µs of the backend's CPU a job with objects, 15.0 with arrays (with their values
-- at fixed places, read in constant time). $2 is the tenant, $3 now. A tenant
-- with a budget or a create rate needs its row locked first (TENANT_FOR_CREATE): with $4 true
-- the statement inserts nothing for such a tenant and says so (`go` false), so that the caller
-- takes the locked path; for every other tenant, creates take no lock but the key's.
-- - Every job gets its row in tenant_jobs, and a keyed item makes a job only if that row wins
--   its key. Plain INSERTs, keyed or not: under ON CONFLICT every row is a speculative insert,
--   which writes a confirmation record of its own (HEAP_CONFIRM), one WAL record a job in
--   seven. A keyed item whose key this statement's snapshot already holds makes no row; an
--   insert of the same key by a statement still under way is waited for, and once that one
--   commits this statement fails on the key's unique index (a unique violation), makes nothing,
--   and is sent again whole (creates.py, KEY_RACE_TRIES), when its snapshot holds that key: so
--   twenty simultaneous duplicates make one job, and the others' items are read with
--   SELECT_JOBS_BY_KEYS. Two items of one statement with the same key make one job too: the
--   first, in request order (DISTINCT ON).
-- - The keys are taken in key order, whatever the request's: two statements with the same keys
--   in opposite orders each held a key the other waited for, a deadlock PostgreSQL ended by
--   aborting one of them. In key order, whoever waits holds only keys below the one it waits
--   for, which its holder has already passed. (A batch's statements take their keys in key
--   order from one to the next too: creates.create_batch says how.)
-- - $5 false: the reservations are not booked here; a batch books them in one statement after
--   its last key (BOOK_RESERVED), as a ledger row locked before a key wait closes a cycle with a
--   writer that holds that key and books next on the same shard.
-- - run_after is when the job may start: `run_at`, else now plus `delay_s` (0 by default).
-- - `retain_s` NULL: the deployment's JOBSTREAM_RETENTION_S.
-- - `traceparent`: the create's trace context (W3C), which the worker's spans continue; NULL
--   when the server does not trace (jobstream/tracing.py).
-- - $6 is the tenant's storage bound, bytes (NULL: none), $7 the bytes of this statement's
--   items: a statement that would pass the bound makes nothing (`fits` false) and the caller
--   refuses its items that are not replays. The stored bytes are the sum of the tenant's 16
--   ledger rows, read without a lock: creates in flight at once may pass the bound by what
--   they add, never by more.
-- - A key a tombstone still remembers makes no job (the caller answers 410 or 409).
WITH tenant AS (
    SELECT NOT $4::boolean OR (budget_usd IS NULL AND create_rate_per_min IS NULL) AS go,
           $6::bigint IS NULL
           OR (SELECT coalesce(sum(l.stored_bytes), 0) FROM tenant_ledger l
                WHERE l.tenant_id = $2) + $7::bigint <= $6::bigint AS fits
      FROM tenants
     WHERE id = $2
), item AS MATERIALIZED (
    SELECT (e->>0)::int AS ord, (e->>1)::uuid AS id, e->>2 AS key, e->>3 AS hash,
           e->>4 AS provider, (e->>5)::smallint AS priority, e->6 AS payload, e->7 AS metadata,
           (e->>8)::int AS max_attempts, e->>9 AS webhook_url, (e->>10)::numeric AS estimate,
           (e->>11)::timestamptz AS run_at, (e->>12)::float8 AS delay_s, (e->>13)::int AS retain_s,
           e->>14 AS job_name, (e->>15)::int AS input_bytes, e->>16 AS traceparent
      FROM jsonb_array_elements($1::jsonb) AS e,
           tenant
     WHERE tenant.go AND tenant.fits
), keyed AS (
    INSERT INTO tenant_jobs (tenant_id, created_at, job_id, idempotency_key)
    SELECT DISTINCT ON (n.key COLLATE "C")
           $2, coalesce($3::timestamptz, statement_timestamp()), n.id, n.key
      FROM item n
     WHERE n.key IS NOT NULL
       -- A probe of the key's index per item, as a subplan: as NOT EXISTS, the planner could
       -- join the whole of the tenant's keys against the batch's instead.
       AND (SELECT t.job_id FROM tenant_jobs t
             WHERE t.tenant_id = $2 AND t.idempotency_key = n.key) IS NULL
       AND NOT EXISTS (SELECT FROM job_tombstones b
                        WHERE b.tenant_id = $2 AND b.idempotency_key = n.key)
     ORDER BY n.key COLLATE "C", n.ord
    RETURNING job_id
), unkeyed AS (
    INSERT INTO tenant_jobs (tenant_id, created_at, job_id)
    SELECT $2, coalesce($3::timestamptz, statement_timestamp()), n.id
      FROM item n
     WHERE n.key IS NULL
     ORDER BY n.ord
    RETURNING job_id
), listed AS (
    SELECT job_id FROM keyed UNION ALL SELECT job_id FROM unkeyed
), inserted AS (
    INSERT INTO jobs (id, tenant_id, idempotency_key, request_hash, provider, priority, payload,
                      metadata, max_attempts, webhook_url, estimate_usd, reserved_usd, run_after,
                      last_seq, created_at, updated_at, retain_s, job_name, input_bytes,
                      traceparent)
    SELECT n.id, $2, n.key, n.hash, n.provider, n.priority, n.payload, n.metadata,
           n.max_attempts, n.webhook_url, n.estimate, n.estimate,
           coalesce(n.run_at, coalesce($3::timestamptz, statement_timestamp())
                              + make_interval(secs => coalesce(n.delay_s, 0))),
           1, coalesce($3::timestamptz, statement_timestamp()),
           coalesce($3::timestamptz, statement_timestamp()), n.retain_s, n.job_name,
           n.input_bytes, n.traceparent
      FROM item n
     WHERE n.id IN (SELECT job_id FROM listed)
     ORDER BY n.ord
    RETURNING *
), booked AS (
    -- One row: the tenant's on this backend's shard (ledger.sql): the reservations and the
    -- stored bytes.
    INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd, stored_bytes)
    SELECT $2, pg_backend_pid() % 16, sum(reserved_usd), sum(input_bytes)
      FROM inserted
     WHERE $5::boolean
    HAVING count(*) > 0
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd,
           stored_bytes = l.stored_bytes + EXCLUDED.stored_bytes
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_created)
    SELECT pg_backend_pid(), provider, count(*) FROM inserted GROUP BY provider
    ON CONFLICT (backend, provider) DO UPDATE
       SET jobs_created = m.jobs_created + EXCLUDED.jobs_created
)
-- Which items made a row (the others' keys were taken), and the times only the database knows;
-- the caller has the rest, as this statement wrote it (rows.py, JobRow.inserted).
-- Whole rows, payload and all, took 26-29 ms of a batch of 1,000 to read and decode; ten
-- columns 11 ms; these four about 5.
SELECT t.go, t.fits, i.id, i.created_at, i.run_after
  FROM tenant t
  LEFT JOIN inserted i ON true

-- name: BOOK_RESERVED
-- A batch's reservations and stored bytes: $2 and $3 are the sums of what its INSERT_JOBS
-- statements (run with their $5 false) left unbooked, for tenant $1, on this backend's shard of
-- the tenant's ledger (ledger.sql), after the batch's last key.
INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd, stored_bytes)
VALUES ($1, pg_backend_pid() % 16, $2, $3)
ON CONFLICT (tenant_id, shard) DO UPDATE
   SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd,
       stored_bytes = l.stored_bytes + EXCLUDED.stored_bytes

-- name: NOTIFY_RUNNABLE
-- Workers wake for new runnable jobs of these providers. Sent on its own, never by the creating
-- transaction: NOTIFY takes a cluster-wide lock from commit until the commit is durable, so a
-- NOTIFY in every create serialised all creates (32 clients: about 700 commits/s with it, 1,500
-- without). The server coalesces these (server/runnable_notices.py).
SELECT pg_notify('jobstream_jobs', p) FROM unnest($1::text[]) AS p

-- name: SELECT_JOBS_BY_KEYS
-- The jobs behind idempotency keys that an insert found taken.
SELECT j.*
  FROM tenant_jobs t
  JOIN jobs j ON j.id = t.job_id
 WHERE t.tenant_id = $1 AND t.idempotency_key = ANY($2::text[])

-- name: TOMBSTONES_BY_KEYS
-- The deleted jobs that idempotency keys made, while their tombstones are kept: such a key
-- makes no second job (INSERT_JOBS).
SELECT idempotency_key, id, request_hash, deleted_at
  FROM job_tombstones
 WHERE tenant_id = $1 AND idempotency_key = ANY($2::text[])

-- name: TENANT_FOR_CREATE
-- The locked path of a create, for a tenant with a budget or a create rate: its creates queue
-- here, so that each one's budget and rate checks count every create committed before it.
-- NO KEY UPDATE: see claim_jobs' step 3 (schema.sql).
SELECT budget_usd, create_rate_per_min FROM tenants WHERE id = $1 FOR NO KEY UPDATE

-- name: TENANT_BUDGET_LEFT
-- What the tenant may still reserve: NULL for no budget.
SELECT t.budget_usd - coalesce(sum(l.reserved_usd + l.spent_usd), 0) AS left_usd
  FROM tenants t
  LEFT JOIN tenant_ledger l ON l.tenant_id = t.id
 WHERE t.id = $1
 GROUP BY t.budget_usd

-- name: TENANT_RECENT_CREATES
-- Jobs created in the minute before now, and when the oldest of them leaves the window: what
-- Retry-After tells the client. A range of tenant_jobs' key, as long as the rate allows.
SELECT count(*) AS recent,
       coalesce(extract(epoch FROM min(created_at) + interval '1 minute'
                               - coalesce($2::timestamptz, statement_timestamp())), 0)::float8
         AS frees_in_s
  FROM tenant_jobs
 WHERE tenant_id = $1
   AND created_at > coalesce($2::timestamptz, statement_timestamp()) - interval '1 minute'
