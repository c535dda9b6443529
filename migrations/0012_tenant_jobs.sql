-- Version 11 to 12: a tenant's job list and its idempotency keys move from indexes on jobs (the
-- unique constraint on (tenant_id, idempotency_key), jobs_tenant_created_idx) to a table of their
-- own, tenant_jobs (schema.sql says why), filled here from the existing jobs; the statements that
-- delete jobs delete every row of a job in one function, delete_jobs.
-- Servers of version 11 cannot create jobs once this has run (their insert names the constraint
-- that goes): start the new servers, then stop the old ones at once. Workers of version 11 never
-- read or write either and keep working.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

CREATE TABLE tenant_jobs (
    tenant_id       text NOT NULL,
    created_at      timestamptz NOT NULL,
    job_id          uuid NOT NULL,
    idempotency_key text,
    PRIMARY KEY (tenant_id, created_at, job_id)
);

INSERT INTO tenant_jobs (tenant_id, created_at, job_id, idempotency_key)
SELECT tenant_id, created_at, id, idempotency_key FROM jobs;

CREATE UNIQUE INDEX tenant_jobs_key_idx ON tenant_jobs (tenant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

ALTER TABLE jobs DROP CONSTRAINT jobs_tenant_id_idempotency_key_key;
DROP INDEX jobs_tenant_created_idx;

-- Every row of these jobs, which the caller has locked (DELETE_EXPIRED_JOBS, DELETE_FINISHED_JOB):
-- events, attempts, webhook rows (a pending delivery too), the tenant_jobs row (the idempotency
-- key with it: the key used again makes a new job) and the job. A row per job deleted, each
-- with the number of rows deleted in all.
CREATE OR REPLACE FUNCTION delete_jobs(doomed uuid[])
RETURNS TABLE (id uuid, tenant_id text, rows_deleted bigint) LANGUAGE sql AS $$
    WITH events AS (
        DELETE FROM job_events e WHERE e.job_id = ANY(doomed) RETURNING 1
    ), attempts AS (
        DELETE FROM job_attempts a WHERE a.job_id = ANY(doomed) RETURNING 1
    ), hooks AS (
        DELETE FROM webhook_deliveries w WHERE w.job_id = ANY(doomed) RETURNING 1
    ), gone AS (
        DELETE FROM jobs j WHERE j.id = ANY(doomed) RETURNING j.id, j.tenant_id, j.created_at
    ), unlisted AS (
        DELETE FROM tenant_jobs t USING gone g
         WHERE t.tenant_id = g.tenant_id AND t.created_at = g.created_at AND t.job_id = g.id
        RETURNING 1
    )
    SELECT g.id, g.tenant_id,
           (SELECT count(*) FROM gone) + (SELECT count(*) FROM events)
           + (SELECT count(*) FROM attempts) + (SELECT count(*) FROM hooks)
           + (SELECT count(*) FROM unlisted)
      FROM gone g
$$;
