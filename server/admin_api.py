"""/admin/api/*: the operator's dashboard's data and actions, every tenant's (docs/admin.md).

Every route asks server/admin_auth.py first. The reads go through an index each, never history:
the overview through the partial indexes of the live and failed jobs and the per-minute series
the janitor folds (jobstream/series.py), the jobs list through a bounded window of the primary
key (jobstream/admin_jobs.py), a job through its keys. Actions run as the job's tenant would
run them, through the public API's own code (server/jobs_api.py's cancel_as and retry_as).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jobstream import admin_jobs, dead_letters, job_reads, series, workers
from jobstream.db import Queryable
from jobstream.rows import JobRow
from jobstream.server import admin_auth, jobs_api, representation, validation
from jobstream.server.problems import Problem, not_found
from jobstream.server.responses import json_response
from jobstream.server.state import AppState, state
from jobstream.server.stream_tokens import GenerationTokens
from jobstream.short_ids import short_id
from jobstream.sql import queries
from jobstream.types import JOB_STATUSES

Handler = Callable[[Request], Awaitable[Response]]

PAGE_DEFAULT, PAGE_MAX = 50, 200
SPEND_CACHE_S = 5.0
SpendTotals = tuple[list[series.Spend], list[series.Spend]]
# Columns of a job's row an operator has no use for: the fence of its attempt, and the hash
# idempotent creates are compared by.
_HIDDEN = frozenset({"run_token", "request_hash"})


def routes() -> list[Route]:
    return [
        Route("/admin/api/overview", _operator(overview), methods=["GET"]),
        Route("/admin/api/jobs", _operator(list_jobs), methods=["GET"]),
        Route("/admin/api/jobs/{job_id}", _operator(get_job), methods=["GET"]),
        Route("/admin/api/jobs/{job_id}/cancel", _operator(cancel_job), methods=["POST"]),
        Route("/admin/api/jobs/{job_id}/retry", _operator(retry_job), methods=["POST"]),
        Route("/admin/api/dead", _operator(dead), methods=["GET"]),
        Route("/admin/api/dead/retry", _operator(retry_dead), methods=["POST"]),
        Route("/admin/api/workers", _operator(list_workers), methods=["GET"]),
    ]


def _operator(handler: Handler) -> Handler:
    async def endpoint(request: Request) -> Response:
        admin_auth.authorize(request, state(request).settings)
        return await handler(request)

    endpoint.__name__ = handler.__name__
    return endpoint


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _usd(value: Decimal | None) -> float | None:
    return float(value) if value is not None else None


def _now(app: AppState) -> datetime:
    return app.clock.now() or datetime.now(UTC)


async def overview(request: Request) -> Response:
    app = state(request)
    async with app.pool.acquire() as conn, conn.transaction(readonly=True):
        counts = await conn.fetch(queries.ADMIN_COUNTS, app.clock.now())
        hour = await series.last_hour(conn, app.clock)
        spent_hour, spent_day = await _spend(request, conn)
        providers = await conn.fetch(queries.ADMIN_PROVIDERS)
    return json_response(
        {
            "now": _now(app).isoformat(),
            "counts": [
                {
                    "job_name": r["job_name"],
                    "tenant": r["tenant_id"],
                    "status": r["status"],
                    "n": r["n"],
                    "scheduled": r["scheduled"],
                }
                for r in counts
            ],
            "series": {
                "minutes": [m.isoformat() for m in hour.minutes],
                "created": hour.created,
                "succeeded": hour.succeeded,
                "failed": hour.failed,
                "queue_wait_p50_s": hour.queue_wait_p50_s,
                "queue_wait_p95_s": hour.queue_wait_p95_s,
                "run_p50_s": hour.run_p50_s,
                "run_p95_s": hour.run_p95_s,
            },
            "spend": {"hour": _spent(spent_hour), "day": _spent(spent_day)},
            "providers": _providers(app, providers),
        }
    )


async def _spend(request: Request, conn: Queryable) -> SpendTotals:
    """The hour's and the day's spend, read at most once every SPEND_CACHE_S per process: the
    janitor folds attempt_minutes once a minute, so a fresher read would find the same rows,
    and the day's sum (a day of rows, 8 ms at 1,000,000 jobs) was a third of the overview."""
    cached: tuple[float, SpendTotals] | None = getattr(request.app.state, "admin_spend", None)
    now = time.monotonic()
    if cached is not None and now - cached[0] < SPEND_CACHE_S:
        return cached[1]
    totals = await series.spend(conn, state(request).clock)
    request.app.state.admin_spend = (now, totals)
    return totals


def _spent(rows: list[series.Spend]) -> list[dict[str, Any]]:
    return [
        {"tenant": s.tenant, "job_name": s.job_name, "model": s.model, "usd": float(s.usd)}
        for s in rows
    ]


def _providers(app: AppState, rows: list[asyncpg.Record]) -> list[dict[str, Any]]:
    """Every provider this server knows or the database has seen, with its limit (null: none)."""
    limits = app.settings.provider_limits
    seen: dict[str, asyncpg.Record | None] = {name: None for name in sorted(app.providers)}
    for found in rows:
        seen[found["provider"]] = found
    now = _now(app)
    answer = []
    for name, row in seen.items():
        paused = row["paused_until"] if row is not None else None
        answer.append(
            {
                "name": name,
                "in_use": row["in_use"] if row is not None else 0,
                "limit": limits.get(name),
                "paused_until": _iso(paused) if paused is not None and paused > now else None,
            }
        )
    return answer


async def list_jobs(request: Request) -> Response:
    app = state(request)
    params = request.query_params
    if any("\x00" in value for value in params.values()):
        # PostgreSQL's text cannot hold it: a filter with one would be a driver error, a 500.
        raise Problem(400, "invalid-query", "Invalid query", "A parameter holds U+0000.")
    statuses = _statuses(params.get("status"))
    limit = validation.ascii_int(params.get("limit", str(PAGE_DEFAULT)), max_digits=4)
    if limit is None or not 1 <= limit <= PAGE_MAX:
        raise Problem(400, "invalid-limit", "Invalid limit", f"limit must be 1 to {PAGE_MAX}.")
    cursor = params.get("cursor") or None
    found = admin_jobs.Filter(
        statuses=statuses,
        job_name=params.get("job") or None,
        tenant=params.get("tenant") or None,
        since=_time(params.get("since"), "since"),
        until=_time(params.get("until"), "until"),
        q=(params.get("q") or "").strip() or None,
    )
    async with app.pool.acquire() as conn:
        page = await admin_jobs.page(conn, found, cursor=_cursor(cursor), limit=limit)
    return json_response(
        {
            "jobs": [
                {
                    "id": str(j.id),
                    "short_id": short_id(j.id),
                    "tenant": j.tenant,
                    "job_name": j.job_name,
                    "status": j.status,
                    "created_at": _iso(j.created_at),
                    "finished_at": _iso(j.finished_at),
                    "attempts": j.attempts,
                    "cost_usd": _usd(j.cost_usd),
                    "error_class": j.error_class,
                    "idempotency_key": j.idempotency_key,
                }
                for j in page.jobs
            ],
            "next_cursor": str(page.next_cursor) if page.next_cursor is not None else None,
        }
    )


def _statuses(raw: str | None) -> list[str] | None:
    """`status=dead` or `status=failed,dead`: each one of the jobs table's statuses."""
    if not raw:
        return None
    names = [name.strip() for name in raw.split(",") if name.strip()]
    bad = [name for name in names if name not in JOB_STATUSES]
    if bad or not names:
        raise Problem(
            400, "invalid-status", "Invalid status filter",
            f"status must be one or more of {', '.join(JOB_STATUSES)}, comma-separated.",
        )  # fmt: skip
    return names


def _time(raw: str | None, name: str) -> datetime | None:
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        # In UTC here: an offset can carry year 1 or 9999 past what a timestamp holds (a
        # driver's OverflowError would be a 500).
        value = (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise Problem(
            400, f"invalid-{name}", f"Invalid {name}", f"{name} must be an ISO-8601 time."
        ) from None
    return value


def _cursor(raw: str | None) -> uuid.UUID | None:
    if raw is None:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise Problem(
            400, "invalid-cursor", "Invalid cursor", "Use next_cursor as given."
        ) from None


async def get_job(request: Request) -> Response:
    app = state(request)
    job_id = jobs_api.job_id_param(request)
    async with (
        app.pool.acquire() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        row = await conn.fetchrow(queries.ADMIN_JOB, job_id)
        if row is None:
            raise not_found(f"No job {job_id}.")
        snap = await job_reads.read(conn, JobRow.of(row))
        attempts = await conn.fetch(queries.ADMIN_ATTEMPTS, job_id)
        timeline = await conn.fetch(queries.ADMIN_TIMELINE, job_id)
        deliveries = await conn.fetch(queries.ADMIN_DELIVERIES, job_id)
    tokens = await _tokens_of(app, row["tenant_id"])
    return json_response(
        {
            "job": _job(row, snap.job),
            "events": [
                {
                    "seq": e["seq"],
                    "type": e["type"],
                    "attempt": e["attempt"],
                    "at": _iso(e["at"]),
                    "data": e["data"],
                }
                for e in timeline
            ],
            "text": snap.text,
            "progress": snap.progress,
            "events_token": tokens.issue(str(job_id)),
            "events_url": representation.links(str(job_id), tokens)["events_url"],
            "attempts": [_attempt(a) for a in attempts],
            "deliveries": [
                {
                    "id": d["id"],
                    "event": d["event"],
                    "url": d["url"],
                    "status": d["status"],
                    "attempts": d["attempts"],
                    "next_attempt_at": _iso(d["next_attempt_at"]),
                    "last_status_code": d["last_status_code"],
                    "last_error": d["last_error"],
                    "created_at": _iso(d["created_at"]),
                }
                for d in deliveries
            ],
        }
    )


def _job(row: asyncpg.Record, job: JobRow) -> dict[str, Any]:
    """Every column of the row an operator needs, as JSON (money as numbers of USD)."""
    body: dict[str, Any] = {"id": str(job.id), "short_id": short_id(job.id)}
    for name, value in row.items():
        if name in _HIDDEN or name == "id":
            continue
        body[name] = _json_value(value)
    body["tenant"] = job.tenant_id
    body["input"] = representation.job_input(job)
    body["model"] = job.payload.get("model")
    return body


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _attempt(a: asyncpg.Record) -> dict[str, Any]:
    return {
        "attempt": a["attempt"], "worker_id": a["worker_id"], "outcome": a["outcome"],
        "error_class": a["error_class"], "error_detail": a["error_detail"],
        "error_trace": a["error_trace"], "provider": a["provider"], "model": a["model"],
        "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"],
        "cost_usd": _usd(a["cost_usd"]), "cost_known": a["cost_known"],
        "price_source": a["price_source"], "started_at": _iso(a["started_at"]),
        "ended_at": _iso(a["ended_at"]),
    }  # fmt: skip


async def _tokens_of(app: AppState, tenant: str) -> GenerationTokens:
    """Events tokens as the job's tenant's key would sign them: good on the public
    /api/jobs/{id}/events for this job alone, and ending with the tenant's key generation."""
    return app.tokens.at(await app.generations.of(app.pool, tenant))


async def _tenant_of(request: Request) -> str:
    app = state(request)
    job_id = jobs_api.job_id_param(request)
    tenant: str | None = await app.pool.fetchval(queries.ADMIN_JOB_TENANT, job_id)
    if tenant is None:
        raise not_found(f"No job {job_id}.")
    return tenant


async def cancel_job(request: Request) -> Response:
    """As POST /api/jobs/{id}/cancel, for the job's tenant."""
    tenant = await _tenant_of(request)
    return await jobs_api.cancel_as(request, tenant, lambda: _tokens_of(state(request), tenant))


async def retry_job(request: Request) -> Response:
    """As POST /api/jobs/{id}/retry, for the job's tenant: `{"job_id": the new job, "job": it}`."""
    tenant = await _tenant_of(request)
    payload, created = await jobs_api.retry_as(
        request, tenant, lambda: _tokens_of(state(request), tenant)
    )
    return json_response({"job_id": payload["id"], "job": payload}, 202 if created else 200)


async def dead(request: Request) -> Response:
    found = await dead_letters.groups(state(request).pool)
    return json_response(
        {
            "groups": [
                {
                    "error_class": g.error_class,
                    "message": g.message,
                    "count": g.count,
                    "newest_at": _iso(g.newest_at),
                    "job_ids": g.job_ids,
                }
                for g in found
            ],
            "window": dead_letters.RECENT,
        }
    )


async def retry_dead(request: Request) -> Response:
    app = state(request)
    jobs_api.require_json(request)
    body = validation.parse_json(await jobs_api.read_body(request, app.settings.max_body_bytes))
    ids = body.get("ids")
    if not isinstance(ids, list) or not 1 <= len(ids) <= dead_letters.MAX_RETRY:
        raise _invalid_ids(f"ids must be a list of 1 to {dead_letters.MAX_RETRY} job ids.")
    parsed: list[uuid.UUID] = []
    for raw in ids:
        try:
            parsed.append(uuid.UUID(raw) if isinstance(raw, str) else _not_an_id())
        except ValueError:
            raise _invalid_ids(f"{str(raw)[:40]!r} is not a job id.") from None
    retried, refused = await dead_letters.retry(app.pool, parsed, app.clock)
    return json_response(
        {
            "retried": [{"from": r.from_id, "to": r.to_id} for r in retried],
            "refused": [{"id": r.id, "reason": r.reason} for r in refused],
        }
    )


def _not_an_id() -> uuid.UUID:
    raise ValueError("not a string")


def _invalid_ids(detail: str) -> Problem:
    return Problem(
        422, "validation", "Invalid request", detail,
        errors=[{"field": "ids", "message": detail}],
    )  # fmt: skip


async def list_workers(request: Request) -> Response:
    app = state(request)
    window = app.settings.worker_stale_after_s
    async with app.pool.acquire() as conn:
        fleet = await workers.fleet(conn, app.clock, stale_after_s=window)
    return json_response(
        {
            "workers": [
                {
                    "id": w.id,
                    "host": w.host,
                    "pid": w.pid,
                    "version": w.version,
                    "job_names": w.job_names,
                    "slots": w.slots,
                    "started_at": _iso(w.started_at),
                    "heartbeat_at": _iso(w.heartbeat_at),
                    "stopped_at": _iso(w.stopped_at),
                    "state": w.state,
                    "running": [
                        {
                            "job_id": r.job_id,
                            "short_id": short_id(r.job_id),
                            "job_name": r.job_name,
                            "attempt": r.attempt,
                        }
                        for r in w.running
                    ],
                }
                for w in fleet
            ],
            "heartbeat_window_s": window,
        }
    )
