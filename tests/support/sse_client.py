"""An SSE client for the tests, on jobstream.sse's parser: what a browser's EventSource sees."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from jobstream import sse

SSE_HEADERS = {"Accept": "text/event-stream"}


@dataclass
class Received:
    """What one connection delivered."""

    status: int
    headers: httpx.Headers
    events: list[dict[str, Any]] = field(default_factory=list)  # each event's data, parsed
    ids: list[str | None] = field(default_factory=list)  # the SSE id of each event
    comments: list[str] = field(default_factory=list)
    retry_ms: int | None = None
    first_item: sse.Item | None = None
    ended: bool = False  # the server ended the response (we did not hang up)

    @property
    def last_id(self) -> str | None:
        return self.ids[-1] if self.ids else None


async def read_stream(
    client: httpx.AsyncClient,
    url: str,
    *,
    last_event_id: str | None = None,
    max_events: int | None = None,
    headers: dict[str, str] | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Received:
    """Read until the server ends the stream, or hang up after `max_events` events."""
    request_headers = {**SSE_HEADERS, **(headers or {})}
    if last_event_id is not None:
        request_headers["Last-Event-ID"] = last_event_id
    async with client.stream("GET", url, headers=request_headers) as response:
        got = Received(response.status_code, response.headers)
        if response.status_code != 200:
            await response.aread()
            return got
        async for item in sse.items(response):
            if got.first_item is None:
                got.first_item = item
            if isinstance(item, sse.Retry):
                got.retry_ms = item.ms
            elif isinstance(item, sse.Comment):
                got.comments.append(item.text)
            else:
                data = orjson.loads(item.data)
                assert data["type"] == item.event, (item.event, data)
                got.events.append(data)
                got.ids.append(item.id)
                if on_event is not None:
                    on_event(data)
                if max_events is not None and len(got.events) >= max_events:
                    return got
        got.ended = True
        return got


def reassemble(events: list[dict[str, Any]]) -> str:
    """docs/design.md: start empty; on reset clear; on token append."""
    text = ""
    for event in events:
        if event["type"] == "reset":
            text = ""
        elif event["type"] == "token":
            text += event["text"]
    return text
