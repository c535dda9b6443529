-- Version 7 to 8: every booking of tenant_ledger goes to the writing connection's shard,
-- pg_backend_pid() % 16, not the job's (jobstream/sql/ledger.sql says why). A job's reservation
-- and its release may then meet different rows, so a row's reserved_usd may go below zero: its
-- CHECK goes (the tenant's sum, tenant_balances, stays what it was). Rows booked before keep
-- their values; their jobs release on whichever row their last writer's connection picks.
-- Run once, in one transaction, under the schema advisory lock (jobstream/migrations.py).

ALTER TABLE tenant_ledger DROP CONSTRAINT IF EXISTS tenant_ledger_reserved_usd_check;
