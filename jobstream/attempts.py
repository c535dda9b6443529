"""An attempt's writes to its job: claim, lease, outcome. Every one is fenced by run_token.

A write that finds the job no longer held by its run_token raises Fenced, and the attempt stops:
another attempt, a cancel, or the reaper owns the job now (DESIGN.md §4.2).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg
import structlog

from jobstream import events, ledger, outbox
from jobstream.clock import Clock
from jobstream.db import Conn
from jobstream.errors import Fenced
from jobstream.events import NewEvent
from jobstream.jobspec import AttemptSpec
from jobstream.sql import queries
from jobstream.types import AttemptOutcome
from jobstream.usage import Usage

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Claimed:
    """A job this worker holds for one attempt."""

    job_id: uuid.UUID
    tenant_id: str
    attempt: int
    run_token: uuid.UUID
    provider: str
    spec: AttemptSpec
    max_attempts: int
    counted_attempts: int  # attempts that count against max_attempts, this one included

    @property
    def exhausted(self) -> bool:
        return self.counted_attempts >= self.max_attempts


@dataclass(frozen=True)
class LeaseState:
    status: str
    cancel_requested_at: datetime | None


async def claim(
    pool: asyncpg.Pool,
    *,
    providers: Sequence[str],
    worker_id: str,
    lease_s: float,
    clock: Clock,
    limits: Mapping[str, int] | None = None,
) -> Claimed | None:
    """Claim the next runnable job of `providers`, or None (claim_batch of one)."""
    held = await claim_batch(
        pool,
        providers=providers,
        worker_id=worker_id,
        lease_s=lease_s,
        clock=clock,
        limits=limits,
        max_jobs=1,
    )
    return held[0] if held else None


async def claim_batch(
    pool: asyncpg.Pool,
    *,
    providers: Sequence[str],
    worker_id: str,
    lease_s: float,
    clock: Clock,
    max_jobs: int,
    limits: Mapping[str, int] | None = None,
) -> list[Claimed]:
    """Claim up to `max_jobs` runnable jobs of `providers` in one transaction.

    Tenants share the batch in turns, so a batch may hold fewer jobs than asked while more are
    runnable: claim again while slots are free and the last batch was not empty.
    `limits` caps the attempts running at once, across every worker, for the providers it names
    (the others have none): the claim locks those providers' rows first, then counts (see
    queries.LOCK_PROVIDERS and CLAIM_JOBS).
    """
    limits = {name: n for name, n in (limits or {}).items() if name in providers}
    unlimited = [name for name in providers if name not in limits]
    full_tenants: list[str] = []
    lost_races = 0
    while True:
        try:
            return await _claim_once(
                pool, unlimited, limits, full_tenants, worker_id, lease_s, clock, max_jobs
            )
        except _TenantsFull as full:
            # Other workers' claims for these tenants committed first. The next try counts them
            # (a new snapshot); after a few, leave the contested tenants to the next round.
            lost_races += 1
            if lost_races >= CLAIM_TRIES_PER_TENANT:
                full_tenants.extend(full.tenant_ids)


# Tries of a claim that lost a race for a tenant's last slots before it skips that tenant.
CLAIM_TRIES_PER_TENANT = 3


class _TenantsFull(Exception):
    def __init__(self, tenant_ids: list[str]) -> None:
        self.tenant_ids = tenant_ids


async def _claim_once(
    pool: asyncpg.Pool,
    unlimited: list[str],
    limits: Mapping[str, int],
    full_tenants: list[str],
    worker_id: str,
    lease_s: float,
    clock: Clock,
    max_jobs: int,
) -> list[Claimed]:
    now = clock.now()
    async with pool.acquire() as conn, conn.transaction():
        locked: list[str] = []
        if limits:
            rows = await conn.fetch(queries.LOCK_PROVIDERS, sorted(limits), now)
            locked = [row["provider"] for row in rows]
        jobs = await conn.fetch(
            queries.CLAIM_JOBS,
            unlimited,
            worker_id,
            lease_s,
            now,
            locked,
            [limits[name] for name in locked],
            full_tenants,
            max_jobs,
        )
        if not jobs:
            return []
        tenants = sorted({job["tenant_id"] for job in jobs})
        await conn.execute(queries.LOCK_CLAIMED_TENANTS, tenants, now)
        over = [row["id"] for row in await conn.fetch(queries.TENANTS_OVER_LIMIT, tenants)]
        if over:
            raise _TenantsFull(over)  # rolls the whole claim back
    return [
        Claimed(
            job_id=job["id"],
            tenant_id=job["tenant_id"],
            attempt=job["attempts"],
            run_token=job["run_token"],
            provider=job["provider"],
            spec=AttemptSpec.from_payload(job["payload"]),
            max_attempts=job["max_attempts"],
            counted_attempts=job["attempts"] - job["uncounted_attempts"],
        )
        for job in jobs
    ]


@dataclass(frozen=True)
class Renewal:
    """What one renewal of many leases found, by run token. An attempt in neither is fenced out."""

    renewed: dict[uuid.UUID, LeaseState]
    # Still held, but its row was locked by another write at that instant: try again soon.
    busy: set[uuid.UUID]


async def renew_many(
    pool: asyncpg.Pool, helds: Sequence[Claimed], lease_s: float, clock: Clock
) -> Renewal:
    """Renew every lease in `helds` in one statement, fenced per attempt (RENEW_LEASES)."""
    rows = await pool.fetch(
        queries.RENEW_LEASES,
        [held.job_id for held in helds],
        [held.run_token for held in helds],
        lease_s,
        clock.now(),
    )
    renewed: dict[uuid.UUID, LeaseState] = {}
    busy: set[uuid.UUID] = set()
    for row in rows:
        if row["status"] is None:
            busy.add(row["run_token"])
        else:
            renewed[row["run_token"]] = LeaseState(row["status"], row["cancel_requested_at"])
    return Renewal(renewed, busy)


@dataclass(frozen=True)
class TokenAppend:
    """Chunks of one attempt's text to append, as the text after offset `at`: how many
    characters of its text the writer knows are in the log."""

    held: Claimed
    chunks: Sequence[str]
    at: int


@dataclass(frozen=True)
class Appended:
    """What became of one TokenAppend: `last_seq` once it landed; None, having written nothing,
    when the log held another amount of the text (a write in doubt landed after all) or when
    the attempt no longer holds its job (`held` false: fenced)."""

    last_seq: int | None
    held: bool


async def append_tokens_many(pool: asyncpg.Pool, appends: Sequence[TokenAppend]) -> list[Appended]:
    """Append every attempt's chunks in one statement and one commit (APPEND_TOKENS_MANY),
    fenced and compare-and-set per attempt; the answers are in the order of `appends`."""
    if any(not a.chunks for a in appends):
        raise ValueError("an append needs at least one chunk")
    texts = [chunk for a in appends for chunk in a.chunks]
    owners = [n for n, a in enumerate(appends, start=1) for _ in a.chunks]
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            queries.APPEND_TOKENS_MANY,
            [a.held.job_id for a in appends],
            [a.held.run_token for a in appends],
            [a.held.attempt for a in appends],
            [a.at for a in appends],
            [a.at + sum(len(chunk) for chunk in a.chunks) for a in appends],
            [len(a.chunks) for a in appends],
            texts,
            owners,
        )
    return [Appended(row["last_seq"], row["held"]) for row in rows]


async def append_tokens(
    pool: asyncpg.Pool, held: Claimed, texts: Sequence[str], *, at: int
) -> int | None:
    """One attempt's flush alone: its chunks as the text after offset `at`.

    Returns the new last_seq; or None, having written nothing, when the log holds another
    amount (a write in doubt landed after all): read written_chars and write what is missing.
    Raises Fenced when the attempt no longer holds the job.
    """
    (answer,) = await append_tokens_many(pool, [TokenAppend(held, texts, at)])
    if not answer.held:
        raise Fenced(f"job {held.job_id}: run_token {held.run_token} no longer holds the job")
    return answer.last_seq


async def written_chars(pool: asyncpg.Pool, held: Claimed) -> int:
    """Characters of this attempt's text committed to the log: the offset its next append names.

    Raises Fenced when the attempt no longer holds the job.
    """
    row = await pool.fetchrow(
        queries.ATTEMPT_TEXT_WRITTEN, held.job_id, held.attempt, held.run_token
    )
    if row is None or not row["held"]:
        raise Fenced(f"job {held.job_id}: run_token {held.run_token} no longer holds the job")
    return int(row["chars"])


async def _finish_attempt(
    conn: Conn,
    held: Claimed,
    outcome: AttemptOutcome,
    clock: Clock,
    *,
    usage: Usage | None = None,
    error_class: str | None = None,
    error_detail: str | None = None,
    cancel_confirmed: bool | None = None,
) -> None:
    await conn.execute(
        queries.FINISH_ATTEMPT,
        held.job_id,
        held.attempt,
        outcome,
        error_class,
        error_detail,
        usage.input_tokens if usage else None,
        usage.output_tokens if usage else None,
        usage.cost_usd if usage else None,
        usage.cost_known if usage else False,
        cancel_confirmed,
        clock.now(),
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


async def accept_many(pool: asyncpg.Pool, successes: Sequence[Success], clock: Clock) -> set[int]:
    """Accept these attempts' results in one statement; returns the indexes that landed.

    The others were fenced out (another attempt, a cancel or the reaper owns their job) and
    changed nothing. At most one result per job: the fence guarantees it. The tenant pays the
    accepted attempt's price, once; failed attempts are our cost.
    """
    by_job = {s.held.job_id: i for i, s in enumerate(successes)}
    usages = [s.usage for s in successes]
    rows = await pool.fetch(
        queries.SUCCEED_ATTEMPTS,
        [s.held.job_id for s in successes],
        [s.held.run_token for s in successes],
        [{"text": s.text, "usage": u.to_json()} for s, u in zip(successes, usages, strict=True)],
        [s.held.attempt for s in successes],
        [u.input_tokens for u in usages],
        [u.output_tokens for u in usages],
        [u.cost_usd for u in usages],
        [u.cost_known for u in usages],
        [s.last_chunk for s in successes],
        clock.now(),
    )
    return {by_job[row["id"]] for row in rows}


async def accept(pool: asyncpg.Pool, success: Success, clock: Clock) -> None:
    """Accept one attempt's result; raises Fenced when the attempt no longer holds its job."""
    if not await accept_many(pool, [success], clock):
        raise Fenced(f"job {success.held.job_id}: not running under this attempt")


def _usage_event(usage: Usage | None) -> list[NewEvent]:
    """An attempt that ends any way but success still tells its readers what it used, when the
    provider told us (API.md: `usage` when known); our estimates stay in the attempt history."""
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
) -> None:
    """End the attempt with an error and either schedule a retry or end the job.

    `error` is `{"class", "message"}`; `retry_in_s` is used only with action "retry".
    """
    async with pool.acquire() as conn, conn.transaction():
        new_events = [*_usage_event(usage), NewEvent("attempt_error", error)]
        if action == "retry":
            row = await conn.fetchrow(
                queries.REQUEUE_JOB, held.job_id, held.run_token, retry_in_s, error, clock.now(), 0
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
            raise Fenced(f"job {held.job_id}: not running under this attempt")
        # The fenced UPDATE above proved we held the job and keeps its row locked; the job no
        # longer reads `running`, so the appends below go unfenced.
        await _finish_attempt(
            conn,
            held,
            outcome,
            clock,
            usage=usage,
            error_class=error["class"],
            error_detail=error.get("message"),
        )
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
        row = await conn.fetchrow(queries.CONFIRM_CANCEL, held.job_id, held.run_token, clock.now())
        if row is None:
            raise Fenced(f"job {held.job_id}: not cancelling under this attempt")
        await ledger.release(conn, held.job_id)
        await _finish_attempt(
            conn, held, "cancelled", clock, usage=usage, cancel_confirmed=provider_confirmed
        )
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
        row = await conn.fetchrow(
            queries.REQUEUE_JOB, held.job_id, held.run_token, 0.0, error, clock.now(), 1
        )
        if row is None:
            raise Fenced(f"job {held.job_id}: not running under this attempt")
        await _finish_attempt(
            conn,
            held,
            "interrupted",
            clock,
            usage=usage,
            error_class="interrupted",
            error_detail=error["message"],
        )
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
        # Regression: two reapers whose batches met the same tenants in opposite orders
        # deadlocked, and one of them claimed nothing that round (queries.SELECT_EXPIRED).
        for job in sorted(rows, key=lambda row: (row["tenant_id"], row["ledger_shard"])):
            job_id, attempt = job["id"], job["attempts"]
            await conn.execute(queries.MARK_ATTEMPT_LOST, job_id, attempt, clock.now())
            lost = {"class": "lost", "message": "the worker stopped renewing its lease"}
            if job["status"] == "cancelling":
                cancelled = {"class": "cancelled", "message": "cancelled while running"}
                await conn.execute(
                    queries.REAP_TO_TERMINAL, job_id, "cancelled", cancelled, clock.now()
                )
                new = [NewEvent("done", {"status": "cancelled", "error": cancelled})]
            elif attempt - job["uncounted_attempts"] >= job["max_attempts"]:
                await conn.execute(queries.REAP_TO_TERMINAL, job_id, "dead", lost, clock.now())
                new = [
                    NewEvent("attempt_error", lost),
                    NewEvent("done", {"status": "dead", "error": lost}),
                ]
            else:
                await conn.execute(queries.REAP_TO_QUEUE, job_id, lost, clock.now())
                new = [
                    NewEvent("attempt_error", lost),
                    NewEvent("status", {"status": "queued", "error": lost}),
                ]
            if new[-1].type == "done":
                await ledger.release(conn, job_id)
                await outbox.record_end(conn, job_id)
            await events.append(conn, job_id, attempt, new, run_token=None)
            status = new[-1].data["status"]
            log.info(
                "lease_expired",
                job_id=str(job_id),
                attempt=attempt,
                run_token=str(job["run_token"]),
                lost_worker_id=job["worker_id"],
                status=status,
            )
        return len(rows)
