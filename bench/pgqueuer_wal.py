"""PgQueuer's side of bench.queue_wal: the same no-op jobs' lives through PgQueuer 1.6.0's own
statements, for the WAL and the backend's CPU each stage costs a job beside jobstream's.

The stages are jobstream's queue stages, as PgQueuer's consumer runs them (bench/pgqueuer_side.py
sets its tables up as for the drains, autovacuum then turned off as on jobstream's side):
  create   Queries.enqueue of `create_batch` jobs, each with a dedupe key when keyed (what an
           idempotency key is to jobstream's side), a duplicate skipped;
  claim    Queries.dequeue of `batch` jobs, as one of its consumers fetches;
  success  Queries.log_jobs of those jobs as successful, as its status buffer flushes them: each
           row leaves the queue table for the log table.
PgQueuer has no janitor's stages (its log table keeps every row) and no lease renewal of its
own per job (a heartbeat per consumer).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import asyncpg
from pgqueuer.db import AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.queries import EntrypointExecutionParameter, Queries
from pgqueuer.types import QueueEntrypoint, QueueManagerId

from bench import pgqueuer_side
from bench import queue_common as common
from bench.jobstream_side import keys
from bench.pgqueuer_runner import ENTRYPOINT
from bench.queue_wal import Measure

DATABASE = pgqueuer_side.DATABASE
# How long a picked job's heartbeat may be silent before another consumer may take it: never
# reached here, each batch ends at once.
HEARTBEAT_TIMEOUT = timedelta(seconds=30)


async def prepare(admin_url: str) -> str:
    """A fresh database with PgQueuer installed as for the drains, autovacuum off."""
    url = await pgqueuer_side.prepare(admin_url)
    conn = await asyncpg.connect(url)
    try:
        await common.autovacuum_off(conn)
    finally:
        await conn.close()
    return url


async def life(
    pool: asyncpg.Pool,
    measure: Measure,
    *,
    jobs: int,
    batch: int,
    create_batch: int,
    keyed: bool = True,
) -> None:
    """`jobs` no-op jobs created, claimed and logged as successful, each batch run by
    `measure(stage, jobs, work)`."""
    queries = Queries(AsyncpgPoolDriver(pool))
    # Unique across lives on one database: a key seen before would skip its job.
    life_keys = [f"{uuid.uuid4().hex[:8]}:{key}" for key in keys(jobs)] if keyed else None
    for start in range(0, jobs, create_batch):
        n = min(create_batch, jobs - start)

        async def create(start: int = start, n: int = n) -> None:
            if life_keys is None:
                await queries.enqueue([ENTRYPOINT] * n, [pgqueuer_side.PAYLOAD] * n, [0] * n)
                return
            dedupe = list[str | None](life_keys[start : start + n])
            await queries.enqueue(
                [ENTRYPOINT] * n, [pgqueuer_side.PAYLOAD] * n, [0] * n,
                dedupe_key=dedupe, on_conflict="skip",
            )  # fmt: skip

        await measure("create", n, create)
    entrypoints = {QueueEntrypoint(ENTRYPOINT): EntrypointExecutionParameter(concurrency_limit=0)}
    manager = QueueManagerId(uuid.uuid4())
    held: list[Job] = []

    async def claim(n: int) -> None:
        held[:] = await queries.dequeue(n, entrypoints, manager, None, HEARTBEAT_TIMEOUT)
        if len(held) != n:
            raise RuntimeError(f"dequeued {len(held)} jobs of {n}")

    async def succeed() -> None:
        await queries.log_jobs([(job, "successful", None) for job in held])

    for start in range(0, jobs, batch):
        n = min(batch, jobs - start)
        await measure("claim", n, lambda n=n: claim(n))  # type: ignore[misc]
        await measure("success", n, succeed)


async def drop(admin_url: str) -> None:
    await common.drop_database(admin_url, DATABASE)
