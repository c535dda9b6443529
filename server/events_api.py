"""`GET /api/jobs/{id}/events`: a job's event log as SSE, or as JSON with long-poll (API.md)."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from jobstream import job_reads, sse
from jobstream.errors import JobNotFound
from jobstream.events import Event
from jobstream.job_reads import Progress
from jobstream.server import gone, validation
from jobstream.server.auth import tenant_id
from jobstream.server.jobs_api import job_id_param
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.state import AppState, state
from jobstream.server.subscription import SubscriptionClosed
from jobstream.server.tail import Tail
from jobstream.server.tail_stream import TailStream

MAX_WAIT_S = 30.0
MAX_SEQ = 2**63 - 1  # bigint


class _FollowEventsApp:
    """follow_events as a bare ASGI endpoint: starlette's wrapper of a request handler (its
    Request, closures and exception scope, about 2 KiB) would stay alive as long as each stream
    does. Errors still reach the app's exception handlers, which answer them the same way.
    (An instance, not a function: starlette wraps any function endpoint as a request handler.)
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await follow_events(Request(scope, receive))
        await response(scope, receive, send)


follow_events_app = _FollowEventsApp()


async def follow_events(request: Request) -> Response:
    app = state(request)
    job_id = job_id_param(request)
    tenant = await _reader(request, app, job_id)
    wants_sse = "text/event-stream" in request.headers.get("accept", "")
    if wants_sse:
        header = request.headers.get("last-event-id", "").strip()
        cursor = _cursor(header, "Last-Event-ID") if header else _query_cursor(request)
        wait_s = 0.0
    else:
        cursor = _query_cursor(request)
        wait_s = _wait(request)
    progress = await _progress(app, job_id, tenant)
    # A finished job's log is complete: replay it, no need to follow.
    live = not progress.finished
    if wants_sse:
        if not live and cursor >= progress.last_seq:
            # Nothing after this cursor will ever come. 204 is the one answer that makes an
            # EventSource stop reconnecting (a page that did not close() it after `done`, say).
            return Response(status_code=204)
        return _Stream(app, job_id, cursor, progress.last_seq, live)
    return await _poll(app, job_id, tenant, cursor, progress.last_seq, live, wait_s)


async def _reader(request: Request, app: AppState, job_id: uuid.UUID) -> str | None:
    """Whose view of the job this request reads: a tenant's, or None for the holder of the
    job's signed token, who may read this one job and nothing else.

    EventSource cannot send headers, so a browser's only credential is the token in events_url;
    a request with a key is its tenant's, and a token it also carries must be valid too.
    """
    token = request.query_params.get("token")
    if token is not None and not app.tokens.valid(str(job_id), token):
        # Not 401/403: an invalid token must not reveal whether the job exists.
        raise not_found(f"No job {job_id}.")
    if token is not None and "authorization" not in request.headers:
        return None
    # A key's tenant; with neither key nor token, `default`, or 401 when keys are required.
    return await tenant_id(request)


async def _progress(app: AppState, job_id: uuid.UUID, tenant: str | None) -> Progress:
    try:
        return await job_reads.progress(app.pool, job_id, tenant)
    except JobNotFound:
        raise await gone.missing(app, job_id, tenant) from None


def _query_cursor(request: Request) -> int:
    raw = request.query_params.get("after")
    return 0 if raw is None else _cursor(raw, "after")


def _cursor(raw: str, name: str) -> int:
    return validation.int_param(
        raw, MAX_SEQ, "invalid-cursor", "Invalid cursor",
        f"{name} must be an event seq (a non-negative integer), not {raw[:40]!r}.",
    )  # fmt: skip


def _wait(request: Request) -> float:
    raw = request.query_params.get("wait", "0")
    try:
        wait = float(raw)
    except ValueError:
        wait = math.nan
    if not 0 <= wait <= MAX_WAIT_S:  # also refuses nan
        raise Problem(
            400, "invalid-wait", "Invalid wait",
            f"wait must be a number of seconds from 0 to {MAX_WAIT_S:g}.",
        )  # fmt: skip
    return wait


class _Stream(TailStream):
    """The SSE response, built once the request is known to be valid (so errors stay JSON): the
    `retry` frame, then the events after the cursor, each with its seq as `id`."""

    def __init__(
        self, app: AppState, job_id: uuid.UUID, cursor: int, last_seq: int, live: bool
    ) -> None:
        super().__init__(
            app, job_id, cursor, last_seq=last_seq, live=live,
            send_timeout_s=app.settings.sse_send_timeout_s,
        )  # fmt: skip

    def opening(self) -> bytes:
        return sse.retry(self._app.settings.sse_retry_ms)

    def chunk(self, batch: list[Event]) -> bytes:
        # One chunk per batch: a replay of a thousand events is one write, not a thousand.
        return b"".join([event.sse_frame() for event in batch])


async def _poll(
    app: AppState,
    job_id: uuid.UUID,
    tenant: str | None,
    cursor: int,
    last_seq: int,
    live: bool,
    wait_s: float,
) -> Response:
    follow = live and wait_s > 0
    tail = await Tail.open(app.hub, app.pool, job_id, cursor, last_seq=last_seq, follow=follow)
    batch: list[Event] = []
    try:
        async with asyncio.timeout(wait_s if follow else None):
            batch = await tail.next()
    except (TimeoutError, SubscriptionClosed):
        pass
    finally:
        tail.close()
    # The status after the wait. Read after the events, never before: a `done` it gives is
    # true of the events this answer holds (a job that finished meanwhile with events this
    # reader lacks answers done: false, and the next poll reads them).
    progress = await _progress(app, job_id, tenant)
    body: dict[str, Any] = {
        "events": [event.to_json() for event in batch],
        "next_after": tail.cursor,
        "status": progress.status,
        # Nothing more will come: the job is finished and this reader has its last event.
        "done": progress.finished and tail.cursor >= progress.last_seq,
    }
    return json_response(body)
