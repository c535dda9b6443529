"""Successes of a worker's attempts, written together (jobstream/group_write.py).

A busy worker's attempts end many at a time, and each success alone is a commit of its own.
The writer sends whatever arrived while its previous writes were in flight (group commit without
a timer: an idle worker writes at once). Two writes may be under way at once, so that a worker's
attempts do not move in lockstep waves (claim all, run all, write all): in a drain of no-op jobs
that took 55 ms from claim to write, 36 ms with two.
The statement is fenced per attempt (queries.SUCCEED_ATTEMPTS): a fenced-out attempt learns it
from its own answer and does not fail the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from jobstream import attempts
from jobstream.attempts import Success
from jobstream.clock import Clock
from jobstream.errors import Fenced
from jobstream.group_write import GroupWriter

# The most successes one statement writes; more wait for the next.
MAX_BATCH = 64
# Writes under way at once: while one commits, the next batch is already on its way.
WRITES_IN_FLIGHT = 2


class Completions:
    def __init__(self, pool: asyncpg.Pool, clock: Clock) -> None:
        async def accept_many(successes: Sequence[Success]) -> list[bool]:
            landed = await attempts.accept_many(pool, successes, clock)
            return [i in landed for i in range(len(successes))]

        self._writer = GroupWriter(
            "completions", accept_many, max_batch=MAX_BATCH, in_flight=WRITES_IN_FLIGHT
        )

    async def accept(self, success: Success) -> None:
        """Write this success with the others of its tick; raises Fenced, or the database's
        error (a lost connection: the write is in doubt, and the fence makes a retry safe)."""
        if not await self._writer.submit(success):
            raise Fenced(f"job {success.held.job_id}: not running under this attempt")

    async def run(self) -> None:
        """The writer, until cancelled."""
        await self._writer.run()
