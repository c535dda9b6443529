-- How long a job will take (server/estimates.py): what the long-running-task pattern's answers
-- tell a client, read at most once a second by each server process, never once per request.

-- name: ESTIMATE_INPUTS
-- Per provider: the attempts that ended and their run time in all (metric_totals, the scrape's
-- counters: a few hundred rows whatever the history), the attempts running now (the running
-- jobs': jobs_active_tenant_idx), and the jobs runnable now ($1: now), counted through
-- jobs_runnable_idx up to $2 of them, so that a backlog of millions costs what $2 costs (past
-- it the count, and the wait the server derives from it, is a floor).
WITH ended AS (
    SELECT provider,
           sum(succeeded + failed + unknown + cancelled + lost + interrupted)::bigint AS runs,
           sum(run_s)::float8 AS run_s
      FROM metric_totals
     WHERE provider <> ''  -- the janitor's row
     GROUP BY provider
), running AS (
    SELECT provider, count(*) AS running
      FROM jobs
     WHERE status IN ('running', 'cancelling')
     GROUP BY provider
), queued AS (
    SELECT provider, count(*) AS queued
      FROM (SELECT provider
              FROM jobs
             WHERE status = 'queued'
               AND run_after <= coalesce($1::timestamptz, statement_timestamp())
             LIMIT $2) runnable
     GROUP BY provider
)
SELECT provider, coalesce(runs, 0)::bigint AS runs, coalesce(run_s, 0)::float8 AS run_s,
       coalesce(running, 0)::bigint AS running, coalesce(queued, 0)::bigint AS queued
  FROM ended
  FULL JOIN running USING (provider)
  FULL JOIN queued USING (provider)
