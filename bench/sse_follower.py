"""One SSE follower of bench_streams_at_scale: a raw socket that notes when each chunk arrives
and parses what it read only after the run, so that the followers cost the machine (whose two
cores the worker, server and PostgreSQL under test share) as little as a client can."""

from __future__ import annotations

import asyncio
import time

import orjson

from jobstream import sse


class SseFollower(asyncio.Protocol):
    """One SSE client on a raw HTTP/1.0 socket (no chunked framing to undo, nothing buffered),
    noting when each chunk arrives and parsing them after the run: the followers share the
    machine's two cores with the worker, server and PostgreSQL under test. Parsing 50,000 deltas
    a second as they came took 37 % of a core, reading them through asyncio streams still 21 %;
    a protocol that only notes what arrives, 15 % (httpx would cost more than the server)."""

    def __init__(self, port: int, job_id: str, first: asyncio.Event) -> None:
        self._port = port
        self._job_id = job_id
        self._first = first
        self._head: asyncio.Future[bytes] | None = None
        self._ended: asyncio.Future[None] | None = None
        self._rest = b""  # bytes read before the head was complete
        # (bytes read, arrival on CLOCK_MONOTONIC and on the wall clock)
        self._chunks: list[tuple[bytes, float, float]] = []
        # (delta text, its arrival on both clocks, its event's `at`), once parsed
        self.arrivals: list[tuple[str, float, float, str]] = []
        self.exact = False

    async def open(self, gate: asyncio.Semaphore) -> None:
        loop = asyncio.get_running_loop()
        self._head, self._ended = loop.create_future(), loop.create_future()
        async with gate:
            transport, _ = await loop.create_connection(lambda: self, "127.0.0.1", self._port)
            transport.write(
                f"GET /api/jobs/{self._job_id}/events HTTP/1.0\r\nHost: 127.0.0.1\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            head = await self._head
            if b" 200 " not in head.split(b"\r\n")[0]:
                raise RuntimeError(f"follower of {self._job_id}: {head[:80]!r}")

    async def read(self) -> None:
        """Until the server ends the stream (after the job's `done`)."""
        assert self._ended is not None
        await self._ended

    def data_received(self, data: bytes) -> None:
        if self._head is not None and not self._head.done():
            self._rest += data
            head, found, body = self._rest.partition(b"\r\n\r\n")
            if not found:
                return
            self._head.set_result(head)
            data = body
            if not data:
                return
        self._chunks.append((data, time.monotonic(), time.time()))
        if not self._first.is_set() and b"event: token" in data:
            self._first.set()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head is not None and not self._head.done():
            self._head.set_exception(exc or ConnectionError("closed before the head"))
        if self._ended is not None and not self._ended.done():
            if exc is None:
                self._ended.set_result(None)
            else:
                self._ended.set_exception(exc)

    def parse(self) -> None:
        """Turn the chunks read into arrivals, and check the text against the result."""
        parser = sse.Parser()
        text: list[str] = []
        for chunk, at, wall_at in self._chunks:
            for item in parser.feed(chunk.decode()):
                if not isinstance(item, sse.Message):
                    continue
                event = orjson.loads(item.data)
                if item.event == "token":
                    text.append(event["text"])
                    # One token event carries every delta of one flush: "12 13 14 ".
                    written = event["at"]
                    self.arrivals += [
                        (t + " ", at, wall_at, written) for t in event["text"].split(" ")[:-1]
                    ]
                elif item.event == "reset":
                    text.clear()
                elif item.event == "done":
                    result = event.get("result") or {}
                    self.exact = "".join(text) == result.get("text")
                    return
