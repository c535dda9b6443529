-- Webhooks (docs/design.md, "Webhooks"): the outbox row written with the job's end
-- (jobstream/outbox.py), and the sender's claims and marks (worker/webhooks.py).
-- `$n::timestamptz` "now" parameters may be NULL, which means the database clock:
-- coalesce($n::timestamptz, statement_timestamp()) (jobstream/sql/__init__.py says why).

-- name: INSERT_WEBHOOK_DELIVERY
-- The outbox write, run in the transaction that ends the job, after the UPDATE that ended it (so
-- it reads the final row). A job without a webhook_url, or not in a terminal state, inserts
-- nothing. The payload is built from the ended row (schema.sql, job_webhook_payload).
INSERT INTO webhook_deliveries (job_id, event, url, payload, next_attempt_at)
SELECT id, 'job.' || status, webhook_url,
       job_webhook_payload(id, status, attempts, finished_at, result, error), finished_at
  FROM jobs
 WHERE id = $1
   AND webhook_url IS NOT NULL
   AND status IN ('succeeded', 'failed', 'cancelled', 'dead')

-- name: CLAIM_WEBHOOK_DELIVERIES
-- Claim due deliveries. The claim commits before any request is sent, so no transaction stays
-- open across the network: it counts the attempt and pushes next_attempt_at past the request's
-- deadline ($3 s), which keeps other workers off the row while it is in flight and retries it if
-- this worker dies mid-request (at-least-once delivery). The new attempts and next_attempt_at
-- are the claim's fence: every mark below names them, so a sender whose hold ran out (and whose
-- row another claim took) changes nothing.
WITH due AS (
    SELECT id
      FROM webhook_deliveries
     -- The partial index webhook_deliveries_due_idx serves exactly this predicate and order.
     WHERE status = 'pending'
       AND next_attempt_at <= coalesce($1::timestamptz, statement_timestamp())
     ORDER BY next_attempt_at
     LIMIT $2
     -- Workers claiming at once take different rows instead of queueing behind each other.
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1,
       next_attempt_at = coalesce($1::timestamptz, statement_timestamp())
                         + make_interval(secs => $3)
  FROM due, jobs j, tenants t
 WHERE d.id = due.id AND j.id = d.job_id AND t.id = j.tenant_id
RETURNING d.id, d.url, d.payload, d.attempts, d.next_attempt_at AS held_until, j.tenant_id,
          t.webhook_secret

-- name: ENSURE_WEBHOOK_SECRET
-- A tenant with no secret and no JOBSTREAM_WEBHOOK_SECRET gets one, once: coalesce keeps the
-- first writer's value when two workers race, and both sign with what RETURNING gives.
UPDATE tenants SET webhook_secret = coalesce(webhook_secret, $2) WHERE id = $1
RETURNING webhook_secret

-- name: MARK_WEBHOOK_DELIVERED
-- Fenced on the claim ($3 attempts, $4 its hold): no row when another claim has taken it since.
-- The attempt number alone tells claims apart (only a claim changes it); the hold also guards
-- against a row whose attempts were ever reset.
UPDATE webhook_deliveries
   SET status = 'delivered', last_status_code = $2, last_error = NULL
 WHERE id = $1 AND status = 'pending' AND attempts = $3 AND next_attempt_at = $4
RETURNING id

-- name: MARK_WEBHOOK_FAILED_TRY
-- A failed try: retry at $5 s from now, or give up ($4) as `failed`. Fenced on the claim as
-- above ($7, $8): a late sender's failure must not turn a delivered row back to pending.
UPDATE webhook_deliveries
   SET status = CASE WHEN $4 THEN 'failed' ELSE 'pending' END,
       next_attempt_at = coalesce($6::timestamptz, statement_timestamp())
                         + make_interval(secs => $5),
       last_status_code = $2, last_error = $3
 WHERE id = $1 AND status = 'pending' AND attempts = $7 AND next_attempt_at = $8
RETURNING id
