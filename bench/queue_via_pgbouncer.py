"""`make bench-queue BENCH_ARGS=--via-pgbouncer`: jobstream's drain and create rows with the
pools direct and through PgBouncer, side by side in one run (issue 38).

PgBouncer runs deploy/pgbouncer/pgbouncer.ini (transaction mode, 20 server connections) in front
of the bench's cluster, as tests/e2e/test_pgbouncer.py runs it. Through it, the worker's and the
server's pools (and the in-process creates' pool) use DATABASE_URL = PgBouncer, with no statement
cache and no generic plans; LISTEN and the schema stay direct (JOBSTREAM_DIRECT_DATABASE_URL).
Each repeat runs direct first, then through PgBouncer, on a fresh database each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from bench import jobstream_calls, jobstream_workers
from bench.queue_common import Enqueued, Pooler
from bench.queue_options import Options
from bench.queue_table import Table
from tests.support import pgbouncer

DIRECT, POOLED = "direct", "pgbouncer"
SIDES = (DIRECT, POOLED)


@asynccontextmanager
async def pooler(admin_url: str) -> AsyncIterator[Pooler]:
    """PgBouncer in front of `admin_url`'s server, for the run; yields the map from a
    database's direct URL to the same database's through it."""
    if reason := pgbouncer.missing():
        raise SystemExit(f"--via-pgbouncer: {reason}")
    async with pgbouncer.pgbouncer(admin_url) as pooled_admin:
        port = urlsplit(pooled_admin).port
        assert port is not None
        yield lambda url: pgbouncer.pooled_url(url, port)


async def _interleave(
    options: Options, label: str, run: Callable[[Pooler | None], Awaitable[str]], via: Pooler
) -> None:
    for n in range(1, options.repeats + 1):
        for side, how in ((DIRECT, None), (POOLED, via)):
            print(f"  {label} #{n} {side:<9} {await run(how)}", flush=True)


async def run(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    async with pooler(admin_url) as via:
        await drain(options, admin_url, table, batch_api, via)
        await create(options, admin_url, table, batch_api, via)


async def drain(
    options: Options, admin_url: str, table: Table, batch_api: bool, via: Pooler
) -> None:
    print(f"\n(a) drain: {options.drain_jobs:,} queued no-op jobs, direct and through PgBouncer")
    for processes in (1, 2):
        row = f"drain, {processes} process{'es' if processes > 1 else ''}"

        async def one(how: Pooler | None, processes: int = processes, row: str = row) -> str:
            result = await jobstream_workers.drain(
                admin_url, count=options.drain_jobs, processes=processes,
                concurrency=options.drain_concurrency, batch_api=batch_api, pooler=how,
            )  # fmt: skip
            table.add(row, "jobs/s", DIRECT if how is None else POOLED, result.rate)
            return f"{result}, {processes} x {options.drain_concurrency} slots"

        await _interleave(options, row, one, via)
        table.print_rows([row])


async def create(
    options: Options, admin_url: str, table: Table, batch_api: bool, via: Pooler
) -> None:
    k, requests = options.enqueue_callers, options.enqueue_requests
    print(f"\n(c) create: {requests:,} single-job calls per caller count, direct and PgBouncer")
    rows = {
        "http x1": "create, 1 caller (POST /api/jobs)",
        f"http x{k}": f"create, {k} callers (POST /api/jobs)",
        "http batch keyed": f"create, {options.batch_size:,} a call, keyed (POST batch)",
        "create x1": "create, 1 caller (creates.create)",
        f"create x{k}": f"create, {k} callers (creates.create)",
    }

    async def one(how: Pooler | None) -> str:
        web = await jobstream_calls.enqueue_http(
            admin_url, requests=requests, callers=k, batches=options.batch_requests,
            batch=options.batch_size, batch_api=batch_api, pooler=how,
        )  # fmt: skip
        library = await jobstream_calls.enqueue_direct(
            admin_url, requests=requests, callers=k, pooler=how
        )
        figures: dict[str, Enqueued | None] = {**web, **library}
        side = DIRECT if how is None else POOLED
        for key, row in rows.items():
            figure = figures.get(key)
            table.add(row, "jobs/s", side, None if figure is None else figure.rate)
        return ", ".join(
            f"{key} {figure.rate:,.0f}/s"
            for key in rows
            if (figure := figures.get(key)) is not None
        )

    await _interleave(options, "create", one, via)
    table.print_rows(list(rows.values()))
