"""Writing one answer in raw ASGI: the chunk stream with its faults, and JSON error bodies.
Raw, because a dropped connection means stopping mid-body without completing the response,
which a Starlette Response cannot do."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.types import Message, Receive, Send

from tests.support.fake_openai.oracle import token_text
from tests.support.fake_openai.recording import Call, Outcome, Recorder, RequestRecord
from tests.support.fake_openai.replies import DEFAULT_TOKENS, STREAM_FAULTS, Reply

_CREATED: Final = 1_700_000_000  # a fixed timestamp keeps the chunks deterministic


class StreamWriter:
    """Writes one 200 stream as the reply says: tokens, then a fault or the finish."""

    def __init__(
        self, recorder: Recorder, send: Send, record: RequestRecord, call: Call, reply: Reply
    ) -> None:
        self._recorder = recorder
        self._send = send
        self._record = record
        self._call = call
        self._reply = reply
        self.started = False

    async def run(self) -> Outcome:
        reply, call = self._reply, self._call
        scripted = reply.refusal if reply.refusal is not None else reply.content
        pieces = (
            None if scripted is None else [scripted[i : i + 4] for i in range(0, len(scripted), 4)]
        )
        planned = reply.tokens if pieces is None else len(pieces)
        if planned is None:
            planned = min(call.max_tokens or DEFAULT_TOKENS, DEFAULT_TOKENS)
        # A fault set past the end happens after the last token, before the finish chunk.
        fault_at = min(reply.after_tokens, planned) if reply.kind in STREAM_FAULTS else None
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
            if pieces is None:
                await self._chunk({"content": token_text(call.prompt, index)})
            elif reply.refusal is not None:
                await self._chunk({"refusal": pieces[index]})
            else:
                await self._chunk({"content": pieces[index]})
            self._recorder.sent_token(self._record)
        hit_limit = call.max_tokens is not None and planned >= call.max_tokens
        finish = reply.finish_reason or ("length" if hit_limit else "stop")
        await self._chunk({}, finish_reason=finish)
        if call.include_usage and reply.usage:
            usage: dict[str, object] = {
                "prompt_tokens": self._record.prompt_tokens,
                "completion_tokens": planned,
                "total_tokens": self._record.prompt_tokens + planned,
            }
            if reply.cached_tokens:
                cached = min(reply.cached_tokens, self._record.prompt_tokens)
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            await self._chunk(None, usage=usage)
            self._recorder.update(self._record, usage_reported=True)
        self._recorder.end(self._record, "completed")
        await self._body(b"data: [DONE]\n\n")
        await self.finish()
        return "completed"

    async def finish(self) -> None:
        """End the body cleanly (a client sees the stream end, with or without [DONE])."""
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _fault(self) -> Outcome:
        kind = self._reply.kind
        if kind == "disconnect":
            # Returning with the body unfinished makes uvicorn close the connection.
            return "dropped"
        if kind == "stream_error":
            error = orjson.loads(error_body(self._reply.status, "fake mid-stream failure"))
            error["error"]["code"] = self._reply.status
            self._recorder.end(self._record, "stream_error")
            await self._body(b"data: " + orjson.dumps(error) + b"\n\n")
            await self._body(b"data: [DONE]\n\n")
            await self.finish()
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
        usage: dict[str, object] | None = None,
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


def error_body(status: int, message: str, code: object = None) -> bytes:
    kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}
    error_type = kinds.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps(
        {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    )


async def send_json(
    send: Send, status: int, body: bytes, headers: Mapping[str, str | None] | None = None
) -> None:
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    for name, value in (headers or {}).items():
        if value is not None:
            raw_headers.append((name.encode(), value.encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def wait_disconnect(receive: Receive) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return
