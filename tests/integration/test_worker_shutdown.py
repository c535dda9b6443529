"""Graceful stop: attempts get the grace period, then hand their job straight back."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from jobstream.settings import Settings
from jobstream.worker.worker import Worker
from tests.support.gated_provider import GatedProvider
from tests.support.polling import signalled
from tests.support.workers import (
    attempt_rows,
    counted_text,
    create_job,
    event_list,
    fast,
    job_row,
    reassemble,
    running_worker,
    summary,
    wait_for_status,
    wait_idle,
)


async def test_stop_lets_an_attempt_that_ends_within_the_grace_period_finish(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    provider = GatedProvider(before=2, after=3)
    job_id = await create_job(pool)
    async with running_worker(
        settings.replace(shutdown_grace_s=10), pool=pool, providers={"simulated": provider}
    ) as worker:
        await signalled(provider.waiting.wait(), what="the attempt streams")
        worker.stop()
        provider.gate.set()  # the answer completes during the grace period
        await wait_idle(worker, what="the attempt ends")
    assert (await job_row(pool, job_id))["status"] == "succeeded"
    assert worker.results == {"succeeded": 1}


async def test_stop_hands_an_unfinished_job_straight_back_to_the_queue(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    provider = GatedProvider(before=2, ends=False)
    job_id = await create_job(pool, simulate=fast(6), max_attempts=1)
    async with running_worker(
        settings.replace(shutdown_grace_s=0.1), pool=pool, providers={"simulated": provider}
    ) as worker:
        await signalled(provider.waiting.wait(), what="the attempt streams")
    # The worker has stopped: the job is queued again now, not when its 30 s lease runs out.
    assert provider.cancelled.is_set()
    assert worker.results == {"interrupted": 1}
    job = await job_row(pool, job_id)
    assert (job["status"], job["run_token"], job["lease_until"]) == ("queued", None, None)
    assert job["uncounted_attempts"] == 1  # a hand-back does not use up max_attempts
    (attempt,) = await attempt_rows(pool, job_id)
    assert (attempt["outcome"], attempt["error_class"]) == ("interrupted", "interrupted")
    # Its tokens were flushed before the status changed.
    assert reassemble(await event_list(pool, job_id)) == "0 1 "
    async with running_worker(settings, pool=pool):
        job = await wait_for_status(pool, job_id, "succeeded")
    assert [a["outcome"] for a in await attempt_rows(pool, job_id)] == ["interrupted", "succeeded"]
    log = await event_list(pool, job_id)
    assert summary(log)[3:6] == [
        (1, "status", "queued"),
        (2, "reset", None),
        (2, "status", "running"),
    ]
    assert reassemble(log) == job["result"]["text"] == counted_text(6)


async def test_a_cancelled_worker_still_hands_its_jobs_back(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    provider = GatedProvider(before=1, ends=False)
    job_id = await create_job(pool)
    worker = Worker(settings, pool=pool, providers={"simulated": provider})
    task = asyncio.create_task(worker.run())
    await signalled(provider.waiting.wait(), what="the attempt streams")
    task.cancel()  # no stop(), no grace: what asyncio.run does to leftover tasks
    with pytest.raises(asyncio.CancelledError):
        await task
    job = await job_row(pool, job_id)
    assert (job["status"], job["uncounted_attempts"]) == ("queued", 1)
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "interrupted"
