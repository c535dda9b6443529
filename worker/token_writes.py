"""Token chunks of all of a worker's streams, written together: one statement and one commit a tick.

Each stream coalesces its deltas into chunks (worker/coalescer.py); alone, every chunk of every
stream would be a transaction with its own NOTIFY, and NOTIFY takes a cluster-wide lock at
commit: 200 streams at 50 ms were 4,000 notifying commits a second, what this PostgreSQL does
at all. Here a stream hands over its chunk and waits; one writer task writes every chunk that
arrived meanwhile in one statement (queries.APPEND_TOKENS_MANY), at most one write at a time
and at most one every `min_interval_s`, so the commits a second depend on the number of worker
processes, not on the number of streams.

The statement is fenced and compare-and-set per attempt: a fenced-out attempt, or one whose
offset moved, learns it from its own answer and does not fail the others' writes.
"""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from jobstream import attempts, db
from jobstream.attempts import Appended, TokenAppend

log = structlog.get_logger(__name__)

# The most chunks one statement writes; more wait for the next.
MAX_BATCH = 500


class TokenWrites:
    def __init__(self, pool: asyncpg.Pool, *, min_interval_s: float) -> None:
        self._pool = pool
        self._min_interval_s = min_interval_s
        self._pending: list[tuple[TokenAppend, asyncio.Future[Appended]]] = []
        self._arrived = asyncio.Event()

    async def append(self, append: TokenAppend) -> Appended:
        """Write this chunk with the others of its tick. Raises the database's error when the
        whole write failed (a lost connection: the write is in doubt)."""
        landed: asyncio.Future[Appended] = asyncio.get_running_loop().create_future()
        self._pending.append((append, landed))
        self._arrived.set()
        return await landed

    async def run(self) -> None:
        """The writer: until cancelled, write what is pending, one statement at a time."""
        loop = asyncio.get_running_loop()
        while True:
            await self._arrived.wait()
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
            if not self._pending:
                self._arrived.clear()
            started = loop.time()
            await self._write(batch)
            # A write that took less than the interval waits out the rest: what arrives
            # meanwhile joins the next statement instead of costing a commit of its own.
            rest = started + self._min_interval_s - loop.time()
            if rest > 0:
                await asyncio.sleep(rest)

    async def _write(self, batch: list[tuple[TokenAppend, asyncio.Future[Appended]]]) -> None:
        appends = [append for append, _ in batch]
        try:
            answers = await attempts.append_tokens_many(self._pool, appends)
        except db.DISCONNECTS as exc:
            for _, future in batch:
                _settle(future, exc)
            return
        except Exception:
            # One chunk the database refuses must not take the others with it: write each
            # alone, so that only its own attempt sees the error.
            log.warning("token_batch_refused", size=len(batch), exc_info=True)
            for append, future in batch:
                try:
                    (answer,) = await attempts.append_tokens_many(self._pool, [append])
                except Exception as exc:
                    _settle(future, exc)
                else:
                    _settle(future, answer)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            _settle(future, answer)


def _settle(future: asyncio.Future[Appended], outcome: Appended | BaseException) -> None:
    if future.done():  # its attempt was cancelled while it waited
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
