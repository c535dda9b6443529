"""jobstream's scenarios (c) enqueue rate and (d) claim latency of bench.queue_side_by_side:
calls timed one by one, through the server or in this process."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from bench import http_load
from bench import jobstream_side as side
from bench import queue_common as common
from bench.queue_common import Enqueued, Latency
from jobstream import claims
from jobstream.clock import DatabaseClock

# Queued jobs straight into the table, without creates.create's status event: claiming needs none.
SEED = """
INSERT INTO jobs (id, tenant_id, request_hash, provider, payload, max_attempts)
SELECT gen_random_uuid(), $2, 'bench', $3, $4::jsonb, 3
  FROM generate_series(1, $1)
"""
# The claimed jobs end outside the timed call, so every claim finds the same queue: `backlog`
# queued jobs and none running (their number would otherwise weigh on the claim's counts).
FINISH = """
WITH done AS (
    UPDATE jobs SET status = 'succeeded', finished_at = now(), updated_at = now(),
                    lease_until = NULL
     WHERE id = ANY($1::uuid[])
    RETURNING id
)
UPDATE job_attempts SET outcome = 'succeeded', finished_at = now()
 WHERE job_id IN (SELECT id FROM done) AND outcome = 'running'
"""

# --- (c) enqueue rate ---


async def enqueue_http(
    admin_url: str,
    *,
    requests: int,
    callers: int,
    batches: int,
    batch: int,
    batch_api: bool,
    pooler: common.Pooler | None = None,
) -> dict[str, Enqueued | None]:
    """POST /api/jobs from 1 and from `callers` clients, and POST /api/jobs/batch without
    idempotency keys and with one an item. `pooler`: the server's pool through PgBouncer."""
    url = await side.prepare(admin_url)
    await common.settle(url)
    figures: dict[str, Enqueued | None] = {}
    async with side.server(url, None if pooler is None else pooler(url)) as base:
        for n in (1, callers):
            connections = [await http_load.Connection.open(base) for _ in range(n)]
            try:
                # Untimed: the server's pool grows to `n` connections and each prepares its
                # statements, as a server in service already has (PgQueuer's side starts with
                # its connections open too).
                await post_each(connections, 4 * n)
                figures[f"http x{n}"] = await post_each(connections, requests)
            finally:
                for connection in connections:
                    await connection.close()
        figures["http batch"] = figures["http batch keyed"] = None
        if batch_api:
            client = await http_load.Connection.open(base)
            try:
                await side.post_batch(client, batch)  # untimed: its statements get prepared
                figures["http batch"] = await common.timed_calls(
                    lambda _: side.post_batch(client, batch, keyed=False), callers=1, calls=batches
                )
                figures["http batch keyed"] = await common.timed_calls(
                    lambda _: side.post_batch(client, batch), callers=1, calls=batches
                )
            finally:
                await client.close()
    return figures


async def post_each(connections: list[http_load.Connection], requests: int) -> Enqueued:
    """`requests` POSTs in all, each connection sending its share one after another."""
    return await common.timed_calls(
        lambda caller: _post_one(connections[caller]), callers=len(connections), calls=requests
    )


async def _post_one(connection: http_load.Connection) -> int:
    headers = {"Idempotency-Key": f"bench-{uuid.uuid4()}"}
    status, body = await connection.post_json("/api/jobs", side.BODY, headers)
    if status != 202:
        raise RuntimeError(f"POST /api/jobs: {status} {body[:300]!r}")
    return 1


async def enqueue_direct(
    admin_url: str, *, requests: int, callers: int, pooler: common.Pooler | None = None
) -> dict[str, Enqueued]:
    """creates.create in this process, from 1 and from `callers` tasks: the library call that
    PgQueuer's enqueue compares with, without HTTP in front of it. `pooler`: the pool through
    PgBouncer."""
    url = await side.prepare(admin_url)
    await common.settle(url)
    if pooler is None:
        pool = await common.create_pool(url, callers)
    else:
        pool = await common.create_pool(pooler(url), callers, pooler=True)
    try:
        return {
            f"create x{n}": await common.timed_calls(
                lambda _: side.create(pool), callers=n, calls=requests
            )
            for n in (1, callers)
        }
    finally:
        await pool.close()


# --- (d) claim latency ---

Claim = Callable[[asyncpg.Pool], Awaitable[list[uuid.UUID]]]


def claimer(max_jobs: int) -> tuple[str, Claim]:
    """The worker's claim of up to `max_jobs` jobs: claim_batch where this checkout has it,
    else as many claim() calls in a row (what a worker filling `max_jobs` slots does today)."""
    clock = DatabaseClock()
    # What a worker with the default settings claims for: both providers, openai limited to 16
    # running attempts, so that each claim also probes for runnable openai jobs (claim_jobs'
    # step 1), as the worker's own claims do. Claiming for the simulated provider alone, this
    # probe went unmeasured while it read the whole backlog.
    providers = [side.PROVIDER, "openai"]
    limits = {"openai": 16}
    batch = getattr(claims, "claim_batch", None)
    if batch is not None:

        async def claim_many(pool: asyncpg.Pool) -> list[uuid.UUID]:
            held = await batch(
                pool, providers=providers, worker_id="bench", lease_s=30, clock=clock,
                limits=limits, max_jobs=max_jobs,
            )  # fmt: skip
            return [h.job_id for h in held]

        return f"claim_batch(max_jobs={max_jobs})", claim_many

    async def claim_each(pool: asyncpg.Pool) -> list[uuid.UUID]:
        ids = []
        for _ in range(max_jobs):
            held = await claims.claim(
                pool, providers=providers, worker_id="bench", lease_s=30, clock=clock,
                limits=limits,
            )  # fmt: skip
            if held is None:
                break
            ids.append(held.job_id)
        return ids

    return ("claim()" if max_jobs == 1 else f"{max_jobs} x claim()"), claim_each


async def claim_latency(
    admin_url: str, *, backlog: int, max_jobs: int, claims: int, warmup: int = 5
) -> tuple[str, Latency]:
    url = await side.prepare(admin_url)
    pool = await common.create_pool(url, 2)
    label, claim = claimer(max_jobs)
    try:
        await pool.execute(SEED, backlog, side.TENANT, side.PROVIDER, side.SPEC.payload())
        await pool.execute("VACUUM (ANALYZE) jobs")
        await common.settle(url)
        seconds = []
        for n in range(warmup + claims):
            started = time.perf_counter()
            ids = await claim(pool)
            elapsed = time.perf_counter() - started
            if len(ids) != max_jobs:
                raise RuntimeError(f"{label}: {len(ids)} jobs claimed, expected {max_jobs}")
            await pool.execute(FINISH, ids)
            await pool.execute(SEED, len(ids), side.TENANT, side.PROVIDER, side.SPEC.payload())
            if n >= warmup:
                seconds.append(elapsed)
    finally:
        await pool.close()
    return label, Latency.of(seconds)
