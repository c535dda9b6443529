"""A connection that never finishes a request head is closed (issue 9, defect 7).

uvicorn times a connection out only while it is idle after a response, and any byte cancels
that: a connection that stays silent from the start, or sends its head a byte at a time, was
never closed. server.connections.HeadDeadlineProtocol gives every request head a deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from jobstream.server import connections
from tests.support.http_server import serve

DEADLINE_S = 0.3
# Far past the deadline, short enough for a failing test to end soon.
CLOSED_WITHIN_S = 5.0
REQUEST = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


async def ok(request: Request) -> Response:
    return PlainTextResponse("ok")


async def slow(request: Request) -> Response:
    async def chunks() -> AsyncIterator[str]:
        # A response that outlasts the deadline several times over, as an SSE stream does.
        for n in range(5):
            await asyncio.sleep(DEADLINE_S / 2)
            yield f"{n} "

    return StreamingResponse(chunks(), media_type="text/plain")


@asynccontextmanager
async def server() -> AsyncIterator[tuple[str, int]]:
    app = Starlette(routes=[Route("/", ok), Route("/slow", slow)])
    protocol = connections.http_protocol(DEADLINE_S)
    async with serve(app, http=protocol, timeout_keep_alive=60) as url:
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)


async def until_closed(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection (fails past the deadline)."""
    async with asyncio.timeout(CLOSED_WITHIN_S):
        try:
            return await reader.read()
        except ConnectionResetError:
            return b""


async def test_a_silent_connection_is_closed_at_its_head_deadline() -> None:
    async with server() as (host, port):
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection(host, port)
        opened = loop.time()
        assert await until_closed(reader) == b""
        assert loop.time() - opened >= DEADLINE_S * 0.9  # at its deadline, not before
        writer.close()


async def test_a_head_sent_a_byte_at_a_time_is_closed_as_late_as_a_silent_one() -> None:
    async with server() as (host, port):
        reader, writer = await asyncio.open_connection(host, port)

        async def trickle() -> None:
            writer.write(b"GET / HTTP/1.1\r\nHost: test\r\n")
            while True:  # each header well within the deadline, the head never complete
                writer.write(b"X-More: a\r\n")
                await asyncio.sleep(DEADLINE_S / 5)

        trickling = asyncio.create_task(trickle())
        try:
            assert await until_closed(reader) == b""
        finally:
            trickling.cancel()
            await asyncio.gather(trickling, return_exceptions=True)
            writer.close()


async def test_a_response_longer_than_the_deadline_is_not_cut_and_the_next_head_is_timed() -> None:
    async with server() as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        # Chunked: the five chunks, then the last (empty) one.
        body = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), CLOSED_WITHIN_S)
        assert b"4 " in body
        # The connection is kept alive and serves the next request...
        writer.write(REQUEST)
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert await reader.readexactly(2) == b"ok"
        # ...but a next head that never ends is cut (uvicorn's keep-alive timer stops at its
        # first byte).
        writer.write(b"GET / HT")
        assert await until_closed(reader) == b""
        writer.close()


async def test_pipelined_requests_are_all_answered() -> None:
    async with server() as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET /slow HTTP/1.1\r\nHost: test\r\n\r\n" + REQUEST)
        answers = await asyncio.wait_for(reader.readuntil(b"\r\n\r\nok"), CLOSED_WITHIN_S)
        assert answers.count(b"HTTP/1.1 200") == 2
        writer.close()
