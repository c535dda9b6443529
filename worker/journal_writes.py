"""Steps journaled together (jobstream/group_write.py): a worker's attempts finish steps many at
a time, and each journal alone is a commit of its own (a job of ten no-op steps drained at a
seventh of the rate of a job of none). One statement writes whatever arrived meanwhile, fenced
per step (queries.JOURNAL_STEPS): a step whose attempt lost its job learns it from its own
answer and the others land. A step waits for one round trip, its group's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from jobstream.claims import Claimed
from jobstream.group_write import GroupWriter
from jobstream.sql import queries
from jobstream.usage import Usage

# The most steps one statement journals; more wait for the next.
MAX_BATCH = 128
WRITES_IN_FLIGHT = 2


@dataclass(frozen=True)
class Journal:
    """One finished step, to journal: its attempt, name, result (JSON) and output items."""

    held: Claimed
    step: str
    result: Any
    output: list[dict[str, Any]]
    usage: Usage

    def row(self, ordinal: int) -> dict[str, Any]:
        held, usage = self.held, self.usage
        return {
            "ord": ordinal, "job_id": str(held.job_id), "run_token": str(held.run_token),
            "step": self.step, "attempt": held.attempt, "result": self.result,
            "output": self.output, "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens, "cost": str(usage.cost_usd),
            "cost_known": usage.cost_known,
        }  # fmt: skip


async def journal_many(pool: asyncpg.Pool, journals: Sequence[Journal]) -> list[bool]:
    """Journal these steps in one statement; for each, whether its attempt held its job."""
    rows = [journal.row(i) for i, journal in enumerate(journals)]
    ids = [journal.held.job_id for journal in journals]
    async with pool.acquire() as conn:
        held = {r["ord"] for r in await conn.fetch(queries.JOURNAL_STEPS, rows, ids)}
    return [i in held for i in range(len(journals))]


class Journals:
    def __init__(self, pool: asyncpg.Pool) -> None:
        async def write(journals: Sequence[Journal]) -> list[bool]:
            return await journal_many(pool, journals)

        self._writer = GroupWriter(
            "step-journals", write, max_batch=MAX_BATCH, in_flight=WRITES_IN_FLIGHT
        )

    async def write(self, journal: Journal) -> bool:
        """Journal this step with the others of its moment: False when its attempt no longer
        holds its job (nothing written)."""
        return await self._writer.submit(journal)

    async def run(self) -> None:
        """The writer, until cancelled."""
        await self._writer.run()
