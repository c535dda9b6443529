"""LISTEN wakes the worker; its connection comes back after it is lost."""

from __future__ import annotations

import asyncpg

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
