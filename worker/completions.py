"""Successes of a worker's attempts, written together: one statement and one commit at a time.

A busy worker's attempts end many at a time, and each success alone is a commit of its own.
Here an attempt hands over its success and waits; one writer task writes whatever arrived while
its previous writes were in flight (group commit without a timer: an idle worker writes at once).
Two writes may be under way at once, so that a worker's attempts do not move in lockstep waves
(claim all, run all, write all): in a drain of no-op jobs that took 55 ms from claim to write,
36 ms with two.
The statement is fenced per attempt (queries.SUCCEED_ATTEMPTS): a fenced-out attempt learns it
from its own answer and does not fail the others.
"""

from __future__ import annotations

import asyncio

import asyncpg
import structlog

from jobstream import attempts, db
from jobstream.attempts import Success
from jobstream.clock import Clock
from jobstream.errors import Fenced

log = structlog.get_logger(__name__)

# The most successes one statement writes; more wait for the next.
MAX_BATCH = 64
# Writes under way at once: while one commits, the next batch is already on its way.
WRITES_IN_FLIGHT = 2


class Completions:
    def __init__(self, pool: asyncpg.Pool, clock: Clock) -> None:
        self._pool = pool
        self._clock = clock
        self._pending: list[tuple[Success, asyncio.Future[bool]]] = []
        self._arrived = asyncio.Event()

    async def accept(self, success: Success) -> None:
        """Write this success with the others of its tick; raises Fenced, or the database's
        error (a lost connection: the write is in doubt, and the fence makes a retry safe)."""
        landed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((success, landed))
        self._arrived.set()
        if not await landed:
            raise Fenced(f"job {success.held.job_id}: not running under this attempt")

    async def run(self) -> None:
        """The writer: until cancelled, write what is pending, up to WRITES_IN_FLIGHT batches at
        a time (each on its own connection: PostgreSQL runs them side by side)."""
        in_flight: set[asyncio.Task[None]] = set()
        room = asyncio.Semaphore(WRITES_IN_FLIGHT)
        try:
            while True:
                await self._arrived.wait()
                await room.acquire()
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                if not self._pending:
                    self._arrived.clear()
                if not batch:
                    room.release()
                    continue
                write = self._write([s for s, _ in batch], [f for _, f in batch])
                task = asyncio.create_task(write, name=f"completions-write:{len(batch)}")
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                task.add_done_callback(lambda _: room.release())
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _write(self, successes: list[Success], waiting: list[asyncio.Future[bool]]) -> None:
        try:
            landed = await attempts.accept_many(self._pool, successes, self._clock)
        except db.DISCONNECTS as exc:
            for future in waiting:
                _settle(future, exc)
            return
        except Exception:
            # One item the database refuses must not take the others with it: write each alone,
            # so that only its own attempt sees the error.
            log.warning("success_batch_refused", size=len(successes), exc_info=True)
            for success, future in zip(successes, waiting, strict=True):
                try:
                    _settle(
                        future,
                        bool(await attempts.accept_many(self._pool, [success], self._clock)),
                    )
                except Exception as exc:
                    _settle(future, exc)
            return
        for i, future in enumerate(waiting):
            _settle(future, i in landed)


def _settle(future: asyncio.Future[bool], outcome: bool | BaseException) -> None:
    if future.done():  # its attempt was cancelled while it waited
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
