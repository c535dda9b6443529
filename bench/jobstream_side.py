"""jobstream's side of bench.queue_side_by_side: what every scenario sets up, against a fresh
database. The scenarios: bench.jobstream_workers (drain, steady state) and bench.jobstream_calls
(enqueue rate, claim latency)."""

from __future__ import annotations

import os
import uuid
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import httpx
import orjson

from bench import http_load
from bench import queue_common as common
from bench.server_process import server_process
from jobstream import creates, db, migrations, new_jobs
from jobstream.jobspec import JobSpec

DATABASE = "queue_bench_jobstream"
TENANT = "default"
PROVIDER = "simulated"
# A job whose attempt does no work: one token, no delays.
SIMULATE = {"tokens": 1, "tokens_per_second": 0, "first_token_delay_s": 0}
SPEC = JobSpec(prompt="x", provider=PROVIDER, max_tokens=1, simulate=SIMULATE)
BODY: dict[str, Any] = {"prompt": "x", "provider": PROVIDER, "max_tokens": 1, "simulate": SIMULATE}
BATCH_PATH = "/api/jobs/batch"


def keys(count: int) -> list[str]:
    """`count` random idempotency keys (128 bits each), as a client would make them: random, so
    the key index takes them where they fall. From one read of os.urandom: a str(uuid4()) a
    job cost the client 7 us, 7 ms of each timed batch of 1,000 (PgQueuer's side sends none)."""
    raw = os.urandom(16 * count).hex()
    return [f"bench-{raw[i : i + 32]}" for i in range(0, 32 * count, 32)]


JSON_HEADERS = {"content-type": "application/json"}


async def prepare(admin_url: str) -> str:
    url = await common.recreate_database(admin_url, DATABASE)
    conn = await db.connect(url)
    try:
        await migrations.apply_schema(conn)
        # The tenant's running limit would cap the figures: they are about the queue.
        await conn.execute("UPDATE tenants SET max_running = 100000 WHERE id = $1", TENANT)
    finally:
        await conn.close()
    return url


def server(url: str, pooled_url: str | None = None) -> AbstractAsyncContextManager[str]:
    """A `python -m jobstream.server` process on `url`'s database (its pool through PgBouncer's
    `pooled_url` when given); yields its base URL."""
    return server_process(url, pool_max=32, pooled_url=pooled_url)


async def probe_batch(admin_url: str) -> bool:
    """Does this checkout's server have POST /api/jobs/batch?"""
    url = await prepare(admin_url)
    async with server(url) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        response = await client.post(BATCH_PATH, json={"jobs": [BODY]})
    if response.status_code in (404, 405):
        return False
    if response.status_code != 200:
        raise RuntimeError(f"{BATCH_PATH}: {response.status_code} {response.text[:300]}")
    return True


async def post_batch(connection: http_load.Connection, size: int, *, keyed: bool = True) -> int:
    """POST /api/jobs/batch of `size` jobs, each with its own idempotency key when `keyed`.

    On the lean client (bench/http_load.py), as the single creates are: httpx took 8 ms of the
    shared cores a batch, receiving its 400 KB of answers, where PgQueuer's side has no HTTP."""
    jobs_ = [{**BODY, "idempotency_key": key} for key in keys(size)] if keyed else [BODY] * size
    status, body = await connection.post_json(BATCH_PATH, {"jobs": jobs_})
    if status != 200:
        raise RuntimeError(f"{BATCH_PATH}: {status} {body[:300]!r}")
    results = orjson.loads(body)["results"]
    # An item can be refused on its own while the batch answers 200.
    if refused := [r for r in results if "id" not in r]:
        raise RuntimeError(f"{BATCH_PATH}: {len(refused)} items refused, e.g. {refused[0]}")
    return len(results)


async def create(pool: asyncpg.Pool) -> int:
    await creates.create(pool, TENANT, SPEC, f"bench-{uuid.uuid4()}")
    return 1


async def create_many(pool: asyncpg.Pool, count: int, *, keyed: bool = True) -> int:
    """`count` jobs in one call, as PgQueuer's side enqueues a batch; each with its own
    idempotency key when `keyed`."""
    items = [new_jobs.NewJob(SPEC, key) for key in (keys(count) if keyed else [None] * count)]
    made = await creates.create_many(pool, TENANT, items)
    if refused := [m for m in made if not isinstance(m, new_jobs.Created)]:
        raise RuntimeError(f"creates.create_many: {len(refused)} refused, e.g. {refused[0]!r}")
    return count


async def fill(url: str, count: int, *, batch_api: bool) -> None:
    """Untimed set-up: `count` queued jobs through the API's own create path."""
    if batch_api:
        async with server(url) as base:
            connection = await http_load.Connection.open(base)
            try:
                for start in range(0, count, 1000):
                    await post_batch(connection, min(1000, count - start))
            finally:
                await connection.close()
        return
    pool = await common.create_pool(url, 16)
    try:
        await common.timed_calls(lambda _: create(pool), callers=16, calls=count)
    finally:
        await pool.close()
