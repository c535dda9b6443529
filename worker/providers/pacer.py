"""The simulated provider's pauses between tokens: many streams' sleeps on one timer.

A thousand simulated streams at 50 tokens a second slept 50,000 times a second, each
asyncio.sleep a timer of the event loop's own: the largest line of a streaming worker's profile
(39 % of its samples), time spent simulating the provider it measures. Here sleepers due in the
same tick (TICK_S) wait on one timer and wake together: 1,000 sleepers x 100 sleeps under uvloop
took 5.0-6.1 µs of CPU a sleep instead of 7.1-9.1 (runs an hour apart). A sleeper wakes at the tick
nearest its time, at most half a tick early or late and on time on average, so that a stream's
rate holds (rounding up added half a tick to every pause: a stream of 1,000 tokens a second at
2 ms ticks ran at half its rate).
"""

from __future__ import annotations

import asyncio
import heapq
import math

from jobstream.event_loop import running_loop

TICK_S = 0.001  # uvloop's own timers are whole milliseconds


class Pacer:
    """Sleeps of one event loop's tasks, woken a tick at a time by one timer."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self._tick_s = tick_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[int, list[asyncio.Future[None]]] = {}
        self._ticks: list[int] = []  # a heap of the keys of _waiting
        self._timer: asyncio.TimerHandle | None = None
        self._timer_tick = 0

    def sleep(self, seconds: float) -> asyncio.Future[None]:
        """Awaitable: wakes at the tick nearest `seconds` from now. A future, not a coroutine,
        so that a sleeping stream resumes through one frame less (a thousand streams sleep
        50,000 times a second)."""
        loop = running_loop()
        if loop is not self._loop:
            # A provider outlives an event loop in tests: what waited on the last one is gone.
            self._loop, self._waiting, self._ticks, self._timer = loop, {}, [], None
        tick = round((loop.time() + seconds) / self._tick_s)
        waiters = self._waiting.get(tick)
        if waiters is None:
            waiters = self._waiting[tick] = []
            heapq.heappush(self._ticks, tick)
            if self._timer is None or tick < self._timer_tick:
                self._arm(loop, tick)
        woken: asyncio.Future[None] = loop.create_future()
        waiters.append(woken)
        return woken  # a cancelled sleeper's future is cancelled: the tick passes it by

    def _arm(self, loop: asyncio.AbstractEventLoop, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_tick = tick
        self._timer = loop.call_at(tick * self._tick_s, self._fire, loop)

    def _fire(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        # The tick this timer was for, and any other already past (a loop may run a timer a
        # little early, or late).
        due = max(self._timer_tick, math.floor(loop.time() / self._tick_s))
        while self._ticks and self._ticks[0] <= due:
            for woken in self._waiting.pop(heapq.heappop(self._ticks)):
                if not woken.done():
                    woken.set_result(None)
        if self._ticks:
            self._arm(loop, self._ticks[0])
