"""A response's event stream over SSE: the job's log, read as every reader reads it (the table,
then the hub), told through `ResponseEvents`.

Frames carry `event:` and `data:` only. The SDKs resume by `starting_after`, not `Last-Event-ID`,
and their SSE decoder keeps a last event id across events, so after one `id:` line every
heartbeat's blank line would dispatch an empty event that the SDK fails to parse as JSON. For
the same reason no `retry:` frame is sent.
"""

from __future__ import annotations

import orjson

from jobstream import sse
from jobstream.events import Event
from jobstream.server.state import AppState
from jobstream.server.stream_slots import Slot
from jobstream.server.tail_stream import TailStream
from jobstream.server.v1.mapping import ResponseEvent, ResponseEvents
from jobstream.server.v1.objects import Head


class ResponseStream(TailStream):
    """The events numbered after `starting_after` (-1: all), live until the job ends."""

    def __init__(
        self,
        app: AppState,
        head: Head,
        *,
        last_seq: int,
        live: bool,
        slot: Slot,
        starting_after: int = -1,
    ) -> None:
        # From the log's start whatever the cursor: an event's numbering depends on what came
        # before it (mapping.py).
        super().__init__(app, head.job_id, 0, last_seq=last_seq, live=live, slot=slot)
        self._told = ResponseEvents(head, starting_after=starting_after)

    def chunk(self, batch: list[Event]) -> bytes:
        # One write per batch, as for /api's streams.
        return b"".join([_frame(out) for event in batch for out in self._told.feed(event)])

    def told_the_end(self) -> bool:
        return self._told.ended


def _frame(event: ResponseEvent) -> bytes:
    return sse.frame(event["type"], orjson.dumps(event).decode())
