"""Every tenant's jobs for an operator (GET /admin/api/jobs): filtered, newest first, keyset
paged, each page's read bounded by an index.

Newest first is id order (ids are version-7 UUIDs: their head is the time they were made), so
the primary key is the list, and a time range is a range of ids. A page reads a window of at
most WINDOW ids below its cursor and returns the matches among them: a filter that matches
rarely gives short (even empty) pages whose next_cursor goes on further back, never a read of
the whole history. Failed and dead jobs have an index of their own (jobs_failed_idx), read
without a window. A whole id is looked up by its key.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import asyncpg

from jobstream.db import Queryable
from jobstream.sql import queries
from jobstream.types import FAILED_STATUSES

# Ids a page reads at most (the primary key's entries, then those rows): about 10 ms here.
WINDOW = 10_000
_ABOVE_ALL = uuid.UUID(int=(1 << 128) - 1)
_BELOW_ALL = uuid.UUID(int=0)


@dataclass(frozen=True)
class Filter:
    statuses: list[str] | None = None
    job_name: str | None = None
    tenant: str | None = None
    since: datetime | None = None  # made at or after
    until: datetime | None = None  # made before
    q: str | None = None  # a whole id, an id's last characters, an idempotency key, metadata


@dataclass(frozen=True)
class Listed:
    id: uuid.UUID
    tenant: str
    job_name: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    attempts: int
    cost_usd: Decimal | None
    error_class: str | None
    idempotency_key: str | None


@dataclass(frozen=True)
class Page:
    jobs: list[Listed]
    next_cursor: uuid.UUID | None  # the next page: ids below this one


# How far an id's time may be from its job's created_at: the id is made by the creating
# process's clock a moment before the insert, and another host's clock may be off. The id range
# of a time filter is this much wider; created_at then filters exactly.
CLOCK_SLACK = timedelta(minutes=5)


def first_id_at(when: datetime) -> uuid.UUID:
    """The lowest version-7 id of a job made at `when` (to the millisecond); a time before 1970
    or past what 48 bits of milliseconds hold (the year 10889) is the lowest or highest id."""
    millis = int(when.timestamp() * 1000)
    return uuid.UUID(int=min(max(0, millis), (1 << 48) - 1) << 80)


def _shifted(when: datetime, by: timedelta) -> datetime:
    """`when + by`, or `when` itself where that passes the years a datetime holds."""
    try:
        return when + by
    except OverflowError:
        return when


async def page(conn: Queryable, f: Filter, *, cursor: uuid.UUID | None, limit: int) -> Page:
    whole = _whole_id(f.q)
    if whole is not None:
        return await _one(conn, f, whole)
    until = first_id_at(_shifted(f.until, CLOCK_SLACK)) if f.until else _ABOVE_ALL
    upper = min(cursor or _ABOVE_ALL, until)
    lower = first_id_at(_shifted(f.since, -CLOCK_SLACK)) if f.since else _BELOW_ALL
    if f.statuses and set(f.statuses) <= FAILED_STATUSES and f.q is None:
        rows = await conn.fetch(
            queries.ADMIN_FAILED_PAGE, upper, lower, f.statuses, f.job_name, f.tenant,
            limit + 1, f.since, f.until,
        )  # fmt: skip
        more = len(rows) > limit
        listed = [_listed(r) for r in rows[:limit]]
        return Page(listed, listed[-1].id if more else None)
    floor: uuid.UUID | None = await conn.fetchval(queries.ADMIN_WINDOW_FLOOR, upper, lower, WINDOW)
    rows = await conn.fetch(
        queries.ADMIN_JOBS_PAGE, upper, floor or lower, f.statuses, f.job_name, f.tenant, f.q,
        limit + 1, f.since, f.until,
    )  # fmt: skip
    listed = [_listed(r) for r in rows[:limit]]
    if len(rows) > limit:
        return Page(listed, listed[-1].id)
    # The window held fewer matches than a page: the next page reads the window below it.
    return Page(listed, floor)


async def _one(conn: Queryable, f: Filter, job_id: uuid.UUID) -> Page:
    # The range [id, id + 1): the one key, under the page's other filters.
    above = uuid.UUID(int=min(job_id.int + 1, _ABOVE_ALL.int))
    row = await conn.fetchrow(
        queries.ADMIN_JOBS_PAGE, above, job_id, f.statuses, f.job_name, f.tenant, None, 1,
        f.since, f.until,
    )  # fmt: skip
    return Page([_listed(row)] if row is not None else [], None)


def _whole_id(q: str | None) -> uuid.UUID | None:
    if q is None or len(q.replace("-", "")) != 32:
        return None
    try:
        return uuid.UUID(q)
    except ValueError:
        return None


def _listed(r: asyncpg.Record) -> Listed:
    return Listed(
        r["id"], r["tenant_id"], r["job_name"], r["status"], r["created_at"], r["finished_at"],
        r["attempts"], r["cost_usd"], r["error_class"], r["idempotency_key"],
    )  # fmt: skip
