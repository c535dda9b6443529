"""A fake OpenAI-compatible server on a real loopback port: a small Starlette app under a real
uvicorn, in a thread of its own so it answers even while a test blocks.

It streams the real chunk format (`chat.completion.chunk` objects, a usage chunk when asked for
with `stream_options.include_usage`, then `data: [DONE]`), with deterministic text: token i is
the i-th word of the prompt (cycling), see `expected_text`.

How a request misbehaves is chosen per request, first match wins:
1. a script the test queued: `fake.push(Reply(...), ...)` or `POST /_script` (a JSON list);
2. a marker in the prompt: `[[fake:kind=error;status=429;retry_after=2]]` (`Reply.marker()`
   writes one), optionally `times=N` to misbehave only on the first N requests with that prompt;
3. the default: a normal stream.

Counters (`fake.stats()` in-process, `GET /_stats` from anywhere, `POST /_reset` to clear):
requests, in-flight now and the maximum seen, outcomes, and the tokens billed: what a real
provider would charge, i.e. prompt tokens plus every completion token sent, also for streams
that died midway. Every request records when it began and ended (wall clock, `time.time()`).

A request is in flight from when the fake has read it until the fake starts writing the bytes
that end its answer (`[DONE]`, an error status or chunk, or closing the connection on a drop),
or learns that the client left. Ending it *before* those bytes go out means a client that reacts
to the end at once (and sends its next request) is never counted twice.

    async with FakeOpenAI(api_key="sk-test") as fake:
        settings = Settings(openai_base_url=fake.base_url, openai_api_key="sk-test")
        fake.push(Reply(kind="hang", after_tokens=3))
        ...
        await fake.wait_until(lambda s: s.in_flight == 0)

From another process: `python -m tests.support.fake_openai [--port N] [--api-key K]` prints
`{"url": ..., "base_url": ...}` on its first line and serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import re
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal, get_args

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from tests.support.polling import eventually

ReplyKind = Literal["ok", "error", "malformed", "hang", "disconnect", "stream_error"]
# Kinds that break a stream after `after_tokens` tokens.
_STREAM_FAULTS: Final = frozenset({"malformed", "hang", "disconnect", "stream_error"})
Outcome = Literal[
    "running",
    "completed",
    "error_status",
    "client_closed",
    "dropped",
    "stream_error",
    "server_stopped",
]

DEFAULT_TOKENS: Final = 16
_CREATED: Final = 1_700_000_000  # a fixed timestamp keeps the chunks deterministic
_MARKER: Final = re.compile(r"\[\[fake:([^\]]*)\]\]")


@dataclass(frozen=True)
class Reply:
    """How the fake answers one request."""

    kind: ReplyKind = "ok"
    status: int = 500  # kind="error": the HTTP status; kind="stream_error": the error's code
    retry_after: str | None = None  # Retry-After header, verbatim (seconds or an HTTP date)
    retry_after_ms: str | None = None  # retry-after-ms header, verbatim
    tokens: int | None = None  # completion tokens; None: min(max_tokens, DEFAULT_TOKENS)
    after_tokens: int = 0  # stream faults: tokens sent before the fault
    first_token_delay_s: float = 0.0  # after the headers, before the first chunk
    token_delay_s: float = 0.0  # between tokens
    usage: bool = True  # send the usage chunk (when the request asks for it)
    comments: bool = False  # an SSE comment line before every chunk, as some proxies send
    # Script: how many requests this reply serves (None: 1). Marker: the first N requests with
    # this prompt misbehave, later ones get a normal stream (None: all of them).
    times: int | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, object]) -> Reply:
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name, value in raw.items():
            if name not in known:
                raise ValueError(f"unknown reply field {name!r}")
            values[name] = _coerce(name, str(known[name].type), value)
        if values.get("kind", "ok") not in get_args(ReplyKind):
            raise ValueError(f"unknown reply kind {values['kind']!r}")
        return cls(**values)

    @classmethod
    def from_marker(cls, body: str) -> Reply:
        pairs = (part.partition("=") for part in body.split(";") if part.strip())
        return cls.from_mapping({key.strip(): value.strip() for key, _, value in pairs})

    def marker(self) -> str:
        """`[[fake:...]]` text that makes the fake answer a prompt containing it like this."""
        changed = {k: v for k, v in self.to_json().items() if v != _DEFAULT_JSON[k]}
        return "[[fake:" + ";".join(f"{k}={_marker_value(v)}" for k, v in changed.items()) + "]]"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_DEFAULT_JSON: Final = Reply().to_json()


def _marker_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _coerce(name: str, annotation: str, value: object) -> object:
    if value is None or (isinstance(value, str) and value.lower() in {"none", "null"}):
        if "None" in annotation:
            return None
        raise ValueError(f"{name} may not be null")
    base = annotation.split("|")[0].strip()
    if base == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text not in {"true", "false", "1", "0"}:
            raise ValueError(f"{name}: expected true or false, got {value!r}")
        return text in {"true", "1"}
    if base == "int":
        return int(str(value))
    if base == "float":
        return float(str(value))
    return str(value)


def words_of(prompt: str) -> list[str]:
    """The words the fake's answer is made of: the prompt's, markers removed."""
    return _MARKER.sub(" ", prompt).split() or ["token"]


def token_text(prompt: str, index: int) -> str:
    words = words_of(prompt)
    word = words[index % len(words)]
    return word if index == 0 else " " + word


def expected_text(prompt: str, tokens: int) -> str:
    """The text of a complete answer of `tokens` tokens to `prompt`."""
    return "".join(token_text(prompt, i) for i in range(tokens))


def prompt_tokens(prompt: str) -> int:
    """What the fake bills for a prompt: one token per whitespace-separated word (at least 1)."""
    return max(1, len(prompt.split()))


@dataclass
class RequestRecord:
    """One chat completion request as the fake saw it."""

    id: int
    model: str
    prompt: str
    max_tokens: int | None
    include_usage: bool
    authorized: bool
    reply: Reply
    status: int = 200
    outcome: Outcome = "running"
    prompt_tokens: int = 0
    tokens_sent: int = 0
    usage_reported: bool = False
    started_at: float = 0.0  # time.time() when the fake had read the request
    ended_at: float | None = None  # ...and when it stopped counting it as in flight
    messages: tuple[tuple[str, str], ...] = ()  # (role, text) as sent
    sampling: tuple[tuple[str, float], ...] = ()  # temperature and top_p, where sent

    @property
    def billed_prompt_tokens(self) -> int:
        # A provider bills the prompt once it starts generating: any 200 stream.
        return self.prompt_tokens if self.status == 200 else 0

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["billed_prompt_tokens"] = self.billed_prompt_tokens
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RequestRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["reply"] = Reply.from_mapping(values["reply"])
        for pairs in ("messages", "sampling"):  # JSON has lists where the record has tuples
            values[pairs] = tuple(tuple(pair) for pair in values.get(pairs, ()))
        return cls(**values)


@dataclass(frozen=True)
class Stats:
    requests: int
    in_flight: int
    max_in_flight: int
    billed_prompt_tokens: int
    billed_completion_tokens: int
    # Tokens stated in usage chunks: equal to the billed ones for streams that completed.
    reported_prompt_tokens: int
    reported_completion_tokens: int
    outcomes: dict[str, int]
    records: tuple[RequestRecord, ...] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["records"] = [r.to_json() for r in self.records]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Stats:
        values = dict(data)
        values["records"] = tuple(RequestRecord.from_json(r) for r in data["records"])
        return cls(**values)


class _State:
    """Everything the fake counts. The server thread writes, tests read: one lock, no awaits
    while holding it."""

    def __init__(self, default: Reply) -> None:
        self._lock = threading.Lock()
        self._default = default
        self._script: deque[tuple[Reply, int]] = deque()  # (reply, requests it still serves)
        self._marker_uses: dict[str, int] = {}
        self._records: list[RequestRecord] = []
        self._in_flight = 0
        self._max_in_flight = 0

    def push(self, replies: tuple[Reply, ...]) -> None:
        with self._lock:
            self._script.extend((reply, reply.times or 1) for reply in replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._marker_uses.clear()
            self._records.clear()
            self._max_in_flight = self._in_flight

    def begin(self, call: _Call, *, authorized: bool) -> RequestRecord:
        with self._lock:
            # A rejected key gets a 401 whatever the script says, and leaves the script alone.
            reply = self._choose(call.prompt) if authorized else self._default
            record = RequestRecord(
                id=len(self._records) + 1,
                reply=reply,
                authorized=authorized,
                started_at=time.time(),
                **dataclasses.asdict(call),
            )
            self._records.append(record)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            return record

    def _choose(self, prompt: str) -> Reply:
        if self._script:
            reply, left = self._script.popleft()
            if left > 1:
                self._script.appendleft((reply, left - 1))
            return reply
        found = _MARKER.search(prompt)
        if found is None:
            return self._default
        reply = Reply.from_marker(found.group(1))
        if reply.times is not None:
            used = self._marker_uses.get(prompt, 0)
            self._marker_uses[prompt] = used + 1
            if used >= reply.times:
                return self._default
        return reply

    def update(self, record: RequestRecord, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(record, name, value)

    def sent_token(self, record: RequestRecord) -> None:
        with self._lock:
            record.tokens_sent += 1

    def end(self, record: RequestRecord, outcome: Outcome) -> None:
        """Stop counting the request as in flight; only the first call counts."""
        with self._lock:
            if record.ended_at is not None:
                return
            record.outcome = outcome
            record.ended_at = time.time()
            self._in_flight -= 1

    def snapshot(self) -> Stats:
        with self._lock:
            records = tuple(dataclasses.replace(r) for r in self._records)
            outcomes: dict[str, int] = {}
            for r in records:
                outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
            reported = [r for r in records if r.usage_reported]
            return Stats(
                requests=len(records),
                in_flight=self._in_flight,
                max_in_flight=self._max_in_flight,
                billed_prompt_tokens=sum(r.billed_prompt_tokens for r in records),
                billed_completion_tokens=sum(r.tokens_sent for r in records),
                reported_prompt_tokens=sum(r.prompt_tokens for r in reported),
                reported_completion_tokens=sum(r.tokens_sent for r in reported),
                outcomes=outcomes,
                records=records,
            )


@dataclass(frozen=True)
class _Call:
    model: str
    prompt: str
    max_tokens: int | None
    include_usage: bool
    messages: tuple[tuple[str, str], ...]
    sampling: tuple[tuple[str, float], ...]


def _parse_call(raw: bytes) -> _Call | str:
    """The request, or why it is a 400."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "body is not JSON"
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return "messages is required"
    if body.get("stream") is not True:
        return "this fake only streams (stream: true)"
    parts: list[str] = []
    messages: list[tuple[str, str]] = []
    for message in body["messages"]:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and "text" in p)
        if isinstance(message, dict) and isinstance(content, str):
            messages.append((str(message.get("role")), content))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    options = body.get("stream_options")
    return _Call(
        model=str(body.get("model", "")),
        prompt="\n".join(parts),
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        messages=tuple(messages),
        sampling=tuple((k, body[k]) for k in ("temperature", "top_p") if k in body),
    )


def _error_body(status: int, message: str, code: object = None) -> bytes:
    kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}
    error_type = kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    )


class _ChatCompletions:
    """`POST /v1/chat/completions` as a raw ASGI app: it must be able to stop mid-body without
    completing the response (a dropped connection), which a Starlette Response cannot."""

    def __init__(self, state: _State, api_key: str | None, stopping: Callable[[], asyncio.Event]):
        self._state = state
        self._api_key = api_key
        self._stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        call = _parse_call(await request.body())
        presented = request.headers.get("authorization", "").removeprefix("Bearer ")
        authorized = self._api_key is None or presented == self._api_key
        if isinstance(call, str):
            # Not a request our provider sends: answered, not counted.
            await _send_json(send, 400, _error_body(400, call))
            return
        record = self._state.begin(call, authorized=authorized)
        outcome: Outcome = "error_status"
        try:
            reply = record.reply
            if not authorized:
                # Echo the presented key in full, as a careless server might: the client must
                # keep it out of its errors and logs anyway.
                message = f"Incorrect API key provided: {presented}."
                self._state.update(record, status=401)
                self._state.end(record, outcome)
                await _send_json(send, 401, _error_body(401, message, "invalid_api_key"))
            elif reply.kind == "error":
                self._state.update(record, status=reply.status)
                headers = {"retry-after": reply.retry_after, "retry-after-ms": reply.retry_after_ms}
                body = _error_body(reply.status, f"fake error {reply.status}")
                self._state.end(record, outcome)
                await _send_json(send, reply.status, body, headers)
            else:
                self._state.update(record, prompt_tokens=prompt_tokens(call.prompt))
                outcome = await self._stream(receive, send, record, call, reply)
        finally:
            self._state.end(record, outcome)

    async def _stream(
        self, receive: Receive, send: Send, record: RequestRecord, call: _Call, reply: Reply
    ) -> Outcome:
        """Race the writer against the client leaving and the server stopping."""
        writing = _Writer(self._state, send, record, call, reply)
        writer = asyncio.create_task(writing.run())
        watcher = asyncio.create_task(_wait_disconnect(receive))
        stopper = asyncio.create_task(self._stopping().wait())
        tasks = (writer, watcher, stopper)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if writer in done:
            return writer.result()
        if watcher in done:
            return "client_closed"
        if writing.started:
            # Stopping: end the body cleanly so the client sees a stream without [DONE].
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return "server_stopped"


class _Writer:
    def __init__(
        self, state: _State, send: Send, record: RequestRecord, call: _Call, reply: Reply
    ) -> None:
        self._state = state
        self._send = send
        self._record = record
        self._call = call
        self._reply = reply
        self.started = False

    async def run(self) -> Outcome:
        reply, call = self._reply, self._call
        planned = reply.tokens
        if planned is None:
            planned = min(call.max_tokens or DEFAULT_TOKENS, DEFAULT_TOKENS)
        # A fault set past the end happens after the last token, before the finish chunk.
        fault_at = min(reply.after_tokens, planned) if reply.kind in _STREAM_FAULTS else None
        self.started = True
        await self._send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        await asyncio.sleep(reply.first_token_delay_s)
        for index in range(planned + 1):
            if index == fault_at:
                return await self._fault()
            if index == planned:
                break
            if index == 0:
                await self._chunk({"role": "assistant", "content": ""})
            elif reply.token_delay_s:
                await asyncio.sleep(reply.token_delay_s)
            await self._chunk({"content": token_text(call.prompt, index)})
            self._state.sent_token(self._record)
        hit_limit = call.max_tokens is not None and planned >= call.max_tokens
        await self._chunk({}, finish_reason="length" if hit_limit else "stop")
        if call.include_usage and reply.usage:
            usage = {
                "prompt_tokens": self._record.prompt_tokens,
                "completion_tokens": planned,
                "total_tokens": self._record.prompt_tokens + planned,
            }
            await self._chunk(None, usage=usage)
            self._state.update(self._record, usage_reported=True)
        self._state.end(self._record, "completed")
        await self._body(b"data: [DONE]\n\n")
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        return "completed"

    async def _fault(self) -> Outcome:
        kind = self._reply.kind
        if kind == "disconnect":
            # Returning with the body unfinished makes uvicorn close the connection.
            return "dropped"
        if kind == "stream_error":
            error = orjson.loads(_error_body(self._reply.status, "fake mid-stream failure"))
            error["error"]["code"] = self._reply.status
            self._state.end(self._record, "stream_error")
            await self._body(b"data: " + orjson.dumps(error) + b"\n\n")
            await self._body(b"data: [DONE]\n\n")
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            return "stream_error"
        if kind == "malformed":
            await self._body(b'data: {"id": "chatcmpl-broken", "choices": [\n\n')
        # hang, and malformed after its bad chunk: silence until the client gives up.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def _chunk(
        self,
        delta: dict[str, str] | None,
        *,
        finish_reason: str | None = None,
        usage: dict[str, int] | None = None,
    ) -> None:
        chunk: dict[str, Any] = {
            "id": f"chatcmpl-fake-{self._record.id}",
            "object": "chat.completion.chunk",
            "created": _CREATED,
            "model": self._call.model,
            "system_fingerprint": "fp_fake",
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self._call.include_usage:
            chunk["usage"] = usage  # null on every chunk but the last, as OpenAI does
        await self._body(b"data: " + orjson.dumps(chunk) + b"\n\n")

    async def _body(self, data: bytes) -> None:
        if self._reply.comments:
            data = b": keep-alive\n\n" + data
        await self._send({"type": "http.response.body", "body": data, "more_body": True})


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _send_json(
    send: Send, status: int, body: bytes, headers: Mapping[str, str | None] | None = None
) -> None:
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    for name, value in (headers or {}).items():
        if value is not None:
            raw_headers.append((name.encode(), value.encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def create_app(
    state: _State, api_key: str | None, stopping: Callable[[], asyncio.Event]
) -> Starlette:
    async def stats(request: Request) -> Response:
        return _json(state.snapshot().to_json())

    async def reset(request: Request) -> Response:
        state.reset()
        return _json(state.snapshot().to_json())

    async def script(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if not isinstance(body, list):
            return JSONResponse({"error": "expected a list of replies"}, status_code=400)
        try:
            replies = tuple(Reply.from_mapping(item) for item in body)
        except (ValueError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        state.push(replies)
        return _json({"queued": len(replies)})

    async def models(request: Request) -> Response:
        return _json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    return Starlette(
        routes=[
            Route(
                "/v1/chat/completions",
                _ChatCompletions(state, api_key, stopping),
                methods=["POST"],
            ),
            Route("/v1/models", models),
            Route("/_stats", stats),
            Route("/_reset", reset, methods=["POST"]),
            Route("/_script", script, methods=["POST"]),
        ]
    )


def _json(data: object) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


class _Server(uvicorn.Server):
    """uvicorn that says when it accepts connections, so start() waits on a signal."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self._ready.set()


class FakeOpenAI:
    """The fake server. Start with `async with` (or `start()`/`stop()` from sync code)."""

    def __init__(
        self, *, api_key: str | None = None, default: Reply | None = None, port: int = 0
    ) -> None:
        self._state = _State(default or Reply())
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))
        self.port: int = self._socket.getsockname()[1]
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None
        config = uvicorn.Config(
            create_app(self._state, api_key, self._stopping_event),
            http="h11",
            ws="none",
            lifespan="off",
            # Leave the test process's logging alone: no dictConfig, no level changes.
            log_config=None,
            log_level=None,
            access_log=False,
            timeout_graceful_shutdown=5,
        )
        self._server = _Server(config, self._ready)
        self._thread = threading.Thread(
            target=self._run, name=f"fake-openai:{self.port}", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What `openai_base_url` should be set to."""
        return f"{self.url}/v1"

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order (before any prompt marker)."""
        self._state.push(replies)

    def reset(self) -> None:
        self._state.reset()

    def stats(self) -> Stats:
        return self._state.snapshot()

    async def wait_until(
        self, predicate: Callable[[Stats], bool], *, within_s: float = 5.0
    ) -> Stats:
        """Poll the counters until `predicate` holds; AssertionError (with the last stats) after
        `within_s` seconds."""

        async def probe() -> Stats:
            return self.stats()

        return await eventually(
            probe, predicate, what="the fake OpenAI reaches the condition", timeout_s=within_s
        )

    @contextlib.asynccontextmanager
    async def one_test(self) -> AsyncIterator[FakeOpenAI]:
        """A server shared by a module, fresh for each test: counters and scripts reset, and the
        test must leave it idle (no request of ours may outlive its test)."""
        self.reset()
        yield self
        await self.wait_until(lambda s: s.in_flight == 0)

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        if not self._ready.wait(timeout) or not self._server.started:
            self.stop()
            raise RuntimeError(f"fake OpenAI server did not start: {self._error!r}")

    def stop(self, timeout: float = 10.0) -> None:
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None and not loop.is_closed():
            # Ends hanging streams, which uvicorn's graceful shutdown would otherwise wait for.
            loop.call_soon_threadsafe(stopping.set)
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._socket.close()
        if self._thread.is_alive():
            raise RuntimeError("fake OpenAI server did not stop")
        if self._error is not None:
            raise RuntimeError("fake OpenAI server failed") from self._error

    async def __aenter__(self) -> FakeOpenAI:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _stopping_event(self) -> asyncio.Event:
        assert self._stopping is not None, "the app runs only while the server loop does"
        return self._stopping

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by stop(), not lost in a thread
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        await self._server.serve(sockets=[self._socket])


async def fetch_stats(client: httpx.AsyncClient, url: str) -> Stats:
    """Stats of a fake in another process (`url` is its `url`, not its `base_url`)."""
    response = await client.get(f"{url}/_stats")
    response.raise_for_status()
    return Stats.from_json(response.json())


def main() -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible server for tests.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args()
    fake = FakeOpenAI(api_key=args.api_key, port=args.port)
    fake.start()
    print(orjson.dumps({"url": fake.url, "base_url": fake.base_url}).decode(), flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.2):
        pass
    fake.stop()


if __name__ == "__main__":
    main()
