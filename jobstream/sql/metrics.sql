-- The metrics (server/metrics.py): counters the writers keep, gauges read through indexes.
--
-- The counters (schema.sql, metric_totals): a statement that changes what they count adds to
-- them in one more CTE of the same statement, of the form
--   INSERT INTO metric_totals AS m (backend, provider, <its columns>)
--   SELECT pg_backend_pid(), provider, <its figures> FROM <its rows> GROUP BY provider
--   ON CONFLICT (backend, provider) DO UPDATE SET <column> = m.<column> + EXCLUDED.<column>, ...
-- The row is this backend's own, so the upsert never waits on another writer. Histograms are
-- arrays of cumulative counts, one per bound of DURATION_BUCKETS (jobstream/types.py), merged
-- with add_counts (schema.sql, inlined: free). The batch statements (CLAIM_JOBS,
-- SUCCEED_ATTEMPTS) count them in plain expressions, one `count(*) FILTER (WHERE <seconds> <=
-- <bound>)` per bound, which read the rows once and sort nothing; the one-row FINISH_ATTEMPT
-- calls duration_counts (schema.sql). tests/unit/test_sql_literals.py checks that each spells
-- DURATION_BUCKETS.

-- name: METRICS_TOTALS
-- Every counter, summed over the writers' rows (a row per live backend and provider, and the
-- folded totals of backend 0): a few hundred rows at most, whatever the history.
SELECT provider,
       sum(jobs_created)::bigint AS jobs_created, sum(jobs_accepted)::bigint AS jobs_accepted,
       sum(charged_usd) AS charged_usd, sum(attempts_started)::bigint AS attempts_started,
       sum(retries)::bigint AS retries, sum(succeeded)::bigint AS succeeded,
       sum(failed)::bigint AS failed, sum(unknown)::bigint AS unknown,
       sum(cancelled)::bigint AS cancelled, sum(lost)::bigint AS lost,
       sum(interrupted)::bigint AS interrupted, sum(cost_usd) AS cost_usd,
       sum(cost_unknown)::bigint AS cost_unknown, sum(events_ended)::bigint AS events_ended,
       sum_counts(queue_wait_counts) AS queue_wait_counts, sum(queue_wait_s) AS queue_wait_s,
       sum_counts(run_counts) AS run_counts, sum(run_s) AS run_s,
       sum(jobs_compacted)::bigint AS jobs_compacted,
       sum(events_compacted)::bigint AS events_compacted,
       sum(jobs_deleted)::bigint AS jobs_deleted, sum(rows_deleted)::bigint AS rows_deleted
  FROM metric_totals
 GROUP BY provider

-- name: METRICS_LIVE
-- The jobs not finished, by status: how many, the events in their logs so far (what the counted
-- events of finished logs lack), and how long the oldest runnable one has waited. One partial
-- index per status (jobs_runnable_idx, jobs_active_tenant_idx): the cost follows the backlog
-- and the running jobs, never the history.
SELECT 'queued' AS status, count(*) AS n, coalesce(sum(last_seq), 0)::bigint AS events,
       coalesce(extract(epoch FROM clock_timestamp()
                - min(run_after) FILTER (WHERE run_after <= clock_timestamp())), 0)::float8
         AS oldest_age_s
  FROM jobs
 WHERE status = 'queued'
UNION ALL
SELECT status, count(*), coalesce(sum(last_seq), 0)::bigint, 0
  FROM jobs
 WHERE status IN ('running', 'cancelling')
 GROUP BY status

-- name: METRICS_ATTEMPTS_RUNNING
-- Attempts under way, per provider (the running jobs': jobs_active_tenant_idx): what a provider
-- limit caps.
SELECT provider, count(*) AS n
  FROM jobs
 WHERE status IN ('running', 'cancelling')
 GROUP BY provider

-- name: METRICS_PROVIDER_PAUSES
-- Seconds each provider stays paused after a 429 (0 once the pause is over).
SELECT provider,
       greatest(coalesce(extract(epoch FROM paused_until - clock_timestamp()), 0), 0)::float8
         AS remaining_s
  FROM provider_state

-- name: METRICS_JANITOR_LAG
-- How far the janitor is behind: the oldest job past its expiry that is still there, and the
-- oldest finished job not settled ($1 s after its end, JOBSTREAM_COMPACT_AFTER_S). The first
-- entry of jobs_expiry_idx and of jobs_unsettled_idx.
SELECT greatest(coalesce(extract(epoch FROM clock_timestamp()
                         - (SELECT min(expires_at) FROM jobs WHERE expires_at IS NOT NULL)),
                         0), 0)::float8 AS delete_s,
       greatest(coalesce(extract(epoch FROM clock_timestamp() - make_interval(secs => $1)
                         - (SELECT min(finished_at) FROM jobs
                             WHERE finished_at IS NOT NULL AND expires_at IS NULL)),
                         0), 0)::float8 AS settle_s
