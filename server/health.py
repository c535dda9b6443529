"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import Response

from jobstream.server.problems import Problem
from jobstream.server.responses import json_response
from jobstream.server.state import state
from jobstream.sql import queries


async def healthz(request: Request) -> Response:
    """The process serves HTTP."""
    return json_response({"status": "ok"})


async def readyz(request: Request) -> Response:
    """The process can do its work: the database answers."""
    try:
        async with asyncio.timeout(2):
            await state(request).pool.fetchval(queries.PING)
    except Exception as exc:  # whatever the cause, the answer is "not ready"
        raise Problem(
            503, "not-ready", "Not ready", f"The database does not answer: {type(exc).__name__}"
        ) from exc
    return json_response({"status": "ready"})
