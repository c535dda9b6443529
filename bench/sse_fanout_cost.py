"""The server's CPU a frame on its live SSE path, from the hub's offer to the ASGI send.

    .venv/bin/python -m bench.sse_fanout_cost

1,000 live streams of /api/jobs/{id}/events (the real response, subscription, tail and
EventStream), each offered one token event a round by a hub stand-in, every round until every
stream has sent its frame; the send is a no-op, so the socket write (~12 µs a frame on the
development VM: bench.loopback_send) and the hub's read are not in the figure. What it shows is
the Python between them, the event's frame included: 13-14 µs a frame on the development VM
(2026-12-03), where a loop that only takes the buffer, builds the frame and sends it took ~6
(docs/streams.md). Three runs, min / median / max; printed, never asserted.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import uvloop
from starlette.types import Message

from jobstream import heap
from jobstream.events import Event
from jobstream.server.event_stream import EventStream
from jobstream.server.events_api import _Stream
from jobstream.server.flag import Stop
from jobstream.server.state import AppState
from jobstream.server.stream_slots import StreamSlots
from jobstream.server.subscription import Subscription
from jobstream.settings import Settings

STREAMS = 1000
ROUNDS = 400
RUNS = 3


class _Hub:
    """Subscribes at once and keeps the subscriptions, for the rounds to offer to."""

    def __init__(self) -> None:
        self.subs: list[Subscription] = []
        self.stopping = asyncio.Event()

    async def subscribe(self, job_id: uuid.UUID, *, closed: Stop | None = None) -> Subscription:
        sub = Subscription(job_id, 100, lambda _: None, closed=closed)
        self.subs.append(sub)
        return sub


class _Pool:
    """A log with nothing in it yet: the tail's first read finds no event."""

    async def fetch(self, *args: object) -> list[Any]:
        return []


@dataclass
class _App:
    settings: Settings
    hub: _Hub
    pool: _Pool

    async def serve_stream(self, stream: EventStream, scope: Any, receive: Any, send: Any) -> None:
        await stream(scope, receive, send)


async def one_run() -> float:
    """µs of CPU a frame sent."""
    loop = asyncio.get_running_loop()
    # No heartbeat within the run: only the events' frames are counted and timed.
    app = _App(Settings.from_env().replace(sse_heartbeat_s=3600.0), _Hub(), _Pool())
    sent = 0
    target = 0
    all_sent: asyncio.Future[None] = loop.create_future()

    async def send(message: Message) -> None:
        nonlocal sent
        if message.get("more_body"):
            sent += 1
            if sent >= target and not all_sent.done():
                all_sent.set_result(None)

    never: asyncio.Future[Message] = loop.create_future()

    async def receive() -> Message:
        return await never

    scope = {"type": "http", "method": "GET"}
    state = cast(AppState, app)
    slots = StreamSlots(STREAMS)  # each stream takes one, as a handler does, once
    streams = [
        asyncio.ensure_future(
            _Stream(state, uuid.uuid4(), 0, 0, True, slots.take("default"))(scope, receive, send)
        )
        for _ in range(STREAMS)
    ]
    target = STREAMS  # each stream's `retry` frame: every stream is live
    await all_sent
    at = datetime.now(UTC)
    started = time.process_time()
    for seq in range(1, ROUNDS + 1):
        target = sent + STREAMS
        all_sent = loop.create_future()
        for sub in app.hub.subs:
            sub.offer([Event(seq, "token", 1, {"text": f"{seq} "}, at)])
        await all_sent
    spent = time.process_time() - started
    for stream in streams:
        stream.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    return spent / (STREAMS * ROUNDS) * 1e6


async def _main() -> None:
    runs = [await one_run() for _ in range(RUNS)]
    print(
        f"sse_fanout_cost: {STREAMS:,} live streams x {ROUNDS} events, a no-op send:"
        f" {min(runs):.2f} / {statistics.median(runs):.2f} / {max(runs):.2f} µs of CPU a frame"
        " (min / median / max)"
    )


def main() -> None:
    # The heap as `python -m server` sets it (jobstream/heap.py): with CPython's default young
    # collections a fifth of the figure was the collector's.
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    uvloop.run(_main())


if __name__ == "__main__":
    main()
