-- Claiming jobs (jobstream/claims.py, claim_batch) and the provider-wide pause that claims obey
-- (jobstream/pauses.py).
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: CLAIM_JOBS
-- Claim up to $8 runnable jobs in one call of schema.sql's claim_jobs (its comment says how the
-- claim stays fair and within every limit): $1 providers without a limit, $2 worker id, $3 lease
-- seconds, $4 now (NULL: the database clock), $5 providers with a limit, sorted, and $6 their
-- limits, $7 tenants to skip (found full by an earlier try), $9 the job names the worker runs,
-- $10 the most of the fleet's slots a tenant without a running limit of its own may take while
-- another tenant could want one (JOBSTREAM_TENANT_MAX_SHARE). `false`: no attempt row now; the
-- statement that ends the attempt writes it (job_attempts in schema.sql).
-- Rows with no id: the tenants they name went over their running limit, and the claim undid
-- itself.
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       last_seq, job_name, traceparent, started_at
  FROM claim_jobs($1::text[], $2, $3, $4::timestamptz, $5::text[], $6::int[], $7::text[], $8,
                  $9::text[], $10::float8, false)

-- name: PAUSE_PROVIDER
-- A 429 pauses the provider for every worker (CLAIM_JOBS skips paused providers). GREATEST keeps
-- the longest pause when several attempts are rate-limited at once. `paused_at` is when the
-- current pause began, read after the row lock is granted (in SET, not VALUES): claims for a
-- limited provider hold that lock, so every claim either committed before `paused_at` or sees
-- the pause. Hence clock_timestamp() here, the time at the SET: statement_timestamp() is when
-- this statement began, before it waited for the lock behind claims that start after it.
INSERT INTO provider_state AS p (provider, paused_until, paused_at)
VALUES ($1, coalesce($3::timestamptz, clock_timestamp()) + make_interval(secs => $2),
        coalesce($3::timestamptz, clock_timestamp()))
ON CONFLICT (provider) DO UPDATE
   SET paused_until = GREATEST(p.paused_until, EXCLUDED.paused_until),
       paused_at = CASE WHEN p.paused_until > coalesce($3::timestamptz, clock_timestamp())
                        THEN coalesce(p.paused_at, $3::timestamptz, clock_timestamp())
                        ELSE coalesce($3::timestamptz, clock_timestamp()) END
RETURNING paused_until
