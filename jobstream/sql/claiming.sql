-- Claiming jobs (jobstream/claims.py, claim_batch) and the provider-wide pause that claims obey
-- (jobstream/pauses.py).
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: LOCK_PROVIDERS
-- The first statement of a claim transaction for a worker that runs providers with a concurrency
-- limit ($1, sorted): lock the provider_state row of each limited provider that has a runnable
-- job, and return the providers locked. CLAIM_JOBS, the next statement, may then claim for these
-- providers and for no other limited one.
-- - The row lock serialises claims per limited provider across every worker, until commit: no
--   other claim for the provider can commit between our count of its running attempts and our
--   own claim, so the limit holds exactly. (Each worker checks the shared count against its own
--   setting: workers configured differently cap the provider at the largest of their limits.)
-- - A statement's snapshot is taken before it waits for a lock, so the count cannot live in this
--   statement: it is in CLAIM_JOBS, whose snapshot (READ COMMITTED) is taken after this lock was
--   granted and so sees every claim committed before it.
-- - Only providers with a runnable job are locked, so idle polls and claims for other providers
--   do not queue behind each other. The probe walks the queues as CLAIM_JOBS does (job_queues,
--   then one descent of jobs_runnable_idx per limited provider's queue for its head), so it
--   costs what the claim's own walk costs: 0.2-0.5 ms with 60 queues and 100,000 jobs queued.
--   An index on (provider, run_after) answered in one descent until schema version 10, for an
--   entry in every create. PostgreSQL 18 would skip through jobs_runnable_idx in 0.035 ms
--   (ORDER BY its columns); without a skip scan that reads the table, 35-40 ms.
-- - An upsert, so the row exists without a set-up step; DO UPDATE (not DO NOTHING) because only
--   it locks a row that already exists (the update leaves the row as it was). Rows are locked in
--   name order, so two claims never wait for each other in a cycle.
WITH runnable AS (
    SELECT DISTINCT q.provider
      FROM job_queues q
     CROSS JOIN LATERAL (
           SELECT FROM jobs j
            WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
              AND j.provider = q.provider AND j.priority = q.priority
              AND j.run_after <= coalesce($2::timestamptz, statement_timestamp())
            ORDER BY j.run_after, j.created_at
            LIMIT 1) head
     WHERE q.provider = ANY($1::text[])
)
INSERT INTO provider_state AS p (provider)
SELECT provider FROM runnable ORDER BY provider
ON CONFLICT (provider) DO UPDATE SET paused_until = p.paused_until
RETURNING provider

-- name: CLAIM_JOBS
-- Claim up to $8 runnable jobs in one statement (after LOCK_PROVIDERS, in the same transaction,
-- when the worker runs a provider with a limit). Its cost does not grow with the backlog: every
-- read below is an index probe or a range of at most $8 index entries.
-- Parameters: $1 providers without a limit, $2 worker id, $3 lease seconds, $4 now (NULL: the
-- database clock), $5 limited providers LOCK_PROVIDERS locked and $6 their limits, $7 tenants to
-- skip (found full by an earlier try), $8 how many jobs at most.
-- - `queues`: the distinct (tenant, provider, priority) of queued jobs (the job_queues view,
--   schema.sql): its cost grows with the number of queues, not of jobs.
-- - `with_room`: providers this worker runs that may start more attempts. A limited provider's
--   running attempts are counted here, after LOCK_PROVIDERS (see there). Attempts are counted,
--   not jobs: an attempt row is `running` from its claim until its outcome is written, which is
--   after its HTTP request has closed.
-- - `tenant_room`: a tenant at its running limit is skipped. Its count comes from this
--   statement's snapshot: two claims at once can both see room, so claims.claim_batch re-counts
--   after locking the tenant's row (TENANTS_OVER_LIMIT) and rolls back an overrun.
-- - `open`: queues with a runnable head (`run_after <= now`: backoff and delayed jobs wait), of
--   a provider with room that no 429 has paused. `tenant_turn` ranks a tenant's queues by
--   priority, so that one tenant's many queues do not crowd out another's one.
-- - Tenants take turns: each tenant's best queue before anyone's second, then the tenant with
--   fewer running jobs, then the one served longest ago (`last_claimed_at`), then the oldest.
--   At most $8 + 4 queues take part: the 4 spare ones fill the batch when the first ones' heads
--   are all locked by other claims in flight (SKIP LOCKED passes over them). Each offers what the
--   batch could hold if every other queue gave one job (at least one): the batch fills while rows
--   locked and not taken stay few.
-- - `candidates`: from each chosen queue, its oldest runnable jobs, FOR UPDATE SKIP LOCKED so
--   that any number of workers claim at once without waiting for each other.
-- - `chosen`: interleave tenants (a tenant's first job, then every tenant's second...), cap each
--   tenant at its room and each provider at its room, and keep $8.
-- - `claimed`: a fresh run_token (the fence for every later write) and a lease for each; the
--   attempt row, and the `reset` and `status` events that open the attempt's log, are written
--   by the same statement, which allocates their seqs (last_seq + 2) under the row lock the
--   UPDATE holds. Their followers are told after the commit (NOTIFY_EVENTS says why).
-- - `counted`: the metrics' counters (metrics.sql): the attempts it started, the retries among
--   them, and the first attempts' waits since their job's creation.
WITH queues AS (
    SELECT tenant_id, provider, priority FROM job_queues
), busy AS (
    SELECT provider, count(*) AS n
      FROM job_attempts
     WHERE outcome = 'running' AND provider = ANY($5::text[])
     GROUP BY provider
), with_room AS (
    SELECT u.provider, $8::int AS room
      FROM unnest($1::text[]) AS u (provider)
    UNION ALL
    SELECT l.provider, l.max_running - coalesce(b.n, 0)::int
      FROM unnest($5::text[], $6::int[]) AS l (provider, max_running)
      LEFT JOIN busy b ON b.provider = l.provider
), tenant_room AS (
    SELECT t.id AS tenant_id, t.max_running - r.n AS room, r.n AS running, t.last_claimed_at
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT count(*)::int AS n
             FROM jobs
            WHERE tenant_id = t.id AND status IN ('running', 'cancelling')) r
     WHERE t.id IN (SELECT tenant_id FROM queues)
       AND t.id <> ALL($7::text[])
), open AS (
    SELECT q.tenant_id, q.provider, q.priority, tr.room, tr.running, tr.last_claimed_at,
           w.room AS provider_room, head.run_after AS head_after,
           row_number() OVER (PARTITION BY q.tenant_id
                              ORDER BY q.priority DESC, head.run_after) AS tenant_turn
      FROM queues q
      JOIN tenant_room tr ON tr.tenant_id = q.tenant_id
      JOIN with_room w ON w.provider = q.provider
      LEFT JOIN provider_state p ON p.provider = q.provider
     CROSS JOIN LATERAL (
           SELECT j.run_after
             FROM jobs j
            WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
              AND j.provider = q.provider AND j.priority = q.priority
              AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
            ORDER BY j.run_after, j.created_at
            LIMIT 1) head
     WHERE tr.room > 0 AND w.room > 0
       AND (p.paused_until IS NULL
            OR p.paused_until <= coalesce($4::timestamptz, statement_timestamp()))
), chosen_queues AS (
    SELECT o.*, count(*) OVER () AS n_queues
      FROM (SELECT *
              FROM open
             ORDER BY tenant_turn, running, last_claimed_at NULLS FIRST, head_after
             LIMIT $8 + 4) o
), candidates AS (
    SELECT c.id, c.previous_error, c.run_after, q.tenant_id, q.provider, q.priority, q.room,
           q.running, q.last_claimed_at, q.provider_room
      FROM chosen_queues q
     CROSS JOIN LATERAL (
           SELECT j.id, j.error AS previous_error, j.run_after, j.created_at
             FROM jobs j
            WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
              AND j.provider = q.provider AND j.priority = q.priority
              AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
            ORDER BY j.run_after, j.created_at
            LIMIT least(q.room, q.provider_room, greatest(1, $8 - q.n_queues + 1))
              FOR UPDATE SKIP LOCKED) c
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.tenant_id
                                   ORDER BY c.priority DESC, c.run_after) AS turn
      FROM candidates c
), chosen AS (
    SELECT r.id, r.previous_error
      FROM (SELECT r.*,
                   row_number() OVER (PARTITION BY r.provider
                                      ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST,
                                               r.priority DESC, r.run_after) AS provider_turn
              FROM ranked r
             WHERE r.turn <= r.room) r
     WHERE r.provider_turn <= r.provider_room
     ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST, r.priority DESC, r.run_after
     LIMIT $8
), claimed AS (
    UPDATE jobs j
       SET status = 'running', attempts = j.attempts + 1, run_token = gen_random_uuid(),
           worker_id = $2,
           lease_until = coalesce($4::timestamptz, statement_timestamp())
                         + make_interval(secs => $3),
           started_at = coalesce(j.started_at, $4::timestamptz, statement_timestamp()),
           updated_at = coalesce($4::timestamptz, statement_timestamp()),
           -- Cleared here; the new attempt's `reset` event still names it as the reason.
           error = NULL,
           last_seq = j.last_seq + 2
      FROM chosen c
     WHERE j.id = c.id
    RETURNING j.id, j.tenant_id, j.attempts, j.uncounted_attempts, j.max_attempts, j.run_token,
              j.provider, j.payload, j.last_seq, j.worker_id, c.previous_error,
              extract(epoch FROM j.started_at - j.created_at)::float8 AS waited_s
), attempt AS (
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, provider, model)
    SELECT id, attempts, run_token, worker_id, coalesce($4::timestamptz, statement_timestamp()),
           provider, payload->>'model'
      FROM claimed
), opened AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, last_seq - 1, attempts, 'reset',
           jsonb_build_object(
               'attempt', attempts,
               'reason', CASE WHEN attempts = 1 THEN 'first attempt'
                              ELSE 'retry after ' || coalesce(previous_error->>'class',
                                                              'an interrupted attempt')
                         END)
      FROM claimed
    UNION ALL
    SELECT id, last_seq, attempts, 'status', '{"status": "running"}'::jsonb FROM claimed
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, attempts_started, retries,
                                    queue_wait_counts, queue_wait_s)
    SELECT pg_backend_pid(), provider, count(*), count(*) FILTER (WHERE attempts > 1),
           -- queue_wait_counts: how many at or under each bound of DURATION_BUCKETS
           -- (jobstream/types.py), written out: duration_counts (schema.sql) would sort the
           -- batch, which costs more.
           ARRAY[count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.05),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.1),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.25),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 0.5),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 1),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 2.5),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 5),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 10),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 30),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 60),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 120),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 300),
                 count(*) FILTER (WHERE attempts = 1 AND waited_s <= 600)],
           coalesce(sum(waited_s) FILTER (WHERE attempts = 1), 0)
      FROM claimed
     GROUP BY provider
    ON CONFLICT (backend, provider) DO UPDATE
       SET attempts_started = m.attempts_started + EXCLUDED.attempts_started,
           retries = m.retries + EXCLUDED.retries,
           queue_wait_counts = add_counts(m.queue_wait_counts, EXCLUDED.queue_wait_counts),
           queue_wait_s = m.queue_wait_s + EXCLUDED.queue_wait_s
)
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       last_seq
  FROM claimed

-- name: LOCK_CLAIMED_TENANTS
-- A tenant's running limit, exactly: CLAIM_JOBS counts from its snapshot, so two workers
-- claiming for one tenant at once can both see room. After the claim, lock the rows of the
-- tenants claimed for, in id order (so two claims never wait on each other in a cycle), then
-- count in a new statement, whose snapshot follows the locks and so sees every claim committed
-- before it (TENANTS_OVER_LIMIT). Over the limit: the claim is rolled back.
-- FOR NO KEY UPDATE, never FOR UPDATE, on tenants: inserting a job takes FOR KEY SHARE on its
-- tenant (the foreign key), which FOR UPDATE conflicts with; two creates (or a create and a claim)
-- would each hold one and wait for the other. NO KEY UPDATE still serialises the lockers.
-- A lock and nothing else. Regression: this statement also wrote the turn, as
-- `UPDATE tenants t ... FROM (SELECT ... FOR NO KEY UPDATE) l`, and deadlocked with itself. When a
-- claim committed a new version of the row after the statement's snapshot (and a ledger
-- booking's foreign key check held FOR KEY SHARE on it), the subquery locked the new version
-- while the UPDATE, reading the old one, waited for the old version's tuple lock, held by a
-- second claim that was waiting for the first to commit (two worker processes: one claim in
-- about a dozen drains failed so, after deadlock_timeout; test_claims.py makes it every time).
SELECT id FROM tenants WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE

-- name: TENANTS_OVER_LIMIT
-- The tenants claimed for that are now over their running limit, counted in this statement's
-- snapshot, taken after LOCK_CLAIMED_TENANTS's locks. It also records the tenants' turn
-- (last_claimed_at), on rows this transaction holds already: no wait, so no cycle.
WITH turn AS (
    UPDATE tenants
       SET last_claimed_at = coalesce($2::timestamptz, statement_timestamp())
     WHERE id = ANY($1::text[])
)
SELECT t.id
  FROM tenants t
 WHERE t.id = ANY($1::text[])
   AND t.max_running < (SELECT count(*) FROM jobs j
                         WHERE j.tenant_id = t.id AND j.status IN ('running', 'cancelling'))

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
