"""How an attempt ends, delivered through one inbox to its runner's single loop.

The provider pump, the lease renewals and the worker each post here, and so does a token write
of the worker's writer that was fenced (worker/token_pull.py). The pump's deltas go to the
attempt's coalescer instead, where the writer takes them; a write in doubt wakes the runner,
which then writes by itself. The runner settles the outcome only once no write of its text is
in flight, so a token write never races a status change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from jobstream.event_loop import running_loop
from jobstream.worker.failure import Failure


@dataclass(frozen=True)
class StreamEnded:
    """The job's code (the built-in job's provider stream) finished; `output` is its
    validated structured result, if its definition has an output model."""

    output: object = None


@dataclass(frozen=True)
class StreamFailed:
    failure: Failure


@dataclass(frozen=True)
class CancelRequested:
    """The job row says `cancelling`: a client asked to stop it."""


@dataclass(frozen=True)
class LeaseLost:
    """Another attempt, a cancel or the reaper owns the job now: stop without writing."""

    reason: str


@dataclass(frozen=True)
class Interrupted:
    """The worker is shutting down: hand the job back to the queue."""


# How an attempt ends; the first of these to reach the runner wins.
Ending = StreamEnded | StreamFailed | CancelRequested | LeaseLost | Interrupted


class Inbox:
    """The attempt's endings in arrival order, for its one reader.

    A read takes every message that is waiting, and when none is, waits with at most one timer:
    an asyncio.Queue read under asyncio.timeout_at cost a timeout object and a queue hop per
    token, most of a streaming worker's time (issue 11).
    """

    def __init__(self) -> None:
        self._messages: list[Ending] = []
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, message: Ending) -> None:
        self._messages.append(message)
        self.wake()

    def wake(self) -> None:
        """End the reader's wait now, with whatever is waiting (maybe nothing): a token write
        went wrong and the runner is to write by itself. Nobody waiting: nothing to do, the
        reader looks before it waits."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def take(self, deadline: float | None = None) -> list[Ending]:
        """Every waiting message, oldest first; if none, the first to arrive and any sent with
        it. An empty list: `deadline` (loop time) passed first, or wake() was called."""
        if not self._messages:
            loop = running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if deadline is None else loop.call_at(deadline, _wake, waiter)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        messages, self._messages = self._messages, []
        return messages


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
