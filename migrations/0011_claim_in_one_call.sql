-- Version 10 to 11: the claim becomes one function call, claim_jobs (schema.sql says why and
-- how it works): the statements LOCK_PROVIDERS, CLAIM_JOBS, LOCK_CLAIMED_TENANTS and
-- TENANTS_OVER_LIMIT of jobstream/sql/claiming.sql, run one after another by the database
-- instead of by the worker in a transaction of six round trips. Workers of version 10, which send
-- those statements themselves, keep working beside the new ones meanwhile.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

CREATE TYPE claimed_job AS (
    id                 uuid,
    tenant_id          text,
    attempts           integer,
    uncounted_attempts integer,
    max_attempts       integer,
    run_token          uuid,
    provider           text,
    payload            jsonb,
    last_seq           bigint
);

CREATE OR REPLACE FUNCTION claim_jobs(
    unlimited text[], worker text, lease_s float8, at_time timestamptz, limited text[],
    limits integer[], skipped text[], max_jobs integer
) RETURNS SETOF claimed_job LANGUAGE plpgsql AS $$
DECLARE
    locked_providers text[] := '{}';
    locked_limits integer[] := '{}';
    taken claimed_job[];
    taken_tenants text[];
    over_limit text[];
BEGIN
    IF cardinality($5) > 0 THEN
        WITH locked AS (
            WITH runnable AS (
                SELECT DISTINCT q.provider
                  FROM job_queues q
                 CROSS JOIN LATERAL (
                       SELECT FROM jobs j
                        WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
                          AND j.provider = q.provider AND j.priority = q.priority
                          AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
                        ORDER BY j.run_after, j.created_at
                        LIMIT 1) head
                 WHERE q.provider = ANY($5::text[])
            )
            INSERT INTO provider_state AS p (provider)
            SELECT provider FROM runnable ORDER BY provider
            ON CONFLICT (provider) DO UPDATE SET paused_until = p.paused_until
            RETURNING provider
        )
        SELECT coalesce(array_agg(l.provider ORDER BY l.provider), '{}'),
               coalesce(array_agg(l.max_running ORDER BY l.provider), '{}')
          INTO locked_providers, locked_limits
          FROM unnest($5::text[], $6::int[]) AS l (provider, max_running)
         WHERE l.provider IN (SELECT provider FROM locked);
    END IF;

    -- Steps 2 and 3 are a savepoint (a block with an EXCEPTION clause): a claim that
    -- finds a tenant over its limit undoes them there, and no ERROR reaches the log.
    BEGIN
        WITH queues AS (
            SELECT tenant_id, provider, priority FROM job_queues
        ), busy AS (
            SELECT provider, count(*) AS n
              FROM job_attempts
             WHERE outcome = 'running' AND provider = ANY(locked_providers)
             GROUP BY provider
        ), with_room AS (
            SELECT u.provider, $8::int AS room
              FROM unnest($1::text[]) AS u (provider)
            UNION ALL
            SELECT l.provider, l.max_running - coalesce(b.n, 0)::int
              FROM unnest(locked_providers, locked_limits) AS l (provider, max_running)
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
        SELECT array_agg((id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token,
                          provider, payload, last_seq)::claimed_job)
          INTO taken
          FROM claimed;
        IF taken IS NULL THEN
            RETURN;
        END IF;

        taken_tenants := ARRAY(SELECT DISTINCT c.tenant_id FROM unnest(taken) AS c ORDER BY 1);
        PERFORM FROM tenants WHERE id = ANY(taken_tenants) ORDER BY id FOR NO KEY UPDATE;
        WITH turn AS (
            UPDATE tenants
               SET last_claimed_at = coalesce($4::timestamptz, statement_timestamp())
             WHERE id = ANY(taken_tenants)
        )
        SELECT array_agg(t.id)
          INTO over_limit
          FROM tenants t
         WHERE t.id = ANY(taken_tenants)
           AND t.max_running < (SELECT count(*) FROM jobs j
                                 WHERE j.tenant_id = t.id AND j.status IN ('running', 'cancelling'));
        IF over_limit IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'JS409';
        END IF;
    EXCEPTION WHEN SQLSTATE 'JS409' THEN
        -- Undone (local variables outlive it): a row with no id for each tenant over its
        -- limit tells the caller to try again.
        RETURN QUERY SELECT NULL::uuid, t, NULL::integer, NULL::integer, NULL::integer,
                            NULL::uuid, NULL::text, NULL::jsonb, NULL::bigint
                       FROM unnest(over_limit) AS t;
        RETURN;
    END;
    RETURN QUERY SELECT * FROM unnest(taken);
END
$$;
