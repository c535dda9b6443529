"""The operator's dashboard at a million jobs (issue 37): /admin/api's reads, timed, explained.

    .venv/bin/python -m bench.bench_admin [--jobs 1000000] [--calls 200] [--repeats 3]

1. What the index on ended attempts (job_attempts_finished_idx) adds to SUCCEED_ATTEMPTS
   (bench/admin_index_cost.py).
2. The reads:

A history seeded in SQL, as bench_retention seeds its own (bench/retention_seed.py: its attempts,
tenant lists and counters), but with what the dashboard reads: version-7 ids (the ids jobstream
makes, whose order is their time), five tenants, three job names, 3 % failed, 1 % dead and 1 %
cancelled jobs with their errors, metadata and idempotency keys, over the last 8 days; a day of
per-minute series as the janitor would have folded it; 5,000 queued and 50 running jobs. No
events: no admin read but one job's view touches them. Then VACUUM ANALYZE.

On it, through a real server process, sequentially, `--calls` calls a read, `--repeats` times:
the overview, a jobs page filtered by status and job name (the bulk status, and the failed one),
a search by short id (the window's worst case: a job below every window but the first page's
matches none: the whole window read) and by metadata text. Each read's p50 and p99 per repeat,
then the p99s' min / median / max (target p99 <= 100 ms). Then EXPLAIN (ANALYZE, BUFFERS) of each
statement the reads run, to show the index each uses.
Durable embedded PostgreSQL (fsync on) unless DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx

from bench import queue_common as common
from bench.admin_index_cost import index_costs
from bench.postgres import durable_postgres
from bench.queue_common import Latency
from bench.retention_phases import server
from bench.retention_seed import CLOCK, PROVIDER, SEED_ATTEMPTS, SEED_TOTALS, SPEC
from jobstream import admin_jobs, claims, creates, db, migrations
from jobstream.new_jobs import NewJob
from jobstream.sql import queries

DATABASE = "admin_bench"
TARGET_P99_S = 0.100
TENANTS = ("default", "acme", "globex", "initech", "umbrella")
HISTORY_DAYS = 8

# A version-7 id made at `f`: the millisecond, the version, random bits, the variant.
_V7 = """(lpad(to_hex(floor(extract(epoch FROM f) * 1000)::bigint), 12, '0') || '7'
          || substr(md5(i::text || random()::text), 1, 3)
          || to_hex(8 + floor(random() * 4)::int)
          || substr(md5(random()::text || i::text), 1, 15))::uuid"""
SEED_JOBS = f"""
INSERT INTO jobs (id, tenant_id, idempotency_key, request_hash, status, provider, payload,
                  metadata, result, error, attempts, max_attempts, last_seq, estimate_usd,
                  charged_usd, run_after, created_at, started_at, finished_at, updated_at,
                  job_name)
SELECT {_V7},
       (ARRAY['default', 'acme', 'globex', 'initech', 'umbrella'])[1 + (i / 7) % 5],
       CASE WHEN i % 10 = 0 THEN 'key-' || i END, 'seed',
       CASE WHEN i % 100 < 3 THEN 'failed' WHEN i % 100 = 3 THEN 'dead'
            WHEN i % 100 = 4 THEN 'cancelled' ELSE 'succeeded' END,
       $2, '{{"prompt": "a seeded job", "max_tokens": 64, "simulate": {{}}}}'::jsonb,
       jsonb_build_object('order', 'po-' || i, 'team', 'team-' || i % 13),
       CASE WHEN i % 100 >= 5 THEN '{{"text": "seeded", "usage": {{}}}}'::jsonb END,
       CASE WHEN i % 100 < 4
            THEN jsonb_build_object(
                     'class', (ARRAY['transient', 'permanent', 'unknown'])[1 + i % 3],
                     'message', 'seeded failure ' || i % 7) END,
       1, 3, 8, 0.0001, CASE WHEN i % 100 >= 5 THEN 0.00003 END,
       f - interval '30 seconds', f - interval '30 seconds', f - interval '25 seconds', f, f,
       (ARRAY['llm', 'summarize', 'translate'])[1 + i % 3]
  FROM (SELECT i, now() - make_interval(secs => $3::float8 * 86400 * (1 - i::float8 / $1)) AS f
          FROM generate_series(1, $1) AS i) AS t
"""
SEED_LISTED = """
INSERT INTO tenant_jobs (tenant_id, created_at, job_id, idempotency_key)
SELECT tenant_id, created_at, id, idempotency_key FROM jobs
"""
SEED_TENANTS = """
INSERT INTO tenants (id, name, max_running) SELECT t, t, 100000 FROM unnest($1::text[]) AS t
ON CONFLICT (id) DO UPDATE SET max_running = 100000
"""
# A day of metric_minutes as the janitor writes them: counters that grow by 700 a minute.
SEED_MINUTES = """
INSERT INTO metric_minutes (minute, jobs_created, jobs_accepted, first_attempts,
                            queue_wait_counts, attempts_ended, run_counts)
SELECT m, 700 * k, 690 * k, 700 * k,
       ARRAY[100, 200, 300, 400, 500, 600, 650, 690, 700, 700, 700, 700, 700]::bigint[]
         , 700 * k,
       ARRAY[0, 0, 10, 50, 100, 300, 500, 650, 690, 700, 700, 700, 700]::bigint[]
  FROM generate_series(1, 1441) AS k,
       LATERAL (SELECT date_trunc('minute', now()) - make_interval(mins => 1441 - k) AS m) AS x
"""


async def seed(url: str, n_jobs: int) -> None:
    conn = await db.connect(url)
    try:
        await migrations.apply_schema(conn)
        await conn.execute(SEED_TENANTS, list(TENANTS))
        for what, sql, args in [
            ("jobs", SEED_JOBS, (n_jobs, PROVIDER, HISTORY_DAYS)),
            ("attempts", SEED_ATTEMPTS, ()),
            ("listed", SEED_LISTED, ()),
            ("counters", SEED_TOTALS, ()),
            ("metric minutes", SEED_MINUTES, ()),
        ]:
            t0 = time.monotonic()
            await conn.execute(sql, *args)
            print(f"   seeded {what} in {time.monotonic() - t0:.1f} s", flush=True)
        t0 = time.monotonic()
        # The day of spend the janitor would have folded, a minute at a time.
        minute = await conn.fetchval(queries.CURRENT_MINUTE, None)
        await conn.execute(queries.FOLD_ATTEMPT_MINUTES, minute - timedelta(days=1), minute)
        print(f"   folded a day of attempt_minutes in {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        await conn.close()
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        for _ in range(5):
            await creates.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        await claims.claim_batch(
            pool, providers=[PROVIDER], worker_id="bench-idle", lease_s=86400, clock=CLOCK,
            max_jobs=50,
        )  # fmt: skip
        t0 = time.monotonic()
        await pool.execute("VACUUM ANALYZE")
        print(f"   vacuum analyze in {time.monotonic() - t0:.1f} s", flush=True)
    finally:
        await pool.close()


async def timed(call: Callable[[], Awaitable[httpx.Response]], n: int) -> Latency:
    await call()  # the server's pool and plans warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        response = await call()
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200, response.text
    return Latency.of(times)


async def deep_job(url: str) -> tuple[str, str]:
    """A job far below the newest window (its short id and its metadata's order number)."""
    conn = await db.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT id, metadata->>'order' AS po FROM jobs ORDER BY id OFFSET 1000 LIMIT 1"
        )
    finally:
        await conn.close()
    assert row is not None
    return str(row["id"])[-8:], row["po"]


def reads(short: str, order: str) -> dict[str, str]:
    return {
        "overview": "/admin/api/overview",
        "jobs: status=succeeded & job=summarize": "/admin/api/jobs?status=succeeded&job=summarize",
        "jobs: status=dead & job=translate": "/admin/api/jobs?status=dead&job=translate",
        "jobs: q=<short id>, first page": f"/admin/api/jobs?q={short}",
        "jobs: q=<metadata text>, first page": f"/admin/api/jobs?q={order}",
    }


async def explain(url: str, short: str) -> None:
    """Each statement the reads run, with the plan PostgreSQL chose and what it read."""
    conn = await db.connect(url)
    top = uuid.UUID(int=(1 << 128) - 1)
    bottom = uuid.UUID(int=0)
    floor = await conn.fetchval(queries.ADMIN_WINDOW_FLOOR, top, bottom, admin_jobs.WINDOW)
    minute = await conn.fetchval(queries.CURRENT_MINUTE, None)
    statements: list[tuple[str, str, tuple[Any, ...]]] = [
        ("ADMIN_COUNTS", queries.ADMIN_COUNTS, (None,)),
        ("ADMIN_PROVIDERS", queries.ADMIN_PROVIDERS, ()),
        ("SERIES_MINUTES", queries.SERIES_MINUTES, (minute - timedelta(minutes=60), minute)),
        ("SERIES_FAILED", queries.SERIES_FAILED, (minute - timedelta(minutes=59),)),
        ("SERIES_SPEND", queries.SERIES_SPEND, (minute - timedelta(days=1),
                                                minute - timedelta(minutes=60))),
        ("ADMIN_WINDOW_FLOOR", queries.ADMIN_WINDOW_FLOOR, (top, bottom, admin_jobs.WINDOW)),
        ("ADMIN_JOBS_PAGE (succeeded, summarize)", queries.ADMIN_JOBS_PAGE,
         (top, floor, ["succeeded"], "summarize", None, None, 51, None, None)),
        ("ADMIN_JOBS_PAGE (q = a short id)", queries.ADMIN_JOBS_PAGE,
         (top, floor, None, None, None, short, 51, None, None)),
        ("ADMIN_FAILED_PAGE (dead, translate)", queries.ADMIN_FAILED_PAGE,
         (top, bottom, ["dead"], "translate", None, 51, None, None)),
        ("ADMIN_DEAD", queries.ADMIN_DEAD, (10_000,)),
        ("ADMIN_WORKERS", queries.ADMIN_WORKERS, (20.0, None)),
        ("ADMIN_RUNNING_ATTEMPTS", queries.ADMIN_RUNNING_ATTEMPTS, ()),
    ]  # fmt: skip
    try:
        for name, sql, args in statements:
            plan = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", *args)
            print(f"\n   -- {name}")
            for row in plan:
                print(f"   {row[0]}")
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> None:
    with durable_postgres("jobstream-bench-admin-") as admin_url:
        await index_costs(admin_url)
        url = await common.recreate_database(admin_url, DATABASE)
        print(f"\n2. A history of {args.jobs:,} jobs", flush=True)
        t0 = time.monotonic()
        await seed(url, args.jobs)
        print(f"   seeded in {time.monotonic() - t0:.0f} s", flush=True)
        short, order = await deep_job(url)
        p99s: dict[str, list[float]] = {}
        async with server(url) as client:
            for repeat in range(args.repeats):
                print(f"\nRepeat {repeat + 1}: {args.calls} sequential calls each", flush=True)
                for name, path in reads(short, order).items():
                    latency = await timed(functools.partial(client.get, path), args.calls)
                    p99s.setdefault(name, []).append(latency.p99)
                    print(f"   {name:<40} {latency}", flush=True)
        print(f"\np99 over {args.repeats} repeats, min / median / max (target <= 100 ms):")
        for name, values in p99s.items():
            ms = [v * 1000 for v in values]
            verdict = "ok" if max(values) <= TARGET_P99_S else "OVER"
            print(
                f"   {name:<40} {min(ms):7.2f} / {statistics.median(ms):7.2f} / {max(ms):7.2f} ms"
                f"  {verdict}"
            )
        print("\nEXPLAIN (ANALYZE, BUFFERS) of each statement:")
        await explain(url, short)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
