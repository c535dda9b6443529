"""RFC 9457 problem details: the one shape every error response takes."""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from jobstream import db
from jobstream.errors import DatabaseUnavailable

log = structlog.get_logger(__name__)

MEDIA_TYPE = "application/problem+json"


class Problem(Exception):
    """Raise from a handler; the app turns it into a problem+json response."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        errors: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"/problems/{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def response(problem: Problem) -> Response:
    return Response(
        orjson.dumps(problem.body()),
        status_code=problem.status,
        media_type=MEDIA_TYPE,
        headers=problem.headers,
    )


def not_found(what: str) -> Problem:
    return Problem(404, "not-found", "Not found", what)


async def handle_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return response(exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown route, wrong method) in the same problem shape."""
    assert isinstance(exc, HTTPException)
    slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
    problem = Problem(
        exc.status_code,
        slug,
        {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "HTTP error"),
        str(exc.detail),
        headers=dict(exc.headers or {}),
    )
    return response(problem)


# Handled here, not as unexpected errors: Starlette re-raises what reaches its `Exception`
# handler so that the server logs a traceback, and a database outage then buried real errors
# under hundreds of them (912 in one probe).
DATABASE_LOST = (*db.DISCONNECTS, DatabaseUnavailable)


async def handle_database_lost(request: Request, exc: Exception) -> Response:
    """Losing the database is an outage the client may wait out: 503, and one log line."""
    log.warning(
        "database_unavailable", method=request.method, path=request.url.path,
        error=str(exc) or type(exc).__name__,
    )  # fmt: skip
    return response(
        Problem(
            503, "database-unavailable", "Service unavailable",
            "The database does not answer; try again shortly.", headers={"Retry-After": "1"},
        )
    )  # fmt: skip


async def handle_client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up mid-body: nobody reads an answer, and nothing was stored."""
    log.info("client_disconnected", method=request.method, path=request.url.path)
    return Response(status_code=400)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Anything no handler expected, still as problem+json (the traceback is logged by the
    server, never sent)."""
    return response(Problem(500, "internal", "Internal server error", "The server failed."))
