"""A response's event stream over SSE: the job's log, read as every reader reads it (the table,
then the hub), told through `ResponseEvents`.

Frames carry `event:` and `data:` only. The SDKs resume by `starting_after`, not `Last-Event-ID`,
and their SSE decoder keeps a last event id across events, so after one `id:` line every
heartbeat's blank line would dispatch an empty event that the SDK fails to parse as JSON. For
the same reason no `retry:` frame is sent.
"""

from __future__ import annotations

import asyncio
import uuid

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from jobstream import sse
from server.event_stream import EventStream
from server.state import AppState
from server.subscription import SubscriptionClosed
from server.tail import Tail
from server.v1.mapping import ResponseEvent, ResponseEvents
from server.v1.objects import Head


class ResponseStream(Response):
    """The events numbered after `starting_after` (-1: all), live until the job ends."""

    def __init__(  # no super().__init__: nothing of a buffered Response applies to a stream
        self,
        app: AppState,
        head: Head,
        *,
        last_seq: int,
        live: bool,
        starting_after: int = -1,
    ) -> None:
        self._app = app
        self._job_id: uuid.UUID = head.job_id
        self._last_seq = last_seq
        self._live = live
        # As for /api/jobs/{id}/events: a live stream ends with its subscription; a replay of a
        # finished job follows nothing and ends when the server stops.
        self._stop = asyncio.Event() if live else app.hub.stopping
        self._tail: Tail | None = None  # once the body has started
        self._told = ResponseEvents(head, starting_after=starting_after)
        self._ended = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        heartbeat_s = self._app.settings.sse_heartbeat_s
        response = EventStream(self, heartbeat_s=heartbeat_s, stop=self._stop)
        await self._app.serve_stream(response, scope, receive, send)

    # --- the body: an iterator of its own, as /api's streams (server/events_api.py says why) ---

    def __aiter__(self) -> ResponseStream:
        return self

    async def __anext__(self) -> bytes:
        tail = self._tail or await self._start()
        while not self._ended:
            try:
                batch = await tail.next()
            except SubscriptionClosed:
                batch = []  # cut off, or the server is stopping: the client resumes
            if not batch:
                break
            frames = [_frame(out) for event in batch for out in self._told.feed(event)]
            self._ended = self._told.ended or tail.finished(batch)
            if frames:
                return b"".join(frames)  # one write per batch, as for /api's streams
        self._ended = True
        raise StopAsyncIteration

    async def _start(self) -> Tail:
        app = self._app
        # From the log's start whatever the cursor: an event's numbering depends on what came
        # before it (mapping.py).
        tail = self._tail = await Tail.open(
            app.hub, app.pool, self._job_id, 0, last_seq=self._last_seq, follow=self._live,
            closed=self._stop,
        )  # fmt: skip
        return tail

    async def aclose(self) -> None:
        self._ended = True
        if self._tail is not None:
            self._tail.close()


def _frame(event: ResponseEvent) -> bytes:
    return sse.frame(event["type"], orjson.dumps(event).decode())
