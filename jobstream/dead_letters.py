"""Dead letters for an operator: the failed and dead jobs, grouped by what went wrong, and a
retry of a selection (GET /admin/api/dead, POST /admin/api/dead/retry).

The groups are of the newest RECENT failed and dead jobs (jobs_failed_idx, newest first), so
the read is bounded whatever the history holds; a group says how many of those it has. A retry
is an operator's retry of each job, as POST /api/jobs/{id}/retry makes it (jobs.retry_dead:
a new job, under the tenant's budget and create rate), run as the job's tenant; a job it cannot
retry is refused with the reason, and the others go on.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg

from jobstream import jobs
from jobstream.clock import Clock
from jobstream.errors import BudgetExceeded, JobNotFound, RateLimited
from jobstream.sql import queries

RECENT = 10_000  # failed and dead jobs grouped, the newest
GROUP_IDS = 50  # ids a group lists, newest first
MAX_RETRY = 100  # ids one retry request may name


@dataclass
class Group:
    error_class: str | None
    message: str | None
    count: int = 0
    newest_at: datetime | None = None
    job_ids: list[str] = field(default_factory=list)


async def groups(pool: asyncpg.Pool) -> list[Group]:
    """The newest RECENT failed and dead jobs by error class and message, largest group first."""
    found: dict[tuple[str | None, str | None], Group] = {}
    for r in await pool.fetch(queries.ADMIN_DEAD, RECENT):
        key = (r["error_class"], r["message"])
        group = found.get(key)
        if group is None:
            group = found[key] = Group(*key)
        group.count += 1
        if r["finished_at"] is not None and (
            group.newest_at is None or r["finished_at"] > group.newest_at
        ):
            group.newest_at = r["finished_at"]
        if len(group.job_ids) < GROUP_IDS:
            group.job_ids.append(str(r["id"]))  # newest first: the read's order
    return sorted(found.values(), key=lambda g: (-g.count, g.error_class or "", g.message or ""))


@dataclass(frozen=True)
class Retried:
    from_id: str
    to_id: str


@dataclass(frozen=True)
class Refused:
    id: str
    reason: str


async def retry(
    pool: asyncpg.Pool, ids: list[uuid.UUID], clock: Clock
) -> tuple[list[Retried], list[Refused]]:
    """An operator's retry of each job, one transaction each (as the API's), in the order given.
    Asking again for a job already retried answers its retry, as the API does."""
    retried: list[Retried] = []
    refused: list[Refused] = []
    for job_id in ids:
        tenant: str | None = await pool.fetchval(queries.ADMIN_JOB_TENANT, job_id)
        if tenant is None:
            refused.append(Refused(str(job_id), "no such job"))
            continue
        try:
            outcome = await jobs.retry_dead(pool, tenant, job_id, clock)
        except JobNotFound:
            refused.append(Refused(str(job_id), "no such job"))
            continue
        except (BudgetExceeded, RateLimited) as exc:
            refused.append(Refused(str(job_id), str(exc)))
            continue
        if outcome.retry is None:
            job = outcome.job
            why = "its retry is gone" if job.retried_as else f"it is {job.status}, not dead"
            refused.append(Refused(str(job_id), why))
        else:
            retried.append(Retried(str(job_id), str(outcome.retry.job.id)))
    return retried, refused
