-- Tenants and their API keys (jobstream/tenants.py).

-- name: INSERT_TENANT
-- The key's sha256 hex only: a database dump never yields a usable key. A NULL max_running
-- stays NULL: the tenant gets a fair share of the fleet's slots (claim_jobs in schema.sql).
INSERT INTO tenants (id, name, api_key_hash, budget_usd, max_running)
VALUES ($1, $2, $3, $4, $5::integer)
ON CONFLICT (id) DO NOTHING
RETURNING id

-- name: TENANT_BY_KEY_HASH
-- The tenant whose current key this is, or whose previous key while the rotation's grace runs
-- (the database's clock, so servers need not agree on time). Both hashes are UNIQUE: one probe
-- of each index. `generation` is the key's own (the previous key's is the one before the
-- current), which the events tokens of the request's answers carry: a token issued to a caller
-- still on the old key ends with that key's grace.
SELECT id,
       CASE WHEN api_key_hash = $1 THEN key_generation ELSE key_generation - 1 END AS generation
  FROM tenants
 WHERE api_key_hash = $1 OR (previous_key_hash = $1 AND previous_key_until > now())

-- name: TENANT_KEY_GENERATION
-- The key generation of a tenant named without a key (the `default` tenant while keys are
-- off), for the events tokens of its answers (server/key_generations.py keeps it a second).
SELECT key_generation FROM tenants WHERE id = $1

-- name: ROTATE_KEY
-- $1 the tenant, $2 the new key's hash, $3 the grace in seconds. The current key becomes the
-- previous one, accepted until now() + grace; with no grace, or no current key (never given
-- one, or revoked), nothing but the new key is accepted, nor any older events token. A key
-- rotated out earlier and still in its grace ends now: one previous key at most. (SET reads
-- the row as it was: api_key_hash on the right is the old key.)
UPDATE tenants
   SET api_key_hash = $2,
       previous_key_hash = CASE WHEN $3::float8 > 0 THEN api_key_hash END,
       previous_key_until = CASE
           WHEN $3::float8 > 0 AND api_key_hash IS NOT NULL
           THEN now() + $3::float8 * interval '1 second'
       END,
       key_generation = key_generation + 1
 WHERE id = $1
RETURNING key_generation, previous_key_until

-- name: REVOKE_KEY
-- Every key of the tenant stops at once, the previous one in its grace too, and with the new
-- generation every events token issued under them (server/stream_tokens.py accepts).
UPDATE tenants
   SET api_key_hash = NULL,
       previous_key_hash = NULL,
       previous_key_until = NULL,
       key_generation = key_generation + 1
 WHERE id = $1
RETURNING key_generation
