"""Retention, compaction and metrics against a long history (issue 10's figures).

    .venv/bin/python -m bench.bench_retention [--jobs 1000000] [--events-per-job 20]

1. What the metric counters add to the hot statements: each of INSERT_JOBS, CLAIM_JOBS and
   SUCCEED_ATTEMPTS (batches of 1 and of many) run under EXPLAIN ANALYZE, rolled back, as written
   and with its `counted` CTE cut out, interleaved; medians of the execution time, and the
   counting node's own time. (APPEND_TOKENS_MANY and RENEW_LEASES count nothing.)
2. A history seeded in SQL: `--jobs` finished jobs (succeeded, ended over the last 8 days, one
   attempt each) with `--events-per-job` events each (queued, reset, running, the tokens, usage,
   done), nothing compacted yet (as right after the upgrade to schema version 4), plus 2,000
   queued and 50 running jobs; then VACUUM ANALYZE, as autovacuum would have. On it:
   - `GET /metrics` through a real server process, sequentially: p50 / p99 (target p99 <= 50 ms),
     with the janitor idle and while it works;
   - claim latency (claims.claim_batch of one job) and token-append latency (one chunk,
     token_appends.append_tokens), the janitor idle and the janitor working through the backlog,
     sixteen phases of 75 cycles, alternately idle and working (target: within 1.2x);
   - the janitor's rates: jobs settled (compacted) and deleted per second, rows per second, and
     its batches' durations (each batch is one transaction).
Durable embedded PostgreSQL (fsync on) unless DATABASE_URL is set. The full size takes about
15 minutes on a 2-core machine, most of it the seeding.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import asyncpg
import httpx

from bench import queue_common as common
from bench.postgres import durable_postgres
from bench.queue_common import Latency
from jobstream import attempts, claims, db, jobs, migrations, retention, token_appends
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.embedded_pg import free_port
from jobstream.jobs import NewJob
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from jobstream.sql import queries
from jobstream.types import DURATION_BUCKETS
from jobstream.usage import Usage
from worker import janitor as janitors

DATABASE = "retention_bench"
COUNTERS_DATABASE = "retention_bench_counters"
PROVIDER = "simulated"
SPEC = JobSpec(prompt="x", provider=PROVIDER, max_tokens=8)
CLOCK = DatabaseClock()
REPS = 300  # EXPLAIN ANALYZE runs per statement and variant
PHASES = 16  # latency phases, alternately without and with the janitor working
PHASE_CALLS = 75  # claim + append cycles per latency phase
SCRAPES = 300
HISTORY_DAYS = 8  # jobs ended over this many days; the retention is the default 7


# --- 1. what counting costs the hot statements ---

_COUNTED = re.compile(r"\), counted AS \(.*?\n\)\n(SELECT)", re.S)


def uncounted(sql: str) -> str:
    """The statement without its `counted` CTE: what it cost before the counters."""
    stripped, n = _COUNTED.subn(r")\n\1", sql)
    assert n == 1, "no counted CTE found"
    return stripped


@dataclass
class Explained:
    with_counter: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)
    counting: list[float] = field(default_factory=list)  # the counting node's own time


def _counting_ms(plan: dict[str, Any]) -> float:
    """Inclusive time of the ModifyTable node that writes metric_totals."""
    if plan.get("Node Type") == "ModifyTable" and plan.get("Relation Name") == "metric_totals":
        return float(plan["Actual Total Time"]) * float(plan.get("Actual Loops", 1))
    return float(sum(_counting_ms(child) for child in plan.get("Plans", [])))


async def _explain(conn: db.Conn, sql: str, args: list[Any]) -> tuple[float, float]:
    """(execution ms, counting ms) of one run, rolled back."""
    tr = conn.transaction()
    await tr.start()
    try:
        # EXPLAIN's json, decoded by the pool's codec (jobstream.db.init_connection).
        explained = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
    finally:
        await tr.rollback()
    doc = explained[0]
    return float(doc["Execution Time"]), _counting_ms(doc["Plan"])


async def _measure_statement(
    conn: db.Conn, sql: str, args: Callable[[], Awaitable[list[Any]]]
) -> Explained:
    out = Explained()
    bare = uncounted(sql)
    for _ in range(REPS):
        given = await args()
        total, counting = await _explain(conn, sql, given)
        out.with_counter.append(total)
        out.counting.append(counting)
        out.without.append((await _explain(conn, bare, given))[0])
    return out


def _insert_args(n: int) -> Callable[[], Awaitable[list[Any]]]:
    async def args() -> list[Any]:
        items = [NewJob(SPEC, f"k-{uuid.uuid4()}") for _ in range(n)]
        ids = [uuid.uuid4() for _ in items]
        columns = jobs._columns(ids, "default", items)
        return [*columns, None, True, [None] * n]

    return args


def _claim_args(n: int) -> Callable[[], Awaitable[list[Any]]]:
    async def args() -> list[Any]:
        return [[PROVIDER], "bench", 30.0, None, [], [], [], n]

    return args


def _succeed_args(helds: list[Claimed]) -> Callable[[], Awaitable[list[Any]]]:
    usage = Usage(input_tokens=3, output_tokens=5, cost_usd=Decimal("0.00001"))

    async def args() -> list[Any]:
        return [
            [h.job_id for h in helds],
            [h.run_token for h in helds],
            [{"text": "0 1 2 3 4 ", "usage": usage.to_json()} for _ in helds],
            [h.attempt for h in helds],
            [3] * len(helds),
            [5] * len(helds),
            [usage.cost_usd] * len(helds),
            [True] * len(helds),
            ["4 "] * len(helds),
            None,
        ]

    return args


async def counter_costs(admin_url: str) -> list[tuple[str, Explained]]:
    url = await common.recreate_database(admin_url, COUNTERS_DATABASE)
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            await migrations.apply_schema(conn)
            await conn.execute("UPDATE tenants SET max_running = 100000")
        for _ in range(5):
            await jobs.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        running = await claims.claim_batch(
            pool, providers=[PROVIDER], worker_id="bench", lease_s=600, clock=CLOCK, max_jobs=16
        )
        await pool.execute("VACUUM ANALYZE")
        results: list[tuple[str, Explained]] = []
        async with pool.acquire() as conn:
            for name, sql, args in (
                ("INSERT_JOBS, 1 job", queries.INSERT_JOBS, _insert_args(1)),
                ("INSERT_JOBS, 100 jobs", queries.INSERT_JOBS, _insert_args(100)),
                ("CLAIM_JOBS, 1 job", queries.CLAIM_JOBS, _claim_args(1)),
                ("CLAIM_JOBS, 16 jobs", queries.CLAIM_JOBS, _claim_args(16)),
                ("SUCCEED_ATTEMPTS, 1 job", queries.SUCCEED_ATTEMPTS, _succeed_args(running[:1])),
                ("SUCCEED_ATTEMPTS, 16 jobs", queries.SUCCEED_ATTEMPTS, _succeed_args(running)),
            ):
                results.append((name, await _measure_statement(conn, sql, args)))
        return results
    finally:
        await pool.close()
        await common.drop_database(admin_url, COUNTERS_DATABASE)


def print_counter_costs(results: list[tuple[str, Explained]]) -> None:
    print(f"\n1. The counters' cost in the hot statements (EXPLAIN ANALYZE, median of {REPS})")
    header = f"{'statement':<28}{'with (ms)':>11}{'without (ms)':>14}{'added':>16}"
    print(f"   {header}{'counting node':>15}")
    for name, e in results:
        w, wo = statistics.median(e.with_counter), statistics.median(e.without)
        node = statistics.median(e.counting)
        added = f"{w - wo:+.3f} ({(w - wo) / wo:+.0%})"
        print(f"   {name:<28}{w:>11.3f}{wo:>14.3f}{added:>16}{node:>12.3f} ms")


# --- 2. a long history ---

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
        await _step(conn, "events", SEED_EVENTS)
        await _step(conn, "events' key", "ALTER TABLE job_events ADD PRIMARY KEY (job_id, seq)")
        await _step(conn, "counters", SEED_TOTALS)
    finally:
        await conn.close()
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        for _ in range(2):
            await jobs.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        await claims.claim_batch(
            pool, providers=[PROVIDER], worker_id="bench-idle", lease_s=86400, clock=CLOCK,
            max_jobs=50,
        )  # fmt: skip
        await jobs.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        await _step(pool, "vacuum analyze", "VACUUM ANALYZE")
    finally:
        await pool.close()
    return time.monotonic() - started


async def _step(conn: db.Queryable, what: str, sql: str, *args: Any) -> None:
    t0 = time.monotonic()
    await conn.execute(sql, *args)
    print(f"   seeded {what} in {time.monotonic() - t0:.1f} s", flush=True)


@asynccontextmanager
async def server(url: str) -> AsyncIterator[httpx.AsyncClient]:
    port = free_port()
    env = {
        "DATABASE_URL": url,
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_LOG_LEVEL": "warning",
        "JOBSTREAM_DB_POOL_MAX": "4",
    }
    process = await common.spawn("server", env=env)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(0.1)
            yield client
    finally:
        await common.stop_all([process])


async def scrapes(client: httpx.AsyncClient, n: int = SCRAPES) -> Latency:
    await client.get("/metrics")  # the server's pool and plans warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        response = await client.get("/metrics")
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200
    return Latency.of(times)


@dataclass
class JanitorStats:
    """The janitor's batches that found work: (seconds, jobs, rows) each."""

    settles: list[tuple[float, int, int]] = field(default_factory=list)
    deletes: list[tuple[float, int, int]] = field(default_factory=list)


async def janitor_loop(pool: asyncpg.Pool, settings: Settings, stats: JanitorStats) -> None:
    """worker/janitor.py's round, batch by batch, timed; until cancelled."""
    async with pool.acquire() as conn:
        await conn.execute(queries.JANITOR_SESSION)
        while True:
            t0 = time.monotonic()
            batch = await retention.settle(
                conn, CLOCK, compact_after_s=settings.compact_after_s,
                retention_s=settings.retention_s, limit=settings.janitor_batch,
            )  # fmt: skip
            if batch.jobs:
                stats.settles.append((time.monotonic() - t0, batch.jobs, batch.rows))
            await janitors.pace(time.monotonic() - t0, settings.janitor_duty)
            t0 = time.monotonic()
            gone = await retention.delete_expired(
                conn, CLOCK, limit=settings.janitor_batch, tombstones=True
            )
            if gone.jobs:
                stats.deletes.append((time.monotonic() - t0, gone.jobs, gone.rows))
            await janitors.pace(time.monotonic() - t0, settings.janitor_duty)
            if batch.jobs == 0 and gone.jobs == 0:
                await asyncio.sleep(settings.janitor_interval_s)


@dataclass
class Phase:
    claims: list[float] = field(default_factory=list)
    appends: list[float] = field(default_factory=list)


async def hot_path(pool: asyncpg.Pool, phase: Phase, calls: int) -> None:
    """Claim one job, append three token chunks, accept it: the claim and appends timed."""
    usage = Usage(input_tokens=3, output_tokens=3, cost_usd=Decimal("0.00001"))
    for _ in range(calls):
        t0 = time.perf_counter()
        held = await claims.claim(
            pool, providers=[PROVIDER], worker_id="bench", lease_s=60, clock=CLOCK
        )
        phase.claims.append(time.perf_counter() - t0)
        assert held is not None, "the queue ran dry"
        at = 0
        for chunk in ("0 ", "1 ", "2 "):
            t0 = time.perf_counter()
            await token_appends.append_tokens(pool, held, [chunk], at=at)
            phase.appends.append(time.perf_counter() - t0)
            at += len(chunk)
        await attempts.accept(pool, Success(held, "0 1 2 ", usage), CLOCK)


async def history(admin_url: str, n_jobs: int, per_job: int, tuning: dict[str, Any]) -> None:
    url = await common.recreate_database(admin_url, DATABASE)
    print(f"\n2. A history of {n_jobs:,} finished jobs and {n_jobs * per_job:,} events", flush=True)
    seconds = await seed(url, n_jobs, per_job)
    rows = n_jobs * (per_job + 2)
    print(f"   seeded in {seconds:.0f} s ({rows / seconds:,.0f} rows/s)", flush=True)
    conn = await db.connect(url)
    size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
    await conn.close()
    print(f"   database size {size}")
    settings = Settings(database_url=url, compact_after_s=0, **tuning)
    print(f"   janitor: batches of {settings.janitor_batch} jobs, duty {settings.janitor_duty}")
    pool = await db.create_pool(url, min_size=2, max_size=6)
    janitor_pool = await db.create_pool(url, min_size=1, max_size=2)
    stats = JanitorStats()
    try:
        async with server(url) as client:
            idle_scrape = await scrapes(client)
            print(f"   /metrics, janitor idle:    {idle_scrape}", flush=True)
            janitor = asyncio.create_task(janitor_loop(janitor_pool, settings, stats))
            try:
                busy_scrape = await scrapes(client)
            finally:
                janitor.cancel()
                await asyncio.gather(janitor, return_exceptions=True)
            print(f"   /metrics, janitor working: {busy_scrape}", flush=True)
        phases: dict[str, Phase] = {"off": Phase(), "on": Phase()}
        for name in ["off", "on"] * (PHASES // 2):
            working = None
            if name == "on":
                working = asyncio.create_task(janitor_loop(janitor_pool, settings, stats))
            try:
                await hot_path(pool, phases[name], PHASE_CALLS)
            finally:
                if working is not None:
                    working.cancel()
                    await asyncio.gather(working, return_exceptions=True)
        off, on = phases["off"], phases["on"]
        for what, a, b in (("claim", off.claims, on.claims), ("append", off.appends, on.appends)):
            la, lb = Latency.of(a), Latency.of(b)
            print(f"   {what:<6} janitor idle:    {la}")
            print(
                f"   {what:<6} janitor working: {lb}   ratio p50 {lb.p50 / la.p50:.2f},"
                f" p99 {lb.p99 / la.p99:.2f}"
            )
        # The janitor alone, for its rates.
        alone = JanitorStats()
        janitor = asyncio.create_task(janitor_loop(janitor_pool, settings, alone))
        await asyncio.sleep(60)
        janitor.cancel()
        await asyncio.gather(janitor, return_exceptions=True)
        print_janitor("janitor alone (60 s)", alone, settings.janitor_duty)
        print_janitor("janitor beside the hot path and the scrapes", stats, settings.janitor_duty)
        left = await pool.fetchrow(
            "SELECT count(*) FILTER (WHERE expires_at IS NULL AND finished_at IS NOT NULL)"
            " AS unsettled, count(*) FILTER (WHERE expires_at < now()) AS expired FROM jobs"
        )
        assert left is not None
        print(f"   left: {left['unsettled']:,} jobs to settle, {left['expired']:,} expired")
    finally:
        await pool.close()
        await janitor_pool.close()
        if not os.environ.get("BENCH_KEEP"):
            await common.drop_database(admin_url, DATABASE)


def print_janitor(what: str, s: JanitorStats, duty: float) -> None:
    """Rates over the time its batches took (pauses and idle waits left out)."""
    print(f"   {what}:")
    for name, batches, unit in (
        ("settle", s.settles, "events folded"), ("delete", s.deletes, "rows deleted"),
    ):  # fmt: skip
        if not batches:
            print(f"     {name}: no batch found work")
            continue
        seconds = sum(b[0] for b in batches)
        durations = sorted(b[0] for b in batches)
        print(
            f"     {name}: {sum(b[1] for b in batches) / seconds:,.0f} jobs/s,"
            f" {sum(b[2] for b in batches) / seconds:,.0f} {unit}/s; a batch (one transaction)"
            f" p50 {statistics.median(durations) * 1000:.0f} ms,"
            f" max {durations[-1] * 1000:.0f} ms ({len(batches)} batches)"
        )
    if s.settles and s.deletes:
        per_job = sum(b[0] for b in s.settles) / sum(b[1] for b in s.settles) + sum(
            b[0] for b in s.deletes
        ) / sum(b[1] for b in s.deletes)
        print(
            f"     sustained, settling and deleting each job, at duty {duty}:"
            f" {duty / per_job:,.0f} jobs/s"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_retention")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--events-per-job", type=int, default=20)
    parser.add_argument("--batch", type=int, default=Settings().janitor_batch)
    parser.add_argument("--duty", type=float, default=Settings().janitor_duty)
    parser.add_argument("--skip-costs", action="store_true", help="skip part 1")
    args = parser.parse_args(sys.argv[1:] if argv is None and __name__ == "__main__" else argv)
    print(f"loadavg at start: {os.getloadavg()}")
    with durable_postgres("jobstream-retention-bench-") as admin_url:
        if not args.skip_costs:
            print_counter_costs(asyncio.run(counter_costs(admin_url)))
        tuning = {"janitor_batch": args.batch, "janitor_duty": args.duty}
        asyncio.run(history(admin_url, args.jobs, args.events_per_job, tuning))
    print(f"loadavg at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
