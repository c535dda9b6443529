"""Waiting in tests: a bounded poll with a deadline, never a bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T]],
    accept: Callable[[T], bool],
    *,
    what: str,
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
) -> T:
    """Call `probe` until `accept` holds for its value; return that value.

    Fails with `what` and the last value seen when the deadline passes.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await probe()
        if accept(value):
            return value
        if loop.time() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting until {what}; last: {value!r}"
            )
        await asyncio.sleep(interval_s)


async def signalled(waiter: Awaitable[object], *, what: str, timeout_s: float = 10.0) -> None:
    """Await an event-like `waiter` (an Event.wait(), a gate), with a deadline."""
    try:
        async with asyncio.timeout(timeout_s):
            await waiter
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout_s} s waiting until {what}") from None


async def lock_waits(pool: asyncpg.Pool) -> int:
    """Backends of the test's database waiting for a lock now: a probe for `eventually`."""
    n: int = await pool.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return n


def eventually_blocking(
    probe: Callable[[], T],
    accept: Callable[[T], bool],
    *,
    what: str,
    timeout_s: float = 10.0,
    interval_s: float = 0.02,
) -> T:
    """`eventually` for tests that drive a blocking client (the official SDK's sync one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s} s waiting until {what}; last: {value!r}"
            )
        time.sleep(interval_s)
