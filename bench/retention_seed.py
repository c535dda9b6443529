"""bench_retention's history, seeded in SQL, and the job every part of the benchmark queues."""

from __future__ import annotations

import time
from typing import Any

from jobstream import claims, creates, db, migrations
from jobstream.clock import DatabaseClock
from jobstream.jobspec import JobSpec
from jobstream.new_jobs import NewJob
from jobstream.types import DURATION_BUCKETS

PROVIDER = "simulated"
SPEC = JobSpec(prompt="x", provider=PROVIDER, max_tokens=8)
CLOCK = DatabaseClock()
HISTORY_DAYS = 8  # jobs ended over this many days; the retention is the default 7
SEED_JOBS = """
INSERT INTO jobs (id, tenant_id, request_hash, status, provider, payload, result, attempts,
                  max_attempts, last_seq, estimate_usd, charged_usd, run_after, created_at,
                  started_at, finished_at, updated_at)
SELECT gen_random_uuid(), 'default', 'seed', 'succeeded', $3,
       '{"prompt": "a seeded job", "max_tokens": 64, "simulate": {}}'::jsonb,
       jsonb_build_object('text', repeat('token ', $2 - 5),
                          'usage', '{"input_tokens": 3, "output_tokens": 15}'::jsonb),
       1, 3, $2, 0.0001, 0.00003, f - interval '30 seconds', f - interval '30 seconds',
       f - interval '25 seconds', f, f
  FROM (SELECT now() - make_interval(secs => $4::float8 * 86400 * (1 - i::float8 / $1)) AS f
          FROM generate_series(1, $1) AS i) AS t
"""
SEED_ATTEMPTS = """
INSERT INTO job_attempts (job_id, attempt, run_token, worker_id, started_at, finished_at, outcome,
                          provider, input_tokens, output_tokens, cost_usd)
SELECT id, 1, gen_random_uuid(), 'seed', started_at, finished_at, 'succeeded', provider, 3,
       last_seq - 5, 0.00003
  FROM jobs
"""
# Each job in its tenant's list, as INSERT_JOBS writes it: the janitor deletes these too.
SEED_LISTED = """
INSERT INTO tenant_jobs (tenant_id, created_at, job_id) SELECT tenant_id, created_at, id FROM jobs
"""
# In the order they were written: by the job's end, then seq.
SEED_EVENTS = """
INSERT INTO job_events (job_id, seq, attempt, type, data, created_at)
SELECT j.id, s, CASE WHEN s = 1 THEN 0 ELSE 1 END,
       CASE WHEN s IN (1, 3) THEN 'status' WHEN s = 2 THEN 'reset'
            WHEN s = j.last_seq - 1 THEN 'usage' WHEN s = j.last_seq THEN 'done'
            ELSE 'token' END,
       CASE WHEN s = 1 THEN '{"status": "queued"}'::jsonb
            WHEN s = 2 THEN '{"attempt": 1, "reason": "first attempt"}'::jsonb
            WHEN s = 3 THEN '{"status": "running"}'::jsonb
            WHEN s = j.last_seq - 1 THEN '{"input_tokens": 3, "output_tokens": 15}'::jsonb
            WHEN s = j.last_seq THEN jsonb_build_object('status', 'succeeded')
            ELSE '{"text": "token "}'::jsonb END,
       j.finished_at
  FROM (SELECT id, last_seq, finished_at FROM jobs ORDER BY finished_at) AS j,
       generate_series(1, j.last_seq) AS s
"""


def _histogram(seconds: str) -> str:
    """SQL: the cumulative counts of rows whose duration is `seconds`, as the writers count them
    (one per bound of DURATION_BUCKETS, jobstream/sql/metrics.sql)."""
    return (
        "ARRAY["
        + ", ".join(f"count(*) FILTER (WHERE {seconds} <= {b})" for b in DURATION_BUCKETS)
        + "]"
    )


# The counters as the writers would have left them, on the folded row.
SEED_TOTALS = f"""
INSERT INTO metric_totals (backend, provider, jobs_created, jobs_accepted, charged_usd,
                           attempts_started, succeeded, cost_usd, events_ended,
                           queue_wait_counts, queue_wait_s, run_counts, run_s)
SELECT 0, provider, count(*), count(*), sum(charged_usd), count(*), count(*), sum(charged_usd),
       sum(last_seq), {_histogram("5.0")}, 5.0 * count(*),
       {_histogram("25.0")}, 25.0 * count(*)
  FROM jobs
 WHERE status = 'succeeded'
 GROUP BY provider
"""


async def seed(url: str, n_jobs: int, per_job: int) -> float:
    """The history; returns the seconds it took."""
    started = time.monotonic()
    conn = await db.connect(url)
    try:
        await migrations.apply_schema(conn)
        await conn.execute("UPDATE tenants SET max_running = 100000")
        # Built once after the rows are in: 20 million random-order index inserts take far
        # longer than one sorted build.
        await conn.execute("ALTER TABLE job_events DROP CONSTRAINT job_events_pkey")
        await _step(conn, "jobs", SEED_JOBS, n_jobs, per_job, PROVIDER, HISTORY_DAYS)
        await _step(conn, "attempts", SEED_ATTEMPTS)
        await _step(conn, "listed", SEED_LISTED)
        await _step(conn, "events", SEED_EVENTS)
        await _step(conn, "events' key", "ALTER TABLE job_events ADD PRIMARY KEY (job_id, seq)")
        await _step(conn, "counters", SEED_TOTALS)
    finally:
        await conn.close()
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        for _ in range(2):
            await creates.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        await claims.claim_batch(
            pool, providers=[PROVIDER], worker_id="bench-idle", lease_s=86400, clock=CLOCK,
            max_jobs=50,
        )  # fmt: skip
        # Enough queued for every claim of bench_retention's latency repeats (3,600).
        for _ in range(3):
            await creates.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        await _step(pool, "vacuum analyze", "VACUUM ANALYZE")
    finally:
        await pool.close()
    return time.monotonic() - started


async def _step(conn: db.Queryable, what: str, sql: str, *args: Any) -> None:
    t0 = time.monotonic()
    await conn.execute(sql, *args)
    print(f"   seeded {what} in {time.monotonic() - t0:.1f} s", flush=True)
