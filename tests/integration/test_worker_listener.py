"""LISTEN wakes the worker; its connection comes back after it is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from jobstream import claims
from jobstream.claims import Claimed
from jobstream.settings import Settings
from tests.support.polling import eventually, signalled
from tests.support.workers import create_job, fast, running_worker, wait_for_status

# Long enough that a job run within the test proves a NOTIFY woke the worker, not the poll.
NO_POLLING = 60.0


async def listener_pids(pool: asyncpg.Pool) -> list[int]:
    rows = await pool.fetch(
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name LIKE 'jobstream-worker-listener:%'"
        " AND datname = current_database()"
    )
    return [r["pid"] for r in rows]


async def test_a_new_job_wakes_an_idle_worker(pool: asyncpg.Pool, settings: Settings) -> None:
    async with running_worker(settings.replace(poll_interval_s=NO_POLLING), pool=pool):
        job_id = await create_job(pool, simulate=fast(3))
        await wait_for_status(pool, job_id, "succeeded", timeout_s=5)


async def test_the_listener_reconnects_after_its_connection_is_killed(
    pool: asyncpg.Pool, settings: Settings
) -> None:
    async with running_worker(settings.replace(poll_interval_s=NO_POLLING), pool=pool) as worker:
        (old_pid,) = await listener_pids(pool)
        assert await pool.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        (new_pid,) = await eventually(
            lambda: listener_pids(pool),
            lambda pids: len(pids) == 1 and pids[0] != old_pid,
            what="a new listener connection",
        )
        # A new backend is not enough: a NOTIFY sent before its LISTEN would be missed.
        await signalled(worker.listening.wait(), what="LISTEN is in effect again")
        # Listening again: a job created now is picked up at once, with no polling.
        job_id = await create_job(pool, simulate=fast(3))
        await wait_for_status(pool, job_id, "succeeded", timeout_s=5)
        assert await listener_pids(pool) == [new_pid]


async def test_a_job_announced_while_a_claim_is_under_way_is_claimed_at_once(
    pool: asyncpg.Pool, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the wake-up a job's NOTIFY brings while a claim is under way found every slot
    # reserved by that claim and started none; the claim, whose snapshot came before the job,
    # came back empty, and the job waited for the next poll.
    found_nothing = asyncio.Event()
    gate = asyncio.Event()
    claim_batch = claims.claim_batch

    async def slow_claim(*args: Any, **kwargs: Any) -> list[Claimed]:
        held = await claim_batch(*args, **kwargs)
        found_nothing.set()
        await gate.wait()  # its snapshot taken, still under way when the NOTIFY comes
        return held

    monkeypatch.setattr(claims, "claim_batch", slow_claim)
    # No gathering pause: the claim round the wake-up brings runs in the step that takes it,
    # before this test's own task resumes and opens the gate.
    quick = settings.replace(poll_interval_s=NO_POLLING, claim_gather_s=0.0)
    async with running_worker(quick, pool=pool) as worker:
        await signalled(found_nothing.wait(), what="a claim found nothing and is under way")
        woken = asyncio.Event()
        wake = worker.wake

        def noted_wake() -> None:
            wake()
            woken.set()

        monkeypatch.setattr(worker, "wake", noted_wake)
        job_id = await create_job(pool, simulate=fast(3))
        await signalled(woken.wait(), what="the job's NOTIFY wakes the worker")
        gate.set()
        await wait_for_status(pool, job_id, "succeeded", timeout_s=5)
