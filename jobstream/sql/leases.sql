-- Leases: the running attempts' renewals, and the reaper that takes back the jobs of attempts
-- whose lease ran out (jobstream/attempts.py).
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: RENEW_LEASES
-- Renew the leases of every attempt a worker runs, in one statement per renewal tick. Fenced per
-- attempt on its run token (in the locking subquery, which PostgreSQL re-checks on a row changed
-- since the snapshot), so a fenced-out attempt learns it from its own row and the others are
-- renewed. The rows are locked in id order and SKIP LOCKED: a row another transaction holds (this
-- worker's own success batch, a cancel request) is left for the next tick instead of waited on,
-- so a renewal can never close a lock cycle with another multi-row write. `mine` tells such a
-- skipped attempt (still ours: try again soon) from a fenced one (the job moved on). An attempt
-- is named by its run token, unique to it. The same statement is the worker's heartbeat
-- (`beat`, its `workers` row: workers.sql), so a busy worker's heartbeat costs no round trip.
-- $1 job ids, $2 their run tokens, $3 lease seconds, $4 now (NULL: the database's), $5 the
-- worker's id.
WITH beat AS (
    UPDATE workers SET heartbeat_at = coalesce($4::timestamptz, statement_timestamp())
     WHERE id = $5
), mine AS (
    SELECT j.id, j.run_token
      FROM jobs j
      JOIN unnest($1::uuid[], $2::uuid[]) AS h (job_id, run_token)
        ON j.id = h.job_id AND j.run_token = h.run_token
     WHERE j.status IN ('running', 'cancelling')
), renewed AS (
    UPDATE jobs j
       SET lease_until = coalesce($4::timestamptz, statement_timestamp())
                         + make_interval(secs => $3)
      FROM (SELECT j.id
              FROM jobs j
              JOIN unnest($1::uuid[], $2::uuid[]) AS h (job_id, run_token)
                ON j.id = h.job_id AND j.run_token = h.run_token
             WHERE j.status IN ('running', 'cancelling')
             ORDER BY j.id
               FOR NO KEY UPDATE OF j SKIP LOCKED) l
     WHERE j.id = l.id
    RETURNING j.id, j.status, j.cancel_requested_at
)
SELECT m.run_token, r.status, r.cancel_requested_at
  FROM mine m
  LEFT JOIN renewed r ON r.id = m.id

-- name: SELECT_EXPIRED
-- Leases that ran out: their worker died or lost the database. Locked one batch at a time; the
-- reaper then ends each attempt as its worker would have, through the fenced statements of
-- attempts.sql with the run token read here (the lock keeps it current).
SELECT *
  FROM jobs
 WHERE status IN ('running', 'cancelling')
   AND lease_until < coalesce($1::timestamptz, statement_timestamp())
 ORDER BY lease_until
 LIMIT $2
   FOR UPDATE SKIP LOCKED
