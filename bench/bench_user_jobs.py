"""Your own jobs against the built-in job, side by side: how fast a worker drains no-op jobs of
each kind, and how many tokens a second it persists from `ctx.emit` against the built-in job's
simulated stream (the same coalescing and token writes behind both).

    .venv/bin/python -m bench.bench_user_jobs     (or `make bench` for every benchmark)

Each measurement has a fresh database and one worker process; the kinds alternate, three rounds,
and the figures are min / median / max with the ratio of the medians. Times are read from the
jobs' rows (first start to last end), so the worker's start-up is not counted. Printed, never
asserted. BENCH_USER_JOBS_REPEATS sets the rounds.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Awaitable, Callable

import asyncpg

from bench.bench_stream import _database, _spawn, _stop, _until_finished
from bench.postgres import durable_postgres
from jobstream import creates, db, logs, new_jobs
from jobstream.jobspec import JobSpec

APP = "bench.user_jobs_app:app"
DRAIN_JOBS = 2_000
STREAMS, TOKENS = 8, 20_000


def main() -> None:
    logs.configure("warning", json=False)
    repeats = int(os.environ.get("BENCH_USER_JOBS_REPEATS", "3"))
    with durable_postgres("jobstream-bench-") as admin_url:
        asyncio.run(_run(admin_url, repeats))


async def _run(admin_url: str, repeats: int) -> None:
    print("bench_user_jobs")
    await _side_by_side(
        admin_url,
        f"drain of {DRAIN_JOBS:,} no-op jobs, one worker (jobs/s)",
        {
            "built-in llm, 0 tokens": lambda pool: _create(pool, _built_in(0), DRAIN_JOBS),
            "@app.job noop": lambda pool: _create(pool, _own("noop", {}), DRAIN_JOBS),
        },
        rate=lambda seconds: DRAIN_JOBS / seconds,
        repeats=repeats,
    )
    deltas = STREAMS * TOKENS
    await _side_by_side(
        admin_url,
        f"{STREAMS} streams of {TOKENS:,} tokens at full speed, one worker (tokens/s persisted)",
        {
            "built-in simulated stream": lambda pool: _create(pool, _built_in(TOKENS), STREAMS),
            "@app.job ctx.emit loop": lambda pool: _create(
                pool, _own("emit", {"tokens": TOKENS}), STREAMS
            ),
        },
        rate=lambda seconds: deltas / seconds,
        repeats=repeats,
    )


def _built_in(tokens: int) -> JobSpec:
    simulate = {"tokens": tokens, "pattern": "count", "tokens_per_second": 0,
                "first_token_delay_s": 0}  # fmt: skip
    return JobSpec(
        prompt="bench", provider="simulated", max_tokens=max(tokens, 1), simulate=simulate
    )


def _own(name: str, input: dict[str, int]) -> JobSpec:
    return JobSpec(prompt="", provider="simulated", job=name, input=input)


async def _create(pool: asyncpg.Pool, spec: JobSpec, n: int) -> None:
    for start in range(0, n, 1000):
        batch = [new_jobs.NewJob(spec) for _ in range(min(1000, n - start))]
        await creates.create_many(pool, "default", batch)


async def _side_by_side(
    admin_url: str,
    title: str,
    kinds: dict[str, Callable[[asyncpg.Pool], Awaitable[None]]],
    *,
    rate: Callable[[float], float],
    repeats: int,
) -> None:
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(repeats):
        for kind, create in kinds.items():  # interleaved: the machine's noise falls on both
            rates[kind].append(rate(await _measure(admin_url, create)))
    print(f"  {title}")
    for kind, found in rates.items():
        print(
            f"    {kind:<28} min {min(found):>10,.0f}  median {statistics.median(found):>10,.0f}"
            f"  max {max(found):>10,.0f}"
        )
    first, second = (statistics.median(found) for found in rates.values())
    print(f"    ratio of the medians (second / first): {second / first:.2f}")


async def _measure(admin_url: str, create: Callable[[asyncpg.Pool], Awaitable[None]]) -> float:
    """Seconds from the first job's start to the last one's end."""
    async with _database(admin_url) as url:
        pool = await db.create_pool(url, min_size=1, max_size=4)
        try:
            await create(pool)
            worker = _spawn("worker", url, JOBSTREAM_APP=APP, JOBSTREAM_WORKER_CONCURRENCY="64")
            try:
                await _until_finished(pool, timeout_s=600)
            finally:
                _stop(worker)
            failed = await pool.fetchval("SELECT count(*) FROM jobs WHERE status <> 'succeeded'")
            if failed:
                raise RuntimeError(f"{failed} jobs did not succeed")
            seconds: float = await pool.fetchval(
                "SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8 FROM jobs"
            )
        finally:
            await pool.close()
    return seconds


if __name__ == "__main__":
    main()
