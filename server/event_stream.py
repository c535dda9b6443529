"""An SSE response: the body pumped to the socket, raced against its ends.

We frame SSE ourselves (jobstream/sse.py, shared with the client-side parser) rather than use
sse-starlette's EventSourceResponse: measured on one uvicorn with the same idle body, each of its
streams held 39 KiB against 16 KiB here (an anyio task group of four tasks with their cancel
scopes), past the 20 KiB a stream one server process is allowed for 10,000 of them; and importing
it replaces uvicorn's `Server.handle_exit` for the whole process. What it would bring is here: a
heartbeat comment (its ping), a send timeout for clients that stopped reading, the headers proxies
need, and a per-app stop that also aborts a send blocked on such a client (docs/architecture.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine
from typing import Any, Protocol

import structlog
from starlette.types import Receive, Scope, Send

from jobstream import db, sse
from jobstream.event_loop import running_loop
from jobstream.server.flag import Flag, Stop

log = structlog.get_logger(__name__)

HEADERS = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    # no-transform: a proxy or CDN must not compress or rewrite the stream (gzip holds bytes
    # back until a block fills); no-cache: nothing may answer from a cached copy.
    (b"cache-control", b"no-cache, no-transform"),
    # nginx and friends buffer responses by default; a token stream must not wait in a proxy.
    (b"x-accel-buffering", b"no"),
)
# After a stop, how long the final (empty) chunk may take: a stalled client gets no more.
FINISH_TIMEOUT_S = 1.0


class Body(Protocol):
    """The chunks a stream sends: an async generator, or an iterator of its own; `aclose` runs
    its cleanup (a subscription released) however the stream ends."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    def __anext__(self) -> Awaitable[bytes]: ...

    async def aclose(self) -> None: ...


class EventStream:
    """Send `body`'s chunks as they come, with a heartbeat comment whenever the stream has been
    idle for `heartbeat_s`; end when the body ends, the client leaves, `stop` is set, or a send
    has not gone through `send_timeout_s` after it began (a client that stopped reading).

    Ten thousand of these may be open on one process, nearly all idle, so a stream holds one task
    besides the request's own: the pump, sending the body's chunks. The request's task waits for
    the client to leave, sends the heartbeats, and is woken from that wait (its cancel scope
    rescheduled to now) when the pump ends, `stop` is set, or a heartbeat or stall check is due.
    The stall check runs on the heartbeat's clock: a stalled send is seen at most
    `min(heartbeat_s, send_timeout_s)` after its timeout, at no cost to the sends that go through.
    """

    __slots__ = (
        "_body", "_ended", "_headers", "_heartbeat_s", "_last_send", "_lock", "_scope",
        "_send_timeout_s", "_sending_since", "_stop", "_tick_s", "stalled",
    )  # fmt: skip

    def __init__(
        self,
        body: Body,
        *,
        heartbeat_s: float,
        stop: Stop | None = None,
        send_timeout_s: float | None = None,
        headers: tuple[tuple[bytes, bytes], ...] = HEADERS,
    ) -> None:
        self._body = body
        self._headers = headers
        self._heartbeat_s = heartbeat_s
        self._send_timeout_s = send_timeout_s
        self._tick_s = min(heartbeat_s, send_timeout_s or heartbeat_s)
        self._stop: Stop = stop if stop is not None else Flag()
        self._last_send = time.monotonic()
        self._sending_since: float | None = None  # when the send under way began
        self._lock = asyncio.Lock()
        self._ended = False  # the pump ended, or stop was set
        self._scope: asyncio.Timeout | None = None  # the request task's current wait
        self.stalled = False  # ended because a send did not go through in time

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        if scope.get("method") == "HEAD":
            await self._body.aclose()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        pump = _task(self._pump(send), "sse-pump")
        pump.add_done_callback(self._end)
        # A Flag calls back; an asyncio.Event handed in by a caller needs a task to wait on it.
        waiter = None
        if isinstance(self._stop, Flag):
            self._stop.add_callback(self._end)
        else:
            waiter = _task(self._stop.wait(), "sse-stop")
            waiter.add_done_callback(self._end)
        client_gone = False
        try:
            client_gone = await self._watch(receive, send)
        finally:
            if isinstance(self._stop, Flag):
                self._stop.remove_callback(self._end)
            racers = [task for task in (pump, waiter) if task is not None]
            for task in racers:
                task.cancel()
            await asyncio.gather(*racers, return_exceptions=True)
            # Runs the body's cleanup (its subscription is released) even if a send was blocked.
            await self._body.aclose()
        failure = None if pump.cancelled() else pump.exception()
        if isinstance(failure, db.DISCONNECTS):
            # PostgreSQL went away (a restart): the log is durable, and the client resumes from
            # its last id once it reconnects. Not a failure of ours.
            log.warning("stream_database_lost", error=repr(failure))
        elif failure is not None:
            log.error("stream_failed", exc_info=failure)
        if client_gone:
            return  # nobody to finish the response for
        try:
            async with asyncio.timeout(FINISH_TIMEOUT_S):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            # The client stopped reading; returning unfinished makes uvicorn close the socket.
            log.info("stream_abandoned")

    async def _watch(self, receive: Receive, send: Send) -> bool:
        """Wait for the client to leave (True) or the stream to end (False), sending heartbeats
        and checking for a stalled send meanwhile."""
        while not self._ended:
            now = time.monotonic()
            if self._stalled(now):
                self.stalled = True
                log.info("stream_stalled", send_timeout_s=self._send_timeout_s)
                return False
            beat = self._sending_since is None and now >= self._last_send + self._heartbeat_s
            wake_in = self._tick_s
            if not beat and self._sending_since is None:
                wake_in = min(wake_in, self._last_send + self._heartbeat_s - now)
            try:
                async with asyncio.timeout(wake_in) as waiting:
                    self._scope = waiting
                    if beat:
                        # Comments keep proxies and load balancers from closing an idle stream,
                        # and let a client tell a quiet job from a dead connection.
                        await self._send(send, sse.comment("heartbeat"))
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    return True
            except TimeoutError:
                pass  # woken: the stream ended, or a heartbeat or stall check is due
            finally:
                self._scope = None
        return False

    def _end(self, _: object = None) -> None:
        self._ended = True
        waiting = self._scope
        if waiting is not None and not waiting.expired():
            waiting.reschedule(running_loop().time())

    def _stalled(self, now: float) -> bool:
        since, limit = self._sending_since, self._send_timeout_s
        return since is not None and limit is not None and now - since >= limit

    async def _send(self, send: Send, chunk: bytes) -> None:
        # acquire and release, not `async with`: two coroutines less a frame sent.
        lock = self._lock
        await lock.acquire()
        try:
            self._sending_since = time.monotonic()
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._sending_since = None
            self._last_send = time.monotonic()
        finally:
            lock.release()

    async def _pump(self, send: Send) -> None:
        async for chunk in self._body:
            await self._send(send, chunk)


def _task(coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
    return asyncio.create_task(coro, name=name)
