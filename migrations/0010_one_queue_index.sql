-- Version 9 to 10: LOCK_PROVIDERS finds out whether a provider has a runnable job by walking the
-- queues, as CLAIM_JOBS does, so the index that answered it alone goes: every create wrote an
-- entry in it (schema.sql says what that cost). That walk becomes a view both statements read.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP INDEX IF EXISTS jobs_queued_provider_idx;

-- The queues: the distinct (tenant, provider, priority) of queued jobs, found by skipping
-- through jobs_runnable_idx one queue at a time (a loose index scan: one descent per queue,
-- never a read of the jobs inside), so its cost grows with the number of queues, not of jobs.
-- Read by every claim (CLAIM_JOBS, LOCK_PROVIDERS in jobstream/sql/claiming.sql).
CREATE OR REPLACE VIEW job_queues AS
WITH RECURSIVE queues AS (
    (SELECT tenant_id, provider, priority
       FROM jobs
      WHERE status = 'queued'
      ORDER BY tenant_id, provider, priority
      LIMIT 1)
    UNION ALL
    SELECT next.tenant_id, next.provider, next.priority
      FROM queues q
     CROSS JOIN LATERAL (
           SELECT tenant_id, provider, priority
             FROM jobs
            WHERE status = 'queued'
              AND (tenant_id, provider, priority) > (q.tenant_id, q.provider, q.priority)
            ORDER BY tenant_id, provider, priority
            LIMIT 1) next
)
SELECT tenant_id, provider, priority FROM queues;
