"""An attempt's outcome written to its job: success, failure, cancel, hand-back; and the reaper,
which settles the jobs of attempts whose lease ran out. Every write is fenced by run_token.

A write that finds the job no longer held by its run_token raises Fenced, and the attempt stops:
another attempt, a cancel, or the reaper owns the job now (docs/design.md, "Fencing").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

import asyncpg
import structlog

from jobstream import events, ledger, outbox
from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.db import Conn
from jobstream.errors import Fenced
from jobstream.events import NewEvent
from jobstream.sql import queries
from jobstream.types import AttemptOutcome
from jobstream.usage import Usage

log = structlog.get_logger(__name__)


async def _finish_attempt(
    conn: Conn,
    job_id: UUID,
    attempt: int,
    run_token: UUID,
    outcome: AttemptOutcome,
    clock: Clock,
    *,
    started_at: datetime | None = None,
    usage: Usage | None = None,
    error: dict[str, Any] | None = None,
    cancel_confirmed: bool | None = None,
    trace: str | None = None,
) -> None:
    """Write the attempt's row (queries.FINISH_ATTEMPT), in the transaction of the statement
    that moves its job on, and before it: fenced on `run_token`, it locks the job's row first.
    `started_at` is the attempt's start as its claim returned it (None: the database reads it).
    `error` is the attempt's {"class", "message"} when it failed, `trace` the traceback of the
    job's own code that raised it (kept for operators only)."""
    await conn.execute(
        queries.FINISH_ATTEMPT,
        job_id,
        attempt,
        outcome,
        error["class"] if error else None,
        error.get("message") if error else None,
        usage.input_tokens if usage else None,
        usage.output_tokens if usage else None,
        usage.cost_usd if usage else None,
        usage.cost_known if usage else False,
        cancel_confirmed,
        clock.now(),
        trace,
        usage.price_source if usage else None,
        usage.model if usage else None,
        run_token,
        started_at,
    )


@dataclass(frozen=True)
class Success:
    """An attempt's accepted result, ready to write: its text, its usage, and `last_chunk`, the
    end of the text that is not in the log yet. The statement appends it as a `token` event,
    then `usage` and `done` (queries.SUCCEED_ATTEMPTS)."""

    held: Claimed
    text: str
    usage: Usage
    last_chunk: str = ""
    # A job's validated structured output (JSON), shown as `result.output`; None for none.
    output: Any = None
    # What the tenant pays for the result, when more than the attempt's own calls: those and
    # the journaled steps of earlier attempts it replayed. None: the attempt's cost.
    charge: Decimal | None = None
    # Where `last_chunk` goes: the characters of the attempt's text the log holds, as its
    # writer knows them (worker/token_log.py). The success lands only if the log agrees.
    text_at: int = 0


async def accept_many(pool: asyncpg.Pool, successes: Sequence[Success], clock: Clock) -> set[int]:
    """Accept these attempts' results in one statement; returns the indexes that landed.

    The others were fenced out (another attempt, a cancel or the reaper owns their job) and
    changed nothing. At most one result per job: the fence guarantees it. The tenant pays the
    accepted attempt's price, once; failed attempts are our cost.
    """
    by_job = {s.held.job_id: i for i, s in enumerate(successes)}
    async with pool.acquire() as conn:
        rows = await conn.fetch(queries.SUCCEED_ATTEMPTS, *succeed_args(successes, clock.now()))
        await events.announce(conn, [(row["id"], row["last_seq"]) for row in rows])
    return {by_job[row["id"]] for row in rows}


def succeed_args(successes: Sequence[Success], now: datetime | None) -> list[Any]:
    """SUCCEED_ATTEMPTS' parameters. The attempts as one JSON array: nine arrays cost the
    worker's asyncpg a type check and an encoding per element (a Python call per result)."""
    return [[_succeeded(s) for s in successes], [s.held.job_id for s in successes], now]


def _succeeded(success: Success) -> dict[str, Any]:
    """One element of SUCCEED_ATTEMPTS' $1, as its recordset names the fields."""
    held, usage = success.held, success.usage
    return {
        # str: asyncpg's own UUID type is none that orjson knows.
        "job_id": str(held.job_id), "run_token": str(held.run_token),
        "result": _result(success), "attempt": held.attempt,
        "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
        # A string: exact, where a JSON number would pass through a float.
        "cost": str(usage.cost_usd), "cost_known": usage.cost_known,
        "price_source": usage.price_source, "model": usage.model,
        "last_chunk": success.last_chunk, "text_at": success.text_at,
        "charge": str(success.charge) if success.charge is not None else None,
        "started_at": held.started_at.isoformat() if held.started_at is not None else None,
    }  # fmt: skip


def _result(success: Success) -> dict[str, Any]:
    result: dict[str, Any] = {"text": success.text, "usage": success.usage.to_json()}
    if success.output is not None:
        result["output"] = success.output
    return result


async def accept(pool: asyncpg.Pool, success: Success, clock: Clock) -> None:
    """Accept one attempt's result; raises Fenced when the attempt no longer holds its job."""
    if not await accept_many(pool, [success], clock):
        raise Fenced(f"job {success.held.job_id}: not running under this attempt")


def _usage_event(usage: Usage | None) -> list[NewEvent]:
    """An attempt that ends any way but success still tells its readers what it used, when the
    provider told us (docs/design.md, "Events": `usage` when known); our estimates stay in the
    attempt history."""
    return [NewEvent("usage", usage.to_json())] if usage is not None and usage.cost_known else []


FailureAction = Literal["retry", "fail", "dead"]


async def fail(
    pool: asyncpg.Pool,
    held: Claimed,
    *,
    action: FailureAction,
    outcome: AttemptOutcome,
    error: dict[str, Any],
    usage: Usage | None,
    retry_in_s: float,
    clock: Clock,
    trace: str | None = None,
    counted: bool = True,
) -> None:
    """End the attempt with an error and either schedule a retry or end the job.

    `error` is `{"class", "message"}`; `retry_in_s` is used only with action "retry".
    """
    async with pool.acquire() as conn, conn.transaction():
        await _finish_attempt(
            conn, held.job_id, held.attempt, held.run_token, outcome, clock,
            started_at=held.started_at, usage=usage, error=error, trace=trace,
        )  # fmt: skip
        new_events = [*_usage_event(usage), NewEvent("attempt_error", error)]
        if action == "retry":
            row = await conn.fetchrow(
                queries.REQUEUE_JOB,
                held.job_id,
                held.run_token,
                retry_in_s,
                error,
                clock.now(),
                0 if counted else 1,
            )
            if row is not None:
                new_events.append(
                    NewEvent(
                        "status",
                        {
                            "status": "queued",
                            "retry_at": row["run_after"].isoformat(),
                            "error": error,
                        },
                    )
                )
        else:
            status = "failed" if action == "fail" else "dead"
            row = await conn.fetchrow(
                queries.FAIL_JOB, held.job_id, held.run_token, status, error, clock.now()
            )
            new_events.append(NewEvent("done", {"status": status, "error": error}))
            if row is not None:
                await ledger.release(conn, held.job_id)
                await outbox.record_end(conn, held.job_id)
        if row is None:
            # The attempt's row was not written either (its fence is the same): rolled back.
            raise Fenced(f"job {held.job_id}: not running under this attempt")
        # The fenced UPDATE above proved we held the job and keeps its row locked; the job no
        # longer reads `running`, so the appends below go unfenced.
        await events.append(conn, held.job_id, held.attempt, new_events, run_token=None)


async def confirm_cancel(
    pool: asyncpg.Pool,
    held: Claimed,
    usage: Usage | None,
    clock: Clock,
    *,
    provider_confirmed: bool,
) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await _finish_attempt(
            conn, held.job_id, held.attempt, held.run_token, "cancelled", clock,
            started_at=held.started_at, usage=usage, cancel_confirmed=provider_confirmed,
        )  # fmt: skip
        row = await conn.fetchrow(queries.CONFIRM_CANCEL, held.job_id, held.run_token, clock.now())
        if row is None:
            raise Fenced(f"job {held.job_id}: not cancelling under this attempt")
        await ledger.release(conn, held.job_id)
        await outbox.record_end(conn, held.job_id)
        await events.append(
            conn,
            held.job_id,
            held.attempt,
            [
                *_usage_event(usage),
                NewEvent("done", {"status": "cancelled", "error": row["error"]}),
            ],
            run_token=None,
        )


async def hand_back(pool: asyncpg.Pool, held: Claimed, usage: Usage | None, clock: Clock) -> None:
    """Graceful shutdown: return the job to the queue now, without waiting for lease expiry.

    The attempt is `interrupted` and does not count against max_attempts.
    """
    error = {"class": "interrupted", "message": "worker shut down; the job was handed back"}
    async with pool.acquire() as conn, conn.transaction():
        await _finish_attempt(
            conn, held.job_id, held.attempt, held.run_token, "interrupted", clock,
            started_at=held.started_at, usage=usage, error=error,
        )  # fmt: skip
        row = await conn.fetchrow(
            queries.REQUEUE_JOB, held.job_id, held.run_token, 0.0, error, clock.now(), 1
        )
        if row is None:
            raise Fenced(f"job {held.job_id}: not running under this attempt")
        await events.append(
            conn,
            held.job_id,
            held.attempt,
            [*_usage_event(usage), NewEvent("status", {"status": "queued", "error": error})],
            run_token=None,
        )


async def reap_expired(pool: asyncpg.Pool, clock: Clock, batch: int = 50) -> int:
    """Settle jobs whose lease ran out (their worker died). Returns how many were settled.

    A running job goes back to the queue (its attempt `lost`), or to `dead` when its attempts are
    used up; a job whose cancel was requested becomes `cancelled`.
    """
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(queries.SELECT_EXPIRED, clock.now(), batch)
        # In tenant order, as every writer of tenant_ledger (ledger.sql). Regression: two
        # reapers whose batches met the same ledger rows in opposite orders deadlocked.
        for job in sorted(rows, key=lambda row: row["tenant_id"]):
            job_id, attempt = job["id"], job["attempts"]
            expired = {"class": "lost", "message": "lease expired: the worker stopped renewing it"}
            # The statements its worker would have run, fenced on its token: SELECT_EXPIRED's
            # lock keeps that current, so each finds its row.
            token = job["run_token"]
            await _finish_attempt(conn, job_id, attempt, token, "lost", clock, error=expired)
            lost = {"class": "lost", "message": "the worker stopped renewing its lease"}
            if job["status"] == "cancelling":
                ended = await conn.fetchrow(queries.CONFIRM_CANCEL, job_id, token, clock.now())
                cancelled = {"class": "cancelled", "message": "cancelled while running"}
                new = [NewEvent("done", {"status": "cancelled", "error": cancelled})]
            elif attempt - job["uncounted_attempts"] >= job["max_attempts"]:
                ended = await conn.fetchrow(
                    queries.FAIL_JOB, job_id, token, "dead", lost, clock.now()
                )
                new = [
                    NewEvent("attempt_error", lost),
                    NewEvent("done", {"status": "dead", "error": lost}),
                ]
            else:
                ended = await conn.fetchrow(
                    queries.REQUEUE_JOB, job_id, token, 0.0, lost, clock.now(), 0
                )
                new = [
                    NewEvent("attempt_error", lost),
                    NewEvent("status", {"status": "queued", "error": lost}),
                ]
            if ended is None:
                raise Fenced(f"job {job_id}: its expired attempt changed under the reaper's lock")
            if new[-1].type == "done":
                await ledger.release(conn, job_id)
                await outbox.record_end(conn, job_id)
            await events.append(conn, job_id, attempt, new, run_token=None)
            status = new[-1].data["status"]
            log.info(
                "lease_expired",
                job_id=str(job_id),
                attempt=attempt,
                run_token=str(token),
                lost_worker_id=job["worker_id"],
                status=status,
            )
        return len(rows)
