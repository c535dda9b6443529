"""Every SQL statement jobstream runs, one named constant each.

Values are always bound parameters. `$now` parameters are `timestamptz` that may be NULL: NULL
means the database clock, which production uses so that no two hosts' clocks disagree about a
lease; tests pass an injected time instead (jobstream/clock.py). The database clock is
`statement_timestamp()`, which is stable within a statement: `run_after <= now` can then bound
an index scan. `clock_timestamp()` is volatile, which made every such test a filter applied to
every queued row.
"""

from __future__ import annotations

# Channels, named only here: the statements below notify on them, the listeners listen on them.
# NOTIFY payloads carry only identifiers: the tables are the truth.
CHANNEL_EVENTS = "jobstream_events"  # payload "job_id:last_seq"
CHANNEL_JOBS = "jobstream_jobs"  # payload "provider": a job became runnable
CHANNEL_CANCEL = "jobstream_cancel"  # payload "job_id": a running job was asked to stop

NOW = "coalesce({}::timestamptz, statement_timestamp())"

# The metrics' counters (schema.sql, metric_totals): a statement that changes what they count
# adds to them in one more CTE of the same statement, of the form
#   INSERT INTO metric_totals AS m (backend, provider, <its columns>)
#   SELECT pg_backend_pid(), provider, <its figures> FROM <its rows> GROUP BY provider
#   <add_to_totals(its columns)>
# The row is this backend's own, so the upsert never waits on another writer. Histograms are
# arrays of cumulative counts, one per bound of DURATION_BUCKETS, written out here as plain
# expressions: SQL functions doing the same cost the claim's counting twice as much.

# Seconds; LLM calls are long, so the duration histograms reach ten minutes.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


def histogram(seconds: str, where: str = "true") -> str:
    """SQL: an aggregate of the cumulative counts of `seconds` (over the rows where `where`) at
    or under each of DURATION_BUCKETS."""
    counts = (f"count(*) FILTER (WHERE {where} AND {seconds} <= {b})" for b in DURATION_BUCKETS)
    return "ARRAY[" + ", ".join(counts) + "]"


def _add_counts(column: str) -> str:
    summed = ", ".join(
        f"m.{column}[{i}] + EXCLUDED.{column}[{i}]" for i in range(1, len(DURATION_BUCKETS) + 1)
    )
    return (
        f"CASE WHEN EXCLUDED.{column} IS NULL THEN m.{column}"
        f" WHEN m.{column} IS NULL THEN EXCLUDED.{column} ELSE ARRAY[{summed}] END"
    )


def add_to_totals(*columns: str) -> str:
    """SQL: the ON CONFLICT clause that adds a counting CTE's `columns` to its row."""
    sets = (
        f"{c} = {_add_counts(c)}" if c.endswith("_counts") else f"{c} = m.{c} + EXCLUDED.{c}"
        for c in columns
    )
    return "ON CONFLICT (backend, provider) DO UPDATE SET " + ", ".join(sets)


# --- connections ---

# A liveness probe: readiness, and the LISTEN connection's check that it is still alive.
PING = "SELECT 1"

# migrations.apply_schema holds it for its transaction: one process at a time changes tables.
LOCK_SCHEMA = "SELECT pg_advisory_xact_lock($1)"

# Has jobstream touched this database? to_regclass neither locks nor fails on a missing table.
HAS_SCHEMA = "SELECT to_regclass('schema_version') IS NOT NULL"

SCHEMA_VERSION = "SELECT max(version) FROM schema_version"

RECORD_SCHEMA_VERSION = """
INSERT INTO schema_version (version) VALUES ($1) ON CONFLICT (version) DO NOTHING
"""

# --- events ---

# Append events to a job's log. The UPDATE allocates the seq range under the job's row lock, so
# commit order equals seq order (DESIGN.md §4.3); the insert and the NOTIFY ride in the same
# statement. $2 (run_token) fences the write: NULL for writes by the API (no attempt involved),
# else the attempt's token, and then only while the job is active.
# A `done` ends the log: its last_seq then counts as the job's events (metric_totals), and the
# scrape stops adding the job's live last_seq (it is no longer queued or running).
APPEND_EVENTS = f"""
WITH bumped AS (
    UPDATE jobs
       SET last_seq = last_seq + cardinality($3::text[]), updated_at = clock_timestamp()
     WHERE id = $1
       AND ($2::uuid IS NULL OR (run_token = $2 AND status IN ('running', 'cancelling')))
    RETURNING last_seq, provider
), inserted AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT $1, bumped.last_seq - cardinality($3::text[]) + e.ord, $4, e.type, e.data
      FROM bumped, unnest($3::text[], $5::jsonb[]) WITH ORDINALITY AS e (type, data, ord)
    RETURNING seq
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, events_ended)
    SELECT pg_backend_pid(), provider, last_seq FROM bumped WHERE 'done' = ANY($3::text[])
    {add_to_totals("events_ended")}
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

# EVENTS_AFTER for many jobs at once: the hub's one read per wake-up for every job it follows
# that has news ($1 job ids, $2 the seq each has been read up to, at most $3 events a job).
EVENTS_AFTER_MANY = """
SELECT c.job_id, e.seq, e.type, e.attempt, e.data, e.created_at
  FROM unnest($1::uuid[], $2::bigint[]) AS c(job_id, after)
 CROSS JOIN LATERAL (
       SELECT seq, type, attempt, data, created_at
         FROM job_events
        WHERE job_id = c.job_id AND seq > c.after
        ORDER BY seq
        LIMIT $3) AS e
 ORDER BY c.job_id, e.seq
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

# Append token chunks for many attempts at once (a worker's streams of one write tick, or one
# attempt alone), each at the offset it expects: the characters of its attempt's text it knows
# are in the log. Per attempt a compare-and-set: its chunks are inserted only if the log holds
# exactly that many characters of its text, and the offset moves to the new end. A write whose
# commit reply was lost may still commit later (a half-open connection delivers it after the
# writer has moved on); its offset is stale by then, so it lands nowhere instead of twice.
# Fenced per attempt on its run token: a fenced-out or refused attempt changes nothing and the
# others land. `held` (read from the statement's snapshot) tells a write refused for its offset
# (held, last_seq NULL) from a fenced one (not held): a job that moves on never comes back to
# the same run_token, so a snapshot that says "not held" is right.
# Per attempt: $1 job, $2 run token, $3 attempt, $4 expected offset, $5 offset after, $6 its
# number of chunks; per chunk, in order: $7 text, $8 its attempt's ordinal (from 1) in $1.
APPEND_TOKENS_MANY = f"""
WITH input AS (
    SELECT *
      FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::bigint[], $5::bigint[], $6::int[])
           WITH ORDINALITY AS i (job_id, run_token, attempt, at, upto, n, ord)
), bumped AS (
    UPDATE jobs j
       SET last_seq = j.last_seq + i.n, updated_at = statement_timestamp(),
           text_attempt = i.attempt, text_chars = i.upto
      FROM input i
     WHERE j.id = i.job_id AND j.run_token = i.run_token AND j.status IN ('running', 'cancelling')
       AND CASE WHEN j.text_attempt = i.attempt THEN j.text_chars ELSE 0 END = i.at
    RETURNING j.id, j.last_seq, i.attempt, i.n, i.ord,
              pg_notify('{CHANNEL_EVENTS}', j.id::text || ':' || j.last_seq)
), chunks AS (
    SELECT c.owner, c.chunk, row_number() OVER (PARTITION BY c.owner ORDER BY c.k) AS nth
      FROM unnest($7::text[], $8::bigint[]) WITH ORDINALITY AS c (chunk, owner, k)
), inserted AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT b.id, b.last_seq - b.n + c.nth, b.attempt, 'token', jsonb_build_object('text', c.chunk)
      FROM bumped b
      JOIN chunks c ON c.owner = b.ord
)
SELECT i.ord, b.last_seq,
       coalesce(j.run_token = i.run_token AND j.status IN ('running', 'cancelling'), false)
           AS held
  FROM input i
  LEFT JOIN jobs j ON j.id = i.job_id
  LEFT JOIN bumped b ON b.ord = i.ord
 ORDER BY i.ord
"""

# How much of an attempt's text is in the log (the offset APPEND_TOKENS_MANY compares), and whether
# the attempt still holds its job: after a write in doubt, the attempt reads this instead of
# guessing whether its chunk landed.
ATTEMPT_TEXT_WRITTEN = """
SELECT CASE WHEN text_attempt = $2 THEN text_chars ELSE 0 END AS chars,
       run_token = $3 AND status IN ('running', 'cancelling') AS held
  FROM jobs
 WHERE id = $1
"""

# The snapshot: the text the current attempt has produced so far.
ATTEMPT_TEXT = """
SELECT coalesce(string_agg(data->>'text', '' ORDER BY seq), '')
  FROM job_events
 WHERE job_id = $1 AND attempt = $2 AND type = 'token'
"""

# --- jobs, as the API sees them ---

# Create jobs, one or a batch, in one statement: the rows, their `queued` events and their
# reservations on the tenant's ledger (the workers' wake-up is NOTIFY_RUNNABLE, sent after).
# Arrays $1, $3..$13 hold one element per job, in request order. A tenant with a budget or a
# create rate needs its row locked first (TENANT_FOR_CREATE): with $15 true the statement
# inserts nothing for such a tenant and says so (`go` false), so that the caller takes the
# locked path; for every other tenant, creates take no lock but the key's.
# - ON CONFLICT DO NOTHING waits for a concurrent insert of the same key to commit, so twenty
#   simultaneous duplicates make one row; the losers are then read with SELECT_JOBS_BY_KEYS.
#   Two items of one batch with the same key make one row too.
# - run_after is when the job may start: `run_at`, else now plus `delay_s` (0 by default).
# - $16 is each job's retain_s (NULL: the deployment's JOBSTREAM_RETENTION_S).
INSERT_JOBS = """
WITH tenant AS (
    SELECT NOT $15::boolean OR (budget_usd IS NULL AND create_rate_per_min IS NULL) AS go
      FROM tenants
     WHERE id = $2
), inserted AS (
    INSERT INTO jobs (id, tenant_id, idempotency_key, request_hash, provider, priority, payload,
                      metadata, max_attempts, webhook_url, estimate_usd, reserved_usd, run_after,
                      last_seq, created_at, updated_at, retain_s)
    SELECT n.id, $2, n.key, n.hash, n.provider, n.priority, n.payload, n.metadata,
           n.max_attempts, n.webhook_url, n.estimate, n.estimate,
           coalesce(n.run_at, coalesce($14::timestamptz, statement_timestamp())
                              + make_interval(secs => coalesce(n.delay_s, 0))),
           1, coalesce($14::timestamptz, statement_timestamp()),
           coalesce($14::timestamptz, statement_timestamp()), n.retain_s
      FROM unnest($1::uuid[], $3::text[], $4::text[], $5::text[], $6::smallint[], $7::jsonb[],
                  $8::jsonb[], $9::int[], $10::text[], $11::numeric[], $12::timestamptz[],
                  $13::float8[], $16::int[])
             WITH ORDINALITY AS n (id, key, hash, provider, priority, payload, metadata,
                                   max_attempts, webhook_url, estimate, run_at, delay_s,
                                   retain_s, ord),
           tenant
     WHERE tenant.go
     ORDER BY n.ord
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING *
), logged AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, 1, 0, 'status', '{"status": "queued"}'::jsonb FROM inserted
), booked AS (
    -- Sorted by shard: two batches of one tenant lock its shards in the same order.
    INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd)
    SELECT $2, get_byte(uuid_send(id), 15) % 16, sum(reserved_usd)
      FROM inserted
     WHERE reserved_usd > 0
     GROUP BY 2
     ORDER BY 2
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_created)
    SELECT pg_backend_pid(), provider, count(*) FROM inserted GROUP BY provider
    {add_to_totals}
)
SELECT t.go, i.*
  FROM tenant t
  LEFT JOIN inserted i ON true
""".replace("{add_to_totals}", add_to_totals("jobs_created"))

# Workers wake for new runnable jobs of these providers. Sent on its own, never by the creating
# transaction: NOTIFY takes a cluster-wide lock from commit until the commit is durable, so a
# NOTIFY in every create serialised all creates (32 clients: about 700 commits/s with it, 1,500
# without). The server coalesces these (server/runnable_notices.py).
NOTIFY_RUNNABLE = f"SELECT pg_notify('{CHANNEL_JOBS}', p) FROM unnest($1::text[]) AS p"

# The jobs behind idempotency keys that an insert found taken.
SELECT_JOBS_BY_KEYS = """
SELECT * FROM jobs WHERE tenant_id = $1 AND idempotency_key = ANY($2::text[])
"""

# The locked path of a create, for a tenant with a budget or a create rate: its creates queue
# here, so that each one's budget and rate checks count every create committed before it.
# NO KEY UPDATE: see LOCK_CLAIMED_TENANTS.
TENANT_FOR_CREATE = """
SELECT budget_usd, create_rate_per_min FROM tenants WHERE id = $1 FOR NO KEY UPDATE
"""

# What the tenant may still reserve: NULL for no budget.
TENANT_BUDGET_LEFT = """
SELECT t.budget_usd - coalesce(sum(l.reserved_usd + l.spent_usd), 0) AS left_usd
  FROM tenants t
  LEFT JOIN tenant_ledger l ON l.tenant_id = t.id
 WHERE t.id = $1
 GROUP BY t.budget_usd
"""

# Jobs created in the minute before now, and when the oldest of them leaves the window: what
# Retry-After tells the client. A range of jobs_tenant_created_idx, as long as the rate allows.
TENANT_RECENT_CREATES = """
SELECT count(*) AS recent,
       coalesce(extract(epoch FROM min(created_at) + interval '1 minute'
                               - coalesce($2::timestamptz, statement_timestamp())), 0)::float8
         AS frees_in_s
  FROM jobs
 WHERE tenant_id = $1
   AND created_at > coalesce($2::timestamptz, statement_timestamp()) - interval '1 minute'
"""

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

# An operator's second chance for a dead job ($1): a new job ($2) that asks for the same work,
# queued from now with a fresh set of attempts, its own log (opened by a `queued` status naming
# `retry_of`) and its own reservation of the same estimate on its own ledger shard. The dead
# job stays dead, its log ends with its one `done`; it only gains `retried_as`. Run under the
# dead job's row lock (jobs.retry_dead): one retry per job. No idempotency key: the create's key
# still names the dead job, which now links to this one.
RETRY_DEAD = """
WITH old AS (
    SELECT * FROM jobs WHERE id = $1 AND status = 'dead' AND retried_as IS NULL
), created AS (
    INSERT INTO jobs (id, tenant_id, request_hash, provider, priority, payload, metadata,
                      max_attempts, webhook_url, estimate_usd, reserved_usd, run_after, last_seq,
                      created_at, updated_at, retry_of, retain_s)
    SELECT $2, tenant_id, request_hash, provider, priority, payload, metadata, max_attempts,
           webhook_url, estimate_usd, estimate_usd, {now}, 1, {now}, {now}, id, retain_s
      FROM old
    RETURNING *
), linked AS (
    UPDATE jobs SET retried_as = created.id, updated_at = {now}
      FROM created
     WHERE jobs.id = created.retry_of
), logged AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, 1, 0, 'status', jsonb_build_object('status', 'queued', 'retry_of', retry_of)
      FROM created
), booked AS (
    INSERT INTO tenant_ledger AS l (tenant_id, shard, reserved_usd)
    SELECT tenant_id, get_byte(uuid_send(id), 15) % 16, reserved_usd
      FROM created
     WHERE reserved_usd > 0
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd + EXCLUDED.reserved_usd
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_created)
    SELECT pg_backend_pid(), provider, 1 FROM created
    {add}
)
SELECT *, pg_notify('{channel}', provider) FROM created
""".format(now=NOW.format("$3"), channel=CHANNEL_JOBS, add=add_to_totals("jobs_created"))

# --- the worker ---

# CLAIM_JOBS' `counted` CTE: the attempts it started, the retries among them, and the first
# attempts' waits since their job's creation.
_CLAIMS_COUNTED = f"""
    INSERT INTO metric_totals AS m (backend, provider, attempts_started, retries,
                                    queue_wait_counts, queue_wait_s)
    SELECT pg_backend_pid(), provider, count(*), count(*) FILTER (WHERE attempts > 1),
           {histogram("waited_s", "attempts = 1")},
           coalesce(sum(waited_s) FILTER (WHERE attempts = 1), 0)
      FROM claimed
     GROUP BY provider
    {add_to_totals("attempts_started", "retries", "queue_wait_counts", "queue_wait_s")}"""

# The first statement of a claim transaction for a worker that runs providers with a concurrency
# limit ($1, sorted): lock the provider_state row of each limited provider that has a runnable
# job, and return the providers locked. CLAIM_JOBS, the next statement, may then claim for these
# providers and for no other limited one.
# - The row lock serialises claims per limited provider across every worker, until commit: no
#   other claim for the provider can commit between our count of its running attempts and our
#   own claim, so the limit holds exactly. (Each worker checks the shared count against its own
#   setting: workers configured differently cap the provider at the largest of their limits.)
# - A statement's snapshot is taken before it waits for a lock, so the count cannot live in this
#   statement: it is in CLAIM_JOBS, whose snapshot (READ COMMITTED) is taken after this lock was
#   granted and so sees every claim committed before it.
# - Only providers with a runnable job are locked, so idle polls and claims for other providers
#   do not queue behind each other. The EXISTS is one probe of jobs_queued_provider_idx.
# - An upsert, so the row exists without a set-up step; DO UPDATE (not DO NOTHING) because only
#   it locks a row that already exists (the update leaves the row as it was). Rows are locked in
#   name order, so two claims never wait for each other in a cycle.
LOCK_PROVIDERS = """
INSERT INTO provider_state AS p (provider)
SELECT l.provider
  FROM unnest($1::text[]) AS l (provider)
 WHERE EXISTS (SELECT 1 FROM jobs j
                WHERE j.status = 'queued' AND j.provider = l.provider
                  AND j.run_after <= coalesce($2::timestamptz, statement_timestamp()))
 ORDER BY l.provider
ON CONFLICT (provider) DO UPDATE SET paused_until = p.paused_until
RETURNING provider
"""

# Claim up to $8 runnable jobs in one statement (after LOCK_PROVIDERS, in the same transaction,
# when the worker runs a provider with a limit). Its cost does not grow with the backlog: every
# read below is an index probe or a range of at most $8 index entries.
# Parameters: $1 providers without a limit, $2 worker id, $3 lease seconds, $4 now (NULL: the
# database clock), $5 limited providers LOCK_PROVIDERS locked and $6 their limits, $7 tenants to
# skip (found full by an earlier try), $8 how many jobs at most.
# - `queues`: the distinct (tenant, provider, priority) of queued jobs, found by skipping through
#   jobs_runnable_idx one queue at a time (a loose index scan: one probe per queue, never a read
#   of the jobs inside). Its cost grows with the number of queues, not of jobs.
# - `with_room`: providers this worker runs that may start more attempts. A limited provider's
#   running attempts are counted here, after LOCK_PROVIDERS (see there). Attempts are counted,
#   not jobs: an attempt row is `running` from its claim until its outcome is written, which is
#   after its HTTP request has closed.
# - `tenant_room`: a tenant at its running limit is skipped. Its count comes from this
#   statement's snapshot: two claims at once can both see room, so attempts.claim re-counts
#   after locking the tenant's row (TENANTS_OVER_LIMIT) and rolls back an overrun.
# - `open`: queues with a runnable head (`run_after <= now`: backoff and delayed jobs wait), of
#   a provider with room that no 429 has paused. `tenant_turn` ranks a tenant's queues by
#   priority, so that one tenant's many queues do not crowd out another's one.
# - Tenants take turns: each tenant's best queue before anyone's second, then the tenant with
#   fewer running jobs, then the one served longest ago (`last_claimed_at`), then the oldest.
#   At most $8 + 4 queues take part: the 4 spare ones fill the batch when the first ones' heads
#   are all locked by other claims in flight (SKIP LOCKED passes over them). Each offers what the
#   batch could hold if every other queue gave one job (at least one): the batch fills while rows
#   locked and not taken stay few.
# - `candidates`: from each chosen queue, its oldest runnable jobs, FOR UPDATE SKIP LOCKED so
#   that any number of workers claim at once without waiting for each other.
# - `chosen`: interleave tenants (a tenant's first job, then every tenant's second...), cap each
#   tenant at its room and each provider at its room, and keep $8.
# - `claimed`: a fresh run_token (the fence for every later write) and a lease for each; the
#   attempt row, and the `reset` and `status` events that open the attempt's log, are written
#   by the same statement, which allocates their seqs (last_seq + 2) under the row lock the
#   UPDATE holds. One NOTIFY per job tells its followers.
# - `counted`: the metrics' attempts started, retries and queue waits (_CLAIMS_COUNTED).
CLAIM_JOBS = """
WITH RECURSIVE queues AS (
    (SELECT tenant_id, provider, priority
       FROM jobs
      WHERE status = 'queued'
      ORDER BY tenant_id, provider, priority
      LIMIT 1)
    UNION ALL
    SELECT next.tenant_id, next.provider, next.priority
      FROM queues q
     CROSS JOIN LATERAL (
           SELECT tenant_id, provider, priority
             FROM jobs
            WHERE status = 'queued'
              AND (tenant_id, provider, priority) > (q.tenant_id, q.provider, q.priority)
            ORDER BY tenant_id, provider, priority
            LIMIT 1) next
), busy AS (
    SELECT provider, count(*) AS n
      FROM job_attempts
     WHERE outcome = 'running' AND provider = ANY($5::text[])
     GROUP BY provider
), with_room AS (
    SELECT u.provider, $8::int AS room
      FROM unnest($1::text[]) AS u (provider)
    UNION ALL
    SELECT l.provider, l.max_running - coalesce(b.n, 0)::int
      FROM unnest($5::text[], $6::int[]) AS l (provider, max_running)
      LEFT JOIN busy b ON b.provider = l.provider
), tenant_room AS (
    SELECT t.id AS tenant_id, t.max_running - r.n AS room, r.n AS running, t.last_claimed_at
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT count(*)::int AS n
             FROM jobs
            WHERE tenant_id = t.id AND status IN ('running', 'cancelling')) r
     WHERE t.id IN (SELECT tenant_id FROM queues)
       AND t.id <> ALL($7::text[])
), open AS (
    SELECT q.tenant_id, q.provider, q.priority, tr.room, tr.running, tr.last_claimed_at,
           w.room AS provider_room, head.run_after AS head_after,
           row_number() OVER (PARTITION BY q.tenant_id
                              ORDER BY q.priority DESC, head.run_after) AS tenant_turn
      FROM queues q
      JOIN tenant_room tr ON tr.tenant_id = q.tenant_id
      JOIN with_room w ON w.provider = q.provider
      LEFT JOIN provider_state p ON p.provider = q.provider
     CROSS JOIN LATERAL (
           SELECT j.run_after
             FROM jobs j
            WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
              AND j.provider = q.provider AND j.priority = q.priority
              AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
            ORDER BY j.run_after, j.created_at
            LIMIT 1) head
     WHERE tr.room > 0 AND w.room > 0
       AND (p.paused_until IS NULL
            OR p.paused_until <= coalesce($4::timestamptz, statement_timestamp()))
), chosen_queues AS (
    SELECT o.*, count(*) OVER () AS n_queues
      FROM (SELECT *
              FROM open
             ORDER BY tenant_turn, running, last_claimed_at NULLS FIRST, head_after
             LIMIT $8 + 4) o
), candidates AS (
    SELECT c.id, c.previous_error, c.run_after, q.tenant_id, q.provider, q.priority, q.room,
           q.running, q.last_claimed_at, q.provider_room
      FROM chosen_queues q
     CROSS JOIN LATERAL (
           SELECT j.id, j.error AS previous_error, j.run_after, j.created_at
             FROM jobs j
            WHERE j.status = 'queued' AND j.tenant_id = q.tenant_id
              AND j.provider = q.provider AND j.priority = q.priority
              AND j.run_after <= coalesce($4::timestamptz, statement_timestamp())
            ORDER BY j.run_after, j.created_at
            LIMIT least(q.room, q.provider_room, greatest(1, $8 - q.n_queues + 1))
              FOR UPDATE SKIP LOCKED) c
), ranked AS (
    SELECT c.*, row_number() OVER (PARTITION BY c.tenant_id
                                   ORDER BY c.priority DESC, c.run_after) AS turn
      FROM candidates c
), chosen AS (
    SELECT r.id, r.previous_error
      FROM (SELECT r.*,
                   row_number() OVER (PARTITION BY r.provider
                                      ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST,
                                               r.priority DESC, r.run_after) AS provider_turn
              FROM ranked r
             WHERE r.turn <= r.room) r
     WHERE r.provider_turn <= r.provider_room
     ORDER BY r.turn, r.running, r.last_claimed_at NULLS FIRST, r.priority DESC, r.run_after
     LIMIT $8
), claimed AS (
    UPDATE jobs j
       SET status = 'running', attempts = j.attempts + 1, run_token = gen_random_uuid(),
           worker_id = $2,
           lease_until = coalesce($4::timestamptz, statement_timestamp())
                         + make_interval(secs => $3),
           started_at = coalesce(j.started_at, $4::timestamptz, statement_timestamp()),
           updated_at = coalesce($4::timestamptz, statement_timestamp()),
           -- Cleared here; the new attempt's `reset` event still names it as the reason.
           error = NULL,
           last_seq = j.last_seq + 2
      FROM chosen c
     WHERE j.id = c.id
    RETURNING j.id, j.tenant_id, j.attempts, j.uncounted_attempts, j.max_attempts, j.run_token,
              j.provider, j.payload, j.last_seq, j.worker_id, c.previous_error,
              extract(epoch FROM j.started_at - j.created_at)::float8 AS waited_s
), attempt AS (
    INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, provider, model)
    SELECT id, attempts, run_token, worker_id, coalesce($4::timestamptz, statement_timestamp()),
           provider, payload->>'model'
      FROM claimed
), opened AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, last_seq - 1, attempts, 'reset',
           jsonb_build_object(
               'attempt', attempts,
               'reason', CASE WHEN attempts = 1 THEN 'first attempt'
                              ELSE 'retry after ' || coalesce(previous_error->>'class',
                                                              'an interrupted attempt')
                         END)
      FROM claimed
    UNION ALL
    SELECT id, last_seq, attempts, 'status', '{"status": "running"}'::jsonb FROM claimed
), counted AS ({counted}
)
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       pg_notify('{channel}', id::text || ':' || last_seq)
  FROM claimed
""".replace("{channel}", CHANNEL_EVENTS).replace("{counted}", _CLAIMS_COUNTED)

# A tenant's running limit, exactly: CLAIM_JOBS counts from its snapshot, so two workers
# claiming for one tenant at once can both see room. After the claim, lock the rows of the
# tenants claimed for, in id order (so two claims never wait on each other in a cycle), then
# count in a new statement, whose snapshot follows the locks and so sees every claim committed
# before it. Over the limit: the claim is rolled back. The lock also records the turn.
# FOR NO KEY UPDATE, never FOR UPDATE, on tenants: inserting a job takes FOR KEY SHARE on its
# tenant (the foreign key), which FOR UPDATE conflicts with; two creates (or a create and a claim)
# would each hold one and wait for the other. NO KEY UPDATE still serialises the lockers.
LOCK_CLAIMED_TENANTS = """
UPDATE tenants t
   SET last_claimed_at = coalesce($2::timestamptz, statement_timestamp())
  FROM (SELECT id FROM tenants WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE) l
 WHERE t.id = l.id
"""

TENANTS_OVER_LIMIT = """
SELECT t.id
  FROM tenants t
 WHERE t.id = ANY($1::text[])
   AND t.max_running < (SELECT count(*) FROM jobs j
                         WHERE j.tenant_id = t.id AND j.status IN ('running', 'cancelling'))
"""

# Renew the leases of every attempt a worker runs, in one statement per renewal tick. Fenced per
# attempt on its run token (in the locking subquery, which PostgreSQL re-checks on a row changed
# since the snapshot), so a fenced-out attempt learns it from its own row and the others are
# renewed. The rows are locked in id order and SKIP LOCKED: a row another transaction holds (this
# worker's own success batch, a cancel request) is left for the next tick instead of waited on,
# so a renewal can never close a lock cycle with another multi-row write. `mine` tells such a
# skipped attempt (still ours: try again soon) from a fenced one (the job moved on). An attempt
# is named by its run token, unique to it.
# $1 job ids, $2 their run tokens, $3 lease seconds, $4 now (NULL: the database's).
RENEW_LEASES = """
WITH mine AS (
    SELECT j.id, j.run_token
      FROM jobs j
      JOIN unnest($1::uuid[], $2::uuid[]) AS h (job_id, run_token)
        ON j.id = h.job_id AND j.run_token = h.run_token
     WHERE j.status IN ('running', 'cancelling')
), renewed AS (
    UPDATE jobs j
       SET lease_until = coalesce($4::timestamptz, statement_timestamp())
                         + make_interval(secs => $3)
      FROM (SELECT j.id
              FROM jobs j
              JOIN unnest($1::uuid[], $2::uuid[]) AS h (job_id, run_token)
                ON j.id = h.job_id AND j.run_token = h.run_token
             WHERE j.status IN ('running', 'cancelling')
             ORDER BY j.id
               FOR NO KEY UPDATE OF j SKIP LOCKED) l
     WHERE j.id = l.id
    RETURNING j.id, j.status, j.cancel_requested_at
)
SELECT m.run_token, r.status, r.cancel_requested_at
  FROM mine m
  LEFT JOIN renewed r ON r.id = m.id
"""

# SUCCEED_ATTEMPTS' `counted` CTE: jobs accepted, what they were charged, their attempts as
# succeeded (with cost and run time), and their logs' events, final now.
_SUCCESSES_COLUMNS = (
    "jobs_accepted", "charged_usd", "succeeded", "cost_usd", "cost_unknown", "events_ended",
    "run_counts", "run_s",
)  # fmt: skip
_SUCCESSES_COUNTED = f"""
    INSERT INTO metric_totals AS m (backend, provider, jobs_accepted, charged_usd, succeeded,
                                    cost_usd, cost_unknown, events_ended, run_counts, run_s)
    SELECT pg_backend_pid(), provider, count(*), coalesce(sum(cost_usd), 0), count(*),
           coalesce(sum(cost_usd), 0), count(*) FILTER (WHERE NOT cost_known), sum(last_seq),
           {histogram("run_s")}, sum(run_s)
      FROM closed
     GROUP BY provider
    {add_to_totals(*_SUCCESSES_COLUMNS)}"""

# Accept attempts' results, one or many (a worker's successes of one tick), in one statement and
# one commit: fenced on each run token, it ends each job, closes its attempt, appends its last
# events (the final token chunk if any, `usage`, `done`), charges the accepted price once and
# frees the reservation on the job's ledger shard, writes the webhook outbox row, and notifies
# followers. Every CTE acts only through `done`: a fenced-out attempt changes nothing, the others
# still land, and the rows returned name the jobs that were accepted. The events are built here
# from the result, not sent: `usage` is the result's, `done` carries the whole result. `counted`
# adds to the metrics' counters (_SUCCESSES_COUNTED).
# Parameters, one element per attempt: $1 job, $2 run token, $3 result ({text, usage}), $4
# attempt, $5 input tokens, $6 output tokens, $7 cost (the price charged), $8 cost known, $9 the
# last token chunk ('' for none); then $10 now.
SUCCEED_ATTEMPTS = """
WITH input AS (
    SELECT *, 2 + (i.last_chunk <> '')::int AS n_events
      FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::int[], $5::int[], $6::int[],
                  $7::numeric[], $8::boolean[], $9::text[])
             AS i (job_id, run_token, result, attempt, input_tokens, output_tokens, cost,
                   cost_known, last_chunk)
), done AS (
    UPDATE jobs j
       SET status = 'succeeded', result = i.result,
           finished_at = coalesce($10::timestamptz, statement_timestamp()),
           updated_at = coalesce($10::timestamptz, statement_timestamp()),
           lease_until = NULL, error = NULL, charged_usd = i.cost, reserved_usd = 0,
           last_seq = j.last_seq + i.n_events
      FROM input i, jobs old
     WHERE j.id = i.job_id AND j.run_token = i.run_token AND j.status = 'running'
       AND old.id = j.id
    RETURNING j.id, j.tenant_id, j.status, j.attempts, j.finished_at, j.result, j.error,
              j.webhook_url, j.last_seq, i.attempt, i.input_tokens, i.output_tokens, i.cost,
              i.cost_known, i.last_chunk, old.reserved_usd AS held,
              get_byte(uuid_send(j.id), 15) % 16 AS shard
), closed AS (
    UPDATE job_attempts a
       SET outcome = 'succeeded', finished_at = done.finished_at,
           input_tokens = done.input_tokens, output_tokens = done.output_tokens,
           cost_usd = done.cost, cost_known = done.cost_known
      FROM done
     -- No `outcome = 'running'` test: the job ran under this attempt's token, so its attempt
     -- is running; and with it the planner read every running attempt once per success.
     WHERE a.job_id = done.id AND a.attempt = done.attempt
    RETURNING a.provider, a.cost_usd, a.cost_known, done.last_seq,
              extract(epoch FROM a.finished_at - a.started_at)::float8 AS run_s
), logged AS (
    INSERT INTO job_events (job_id, seq, attempt, type, data)
    SELECT id, last_seq - 2, attempt, 'token', jsonb_build_object('text', last_chunk)
      FROM done
     WHERE last_chunk <> ''
    UNION ALL
    SELECT id, last_seq - 1, attempt, 'usage', result->'usage' FROM done
    UNION ALL
    SELECT id, last_seq, attempt, 'done',
           jsonb_build_object('status', 'succeeded', 'result', result)
      FROM done
), money AS (
    SELECT tenant_id, shard, sum(held) AS held, sum(cost) AS cost
      FROM done
     GROUP BY tenant_id, shard
), charged AS (
    -- In (tenant, shard) order, as every writer of the ledger: no two wait on each other in a
    -- cycle. The row's reservation is never below what its jobs held (schema.sql).
    INSERT INTO tenant_ledger AS l (tenant_id, shard, spent_usd)
    SELECT tenant_id, shard, cost FROM money ORDER BY tenant_id, shard
    ON CONFLICT (tenant_id, shard) DO UPDATE
       SET reserved_usd = l.reserved_usd - (SELECT m.held FROM money m
                                             WHERE m.tenant_id = l.tenant_id
                                               AND m.shard = l.shard),
           spent_usd = l.spent_usd + EXCLUDED.spent_usd
), hooked AS (
    INSERT INTO webhook_deliveries (job_id, event, url, payload, next_attempt_at)
    SELECT id, 'job.' || status, webhook_url,
           job_webhook_payload(id, status, attempts, finished_at, result, error), finished_at
      FROM done
     WHERE webhook_url IS NOT NULL
), counted AS ({counted}
)
SELECT id, last_seq, pg_notify('{channel}', id::text || ':' || last_seq) FROM done
""".replace("{channel}", CHANNEL_EVENTS).replace("{counted}", _SUCCESSES_COUNTED)

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

# Counts, for the metrics (add_to_totals), the attempts that a CTE `ended` returns as
# (provider, outcome, cost_usd, cost_known, ran): the end of the statements that end attempts.
_ENDED_COLUMNS = (
    "succeeded", "failed", "unknown", "cancelled", "lost", "interrupted", "cost_usd",
    "cost_unknown", "run_counts", "run_s",
)  # fmt: skip
ATTEMPT_ENDED = f"""
INSERT INTO metric_totals AS m (backend, provider, succeeded, failed, unknown, cancelled, lost,
                                interrupted, cost_usd, cost_unknown, run_counts, run_s)
SELECT pg_backend_pid(), provider, count(*) FILTER (WHERE outcome = 'succeeded'),
       count(*) FILTER (WHERE outcome = 'failed'), count(*) FILTER (WHERE outcome = 'unknown'),
       count(*) FILTER (WHERE outcome = 'cancelled'), count(*) FILTER (WHERE outcome = 'lost'),
       count(*) FILTER (WHERE outcome = 'interrupted'), coalesce(sum(cost_usd), 0),
       count(*) FILTER (WHERE NOT cost_known), {histogram("extract(epoch FROM ran)")},
       sum(extract(epoch FROM ran)::float8)
  FROM ended
 GROUP BY provider
{add_to_totals(*_ENDED_COLUMNS)}"""

FINISH_ATTEMPT = """
WITH ended AS (
    UPDATE job_attempts
       SET outcome = $3, finished_at = {now}, error_class = $4, error_detail = $5,
           input_tokens = $6, output_tokens = $7, cost_usd = $8, cost_known = $9,
           cancel_confirmed = $10
     WHERE job_id = $1 AND attempt = $2 AND outcome = 'running'
    RETURNING provider, outcome, cost_usd, cost_known, finished_at - started_at AS ran
)
{counted}""".format(now=NOW.format("$11"), counted=ATTEMPT_ENDED)

# Leases that ran out: their worker died or lost the database. Locked one batch at a time.
# `ledger_shard`: the reaper settles its batch in (tenant, shard) order, the order every writer
# of tenant_ledger keeps, so that two reapers never wait on each other's shards in a cycle.
SELECT_EXPIRED = """
SELECT *, get_byte(uuid_send(id), 15) % 16 AS ledger_shard
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
WITH ended AS (
    UPDATE job_attempts
       SET outcome = 'lost', finished_at = {now}, error_class = 'lost',
           error_detail = 'lease expired: the worker stopped renewing it', cost_known = false
     WHERE job_id = $1 AND attempt = $2 AND outcome = 'running'
    RETURNING provider, outcome, cost_usd, cost_known, finished_at - started_at AS ran
)
{counted}""".format(now=NOW.format("$3"), counted=ATTEMPT_ENDED)

# --- provider-wide state ---

# A 429 pauses the provider for every worker (CLAIM_JOBS skips paused providers). GREATEST keeps
# the longest pause when several attempts are rate-limited at once. `paused_at` is when the
# current pause began, read after the row lock is granted (in SET, not VALUES): claims for a
# limited provider hold that lock, so every claim either committed before `paused_at` or sees
# the pause. Hence clock_timestamp() here, the time at the SET: statement_timestamp() is when
# this statement began, before it waited for the lock behind claims that start after it.
PAUSE_PROVIDER = """
INSERT INTO provider_state AS p (provider, paused_until, paused_at)
VALUES ($1, coalesce($3::timestamptz, clock_timestamp()) + make_interval(secs => $2),
        coalesce($3::timestamptz, clock_timestamp()))
ON CONFLICT (provider) DO UPDATE
   SET paused_until = GREATEST(p.paused_until, EXCLUDED.paused_until),
       paused_at = CASE WHEN p.paused_until > coalesce($3::timestamptz, clock_timestamp())
                        THEN coalesce(p.paused_at, $3::timestamptz, clock_timestamp())
                        ELSE coalesce($3::timestamptz, clock_timestamp()) END
RETURNING paused_until
"""

# --- metrics: counters the writers keep (add_to_totals), gauges read through indexes ---

# Every counter, summed over the writers' rows (a row per live backend and provider, and the
# folded totals of backend 0): a few hundred rows at most, whatever the history.
METRICS_TOTALS = """
SELECT provider,
       sum(jobs_created)::bigint AS jobs_created, sum(jobs_accepted)::bigint AS jobs_accepted,
       sum(charged_usd) AS charged_usd, sum(attempts_started)::bigint AS attempts_started,
       sum(retries)::bigint AS retries, sum(succeeded)::bigint AS succeeded,
       sum(failed)::bigint AS failed, sum(unknown)::bigint AS unknown,
       sum(cancelled)::bigint AS cancelled, sum(lost)::bigint AS lost,
       sum(interrupted)::bigint AS interrupted, sum(cost_usd) AS cost_usd,
       sum(cost_unknown)::bigint AS cost_unknown, sum(events_ended)::bigint AS events_ended,
       sum_counts(queue_wait_counts) AS queue_wait_counts, sum(queue_wait_s) AS queue_wait_s,
       sum_counts(run_counts) AS run_counts, sum(run_s) AS run_s,
       sum(jobs_compacted)::bigint AS jobs_compacted,
       sum(events_compacted)::bigint AS events_compacted,
       sum(jobs_deleted)::bigint AS jobs_deleted, sum(rows_deleted)::bigint AS rows_deleted
  FROM metric_totals
 GROUP BY provider
"""

# The jobs not finished, by status: how many, the events in their logs so far (what the counted
# events of finished logs lack), and how long the oldest runnable one has waited. One range of a
# partial index per status (jobs_queued_provider_idx, jobs_leased_idx): the cost follows the
# backlog and the running jobs, never the history.
METRICS_LIVE = """
SELECT 'queued' AS status, count(*) AS n, coalesce(sum(last_seq), 0)::bigint AS events,
       coalesce(extract(epoch FROM clock_timestamp()
                - min(run_after) FILTER (WHERE run_after <= clock_timestamp())), 0)::float8
         AS oldest_age_s
  FROM jobs
 WHERE status = 'queued'
UNION ALL
SELECT status, count(*), coalesce(sum(last_seq), 0)::bigint, 0
  FROM jobs
 WHERE status IN ('running', 'cancelling')
 GROUP BY status
"""

# Attempts under way, per provider (job_attempts_running_idx): what a provider limit caps.
METRICS_ATTEMPTS_RUNNING = """
SELECT provider, count(*) AS n FROM job_attempts WHERE outcome = 'running' GROUP BY provider
"""

# Seconds each provider stays paused after a 429 (0 once the pause is over).
METRICS_PROVIDER_PAUSES = """
SELECT provider,
       greatest(coalesce(extract(epoch FROM paused_until - clock_timestamp()), 0), 0)::float8
         AS remaining_s
  FROM provider_state
"""

# How far the janitor is behind: the oldest job past its expiry that is still there, and the
# oldest finished job not settled ($1 s after its end, JOBSTREAM_COMPACT_AFTER_S). The first
# entry of jobs_expiry_idx and of jobs_unsettled_idx.
METRICS_JANITOR_LAG = """
SELECT greatest(coalesce(extract(epoch FROM clock_timestamp()
                         - (SELECT min(expires_at) FROM jobs WHERE expires_at IS NOT NULL)),
                         0), 0)::float8 AS delete_s,
       greatest(coalesce(extract(epoch FROM clock_timestamp() - make_interval(secs => $1)
                         - (SELECT min(finished_at) FROM jobs
                             WHERE finished_at IS NOT NULL AND expires_at IS NULL)),
                         0), 0)::float8 AS settle_s
"""

# --- the janitor (worker/janitor.py): retention, compaction, the counters' upkeep ---

# One janitor at a time across every worker: a session lock held for a round of batches.
TRY_LOCK = "SELECT pg_try_advisory_lock($1)"
UNLOCK = "SELECT pg_advisory_unlock($1)"

# The janitor's commits do not wait for their WAL to reach the disk: a batch that a crash loses
# was settling or deleting jobs that stay as they were until the next round does it again, with
# its counters, and no reader can have relied on it. The claims' and appends' commits, which do
# wait, then share the disk with fewer flushes. (The pool's reset of the connection undoes it.)
JANITOR_SESSION = "SET synchronous_commit = off"

# Settle up to $3 finished jobs, oldest first, $2 s after they ended: compact each log and give
# the job its expiry. Parameters: $1 now, $2 JOBSTREAM_COMPACT_AFTER_S, $3 batch, $4
# JOBSTREAM_RETENTION_S (for a job that asked for no retain_s), $5 most characters per compacted
# event. Only finished jobs are touched, which no claim and no append writes, so nothing the hot
# path does waits on this statement's row locks.
# - `picked`: the jobs, locked; their retention is their retain_s or the default, capped by the
#   tenant's max_retain_s (least ignores a NULL cap).
# - `tokens`: their token events, in runs of consecutive seqs (a run breaks at any other event).
#   `kept`: the event belongs to the last attempt, whose text is the job's (the accepted one's,
#   or what a failed job showed); every earlier attempt was superseded by a `reset`.
# - `folded`: each run of the last attempt becomes parts of about $5 characters (a part is cut at
#   an event's boundary), each part one event at the seq of its last event, holding the part's
#   text and `from_seq`, the first seq it stands for; a superseded run becomes one empty event.
#   The seqs in between are deleted. A reader from before `from_seq` reads the same text; a
#   reader whose cursor is inside [from_seq, seq) gets `resync` (server/tail.py). A run already
#   one event of the last attempt stays as it is.
# - `settled`: expires_at, which takes the job out of jobs_unsettled_idx into jobs_expiry_idx.
SETTLE_JOBS = """
WITH picked AS (
    SELECT j.id, j.attempts, j.finished_at,
           least(coalesce(j.retain_s, $4), t.max_retain_s) AS retain_s
      FROM jobs j
      LEFT JOIN tenants t ON t.id = j.tenant_id
     WHERE j.finished_at IS NOT NULL AND j.expires_at IS NULL
       AND j.finished_at <= {now} - make_interval(secs => $2)
     ORDER BY j.finished_at
     LIMIT $3
       FOR NO KEY UPDATE OF j SKIP LOCKED
), tokens AS (
    SELECT e.job_id, e.seq, e.data->>'text' AS text, e.attempt = p.attempts AS kept,
           e.seq - row_number() OVER (PARTITION BY e.job_id ORDER BY e.seq) AS run
      FROM picked p
      JOIN job_events e ON e.job_id = p.id
     WHERE e.type = 'token'
), parts AS (
    SELECT job_id, seq, text, kept, run,
           CASE WHEN kept
                THEN (sum(length(text)) OVER (PARTITION BY job_id, run ORDER BY seq)
                      - length(text)) / $5
                ELSE 0 END AS part
      FROM tokens
), folded AS (
    SELECT job_id, min(seq) AS first_seq, max(seq) AS seq, bool_and(kept) AS kept,
           string_agg(text, '' ORDER BY seq) AS text
      FROM parts
     GROUP BY job_id, run, part
), changed AS (
    SELECT * FROM folded WHERE first_seq < seq OR NOT kept
), removed AS (
    DELETE FROM job_events e
     USING changed c
     WHERE e.job_id = c.job_id AND e.seq >= c.first_seq AND e.seq < c.seq
    RETURNING e.job_id
), rewritten AS (
    UPDATE job_events e
       SET data = CASE WHEN c.first_seq = c.seq THEN jsonb_build_object('text', '')
                       ELSE jsonb_build_object('text', CASE WHEN c.kept THEN c.text ELSE '' END,
                                               'from_seq', c.first_seq) END
      FROM changed c
     WHERE e.job_id = c.job_id AND e.seq = c.seq
), settled AS (
    UPDATE jobs j
       SET expires_at = p.finished_at + make_interval(secs => p.retain_s)
      FROM picked p
     WHERE j.id = p.id
    RETURNING j.id
), tally AS (
    SELECT (SELECT count(*) FROM settled) AS jobs, (SELECT count(*) FROM removed) AS removed
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_compacted, events_compacted)
    SELECT pg_backend_pid(), '', jobs, removed FROM tally WHERE jobs > 0
    {add}
)
SELECT jobs, removed FROM tally
""".format(now=NOW.format("$1"), add=add_to_totals("jobs_compacted", "events_compacted"))

# Delete up to $2 jobs whose expiry has passed, oldest first, with their events, attempts and
# webhook rows (a pending delivery goes too: retention outranks a receiver that never answers),
# leaving a tombstone ($3) so that the id answers 410 for a while. $1 now. The rows are locked
# first and skipped if taken (an API call on a finished job holds one for a moment).
DELETE_EXPIRED_JOBS = """
WITH doomed AS (
    SELECT id, tenant_id
      FROM jobs
     WHERE expires_at <= {now}
     ORDER BY expires_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), events AS (
    DELETE FROM job_events e USING doomed d WHERE e.job_id = d.id RETURNING 1
), attempts AS (
    DELETE FROM job_attempts a USING doomed d WHERE a.job_id = d.id RETURNING 1
), hooks AS (
    DELETE FROM webhook_deliveries w USING doomed d WHERE w.job_id = d.id RETURNING 1
), gone AS (
    DELETE FROM jobs j USING doomed d WHERE j.id = d.id RETURNING j.id, j.tenant_id
), buried AS (
    INSERT INTO job_tombstones (id, tenant_id, deleted_at)
    SELECT id, tenant_id, {now} FROM gone WHERE $3
    ON CONFLICT (id) DO NOTHING
), tally AS (
    SELECT (SELECT count(*) FROM gone) AS jobs,
           (SELECT count(*) FROM gone) + (SELECT count(*) FROM events)
           + (SELECT count(*) FROM attempts) + (SELECT count(*) FROM hooks) AS removed
), counted AS (
    INSERT INTO metric_totals AS m (backend, provider, jobs_deleted, rows_deleted)
    SELECT pg_backend_pid(), '', jobs, removed FROM tally WHERE jobs > 0
    {add_to_totals}
)
SELECT jobs, removed FROM tally
""".format(now=NOW.format("$1"), add_to_totals=add_to_totals("jobs_deleted", "rows_deleted"))

# Tombstones older than $2 s go, $3 at a time ($1 now).
PRUNE_TOMBSTONES = """
DELETE FROM job_tombstones
 WHERE id IN (SELECT id
                FROM job_tombstones
               WHERE deleted_at < {now} - make_interval(secs => $2)
               ORDER BY deleted_at
               LIMIT $3)
""".format(now=NOW.format("$1"))

# Is a deleted job's id remembered? Asked only when a job is not found: 410 rather than 404.
# Another tenant's tombstone is not this caller's business ($2 NULL: the job's signed token).
TOMBSTONE = """
SELECT deleted_at FROM job_tombstones WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)
"""

# Every column of metric_totals that is a counter.
TOTALS_COLUMNS = (
    "jobs_created", "jobs_accepted", "charged_usd", "attempts_started", "retries", "succeeded",
    "failed", "unknown", "cancelled", "lost", "interrupted", "cost_usd", "cost_unknown",
    "events_ended", "queue_wait_counts", "queue_wait_s", "run_counts", "run_s", "jobs_compacted",
    "events_compacted", "jobs_deleted", "rows_deleted",
)  # fmt: skip

# The counters of backends that are gone move to backend 0, so that the table keeps a row per
# live backend. A backend that reused a pid meanwhile may be writing its row: the DELETE waits
# for its commit and folds what it wrote, and its next write makes a new row.
FOLD_METRIC_TOTALS = """
WITH gone AS (
    DELETE FROM metric_totals t
     WHERE t.backend <> 0
       AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = t.backend)
    RETURNING t.*
)
INSERT INTO metric_totals AS m (
    backend, provider, jobs_created, jobs_accepted, charged_usd, attempts_started, retries,
    succeeded, failed, unknown, cancelled, lost, interrupted, cost_usd, cost_unknown,
    events_ended, queue_wait_counts, queue_wait_s, run_counts, run_s, jobs_compacted,
    events_compacted, jobs_deleted, rows_deleted)
SELECT 0, provider, sum(jobs_created), sum(jobs_accepted), sum(charged_usd),
       sum(attempts_started), sum(retries), sum(succeeded), sum(failed), sum(unknown),
       sum(cancelled), sum(lost), sum(interrupted), sum(cost_usd), sum(cost_unknown),
       sum(events_ended), sum_counts(queue_wait_counts), sum(queue_wait_s),
       sum_counts(run_counts), sum(run_s), sum(jobs_compacted), sum(events_compacted),
       sum(jobs_deleted), sum(rows_deleted)
  FROM gone
 GROUP BY provider
""" + add_to_totals(*TOTALS_COLUMNS)

# --- money: reserve at create (INSERT_JOBS), charge once on success, release on any other end ---

# A job books on tenant_ledger's shard get_byte(uuid_send(id), 15) % 16 (a v4 uuid's last byte
# is random): its reservation, charge and release meet on one row, so no shard goes negative,
# and jobs of one tenant finishing at once mostly write different rows.

# Charge the accepted attempt's price and free what the job still held. The self-join reads the
# job's reservation as it was before this UPDATE zeroes it.
CHARGE_JOB = """
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
"""

RELEASE_RESERVATION = """
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
"""

# --- webhooks (DESIGN.md §7) ---

# The outbox write, run in the transaction that ends the job, after the UPDATE that ended it (so
# it reads the final row). A job without a webhook_url, or not in a terminal state, inserts
# nothing. The payload is built from the ended row (schema.sql, job_webhook_payload).
INSERT_WEBHOOK_DELIVERY = """
INSERT INTO webhook_deliveries (job_id, event, url, payload, next_attempt_at)
SELECT id, 'job.' || status, webhook_url,
       job_webhook_payload(id, status, attempts, finished_at, result, error), finished_at
  FROM jobs
 WHERE id = $1
   AND webhook_url IS NOT NULL
   AND status IN ('succeeded', 'failed', 'cancelled', 'dead')
"""

# Claim due deliveries. The claim commits before any request is sent, so no transaction stays
# open across the network: it counts the attempt and pushes next_attempt_at past the request's
# deadline ($3 s), which keeps other workers off the row while it is in flight and retries it if
# this worker dies mid-request (at-least-once delivery). The new attempts and next_attempt_at
# are the claim's fence: every mark below names them, so a sender whose hold ran out (and whose
# row another claim took) changes nothing.
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
RETURNING d.id, d.url, d.payload, d.attempts, d.next_attempt_at AS held_until, j.tenant_id,
          t.webhook_secret
""".format(now=NOW.format("$1"))

# A tenant with no secret and no JOBSTREAM_WEBHOOK_SECRET gets one, once: coalesce keeps the
# first writer's value when two workers race, and both sign with what RETURNING gives.
ENSURE_WEBHOOK_SECRET = """
UPDATE tenants SET webhook_secret = coalesce(webhook_secret, $2) WHERE id = $1
RETURNING webhook_secret
"""

# Fenced on the claim ($3 attempts, $4 its hold): no row when another claim has taken it since.
# The attempt number alone tells claims apart (only a claim changes it); the hold also guards
# against a row whose attempts were ever reset.
MARK_WEBHOOK_DELIVERED = """
UPDATE webhook_deliveries
   SET status = 'delivered', last_status_code = $2, last_error = NULL
 WHERE id = $1 AND status = 'pending' AND attempts = $3 AND next_attempt_at = $4
RETURNING id
"""

# A failed try: retry at $5 s from now, or give up ($4) as `failed`. Fenced on the claim as
# above ($7, $8): a late sender's failure must not turn a delivered row back to pending.
MARK_WEBHOOK_FAILED_TRY = """
UPDATE webhook_deliveries
   SET status = CASE WHEN $4 THEN 'failed' ELSE 'pending' END,
       next_attempt_at = {now} + make_interval(secs => $5),
       last_status_code = $2, last_error = $3
 WHERE id = $1 AND status = 'pending' AND attempts = $7 AND next_attempt_at = $8
RETURNING id
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

# --- deleting a response (DELETE /v1/responses/{id}, jobs.delete_finished) ---

# A finished job goes with every row that belongs to it (events, attempts, webhook rows, as in
# DELETE_EXPIRED_JOBS); an unfinished one stays, as its worker still writes to it. The row is
# locked first, as every writer of a job locks it, so a job cannot finish between the check and
# the delete. Returns `finished` (true: deleted), or no row when the tenant has no such job.
DELETE_FINISHED_JOB = """
WITH job AS (
    SELECT id, status IN ('succeeded', 'failed', 'cancelled', 'dead') AS finished
      FROM jobs
     WHERE id = $1 AND tenant_id = $2
       FOR UPDATE
), doomed AS (
    SELECT id FROM job WHERE finished
), events AS (
    DELETE FROM job_events e USING doomed d WHERE e.job_id = d.id
), attempts AS (
    DELETE FROM job_attempts a USING doomed d WHERE a.job_id = d.id
), hooks AS (
    DELETE FROM webhook_deliveries w USING doomed d WHERE w.job_id = d.id
), gone AS (
    DELETE FROM jobs j USING doomed d WHERE j.id = d.id
)
SELECT finished FROM job
"""
