"""The OpenAI-compatible provider: one streamed `/chat/completions` call per attempt.

Works against OpenAI, vLLM, Ollama, llama.cpp and anything else that speaks the chat
completions stream (`stream: true`, `stream_options.include_usage`). Every failure leaves as a
ProviderError from `classify`; the API key never appears in a log line or an error message.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import Any, Final, cast

import httpx
import orjson
import structlog

from jobstream.errors import ProviderError
from jobstream.jobspec import chat
from jobstream.prices import Price
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker.providers import classify
from jobstream.worker.providers.base import Prompt, ProviderRequest, SendMark, StreamItem, TextDelta

log = structlog.get_logger(__name__)

# An error body is read only for its message; a misbehaving server must not make us buffer more.
_ERROR_BODY_LIMIT: Final = 4096
_DETAIL_LIMIT: Final = 300


def estimate_tokens(text: str) -> int:
    """About four characters a token for English text: good enough for reservations and for
    the cost of an attempt whose server never reported usage."""
    return math.ceil(len(text) / 4)


def _input_tokens(request: Prompt) -> int:
    conversation = chat(request.prompt, request.messages, request.instructions)
    return estimate_tokens("".join(message["content"] for message in conversation))


class _SendTrace:
    """httpcore's `trace` extension tells us when the request starts going out: the line
    between "safe to retry" and "the provider may be working on it"."""

    def __init__(self, mark: SendMark) -> None:
        self.request_sent = False
        self._mark = mark

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("send_request_headers.started"):
            self.request_sent = True
            self._mark.mark()


class _SseDecoder:
    """The `data:` payloads of a server-sent event stream, one per event (lines joined)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def feed(self, line: str) -> str | None:
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None  # comment: a keep-alive
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value.removeprefix(" "))
        return None  # event:, id:, retry: mean nothing to a chat completion

    def flush(self) -> str | None:
        if not self._data:
            return None
        data = "\n".join(self._data)
        self._data.clear()
        return data


class OpenAIProvider:
    """`stream()` one chat completion; `aclose()` the HTTP client if the provider made it."""

    name = "openai"

    def __init__(self, settings: Settings, *, client: httpx.AsyncClient | None = None) -> None:
        self._url = settings.openai_base_url.rstrip("/") + "/chat/completions"
        self._api_key = settings.openai_api_key
        self._model = settings.openai_model
        self._first_token_timeout_s = settings.openai_first_token_timeout_s
        self._idle_timeout_s = settings.openai_idle_timeout_s
        # Reads are timed by us (first token, idle); httpx times connecting and writing.
        self._timeout = httpx.Timeout(
            connect=settings.openai_connect_timeout_s,
            read=None,
            write=settings.openai_idle_timeout_s,
            pool=settings.openai_connect_timeout_s,
        )
        self._prices = settings.prices
        self._owns_client = client is None
        # Made at the first request, not here: the server builds this provider to price jobs
        # and never sends one, and an httpx client costs 50-90 ms of CPU to make (its TLS
        # context loads the system's certificates), at every server start.
        self._client = client

    def __repr__(self) -> str:
        return f"OpenAIProvider(url={self._url!r}, model={self._model!r})"

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient()
        return self._client

    async def aclose(self) -> None:
        if self._owns_client and self._client is not None:
            await self._client.aclose()

    async def __aenter__(self) -> OpenAIProvider:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def price(self, request: Prompt) -> Price:
        return self._prices.price_of(self.name, request.model or self._model)

    def cost(
        self, request: Prompt, input_tokens: int, output_tokens: int, cached_tokens: int = 0
    ) -> Decimal:
        """The price of a call. `input_tokens` is OpenAI's prompt_tokens, which counts the
        cached ones too: those are priced at the model's cached-input price."""
        return self.price(request).cost(
            input_tokens - cached_tokens, output_tokens, cache_read_tokens=cached_tokens
        )

    def estimate_cost(self, request: Prompt, output_tokens: int) -> Decimal:
        return self.cost(request, _input_tokens(request), output_tokens)

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[StreamItem, None]:
        model = request.model or self._model
        trace = _SendTrace(request.send_mark)
        http_request = self._http().build_request(
            "POST",
            self._url,
            content=orjson.dumps(
                {
                    **request.sampling,
                    "model": model,
                    "messages": request.chat(),
                    "max_tokens": request.max_tokens,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                    **_response_format(request),
                }
            ),
            headers=self._headers(),
            timeout=self._timeout,
            extensions={"trace": trace},
        )
        log.debug("openai.request", url=self._url, model=model, attempt=request.attempt)
        loop = asyncio.get_running_loop()
        # Absolute: neither response headers nor a role-only chunk extend it.
        first_token_deadline = loop.time() + self._first_token_timeout_s
        try:
            async with asyncio.timeout_at(first_token_deadline):
                response = await self._http().send(http_request, stream=True)
        except TimeoutError:
            raise self._failed(
                classify.from_stream_fault("first_token_timeout", request_sent=trace.request_sent)
            ) from None
        except httpx.TransportError as exc:
            raise self._failed(
                classify.from_transport(exc, request_sent=trace.request_sent)
            ) from exc
        # From here on the response is ours to close, however the consumer leaves: exhausted,
        # failed, cancelled, or `aclose()` of this generator.
        try:
            if not response.is_success:
                detail = await self._error_detail(response)
                raise self._failed(
                    classify.from_status(response.status_code, response.headers, detail=detail)
                )
            # aclosing: leaving early must close the inner generator now, not at GC time.
            async with aclosing(self._items(response, request, first_token_deadline)) as items:
                async for item in items:
                    yield item
        finally:
            await response.aclose()

    async def _items(
        self, response: httpx.Response, request: ProviderRequest, first_token_deadline: float
    ) -> AsyncGenerator[StreamItem, None]:
        loop = asyncio.get_running_loop()
        # A generator in fact (httpx types it as an iterator): closed below, not left to the GC.
        lines = cast(AsyncGenerator[str, None], response.aiter_lines())
        decoder = _SseDecoder()
        text_parts: list[str] = []
        refusal: list[str] = []
        usage: tuple[int, int, int] | None = None
        finished = False
        got_text = False
        try:
            while True:
                deadline = loop.time() + self._idle_timeout_s if got_text else first_token_deadline
                try:
                    async with asyncio.timeout_at(deadline):
                        line: str | None = await anext(lines)
                except StopAsyncIteration:
                    line = None
                except TimeoutError:
                    fault: classify.StreamFault = (
                        "idle_timeout" if got_text else "first_token_timeout"
                    )
                    raise self._failed(classify.from_stream_fault(fault)) from None
                except httpx.TransportError as exc:
                    raise self._failed(classify.from_transport(exc, request_sent=True)) from exc
                data = decoder.flush() if line is None else decoder.feed(line)
                if data == "[DONE]":
                    finished = True
                    break
                if data is not None:
                    chunk = self._parse_chunk(data)
                    usage = chunk.usage or usage
                    finished = finished or chunk.finish_reason is not None
                    if chunk.finish_reason is not None:
                        request.finish.reason = chunk.finish_reason
                    if chunk.refusal:
                        refusal.append(chunk.refusal)
                        got_text = True
                    if chunk.text:
                        got_text = True
                        text_parts.append(chunk.text)
                        yield TextDelta(chunk.text)
                if line is None:
                    break
        finally:
            await lines.aclose()
        # A server may end the body without `[DONE]`; a finish reason or the usage chunk still
        # proves the answer complete. Without either we cannot tell what was produced.
        if not finished and usage is None:
            raise self._failed(classify.from_stream_fault("ended_early"))
        if refusal:
            request.finish.refusal = "".join(refusal)
        yield self._usage(request, usage, "".join(text_parts))

    def _parse_chunk(self, data: str) -> _Chunk:
        try:
            return _Chunk.parse(data)
        except _MalformedChunk as exc:
            raise self._failed(
                classify.from_stream_fault("malformed_chunk", detail=str(exc))
            ) from None
        except _ErrorChunk as exc:
            raise self._failed(classify.from_error_object(exc.payload)) from None

    def _usage(
        self, request: ProviderRequest, reported: tuple[int, int, int] | None, text: str
    ) -> Usage:
        if reported is not None:
            input_tokens, output_tokens, cached = reported
            cost = self.cost(request, input_tokens, output_tokens, cached)
            return Usage(input_tokens, output_tokens, cost, True, cache_read_tokens=cached)
        # The server sent no usage chunk (include_usage unsupported): our estimate, flagged.
        input_tokens, output_tokens = _input_tokens(request), estimate_tokens(text)
        return Usage(
            input_tokens,
            output_tokens,
            self.cost(request, input_tokens, output_tokens),
            cost_known=False,
        )

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._api_key:  # local servers (Ollama, llama.cpp) need none
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _error_detail(self, response: httpx.Response) -> str:
        """The server's error message, bounded in size and time; never required."""
        body = bytearray()
        try:
            async with asyncio.timeout(self._idle_timeout_s):
                async for piece in response.aiter_bytes():
                    body += piece
                    if len(body) >= _ERROR_BODY_LIMIT:
                        break
        except (TimeoutError, httpx.TransportError):
            pass  # the status alone classifies the failure
        try:
            parsed = orjson.loads(bytes(body))
        except orjson.JSONDecodeError:
            parsed = None
        message: object = body.decode("utf-8", "replace")
        if isinstance(parsed, dict):
            error = parsed.get("error")
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                message = error["message"]
            elif isinstance(error, str):
                message = error
        # Redact before cutting, so a cut cannot leave part of a key behind.
        return self._redact(" ".join(str(message).split()))[:_DETAIL_LIMIT]

    def _redact(self, text: str) -> str:
        # Some servers echo the key they rejected ("Incorrect API key provided: ...").
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    def _failed(self, error: ProviderError) -> ProviderError:
        redacted = ProviderError(
            error.kind,
            self._redact(error.message),
            retry_after_s=error.retry_after_s,
            status_code=error.status_code,
            request_sent=error.request_sent,
            refused=error.refused,
        )
        log.info(
            "openai.failed",
            kind=redacted.kind,
            status_code=redacted.status_code,
            request_sent=redacted.request_sent,
            retry_after_s=redacted.retry_after_s,
            error=redacted.message,
        )
        return redacted


class _MalformedChunk(Exception):
    """A chunk that is not the chat.completion.chunk shape (internal: becomes ProviderError)."""


class _ErrorChunk(Exception):
    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__("error chunk")
        self.payload = payload


@dataclass(frozen=True)
class _Chunk:
    """What one `chat.completion.chunk` tells us; only choice 0 is read (we ask for n=1)."""

    text: str
    usage: tuple[int, int, int] | None  # (prompt_tokens, completion_tokens, cached of prompt)
    finish_reason: str | None
    refusal: str = ""  # structured output's refusal text, instead of content

    @classmethod
    def parse(cls, data: str) -> _Chunk:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _MalformedChunk("not JSON") from None
        if not isinstance(chunk, dict):
            raise _MalformedChunk("not a JSON object")
        if "error" in chunk or chunk.get("object") == "error":
            raise _ErrorChunk(chunk)
        text, finish_reason, refusal = _first_choice(chunk.get("choices"))
        return cls(text, _usage_counts(chunk.get("usage")), finish_reason, refusal)


def _first_choice(choices: object) -> tuple[str, str | None, str]:
    """Choice 0's text, finish reason and refusal text."""
    if choices is None or choices == []:
        return "", None, ""  # the usage chunk has no choices
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise _MalformedChunk("choices is not a list of objects")
    reason = choices[0].get("finish_reason")
    finish_reason = reason if isinstance(reason, str) else None
    delta = choices[0].get("delta")
    if delta is None:
        return "", finish_reason, ""
    if not isinstance(delta, dict):
        raise _MalformedChunk("delta is not an object")
    refusal = delta.get("refusal")
    refused = refusal if isinstance(refusal, str) else ""
    content = delta.get("content")
    if content is None:
        return "", finish_reason, refused  # role-only and tool-call deltas carry no text
    if not isinstance(content, str):
        raise _MalformedChunk("delta.content is not a string")
    return content, finish_reason, refused


def _response_format(request: ProviderRequest) -> dict[str, Any]:
    """Structured output, where the request asks for it (OpenAI's json_schema format)."""
    if request.json_schema is None:
        return {}
    return {"response_format": {"type": "json_schema", "json_schema": request.json_schema}}


def _usage_counts(usage: object) -> tuple[int, int, int] | None:
    if usage is None:
        return None  # every chunk but the last says "usage": null
    if not isinstance(usage, dict):
        raise _MalformedChunk("usage is not an object")
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (_is_count(prompt) and _is_count(completion)):
        raise _MalformedChunk("usage token counts are not counts")
    assert isinstance(prompt, int) and isinstance(completion, int)
    # Cached prompt tokens, where the server reports them (OpenAI does; many others do not):
    # priced at the cache-read price. Optional, so anything but a count is none.
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not (isinstance(cached, int) and _is_count(cached)):
        cached = 0
    return prompt, completion, min(cached, prompt)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
