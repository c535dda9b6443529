"""What both SDK-based providers (openai.py, anthropic.py) need of the HTTP client they hand
their SDK: a trace of when the request starts going out, error bodies read within bounds, and
pool limits for a worker's many streams. Both SDKs run on httpx2."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from contextvars import ContextVar
from typing import Any, Final

import httpx2

from jobstream.worker.providers.base import SendMark

# An error body is read only for its message; a misbehaving server must not make us buffer more.
ERROR_BODY_LIMIT: Final = 4096
# What describes the body as it came over the wire, wrong for the decoded bytes we keep of it.
_WIRE_HEADERS: Final = frozenset({"content-encoding", "content-length", "transfer-encoding"})
# The SDKs' own pool limits (openai.DEFAULT_CONNECTION_LIMITS): 1,000 connections where httpx's
# default is 100, since a worker runs many streams at once.
LIMITS: Final = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)


class SendTrace:
    """httpcore2's `trace` extension tells us when the request starts going out: the line
    between "safe to retry" and "the provider may be working on it"."""

    def __init__(self, mark: SendMark) -> None:
        self.request_sent = False
        self._mark = mark

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event.endswith("send_request_headers.started"):
            self.request_sent = True
            self._mark.mark()


# The trace of the call the running task is making: the SDK builds the HTTP request itself, so
# its client adds the extension on the way out.
TRACE: ContextVar[SendTrace | None] = ContextVar("provider_send_trace", default=None)


class TracingClient(httpx2.AsyncClient):
    """The SDK's HTTP client (an httpx2 client, as its DefaultAsyncHttpxClient, which is not
    subclassed so that this module need not import the SDK), with our send trace, and an error
    answer's body read only up to `ERROR_BODY_LIMIT` bytes within `error_read_s` (the SDK would
    read all of it, however long it takes) before the SDK turns it into its APIStatusError."""

    def __init__(self, *, error_read_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._error_read_s = error_read_s

    async def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        trace = TRACE.get()
        if trace is not None:
            request.extensions["trace"] = trace
        response = await super().send(request, **kwargs)
        if response.is_success or not kwargs.get("stream"):
            return response
        return await self._bounded(response)

    async def _bounded(self, response: httpx2.Response) -> httpx2.Response:
        body = bytearray()
        try:
            async with asyncio.timeout(self._error_read_s), aclosing(response.aiter_bytes()) as it:
                async for piece in it:
                    body += piece
                    if len(body) >= ERROR_BODY_LIMIT:
                        break
        except (TimeoutError, httpx2.TransportError):
            pass  # the status alone classifies the failure
        finally:
            await response.aclose()
        return httpx2.Response(
            response.status_code,
            headers=[
                (name, value)
                for name, value in response.headers.multi_items()
                if name.lower() not in _WIRE_HEADERS
            ],
            content=bytes(body[:ERROR_BODY_LIMIT]),
            request=response.request,
            extensions=response.extensions,
        )
