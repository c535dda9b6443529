"""Errors under /v1 in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`.

The SDKs raise their typed exceptions from the status code (404 NotFoundError, 401
AuthenticationError, 429 RateLimitError...; a 410, a response retention deleted, has no class
of its own: the base APIStatusError) and read the message from this body. The status codes
and headers are the ones the rest of the API sends: only the body's shape changes, so that one
set of handlers decides every error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from jobstream.server import problems

PREFIX = "/v1/"

Handler = Callable[[Request, Exception], Awaitable[Response]]

# OpenAI's error types, by status.
_TYPES = {401: "authentication_error", 402: "insufficient_quota", 403: "permission_error",
          429: "rate_limit_error"}  # fmt: skip
# The SDKs retry a 409 (taken for a lock timeout). Ours is an Idempotency-Key reused with another
# body or a response still running: asking again gives the same answer.
_NO_RETRY = {409}


def openai_error(problem: Mapping[str, Any], status: int) -> dict[str, Any]:
    """A problem+json body as an OpenAI error body."""
    fields: list[dict[str, str]] = problem.get("errors") or []
    message = str(problem.get("detail") or problem.get("title") or "Error")
    if fields:
        message += " " + "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    slug = str(problem.get("type", "")).rpartition("/")[2]
    error: dict[str, Any] = {
        "message": message,
        "type": _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        "param": fields[0]["field"] if fields else None,
        "code": slug.replace("-", "_") or None,
    }
    if fields:
        error["errors"] = fields  # every field, as /api names them; `param` is the first
    return {"error": error}


def shaped(handlers: Mapping[Any, Handler]) -> dict[Any, Handler]:
    """The app's exception handlers, answering in OpenAI's shape under /v1."""
    return {kind: _shaped(handler) for kind, handler in handlers.items()}


def _shaped(handler: Handler) -> Handler:
    async def handle(request: Request, exc: Exception) -> Response:
        response = await handler(request, exc)
        if not request.url.path.startswith(PREFIX) or response.media_type != problems.MEDIA_TYPE:
            return response
        headers = {
            name: value
            for name, value in response.headers.items()
            if name not in ("content-type", "content-length")
        }
        if response.status_code in _NO_RETRY:
            headers["x-should-retry"] = "false"
        body = openai_error(orjson.loads(bytes(response.body)), response.status_code)
        return Response(
            orjson.dumps(body),
            status_code=response.status_code,
            media_type="application/json",
            headers=headers,
        )

    return handle
