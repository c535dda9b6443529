-- Version 19 to 20: lease renewals become HOT updates.
-- - jobs_leased_idx (lease_until, running jobs) goes: the reaper (SELECT_EXPIRED) reads the
--   running jobs through jobs_active_tenant_idx, whose rows are as many as the fleet's slots,
--   and keeps those whose lease ran out. With no index on lease_until, a renewal that finds room
--   on the row's page writes no index entry, and a claim writes one entry fewer.
-- Safe under load and for code of version 19: no statement names the index, and a plan that
-- used it is planned again. DROP INDEX waits for the statements on jobs under way (claims and
-- appends hold them for milliseconds) within the migration's lock timeout, and is retried.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

DROP INDEX IF EXISTS jobs_leased_idx;
