-- The worker processes (jobstream/workers.py): each one's row in `workers`, whose live rows'
-- slots are the fleet that claim_jobs shares among tenants without a running limit of their own.
-- A busy worker's heartbeat is a CTE of RENEW_LEASES (leases.sql), not a statement here.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: REGISTER_WORKER
-- A worker at start: its row, made or taken over from an earlier process of the same id (a
-- restart with JOBSTREAM_WORKER_ID set), started and alive now, no longer stopped.
-- $1 id, $2 host, $3 pid, $4 version, $5 job names, $6 slots, $7 now (NULL: the database's).
INSERT INTO workers AS w (id, host, pid, version, job_names, slots, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, $5::text[], $6, coalesce($7::timestamptz, statement_timestamp()),
        coalesce($7::timestamptz, statement_timestamp()))
ON CONFLICT (id) DO UPDATE
   SET host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
       job_names = EXCLUDED.job_names, slots = EXCLUDED.slots, started_at = EXCLUDED.started_at,
       heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL

-- name: WORKER_HEARTBEAT
-- An idle worker's sign of life, once a lease tick (a third of a lease). No row back: the row
-- is gone (deleted by hand while the worker ran), and the worker registers again.
-- $1 id, $2 now (NULL: the database's).
UPDATE workers SET heartbeat_at = coalesce($2::timestamptz, statement_timestamp())
 WHERE id = $1
RETURNING id

-- name: WORKER_STOPPED
-- A clean exit, after the worker handed back its attempts: its slots leave the fleet at once,
-- not a lease later. $1 id, $2 now (NULL: the database's).
UPDATE workers SET stopped_at = coalesce($2::timestamptz, statement_timestamp())
 WHERE id = $1
