"""Steps journaled together (jobstream/group_write.py): a worker's attempts finish steps many at
a time, and each journal alone is a commit of its own (a job of ten no-op steps drained at a
seventh of the rate of a job of none). One statement writes whatever arrived meanwhile, fenced
per step (queries.JOURNAL_STEPS): a step whose attempt lost its job learns it from its own
answer and the others land. A step waits for one round trip, its group's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from jobstream.claims import Claimed
from jobstream.group_write import GroupWriter
from jobstream.sql import queries
from jobstream.usage import Usage

# The most steps one statement journals; more wait for the next.
MAX_BATCH = 128
WRITES_IN_FLIGHT = 2


def journal(
    ids: tuple[str, str, int], step: str, result: Any, output: Any, usage: Usage
) -> Journal:
    """One finished step to journal, as an element of JOURNAL_STEPS' $1: an array of its fields
    where the statement reads them (an object's keys cost jsonb a sort and a search each, as
    INSERT_JOBS says); its first is its place in the statement, set as it is written. Built
    once, as the step ends: a job of many steps makes many (a frozen dataclass and its row
    cost 13 us a step, a fifth of a no-op step's). `ids`: the attempt's job id and run token as
    text, and its number (ids_of)."""
    job_id, run_token, attempt = ids
    return [
        0, job_id, run_token, step, attempt, result, output, usage.input_tokens,
        usage.output_tokens, str(usage.cost_usd), usage.cost_known, usage.price_source,
    ]  # fmt: skip


def ids_of(held: Claimed) -> tuple[str, str, int]:
    """What every journal of an attempt names, spelt once."""
    return str(held.job_id), str(held.run_token), held.attempt


# A step's journal: journal()'s array.
Journal = list[Any]


async def journal_many(pool: asyncpg.Pool, journals: Sequence[Journal]) -> list[bool]:
    """Journal these steps in one statement; for each, whether its attempt held its job."""
    for i, row in enumerate(journals):
        row[0] = i
    ids = sorted({uuid.UUID(row[1]) for row in journals})
    async with pool.acquire() as conn:
        held = {r["ord"] for r in await conn.fetch(queries.JOURNAL_STEPS, journals, ids)}
    return [i in held for i in range(len(journals))]


class Journals:
    def __init__(self, pool: asyncpg.Pool) -> None:
        async def write(journals: Sequence[Journal]) -> list[bool]:
            return await journal_many(pool, journals)

        self._writer = GroupWriter(
            "step-journals", write, max_batch=MAX_BATCH, in_flight=WRITES_IN_FLIGHT
        )
        self._pending: set[asyncio.Future[bool]] = set()

    def write(self, journal: Journal) -> asyncio.Future[bool]:
        """Journal this step with the others of its moment: the future of whether its attempt
        still held its job (False: nothing written), or of the database's error."""
        answer = self._writer.submit_nowait(journal)
        self._pending.add(answer)
        answer.add_done_callback(self._pending.discard)
        return answer

    async def settle(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the journals on their way. A success does not wait for
        its steps' journals, so a worker stopping right after one still has them to write:
        cancelled, they would be lost to the job's record of its steps."""
        if self._pending and timeout_s > 0:
            await asyncio.wait(set(self._pending), timeout=timeout_s)

    async def run(self) -> None:
        """The writer, until cancelled."""
        await self._writer.run()
