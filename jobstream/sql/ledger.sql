-- Money (jobstream/ledger.py): reserve at create (INSERT_JOBS, or a batch's BOOK_RESERVED in
-- creating.sql), charge once on success
-- (SUCCEED_ATTEMPTS, attempts.sql), release on any other end. Every booking goes to the
-- tenant's shard pg_backend_pid() % 16, the writing connection's, not the job's: a job's
-- reservation and its release may land on different rows, so a row's reserved_usd may be
-- negative and only the tenant's sum (tenant_balances) means anything. Booked by job id, a
-- success statement of 64 jobs wrote all 16 rows of the tenant, and so did the next one on
-- another connection: the second waited for the first's commit, and with two worker processes
-- the successes spent a third of their time in that wait (Lock transactionid in
-- pg_stat_activity). Connections now write different rows, but for the one in 16 pairs whose
-- process ids meet. A statement writes one row per tenant, in tenant order (the reaper's
-- batches too), so no two writers wait on each other in a cycle.

-- name: RELEASE_RESERVATION
WITH job AS (
    UPDATE jobs j
       SET reserved_usd = 0
      FROM jobs old
     WHERE j.id = $1 AND old.id = j.id AND j.reserved_usd > 0
    RETURNING j.tenant_id, old.reserved_usd AS held
)
-- An upsert: this backend's row of the tenant may not exist yet.
INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd)
SELECT tenant_id, pg_backend_pid() % 16, -held FROM job
ON CONFLICT (tenant_id, shard) DO UPDATE SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd
