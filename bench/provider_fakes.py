"""The providers' loopback fakes for bench.bench_providers, in a process of their own.

    python -m bench.provider_fakes --tokens N [--live]

Prints `{"openai": base_url, "anthropic": base_url}` on its first line and serves until SIGTERM.

The fakes are the tests' own (tests/support/fake_openai, tests/support/fake_anthropic.py), driven
as the tests drive them: the same keys, a reply of N tokens for every request. Each runs here on a
port of its own, and the worker is given a replaying front instead: the first request of a kind
(its request line, key and body) goes to the fake byte for byte and its answer is recorded byte
for byte (status line, headers, chunked body); every later request of that kind gets the same
bytes in one write. The fakes write a JSON dump and an ASGI send through uvicorn and h11 a
chunk: about 27 µs of CPU a token, what the worker under test spends, and this machine has two
cores. The front spends well under 1 µs a token, so the worker's reads set the pace. `--live`
gives the worker the fakes themselves (the fake's CPU then bounds the figures).

The first request of a kind waits for its recording (one stream from the fake, a few ms); the
requests that come meanwhile wait with it, and none goes to the fake twice.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import signal
from typing import cast

import orjson

from tests.support import anthropic_jobs, openai_jobs
from tests.support.fake_anthropic import FakeAnthropic
from tests.support.fake_anthropic import Reply as AnthropicReply
from tests.support.fake_openai import FakeOpenAI
from tests.support.fake_openai import Reply as OpenAIReply

# What a request of one kind is told, by (request line, key headers, body).
Key = tuple[bytes, tuple[bytes, ...], bytes]
_KEY_HEADERS = (b"authorization", b"x-api-key")
# A script entry for every request the benchmark could make.
_FOREVER = 10**9
_RECORDINGS: set[asyncio.Task[bytes]] = set()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.provider_fakes")
    parser.add_argument("--tokens", type=int, required=True, help="tokens in every answer")
    parser.add_argument("--live", action="store_true", help="no replaying front")
    args = parser.parse_args()
    asyncio.run(_serve(args.tokens, live=args.live))


async def _serve(tokens: int, *, live: bool) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    claude = FakeAnthropic(api_key=anthropic_jobs.KEY)
    claude.push(AnthropicReply(tokens=tokens, times=_FOREVER))
    gpt = FakeOpenAI(api_key=openai_jobs.KEY, default=OpenAIReply(tokens=tokens))
    async with gpt, claude:
        fronts = [] if live else [await _front(loop, gpt.port), await _front(loop, claude.port)]
        openai_port, anthropic_port = (
            (gpt.port, claude.port)
            if live
            else (server.sockets[0].getsockname()[1] for server in fronts)
        )
        urls = {
            "openai": f"http://127.0.0.1:{openai_port}/v1",
            "anthropic": f"http://127.0.0.1:{anthropic_port}",
        }
        print(orjson.dumps(urls).decode(), flush=True)
        try:
            await stop.wait()
        finally:
            for server in fronts:
                server.close()


async def _front(loop: asyncio.AbstractEventLoop, upstream_port: int) -> asyncio.Server:
    answers: dict[Key, asyncio.Future[bytes]] = {}
    return await loop.create_server(
        lambda: _Front(answers, upstream_port), "127.0.0.1", 0, backlog=1024
    )


class _Front(asyncio.Protocol):
    """One client connection: HTTP/1.1 requests one at a time (clients do not pipeline)."""

    def __init__(self, answers: dict[Key, asyncio.Future[bytes]], upstream_port: int) -> None:
        self._answers = answers
        self._upstream_port = upstream_port
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._waiting = False  # for a recording: later bytes wait in the buffer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._answer_buffered()

    def _answer_buffered(self) -> None:
        while not self._waiting and self._transport is not None:
            try:
                request = _take_request(self._buffer)
            except ValueError:
                self._transport.close()
                return
            if request is None:
                return
            raw, key = request
            answer = self._answers.get(key)
            if answer is None:
                answer = asyncio.get_running_loop().create_future()
                self._answers[key] = answer
                # Held until done: the loop keeps only a weak reference to a task, and one
                # collected midway never settles its answer.
                task = asyncio.ensure_future(_record(self._upstream_port, raw))
                task.add_done_callback(functools.partial(_settle, answer))
                _RECORDINGS.add(task)
                task.add_done_callback(_RECORDINGS.discard)
            if answer.done():
                self._transport.write(answer.result())
            else:
                self._waiting = True
                answer.add_done_callback(self._recorded)

    def _recorded(self, answer: asyncio.Future[bytes]) -> None:
        self._waiting = False
        if self._transport is None:
            return
        if answer.exception() is not None:
            self._transport.close()
            return
        self._transport.write(answer.result())
        self._answer_buffered()


def _settle(answer: asyncio.Future[bytes], task: asyncio.Future[bytes]) -> None:
    error = task.exception()
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(task.result())


def _take_request(buffer: bytearray) -> tuple[bytes, Key] | None:
    """The first whole request in `buffer` (removed from it) and its key; None until it is."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buffer[:end])
    line, *header_lines = head.split(b"\r\n")
    headers = [h.partition(b":") for h in header_lines]
    named = {name.strip().lower(): value.strip() for name, _, value in headers}
    if b"transfer-encoding" in named:
        raise ValueError("a chunked request body: the front reads content-length only")
    length = int(named.get(b"content-length", b"0"))
    if len(buffer) < end + 4 + length:
        return None
    raw = bytes(buffer[: end + 4 + length])
    del buffer[: end + 4 + length]
    key = (line, tuple(named.get(name, b"") for name in _KEY_HEADERS), raw[end + 4 :])
    return raw, key


async def _record(port: int, raw: bytes) -> bytes:
    """The fake's answer to `raw`, every byte of it as sent (a chunked stream or a JSON body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        head = await reader.readuntil(b"\r\n\r\n")
        named = {
            name.strip().lower(): value.strip()
            for name, _, value in (h.partition(b":") for h in head.split(b"\r\n")[1:])
        }
        answer = bytearray(head)
        if b"content-length" in named:
            answer += await reader.readexactly(int(named[b"content-length"]))
        elif named.get(b"transfer-encoding") == b"chunked":
            while True:
                size_line = await reader.readuntil(b"\r\n")
                answer += size_line
                size = int(size_line.split(b";")[0], 16)
                answer += await reader.readexactly(size + 2)  # the chunk and its CRLF
                if size == 0:
                    break
        else:
            raise ValueError(f"an answer of unknown length: {head!r}")
        return bytes(answer)
    finally:
        writer.close()


if __name__ == "__main__":
    main()
