"""An SSE response that reads a job's log through a Tail and is its own body: what
`/api/jobs/{id}/events` (server/events_api.py) and `/v1/responses` (server/v1/stream.py) share;
each says only how a batch of events becomes bytes.

The body is an iterator of its own rather than an async generator: a live stream resumes
through it for every batch, twenty times a second with 1,000 streams, and a generator's resume
and suspend cost a fifth more (bench.sse_fanout_cost).
"""

from __future__ import annotations

import uuid

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from jobstream.events import Event
from jobstream.server import event_stream
from jobstream.server.event_stream import EventStream
from jobstream.server.flag import Flag, Stop
from jobstream.server.state import AppState
from jobstream.server.stream_slots import Slot
from jobstream.server.subscription import SubscriptionClosed
from jobstream.server.tail import Tail


class TailStream(Response):
    """The events after `cursor`, one chunk a batch the tail gives, following the job if `live`,
    until the log's `done` (or `ended` says so) or the end of the subscription (cut off, or the
    server stopping: the client resumes).

    `slot` is the stream's place in its tenant's count (server/stream_slots.py), taken by the
    handler that returns this response and released when it has been served, however it ends.
    """

    stream_headers: tuple[tuple[bytes, bytes], ...] = event_stream.HEADERS

    def __init__(  # no super().__init__: nothing of a buffered Response applies to a stream
        self,
        app: AppState,
        job_id: uuid.UUID,
        cursor: int,
        *,
        last_seq: int,
        live: bool,
        slot: Slot,
        send_timeout_s: float | None = None,
    ) -> None:
        self._app = app
        self._slot = slot
        self._job_id = job_id
        self._cursor = cursor
        self._last_seq = last_seq
        self._live = live
        self._send_timeout_s = send_timeout_s
        # A live stream ends when its subscription does (cut off, or the server stopping); a
        # replay of a finished job follows nothing, so it ends when the server stops.
        self._stop: Stop = Flag() if live else app.hub.stopping
        self._tail: Tail | None = None  # once the body has started
        self._ended = False

    # --- what a kind of stream says ---

    def opening(self) -> bytes | None:
        """The first chunk, before any event (None: none)."""
        return None

    def chunk(self, batch: list[Event]) -> bytes:
        """A batch of events as one write (b"": nothing of it is sent)."""
        raise NotImplementedError

    def told_the_end(self) -> bool:
        """The stream has said its last, whatever the log holds after."""
        return False

    def cut_short(self) -> bytes | None:
        """The last chunk of a stream that ends before it told the end: its subscription was
        cut off, or the server is stopping (None: nothing; a client of the job's own events
        resumes from its cursor by itself)."""
        return None

    # --- the response ---

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = EventStream(
            self,
            heartbeat_s=self._app.settings.sse_heartbeat_s,
            stop=self._stop,
            send_timeout_s=self._send_timeout_s,
            headers=self.stream_headers,
        )
        try:
            await self._app.serve_stream(response, scope, receive, send)
        finally:
            self._slot.release()

    # --- the body ---

    def __aiter__(self) -> TailStream:
        return self

    async def __anext__(self) -> bytes:
        tail = self._tail
        if tail is None:
            app = self._app
            tail = self._tail = await Tail.open(
                app.hub, app.pool, self._job_id, self._cursor, last_seq=self._last_seq,
                follow=self._live, closed=self._stop,
            )  # fmt: skip
            opening = self.opening()
            if opening is not None:
                return opening
        while not self._ended:
            try:
                batch = await tail.next()
            except SubscriptionClosed:
                break
            if not batch:
                break
            chunk = self.chunk(batch)
            self._ended = self.told_the_end() or tail.finished(batch)
            if chunk:
                return chunk
        if not self._ended:
            self._ended = True
            last = self.cut_short()
            if last:
                return last
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self._ended = True
        if self._tail is not None:
            self._tail.close()
