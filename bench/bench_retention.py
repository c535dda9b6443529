"""Retention, compaction and metrics against a long history (issue 10's figures).

    .venv/bin/python -m bench.bench_retention [--jobs 1000000] [--events-per-job 20]

1. What the metric counters add to the hot statements: each of INSERT_JOBS, CLAIM_JOBS and
   SUCCEED_ATTEMPTS (batches of 1 and of many) run under EXPLAIN ANALYZE, rolled back, as written
   and with its `counted` CTE cut out, interleaved; medians of the execution time, and the
   counting node's own time. (APPEND_TOKENS_MANY and RENEW_LEASES count nothing.)
2. A history seeded in SQL: `--jobs` finished jobs (succeeded, ended over the last 8 days, one
   attempt each) with `--events-per-job` events each (queued, reset, running, the tokens, usage,
   done), nothing compacted yet (as right after the upgrade to schema version 4), plus 4,950
   queued and 50 running jobs; then VACUUM ANALYZE, as autovacuum would have. On it:
   - `GET /metrics` through a real server process, sequentially: p50 / p99 (target p99 <= 50 ms),
     with the janitor idle and while it works;
   - claim latency (claims.claim_batch of one job) and token-append latency (one chunk,
     token_appends.append_tokens), the janitor idle and the janitor working through the backlog,
     three repeats of sixteen phases of 75 cycles, alternately idle and working, each repeat
     with its ratios of working to idle (target: within 1.2x), then their min / median / max;
   - the janitor's rates: jobs settled (compacted) and deleted per second, rows per second, and
     its batches' durations (each batch is one transaction).
Durable embedded PostgreSQL (fsync on) unless DATABASE_URL is set. The full size takes about
15 minutes on a 2-core machine, most of it the seeding.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
from typing import Any

import asyncpg

from bench import queue_common as common
from bench.postgres import durable_postgres
from bench.queue_common import Latency
from bench.retention_costs import counter_costs, print_counter_costs
from bench.retention_phases import (
    JanitorStats,
    Phase,
    hot_path,
    janitor_loop,
    print_janitor,
    scrapes,
    server,
)
from bench.retention_seed import seed
from jobstream import db
from jobstream.settings import Settings

DATABASE = "retention_bench"
REPEATS = 3  # of the latency measurement, each with its own ratios (a p99 of 600 calls is noisy)
PHASES = 16  # latency phases a repeat, alternately without and with the janitor working
PHASE_CALLS = 75  # claim + append cycles per latency phase


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
        ratios: dict[str, list[tuple[float, float]]] = {"claim": [], "append": []}
        for repeat in range(1, REPEATS + 1):
            off, on = await latency_phases(pool, janitor_pool, settings, stats)
            print(f"   repeat {repeat} of {REPEATS}:")
            for what, a, b in (
                ("claim", off.claims, on.claims), ("append", off.appends, on.appends),
            ):  # fmt: skip
                la, lb = Latency.of(a), Latency.of(b)
                ratios[what].append((lb.p50 / la.p50, lb.p99 / la.p99))
                print(f"     {what:<6} janitor idle:    {la}")
                print(
                    f"     {what:<6} janitor working: {lb}   ratio p50 {lb.p50 / la.p50:.2f},"
                    f" p99 {lb.p99 / la.p99:.2f}"
                )
        for what, pairs in ratios.items():
            print(
                f"   {what:<6} working / idle, min / median / max of {REPEATS}:"
                f" p50 {spread([p[0] for p in pairs])}, p99 {spread([p[1] for p in pairs])}"
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


async def latency_phases(
    pool: asyncpg.Pool, janitor_pool: asyncpg.Pool, settings: Settings, stats: JanitorStats
) -> tuple[Phase, Phase]:
    """PHASES phases of the hot path, alternately with the janitor idle and working."""
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
    return phases["off"], phases["on"]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


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
