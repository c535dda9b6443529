"""Every SQL statement jobstream runs, one named constant each.

Values are always bound parameters. `$now` parameters are `timestamptz` that may be NULL: NULL
means the database clock (`clock_timestamp()`), which production uses so that no two hosts'
clocks disagree about a lease; tests pass an injected time instead (jobstream/clock.py).
"""

from __future__ import annotations

# Channels, named only here: the statements below notify on them, the listeners listen on them.
# NOTIFY payloads carry only identifiers: the tables are the truth.
CHANNEL_EVENTS = "jobstream_events"  # payload "job_id:last_seq"
CHANNEL_JOBS = "jobstream_jobs"  # payload "provider": a job became runnable
CHANNEL_CANCEL = "jobstream_cancel"  # payload "job_id": a running job was asked to stop

NOW = "coalesce({}::timestamptz, clock_timestamp())"

# --- connections ---

# A liveness probe: readiness, and the LISTEN connection's check that it is still alive.
PING = "SELECT 1"

# db.apply_schema holds it for its transaction: one process at a time creates or alters tables.
LOCK_SCHEMA = "SELECT pg_advisory_xact_lock($1)"

# --- events ---

# Append events to a job's log. The UPDATE allocates the seq range under the job's row lock, so
# commit order equals seq order (DESIGN.md §4.3); the insert and the NOTIFY ride in the same
# statement. $2 (run_token) fences the write: NULL for writes by the API (no attempt involved),
# else the attempt's token, and then only while the job is active.
APPEND_EVENTS = f"""
WITH bumped AS (
    UPDATE jobs
       SET last_seq = last_seq + cardinality($3::text[]), updated_at = clock_timestamp()
     WHERE id = $1
       AND ($2::uuid IS NULL OR (run_token = $2 AND status IN ('running', 'cancelling')))
    RETURNING last_seq
), inserted AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT $1, bumped.last_seq - cardinality($3::text[]) + e.ord, $4, e.type, e.data
      FROM bumped, unnest($3::text[], $5::jsonb[]) WITH ORDINALITY AS e (type, data, ord)
    RETURNING seq
)
SELECT last_seq, pg_notify('{CHANNEL_EVENTS}', $1::text || ':' || last_seq) FROM bumped
"""

EVENTS_AFTER = """
SELECT seq, type, attempt, data, created_at
  FROM job_events
 WHERE job_id = $1 AND seq > $2
 ORDER BY seq
 LIMIT $3
"""

# What a stream needs to know before it starts: does the job exist, and is it finished?
JOB_PROGRESS = "SELECT status, last_seq FROM jobs WHERE id = $1 AND tenant_id = $2"

# The same for a reader holding only the job's signed events token (a browser's EventSource,
# which cannot send a key): the token names the job, so no tenant is known or needed.
JOB_PROGRESS_BY_TOKEN = "SELECT status, last_seq FROM jobs WHERE id = $1"

# Where the hub starts reading a job it begins to follow.
JOB_LAST_SEQ = "SELECT last_seq FROM jobs WHERE id = $1"

# The hub's view of the jobs it follows: a job whose last_seq moved past what the hub read has
# events a lost NOTIFY did not announce. One statement for every followed job.
JOBS_LAST_SEQ = "SELECT id, last_seq FROM jobs WHERE id = ANY($1::uuid[])"

# How much of an attempt's text is durably in the log: after a write whose commit reply was lost,
# the attempt reads this instead of guessing whether its chunk landed.
ATTEMPT_TEXT_LENGTH = """
SELECT coalesce(sum(length(data->>'text')), 0)
  FROM job_events
 WHERE job_id = $1 AND attempt = $2 AND type = 'token'
"""

# The snapshot: the text the current attempt has produced so far.
ATTEMPT_TEXT = """
SELECT coalesce(string_agg(data->>'text', '' ORDER BY seq), '')
  FROM job_events
 WHERE job_id = $1 AND attempt = $2 AND type = 'token'
"""

# --- jobs, as the API sees them ---

# ON CONFLICT DO NOTHING waits for a concurrent insert of the same key to commit, so twenty
# simultaneous duplicates make one row; the losers then read it with SELECT_JOB_BY_KEY.
INSERT_JOB = """
INSERT INTO jobs (id, tenant_id, idempotency_key, request_hash, provider, priority, payload,
                  metadata, max_attempts, webhook_url, estimate_usd, reserved_usd)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING *
"""

SELECT_JOB_BY_KEY = "SELECT * FROM jobs WHERE tenant_id = $1 AND idempotency_key = $2"

SELECT_JOB = "SELECT * FROM jobs WHERE id = $1 AND tenant_id = $2"

SELECT_JOB_FOR_UPDATE = "SELECT * FROM jobs WHERE id = $1 AND tenant_id = $2 FOR UPDATE"

SELECT_ATTEMPTS = """
SELECT attempt, worker_id, started_at, finished_at, outcome, error_class, error_detail, provider,
       model, input_tokens, output_tokens, cost_usd, cost_known, cancel_confirmed
  FROM job_attempts
 WHERE job_id = $1
 ORDER BY attempt
"""

# Keyset pagination, newest first; ($3, $4) is the last row of the previous page.
LIST_JOBS = """
SELECT *
  FROM jobs
 WHERE tenant_id = $1
   AND ($2::text IS NULL OR status = $2)
   AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::uuid))
 ORDER BY created_at DESC, id DESC
 LIMIT $5
"""

CANCEL_QUEUED = """
UPDATE jobs
   SET status = 'cancelled', cancel_requested_at = {now}, finished_at = {now},
       updated_at = {now}, run_token = NULL, lease_until = NULL,
       error = '{{"class": "cancelled", "message": "cancelled before it started"}}'
 WHERE id = $1 AND status = 'queued'
RETURNING *
""".format(now=NOW.format("$2"))

REQUEST_CANCEL_RUNNING = """
UPDATE jobs
   SET status = 'cancelling', cancel_requested_at = {now}, updated_at = {now}
 WHERE id = $1 AND status = 'running'
RETURNING *, pg_notify('{channel}', id::text)
""".format(now=NOW.format("$2"), channel=CHANNEL_CANCEL)

# An operator's second chance for a dead job: a fresh set of attempts, from now.
RETRY_DEAD = """
UPDATE jobs
   SET status = 'queued', run_after = {now}, uncounted_attempts = attempts, finished_at = NULL,
       error = NULL, run_token = NULL, lease_until = NULL, worker_id = NULL, updated_at = {now}
 WHERE id = $1 AND status = 'dead'
RETURNING *, pg_notify('{channel}', provider)
""".format(now=NOW.format("$2"), channel=CHANNEL_JOBS)

NOTIFY_RUNNABLE = f"SELECT pg_notify('{CHANNEL_JOBS}', $1::text)"

# --- the worker ---

# The first statement of a claim transaction for a worker that runs providers with a concurrency
# limit ($1, sorted): lock the provider_state row of each limited provider that has a runnable
# job, and return the providers locked. CLAIM_JOB, the next statement, may then claim for these
# providers and for no other limited one.
# - The row lock serialises claims per limited provider across every worker, until commit: no
#   other claim for the provider can commit between our count of its running attempts and our
#   own claim, so the limit holds exactly. (Each worker checks the shared count against its own
#   setting: workers configured differently cap the provider at the largest of their limits.)
# - A statement's snapshot is taken before it waits for a lock, so the count cannot live in this
#   statement: it is in CLAIM_JOB, whose snapshot (READ COMMITTED) is taken after this lock was
#   granted and so sees every claim committed before it.
# - Only providers with a runnable job are locked, so idle polls and claims for other providers
#   do not queue behind each other.
# - An upsert, so the row exists without a set-up step; DO UPDATE (not DO NOTHING) because only
#   it locks a row that already exists (the update leaves the row as it was). Rows are locked in
#   name order, so two claims never wait for each other in a cycle.
LOCK_PROVIDERS = """
INSERT INTO provider_state AS p (provider)
SELECT l.provider
  FROM unnest($1::text[]) AS l (provider)
 WHERE EXISTS (SELECT 1 FROM jobs j
                WHERE j.status = 'queued' AND j.provider = l.provider AND j.run_after <= {now})
 ORDER BY l.provider
ON CONFLICT (provider) DO UPDATE SET paused_until = p.paused_until
RETURNING provider
""".format(now=NOW.format("$2"))

# Claim the next runnable job, in one statement (after LOCK_PROVIDERS, in the same transaction,
# when the worker runs a provider with a limit):
# - only `queued` jobs whose backoff has passed (expired leases are reaped into `queued` first,
#   by REAP_EXPIRED, so that the lost attempt is recorded and max_attempts is honoured);
# - only providers this worker runs: those without a limit ($1), and those with one that
#   LOCK_PROVIDERS locked ($6, limits in $7) and that run fewer attempts than their limit
#   (`with_room`). Attempts are counted, not jobs: an attempt row is `running` from its claim
#   until its outcome is written, which is after its HTTP request has closed;
# - not providers paused after a 429;
# - a tenant at its running limit is skipped, and tenants with fewer running jobs go first, so
#   one tenant's burst cannot starve the others; within a tenant, priority then age;
# - FOR UPDATE SKIP LOCKED lets any number of workers claim at once without blocking each other;
# - the job gets a fresh run_token (the fence for every later write) and a lease, and the attempt
#   row is written in the same statement.
CLAIM_JOB = """
WITH busy AS (
    SELECT provider, count(*) AS n
      FROM job_attempts
     WHERE outcome = 'running' AND provider = ANY($6::text[])
     GROUP BY provider
), with_room AS (
    SELECT unnest($1::text[]) AS provider
    UNION ALL
    SELECT l.provider
      FROM unnest($6::text[], $7::int[]) AS l (provider, max_running)
      LEFT JOIN busy b ON b.provider = l.provider
     WHERE coalesce(b.n, 0) < l.max_running
), running AS (
    SELECT tenant_id, count(*) AS n
      FROM jobs
     WHERE status IN ('running', 'cancelling')
     GROUP BY tenant_id
), candidate AS (
    SELECT j.id, j.error AS previous_error
      FROM jobs j
      JOIN tenants t ON t.id = j.tenant_id
      LEFT JOIN running r ON r.tenant_id = j.tenant_id
      LEFT JOIN provider_state p ON p.provider = j.provider
     WHERE j.status = 'queued'
       AND j.run_after <= {now}
       AND j.provider IN (SELECT provider FROM with_room)
       AND (p.paused_until IS NULL OR p.paused_until <= {now})
       AND coalesce(r.n, 0) < t.max_running
       AND j.tenant_id <> ALL($8::text[])
     ORDER BY coalesce(r.n, 0), j.priority DESC, j.run_after, j.created_at
     LIMIT 1
       FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    UPDATE jobs
       SET status = 'running', attempts = jobs.attempts + 1, run_token = $2, worker_id = $3,
           lease_until = {now} + make_interval(secs => $4),
           started_at = coalesce(started_at, {now}),
           updated_at = {now}, error = NULL
      FROM candidate
     WHERE jobs.id = candidate.id
    -- The error is cleared above; the new attempt's `reset` event still names it as the reason.
    RETURNING jobs.*, candidate.previous_error
), attempt AS (
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, provider, model)
    SELECT id, attempts, run_token, worker_id, {now}, provider, payload->>'model' FROM claimed
)
SELECT * FROM claimed
""".format(now=NOW.format("$5"))

# The tenant's running limit, exactly: CLAIM_JOB's count comes from its snapshot, so two workers
# claiming for one tenant at once can both see room. After the claim, lock the tenant's row (the
# claims of that tenant queue here), then count in a new statement, whose snapshot follows the
# lock and so sees every claim committed before it. Over the limit: the claim is rolled back.
# FOR NO KEY UPDATE, never FOR UPDATE, on tenants: inserting a job takes FOR KEY SHARE on its
# tenant (the foreign key), which FOR UPDATE conflicts with; two creates (or a create and a claim)
# would each hold one and wait for the other. NO KEY UPDATE still serialises the lockers.
LOCK_TENANT = "SELECT id FROM tenants WHERE id = $1 FOR NO KEY UPDATE"

TENANT_RUNNING = """
SELECT count(*) <= (SELECT max_running FROM tenants WHERE id = $1) AS within_limit
  FROM jobs
 WHERE tenant_id = $1 AND status IN ('running', 'cancelling')
"""

# Renew the lease; also how the attempt learns of a cancel request when a NOTIFY was missed.
RENEW_LEASE = """
UPDATE jobs
   SET lease_until = {now} + make_interval(secs => $3)
 WHERE id = $1 AND run_token = $2 AND status IN ('running', 'cancelling')
RETURNING status, cancel_requested_at
""".format(now=NOW.format("$4"))

COMPLETE_JOB = """
UPDATE jobs
   SET status = 'succeeded', result = $3, finished_at = {now}, updated_at = {now},
       lease_until = NULL, error = NULL
 WHERE id = $1 AND run_token = $2 AND status = 'running'
RETURNING *
""".format(now=NOW.format("$4"))

# Back to the queue for another attempt. run_token is cleared so the old attempt is fenced out.
REQUEUE_JOB = """
UPDATE jobs
   SET status = 'queued', run_after = {now} + make_interval(secs => $3), error = $4,
       run_token = NULL, lease_until = NULL, worker_id = NULL, updated_at = {now},
       uncounted_attempts = uncounted_attempts + $6
 WHERE id = $1 AND run_token = $2 AND status = 'running'
RETURNING *, pg_notify('{channel}', provider)
""".format(now=NOW.format("$5"), channel=CHANNEL_JOBS)

# A terminal failure (`failed` or `dead`).
FAIL_JOB = """
UPDATE jobs
   SET status = $3, error = $4, finished_at = {now}, updated_at = {now}, lease_until = NULL
 WHERE id = $1 AND run_token = $2 AND status = 'running'
RETURNING *
""".format(now=NOW.format("$5"))

CONFIRM_CANCEL = """
UPDATE jobs
   SET status = 'cancelled', finished_at = {now}, updated_at = {now}, lease_until = NULL,
       error = '{{"class": "cancelled", "message": "cancelled while running"}}'
 WHERE id = $1 AND run_token = $2 AND status = 'cancelling'
RETURNING *
""".format(now=NOW.format("$3"))

FINISH_ATTEMPT = """
UPDATE job_attempts
   SET outcome = $3, finished_at = {now}, error_class = $4, error_detail = $5,
       input_tokens = $6, output_tokens = $7, cost_usd = $8, cost_known = $9,
       cancel_confirmed = $10
 WHERE job_id = $1 AND attempt = $2 AND outcome = 'running'
""".format(now=NOW.format("$11"))

# Leases that ran out: their worker died or lost the database. Locked one batch at a time.
SELECT_EXPIRED = """
SELECT *
  FROM jobs
 WHERE status IN ('running', 'cancelling') AND lease_until < {now}
 ORDER BY lease_until
 LIMIT $2
   FOR UPDATE SKIP LOCKED
""".format(now=NOW.format("$1"))

# Reaping, by the reaper that holds the row lock from SELECT_EXPIRED (so no fence is needed).
REAP_TO_QUEUE = """
UPDATE jobs
   SET status = 'queued', run_after = {now}, run_token = NULL, lease_until = NULL,
       worker_id = NULL, error = $2, updated_at = {now}
 WHERE id = $1
RETURNING *, pg_notify('{channel}', provider)
""".format(now=NOW.format("$3"), channel=CHANNEL_JOBS)

REAP_TO_TERMINAL = """
UPDATE jobs
   SET status = $2, error = $3, finished_at = {now}, updated_at = {now}, lease_until = NULL
 WHERE id = $1
RETURNING *
""".format(now=NOW.format("$4"))

MARK_ATTEMPT_LOST = """
UPDATE job_attempts
   SET outcome = 'lost', finished_at = {now}, error_class = 'lost',
       error_detail = 'lease expired: the worker stopped renewing it', cost_known = false
 WHERE job_id = $1 AND attempt = $2 AND outcome = 'running'
""".format(now=NOW.format("$3"))

# --- provider-wide state ---

# A 429 pauses the provider for every worker (CLAIM_JOB skips paused providers). GREATEST keeps
# the longest pause when several attempts are rate-limited at once. `paused_at` is when the
# current pause began, read after the row lock is granted (in SET, not VALUES): claims for a
# limited provider hold that lock, so every claim either committed before `paused_at` or sees
# the pause.
PAUSE_PROVIDER = """
INSERT INTO provider_state AS p (provider, paused_until, paused_at)
VALUES ($1, {now} + make_interval(secs => $2), {now})
ON CONFLICT (provider) DO UPDATE
   SET paused_until = GREATEST(p.paused_until, EXCLUDED.paused_until),
       paused_at = CASE WHEN p.paused_until > {now} THEN coalesce(p.paused_at, {now})
                        ELSE {now} END
RETURNING paused_until
""".format(now=NOW.format("$3"))

# --- metrics (derived from the tables, so every replica reports the same truth) ---

METRICS_JOBS_BY_STATUS = "SELECT status, count(*) AS n FROM jobs GROUP BY status"

METRICS_ATTEMPTS = """
SELECT provider, outcome, count(*) AS n, coalesce(sum(cost_usd), 0) AS cost,
       count(*) FILTER (WHERE NOT cost_known) AS cost_unknown,
       count(*) FILTER (WHERE attempt > 1) AS retries
  FROM job_attempts
 GROUP BY provider, outcome
"""

METRICS_ACCEPTED_COST = """
SELECT count(*) AS accepted,
       coalesce(sum(charged_usd), 0) AS charged,
       coalesce(sum((SELECT sum(a.cost_usd) FROM job_attempts a WHERE a.job_id = j.id)), 0)
         AS provider_cost
  FROM jobs j
 WHERE j.status = 'succeeded'
"""

METRICS_QUEUE = """
SELECT count(*) AS depth,
       coalesce(extract(epoch FROM clock_timestamp()
                - min(run_after) FILTER (WHERE run_after <= clock_timestamp())), 0)
         AS oldest_age_s
  FROM jobs
 WHERE status = 'queued'
"""

METRICS_EVENTS = "SELECT coalesce(sum(last_seq), 0) AS n FROM jobs"

# Seconds each provider stays paused after a 429 (0 once the pause is over).
METRICS_PROVIDER_PAUSES = """
SELECT provider,
       greatest(coalesce(extract(epoch FROM paused_until - clock_timestamp()), 0), 0)::float8
         AS remaining_s
  FROM provider_state
"""

# Cumulative histogram counts over the bucket bounds in $1 (seconds), plus count and sum, of the
# durations `{seconds}` selects (one column, `s`).
_HISTOGRAM = """
WITH d AS ({seconds})
SELECT array(SELECT (SELECT count(*) FROM d WHERE d.s <= b) FROM unnest($1::float8[]) AS b)
         AS buckets,
       (SELECT count(*) FROM d) AS n,
       (SELECT coalesce(sum(s), 0) FROM d) AS total
"""

METRICS_QUEUE_WAIT = _HISTOGRAM.format(
    seconds="SELECT extract(epoch FROM started_at - created_at)::float8 AS s"
    " FROM jobs WHERE started_at IS NOT NULL"
)

METRICS_RUN_DURATION = _HISTOGRAM.format(
    seconds="SELECT extract(epoch FROM finished_at - started_at)::float8 AS s"
    " FROM job_attempts WHERE finished_at IS NOT NULL"
)

# --- the tenant's create rate ---

# Locks the tenant's row (NO KEY UPDATE: see LOCK_TENANT) so that concurrent creates of one
# tenant count each other; then the window is counted in a fresh statement.
LOCK_TENANT_RATE = "SELECT create_rate_per_min FROM tenants WHERE id = $1 FOR NO KEY UPDATE"

# Jobs created in the last minute (this transaction's own insert included), and when the oldest
# of them leaves the window: what Retry-After tells the client.
TENANT_RECENT_CREATES = """
SELECT count(*) AS recent,
       coalesce(extract(epoch FROM min(created_at) + interval '1 minute' - clock_timestamp()), 0)
         AS frees_in_s
  FROM jobs
 WHERE tenant_id = $1 AND created_at > clock_timestamp() - interval '1 minute'
"""

# --- money: reserve at create, charge once on success, release on any other end ---

# The budget check and the reservation are one statement on the tenant's row, so concurrent
# creates cannot together reserve more than the budget.
RESERVE_BUDGET = """
UPDATE tenants
   SET reserved_usd = reserved_usd + $2
 WHERE id = $1 AND (budget_usd IS NULL OR budget_usd - spent_usd - reserved_usd >= $2)
RETURNING id
"""

SELECT_TENANT_BUDGET = "SELECT budget_usd, reserved_usd, spent_usd FROM tenants WHERE id = $1"

# Charge the accepted attempt's price and free what the job still held. The self-join reads the
# job's reservation as it was before this UPDATE zeroes it.
CHARGE_JOB = """
WITH job AS (
    UPDATE jobs j
       SET charged_usd = $2, reserved_usd = 0
      FROM jobs old
     WHERE j.id = $1 AND old.id = j.id AND j.charged_usd IS NULL
    RETURNING j.tenant_id, old.reserved_usd AS held
)
UPDATE tenants t
   SET reserved_usd = t.reserved_usd - job.held, spent_usd = t.spent_usd + $2
  FROM job
 WHERE t.id = job.tenant_id
"""

RELEASE_RESERVATION = """
WITH job AS (
    UPDATE jobs j
       SET reserved_usd = 0
      FROM jobs old
     WHERE j.id = $1 AND old.id = j.id AND j.reserved_usd > 0
    RETURNING j.tenant_id, old.reserved_usd AS held
)
UPDATE tenants t
   SET reserved_usd = t.reserved_usd - job.held
  FROM job
 WHERE t.id = job.tenant_id
"""

# An operator's retry of a dead job holds its estimate again (no budget check: an operator acts).
RESERVE_AGAIN = """
WITH job AS (
    UPDATE jobs SET reserved_usd = estimate_usd WHERE id = $1 AND reserved_usd = 0
    RETURNING tenant_id, estimate_usd
)
UPDATE tenants t SET reserved_usd = t.reserved_usd + job.estimate_usd FROM job
 WHERE t.id = job.tenant_id
"""

# --- webhooks (DESIGN.md §7) ---

# The outbox write, run in the transaction that ends the job, after the UPDATE that ended it (so
# it reads the final row). A job without a webhook_url, or not in a terminal state, inserts
# nothing. The payload is built here from the committed row, and its timestamp is the job's end,
# so a retried delivery sends the same bytes.
INSERT_WEBHOOK_DELIVERY = """
INSERT INTO webhook_deliveries (job_id, event, url, payload, next_attempt_at)
SELECT id, 'job.' || status, webhook_url,
       jsonb_build_object(
           'type', 'job.' || status,
           'timestamp', to_char(finished_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           'data', jsonb_build_object('id', id, 'status', status, 'attempts', attempts)
                   || CASE WHEN status = 'succeeded' THEN jsonb_build_object('result', result)
                           ELSE jsonb_build_object('error', error) END),
       finished_at
  FROM jobs
 WHERE id = $1
   AND webhook_url IS NOT NULL
   AND status IN ('succeeded', 'failed', 'cancelled', 'dead')
"""

# Claim due deliveries. The claim commits before any request is sent, so no transaction stays
# open across the network: it counts the attempt and pushes next_attempt_at past the request's
# timeout ($3 s), which keeps other workers off the row while it is in flight and retries it if
# this worker dies mid-request (at-least-once delivery).
CLAIM_WEBHOOK_DELIVERIES = """
WITH due AS (
    SELECT id
      FROM webhook_deliveries
     -- The partial index webhook_deliveries_due_idx serves exactly this predicate and order.
     WHERE status = 'pending' AND next_attempt_at <= {now}
     ORDER BY next_attempt_at
     LIMIT $2
     -- Workers claiming at once take different rows instead of queueing behind each other.
       FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET attempts = d.attempts + 1, next_attempt_at = {now} + make_interval(secs => $3)
  FROM due, jobs j, tenants t
 WHERE d.id = due.id AND j.id = d.job_id AND t.id = j.tenant_id
RETURNING d.id, d.url, d.payload, d.attempts, j.tenant_id, t.webhook_secret
""".format(now=NOW.format("$1"))

# A tenant with no secret and no JOBSTREAM_WEBHOOK_SECRET gets one, once: coalesce keeps the
# first writer's value when two workers race, and both sign with what RETURNING gives.
ENSURE_WEBHOOK_SECRET = """
UPDATE tenants SET webhook_secret = coalesce(webhook_secret, $2) WHERE id = $1
RETURNING webhook_secret
"""

MARK_WEBHOOK_DELIVERED = """
UPDATE webhook_deliveries
   SET status = 'delivered', last_status_code = $2, last_error = NULL
 WHERE id = $1
"""

# A failed try: retry at $5 s from now, or give up ($4) as `failed`.
MARK_WEBHOOK_FAILED_TRY = """
UPDATE webhook_deliveries
   SET status = CASE WHEN $4 THEN 'failed' ELSE 'pending' END,
       next_attempt_at = {now} + make_interval(secs => $5),
       last_status_code = $2, last_error = $3
 WHERE id = $1
""".format(now=NOW.format("$6"))

# --- tenants and their API keys (jobstream/tenants.py) ---

# The key's sha256 hex only: a database dump never yields a usable key. A NULL max_running
# takes schema.sql's default.
INSERT_TENANT = """
INSERT INTO tenants (id, name, api_key_hash, budget_usd, max_running)
VALUES ($1, $2, $3, $4, coalesce($5::integer, 16))
ON CONFLICT (id) DO NOTHING
RETURNING id
"""

TENANT_BY_KEY_HASH = "SELECT id FROM tenants WHERE api_key_hash = $1"
