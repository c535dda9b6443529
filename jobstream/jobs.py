"""Jobs as the API sees them: create (idempotent), read, list, cancel."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from jobstream import events, ledger, outbox, queries
from jobstream.clock import Clock
from jobstream.db import Conn, Queryable
from jobstream.errors import IdempotencyConflict, JobNotFound, RateLimited
from jobstream.events import NewEvent
from jobstream.jobspec import JobSpec

# Rows leave the repository as plain dicts, so callers may adjust and serialise them freely.
Job = dict[str, Any]


@dataclass(frozen=True)
class Created:
    job: Job
    created: bool  # False: an earlier request with the same key and body made it


async def create(
    pool: asyncpg.Pool,
    tenant_id: str,
    spec: JobSpec,
    idempotency_key: str | None,
    *,
    reserved_usd: Decimal = Decimal(0),
) -> Created:
    request_hash = spec.request_hash()
    job_id = uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            queries.INSERT_JOB,
            job_id,
            tenant_id,
            idempotency_key,
            request_hash,
            spec.provider,
            spec.priority,
            spec.payload(),
            spec.metadata,
            spec.max_attempts,
            spec.webhook_url,
            reserved_usd,
        )
        if row is None:
            existing = await conn.fetchrow(queries.SELECT_JOB_BY_KEY, tenant_id, idempotency_key)
            assert existing is not None  # the conflicting row has committed: ON CONFLICT waited
            if existing["request_hash"] != request_hash:
                raise IdempotencyConflict(
                    f"Idempotency-Key {idempotency_key!r} was used with a different request body"
                )
            return Created(dict(existing), created=False)
        await _check_create_rate(conn, tenant_id)  # RateLimited rolls back
        if reserved_usd > 0:
            await ledger.reserve(conn, tenant_id, reserved_usd)  # BudgetExceeded rolls back
        last_seq = await events.append(
            conn, job_id, 0, [NewEvent("status", {"status": "queued"})], run_token=None
        )
        await conn.execute(queries.NOTIFY_RUNNABLE, spec.provider)
    return Created(_with_seq(row, last_seq), created=True)


async def _check_create_rate(conn: Conn, tenant_id: str) -> None:
    per_min = await conn.fetchval(queries.LOCK_TENANT_RATE, tenant_id)
    if per_min is None:
        return
    window = await conn.fetchrow(queries.TENANT_RECENT_CREATES, tenant_id)
    assert window is not None
    if window["recent"] > per_min:
        raise RateLimited(
            f"at most {per_min} jobs a minute may be created",
            retry_after_s=max(1.0, float(window["frees_in_s"])),
        )


def _with_seq(row: asyncpg.Record, last_seq: int) -> Job:
    # RETURNING predates the events appended after it in the same transaction.
    return {**dict(row), "last_seq": last_seq}


async def get(conn: Queryable, tenant_id: str, job_id: uuid.UUID) -> Job:
    row = await conn.fetchrow(queries.SELECT_JOB, job_id, tenant_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return dict(row)


async def attempts(conn: Queryable, job_id: uuid.UUID) -> list[Job]:
    return [dict(r) for r in await conn.fetch(queries.SELECT_ATTEMPTS, job_id)]


async def list_jobs(
    pool: asyncpg.Pool,
    tenant_id: str,
    *,
    status: str | None,
    before: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[Job]:
    created_at, last_id = before if before else (None, None)
    rows = await pool.fetch(queries.LIST_JOBS, tenant_id, status, created_at, last_id, limit)
    return [dict(r) for r in rows]


async def cancel(
    pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID, clock: Clock
) -> tuple[Job, bool]:
    """Record the intent to cancel. Returns the job and whether this call changed it.

    A queued job is cancelled at once; a running one becomes `cancelling` and its worker, told by
    NOTIFY and at its next lease renewal, confirms. Anything else is left as it is.
    """
    async with pool.acquire() as conn, conn.transaction():
        job = await conn.fetchrow(queries.SELECT_JOB_FOR_UPDATE, job_id, tenant_id)
        if job is None:
            raise JobNotFound(str(job_id))
        now = clock.now()
        if job["status"] == "queued":
            row = await conn.fetchrow(queries.CANCEL_QUEUED, job_id, now)
            assert row is not None  # the row is locked and queued
            await ledger.release(conn, job_id)
            await outbox.record_end(conn, job_id)
            done = {"status": "cancelled", "error": row["error"]}
            last_seq = await events.append(
                conn, job_id, row["attempts"], [NewEvent("done", done)], run_token=None
            )
            return _with_seq(row, last_seq), True
        if job["status"] == "running":
            row = await conn.fetchrow(queries.REQUEST_CANCEL_RUNNING, job_id, now)
            assert row is not None  # the row is locked and running
            last_seq = await events.append(
                conn,
                job_id,
                row["attempts"],
                [NewEvent("status", {"status": "cancelling"})],
                run_token=None,
            )
            return _with_seq(row, last_seq), True
        return dict(job), False


async def retry_dead(pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID, clock: Clock) -> bool:
    """Queue a `dead` job again with a fresh set of attempts. False when it is not dead."""
    async with pool.acquire() as conn, conn.transaction():
        job = await conn.fetchrow(queries.SELECT_JOB_FOR_UPDATE, job_id, tenant_id)
        if job is None:
            raise JobNotFound(str(job_id))
        row = await conn.fetchrow(queries.RETRY_DEAD, job_id, clock.now())
        if row is None:
            return False
        await ledger.reserve_again(conn, job_id)
        await events.append(
            conn,
            job_id,
            row["attempts"],
            [NewEvent("status", {"status": "queued", "reason": "operator retry"})],
            run_token=None,
        )
        return True


@dataclass(frozen=True)
class Snapshot:
    """A job, its attempts and the current attempt's text, as of one instant."""

    job: Job
    attempts: list[Job]
    text: str


async def snapshot(pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID) -> Snapshot:
    # One repeatable-read transaction: the text and last_seq describe the same moment, so a
    # page that renders the text and streams from last_seq neither skips nor repeats a token.
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        job = await get(conn, tenant_id, job_id)
        history = await attempts(conn, job_id)
        if job["status"] == "succeeded":
            # The accepted text is the truth, and stays so once retention compacts the tokens.
            text = job["result"]["text"]
        else:
            text = await events.attempt_text(conn, job_id, job["attempts"])
    return Snapshot(job, history, text)
