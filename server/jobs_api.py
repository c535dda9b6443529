"""The jobs resource: create, read (the snapshot), list, cancel."""

from __future__ import annotations

import base64
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import Response

from jobstream import job_reads, jobs, new_jobs, tracing
from jobstream.errors import (
    BudgetExceeded,
    IdempotencyConflict,
    JobNotFound,
    KeyGone,
    RateLimited,
    StorageExceeded,
)
from jobstream.jobspec import JobSpec
from jobstream.rows import JobRow
from jobstream.server import estimates, gone, job_input, representation, validation
from jobstream.server.auth import events_tokens, tenant_id
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.simulated_rules import SimulatedRules
from jobstream.server.state import AppState, state
from jobstream.server.stream_tokens import GenerationTokens
from jobstream.types import JOB_STATUSES
from jobstream.worker.providers.base import Provider

log = structlog.get_logger(__name__)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than `limit` bytes without reading them all into memory."""
    declared = request.headers.get("content-length")
    if declared is not None:
        size = validation.ascii_int(declared, max_digits=19)
        if size is None:
            raise Problem(400, "invalid-length", "Invalid Content-Length", "Not a byte count.")
        if size > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> Problem:
    return Problem(413, "too-large", "Request body too large", f"The limit is {limit:,} bytes.")


def job_id_param(request: Request) -> uuid.UUID:
    raw = request.path_params["job_id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        # Never the whole segment: it is the client's text, of any length.
        raise not_found(f"No job {raw[:40]!r}.") from None


def require_json(request: Request) -> None:
    # Media types are case-insensitive (RFC 9110 §8.3.1): APPLICATION/JSON is JSON.
    content_type = request.headers.get("content-type", "").lower()
    if content_type and not content_type.split(";")[0].strip().endswith(("/json", "+json")):
        raise Problem(
            415, "unsupported-media-type", "Unsupported media type",
            "Send the job as application/json.",
        )  # fmt: skip


def refusal_problem(refusal: new_jobs.Refusal) -> Problem:
    """Why a create was refused, as the problem a client reads."""
    match refusal:
        case IdempotencyConflict():
            return Problem(409, "idempotency-conflict", "Idempotency-Key reused", str(refusal))
        case BudgetExceeded():
            return Problem(402, "budget-exhausted", "Budget exhausted", str(refusal))
        case RateLimited():
            return Problem(
                429, "rate-limited", "Too many jobs created", str(refusal),
                headers={"Retry-After": str(max(1, math.ceil(refusal.retry_after_s)))},
            )  # fmt: skip
        case StorageExceeded():
            return Problem(403, "storage-quota-exceeded", "Storage quota exceeded", str(refusal))
        case KeyGone():
            return Problem(410, "idempotency-key-gone", "The key's job is gone", str(refusal))


async def create_request(request: Request) -> tuple[str | None, dict[str, Any]]:
    """A create's Idempotency-Key and JSON body (/api/jobs and /v1/responses alike)."""
    settings = state(request).settings
    require_json(request)
    key = validation.idempotency_key(
        request.headers.get("idempotency-key"), required=settings.require_idempotency_key
    )
    return key, validation.parse_json(await read_body(request, settings.max_body_bytes))


def job_spec(app: AppState, body: dict[str, Any]) -> JobSpec:
    """The body as a job, under this server's rules, or a 422 naming every bad field."""
    return job_input.any_job_spec(
        app.jobs,
        body,
        default_provider=app.settings.default_provider,
        simulated=SimulatedRules.of(app.settings),
        allow_private_webhooks=app.settings.webhook_allow_private,
    )


async def create(
    request: Request,
    tenant: str,
    spec: JobSpec,
    key: str | None,
    sent: dict[str, Any] | None = None,
) -> new_jobs.Created:
    """Create with this server's clock and notices, written together with the creates of other
    requests in flight (server/create_writer.py); a refusal is raised as its problem. `sent`:
    the body as the client sent it, which a key's replay is compared by."""
    app = state(request)
    try:
        app.create_rate.take(tenant)
    except RateLimited as exc:
        raise refusal_problem(exc) from exc
    # The create's span, when one is current, goes with the job: the worker continues it.
    new = new_jobs.NewJob(
        spec, key, reservation(app.providers, spec), sent=sent, traceparent=tracing.traceparent()
    )
    outcome = await app.creates.create(tenant, new)
    if isinstance(outcome, new_jobs.Created):
        return outcome
    raise refusal_problem(outcome) from outcome


async def create_job(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)  # first: an unauthenticated caller learns nothing more
    key, body = await create_request(request)
    # Hashed before validation, which may fill the body's defaults in.
    sent = dict(body) if key is not None else None
    outcome = await create(request, tenant, job_spec(app, body), key, sent)
    inputs = await app.estimates.inputs()
    estimate = inputs.remaining(outcome.job, estimates.now_of(app.clock))
    payload = representation.created(outcome.job, await events_tokens(request), estimate)
    location = {"Location": payload["poll_url"]}
    if outcome.created:
        log_created(outcome.job)
        return json_response(payload, 202, location)
    return json_response(payload, 200, {**location, "Idempotent-Replayed": "true"})


def log_created(job: JobRow) -> None:
    log.info(
        "job_created", job_id=str(job.id), status=job.status, provider=job.provider,
        tenant_id=job.tenant_id, reserved_usd=str(job.reserved_usd),
    )  # fmt: skip


def reservation(providers: Mapping[str, Provider], spec: JobSpec) -> Decimal:
    """The most one attempt of this job can cost: what its budget must hold until it ends.
    A job of the app's own reserves its max_cost_usd, the most it may spend in all (its calls
    are refused past it); without one it reserves nothing (docs/jobs.md)."""
    provider = providers.get(spec.provider)
    if provider is None:
        # A job of the app's own names its provider in its definition, not in the body.
        field, message = (
            ("job", f"its provider {spec.provider!r} is not configured here")
            if (spec.job is not None)
            else ("provider", "is not configured on this server")
        )
        raise Problem(
            422, "validation", "Invalid request", f"Provider {spec.provider!r} is not configured.",
            errors=[{"field": field, "message": message}],
        )  # fmt: skip
    if spec.job is not None:
        cap = spec.max_cost_usd
        return Decimal(str(cap)) if cap is not None else Decimal(0)
    return provider.estimate_cost(spec, spec.max_tokens)


async def get_job(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)
    job_id = job_id_param(request)
    try:
        snap = await job_reads.snapshot(app.pool, tenant, job_id)
    except JobNotFound:
        raise await gone.missing(app, job_id, tenant) from None
    remaining = await _remaining(app, snap)
    # Retry-After: when polling again is worth it (an ended job has none: nothing will change).
    headers = estimates.retry_after(remaining)
    body = representation.detail(snap, await events_tokens(request), remaining)
    return json_response(body, headers=headers)


async def _remaining(app: AppState, snap: job_reads.Snapshot) -> float | None:
    if snap.job.status not in ("queued", "running"):
        return None  # no read of the inputs for an ended job
    inputs = await app.estimates.inputs()
    return inputs.remaining(
        snap.job,
        estimates.now_of(app.clock),
        running_since=estimates.current_attempt_start(snap.attempts),
    )


def _encode_cursor(job: JobRow) -> str:
    raw = f"{job.created_at.isoformat()}|{job.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created_at, job_id = raw.split("|")
        # In UTC here: an offset can carry year 1 or 9999 past what a timestamp holds (the
        # driver's OverflowError was a 500).
        return datetime.fromisoformat(created_at).astimezone(UTC), uuid.UUID(job_id)
    except (ValueError, OverflowError) as exc:
        raise Problem(400, "invalid-cursor", "Invalid cursor", "Use next_cursor as given.") from exc


async def list_jobs(request: Request) -> Response:
    app = state(request)
    tenant = await tenant_id(request)
    status = request.query_params.get("status")
    if status is not None and status not in JOB_STATUSES:
        raise Problem(
            400, "invalid-status", "Invalid status filter",
            f"status must be one of {', '.join(JOB_STATUSES)}.",
        )  # fmt: skip
    limit = validation.ascii_int(request.query_params.get("limit", "20"), max_digits=3)
    if limit is None or not 1 <= limit <= 100:
        raise Problem(400, "invalid-limit", "Invalid limit", "limit must be 1 to 100.")
    cursor = request.query_params.get("cursor")
    before = _decode_cursor(cursor) if cursor else None
    rows = await job_reads.list_jobs(
        app.pool, tenant, status=status, before=before, limit=limit + 1
    )
    page = rows[:limit]
    tokens = await events_tokens(request)
    return json_response(
        {
            "jobs": [representation.summary(job, tokens) for job in page],
            "next_cursor": _encode_cursor(page[-1]) if len(rows) > limit else None,
        }
    )


async def cancel_job(request: Request) -> Response:
    tenant = await tenant_id(request)
    return await cancel_as(request, tenant, lambda: events_tokens(request))


async def cancel_as(
    request: Request, tenant: str, tokens: Callable[[], Awaitable[GenerationTokens]]
) -> Response:
    """The cancel of `tenant`'s job, answered with its events_url signed by `tokens`: the
    tenant's own (cancel_job) or an operator's acting for it (server/admin_api.py)."""
    app = state(request)
    job_id = job_id_param(request)
    try:
        snap, changed = await jobs.cancel(app.pool, tenant, job_id, app.clock)
    except JobNotFound:
        raise await gone.missing(app, job_id, tenant) from None
    if changed:
        log.info("job_cancel_requested", job_id=str(job_id), status=snap.job.status)
    finished = not changed and snap.job.status != "cancelling"
    payload = representation.detail(snap, await tokens())
    return json_response(payload, 200 if finished else 202)


async def retry_job(request: Request) -> Response:
    """An operator retries a `dead` job: a new job for the same work (`retry_of` the dead one).

    `202` with the new job (the shape `GET /api/jobs/{id}` has) and its Location; a repeated
    request gets the retry already made, `200` with `Idempotent-Replayed: true`. Any status but
    `dead` is a 409.
    """
    tenant = await tenant_id(request)
    payload, created = await retry_as(request, tenant, lambda: events_tokens(request))
    location = {"Location": payload["poll_url"]}
    if created:
        return json_response(payload, 202, location)
    return json_response(payload, 200, {**location, "Idempotent-Replayed": "true"})


async def retry_as(
    request: Request, tenant: str, tokens: Callable[[], Awaitable[GenerationTokens]]
) -> tuple[dict[str, Any], bool]:
    """The retry of `tenant`'s dead job (retry_job; an operator's, server/admin_api.py): the new
    job as GET /api/jobs/{id} shows it, and whether this call made it."""
    app = state(request)
    job_id = job_id_param(request)
    try:
        outcome = await jobs.retry_dead(app.pool, tenant, job_id, app.clock)
    except JobNotFound:
        raise await gone.missing(app, job_id, tenant) from None
    except (BudgetExceeded, RateLimited) as exc:
        raise refusal_problem(exc) from exc
    if outcome.retry is None:
        job = outcome.job
        why = "its retry is gone" if job.retried_as else f"it is {job.status}"
        raise Problem(
            409, "not-dead", "Only dead jobs can be retried",
            f"Job {job_id} cannot be retried: {why}.",
        )  # fmt: skip
    payload = representation.detail(
        outcome.retry, await tokens(), await _remaining(app, outcome.retry)
    )
    if outcome.created:
        log.info("job_retried", job_id=str(job_id), retry_id=payload["id"], status="queued")
    return payload, outcome.created
