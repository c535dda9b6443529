"""One reader's bounded buffer of a job's new events, filled by the hub."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Literal

from jobstream.event_loop import running_loop
from jobstream.events import Event
from jobstream.server.flag import Flag, Stop

# Why a subscription ended before its reader let go of it.
CloseReason = Literal["overflow", "shutdown", "gone", "error", "released"]


class SubscriptionClosed(Exception):
    def __init__(self, reason: CloseReason) -> None:
        super().__init__(reason)
        self.reason: CloseReason = reason


class Subscription:
    """Events of one job, in seq order, as the hub reads them; at most `limit` held at once.

    A reader that falls `limit` events behind is closed with reason "overflow" instead of
    buffering without bound: its stream ends and the client resumes from its cursor.

    A server holds one per open stream, most of them idle: the buffer is a list and the reader's
    wake-up a future made only while it waits (a deque and an asyncio.Event cost 1.5 KiB).
    """

    __slots__ = ("_events", "_limit", "_release", "_waiter", "closed", "job_id", "reason")

    def __init__(
        self,
        job_id: uuid.UUID,
        limit: int,
        release: Callable[[Subscription], None],
        *,
        closed: Stop | None = None,
    ) -> None:
        self.job_id = job_id
        self._limit = limit
        self._release = release
        self._events: list[Event] = []
        self._waiter: asyncio.Future[None] | None = None
        # Set when the subscription ends for any reason; a stream races its sends against it,
        # and may hand in its own flag (or asyncio.Event) to learn of the end before it holds
        # the subscription.
        self.closed: Stop = closed if closed is not None else Flag()
        self.reason: CloseReason | None = None

    def offer(self, events: Sequence[Event]) -> bool:
        """Buffer `events`; False (and nothing buffered) when that would exceed the limit."""
        if self.reason is not None:
            return True
        if len(self._events) + len(events) > self._limit:
            return False
        self._events.extend(events)
        self._wake()
        return True

    def take(self) -> list[Event]:
        """Everything buffered, [] if nothing is (wait on `arrival`, then take again). Buffered
        events are handed out even after a close; then SubscriptionClosed."""
        batch = self._events
        if batch:
            self._events = []
            self._waiter = None
            return batch
        if self.reason is not None:
            raise SubscriptionClosed(self.reason)
        return batch

    def arrival(self) -> asyncio.Future[None]:
        """Done once events are buffered or the subscription ends. A future, awaited by the
        reader itself: a stream resumes through one frame less per batch (a thousand streams
        are woken twenty times a second each)."""
        waiter = self._waiter
        if waiter is None or waiter.cancelled():  # a reader's wait was cut short (a timeout)
            waiter = self._waiter = running_loop().create_future()
            if self._events or self.reason is not None:
                waiter.set_result(None)
        return waiter

    def close(self, reason: CloseReason = "released") -> None:
        if self.reason is not None:
            return
        self.reason = reason
        self._wake()
        self.closed.set()
        self._release(self)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
