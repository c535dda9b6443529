"""jobstream's queue against PgQueuer 1.6.0, side by side on one PostgreSQL.

    make bench-queue                                   (installs the `bench` extra, then runs this)
    .venv/bin/python -m bench.queue_side_by_side [--quick] [--repeats N] [--out FILE]
    .venv/bin/python -m bench.queue_side_by_side --via-pgbouncer    (bench/queue_via_pgbouncer.py)

One embedded PostgreSQL with fsync and synchronous_commit on (or DATABASE_URL, which must allow
CREATE DATABASE) holds one database per system, dropped and made afresh before every
measurement. Each scenario runs both systems interleaved (jobstream repeat 1, PgQueuer repeat 1,
jobstream repeat 2, ...) and reports min / median / max over the repeats and the ratio of the
medians, jobstream / PgQueuer. Figures are printed, never asserted.

Jobs do nothing: jobstream's run the simulated provider with one token and no delays, PgQueuer's
an `async def` that returns. So the figures are the queue's own cost per job: enqueue, claim,
completion, and for jobstream its event log and attempt records.

(a) drain: N jobs queued, then the consumers start. Timed from the first job's start to the last
    one's end, by the database's clock as each system records them (jobstream: min(started_at) ->
    max(finished_at) in `jobs`; PgQueuer: the first `picked` -> the last `successful` row in
    pgqueuer_log, which it writes when a job ends), so process start-up is never counted. To
    start several processes at once, every consumer is up before any job can be taken:
    jobstream's provider is paused until its workers have connected, and PgQueuer's runners wait
    for a start line.
    jobstream: `python -m worker` processes x JOBSTREAM_WORKER_CONCURRENCY=256, about what each
    PgQueuer process below may hold in flight (5 x 50; a slot stays taken until the job's success
    is committed, and a no-op job's life is mostly its claim and its write: 128 slots drained
    15-20 % slower with one process, the same with two). PgQueuer: as many
    processes of bench/pgqueuer_runner.py, each shaped as its own tools/benchmark.py runs it: 5
    PgQueuer instances of one connection each, no max_concurrent_tasks, on uvloop as its `pgq
    run` does (and as jobstream's worker does); batch_size 50, not its default 10, as
    its performance guide advises for short jobs (--pgq-consumers, --pgq-batch). On this 2-core
    machine 5 x 50 and 1 x 100 drained fastest of the shapes tried, about twice 5 x 10.
    Also printed: the cluster's WAL fsyncs meanwhile, per job (pg_stat_io, PostgreSQL 18), and
    the CPU a job cost PostgreSQL's processes and the consumer processes (bench/cpu_meter.py,
    from /proc; over the drain and the last poll after it, so a --quick run's few jobs read high).
(b) steady state: one consumer process of each as in (a); `--producers` tasks in this process
    enqueue `--producer-batch` jobs a call (jobstream: POST /api/jobs/batch when the server has it,
    else that many creates.create calls in a row; PgQueuer: one Queries.enqueue of a list), as fast
    as they can or paced to --steady-rate. Over a window of --steady-s: jobs enqueued (offered)
    and finished (done) per second, and the jobs not finished at its start and end (growing:
    the consumer cannot keep up). Unpaced, producers and consumer share the machine's cores.
(c) enqueue rate: jobstream through a `python -m server` process, on keep-alive connections of
    bench/http_load.py (httpx spent more of the shared cores than the server it measured): POST
    /api/jobs from 1 and from 32 of them (an Idempotency-Key each; 1,000 requests in all for each
    by default, to keep the whole run well under 20 minutes: --enqueue-requests), POST
    /api/jobs/batch of 1,000 jobs from one (40 batches a repeat: --batch-requests);
    and creates.create called in this process (with a key), which is what PgQueuer's Queries.enqueue
    (1 and 32 callers, and 1,000 jobs a call; no dedupe key) compares with directly.
(d) claim latency: one round trip of the worker's claim with 1,000 and 100,000 jobs queued
    (claims.claim_batch when this checkout has it, else claims.claim, once or 32 times in a
    row) against PgQueuer's Queries.dequeue(batch_size 1 and 32). Between timed calls the jobs
    taken are ended and as many queued again, so every call sees the same queue.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

import asyncpg

from bench import jobstream_side, pgqueuer_side, queue_via_pgbouncer
from bench.postgres import durable_postgres
from bench.queue_options import Options, parse_args
from bench.queue_scenarios import SECTIONS
from bench.queue_table import Table
from jobstream import claims, logs


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    logs.configure("warning", json=False)
    with durable_postgres("queue-bench-") as admin_url:
        asyncio.run(_run(options, admin_url))


async def _run(options: Options, admin_url: str) -> None:
    started = time.monotonic()
    header = await _describe(admin_url)
    print(header, flush=True)
    batch_api = await jobstream_side.probe_batch(admin_url)
    batch_note = "yes" if batch_api else "no (404: n/a, and creates.create is used to fill queues)"
    claim_note = "yes" if hasattr(claims, "claim_batch") else "no (claims.claim is used)"
    notes = (f"jobstream POST /api/jobs/batch: {batch_note}\n"
             f"jobstream claims.claim_batch: {claim_note}")  # fmt: skip
    print(notes, flush=True)
    table = Table()
    try:
        if options.via_pgbouncer:
            table = Table(sides=queue_via_pgbouncer.SIDES)
            await queue_via_pgbouncer.run(options, admin_url, table, batch_api)
        for name, section in SECTIONS.items():
            if name in options.scenarios and not options.via_pgbouncer:
                began = time.monotonic()
                await section(options, admin_url, table, batch_api)
                print(f"    ({name}: {(time.monotonic() - began) / 60:.1f} min)", flush=True)
    finally:
        for name in (jobstream_side.DATABASE, pgqueuer_side.DATABASE):
            await _drop_quietly(admin_url, name)
    summary = table.render()
    minutes = (time.monotonic() - started) / 60
    print(f"\nsummary ({options.repeats} repeat(s), {minutes:.1f} min)\n{summary}", flush=True)
    if options.out is not None:
        options.out.write_text(f"{header}\n{notes}\n\n{summary}\n")
        print(f"written to {options.out}")


async def _describe(admin_url: str) -> str:
    conn = await asyncpg.connect(admin_url)
    try:
        fsync = await conn.fetchval("SHOW fsync")
        sync_commit = await conn.fetchval("SHOW synchronous_commit")
        shared_buffers = await conn.fetchval("SHOW shared_buffers")
        version = await conn.fetchval("SELECT version()")
    finally:
        await conn.close()
    return (
        "queue_side_by_side: jobstream vs PgQueuer (--via-pgbouncer: direct vs PgBouncer)\n"
        f"PostgreSQL: {version}\n"
        f"  fsync = {fsync}, synchronous_commit = {sync_commit},"
        f" shared_buffers = {shared_buffers}\n"
        f"machine: {os.cpu_count()} cores, {_cpu_model()}; Python {platform.python_version()};"
        f" pgqueuer {metadata.version('pgqueuer')}, asyncpg {metadata.version('asyncpg')}"
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


async def _drop_quietly(admin_url: str, name: str) -> None:
    try:
        admin = await asyncpg.connect(admin_url)
    except (OSError, asyncpg.PostgresError):
        return
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
