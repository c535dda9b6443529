"""Start-up survives a database that goes away again just after it first answered."""

from __future__ import annotations

import pytest

from jobstream import db
from jobstream.errors import DatabaseUnavailable


async def test_a_step_cut_off_by_a_restart_runs_again(database_url: str) -> None:
    tries: list[int] = []

    async def open_things() -> str:
        tries.append(len(tries) + 1)
        if len(tries) == 1:
            # What a worker saw when PostgreSQL was killed between answering and its next connect.
            raise ConnectionResetError(104, "Connection reset by peer")
        conn = await db.connect(database_url)
        try:
            return str(await conn.fetchval("SELECT 'opened'"))
        finally:
            await conn.close()

    assert await db.start_with_database(database_url, 10, open_things) == "opened"
    assert tries == [1, 2]


async def test_a_database_that_keeps_going_away_ends_in_one_clear_error(database_url: str) -> None:
    async def never() -> None:
        raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(DatabaseUnavailable, match="went away during start-up"):
        await db.start_with_database(database_url, 0.3, never)


async def test_a_bug_in_the_step_is_not_retried(database_url: str) -> None:
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug, not the database")

    with pytest.raises(ValueError):
        await db.start_with_database(database_url, 10, broken)
    assert calls == 1
