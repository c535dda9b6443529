-- The ends of attempts (jobstream/attempts.py): success, another try, failure, a confirmed
-- cancel, and the attempt row's outcome.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: SUCCEED_ATTEMPTS
-- Accept attempts' results, one or many (a worker's successes of one tick), in one statement and
-- one commit: fenced on each run token, it ends each job, closes its attempt, appends its last
-- events (the final token chunk if any, `usage`, `done`), charges the accepted price once (the
-- attempt's cost, or `charge`: that and the cost of the journaled steps it replayed) and
-- frees the reservation on the tenant's ledger (ledger.sql), and writes the webhook outbox row;
-- the followers' NOTIFY follows the commit (NOTIFY_EVENTS says why). Every CTE acts only
-- through `done`: a fenced-out attempt changes nothing, the others still land, and the rows
-- returned name the jobs that were accepted. The events are built here
-- from the result, not sent: `usage` is the result's, `done` carries the whole result. `counted`
-- adds to the metrics' counters (metrics.sql): jobs accepted, what they were charged, their
-- attempts as succeeded (with cost and run time), and their logs' events, final now.
-- Parameters: $1 the attempts, a JSON array of objects (jobstream/attempts.py, accept_many,
-- names their fields: one parameter that the worker encodes in one call, where nine arrays
-- cost asyncpg a type check and an encoding per element), $2 their job ids again, $3 now.
-- `j.id = ANY($2)` repeats the join on purpose: a worker runs this statement prepared, and its
-- generic plan (the plan cache's, once the custom ones cost no less) cannot know the input's
-- length. Without the ANY it read every running job from a partial index and compared each
-- with each input row (Rows Removed by Join Filter: 64 x the running jobs); with it, 64
-- probes of the primary key. In a drain of 20,000 jobs with 256 slots: 317-334 µs of
-- PostgreSQL's time a job for this statement before, 243-262 after.
-- The last chunk lands as every token append does (APPEND_TOKENS_MANY, tokens.sql): only at
-- the offset it expects (`text_at`, the characters of the attempt's text the worker knows are in
-- the log), else the whole success is refused, and the worker reconciles its text with the log
-- before it tries again (worker/attempt.py). Without it, a write in doubt that committed late
-- would have its text in the result's log twice.
WITH input AS (
    SELECT *, 2 + (i.last_chunk <> '')::int AS n_events
      FROM jsonb_to_recordset($1::jsonb)
             AS i (job_id uuid, run_token uuid, result jsonb, attempt int, input_tokens int,
                   output_tokens int, cost numeric, cost_known boolean, price_source text,
                   model text, last_chunk text, charge numeric, text_at bigint,
                   started_at timestamptz)
), done AS (
    UPDATE jobs j
       SET status = 'succeeded', result = i.result,
           finished_at = coalesce($3::timestamptz, statement_timestamp()),
           updated_at = coalesce($3::timestamptz, statement_timestamp()),
           lease_until = NULL, error = NULL, charged_usd = coalesce(i.charge, i.cost),
           reserved_usd = 0,
           last_seq = j.last_seq + i.n_events,
           text_attempt = CASE WHEN i.last_chunk <> '' THEN i.attempt ELSE j.text_attempt END,
           text_chars = CASE WHEN i.last_chunk <> '' THEN i.text_at + char_length(i.last_chunk)
                             ELSE j.text_chars END
      FROM input i, jobs old
     WHERE j.id = i.job_id AND j.run_token = i.run_token AND j.status = 'running'
       AND j.id = ANY($2::uuid[]) AND old.id = j.id
       AND (i.last_chunk = ''
            OR CASE WHEN j.text_attempt = i.attempt THEN j.text_chars ELSE 0 END = i.text_at)
    RETURNING j.id, j.tenant_id, j.status, j.attempts, j.finished_at, j.result, j.error,
              j.webhook_url, j.last_seq, j.run_token, j.worker_id, j.provider,
              j.payload->>'model' AS claim_model, i.attempt, i.input_tokens, i.output_tokens,
              i.cost, i.cost_known, i.price_source, i.model, i.last_chunk,
              coalesce(i.charge, i.cost) AS charge, old.reserved_usd AS held,
              -- The attempt's start as its claim returned it (claims.Claimed.started_at); else
              -- the time of the event row that opened its log (attempt_started_at, schema.sql).
              coalesce(i.started_at, attempt_started_at(j.id, i.attempt), j.finished_at)
                AS started_at
), timed AS (
    SELECT *, extract(epoch FROM finished_at - started_at)::float8 AS run_s FROM done
), legacy AS (
    -- An attempt claimed by a worker of version 22 has its row already (claim_jobs'
    -- `attempt_rows`): it is finished here. No `outcome = 'running'` test: the job ran under
    -- this attempt's token, so its attempt is running.
    UPDATE job_attempts a
       SET outcome = 'succeeded', finished_at = done.finished_at,
           input_tokens = done.input_tokens, output_tokens = done.output_tokens,
           cost_usd = done.cost, cost_known = done.cost_known, price_source = done.price_source,
           model = coalesce(done.model, a.model)
      FROM done
     WHERE a.job_id = done.id AND a.attempt = done.attempt
    RETURNING a.job_id
), closed AS (
    -- The attempt's one row (job_attempts in schema.sql): its worker and token from the job's
    -- row, which the claim wrote.
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, finished_at,
                              outcome, provider, model, input_tokens, output_tokens, cost_usd,
                              cost_known, price_source)
    SELECT d.id, d.attempt, d.run_token, d.worker_id, d.started_at, d.finished_at,
           'succeeded', d.provider,
           -- The model its calls went to; the claim's (the built-in job's request) otherwise.
           coalesce(d.model, d.claim_model), d.input_tokens, d.output_tokens, d.cost,
           d.cost_known, d.price_source
      FROM done d
     WHERE d.id NOT IN (SELECT job_id FROM legacy)
), logged AS (
    -- The last chunk (if any), `usage` and `done`: one row (job_events.earlier).
    INSERT INTO job_events (job_id, seq, attempt, type, data, earlier)
    SELECT id, last_seq, attempt, 'done',
           jsonb_build_object('status', 'succeeded', 'result', result),
           CASE WHEN last_chunk <> ''
                THEN jsonb_build_array(
                         jsonb_build_array('token', jsonb_build_object('text', last_chunk)),
                         jsonb_build_array('usage', result->'usage'))
                ELSE jsonb_build_array(jsonb_build_array('usage', result->'usage'))
           END
      FROM done
), charged AS (
    -- One row per tenant, in tenant order, as every writer of the ledger (ledger.sql).
    INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd, spent_usd)
    SELECT tenant_id, pg_backend_pid() % 16, -sum(held), sum(charge)
      FROM done
     GROUP BY tenant_id
     ORDER BY tenant_id
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd,
           spent_usd = l.spent_usd + EXCLUDED.spent_usd
), hooked AS (
    INSERT INTO webhook_deliveries (job_id, event, url, payload, next_attempt_at)
    SELECT id, 'job.' || status, webhook_url,
           job_webhook_payload(id, status, attempts, finished_at, result, error), finished_at
      FROM done
     WHERE webhook_url IS NOT NULL
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_accepted, charged_usd, succeeded,
                                    cost_usd, cost_unknown, events_ended, run_counts, run_s)
    SELECT pg_backend_pid(), provider, count(*), coalesce(sum(charge), 0), count(*),
           coalesce(sum(cost), 0), count(*) FILTER (WHERE NOT cost_known), sum(last_seq),
           -- run_counts: how many at or under each bound of DURATION_BUCKETS (jobstream/types.py),
           -- written out: duration_counts (schema.sql) would sort the batch, which costs more.
           ARRAY[count(*) FILTER (WHERE run_s <= 0.05),
                 count(*) FILTER (WHERE run_s <= 0.1),
                 count(*) FILTER (WHERE run_s <= 0.25),
                 count(*) FILTER (WHERE run_s <= 0.5),
                 count(*) FILTER (WHERE run_s <= 1),
                 count(*) FILTER (WHERE run_s <= 2.5),
                 count(*) FILTER (WHERE run_s <= 5),
                 count(*) FILTER (WHERE run_s <= 10),
                 count(*) FILTER (WHERE run_s <= 30),
                 count(*) FILTER (WHERE run_s <= 60),
                 count(*) FILTER (WHERE run_s <= 120),
                 count(*) FILTER (WHERE run_s <= 300),
                 count(*) FILTER (WHERE run_s <= 600)], sum(run_s)
      FROM timed
     GROUP BY provider
    ON CONFLICT (backend, provider) DO UPDATE
       SET jobs_accepted = m.jobs_accepted + EXCLUDED.jobs_accepted,
           charged_usd = m.charged_usd + EXCLUDED.charged_usd,
           succeeded = m.succeeded + EXCLUDED.succeeded,
           cost_usd = m.cost_usd + EXCLUDED.cost_usd,
           cost_unknown = m.cost_unknown + EXCLUDED.cost_unknown,
           events_ended = m.events_ended + EXCLUDED.events_ended,
           run_counts = add_counts(m.run_counts, EXCLUDED.run_counts),
           run_s = m.run_s + EXCLUDED.run_s
)
SELECT id, last_seq FROM done

-- name: REQUEUE_JOB
-- Back to the queue for another attempt (a retry, a hand-back, the reaper's lost attempt).
-- run_token is cleared so the old attempt is fenced out.
UPDATE jobs
   SET status = 'queued',
       run_after = coalesce($5::timestamptz, statement_timestamp()) + make_interval(secs => $3),
       error = $4, run_token = NULL, lease_until = NULL, worker_id = NULL,
       updated_at = coalesce($5::timestamptz, statement_timestamp()),
       uncounted_attempts = uncounted_attempts + $6
 WHERE id = $1 AND run_token = $2 AND status = 'running'
RETURNING *, pg_notify('jobstream_jobs', provider)

-- name: FAIL_JOB
-- A terminal failure (`failed`, or `dead`: by the worker or the reaper).
UPDATE jobs
   SET status = $3, error = $4,
       finished_at = coalesce($5::timestamptz, statement_timestamp()),
       updated_at = coalesce($5::timestamptz, statement_timestamp()),
       lease_until = NULL
 WHERE id = $1 AND run_token = $2 AND status = 'running'
RETURNING *

-- name: CONFIRM_CANCEL
-- A cancel done: the worker stopped its attempt, or the reaper found it gone.
UPDATE jobs
   SET status = 'cancelled',
       finished_at = coalesce($3::timestamptz, statement_timestamp()),
       updated_at = coalesce($3::timestamptz, statement_timestamp()),
       lease_until = NULL,
       error = '{"class": "cancelled", "message": "cancelled while running"}'
 WHERE id = $1 AND run_token = $2 AND status = 'cancelling'
RETURNING *

-- name: FINISH_ATTEMPT
-- An attempt's end other than success, and the reaper's `lost` (jobstream/attempts.py), before
-- the statement that moves its job on, in the same transaction. Fenced on the attempt's run
-- token ($15; $16 its start as the claim returned it, NULL for the reaper): `held` locks its
-- job's row while the attempt still holds it (what the end statement after it locks anyway, in
-- the same order), so an attempt that lost its job writes nothing, and its end statement then
-- finds no row and undoes this. The attempt's row is inserted here (job_attempts in schema.sql:
-- its worker and provider are its job's), or, claimed by a worker of version 22, updated. The
-- reaper passes NULL usage: a lost attempt's tokens and cost are what its journaled steps
-- recorded (job_steps; a step that made no call adds nothing), its cost unknown. $12 is the
-- traceback of an exception of the job's own code, for operators; $13 how the cost's price was
-- found (jobstream/prices.py), $14 the model its calls went to (jobstream/usage.py). The INSERT
-- after `ended` adds the attempt to the metrics' counters (metrics.sql); one row, so its
-- histogram is duration_counts' (schema.sql).
WITH held AS (
    SELECT j.id, j.worker_id, j.provider, j.payload->>'model' AS claim_model,
           -- The attempt's start as its claim returned it ($16), or, for the reaper, the time
           -- of the event row that opened its log (attempt_started_at, schema.sql).
           coalesce($16::timestamptz, attempt_started_at(j.id, $2), $11::timestamptz,
                    statement_timestamp()) AS started_at
      FROM jobs j
     WHERE j.id = $1 AND j.attempts = $2 AND j.run_token = $15
       AND j.status IN ('running', 'cancelling')
       FOR NO KEY UPDATE
), legacy AS (
    UPDATE job_attempts a
       SET outcome = $3, finished_at = coalesce($11::timestamptz, statement_timestamp()),
           error_class = $4, error_detail = $5,
           -- The reaper passes NULLs: a lost attempt keeps what its journaled steps recorded.
           input_tokens = coalesce($6, a.input_tokens),
           output_tokens = coalesce($7, a.output_tokens),
           cost_usd = coalesce($8, a.cost_usd), cost_known = $9,
           price_source = coalesce($13, a.price_source), model = coalesce($14, a.model),
           cancel_confirmed = $10, error_trace = $12
      FROM held
     WHERE a.job_id = held.id AND a.attempt = $2 AND a.outcome = 'running'
    RETURNING a.provider, a.outcome, a.cost_usd, a.cost_known,
              extract(epoch FROM a.finished_at - a.started_at)::float8 AS run_s
), steps AS (
    SELECT sum(s.input_tokens) AS input_tokens, sum(s.output_tokens) AS output_tokens,
           sum(s.cost_usd) AS cost_usd,
           -- The least certain price of its calls (jobstream/prices.py), as JOURNAL_STEPS'.
           CASE WHEN bool_or(s.price_source = 'default') THEN 'default'
                WHEN bool_or(s.price_source = 'operator') THEN 'operator'
                ELSE max(s.price_source) END AS price_source
      FROM job_steps s
     WHERE $8::numeric IS NULL AND s.job_id = $1 AND s.attempt = $2
       AND (s.cost_usd > 0 OR s.input_tokens > 0 OR s.output_tokens > 0)
), opened AS (
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, finished_at,
                              outcome, error_class, error_detail, provider, model, input_tokens,
                              output_tokens, cost_usd, cost_known, price_source,
                              cancel_confirmed, error_trace)
    SELECT held.id, $2, $15, held.worker_id, held.started_at,
           coalesce($11::timestamptz, statement_timestamp()), $3, $4, $5, held.provider,
           coalesce($14, held.claim_model), coalesce($6, steps.input_tokens),
           coalesce($7, steps.output_tokens), coalesce($8, steps.cost_usd), $9,
           coalesce($13, steps.price_source), $10, $12
      FROM held, steps
     WHERE NOT EXISTS (SELECT FROM job_attempts a WHERE a.job_id = $1 AND a.attempt = $2)
    RETURNING provider, outcome, cost_usd, cost_known,
              extract(epoch FROM finished_at - started_at)::float8 AS run_s
), ended AS (
    SELECT * FROM legacy
    UNION ALL
    SELECT * FROM opened
)
INSERT INTO metric_totals AS m (backend, provider, succeeded, failed, unknown, cancelled, lost,
                                interrupted, cost_usd, cost_unknown, run_counts, run_s)
SELECT pg_backend_pid(), provider, count(*) FILTER (WHERE outcome = 'succeeded'),
       count(*) FILTER (WHERE outcome = 'failed'), count(*) FILTER (WHERE outcome = 'unknown'),
       count(*) FILTER (WHERE outcome = 'cancelled'), count(*) FILTER (WHERE outcome = 'lost'),
       count(*) FILTER (WHERE outcome = 'interrupted'), coalesce(sum(cost_usd), 0),
       count(*) FILTER (WHERE NOT cost_known),
       duration_counts(array_agg(run_s ORDER BY run_s)), sum(run_s)
  FROM ended
 GROUP BY provider
ON CONFLICT (backend, provider) DO UPDATE
   SET succeeded = m.succeeded + EXCLUDED.succeeded,
       failed = m.failed + EXCLUDED.failed,
       unknown = m.unknown + EXCLUDED.unknown,
       cancelled = m.cancelled + EXCLUDED.cancelled,
       lost = m.lost + EXCLUDED.lost,
       interrupted = m.interrupted + EXCLUDED.interrupted,
       cost_usd = m.cost_usd + EXCLUDED.cost_usd,
       cost_unknown = m.cost_unknown + EXCLUDED.cost_unknown,
       run_counts = add_counts(m.run_counts, EXCLUDED.run_counts),
       run_s = m.run_s + EXCLUDED.run_s

-- name: EARLIER_ATTEMPTS_COST
-- What a job's earlier attempts cost ($1 the job, $2 this attempt): a job with max_cost_usd
-- counts it against its cap before its first call of this attempt (worker/spend.py).
SELECT coalesce(sum(cost_usd), 0) FROM job_attempts WHERE job_id = $1 AND attempt < $2

-- name: JOURNAL_STEPS
-- Steps of jobs' own code, journaled once per job (worker/steps.py), many attempts' at once (a
-- worker's journal writer, worker/journal_writes.py: a commit for all that arrived together).
-- $1 is a JSON array of the steps, each an array of its fields where `input` reads them
-- (journal_writes.journal; `ord` its place), $2 their jobs' ids, each once. Fenced per step:
-- only while its attempt's run token is the job's, whose row it locks (FOR SHARE: a reaper that
-- moves the job on waits, or has moved it and the token no longer matches). A journal may land
-- after its attempt's success (which does not wait for it): the token is still the job's. A
-- step already journaled (by a zombie that got there first) keeps its first row. An attempt
-- lost to a crash still records what its finished steps cost: FINISH_ATTEMPT sums them (and a
-- running attempt's row of version 22 gets each step's cost as it lands, `costed`); an
-- attempt's own end writes its whole cost, and a late journal adds nothing. The answer: the
-- `ord` of every step whose attempt held its job.
WITH input AS (
    SELECT (e->>0)::int AS ord, (e->>1)::uuid AS job_id, (e->>2)::uuid AS run_token,
           e->>3 AS step, (e->>4)::int AS attempt, e->5 AS result, e->6 AS output,
           (e->>7)::int AS input_tokens, (e->>8)::int AS output_tokens,
           (e->>9)::numeric AS cost, (e->>10)::boolean AS cost_known, e->>11 AS price_source
      FROM jsonb_array_elements($1::jsonb) AS e
), locked AS (
    -- Each job once, however many of its steps are here (a lock is a write to its row).
    SELECT j.id, j.run_token, j.status IN ('running', 'cancelling') AS running
      FROM jobs j
     WHERE j.id = ANY($2::uuid[])
     ORDER BY j.id
       FOR SHARE
), held AS (
    SELECT i.*, l.running
      FROM input i JOIN locked l ON l.id = i.job_id AND l.run_token = i.run_token
), journaled AS (
    INSERT INTO job_steps (job_id, step, attempt, run_token, result, output, input_tokens,
                           output_tokens, cost_usd, cost_known, price_source)
    SELECT job_id, step, attempt, run_token, result, output, input_tokens, output_tokens, cost,
           cost_known, price_source
      FROM held
     ORDER BY job_id, step
    ON CONFLICT (job_id, step) DO NOTHING
    RETURNING job_id, step
), costed AS (
    UPDATE job_attempts a
       SET input_tokens = coalesce(a.input_tokens, 0) + s.input_tokens,
           output_tokens = coalesce(a.output_tokens, 0) + s.output_tokens,
           cost_usd = coalesce(a.cost_usd, 0) + s.cost,
           -- The least certain price of the attempt's calls so far (jobstream/prices.py).
           price_source = CASE WHEN 'default' IN (a.price_source, s.price_source) THEN 'default'
                               WHEN 'operator' IN (a.price_source, s.price_source) THEN 'operator'
                               ELSE coalesce(s.price_source, a.price_source) END
      FROM (SELECT h.job_id, h.attempt, sum(h.input_tokens) AS input_tokens,
                   sum(h.output_tokens) AS output_tokens, sum(h.cost) AS cost,
                   CASE WHEN bool_or(h.price_source = 'default') THEN 'default'
                        WHEN bool_or(h.price_source = 'operator') THEN 'operator'
                        ELSE max(h.price_source) END AS price_source
              FROM held h JOIN journaled USING (job_id, step)
             -- Steps that made no call (no tokens, no cost) change no attempt's row.
             WHERE h.running AND (h.cost > 0 OR h.input_tokens > 0 OR h.output_tokens > 0)
             GROUP BY h.job_id, h.attempt) s
     -- Only a running attempt's row of version 22 (claim_jobs' `attempt_rows`): since, a
     -- running attempt has no row, and FINISH_ATTEMPT sums a lost one's steps.
     WHERE a.job_id = s.job_id AND a.attempt = s.attempt AND a.outcome = 'running'
)
SELECT ord FROM held

-- name: JOB_STEPS
-- Every journaled step of a job, for an attempt that replays them (worker/steps.py).
SELECT step, result, output, input_tokens, output_tokens, cost_usd, cost_known
  FROM job_steps
 WHERE job_id = $1

-- name: PREVIOUS_ATTEMPTS
-- A retried attempt's look back (worker/handlers.py): how each earlier attempt ended, for
-- ctx.previous_failure and the output error kinds' own retry budgets.
SELECT attempt, outcome, error_class, error_detail, error_trace
  FROM job_attempts
 WHERE job_id = $1 AND attempt < $2
 ORDER BY attempt
