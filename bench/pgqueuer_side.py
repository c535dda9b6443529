"""PgQueuer's side of bench.queue_side_by_side: each scenario against a fresh database.

PgQueuer as its docs set it up for throughput: `install()` (durable, logged tables: the
default), then its recommended autovacuum settings (`pgq autovac`), asyncpg connections, and
consumers shaped as in its tools/benchmark.py (bench/pgqueuer_runner.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import orjson
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.queries import EntrypointExecutionParameter, Queries
from pgqueuer.types import QueueEntrypoint, QueueManagerId

from bench import queue_common as common
from bench.cpu_meter import CpuMeter
from bench.jobstream_side import SPEC, keys
from bench.pgqueuer_runner import ENTRYPOINT
from bench.queue_common import Drained, Enqueued, Latency, Snapshot, Steady

DATABASE = "queue_bench_pgqueuer"
# PgQueuer's default table names; a job's row leaves QUEUE when it ends, LOG keeps its history.
QUEUE = "pgqueuer"
LOG = "pgqueuer_log"
# The same job description jobstream stores, so both queues move rows of the same weight.
PAYLOAD = orjson.dumps(SPEC.payload())


@dataclass(frozen=True)
class Shape:
    """Consumers per process and their dequeue batch size."""

    consumers: int
    batch_size: int

    def __str__(self) -> str:
        return f"{self.consumers} consumers x batch {self.batch_size}"


async def prepare(admin_url: str) -> str:
    url = await common.recreate_database(admin_url, DATABASE)
    conn = await common.connect(url, json_codecs=False)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        await queries.optimize_autovacuum()
    finally:
        await conn.close()
    return url


async def _enqueue(queries: Queries, count: int, *, keyed: bool = False) -> int:
    """`count` jobs in one call; with `keyed`, each with its own dedupe key, a duplicate skipped:
    what an idempotency key is to jobstream's side."""
    if keyed:
        await queries.enqueue(
            [ENTRYPOINT] * count, [PAYLOAD] * count, [0] * count,
            dedupe_key=list[str | None](keys(count)), on_conflict="skip",
        )  # fmt: skip
    else:
        await queries.enqueue([ENTRYPOINT] * count, [PAYLOAD] * count, [0] * count)
    return count


async def _runners(url: str, processes: int, shape: Shape) -> list[asyncio.subprocess.Process]:
    """Consumer processes, connected and registered, waiting for their start line."""
    runners: list[asyncio.subprocess.Process] = []
    try:
        for _ in range(processes):
            args = ["--consumers", str(shape.consumers), "--batch-size", str(shape.batch_size)]
            runners.append(
                await common.spawn("bench.pgqueuer_runner", url, *args, env={}, pipes=True)
            )
        for runner in runners:
            assert runner.stdout is not None
            line = await asyncio.wait_for(runner.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"pgqueuer runner: expected 'ready', got {line!r}")
    except BaseException:
        await common.stop_all(runners)
        raise
    return runners


async def _start(runners: list[asyncio.subprocess.Process]) -> None:
    for runner in runners:
        assert runner.stdin is not None
        runner.stdin.write(b"go\n")
    await asyncio.gather(*(r.stdin.drain() for r in runners if r.stdin is not None))


# --- (a) drain ---


async def drain(admin_url: str, *, count: int, processes: int, shape: Shape) -> Drained:
    """`count` queued no-op jobs, then the consumers; timed from the first pick to the last
    completion logged, both as pgqueuer_log records them."""
    url = await prepare(admin_url)
    conn = await common.connect(url, json_codecs=False)
    queries = Queries(AsyncpgDriver(conn))
    runners: list[asyncio.subprocess.Process] = []
    try:
        for start in range(0, count, 1000):
            await _enqueue(queries, min(1000, count - start))
        await common.settle(url)
        runners = await _runners(url, processes, shape)
        flushes_before = await common.wal_flushes(conn)
        meter = await CpuMeter.of(conn, [runner.pid for runner in runners])
        meter.start()
        await _start(runners)

        async def unfinished() -> int:
            left: int = await conn.fetchval(f"SELECT count(*) FROM {QUEUE}")
            return left

        alive = common.check_alive(runners)
        await common.poll_until_zero(unfinished, "pgqueuer drain", timeout_s=900, alive=alive)
        cpu = meter.stop()
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'successful') AS succeeded,"
            " extract(epoch FROM max(created) FILTER (WHERE status = 'successful')"
            "  - min(created) FILTER (WHERE status = 'picked'))::float8 AS seconds"
            f" FROM {LOG}"
        )
        # Stopped before the count is read: an exiting backend reports its I/O statistics.
        await common.stop_all(runners)
        flushes_after = await common.wal_flushes(conn)
    finally:
        await common.stop_all(runners)
        await conn.close()
    assert row is not None
    if row["succeeded"] != count:
        raise RuntimeError(f"pgqueuer drain: {row['succeeded']}/{count} jobs succeeded")
    return Drained(count, row["seconds"], common.since(flushes_after, flushes_before), cpu)


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
    shape: Shape,
    processes: int = 1,
) -> Steady:
    url = await prepare(admin_url)
    conn = await common.connect(url, json_codecs=False)
    producer_conns = [await common.connect(url, json_codecs=False) for _ in range(producers)]
    runners: list[asyncio.subprocess.Process] = []
    try:
        await common.settle(url)
        runners = await _runners(url, processes, shape)
        await _start(runners)
        queues = [Queries(AsyncpgDriver(c)) for c in producer_conns]

        async def snapshot() -> Snapshot:
            row = await conn.fetchrow(f"SELECT now() AS at, (SELECT count(*) FROM {QUEUE}) AS left")
            assert row is not None
            return row["at"], row["left"]

        start, end = await common.produce_during(
            lambda n: _enqueue(queues[n], batch), producers=producers, rate=rate, backlog=backlog,
            warmup_s=warmup_s, seconds=seconds, snapshot=snapshot,
            alive=common.check_alive(runners),
        )  # fmt: skip
        failed = await conn.fetchval(f"SELECT count(*) FROM {LOG} WHERE status = 'exception'")
        if failed:
            raise RuntimeError(f"pgqueuer: {failed} jobs raised (see the runner's log)")
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE status = 'queued') AS offered,"
            " count(*) FILTER (WHERE status = 'successful') AS done"
            f" FROM {LOG} WHERE created >= $1 AND created < $2",
            start[0],
            end[0],
        )
    finally:
        await common.stop_all(runners)
        for c in producer_conns:
            await c.close()
        await conn.close()
    assert row is not None
    window = (end[0] - start[0]).total_seconds()
    return Steady(window, row["offered"], row["done"], start[1], end[1])


# --- (c) enqueue rate ---


async def enqueue(
    admin_url: str, *, requests: int, callers: int, batches: int, batch: int
) -> dict[str, Enqueued]:
    """Queries.enqueue of one job from 1 and from `callers` tasks, and of `batch` jobs a call."""
    url = await prepare(admin_url)
    await common.settle(url)
    conn = await common.connect(url, json_codecs=False)
    pool = await common.create_pool(url, callers, json_codecs=False)
    try:
        single = Queries(AsyncpgDriver(conn))
        pooled = Queries(AsyncpgPoolDriver(pool))
        return {
            "enqueue x1": await common.timed_calls(
                lambda _: _enqueue(single, 1), callers=1, calls=requests
            ),
            f"enqueue x{callers}": await common.timed_calls(
                lambda _: _enqueue(pooled, 1), callers=callers, calls=requests
            ),
            "enqueue batch": await common.timed_calls(
                lambda _: _enqueue(single, batch), callers=1, calls=batches
            ),
            "enqueue batch keyed": await common.timed_calls(
                lambda _: _enqueue(single, batch, keyed=True), callers=1, calls=batches
            ),
        }
    finally:
        await pool.close()
        await conn.close()


# --- (d) claim latency ---


async def dequeue_latency(
    admin_url: str, *, backlog: int, batch_size: int, claims: int, warmup: int = 5
) -> Latency:
    """Queries.dequeue round trips with `backlog` jobs queued. As on jobstream's side, the jobs
    a dequeue picks end (their rows deleted, as PgQueuer does) and as many new ones are queued
    outside the timed call, so every dequeue finds the same queue."""
    url = await prepare(admin_url)
    conn = await common.connect(url, json_codecs=False)
    try:
        queries = Queries(AsyncpgDriver(conn))
        for start in range(0, backlog, 10_000):
            await _enqueue(queries, min(10_000, backlog - start))
        await conn.execute(f"VACUUM (ANALYZE) {QUEUE}")
        await common.settle(url)
        entrypoints = {
            QueueEntrypoint(ENTRYPOINT): EntrypointExecutionParameter(concurrency_limit=0)
        }
        manager = QueueManagerId(uuid.uuid4())
        seconds = []
        for n in range(warmup + claims):
            started = time.perf_counter()
            picked = await queries.dequeue(
                batch_size=batch_size, entrypoints=entrypoints, queue_manager_id=manager,
                global_concurrency_limit=None, heartbeat_timeout=timedelta(seconds=30),
            )  # fmt: skip
            elapsed = time.perf_counter() - started
            if len(picked) != batch_size:
                raise RuntimeError(f"dequeue: {len(picked)} jobs, expected {batch_size}")
            await conn.execute(f"DELETE FROM {QUEUE} WHERE id = ANY($1::bigint[])",
                               [job.id for job in picked])  # fmt: skip
            await _enqueue(queries, len(picked))
            if n >= warmup:
                seconds.append(elapsed)
    finally:
        await conn.close()
    return Latency.of(seconds)
