"""Drive a job through an attempt without a worker: claim, append tokens, end it.

The same fenced writes the worker makes (jobstream.attempts), so the event log is the real one.
"""

from __future__ import annotations

from decimal import Decimal

import asyncpg

from jobstream import attempts, claims, token_appends
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.usage import Usage

CLOCK = DatabaseClock()


async def claim(pool: asyncpg.Pool, *, lease_s: float = 60) -> Claimed:
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="test-driver", lease_s=lease_s, clock=CLOCK
    )
    assert held is not None, "no queued job to claim"
    return held


async def tokens(pool: asyncpg.Pool, held: Claimed, texts: list[str]) -> int:
    """Append `texts` after whatever the attempt's text holds; returns the new last_seq."""
    at = await token_appends.written_chars(pool, held)
    last_seq = await token_appends.append_tokens(pool, held, texts, at=at)
    assert last_seq is not None, "the log's offset moved between the read and the append"
    return last_seq


async def succeed(pool: asyncpg.Pool, held: Claimed, text: str) -> None:
    usage = Usage(input_tokens=3, output_tokens=len(text.split()), cost_usd=Decimal("0.0001"))
    await attempts.accept(pool, Success(held, text, usage), CLOCK)


async def retry(pool: asyncpg.Pool, held: Claimed) -> None:
    """End the attempt with a transient error; the job goes back to the queue at once."""
    await attempts.fail(
        pool,
        held,
        action="retry",
        outcome="failed",
        error={"class": "transient", "message": "simulated 503"},
        usage=None,
        retry_in_s=0,
        clock=CLOCK,
    )


def count_tokens(start: int, stop: int) -> list[str]:
    """The simulated provider's `count` pattern: the i-th token is "{i} "."""
    return [f"{i} " for i in range(start, stop)]
