"""`/api/chat`: the Vercel AI SDK's chat protocol (`DefaultChatTransport`, `useChat` with
`resume: true`) over jobs, so that an unchanged chat UI streams from jobstream and resumes after a
reload, a server restart or a worker's crash (docs/chat.md).

- `POST /api/chat` makes the job that answers the chat's last message (idempotent: the same
  request finds its job, jobstream/chats.py) and answers its message as a UI message stream.
- `GET /api/chat/{id}/stream` is the reconnect: the chat's newest job's message from its start,
  live to its end; `204` once that job has ended, which tells the client there is nothing to
  resume. A job that ran more than one attempt is the exception: a stream of it may have been cut
  at a retry (server/ui_message_stream.py), and its client is owed the accepted text, so its
  whole message is answered, ended or not.
- `POST /api/chat/{id}/stop` cancels that job: the SDK's `stop()` only hangs up, and a request's
  end cancels nothing here (docs/design.md, "Three lifetimes, kept apart").

The tenant is the bearer key's, as everywhere (the transport's `headers`).
"""

from __future__ import annotations

import uuid

from starlette.requests import Request
from starlette.responses import Response

from jobstream import chats, job_reads, jobs
from jobstream.errors import JobNotFound
from jobstream.jobspec import JobSpec
from jobstream.rows import JobRow
from jobstream.server import chat_request, validation
from jobstream.server.auth import tenant_id
from jobstream.server.chat_request import ChatRequest
from jobstream.server.chat_stream import ChatStream, finished_message
from jobstream.server.jobs_api import create, job_spec, log_created, read_body, require_json
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.state import AppState, state
from jobstream.types import TERMINAL_STATUSES


async def create_chat(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)  # first: an unauthenticated caller learns nothing more
    # No Idempotency-Key is read, or required: the chat's own is made from the request.
    require_json(request)
    body = validation.parse_json(await read_body(request, app.settings.max_body_bytes))
    asked = chat_request.parse(body, default_job=app.settings.chat_job)
    spec = _job_spec(app, asked)
    # The stream's slot first, so that a refusal (429) leaves no job behind.
    slot = app.streams.take(tenant)
    try:
        outcome = await create(request, tenant, spec, asked.key, asked.sent)
    except BaseException:
        slot.release()
        raise
    if outcome.created:
        log_created(outcome.job)
    job = outcome.job
    if job.status not in TERMINAL_STATUSES:
        return ChatStream(app, job, slot)
    slot.release()  # answered at once, from the job's row
    try:
        return finished_message(await job_reads.snapshot(app.pool, tenant, job.id))
    except JobNotFound:
        raise not_found(f"The chat's job {job.id} is gone.") from None


async def resume_chat(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)
    job = await _chat_job(app, tenant, request.path_params["chat_id"])
    if job is None or (job.status in TERMINAL_STATUSES and job.attempts <= 1):
        # Nothing in flight: the one answer after which the client does not resume.
        return Response(status_code=204)
    if job.status in TERMINAL_STATUSES:
        try:
            snap = await job_reads.snapshot(app.pool, tenant, job.id)
        except JobNotFound:
            return Response(status_code=204)  # deleted since
        return finished_message(snap)
    return ChatStream(app, job, app.streams.take(tenant))


async def stop_chat(request: Request) -> Response:
    """Cancel the chat's newest job: `202` while its worker stops it, `200` if it had ended."""
    app = state(request)
    tenant = await tenant_id(request)
    chat_id: str = request.path_params["chat_id"]
    job = await _chat_job(app, tenant, chat_id)
    if job is None:
        raise not_found(f"Chat {chat_id[:60]!r} has no job.")
    try:
        snap, changed = await jobs.cancel(app.pool, tenant, job.id, app.clock)
    except JobNotFound:
        raise not_found(f"Chat {chat_id[:60]!r} has no job.") from None
    body = {"chat_id": chat_id, "job_id": str(job.id), "status": snap.job.status}
    return json_response(body, 200 if not changed and snap.job.status != "cancelling" else 202)


def _job_spec(app: AppState, asked: ChatRequest) -> JobSpec:
    try:
        return job_spec(app, asked.job)
    except Problem as problem:
        if problem.errors is None:
            raise
        # Named as the chat's body names them: a UI message, not the job's message it became.
        renamed = [
            {**e, "field": chat_request.job_field(asked, e["field"])} for e in problem.errors
        ]
        raise chat_request.invalid(renamed) from None


async def _chat_job(app: AppState, tenant: str, chat_id: str) -> JobRow | None:
    """The chat's newest job, None if it has none (or it is gone)."""
    job_id: uuid.UUID | None = await chats.latest_job(app.pool, tenant, chat_id)
    if job_id is None:
        return None
    try:
        return await job_reads.get(app.pool, tenant, job_id)
    except JobNotFound:
        return None  # deleted between the two reads
