"""The fake's routes: chat completions as OpenAI streams them, and the test-only controls
(`/_stats`, `/_reset`, `/_script`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.support.fake_openai.oracle import prompt_tokens
from tests.support.fake_openai.recording import Call, Outcome, Recorder, RequestRecord
from tests.support.fake_openai.replies import Reply
from tests.support.fake_openai.sse import StreamWriter, error_body, send_json, wait_disconnect


def create_app(
    recorder: Recorder, api_key: str | None, stopping: Callable[[], asyncio.Event]
) -> Starlette:
    async def stats(request: Request) -> Response:
        return _json(recorder.snapshot().to_json())

    async def reset(request: Request) -> Response:
        recorder.reset()
        return _json(recorder.snapshot().to_json())

    async def script(request: Request) -> Response:
        body = orjson.loads(await request.body())
        if not isinstance(body, list):
            return JSONResponse({"error": "expected a list of replies"}, status_code=400)
        try:
            replies = tuple(Reply.from_mapping(item) for item in body)
        except (ValueError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        recorder.push(replies)
        return _json({"queued": len(replies)})

    async def models(request: Request) -> Response:
        return _json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

    return Starlette(
        routes=[
            Route(
                "/v1/chat/completions",
                ChatCompletions(recorder, api_key, stopping),
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


class ChatCompletions:
    """`POST /v1/chat/completions` as a raw ASGI app (see `sse`)."""

    def __init__(
        self, recorder: Recorder, api_key: str | None, stopping: Callable[[], asyncio.Event]
    ):
        self._recorder = recorder
        self._api_key = api_key
        self._stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        call = parse_call(await request.body())
        presented = request.headers.get("authorization", "").removeprefix("Bearer ")
        authorized = self._api_key is None or presented == self._api_key
        if isinstance(call, str):
            # Not a request our provider sends: answered, not counted.
            await send_json(send, 400, error_body(400, call))
            return
        names = tuple(sorted({name.lower() for name in request.headers}))
        record = self._recorder.begin(call, authorized=authorized, header_names=names)
        outcome: Outcome = "error_status"
        try:
            reply = record.reply
            if not authorized:
                # Echo the presented key in full, as a careless server might: the client must
                # keep it out of its errors and logs anyway.
                message = f"Incorrect API key provided: {presented}."
                self._recorder.update(record, status=401)
                self._recorder.end(record, outcome)
                await send_json(send, 401, error_body(401, message, "invalid_api_key"))
            elif reply.kind == "error":
                self._recorder.update(record, status=reply.status)
                headers = {"retry-after": reply.retry_after, "retry-after-ms": reply.retry_after_ms}
                body = error_body(reply.status, f"fake error {reply.status}")
                self._recorder.end(record, outcome)
                await send_json(send, reply.status, body, headers)
            else:
                self._recorder.update(record, prompt_tokens=prompt_tokens(call.prompt))
                outcome = await self._stream(receive, send, record, call, reply)
        finally:
            self._recorder.end(record, outcome)

    async def _stream(
        self, receive: Receive, send: Send, record: RequestRecord, call: Call, reply: Reply
    ) -> Outcome:
        """Race the writer against the client leaving and the server stopping."""
        writing = StreamWriter(self._recorder, send, record, call, reply)
        writer = asyncio.create_task(writing.run())
        watcher = asyncio.create_task(wait_disconnect(receive))
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
            await writing.finish()
        return "server_stopped"


def parse_call(raw: bytes) -> Call | str:
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
    response_format = body.get("response_format")
    schema = response_format.get("json_schema") if isinstance(response_format, dict) else None
    return Call(
        model=str(body.get("model", "")),
        prompt="\n".join(parts),
        max_tokens=max_tokens if isinstance(max_tokens, int) else None,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        messages=tuple(messages),
        sampling=tuple((k, body[k]) for k in ("temperature", "top_p") if k in body),
        schema_name=schema.get("name") if isinstance(schema, dict) else None,
    )
