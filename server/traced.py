"""The server's spans: a create's request traced, continuing the client's `traceparent`.

Wrapped when the app is made, and only if the process traces (jobstream/tracing.py): with traces
off a route is the handler itself, so a request pays nothing for them, not even a check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response

from jobstream import tracing
from jobstream.server.problems import Problem

Handler = Callable[[Request], Awaitable[Response]]


def traced(name: str, handler: Handler) -> Handler:
    """`handler` in a span named `name`; the handler itself when the process does not trace."""
    if not tracing.active():
        return handler

    async def in_span(request: Request) -> Response:
        with tracing.server_span(name, request.headers, request.method, request.url.path) as span:
            try:
                response = await handler(request)
            except Problem as problem:
                # A refusal is an answer, not a crash: its status, and an error for a 5xx.
                span.set_attribute("http.response.status_code", problem.status)
                if problem.status >= 500:
                    tracing.failed(span, problem.title)
                raise
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    return in_span
