-- The dashboard's per-minute series (jobstream/series.py): what the janitor folds, and what the
-- overview reads of them. Both tables are keyed by their minute first, so every read is a
-- range of the last hour or day, whatever the history.
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: FOLD_METRIC_MINUTE
-- The counters (metric_totals, a few hundred rows at most) as they stand now, as the row of
-- the current minute: each janitor round rewrites it, so the last write of a minute holds its
-- end. A minute with no row before it (the first fold, or the first after the janitor was
-- away) gets one for the minute before with the same counters: the baseline its difference
-- starts from, so that its first minute counts what happened since, not all of history. $1 now.
WITH totals AS (
    SELECT date_trunc('minute', coalesce($1::timestamptz, statement_timestamp())) AS minute,
           coalesce(sum(jobs_created), 0) AS jobs_created,
           coalesce(sum(jobs_accepted), 0) AS jobs_accepted,
           coalesce(sum(attempts_started) - sum(retries), 0) AS first_attempts,
           sum_counts(queue_wait_counts) AS queue_wait_counts,
           coalesce(sum(succeeded) + sum(failed) + sum(unknown) + sum(cancelled) + sum(lost)
                    + sum(interrupted), 0) AS attempts_ended,
           sum_counts(run_counts) AS run_counts
      FROM metric_totals
), baseline AS (
    INSERT INTO metric_minutes (minute, jobs_created, jobs_accepted, first_attempts,
                                queue_wait_counts, attempts_ended, run_counts)
    SELECT minute - interval '1 minute', jobs_created, jobs_accepted, first_attempts,
           queue_wait_counts, attempts_ended, run_counts
      FROM totals
     WHERE NOT EXISTS (SELECT FROM metric_minutes m
                        WHERE m.minute >= totals.minute - interval '1 minute'
                          AND m.minute <= totals.minute)
    ON CONFLICT (minute) DO NOTHING
)
INSERT INTO metric_minutes AS m (minute, jobs_created, jobs_accepted, first_attempts,
                                 queue_wait_counts, attempts_ended, run_counts)
SELECT minute, jobs_created, jobs_accepted, first_attempts, queue_wait_counts, attempts_ended,
       run_counts
  FROM totals
ON CONFLICT (minute) DO UPDATE
   SET jobs_created = EXCLUDED.jobs_created, jobs_accepted = EXCLUDED.jobs_accepted,
       first_attempts = EXCLUDED.first_attempts, queue_wait_counts = EXCLUDED.queue_wait_counts,
       attempts_ended = EXCLUDED.attempts_ended, run_counts = EXCLUDED.run_counts

-- name: FOLD_ATTEMPT_MINUTES
-- The attempts that ended in [$1, $2), whole minutes, by minute, tenant, job name and model:
-- their cost, and the jobs they ended failed or dead (the job's last attempt, the job failed or
-- dead). Read by job_attempts_finished_idx, each attempt's job by its key. Written over what an
-- earlier fold wrote of the same minutes: a fold covers the minute before its last one again,
-- so that an attempt whose commit came a little after its end's time is counted.
INSERT INTO attempt_minutes AS m (minute, tenant_id, job_name, model, cost_usd, jobs_failed)
SELECT date_trunc('minute', a.finished_at), j.tenant_id, j.job_name, coalesce(a.model, ''),
       coalesce(sum(a.cost_usd), 0),
       count(*) FILTER (WHERE j.status IN ('failed', 'dead') AND a.attempt = j.attempts)
  FROM job_attempts a
  JOIN jobs j ON j.id = a.job_id
 WHERE a.finished_at IS NOT NULL AND a.finished_at >= $1 AND a.finished_at < $2
 GROUP BY 1, 2, 3, 4
ON CONFLICT (minute, tenant_id, job_name, model) DO UPDATE
   SET cost_usd = EXCLUDED.cost_usd, jobs_failed = EXCLUDED.jobs_failed

-- name: CURRENT_MINUTE
-- The minute it is now ($1 now), by the clock the folds use.
SELECT date_trunc('minute', coalesce($1::timestamptz, statement_timestamp()))

-- name: LAST_ATTEMPT_MINUTE
-- The newest minute folded into attempt_minutes (NULL: none yet).
SELECT max(minute) FROM attempt_minutes

-- name: PRUNE_METRIC_MINUTES
-- Minutes older than $2 s ($1 now) go (JOBSTREAM_ADMIN_SERIES_KEEP_S).
DELETE FROM metric_minutes
 WHERE minute < coalesce($1::timestamptz, statement_timestamp()) - make_interval(secs => $2)

-- name: PRUNE_ATTEMPT_MINUTES
-- As PRUNE_METRIC_MINUTES, for attempt_minutes.
DELETE FROM attempt_minutes
 WHERE minute < coalesce($1::timestamptz, statement_timestamp()) - make_interval(secs => $2)

-- name: SERIES_MINUTES
-- For each minute from $1 to $2 (inclusive), the counters as they stood at its end: its own
-- row, or the last one before it (a minute no round wrote moved nothing). One probe of the
-- primary key a minute: 61 for an hour.
SELECT g.minute, m.jobs_created, m.jobs_accepted, m.first_attempts, m.queue_wait_counts,
       m.attempts_ended, m.run_counts
  FROM generate_series($1::timestamptz, $2::timestamptz, interval '1 minute') AS g (minute)
  LEFT JOIN LATERAL (
        SELECT * FROM metric_minutes WHERE minute <= g.minute ORDER BY minute DESC LIMIT 1
       ) m ON true
 ORDER BY g.minute

-- name: SERIES_FAILED
-- The jobs that ended failed or dead, a minute, from $1 on.
SELECT minute, sum(jobs_failed)::bigint AS n
  FROM attempt_minutes
 WHERE minute >= $1
 GROUP BY minute

-- name: SERIES_SPEND
-- What attempts cost since $1 (the last day) and since $2 (the last hour), by tenant, job name
-- and model: attempt_minutes' rows of the day.
SELECT tenant_id, job_name, model, sum(cost_usd) AS day,
       coalesce(sum(cost_usd) FILTER (WHERE minute >= $2), 0) AS hour
  FROM attempt_minutes
 WHERE minute >= $1
 GROUP BY tenant_id, job_name, model
HAVING sum(cost_usd) > 0
 ORDER BY day DESC
