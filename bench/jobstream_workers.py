"""jobstream's scenarios (a) drain and (b) steady state of bench.queue_side_by_side: worker
processes consume what is queued."""

from __future__ import annotations

import asyncio

import asyncpg

from bench import http_load
from bench import jobstream_side as side
from bench import queue_common as common
from bench.cpu_meter import CpuMeter
from bench.queue_common import Drained, Snapshot, Steady
from jobstream.sql import queries

UNFINISHED = """
SELECT (SELECT count(*) FROM jobs WHERE status = 'queued')
     + (SELECT count(*) FROM jobs WHERE status IN ('running', 'cancelling'))
"""
# Whether the drain still has work (1) or not (0), polled every POLL_S while workers drain: two
# probes that stop at the first live index entry. UNFINISHED visited the heap row of every
# unfinished job, 20 ms a poll with 20,000 queued, a tenth of a core taken from the workers,
# where PgQueuer's side counts the rows of its narrow queue table.
DRAINING = """
SELECT (EXISTS (SELECT 1 FROM jobs WHERE status = 'queued')
        OR EXISTS (SELECT 1 FROM jobs WHERE status IN ('running', 'cancelling')))::int
"""


def _worker_env(url: str, concurrency: int, pooled_url: str | None = None) -> dict[str, str]:
    return {
        **common.database_env(url, pooled_url),
        "JOBSTREAM_WORKER_CONCURRENCY": str(concurrency),
        "JOBSTREAM_DB_POOL_MAX": "20",
        "JOBSTREAM_LOG_LEVEL": "warning",
        "JOBSTREAM_POLL_INTERVAL_S": "0.05",
    }


# --- (a) drain ---


async def drain(
    admin_url: str,
    *,
    count: int,
    processes: int,
    concurrency: int,
    batch_api: bool,
    pooler: common.Pooler | None = None,
) -> Drained:
    """`count` queued no-op jobs, then `processes` workers; timed from the first job's start to
    the last one's end. The provider is paused meanwhile, so every worker is up and polling
    before any job may be claimed (a later process would otherwise start with less to do).
    `pooler`: the workers' pools go through PgBouncer (the URL it maps the database's to)."""
    url = await side.prepare(admin_url)
    pooled_url = None if pooler is None else pooler(url)
    conn = await common.connect(url)
    workers: list[asyncio.subprocess.Process] = []
    try:
        await conn.execute(
            "INSERT INTO provider_state (provider, paused_until) VALUES ($1, 'infinity')",
            side.PROVIDER,
        )
        await side.fill(url, count, batch_api=batch_api)
        await common.settle(url)
        for _ in range(processes):
            env = _worker_env(url, concurrency, pooled_url)
            workers.append(await common.spawn("worker", env=env))
        alive = common.check_alive(workers)
        # Each worker holds a pool connection and its LISTEN connection once it runs; through
        # PgBouncer the pools' server connections are shared, so at least one of those.
        await common.wait_for_clients(conn, 2 * processes if pooler is None else processes + 1)
        await asyncio.sleep(0.5)
        alive()
        flushes_before = await common.wal_flushes(conn)
        meter = await CpuMeter.of(conn, [worker.pid for worker in workers])
        meter.start()
        await conn.execute(
            "UPDATE provider_state SET paused_until = NULL WHERE provider = $1", side.PROVIDER
        )
        await conn.execute(queries.NOTIFY_RUNNABLE, [side.PROVIDER])

        async def unfinished() -> int:
            left: int = await conn.fetchval(DRAINING)
            return left

        await common.poll_until_zero(unfinished, "jobstream drain", timeout_s=900, alive=alive)
        cpu = meter.stop()
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
    return Drained(count, row["seconds"], flushes, cpu)


# --- (b) steady state ---


async def steady(
    admin_url: str,
    *,
    seconds: float,
    warmup_s: float,
    producers: int,
    batch: int,
    rate: float,
    backlog: int,
    concurrency: int,
    batch_api: bool,
    processes: int = 1,
) -> Steady:
    url = await side.prepare(admin_url)
    conn = await common.connect(url)
    pool = await common.create_pool(url, producers)
    workers = [
        await common.spawn("worker", env=_worker_env(url, concurrency)) for _ in range(processes)
    ]
    alive = common.check_alive(workers)
    try:
        # Each worker holds a pool connection and its LISTEN connection once it runs.
        await common.wait_for_clients(conn, 2 * processes)
        await common.settle(url)

        async def snapshot() -> Snapshot:
            row = await conn.fetchrow(f"SELECT now() AS at, ({UNFINISHED}) AS left")
            assert row is not None
            return row["at"], row["left"]

        if batch_api:
            async with side.server(url) as base:
                clients = [await http_load.Connection.open(base) for _ in range(producers)]
                try:
                    start, end = await common.produce_during(
                        lambda n: side.post_batch(clients[n], batch, keyed=False),
                        producers=producers, rate=rate, backlog=backlog, warmup_s=warmup_s,
                        seconds=seconds, snapshot=snapshot, alive=alive,
                    )  # fmt: skip
                finally:
                    for client in clients:
                        await client.close()
        else:

            async def create_batch(_producer: int) -> int:
                # No keys, as PgQueuer's producers send no dedupe keys.
                return await side.create_many(pool, batch, keyed=False)

            start, end = await common.produce_during(
                create_batch, producers=producers, rate=rate, backlog=backlog, warmup_s=warmup_s,
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
        await common.stop_all(workers)
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
