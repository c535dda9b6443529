-- Money (jobstream/ledger.py): reserve at create (INSERT_JOBS), charge once on success, release
-- on any other end. A job books on tenant_ledger's shard get_byte(uuid_send(id), 15) % 16 (a v4
-- uuid's last byte is random): its reservation, charge and release meet on one row, so no shard
-- goes negative, and jobs of one tenant finishing at once mostly write different rows.

-- name: CHARGE_JOB
-- Charge the accepted attempt's price and free what the job still held. The self-join reads the
-- job's reservation as it was before this UPDATE zeroes it.
WITH job AS (
    UPDATE jobs j
       SET charged_usd = $2, reserved_usd = 0
      FROM jobs old
     WHERE j.id = $1 AND old.id = j.id AND j.charged_usd IS NULL
    RETURNING j.tenant_id, get_byte(uuid_send(j.id), 15) % 16 AS shard, old.reserved_usd AS held
)
INSERT INTO tenant_ledger AS l (tenant_id, shard, spent_usd)
SELECT tenant_id, shard, $2 FROM job
ON CONFLICT (tenant_id, shard) DO UPDATE
   SET reserved_usd = l.reserved_usd - (SELECT held FROM job),
       spent_usd = l.spent_usd + EXCLUDED.spent_usd

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
