"""Many workers, many jobs: every job runs to success exactly once (SKIP LOCKED, fencing)."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack

import asyncpg

from jobstream.settings import Settings
from tests.support.polling import eventually
from tests.support.workers import (
    attempt_rows,
    counted_text,
    create_job,
    event_list,
    fast,
    reassemble,
    running_worker,
)

WORKERS = 4
JOBS = 40
TOKENS = 25


async def test_racing_workers_run_every_job_exactly_once(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_ids = [await create_job(pool, simulate=fast(TOKENS)) for _ in range(JOBS)]
    async with AsyncExitStack() as stack:
        # Each worker has its own pool, as separate processes would; all start at once.
        workers = await asyncio.gather(
            *(
                stack.enter_async_context(
                    running_worker(
                        settings.replace(
                            worker_id=f"w{n}", worker_concurrency=4, db_pool_min=1, db_pool_max=3
                        )
                    )
                )
                for n in range(WORKERS)
            )
        )
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'succeeded'"),
            lambda n: n == JOBS,
            what=f"all {JOBS} jobs succeed",
            timeout_s=30,
        )
    results: Counter[str] = Counter()
    for worker in workers:
        results.update(worker.results)
    assert results == {"succeeded": JOBS}
    for job_id in job_ids:
        (attempt,) = await attempt_rows(pool, job_id)  # claimed once, by one worker
        assert attempt["outcome"] == "succeeded"
        log = await event_list(pool, job_id)
        assert [e.type for e in log].count("done") == 1
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert reassemble(log) == log[-1].data["result"]["text"] == counted_text(TOKENS)
