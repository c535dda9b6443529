"""Your own jobs against the built-in job, side by side: how fast a worker drains no-op jobs of
each kind, how many tokens a second it persists from `ctx.emit` against the built-in job's
simulated stream (the same coalescing and token writes behind both), and what durable steps
cost: a job of 10 no-op steps against one of none, and the database transactions a job takes
with 0, 1 and 10 steps (pg_stat_database's commits over the drain, divided by the jobs).

    .venv/bin/python -m bench.bench_user_jobs     (or `make bench` for every benchmark)

Each measurement has a fresh database and one worker process; the kinds alternate, three rounds,
and the figures are min / median / max with the ratio of the medians. Times are read from the
jobs' rows (first start to last end), so the worker's start-up is not counted. Printed, never
asserted. BENCH_USER_JOBS_REPEATS sets the rounds; BENCH_USER_JOBS_ONLY=steps runs the steps'
figures alone.
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
STEP_JOBS = 2_000
STREAMS, TOKENS = 8, 20_000


def main() -> None:
    logs.configure("warning", json=False)
    repeats = int(os.environ.get("BENCH_USER_JOBS_REPEATS", "3"))
    only_steps = os.environ.get("BENCH_USER_JOBS_ONLY") == "steps"
    with durable_postgres("jobstream-bench-") as admin_url:
        asyncio.run(_run(admin_url, repeats, only_steps))


async def _run(admin_url: str, repeats: int, only_steps: bool) -> None:
    print("bench_user_jobs")
    if not only_steps:
        await _kinds(admin_url, repeats)
    await _steps(admin_url, repeats)


async def _kinds(admin_url: str, repeats: int) -> None:
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


async def _steps(admin_url: str, repeats: int) -> None:
    await _side_by_side(
        admin_url,
        f"drain of {STEP_JOBS:,} jobs, one worker (jobs/s)",
        {
            "@app.job, no step": lambda pool: _create(pool, _own("steps", {"steps": 0}), STEP_JOBS),
            "@app.job, 10 no-op steps": lambda pool: _create(
                pool, _own("steps", {"steps": 10}), STEP_JOBS
            ),
        },
        rate=lambda seconds: STEP_JOBS / seconds,
        repeats=repeats,
    )
    print("  database transactions a job, by its steps (commits during the drain / jobs)")
    for n in (0, 1, 10):
        per_job = []
        for _ in range(repeats):
            per_job.append(
                await _commits_per_job(admin_url, _own("steps", {"steps": n}), STEP_JOBS)
            )
        print(
            f"    {n:>2} steps: min {min(per_job):.2f}  median {statistics.median(per_job):.2f}"
            f"  max {max(per_job):.2f}"
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


async def _commits_per_job(admin_url: str, spec: JobSpec, jobs: int) -> float:
    """The database's commits while one worker drains `jobs` jobs of `spec`, a job."""
    commits: list[int] = []

    async def create(pool: asyncpg.Pool) -> None:
        await _create(pool, spec, jobs)
        await asyncio.sleep(1.0)  # the creates' commits reach pg_stat_database first
        commits.append(await _commits(pool))

    await _measure(admin_url, create, after=lambda pool: _commits(pool), seen=commits)
    return (commits[1] - commits[0]) / jobs


async def _commits(pool: asyncpg.Pool) -> int:
    count: int = await pool.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return count


async def _measure(
    admin_url: str,
    create: Callable[[asyncpg.Pool], Awaitable[None]],
    *,
    after: Callable[[asyncpg.Pool], Awaitable[int]] | None = None,
    seen: list[int] | None = None,
) -> float:
    """Seconds from the first job's start to the last one's end (`after`, when given, is read
    once the jobs are done, into `seen`)."""
    async with _database(admin_url) as url:
        pool = await db.create_pool(url, min_size=1, max_size=4)
        try:
            await create(pool)
            worker = _spawn("worker", url, JOBSTREAM_APP=APP, JOBSTREAM_WORKER_CONCURRENCY="64")
            try:
                await _until_finished(pool, timeout_s=600)
            finally:
                _stop(worker)
            if after is not None and seen is not None:
                await asyncio.sleep(1.0)  # pg_stat_database lags its backends by up to a second
                seen.append(await after(pool))
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
