"""The `/v1/responses` resource: create, retrieve (or stream), cancel, delete.

A response is a job, created and read through the same functions as /api/jobs. What a create
without `background: true` does (docs/openai.md): with `stream: true` it streams exactly as a
background stream would; without it, the request waits for the job to end (or for the client to
leave, or the server to stop) and answers with the response as it then is. Either way the job
runs on if the client leaves (docs/design.md, "Three lifetimes, kept apart": a request's end
cancels nothing), and its id lets the client read it later.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response

from jobstream import job_reads, jobs, new_jobs
from jobstream.errors import JobNotFound
from jobstream.job_reads import Snapshot
from jobstream.jobspec import JobSpec
from jobstream.server import gone, validation
from jobstream.server.auth import sdk_tenant_id
from jobstream.server.jobs_api import create, create_request, job_spec, log_created
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.state import AppState, state
from jobstream.server.subscription import SubscriptionClosed
from jobstream.server.tail import Tail
from jobstream.server.v1 import ids, objects, params
from jobstream.server.v1.objects import Head
from jobstream.server.v1.stream import ResponseStream
from jobstream.types import TERMINAL_STATUSES

log = structlog.get_logger(__name__)

MAX_STARTING_AFTER = 2**62  # far past any seq * STRIDE, and still a bigint


async def create_response(request: Request) -> Response:
    app = state(request)
    tenant = await sdk_tenant_id(request)  # first: an unauthenticated caller learns nothing more
    key, body = await create_request(request)
    # Hashed as sent, before parsing fills anything in: what a key's replay is compared by.
    sent = dict(body) if key is not None else None
    asked = params.parse(body)
    spec = _job_spec(app, asked.job)
    if asked.stream:
        return await _create_streaming(request, app, tenant, spec, key, sent)
    # Without `background` the answer waits for the job's end, holding its connection as a
    # stream does: it takes one of the tenant's stream slots, before the job is made.
    with app.streams.take(tenant) if not asked.background else contextlib.nullcontext():
        outcome = await _create(request, tenant, spec, key, sent)
        job = outcome.job
        head = Head.of(job, app.settings)
        if not asked.background and job.status not in TERMINAL_STATUSES:
            await _until_finished(request, app, job.id, job.last_seq)
        elif outcome.created:
            # Just made: queued, no attempt, no text. The create's own row is the answer, as of
            # its own transaction, not a second read.
            return json_response(objects.from_snapshot(head, Snapshot(job, [], "")))
        return await _current(app, tenant, head)


async def _create_streaming(
    request: Request,
    app: AppState,
    tenant: str,
    spec: JobSpec,
    key: str | None,
    sent: dict[str, Any] | None,
) -> ResponseStream:
    """`stream: true`: the new job's events. Its stream slot is taken first, so that a refusal
    (429, which the SDKs retry) leaves no job behind."""
    slot = app.streams.take(tenant)
    try:
        job = (await _create(request, tenant, spec, key, sent)).job
    except BaseException:
        slot.release()
        raise
    head = Head.of(job, app.settings)
    return ResponseStream(app, head, last_seq=job.last_seq, live=True, slot=slot)


async def _create(
    request: Request, tenant: str, spec: JobSpec, key: str | None, sent: dict[str, Any] | None
) -> new_jobs.Created:
    outcome = await create(request, tenant, spec, key, sent)
    if outcome.created:
        log_created(outcome.job)
    return outcome


def _job_spec(app: AppState, body: dict[str, object]) -> JobSpec:
    try:
        return job_spec(app, body)
    except Problem as problem:
        if problem.errors is None:
            raise
        # The fields as this API names them: `input`, not `prompt` or `messages`.
        renamed = [{**e, "field": params.openai_field(e["field"])} for e in problem.errors]
        raise params.invalid(renamed) from None


async def _until_finished(request: Request, app: AppState, job_id: uuid.UUID, seq: int) -> None:
    """Wait for the job's `done`, the client leaving, or the server stopping, whichever first."""
    tail = await Tail.open(app.hub, app.pool, job_id, seq, last_seq=seq, follow=True)
    try:
        ending = asyncio.create_task(_done(tail), name=f"v1-wait-{job_id}")
        leaving = asyncio.create_task(_disconnected(request), name=f"v1-client-{job_id}")
        try:
            await asyncio.wait((ending, leaving), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (ending, leaving):
                task.cancel()
            await asyncio.gather(ending, leaving, return_exceptions=True)
        if ending.done() and not ending.cancelled():
            ending.result()  # a database error is the request's error
    finally:
        tail.close()


async def _done(tail: Tail) -> None:
    try:
        while batch := await tail.next():
            if any(event.type == "done" for event in batch):
                return
    except SubscriptionClosed:
        return  # cut off, or the server is stopping: answer with the state as it is


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _current(app: AppState, tenant: str, head: Head) -> Response:
    try:
        snap = await job_reads.snapshot(app.pool, tenant, head.job_id)
    except JobNotFound:
        raise await _unknown(app, tenant, head.job_id) from None
    return json_response(objects.from_snapshot(head, snap))


async def retrieve_response(request: Request) -> Response:
    app, tenant, job_id = await _addressed(request)
    query = request.query_params
    # The SDKs send Accept: application/json even when they stream: `stream` alone decides.
    stream = _flag(query.get("stream"), "stream")
    starting_after = _starting_after(query.get("starting_after"))
    try:
        if not stream:
            snap = await job_reads.snapshot(app.pool, tenant, job_id)
            return json_response(objects.from_snapshot(Head.of(snap.job, app.settings), snap))
        job = await job_reads.get(app.pool, tenant, job_id)
    except JobNotFound:
        raise await _unknown(app, tenant, job_id) from None
    live = job.status not in TERMINAL_STATUSES
    return ResponseStream(
        app, Head.of(job, app.settings), last_seq=job.last_seq, live=live,
        slot=app.streams.take(tenant), starting_after=starting_after,
    )  # fmt: skip


async def cancel_response(request: Request) -> Response:
    """Idempotent, like /api/jobs/{id}/cancel: a queued response is cancelled at once, a running
    one stays in_progress until its worker confirms; a finished one is left as it is."""
    app, tenant, job_id = await _addressed(request)
    try:
        snap, changed = await jobs.cancel(app.pool, tenant, job_id, app.clock)
    except JobNotFound:
        raise await _unknown(app, tenant, job_id) from None
    if changed:
        log.info("job_cancel_requested", job_id=str(job_id), status=snap.job.status)
    return json_response(objects.from_snapshot(Head.of(snap.job, app.settings), snap))


async def delete_response(request: Request) -> Response:
    """A finished response goes, with its log; a running one is a 409 (cancel it first)."""
    app, tenant, job_id = await _addressed(request)
    try:
        deleted = await jobs.delete_finished(app.pool, tenant, job_id)
    except JobNotFound:
        raise await _unknown(app, tenant, job_id) from None
    if not deleted:
        raise Problem(
            409, "response-running", "Response still running",
            f"Response {ids.response_id(job_id)} has not finished: cancel it first.",
        )  # fmt: skip
    log.info("job_deleted", job_id=str(job_id))
    return json_response({"id": ids.response_id(job_id), "object": "response", "deleted": True})


async def _addressed(request: Request) -> tuple[AppState, str, uuid.UUID]:
    """The app, the caller's tenant (authenticated before the path is read) and the job the
    path names."""
    return state(request), await sdk_tenant_id(request), _job_id(request)


def _job_id(request: Request) -> uuid.UUID:
    raw: str = request.path_params["response_id"]
    job_id = ids.job_id(raw)
    if job_id is None:
        # Never the whole segment: it is the client's text, of any length.
        raise not_found(f"No response {raw[:60]!r}.")
    return job_id


async def _unknown(app: AppState, tenant: str, job_id: uuid.UUID) -> Problem:
    """404, or 410 while the tombstone of a job retention deleted is kept (server/gone.py)."""
    return await gone.missing(app, job_id, tenant, name=f"response {ids.response_id(job_id)}")


def _flag(raw: str | None, name: str) -> bool:
    if raw is None or raw.lower() in ("false", "0"):
        return False
    if raw.lower() in ("true", "1"):
        return True
    raise Problem(400, "invalid-parameter", "Invalid parameter", f"{name} must be true or false.")


def _starting_after(raw: str | None) -> int:
    if raw is None:
        return -1
    return validation.int_param(
        raw, MAX_STARTING_AFTER, "invalid-parameter", "Invalid parameter",
        f"starting_after must be a sequence number, not {raw[:40]!r}.",
    )  # fmt: skip
