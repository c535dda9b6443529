"""A fake Anthropic Messages API on a real loopback port: uvicorn in a thread of its own, so it
answers even while a test blocks.

It streams the documented server-sent events of `POST /v1/messages` with `"stream": true`
(https://docs.claude.com/en/docs/build-with-claude/streaming): `message_start` (the message,
empty content, its usage), `content_block_start`, a `ping`, `content_block_delta` frames of
`text_delta`, `content_block_stop`, `message_delta` frames with the stop reason and usage (the
counts cumulative: the fake sends one midway and one at the end), `message_stop`; and errors
as documented (https://docs.claude.com/en/api/errors): a JSON body `{"type": "error", "error":
{"type", "message"}}` with its status (and `retry-after` on a 429), or an `error` event inside
the stream. tests/integration/test_anthropic_provider.py has the official SDK parse what it
sends, so the fake cannot drift from the wire unnoticed.

Token i of an answer is the i-th word of the prompt (cycling), as the OpenAI fake's
(tests/support/fake_openai/oracle.py: `expected_text`); the prompt bills one token a word.
How a request is answered: the next `Reply` a test queued (`fake.push`), else the default.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import orjson
import uvicorn
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from tests.support.fake_openai import prompt_tokens, token_text
from tests.support.polling import eventually

ReplyKind = Literal["ok", "error", "stream_error", "disconnect"]
DEFAULT_TOKENS = 16


@dataclass(frozen=True)
class Reply:
    kind: ReplyKind = "ok"
    status: int = 500  # kind="error"
    error_type: str = "api_error"  # kind="error" and "stream_error": the body's error.type
    retry_after: str | None = None  # kind="error": the retry-after header
    tokens: int | None = None  # None: min(max_tokens, DEFAULT_TOKENS)
    after_tokens: int = 0  # stream faults: text deltas sent before the fault
    stop_reason: str | None = None  # None: end_turn, or max_tokens when the limit was reached
    content: str | None = None  # the answer's exact text, in deltas of four characters
    cache_read: int = 0  # cache_read_input_tokens reported
    cache_write: int = 0  # cache_creation_input_tokens reported
    token_delay_s: float = 0.0  # between deltas
    times: int = 1  # requests this reply serves


@dataclass
class Record:
    """One request as the fake saw it."""

    id: int
    model: str
    prompt: str
    system: str
    max_tokens: int | None
    api_key: str
    reply: Reply
    output_format: dict[str, Any] | None = None
    status: int = 200
    outcome: str = "running"
    prompt_tokens: int = 0
    tokens_sent: int = 0
    ended: bool = False


@dataclass(frozen=True)
class Stats:
    requests: int
    in_flight: int
    max_in_flight: int
    records: tuple[Record, ...] = field(repr=False)


class _Server(uvicorn.Server):
    """uvicorn that says when it accepts connections."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._ready.set()


class FakeAnthropic:
    def __init__(self, *, api_key: str) -> None:
        self.api_key = api_key
        self._lock = threading.Lock()
        self._script: deque[tuple[Reply, int]] = deque()
        self._records: list[Record] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None
        config = uvicorn.Config(
            self._app, interface="asgi3", http="h11", ws="none", lifespan="off",
            log_config=None, log_level=None, access_log=False, timeout_graceful_shutdown=5,
        )  # fmt: skip
        self._server = _Server(config, self._ready)
        self._thread = threading.Thread(target=self._run, name="fake-anthropic", daemon=True)

    @property
    def base_url(self) -> str:
        """What `anthropic_base_url` is set to (the SDK appends /v1/messages)."""
        return f"http://127.0.0.1:{self.port}"

    # -- what tests use ------------------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend((reply, reply.times) for reply in replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._records.clear()
            self._max_in_flight = self._in_flight

    def stats(self) -> Stats:
        with self._lock:
            return Stats(
                requests=len(self._records),
                in_flight=self._in_flight,
                max_in_flight=self._max_in_flight,
                records=tuple(dataclasses.replace(r) for r in self._records),
            )

    async def wait_until(self, predicate: Callable[[Stats], bool], within_s: float = 5.0) -> Stats:
        async def probe() -> Stats:
            return self.stats()

        return await eventually(
            probe, predicate, what="the fake Anthropic reaches the condition", timeout_s=within_s
        )

    # -- the server ----------------------------------------------------------------------------

    async def __aenter__(self) -> FakeAnthropic:
        self._thread.start()
        if not await asyncio.to_thread(self._ready.wait, 10) or not self._server.started:
            raise RuntimeError(f"fake Anthropic did not start: {self._error!r}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)  # ends streams that wait
        self._server.should_exit = True
        await asyncio.to_thread(self._thread.join, 10)
        self._socket.close()

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        await self._server.serve(sockets=[self._socket])

    # -- one request ---------------------------------------------------------------------------

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if request.url.path != "/v1/messages" or request.method != "POST":
            await _send_json(send, 404, _error("not_found_error", "not found"))
            return
        body = orjson.loads(await request.body())
        if body.get("stream") is not True:
            await _send_json(send, 400, _error("invalid_request_error", "this fake streams"))
            return
        # The documented `x-api-key`, or `Authorization: Bearer`, which SDK 2.x sends.
        presented = request.headers.get("x-api-key") or request.headers.get(
            "authorization", ""
        ).removeprefix("Bearer ")
        record = self._begin(body, presented)
        try:
            if record.api_key != self.api_key:
                self._finish(record, "error_status", status=401)
                message = f"invalid x-api-key: {record.api_key}"  # echoed, as a careless server
                await _send_json(send, 401, _error("authentication_error", message))
            elif record.reply.kind == "error":
                reply = record.reply
                self._finish(record, "error_status", status=reply.status)
                headers = {"retry-after": reply.retry_after} if reply.retry_after else {}
                body_bytes = _error(reply.error_type, f"fake {reply.error_type}")
                await _send_json(send, reply.status, body_bytes, headers)
            else:
                await self._race(receive, send, record)
        finally:
            self._finish(record, "client_closed")

    def _begin(self, body: dict[str, Any], api_key: str) -> Record:
        texts = [_text(m.get("content")) for m in body.get("messages", [])]
        system = _text(body.get("system"))
        output_config = body.get("output_config") or {}
        with self._lock:
            reply = Reply()
            if self._script and api_key == self.api_key:
                reply, left = self._script.popleft()
                if left > 1:
                    self._script.appendleft((reply, left - 1))
            prompt = "\n".join(texts)
            record = Record(
                id=len(self._records) + 1,
                model=str(body.get("model")),
                prompt=prompt,
                system=system,
                max_tokens=body.get("max_tokens"),
                api_key=api_key,
                reply=reply,
                output_format=output_config.get("format"),
                prompt_tokens=prompt_tokens("\n".join([system, prompt])),
            )
            self._records.append(record)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            return record

    def _finish(self, record: Record, outcome: str, *, status: int = 200) -> None:
        """Stop counting the request as in flight (before its last bytes go out, so that a
        client that reacts at once is never counted twice); only the first call counts."""
        with self._lock:
            if record.ended:
                return
            record.ended, record.outcome, record.status = True, outcome, status
            self._in_flight -= 1

    async def _race(self, receive: Receive, send: Send, record: Record) -> None:
        assert self._stopping is not None
        writer = asyncio.create_task(self._write(send, record))
        watcher = asyncio.create_task(_wait_disconnect(receive))
        stopper = asyncio.create_task(self._stopping.wait())
        tasks = (writer, watcher, stopper)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _write(self, send: Send, record: Record) -> None:
        reply = record.reply
        pieces = (
            None
            if reply.content is None
            else [reply.content[i : i + 4] for i in range(0, len(reply.content), 4)]
        )
        planned = reply.tokens if pieces is None else len(pieces)
        if planned is None:
            planned = min(record.max_tokens or DEFAULT_TOKENS, DEFAULT_TOKENS)
        faulty = reply.kind in ("stream_error", "disconnect")
        fault_at = min(reply.after_tokens, planned) if faulty else None
        usage = {
            "input_tokens": record.prompt_tokens,
            "cache_creation_input_tokens": reply.cache_write,
            "cache_read_input_tokens": reply.cache_read,
        }
        await send({
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"text/event-stream; charset=utf-8"),
                (b"cache-control", b"no-cache"),
                (b"request-id", f"req_fake_{record.id}".encode()),
            ],
        })  # fmt: skip
        message: dict[str, Any] = {
            "id": f"msg_fake_{record.id}", "type": "message", "role": "assistant", "content": [],
            "model": record.model, "stop_reason": None, "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }  # fmt: skip
        await self._event(send, "message_start", {"type": "message_start", "message": message})
        block = {"type": "text", "text": ""}
        await self._event(send, "content_block_start", {
            "type": "content_block_start", "index": 0, "content_block": block,
        })  # fmt: skip
        await self._event(send, "ping", {"type": "ping"})
        for index in range(planned + 1):
            if index == fault_at:
                await self._fault(send, record)
                return
            if index == planned:
                break
            if index and reply.token_delay_s:
                await asyncio.sleep(reply.token_delay_s)
            text = token_text(record.prompt, index) if pieces is None else pieces[index]
            await self._event(send, "content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text},
            })  # fmt: skip
            with self._lock:
                record.tokens_sent += 1
            if index == planned // 2:
                # A message_delta midway, without a stop reason: its counts are cumulative, so
                # a client that adds them up instead of taking the last is caught.
                await self._event(send, "message_delta", {
                    "type": "message_delta", "delta": {"stop_reason": None, "stop_sequence": None},
                    "usage": {**usage, "output_tokens": index + 1},
                })  # fmt: skip
        await self._event(send, "content_block_stop", {"type": "content_block_stop", "index": 0})
        hit_limit = record.max_tokens is not None and planned >= record.max_tokens
        stop = reply.stop_reason or ("max_tokens" if hit_limit else "end_turn")
        await self._event(send, "message_delta", {
            "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {**usage, "output_tokens": planned},
        })  # fmt: skip
        self._finish(record, "completed")
        await self._event(send, "message_stop", {"type": "message_stop"})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fault(self, send: Send, record: Record) -> None:
        if record.reply.kind == "disconnect":
            # Returning with the body unfinished makes uvicorn close the connection.
            self._finish(record, "dropped")
            return
        self._finish(record, "stream_error")
        error = {"type": "error", "error": {"type": record.reply.error_type, "message": "fake"}}
        await self._event(send, "error", error)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @staticmethod
    async def _event(send: Send, name: str, data: dict[str, Any]) -> None:
        frame = b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
        await send({"type": "http.response.body", "body": frame, "more_body": True})


def _text(content: object) -> str:
    """A message's or the system prompt's text: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and "text" in b)
    return ""


def _error(error_type: str, message: str) -> bytes:
    return orjson.dumps({
        "type": "error", "error": {"type": error_type, "message": message},
        "request_id": "req_fake",
    })  # fmt: skip


async def _send_json(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
