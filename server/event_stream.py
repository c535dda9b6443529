"""An SSE response: a small race of tasks, the first to finish ends the rest.

We frame SSE ourselves rather than use sse-starlette's EventSourceResponse: importing it patches
uvicorn's signal handling process-wide and ends streams through a process-global flag polled every
half second, while we need a per-app stop (shutdown, or a subscriber cut off for falling behind)
that also aborts a send blocked on a client that stopped reading. The framing itself is a few
lines (jobstream/sse.py), shared with the client-side parser.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Coroutine
from typing import Any

import structlog
from starlette.types import Receive, Scope, Send

from jobstream import sse

log = structlog.get_logger(__name__)

HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # nginx and friends buffer responses by default; a token stream must not wait in a proxy.
    (b"x-accel-buffering", b"no"),
)
# After a stop, how long the final (empty) chunk may take: a stalled client gets no more.
FINISH_TIMEOUT_S = 1.0


class EventStream:
    """Send `body`'s chunks as they come, with a heartbeat comment whenever the stream has been
    idle for `heartbeat_s`; end when the body ends, the client leaves or `stop` is set."""

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        *,
        heartbeat_s: float,
        stop: asyncio.Event | None = None,
    ) -> None:
        self._body = body
        self._heartbeat_s = heartbeat_s
        self._stop = stop or asyncio.Event()
        self._last_send = time.monotonic()
        self._lock = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        if scope.get("method") == "HEAD":
            await self._body.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        racers = [
            _task(self._pump(send), "sse-pump"),
            _task(self._heartbeat(send), "sse-heartbeat"),
            _task(_disconnected(receive), "sse-disconnect"),
            _task(self._stop.wait(), "sse-stop"),
        ]
        try:
            finished, _ = await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in racers:
                task.cancel()
            await asyncio.gather(*racers, return_exceptions=True)
            # Runs the body's cleanup (its subscription is released) even if a send was blocked.
            await self._body.aclose()
        for task in finished:
            if not task.cancelled() and task.exception() is not None:
                log.error("stream_failed", exc_info=task.exception())
        if racers[2] in finished:
            return  # the client is gone: nobody to finish the response for
        try:
            async with asyncio.timeout(FINISH_TIMEOUT_S):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            # The client stopped reading; returning unfinished makes uvicorn close the socket.
            log.info("stream_abandoned")

    async def _send(self, send: Send, chunk: bytes) -> None:
        async with self._lock:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._last_send = time.monotonic()

    async def _pump(self, send: Send) -> None:
        async for chunk in self._body:
            await self._send(send, chunk)

    async def _heartbeat(self, send: Send) -> None:
        # Comments keep proxies and load balancers from closing an idle stream, and let a client
        # tell a quiet job from a dead connection.
        while True:
            idle = time.monotonic() - self._last_send
            if idle >= self._heartbeat_s:
                await self._send(send, sse.comment("heartbeat"))
            else:
                await asyncio.sleep(self._heartbeat_s - idle)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _task(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    return asyncio.create_task(coro, name=name)
