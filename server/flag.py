"""A set-once flag for the per-stream signals: what asyncio.Event does, at a tenth of the memory.

Every asyncio.Event allocates a deque for its waiters up front (about 760 bytes with its first
block), and each open SSE stream held three of them (its stop, its subscription's wake-up and end);
a stream that waits on one also needed a task of its own to do so. A Flag keeps its waiters and
callbacks in a list made on first use, and a callback wakes whoever needs it without a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from jobstream.event_loop import running_loop


class Flag:
    """Set once, never cleared; awaitable, or told to call back when set."""

    __slots__ = ("_callbacks", "_set")

    def __init__(self) -> None:
        self._set = False
        self._callbacks: list[Callable[[], object]] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            callback()

    def add_callback(self, callback: Callable[[], object]) -> None:
        """Call `callback` once the flag is set (at once if it is)."""
        if self._set:
            callback()
            return
        if self._callbacks is None:
            self._callbacks = []
        self._callbacks.append(callback)

    def remove_callback(self, callback: Callable[[], object]) -> None:
        if self._callbacks is not None and callback in self._callbacks:
            self._callbacks.remove(callback)

    async def wait(self) -> bool:
        if self._set:
            return True
        waiter = running_loop().create_future()

        def wake() -> None:
            if not waiter.done():
                waiter.set_result(None)

        self.add_callback(wake)
        try:
            await waiter
        finally:
            self.remove_callback(wake)
        return True


# What a stream may be stopped by: a Flag, or (for callers that made one) an asyncio.Event.
Stop = Flag | asyncio.Event
