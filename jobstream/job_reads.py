"""Jobs as the API reads them: one job, its attempts and text as of one instant, or a page."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from jobstream import events
from jobstream.db import Conn, Queryable
from jobstream.errors import JobNotFound
from jobstream.jobspec import BUILT_IN_JOB
from jobstream.rows import AttemptRow, JobRow
from jobstream.sql import queries
from jobstream.types import TERMINAL_STATUSES, JobStatus


async def get(conn: Queryable, tenant_id: str, job_id: uuid.UUID) -> JobRow:
    row = await conn.fetchrow(queries.SELECT_JOB, job_id, tenant_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return JobRow.of(row)


async def attempts(conn: Queryable, job_id: uuid.UUID) -> list[AttemptRow]:
    return [AttemptRow.of(r) for r in await conn.fetch(queries.SELECT_ATTEMPTS, job_id)]


async def list_jobs(
    pool: asyncpg.Pool,
    tenant_id: str,
    *,
    status: str | None,
    before: tuple[datetime, uuid.UUID] | None,
    limit: int,
) -> list[JobRow]:
    created_at, last_id = before if before else (None, None)
    rows = await pool.fetch(queries.LIST_JOBS, tenant_id, status, created_at, last_id, limit)
    return [JobRow.of(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a job's log stands: what a follower asks before it reads the log."""

    status: JobStatus
    last_seq: int  # the seq of its last event
    tenant_id: str  # whose job it is, whoever reads it (a token's holder names no tenant)
    # For a token's holder: the tenant's key generation, and whether the previous one's grace
    # runs (the token's generation must still be good: server/stream_tokens.py accepts).
    key_generation: int | None = None
    previous_key_valid: bool = False

    @property
    def finished(self) -> bool:
        """The log is complete: nothing will be appended after last_seq."""
        return self.status in TERMINAL_STATUSES


async def progress(pool: asyncpg.Pool, job_id: uuid.UUID, tenant_id: str | None) -> Progress:
    """The job's progress, if it is `tenant_id`'s. `tenant_id` None: the reader holds the job's
    signed events token, which names the job whatever its tenant. Raises JobNotFound."""
    if tenant_id is None:
        row = await pool.fetchrow(queries.JOB_PROGRESS_BY_TOKEN, job_id)
    else:
        row = await pool.fetchrow(queries.JOB_PROGRESS, job_id, tenant_id)
    if row is None:
        raise JobNotFound(str(job_id))
    return Progress(
        row["status"], row["last_seq"], row["tenant_id"],
        row.get("key_generation"), row.get("previous_key_valid", False),
    )  # fmt: skip


@dataclass(frozen=True)
class Snapshot:
    """A job, its attempts and the current attempt's text, as of one instant."""

    job: JobRow
    attempts: list[AttemptRow]
    text: str
    # A job of the app's own: the current attempt's last `progress` event's data, if any.
    progress: dict[str, Any] | None = None


async def snapshot(pool: asyncpg.Pool, tenant_id: str, job_id: uuid.UUID) -> Snapshot:
    # One repeatable-read transaction: the text and last_seq describe the same moment, so a
    # page that renders the text and streams from last_seq neither skips nor repeats a token.
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        return await read(conn, await get(conn, tenant_id, job_id))


async def read(conn: Conn, job: JobRow) -> Snapshot:
    """The rest of `job`'s snapshot, read in the caller's transaction."""
    history = await attempts(conn, job.id)
    if job.status == "succeeded" and job.result is not None:
        # The accepted text is the truth, and stays so once retention compacts the tokens.
        text: str = job.result["text"]
    else:
        text = await events.attempt_text(conn, job.id, job.attempts)
    progress = None
    if job.job_name != BUILT_IN_JOB:  # the built-in job writes none: no read for it
        progress = await conn.fetchval(queries.LAST_PROGRESS, job.id, job.attempts)
    return Snapshot(job, history, text, progress)
