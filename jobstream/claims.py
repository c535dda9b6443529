"""Claiming jobs: a worker takes up to k runnable jobs for its free slots in one call.

Each claim starts an attempt under a new run_token, which fences every later write of the
attempt (docs/design.md, "Fencing"); the comment of claim_jobs (schema.sql), which the claim
calls, says how it stays fair and within every limit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from jobstream import events
from jobstream.clock import Clock
from jobstream.jobspec import BUILT_IN_JOB, AttemptSpec
from jobstream.settings.worker import WorkerSettings
from jobstream.sql import queries

# JOBSTREAM_TENANT_MAX_SHARE's default, for callers without settings (tests, benchmarks).
DEFAULT_MAX_SHARE: float = WorkerSettings.tenant_max_share


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
    job_name: str = BUILT_IN_JOB
    # The create's trace context (W3C traceparent), which the attempt's spans continue; None
    # when the create was not traced (jobstream/tracing.py).
    traceparent: str | None = None
    # When the attempt began, by the claim's clock: its row records it at its end (job_attempts
    # in schema.sql). None: the end reads it from the event row that opened the attempt's log.
    started_at: datetime | None = None

    @property
    def exhausted(self) -> bool:
        return self.counted_attempts >= self.max_attempts


async def claim(
    pool: asyncpg.Pool,
    *,
    providers: Sequence[str],
    worker_id: str,
    lease_s: float,
    clock: Clock,
    limits: Mapping[str, int] | None = None,
    names: Sequence[str] = (BUILT_IN_JOB,),
    max_share: float = DEFAULT_MAX_SHARE,
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
        names=names,
        max_share=max_share,
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
    names: Sequence[str] = (BUILT_IN_JOB,),
    max_share: float = DEFAULT_MAX_SHARE,
) -> list[Claimed]:
    """Claim up to `max_jobs` runnable jobs of `providers` in one call (claim_jobs, schema.sql).

    Tenants share the batch in turns, so a batch may hold fewer jobs than asked while more are
    runnable: claim again while slots are free and the last batch was not empty.
    `limits` caps the attempts running at once, across every worker, for the providers it names
    (the others have none): the claim locks those providers' rows first, then counts.
    Only jobs named in `names` are claimed: the others wait for a worker that runs them.
    A tenant without a running limit of its own gets a fair share of the live workers' slots,
    at most `max_share` of them while other tenants exist (claim_jobs' comment).
    """
    limits = {name: n for name, n in (limits or {}).items() if name in providers}
    unlimited = [name for name in providers if name not in limits]
    full_tenants: list[str] = []
    lost_races = 0
    while True:
        try:
            return await _claim_once(
                pool,
                unlimited,
                limits,
                full_tenants,
                worker_id,
                lease_s,
                clock,
                max_jobs,
                names,
                max_share,
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
    names: Sequence[str],
    max_share: float,
) -> list[Claimed]:
    limited = sorted(limits)
    async with pool.acquire() as conn:
        jobs = await conn.fetch(
            queries.CLAIM_JOBS,
            unlimited,
            worker_id,
            lease_s,
            clock.now(),
            limited,
            [limits[name] for name in limited],
            full_tenants,
            max_jobs,
            list(names),
            max_share,
        )
        if jobs and jobs[0]["id"] is None:
            # The claim undid itself: these tenants went over their running limit.
            raise _TenantsFull([job["tenant_id"] for job in jobs])
        # After the commit: their attempts' logs opened (queries.NOTIFY_EVENTS says why).
        await events.announce(conn, [(job["id"], job["last_seq"]) for job in jobs])
    return [claimed(job) for job in jobs]


def claimed(job: asyncpg.Record) -> Claimed:
    """A claimed job as the worker holds it, from its row as claim_jobs returns it."""
    return Claimed(
        job_id=job["id"],
        tenant_id=job["tenant_id"],
        attempt=job["attempts"],
        run_token=job["run_token"],
        provider=job["provider"],
        spec=AttemptSpec.from_payload(job["payload"]),
        max_attempts=job["max_attempts"],
        counted_attempts=job["attempts"] - job["uncounted_attempts"],
        job_name=job["job_name"],
        traceparent=job["traceparent"],
        started_at=job["started_at"],
    )
