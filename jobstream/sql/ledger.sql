-- Money (jobstream/ledger.py): reserve at create (INSERT_JOBS), charge once on success
-- (SUCCEED_ATTEMPTS, attempts.sql), release on any other end. A job books on tenant_ledger's
-- shard get_byte(uuid_send(id), 15) % 16 (a v4 uuid's last byte is random): its reservation,
-- charge and release meet on one row, so no shard goes negative, and jobs of one tenant
-- finishing at once mostly write different rows.

-- name: RELEASE_RESERVATION
WITH job AS (
    UPDATE jobs j
       SET reserved_usd = 0
      FROM jobs old
     WHERE j.id = $1 AND old.id = j.id AND j.reserved_usd > 0
    RETURNING j.tenant_id, get_byte(uuid_send(j.id), 15) % 16 AS shard, old.reserved_usd AS held
)
UPDATE tenant_ledger l
   SET reserved_usd = l.reserved_usd - job.held
  FROM job
 WHERE l.tenant_id = job.tenant_id AND l.shard = job.shard
