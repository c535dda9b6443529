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

-- Routines live in schema.sql alone: delete_jobs, which this version brought, is there, and
-- jobstream/migrations.py runs it after the migrations.
