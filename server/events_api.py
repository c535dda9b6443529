"""`GET /api/jobs/{id}/events`: a job's event log as SSE, or as JSON with long-poll
(docs/design.md, "Following a job over SSE" and "Polling and long-polling")."""

from __future__ import annotations

import asyncio
import contextlib
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
from jobstream.server import gone, stream_tokens, validation
from jobstream.server.auth import tenant_id, unauthorized
from jobstream.server.jobs_api import job_id_param
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.state import AppState, state
from jobstream.server.stream_slots import Slot
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
    tenant, token_generation = await _reader(request, app, job_id)
    wants_sse = "text/event-stream" in request.headers.get("accept", "")
    if wants_sse:
        header = request.headers.get("last-event-id", "").strip()
        cursor = _cursor(header, "Last-Event-ID") if header else _query_cursor(request)
        wait_s = 0.0
    else:
        cursor = _query_cursor(request)
        wait_s = _wait(request)
    progress = await _progress(app, job_id, tenant)
    if token_generation is not None:
        _still_good(token_generation, progress)
    # A finished job's log is complete: replay it, no need to follow.
    live = not progress.finished
    if wants_sse:
        if not live and cursor >= progress.last_seq:
            # Nothing after this cursor will ever come. 204 is the one answer that makes an
            # EventSource stop reconnecting (a page that did not close() it after `done`, say).
            return Response(status_code=204)
        # Counted against the job's tenant whoever asks, the holder of its token included (or
        # one token would open streams until the connections ran out).
        slot = app.streams.take(progress.tenant_id)
        return _Stream(app, job_id, cursor, progress.last_seq, live, slot)
    return await _poll(app, job_id, tenant, progress, cursor, wait_s)


async def _reader(
    request: Request, app: AppState, job_id: uuid.UUID
) -> tuple[str | None, int | None]:
    """Whose view of the job this request reads: (a tenant, None), or (None, the token's key
    generation) for the holder of the job's signed token, who may read this one job and nothing
    else, while that generation is good (`_still_good`, once the job and its tenant are read).

    EventSource cannot send headers, so a browser's only credential is the token in events_url;
    a request with a key is its tenant's, and a token it also carries must be genuine too (its
    generation is not asked: the key, checked now, is the credential).
    """
    token = request.query_params.get("token")
    generation = app.tokens.generation(str(job_id), token) if token is not None else None
    if token is not None and generation is None:
        # Not 401/403: an invalid token must not reveal whether the job exists.
        raise not_found(f"No job {job_id}.")
    if generation is not None and "authorization" not in request.headers:
        return None, generation
    # A key's tenant; with neither key nor token, `default`, or 401 when keys are required.
    return await tenant_id(request), None


def _still_good(generation: int, progress: Progress) -> None:
    """Refuse a genuine token whose key has since been revoked, or rotated past its grace. 401,
    not 404: its signature shows it was issued for this job, so saying so tells its holder
    nothing new, and a page that reads the job again gets a fresh events_url (if its key is
    still good)."""
    current = progress.key_generation
    assert current is not None  # JOB_PROGRESS_BY_TOKEN reads it with the job
    if not stream_tokens.accepts(generation, current, previous_valid=progress.previous_key_valid):
        raise unauthorized(
            "This events_url was issued under an API key that has since been revoked or "
            "rotated: read the job again for a fresh one.",
            invalid=True,
        )


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
        self, app: AppState, job_id: uuid.UUID, cursor: int, last_seq: int, live: bool, slot: Slot
    ) -> None:
        super().__init__(
            app, job_id, cursor, last_seq=last_seq, live=live, slot=slot,
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
    progress: Progress,
    cursor: int,
    wait_s: float,
) -> Response:
    follow = not progress.finished and wait_s > 0
    # A poll that waits holds its connection as a stream does, and counts as one; taken before
    # the subscription, so that a refused poll costs the hub nothing.
    with app.streams.take(progress.tenant_id) if follow else contextlib.nullcontext():
        tail = await Tail.open(
            app.hub, app.pool, job_id, cursor, last_seq=progress.last_seq, follow=follow
        )
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
