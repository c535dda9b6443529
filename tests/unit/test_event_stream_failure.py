"""An SSE response whose body loses PostgreSQL (a restart) ends cleanly and says so as a warning;
any other failure of the body is an error."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, MutableMapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from jobstream.server.event_stream import EventStream

Message = MutableMapping[str, Any]


async def _serve(failure: Exception) -> tuple[list[Message], list[Message]]:
    async def body() -> AsyncGenerator[bytes, None]:
        yield b"data: first\n\n"
        raise failure

    sent: list[Message] = []
    client_left = asyncio.Event()

    async def receive() -> Message:
        await client_left.wait()  # the client stays until the response ends
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    stream = EventStream(body(), heartbeat_s=30)
    with capture_logs() as logs:
        async with asyncio.timeout(5):
            await stream({"type": "http", "method": "GET"}, receive, send)
    return sent, logs


@pytest.mark.parametrize("lost", [ConnectionRefusedError(111, "Connection refused"), OSError()])
async def test_a_lost_database_ends_the_stream_with_a_warning(lost: Exception) -> None:
    sent, logs = await _serve(lost)
    assert [m.get("body") for m in sent[1:]] == [b"data: first\n\n", b""]
    assert sent[-1]["more_body"] is False
    assert [(e["event"], e["log_level"]) for e in logs] == [("stream_database_lost", "warning")]


async def test_any_other_failure_of_the_body_is_an_error() -> None:
    sent, logs = await _serve(ValueError("a bug"))
    assert sent[-1]["more_body"] is False
    assert [(e["event"], e["log_level"]) for e in logs] == [("stream_failed", "error")]
