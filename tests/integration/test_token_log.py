"""Regression: a token flush whose commit reply was lost stored its chunk twice.

Seen after a PostgreSQL crash: the log read `0 1 2 3 4 5 6 2 3 4 5 6 7 ...`. The flush had
committed, the reply never arrived, and the worker sent the chunk again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from jobstream import attempts
from jobstream.clock import DatabaseClock
from jobstream.db import Conn
from tests.support.workers import create_job, event_list, reassemble
from worker.token_log import TokenLog


class FlakyPool:
    """The real pool, except that once armed its next use reports the connection lost, either
    before the statement runs or after it committed (PostgreSQL died right after the commit):
    the client sees the same error either way."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.lose: str | None = None  # "before" or "after" the statement

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Conn]:
        lose, self.lose = self.lose, None
        if lose == "before":
            raise asyncpg.ConnectionDoesNotExistError("connection lost before the statement")
        async with self._pool.acquire() as conn:
            yield conn
        if lose == "after":
            raise asyncpg.ConnectionDoesNotExistError("connection lost after commit")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


async def test_a_flush_whose_commit_reply_was_lost_is_not_stored_twice(
    pool: asyncpg.Pool,
) -> None:
    job_id = await create_job(pool)
    held = await attempts.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=30, clock=DatabaseClock()
    )
    assert held is not None and held.job_id == job_id
    flaky = FlakyPool(pool)
    log = TokenLog(flaky, held)  # type: ignore[arg-type]
    await log.write("0 1 ")
    flaky.lose = "after"
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await log.write("2 3 ")  # committed, but the worker cannot know
    # The runner puts the failed text back in front of what came since, and writes again.
    await log.write("2 3 4 5 ")
    await log.write("6 ")
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 3 4 5 6 "


async def test_a_flush_that_did_not_commit_is_written_in_full_on_retry(
    pool: asyncpg.Pool,
) -> None:
    job_id = await create_job(pool)
    held = await attempts.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=30, clock=DatabaseClock()
    )
    assert held is not None
    flaky = FlakyPool(pool)
    log = TokenLog(flaky, held)  # type: ignore[arg-type]
    await log.write("0 ")
    flaky.lose = "before"
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await log.write("1 ")
    await log.write("1 2 ")
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 "
