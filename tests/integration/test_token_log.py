"""Regression: a token flush whose commit reply was lost stored its chunk twice.

Seen after a PostgreSQL crash: the log read `0 1 2 3 4 5 6 2 3 4 5 6 7 ...`. The flush had
committed, the reply never arrived, and the worker sent the chunk again. And (issue 9, defect
11) a half-open connection can deliver a flush after the writer has given up on it and checked
the log: the check said "not there", the chunk was sent again, and the late one landed too.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import pytest

from jobstream import claims
from jobstream.clock import DatabaseClock
from jobstream.db import Conn
from jobstream.worker.token_log import TokenLog
from tests.support.workers import create_job, event_list, reassemble


class InFlight:
    """A connection whose statement has not reached the server yet: the caller is told the
    connection is lost, and the statement is kept to be delivered later, as a half-open
    connection can."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, str, tuple[Any, ...]]] = []

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        async def send(query: str, *args: Any) -> Any:
            self.statements.append((method, query, args))
            raise asyncpg.ConnectionDoesNotExistError("connection lost, statement in flight")

        return send


class FlakyPool:
    """The real pool, except that once armed its next use reports the connection lost: before
    the statement runs, after it committed (PostgreSQL died right after the commit), or while
    it is still on its way ("late": `deliver` commits it later). The client sees the same error
    every time."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.lose: str | None = None  # "before", "after" or "late"
        self.in_flight = InFlight()
        self.deliver_at_next_use = False  # the late statement arrives just before the next one

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[Conn | InFlight]:
        lose, self.lose = self.lose, None
        if self.deliver_at_next_use:
            self.deliver_at_next_use = False
            await self.deliver()
        if lose == "before":
            raise asyncpg.ConnectionDoesNotExistError("connection lost before the statement")
        if lose == "late":
            yield self.in_flight
            return
        async with self._pool.acquire() as conn:
            yield conn
        if lose == "after":
            raise asyncpg.ConnectionDoesNotExistError("connection lost after commit")

    async def deliver(self) -> None:
        """The statements in flight reach the server at last, and commit if they can."""
        for method, query, args in self.in_flight.statements:
            async with self._pool.acquire() as conn:
                await getattr(conn, method)(query, *args)
        self.in_flight.statements.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


async def held_log(pool: asyncpg.Pool) -> tuple[uuid.UUID, FlakyPool, TokenLog]:
    """A claimed job and its attempt's token log, writing through a FlakyPool."""
    job_id = await create_job(pool)
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="w", lease_s=30, clock=DatabaseClock()
    )
    assert held is not None and held.job_id == job_id
    flaky = FlakyPool(pool)
    return job_id, flaky, TokenLog(flaky, held)  # type: ignore[arg-type]


async def lose_a_flush(log: TokenLog, flaky: FlakyPool, lose: str, text: str) -> None:
    """Write `text` with the connection lost as `lose` says (see FlakyPool): the writer sees
    the error."""
    flaky.lose = lose
    with pytest.raises(asyncpg.ConnectionDoesNotExistError):
        await log.write([text])


async def test_a_flush_whose_commit_reply_was_lost_is_not_stored_twice(
    pool: asyncpg.Pool,
) -> None:
    job_id, flaky, log = await held_log(pool)
    await log.write(["0 1 "])
    await lose_a_flush(log, flaky, "after", "2 3 ")  # committed, but the worker cannot know
    # The runner puts the failed text back in front of what came since, and writes again.
    await log.write(["2 3 4 5 "])
    await log.write(["6 "])
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 3 4 5 6 "


async def test_a_flush_that_did_not_commit_is_written_in_full_on_retry(
    pool: asyncpg.Pool,
) -> None:
    job_id, flaky, log = await held_log(pool)
    await log.write(["0 "])
    await lose_a_flush(log, flaky, "before", "1 ")
    await log.write(["1 2 "])
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 "


async def test_a_flush_in_doubt_that_commits_after_it_was_sent_again_is_not_stored_twice(
    pool: asyncpg.Pool,
) -> None:
    job_id, flaky, log = await held_log(pool)
    await log.write(["0 1 "])
    await lose_a_flush(log, flaky, "late", "2 3 ")
    await log.write(["2 3 4 5 "])  # the log says "2 3 " is not there: sent again
    await flaky.deliver()  # the first send arrives after all: its offset is stale, it lands nowhere
    await log.write(["6 "])
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 3 4 5 6 "


async def test_a_flush_in_doubt_that_commits_between_the_check_and_the_resend_is_not_stored_twice(
    pool: asyncpg.Pool,
) -> None:
    job_id, flaky, log = await held_log(pool)
    await log.write(["0 1 "])
    await lose_a_flush(log, flaky, "late", "2 3 ")
    # The late flush commits after the writer read the log's offset, before its resend: the
    # resend is refused for its offset, and the writer sends only what is still missing.
    flaky.deliver_at_next_use = True
    await log.write(["2 3 4 5 "])
    await log.write(["6 "])
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 3 4 5 6 "
    tokens = [e.data["text"] for e in await event_list(pool, job_id) if e.type == "token"]
    assert tokens == ["0 1 ", "2 3 ", "4 5 ", "6 "]


async def test_a_resend_that_fails_after_reconciling_is_still_not_stored_twice(
    pool: asyncpg.Pool,
) -> None:
    job_id, flaky, log = await held_log(pool)
    await log.write(["0 1 "])
    await lose_a_flush(log, flaky, "late", "2 3 ")
    await flaky.deliver()  # it landed after all
    # The resend reconciles (the log holds "2 3 "), then loses its connection before the rest:
    # the runner passes the same text again, from where it started.
    await lose_a_flush(log, flaky, "before", "2 3 4 5 ")
    await log.write(["2 3 4 5 6 "])
    assert reassemble(await event_list(pool, job_id)) == "0 1 2 3 4 5 6 "
