"""Token chunks of all of a worker's streams, written together (jobstream/group_write.py): one
statement and one commit a tick.

Each stream coalesces its deltas into chunks (worker/coalescer.py); alone, every chunk of every
stream would be a transaction with its own NOTIFY, and NOTIFY takes a cluster-wide lock at
commit: 200 streams at 50 ms were 4,000 notifying commits a second, what this PostgreSQL does
at all. Here one statement (queries.APPEND_TOKENS_MANY) writes every chunk that arrived
meanwhile, at most one write at a time and at most one every `min_interval_s`, so the commits a
second depend on the number of worker processes, not on the number of streams.

The writer takes the due chunks of every attached stream itself as it puts a write together
(worker/token_pull.py): a stream's runner then spends no timer and no wake-up on a flush. With
1,000 streams each runner woke twice a flush, on its flush timer and on its write's answer, and
the worker process was the limit of the streams' delays. A stream whose write went wrong (in
doubt, refused) writes by itself again, through append, until its log is reconciled.

The statement is fenced and compare-and-set per attempt: a fenced-out attempt, or one whose
offset moved, learns it from its own answer and does not fail the others' writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

import asyncpg

from jobstream import token_appends
from jobstream.event_loop import running_loop
from jobstream.group_write import GroupWriter, Reply
from jobstream.token_appends import Appended, TokenAppend

# The most chunks one statement writes; more wait for the next. Above the streams a worker runs:
# at 500, 1,000 streams took two writes a tick, so each stream waited for the other half's.
MAX_BATCH = 2000


class Source(Reply[Appended], Protocol):
    """An attached stream, as the writer sees it (worker/token_pull.py); the answer of the
    write that took its text goes to it as to a future."""

    @property
    def due_at(self) -> float | None:
        """When its pending text is due; None when it has none, or writes by itself now."""

    def take(self, now: float) -> TokenAppend | None:
        """Its due text as an append, now in flight; None when nothing is due."""


class TokenWrites:
    def __init__(self, pool: asyncpg.Pool, *, min_interval_s: float) -> None:
        async def append_many(appends: Sequence[TokenAppend]) -> list[Appended]:
            return await token_appends.append_tokens_many(pool, appends)

        self._writer = GroupWriter(
            "token-writes", append_many, max_batch=MAX_BATCH, min_interval_s=min_interval_s,
            collect=self._collect,
        )  # fmt: skip
        self._sources: set[Source] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    async def append(self, append: TokenAppend) -> Appended:
        """Write this chunk with the others of its tick. Raises the database's error when the
        whole write failed (a lost connection: the write is in doubt)."""
        return await self._writer.submit(append)

    def attach(self, source: Source) -> None:
        """Take `source`'s due text with every write from now on, until detach."""
        self._sources.add(source)

    def detach(self, source: Source) -> None:
        self._sources.discard(source)

    def due(self, at: float) -> None:
        """An attached source has text due at `at` (loop time): write it by then."""
        loop = running_loop()
        if at <= loop.time():
            self._writer.wake()
        elif self._timer is None or at < self._timer_at:
            self._arm(loop, at)

    async def run(self) -> None:
        """The writer, until cancelled."""
        try:
            await self._writer.run()
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._writer.wake()

    def _collect(self) -> None:
        """Put every attached source's due text in this write; the timer for the next due."""
        loop = running_loop()
        now = loop.time()
        earliest: float | None = None
        for source in list(self._sources):
            append = source.take(now)
            if append is not None:
                self._writer.submit_to(append, source)
                continue
            at = source.due_at
            if at is not None and (earliest is None or at < earliest):
                earliest = at
        if earliest is not None and (self._timer is None or earliest < self._timer_at):
            self._arm(loop, earliest)
