-- Tenants and their API keys (jobstream/tenants.py).

-- name: INSERT_TENANT
-- The key's sha256 hex only: a database dump never yields a usable key. A NULL max_running
-- takes schema.sql's default.
INSERT INTO tenants (id, name, api_key_hash, budget_usd, max_running)
VALUES ($1, $2, $3, $4, coalesce($5::integer, 16))
ON CONFLICT (id) DO NOTHING
RETURNING id

-- name: TENANT_BY_KEY_HASH
SELECT id FROM tenants WHERE api_key_hash = $1
