"""Cancel: a queued job ends at once; a running one is stopped and confirmed by its worker."""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg

from jobstream import attempts, jobs
from jobstream.clock import DatabaseClock
from jobstream.settings import Settings
from tests.support.clock import ManualClock
from tests.support.gated_provider import GatedProvider
from tests.support.polling import eventually, signalled
from tests.support.workers import (
    attempt_rows,
    create_job,
    event_list,
    fast,
    job_row,
    running_worker,
    summary,
    wait_for_status,
    wait_idle,
)

# A job that would stream for minutes: only a cancel ends it within a test.
ENDLESS = {"tokens": 100_000, "pattern": "count", "tokens_per_second": 50, "first_token_delay_s": 0}


async def wait_for_tokens(pool: asyncpg.Pool, job_id: uuid.UUID) -> None:
    await eventually(
        lambda: event_list(pool, job_id),
        lambda log: any(e.type == "token" for e in log),
        what="the first token is persisted",
    )


async def request_cancel_without_notify(pool: asyncpg.Pool, job_id: uuid.UUID) -> None:
    """A cancel whose NOTIFY got lost: only the job row says so."""
    await pool.execute(
        "UPDATE jobs SET status = 'cancelling', cancel_requested_at = now() WHERE id = $1", job_id
    )


async def test_cancelling_a_queued_job_ends_it_before_any_attempt(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_id = await create_job(pool, simulate=fast(5))
    snap, changed = await jobs.cancel(pool, "default", job_id, DatabaseClock())
    assert changed and snap.job.status == "cancelled"
    later = await create_job(pool, simulate=fast(5))
    async with running_worker(settings, pool=pool):
        # The later job ran, so the worker has looked at the queue since the cancel.
        await wait_for_status(pool, later, "succeeded")
    assert (await job_row(pool, job_id))["status"] == "cancelled"
    assert await attempt_rows(pool, job_id) == []
    assert summary(await event_list(pool, job_id)) == [
        (0, "status", "queued"),
        (0, "done", "cancelled"),
    ]


async def test_cancelling_a_running_job_is_confirmed_by_its_worker_at_once(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_id = await create_job(pool, simulate=ENDLESS)
    # A 30 s lease renews every 10 s: confirming within 5 s proves the NOTIFY path.
    async with running_worker(settings, pool=pool) as worker:
        await wait_for_tokens(pool, job_id)
        snap, changed = await jobs.cancel(pool, "default", job_id, DatabaseClock())
        assert changed and snap.job.status == "cancelling"
        await wait_for_status(pool, job_id, "cancelled", timeout_s=5)
        await wait_idle(worker, what="the worker is idle")
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "cancelled"
    assert attempt["cancel_confirmed"] is True  # the stream was cancelled and closed
    assert attempt["cost_known"] is False and attempt["output_tokens"] > 0
    log = await event_list(pool, job_id)
    assert summary(log)[-2:] == [(1, "status", "cancelling"), (1, "done", "cancelled")]
    assert worker.results == {"cancelled": 1}
    # Nothing flips it later: not the reaper, however late it runs.
    assert (
        await attempts.reap_expired(pool, ManualClock(attempt["started_at"] + timedelta(days=1)))
        == 0
    )
    job = await job_row(pool, job_id)
    assert job["status"] == "cancelled" and job["result"] is None
    assert await event_list(pool, job_id) == log


async def test_a_cancel_whose_notify_was_lost_is_seen_at_the_next_renewal(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    job_id = await create_job(pool, simulate=ENDLESS)
    # Renewals every second. A shorter lease was seen to run out on a loaded CI machine before
    # a renewal ran: the attempt was then reaped as lost (right, but not what this test shows).
    async with running_worker(settings.replace(lease_s=3), pool=pool):
        await wait_for_tokens(pool, job_id)
        await request_cancel_without_notify(pool, job_id)
        await wait_for_status(pool, job_id, "cancelled", timeout_s=10)
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "cancelled"


async def test_a_result_that_arrives_after_a_cancel_request_does_not_win(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    provider = GatedProvider(before=3, after=2)
    job_id = await create_job(pool)
    async with running_worker(settings, pool=pool, providers={"simulated": provider}) as worker:
        await signalled(provider.waiting.wait(), what="the attempt streams")
        await request_cancel_without_notify(pool, job_id)
        provider.gate.set()  # the answer completes before the worker has seen the cancel
        await wait_for_status(pool, job_id, "cancelled")
        await wait_idle(worker, what="the worker is idle")
    (attempt,) = await attempt_rows(pool, job_id)
    assert attempt["outcome"] == "cancelled"
    # The provider finished on its own; our cancel did not stop it, and it billed all 5 tokens.
    assert attempt["cancel_confirmed"] is False
    assert attempt["output_tokens"] == 5 and attempt["cost_known"] is True
    assert (await job_row(pool, job_id))["result"] is None
    assert worker.results == {"cancelled": 1}
    assert not provider.cancelled.is_set()
