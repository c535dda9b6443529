"""Retention and compaction: what the janitor (worker/janitor.py) does, one batch per call.

A finished job is *settled* JOBSTREAM_COMPACT_AFTER_S after it ends: its log is compacted (the
last attempt's token events fold into a few events holding the same text at the same final seqs;
superseded attempts' token events shrink to one empty event per run) and it is given its expiry,
its end plus its retention. Once that has passed, the job is deleted with its attempts, events and
webhook rows, leaving a tombstone for a while, so that its id answers 410 Gone instead of 404.
Every call is one short transaction on finished jobs only (queries.SETTLE_JOBS,
DELETE_EXPIRED_JOBS), which no claim and no append ever waits for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from jobstream.clock import Clock
from jobstream.db import Conn, Queryable
from jobstream.sql import queries

# Most characters one compacted event holds: a 100,000-token job (about 400 KB of text) reads
# back as seven events instead of thousands, and no single event is a large row to send.
COMPACT_CHARS = 65_536


@dataclass(frozen=True)
class Batch:
    """What one batch did: jobs settled or deleted, and rows removed."""

    jobs: int
    rows: int


async def settle(
    conn: Conn,
    clock: Clock,
    *,
    compact_after_s: float,
    retention_s: int,
    limit: int,
    compact_chars: int = COMPACT_CHARS,
) -> Batch:
    """Compact and schedule for deletion up to `limit` jobs that ended `compact_after_s` ago."""
    row = await conn.fetchrow(
        queries.SETTLE_JOBS, clock.now(), compact_after_s, limit, retention_s, compact_chars
    )
    assert row is not None
    return Batch(row["jobs"], row["removed"])


async def delete_expired(conn: Conn, clock: Clock, *, limit: int, tombstones: bool) -> Batch:
    """Delete up to `limit` jobs past their expiry, with every row that belongs to them."""
    row = await conn.fetchrow(queries.DELETE_EXPIRED_JOBS, clock.now(), limit, tombstones)
    assert row is not None
    return Batch(row["jobs"], row["removed"])


async def prune_tombstones(conn: Conn, clock: Clock, *, keep_s: int, limit: int) -> int:
    """Forget up to `limit` deleted jobs older than `keep_s`: their ids answer 404 from then on."""
    status = await conn.execute(queries.PRUNE_TOMBSTONES, clock.now(), keep_s, limit)
    return int(status.split()[-1])


# How long the row of a worker that stopped or went silent is kept.
WORKER_ROW_KEEP_S = 86_400


async def prune_workers(conn: Conn, clock: Clock, *, keep_s: int = WORKER_ROW_KEEP_S) -> int:
    """Forget the workers stopped or silent for more than `keep_s`."""
    status = await conn.execute(queries.PRUNE_WORKERS, clock.now(), keep_s)
    return int(status.split()[-1])


async def fold_counters(conn: Conn) -> int:
    """Move the metric counters of backends that are gone onto the folded row."""
    status = await conn.execute(queries.FOLD_METRIC_TOTALS)
    return int(status.split()[-1])


async def deleted_at(conn: Queryable, job_id: uuid.UUID, tenant_id: str | None) -> datetime | None:
    """When retention deleted this job, if its tombstone is still kept (None: unknown id).

    `tenant_id` None is a reader holding the job's signed token, which names the job.
    """
    when: datetime | None = await conn.fetchval(queries.TOMBSTONE, job_id, tenant_id)
    return when
