"""How a job's earlier attempts ended, read once by a retried attempt that needs it: for
`ctx.previous_failure` (a handler that re-asks) and the output kinds' own retry budgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from jobstream import events
from jobstream.claims import Claimed
from jobstream.sql import queries


@dataclass(frozen=True)
class Ended:
    attempt: int
    outcome: str
    error_class: str | None
    message: str | None


class Previous:
    def __init__(self, pool: asyncpg.Pool, held: Claimed) -> None:
        self._pool = pool
        self._held = held
        self._ended: list[Ended] | None = None
        self.failure: dict[str, Any] | None = None  # set by load()

    async def load(self) -> list[Ended]:
        """The earlier attempts (none for a first attempt: no round trip)."""
        if self._ended is None:
            held = self._held
            if held.attempt == 1:
                self._ended = []
                return self._ended
            async with self._pool.acquire() as conn:
                rows = await conn.fetch(queries.PREVIOUS_ATTEMPTS, held.job_id, held.attempt)
                self._ended = [
                    Ended(r["attempt"], r["outcome"], r["error_class"], r["error_detail"])
                    for r in rows
                ]
                last = self._ended[-1] if self._ended else None
                if last is not None and last.error_class is not None:
                    # The text it wrote (the reply that did not validate, say), from its log.
                    text = await events.attempt_text(conn, held.job_id, last.attempt)
                    self.failure = {
                        "class": last.error_class,
                        "message": last.message,
                        "attempt": last.attempt,
                        "text": text,
                    }
                    if last.error_class == "invalid_output":
                        # The answer that failed its model (its attempt's row keeps it).
                        self.failure["answer"] = rows[-1]["error_trace"]
        return self._ended

    async def count(self, error_class: str) -> int:
        return sum(1 for ended in await self.load() if ended.error_class == error_class)
