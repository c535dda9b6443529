"""jobstream's side of bench.queue_side_by_side: each scenario against a fresh database."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx

from bench import http_load
from bench import queue_common as common
from bench.queue_common import Drained, Enqueued, Latency, Snapshot, Steady
from jobstream import claims, db, jobs, migrations
from jobstream.clock import DatabaseClock
from jobstream.embedded_pg import free_port
from jobstream.jobspec import JobSpec
from jobstream.sql import queries

DATABASE = "queue_bench_jobstream"
TENANT = "default"
PROVIDER = "simulated"
# A job whose attempt does no work: one token, no delays.
SIMULATE = {"tokens": 1, "tokens_per_second": 0, "first_token_delay_s": 0}
SPEC = JobSpec(prompt="x", provider=PROVIDER, max_tokens=1, simulate=SIMULATE)
BODY: dict[str, Any] = {"prompt": "x", "provider": PROVIDER, "max_tokens": 1, "simulate": SIMULATE}
BATCH_PATH = "/api/jobs/batch"

# Queued jobs straight into the table, without jobs.create's status event: claiming needs none.
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
UNFINISHED = """
SELECT (SELECT count(*) FROM jobs WHERE status = 'queued')
     + (SELECT count(*) FROM jobs WHERE status IN ('running', 'cancelling'))
"""


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


def _worker_env(url: str, concurrency: int) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "JOBSTREAM_WORKER_CONCURRENCY": str(concurrency),
        "JOBSTREAM_DB_POOL_MAX": "20",
        "JOBSTREAM_LOG_LEVEL": "warning",
        "JOBSTREAM_POLL_INTERVAL_S": "0.05",
    }


@asynccontextmanager
async def _server(url: str, pool_max: int = 32) -> AsyncIterator[str]:
    """A `python -m server` process; yields its base URL once it answers."""
    port = free_port()
    env = {
        "DATABASE_URL": url,
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_DB_POOL_MAX": str(pool_max),
        "JOBSTREAM_LOG_LEVEL": "warning",
    }
    process = await common.spawn("server", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                common.check_alive([process])()
                try:
                    if (await client.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                await asyncio.sleep(common.POLL_S)
        yield base
    finally:
        await common.stop_all([process])


async def probe_batch(admin_url: str) -> bool:
    """Does this checkout's server have POST /api/jobs/batch?"""
    url = await prepare(admin_url)
    async with _server(url) as base, httpx.AsyncClient(base_url=base, timeout=30) as client:
        response = await client.post(BATCH_PATH, json={"jobs": [BODY]})
    if response.status_code in (404, 405):
        return False
    if response.status_code != 200:
        raise RuntimeError(f"{BATCH_PATH}: {response.status_code} {response.text[:300]}")
    return True


async def _post_batch(client: httpx.AsyncClient, size: int) -> int:
    jobs_ = [{**BODY, "idempotency_key": f"bench-{uuid.uuid4()}"} for _ in range(size)]
    response = await client.post(BATCH_PATH, json={"jobs": jobs_})
    if response.status_code != 200:
        raise RuntimeError(f"{BATCH_PATH}: {response.status_code} {response.text[:300]}")
    results = response.json()["results"]
    # An item can be refused on its own while the batch answers 200.
    if refused := [r for r in results if "id" not in r]:
        raise RuntimeError(f"{BATCH_PATH}: {len(refused)} items refused, e.g. {refused[0]}")
    return len(results)


async def _create(pool: asyncpg.Pool) -> int:
    await jobs.create(pool, TENANT, SPEC, f"bench-{uuid.uuid4()}")
    return 1


async def _fill(url: str, count: int, *, batch_api: bool) -> None:
    """Untimed set-up: `count` queued jobs through the API's own create path."""
    if batch_api:
        async with _server(url) as base, httpx.AsyncClient(base_url=base, timeout=120) as client:
            for start in range(0, count, 1000):
                await _post_batch(client, min(1000, count - start))
        return
    pool = await common.create_pool(url, 16)
    try:
        await common.timed_calls(lambda _: _create(pool), callers=16, calls=count)
    finally:
        await pool.close()


# --- (a) drain ---


async def drain(
    admin_url: str, *, count: int, processes: int, concurrency: int, batch_api: bool
) -> Drained:
    """`count` queued no-op jobs, then `processes` workers; timed from the first job's start to
    the last one's end. The provider is paused meanwhile, so every worker is up and polling
    before any job may be claimed (a later process would otherwise start with less to do)."""
    url = await prepare(admin_url)
    conn = await common.connect(url)
    workers: list[asyncio.subprocess.Process] = []
    try:
        await conn.execute(
            "INSERT INTO provider_state (provider, paused_until) VALUES ($1, 'infinity')",
            PROVIDER,
        )
        await _fill(url, count, batch_api=batch_api)
        await common.settle(url)
        for _ in range(processes):
            workers.append(await common.spawn("worker", env=_worker_env(url, concurrency)))
        alive = common.check_alive(workers)
        # Each worker holds a pool connection and its LISTEN connection once it runs.
        await common.wait_for_clients(conn, 2 * processes)
        await asyncio.sleep(0.5)
        alive()
        flushes_before = await common.wal_flushes(conn)
        await conn.execute(
            "UPDATE provider_state SET paused_until = NULL WHERE provider = $1", PROVIDER
        )
        await conn.execute(queries.NOTIFY_RUNNABLE, [PROVIDER])

        async def unfinished() -> int:
            left: int = await conn.fetchval(UNFINISHED)
            return left

        await common.poll_until_zero(unfinished, "jobstream drain", timeout_s=900, alive=alive)
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'succeeded') AS succeeded,"
            " extract(epoch FROM max(finished_at) - min(started_at))::float8 AS seconds"
            " FROM jobs"
        )
        # Stopped before the count is read: an exiting backend reports its I/O statistics.
        await common.stop_all(workers)
        flushes = common.since(await common.wal_flushes(conn), flushes_before)
    finally:
        await common.stop_all(workers)
        await conn.close()
    assert row is not None
    if row["succeeded"] != count:
        raise RuntimeError(f"jobstream drain: {row['succeeded']}/{count} jobs succeeded")
    return Drained(count, row["seconds"], flushes)


# --- (b) steady state ---


async def steady(
    admin_url: str,
    *,
    seconds: float,
    warmup_s: float,
    producers: int,
    batch: int,
    rate: float,
    concurrency: int,
    batch_api: bool,
) -> Steady:
    url = await prepare(admin_url)
    conn = await common.connect(url)
    pool = await common.create_pool(url, producers)
    worker = await common.spawn("worker", env=_worker_env(url, concurrency))
    alive = common.check_alive([worker])
    try:
        await common.wait_for_clients(conn, 2)
        await common.settle(url)

        async def snapshot() -> Snapshot:
            row = await conn.fetchrow(f"SELECT now() AS at, ({UNFINISHED}) AS left")
            assert row is not None
            return row["at"], row["left"]

        if batch_api:
            async with _server(url) as base:
                clients = [httpx.AsyncClient(base_url=base, timeout=60) for _ in range(producers)]
                try:
                    start, end = await common.produce_during(
                        lambda n: _post_batch(clients[n], batch),
                        producers=producers, rate=rate, warmup_s=warmup_s, seconds=seconds,
                        snapshot=snapshot, alive=alive,
                    )  # fmt: skip
                finally:
                    for client in clients:
                        await client.aclose()
        else:

            async def create_batch(_producer: int) -> int:
                for _ in range(batch):
                    await _create(pool)
                return batch

            start, end = await common.produce_during(
                create_batch, producers=producers, rate=rate, warmup_s=warmup_s,
                seconds=seconds, snapshot=snapshot, alive=alive,
            )  # fmt: skip
        await _no_failed_attempts(conn)
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE created_at >= $1 AND created_at < $2) AS offered,"
            " count(*) FILTER (WHERE finished_at >= $1 AND finished_at < $2) AS done FROM jobs",
            start[0],
            end[0],
        )
    finally:
        await common.stop_all([worker])
        await pool.close()
        await conn.close()
    assert row is not None
    window = (end[0] - start[0]).total_seconds()
    return Steady(window, row["offered"], row["done"], start[1], end[1])


async def _no_failed_attempts(conn: asyncpg.Connection) -> None:
    """Jobs that do nothing must not fail: when they do, the figures describe a broken worker."""
    failed = await conn.fetchval("SELECT count(*) FROM job_attempts WHERE outcome <> ALL($1)",
                                 ["running", "succeeded"])  # fmt: skip
    if failed:
        raise RuntimeError(f"jobstream: {failed} attempts ended badly (see the worker's log)")


# --- (c) enqueue rate ---


async def enqueue_http(
    admin_url: str, *, requests: int, callers: int, batches: int, batch: int, batch_api: bool
) -> dict[str, Enqueued | None]:
    """POST /api/jobs from 1 and from `callers` clients, and POST /api/jobs/batch."""
    url = await prepare(admin_url)
    await common.settle(url)
    figures: dict[str, Enqueued | None] = {}
    async with _server(url) as base:
        for n in (1, callers):
            connections = [await http_load.Connection.open(base) for _ in range(n)]
            try:
                # Untimed: the server's pool grows to `n` connections and each prepares its
                # statements, as a server in service already has (PgQueuer's side starts with
                # its connections open too).
                await _post_each(connections, 4 * n)
                figures[f"http x{n}"] = await _post_each(connections, requests)
            finally:
                for connection in connections:
                    await connection.close()
        figures["http batch"] = None
        if batch_api:
            async with httpx.AsyncClient(base_url=base, timeout=120) as client:
                figures["http batch"] = await common.timed_calls(
                    lambda _: _post_batch(client, batch), callers=1, calls=batches
                )
    return figures


async def _post_each(connections: list[http_load.Connection], requests: int) -> Enqueued:
    """`requests` POSTs in all, each connection sending its share one after another."""
    return await common.timed_calls(
        lambda caller: _post_one(connections[caller]), callers=len(connections), calls=requests
    )


async def _post_one(connection: http_load.Connection) -> int:
    headers = {"Idempotency-Key": f"bench-{uuid.uuid4()}"}
    status, body = await connection.post_json("/api/jobs", BODY, headers)
    if status != 202:
        raise RuntimeError(f"POST /api/jobs: {status} {body[:300]!r}")
    return 1


async def enqueue_direct(admin_url: str, *, requests: int, callers: int) -> dict[str, Enqueued]:
    """jobs.create in this process, from 1 and from `callers` tasks: the library call that
    PgQueuer's enqueue compares with, without HTTP in front of it."""
    url = await prepare(admin_url)
    await common.settle(url)
    pool = await common.create_pool(url, callers)
    try:
        return {
            f"create x{n}": await common.timed_calls(
                lambda _: _create(pool), callers=n, calls=requests
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
    limits = {"openai": 16}
    batch = getattr(claims, "claim_batch", None)
    if batch is not None:

        async def claim_many(pool: asyncpg.Pool) -> list[uuid.UUID]:
            held = await batch(
                pool, providers=[PROVIDER], worker_id="bench", lease_s=30, clock=clock,
                limits=limits, max_jobs=max_jobs,
            )  # fmt: skip
            return [h.job_id for h in held]

        return f"claim_batch(max_jobs={max_jobs})", claim_many

    async def claim_each(pool: asyncpg.Pool) -> list[uuid.UUID]:
        ids = []
        for _ in range(max_jobs):
            held = await claims.claim(
                pool, providers=[PROVIDER], worker_id="bench", lease_s=30, clock=clock,
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
    url = await prepare(admin_url)
    pool = await common.create_pool(url, 2)
    label, claim = claimer(max_jobs)
    try:
        await pool.execute(SEED, backlog, TENANT, PROVIDER, SPEC.payload())
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
            await pool.execute(SEED, len(ids), TENANT, PROVIDER, SPEC.payload())
            if n >= warmup:
                seconds.append(elapsed)
    finally:
        await pool.close()
    return label, Latency.of(seconds)
