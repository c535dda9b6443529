"""Attempts make no reference cycles: reference counting frees all they leave behind.

The worker and the server defer young collections on that premise (jobstream/heap.py); an
attempt path that made a cycle per attempt would pile its garbage up between collections and
make each collection walk it.
"""

from __future__ import annotations

import dataclasses
import gc

import asyncpg

from jobstream import creates, new_jobs
from jobstream.jobspec import JobSpec
from jobstream.settings import Settings
from tests.support.polling import eventually
from tests.support.workers import fast, running_worker, wait_idle

ATTEMPTS = 300

COUNT_SUCCEEDED = "SELECT count(*) FROM jobs WHERE status = 'succeeded'"


async def test_attempts_leave_no_garbage_for_the_collector(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    spec = JobSpec(prompt="no cycles", provider="simulated", max_tokens=3, simulate=fast(3))
    async with running_worker(dataclasses.replace(settings, worker_concurrency=32)) as worker:
        # What start-up left is collected now; from here only the collector's count matters.
        gc.collect()
        gc.disable()
        try:
            await creates.create_many(pool, "default", [new_jobs.NewJob(spec)] * ATTEMPTS)

            async def succeeded() -> int:
                done: int = await pool.fetchval(COUNT_SUCCEEDED)
                return done

            await eventually(succeeded, lambda n: n == ATTEMPTS, what="every job succeeded")
            await wait_idle(worker)
            found = gc.collect()
        finally:
            gc.enable()
    # A cycle is at least two objects: one per attempt would be twice ATTEMPTS. What is allowed
    # is the odd cycle of the machinery around them (a poll's timeout, the test's own polling).
    assert found < ATTEMPTS // 3, f"{found} objects in reference cycles after {ATTEMPTS} attempts"
