"""Dead jobs with a real log, made beside a running worker or none.

The job is created with a delay far ahead (`DELAYED`), so no worker takes it; its one attempt is
claimed with a clock past that delay, streams some text and dies through the same fenced writes
the worker makes (jobstream.attempts). An operator's retry of it runs at once.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from jobstream import attempts, claims, token_appends
from jobstream.clock import DatabaseClock
from tests.support.clock import ManualClock

DELAY_S = 3600
DEATH = {"class": "transient", "message": "simulated 503 on the last attempt"}


def delayed(tokens: int) -> dict[str, Any]:
    """A create body: `tokens` counted tokens at full speed, not due for an hour."""
    return {
        "prompt": "count, then die",
        "max_tokens": tokens,
        "max_attempts": 1,
        "delay_s": DELAY_S,
        "simulate": {
            "pattern": "count",
            "tokens": tokens,
            "tokens_per_second": 0,
            "first_token_delay_s": 0,
        },
    }


async def die(pool: asyncpg.Pool, job_id: uuid.UUID, texts: list[str]) -> None:
    """Run the delayed job's one attempt: it writes `texts`, then the job is dead."""
    later = ManualClock(datetime.now(UTC) + timedelta(seconds=2 * DELAY_S))
    held = await claims.claim(
        pool, providers=["simulated"], worker_id="test-dying", lease_s=60, clock=later
    )
    assert held is not None and held.job_id == job_id, "the delayed job was not the one claimed"
    assert await token_appends.append_tokens(pool, held, texts, at=0) is not None
    await attempts.fail(
        pool, held, action="dead", outcome="failed", error=DEATH, usage=None, retry_in_s=0,
        clock=DatabaseClock(),
    )  # fmt: skip
