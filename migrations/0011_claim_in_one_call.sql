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

-- Routines live in schema.sql alone: claim_jobs, which this version brought, is there, and
-- jobstream/migrations.py runs it after the migrations.
