"""WAL and the database's CPU per no-op job, stage by stage, jobstream beside PgQueuer.

    .venv/bin/python -m bench.queue_wal [--jobs 256] [--batch 16] [--create-batch 100]
                                        [--repeats 3] [--explain] [--no-keys]
                                        [--no-checkpoint] [--side jobstream|pgqueuer|both]

On a fresh durable embedded PostgreSQL (fsync and full_page_writes on; or DATABASE_URL, whose
server must allow CREATE DATABASE and pg_walinspect), each repeat makes a database afresh and
takes `--jobs` no-op jobs of bench-queue's kind (the simulated provider, one token, no delays;
bench/jobstream_side.py) through their lives with the product's own calls, the creates on a
connection like the server's and the rest on one like the worker's (generic plans):
  create   jobstream_side.create_many (creates.create_many, INSERT_JOBS, idempotency keys on;
           off with --no-keys) in batches of --create-batch;
  claim    claims.claim_batch (claim_jobs, schema.sql) of --batch jobs, as a worker claims for
           its free slots; then, at once,
  success  attempts.accept_many (SUCCEED_ATTEMPTS) of those --batch jobs, their one-token text
           riding along as the last chunk, as a worker's completions batch them;
  settle   the janitor's compaction (retention.settle, SETTLE_JOBS) in its batches of 25, as if
           JOBSTREAM_COMPACT_AFTER_S had passed, with a retention of 0;
  delete   the janitor's deletion after retention (retention.delete_expired), tombstones on.
  renew    apart, not in a no-op job's life: one lease renewal (renewals.renew_many) of --batch
           running jobs, which a job pays every third of its lease (JOBSTREAM_LEASE_S / 3).
Each claim and success is followed by its NOTIFY statement (events.announce), counted with it.
PgQueuer 1.6.0 goes through the same create, claim and success with its own statements, in a
database of its own, each repeat's two sides one after the other, in turns which goes first
(bench/pgqueuer_wal.py says how).
A CHECKPOINT comes before every measured batch, so each batch pays the full-page images of the
pages it touches first: FPI are reported apart, and the bytes they take (--no-checkpoint: only
where PostgreSQL's own checkpoints fall, as under steady load). A warm-up life of one batch,
unmeasured, fills the connection's caches first. Autovacuum is off on the database's
tables, so that no other process writes between a batch's two readings (bench/wal_meter.py).

Per stage: WAL records, FPI, bytes and the backend's CPU a job (min / median / max over the
repeats; the CPU from /proc, when the server runs on this machine), and for the median repeat
the heap rows inserted / updated (HOT) / deleted a job (pg_stat_user_tables), the index entries
a job (btree leaf inserts, from the records), and which relation each record went to. Then the
two sides' medians stage by stage, and their ratio. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import asyncpg

from bench import jobstream_side
from bench import queue_common as common
from bench.postgres import durable_postgres
from bench.wal_meter import Meter, Sample
from jobstream import attempts, claims, db, logs, migrations, renewals, retention
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.clock import DatabaseClock
from jobstream.jobspec import BUILT_IN_JOB
from jobstream.settings.worker import WorkerSettings
from jobstream.sql import queries
from jobstream.usage import Usage
from jobstream.worker.janitor import unhurried

DATABASE = "queue_wal_bench"
CLOCK = DatabaseClock()
WORKER_ID = "queue-wal"
LEASE_S = WorkerSettings.lease_s
JANITOR_BATCH = WorkerSettings.janitor_batch
# What the simulated provider answers a one-token job: its text, and a usage with a price.
TEXT = "0 "
USAGE = Usage(input_tokens=1, output_tokens=1, cost_usd=Decimal("0.000002"), model="sim")
QUEUE = ("create", "claim", "success")
JANITOR = ("settle", "delete")
STAGES = (*QUEUE, *JANITOR, "renew")
SIDES = ("jobstream", "pgqueuer")

Work = Callable[[], Awaitable[object]]
# Runs one batch of a stage: measure(stage, jobs, work).
Measure = Callable[[str, int, Work], Awaitable[None]]


@dataclass(frozen=True)
class Options:
    jobs: int
    batch: int
    create_batch: int
    repeats: int
    explain: bool
    # Creates with idempotency keys (the default) or without.
    keyed: bool = True
    # A CHECKPOINT before every measured batch (Meter.open).
    checkpoint: bool = True
    sides: tuple[str, ...] = SIDES


async def prepare(admin_url: str) -> str:
    """A fresh database with the schema, whose tenant has no running limit, autovacuum off."""
    url = await common.recreate_database(admin_url, DATABASE)
    conn = await db.connect(url)
    try:
        await migrations.apply_schema(conn)
        await conn.execute("UPDATE tenants SET max_running = 100000")
        await common.autovacuum_off(conn)
    finally:
        await conn.close()
    return url


def successes(held: list[Claimed]) -> list[Success]:
    return [Success(h, TEXT, USAGE, last_chunk=TEXT) for h in held]


async def life(
    pool: asyncpg.Pool,
    measure: Measure,
    *,
    jobs: int,
    batch: int,
    create_batch: int,
    keyed: bool = True,
    server: asyncpg.Pool | None = None,
) -> None:
    """`jobs` no-op jobs through every stage, each batch run by `measure(jobs, work)`: the
    creates on `server` (a pool like the server's; None: `pool`), the rest on `pool`."""
    creator = pool if server is None else server
    for start in range(0, jobs, create_batch):
        n = min(create_batch, jobs - start)

        async def create(n: int = n) -> None:
            await jobstream_side.create_many(creator, n, keyed=keyed)

        await measure("create", n, create)
    held: list[Claimed] = []

    async def claim(n: int) -> None:
        held[:] = await claims.claim_batch(
            pool, providers=[jobstream_side.PROVIDER], worker_id=WORKER_ID, lease_s=LEASE_S,
            clock=CLOCK, max_jobs=n,
        )  # fmt: skip
        if len(held) != n:
            raise RuntimeError(f"claimed {len(held)} jobs of {n}")

    async def succeed() -> None:
        landed = await attempts.accept_many(pool, successes(held), CLOCK)
        if len(landed) != len(held):
            raise RuntimeError(f"{len(held) - len(landed)} successes fenced out")

    for start in range(0, jobs, batch):
        n = min(batch, jobs - start)
        await measure("claim", n, lambda n=n: claim(n))  # type: ignore[misc]
        await measure("success", n, succeed)
    await janitor(pool, measure, jobs)


async def janitor(pool: asyncpg.Pool, measure: Measure, jobs: int) -> None:
    """Settle, then delete, `jobs` finished jobs in the janitor's batches."""
    for stage in JANITOR:
        for start in range(0, jobs, JANITOR_BATCH):
            n = min(JANITOR_BATCH, jobs - start)

            async def work(stage: str = stage, n: int = n) -> None:
                async with pool.acquire() as conn, unhurried(conn):
                    if stage == "settle":
                        done = await retention.settle(
                            conn, CLOCK, compact_after_s=0, retention_s=0, limit=n
                        )
                    else:
                        done = await retention.delete_expired(conn, CLOCK, limit=n, tombstones=True)
                if done.jobs != n:
                    raise RuntimeError(f"{stage}: {done.jobs} jobs of {n}")

            await measure(stage, n, work)


async def renewal(pool: asyncpg.Pool, measure: Measure, batch: int) -> None:
    """One renewal of `batch` running jobs' leases; the jobs then end, unmeasured."""
    await jobstream_side.create_many(pool, batch, keyed=True)
    held = await claims.claim_batch(
        pool, providers=[jobstream_side.PROVIDER], worker_id=WORKER_ID, lease_s=LEASE_S,
        clock=CLOCK, max_jobs=batch,
    )  # fmt: skip
    await measure(
        "renew",
        len(held),
        lambda: renewals.renew_many(pool, held, LEASE_S, CLOCK, worker_id=WORKER_ID),
    )
    await attempts.accept_many(pool, successes(held), CLOCK)


async def unmeasured(_stage: str, _jobs: int, work: Work) -> None:
    await work()


async def one_repeat(
    admin_url: str, options: Options, side: str = "jobstream"
) -> dict[str, Sample]:
    """One life of options.jobs jobs on a fresh database: each stage's batches summed."""
    if side == "pgqueuer":
        return await pgqueuer_repeat(admin_url, options)
    url = await prepare(admin_url)
    # Each stage on a connection like the one that runs it in production: the creates on the
    # server's (plans left to PostgreSQL), the rest on the worker's (generic plans: a claim
    # planned at every call cost the backend 0.6 ms more; db.create_pool).
    server = await db.create_pool(url, min_size=1, max_size=1)
    pool = await db.create_pool(url, min_size=1, max_size=1, generic_plans=True)
    meters = {
        "server": await Meter.open(url, server, checkpoint=options.checkpoint),
        "worker": await Meter.open(url, pool, checkpoint=options.checkpoint),
    }
    samples: dict[str, list[Sample]] = {stage: [] for stage in STAGES}

    async def measured(stage: str, jobs: int, work: Work) -> None:
        meter = meters["server" if stage == "create" else "worker"]
        samples[stage].append(await meter.measure(jobs, work))

    try:
        # The warm-up: the connections' caches and prepared statements, the backends' counter
        # rows (metric_totals), a first renewal.
        batch = options.batch
        await life(pool, unmeasured, jobs=batch, batch=batch, create_batch=batch,
                   keyed=options.keyed, server=server)  # fmt: skip
        await renewal(pool, unmeasured, batch)
        await life(pool, measured, jobs=options.jobs, batch=batch,
                   create_batch=options.create_batch, keyed=options.keyed,
                   server=server)  # fmt: skip
        await renewal(pool, measured, batch)
    finally:
        for meter in meters.values():
            await meter.close()
        await pool.close()
        await server.close()
        await common.drop_database(admin_url, DATABASE)
    return {stage: Sample.total(got) for stage, got in samples.items()}


async def pgqueuer_repeat(admin_url: str, options: Options) -> dict[str, Sample]:
    """PgQueuer's side of one repeat: its create, claim and success, after a warm-up life."""
    # Here, not at the top: PgQueuer is in the `bench` extra only (make bench-wal installs it),
    # and the suite imports this module without it.
    from bench import pgqueuer_wal

    url = await pgqueuer_wal.prepare(admin_url)
    # PgQueuer's connections as its side of the drains makes them (asyncpg's default codecs).
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    meter = await Meter.open(url, pool, checkpoint=options.checkpoint)
    samples: dict[str, list[Sample]] = {stage: [] for stage in QUEUE}

    async def measured(stage: str, jobs: int, work: Work) -> None:
        samples[stage].append(await meter.measure(jobs, work))

    try:
        batch = options.batch
        await pgqueuer_wal.life(pool, unmeasured, jobs=batch, batch=batch, create_batch=batch,
                                keyed=options.keyed)  # fmt: skip
        await pgqueuer_wal.life(pool, measured, jobs=options.jobs, batch=batch,
                                create_batch=options.create_batch, keyed=options.keyed)  # fmt: skip
    finally:
        await meter.close()
        await pool.close()
        await pgqueuer_wal.drop(admin_url)
    return {stage: Sample.total(got) for stage, got in samples.items()}


# --- figures ---


@dataclass(frozen=True)
class PerJob:
    """One stage's figures a job, in one repeat."""

    records: float
    fpi: float
    bytes: float
    fpi_bytes: float
    ins: float
    upd: float
    hot: float
    moved: float
    dele: float
    index_entries: float
    # µs of the backend's CPU; NaN when the server's /proc is not this machine's.
    cpu_us: float

    @property
    def bytes_without_fpi(self) -> float:
        return self.bytes - self.fpi_bytes

    @classmethod
    def of(cls, sample: Sample) -> PerJob:
        n, rows = sample.jobs, sample.rows
        cpu_us = math.nan if sample.cpu_s is None else sample.cpu_s / n * 1e6
        return cls(
            sample.records / n, sample.fpi / n, sample.bytes / n, sample.fpi_bytes / n,
            rows.ins / n, rows.upd / n, rows.hot / n, rows.moved / n, rows.dele / n,
            sample.index_entries / n, cpu_us,
        )  # fmt: skip

    def __add__(self, other: PerJob) -> PerJob:
        return PerJob(
            *(a + b for a, b in zip(vars(self).values(), vars(other).values(), strict=True))
        )


def per_job(repeat: dict[str, Sample]) -> dict[str, PerJob]:
    """Each stage a job, and the totals: the queue's (create, claim, success) and with the
    janitor's (a job's whole life); renewal stays apart. PgQueuer's side has the queue's."""
    figures = {stage: PerJob.of(sample) for stage, sample in repeat.items()}
    queue = sum((figures[s] for s in QUEUE[1:]), figures[QUEUE[0]])
    if "renew" not in figures:
        return {**{s: figures[s] for s in QUEUE}, "queue total": queue}
    whole = sum((figures[s] for s in JANITOR), queue)
    return {**{s: figures[s] for s in (*QUEUE, *JANITOR)}, "queue total": queue,
            "life total": whole, "renew": figures["renew"]}  # fmt: skip


def _spread(values: list[float], digits: int) -> str:
    return (f"{statistics.median(values):.{digits}f}"
            f" ({min(values):.{digits}f}-{max(values):.{digits}f})")  # fmt: skip


def table(repeats: list[dict[str, Sample]], options: Options) -> str:
    """stage | batch | WAL records, FPI, bytes other than FPI a job: median (min-max) over the
    repeats; FPI bytes, heap rows and index entries a job: the medians."""
    figures = [per_job(r) for r in repeats]
    batches = {"create": options.create_batch, "claim": options.batch,
               "success": options.batch, "settle": JANITOR_BATCH, "delete": JANITOR_BATCH,
               "renew": options.batch}  # fmt: skip
    lines = [
        f"{'stage':<12} {'batch':>5}  {'WAL records/job':>19}  {'FPI/job':>16}  "
        f"{'bytes/job w/o FPI':>18}  {'FPI bytes':>9}  {'heap ins/upd (HOT, moved)/del':>34}  "
        f"{'index entries':>13}  {'CPU µs/job':>16}"
    ]
    for stage in figures[0]:
        got = [f[stage] for f in figures]
        med = {k: statistics.median(getattr(g, k) for g in got) for k in vars(got[0])}
        rows = (f"{med['ins']:.2f} / {med['upd']:.2f} ({med['hot']:.2f}, {med['moved']:.2f})"
                f" / {med['dele']:.2f}")  # fmt: skip
        batch = str(batches.get(stage, ""))
        if stage == "renew":
            lines.append("(apart: a running job's lease renewal, every JOBSTREAM_LEASE_S / 3)")
        lines.append(
            f"{stage:<12} {batch:>5}  {_spread([g.records for g in got], 2):>19}  "
            f"{_spread([g.fpi for g in got], 2):>16}  "
            f"{_spread([g.bytes_without_fpi for g in got], 0):>18}  "
            f"{med['fpi_bytes']:>9.0f}  {rows:>34}  {med['index_entries']:>13.2f}  "
            f"{_spread([g.cpu_us for g in got], 0):>16}"
        )
    return "\n".join(lines)


def side_by_side(runs: dict[str, list[dict[str, Sample]]]) -> str:
    """The queue's stages, each side's median a job and jobstream / PgQueuer: WAL records, all
    bytes (FPI too), bytes other than FPI, the backend's CPU."""
    figures = {side: [per_job(r) for r in repeats] for side, repeats in runs.items()}
    measures = (("WAL records", "records", 2), ("WAL bytes", "bytes", 0),
                ("bytes w/o FPI", "bytes_without_fpi", 0), ("CPU µs", "cpu_us", 1))  # fmt: skip
    lines = [f"{'stage':<12} {'a job':<14} {'jobstream':>10} {'PgQueuer':>10} {'js/pgq':>7}"]
    for stage in (*QUEUE, "queue total"):
        for label, name, digits in measures:
            med = {
                side: statistics.median(getattr(g[stage], name) for g in got)
                for side, got in figures.items()
            }
            js, pgq = med["jobstream"], med["pgqueuer"]
            ratio = js / pgq if pgq else math.nan
            lines.append(f"{stage:<12} {label:<14} {js:>10.{digits}f} {pgq:>10.{digits}f}"
                         f" {ratio:>7.2f}")  # fmt: skip
    return "\n".join(lines)


def places(repeat: dict[str, Sample]) -> str:
    """Where each stage's records went: a line per relation (or kind of record without one),
    most records first, with its record types; and each table's rows."""
    lines: list[str] = []
    for stage, sample in repeat.items():
        n = sample.jobs
        lines.append(f"{stage} ({n} jobs): {sample.records / n:.2f} records, "
                     f"{sample.bytes / n:.0f} bytes a job")  # fmt: skip
        ordered = sorted(sample.places.items(), key=lambda p: (-p[1].records, p[0]))
        for name, place in ordered:
            kinds = ", ".join(
                f"{t} {c / n:.2f}" for t, c in sorted(place.types.items(), key=lambda t: -t[1])
            )
            lines.append(
                f"  {name:<34} {place.records / n:6.2f} rec {place.bytes / n:7.0f} B"
                f" (FPI {place.fpi / n:.2f}, {place.fpi_bytes / n:.0f} B)  {kinds}"
            )
        for name, rows in sorted(sample.tables.items()):
            lines.append(
                f"  rows {name:<29} ins {rows.ins / n:.2f} upd {rows.upd / n:.2f}"
                f" (HOT {rows.hot / n:.2f}, to another page {rows.moved / n:.2f})"
                f" del {rows.dele / n:.2f}"
            )
        if not sample.agrees:
            b = sample.backend
            lines.append(
                f"  !! the backend's own counters differ: {b.records} records, {b.fpi} FPI,"
                f" {b.bytes} bytes against {sample.records}, {sample.fpi}, {sample.bytes}"
            )
    return "\n".join(lines)


# --- the claim's and the success's plans ---

# The statements claim_jobs runs inside, with their plans and WAL, sent to the client as notices.
AUTO_EXPLAIN = """
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_wal = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = notice;
"""
# The running jobs as claim_jobs returned them (claims.claimed reads them). Each is in its first
# attempt, so the job's start is the attempt's, which the claim hands to the worker.
RUNNING = """
SELECT id, tenant_id, attempts, uncounted_attempts, max_attempts, run_token, provider, payload,
       job_name, traceparent, started_at
  FROM jobs WHERE status = 'running'
"""


async def _explain(conn: db.Conn, statement: str, args: list[Any]) -> str:
    rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, WAL) {statement}", *args)
    return "\n".join(r[0] for r in rows)


async def explain(admin_url: str, batch: int) -> str:
    """EXPLAIN (ANALYZE, BUFFERS, WAL) of one claim of `batch` jobs (CLAIM_JOBS, with the plans
    of the statements claim_jobs runs, from auto_explain) and of their success
    (SUCCEED_ATTEMPTS), on a fresh database after a warm-up life, not after a checkpoint."""
    url = await prepare(admin_url)
    pool = await db.create_pool(url, min_size=1, max_size=1)
    notices: list[str] = []
    try:
        await life(pool, unmeasured, jobs=batch, batch=batch, create_batch=batch)
        await jobstream_side.create_many(pool, 4 * batch, keyed=True)
        async with pool.acquire() as conn:
            conn.add_log_listener(lambda _conn, message: notices.append(message.message))
            await conn.execute(AUTO_EXPLAIN)
            claim_args = [
                [jobstream_side.PROVIDER], WORKER_ID, LEASE_S, None, [], [], [], batch,
                [BUILT_IN_JOB], claims.DEFAULT_MAX_SHARE,
            ]  # fmt: skip
            claim_plan = await _explain(conn, queries.CLAIM_JOBS, claim_args)
            await conn.execute("SET auto_explain.log_min_duration = -1")
            held = [claims.claimed(r) for r in await conn.fetch(RUNNING)]
            args = attempts.succeed_args(successes(held), None)
            succeed_plan = await _explain(conn, queries.SUCCEED_ATTEMPTS, args)
    finally:
        await pool.close()
        await common.drop_database(admin_url, DATABASE)
    nested = "\n\n".join(n for n in notices if "claim_jobs(" not in n.split("\n", 2)[1])
    return (
        f"EXPLAIN (ANALYZE, BUFFERS, WAL) CLAIM_JOBS, {batch} jobs:\n{claim_plan}\n\n"
        f"claim_jobs' own statements (auto_explain):\n{nested}\n\n"
        f"EXPLAIN (ANALYZE, BUFFERS, WAL) SUCCEED_ATTEMPTS, {len(held)} jobs:\n{succeed_plan}"
    )


# --- the run ---


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=256, help="jobs measured a repeat")
    parser.add_argument("--batch", type=int, default=16, help="jobs a claim and a success")
    parser.add_argument("--create-batch", type=int, default=100, help="jobs a create call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--explain", action="store_true", help="print the plans too")
    parser.add_argument("--no-keys", action="store_true", help="creates without idempotency keys")
    parser.add_argument(
        "--no-checkpoint", action="store_true", help="no CHECKPOINT before each measured batch"
    )
    parser.add_argument("--side", choices=(*SIDES, "both"), default="both")
    args = parser.parse_args(argv)
    sides = SIDES if args.side == "both" else (args.side,)
    return Options(
        args.jobs, args.batch, args.create_batch, args.repeats, args.explain, not args.no_keys,
        checkpoint=not args.no_checkpoint, sides=sides,
    )  # fmt: skip


async def describe(admin_url: str) -> str:
    conn = await asyncpg.connect(admin_url)
    try:
        settings = {
            name: await conn.fetchval(f"SHOW {name}")
            for name in ("fsync", "synchronous_commit", "full_page_writes", "data_checksums",
                         "wal_level", "shared_buffers")
        }  # fmt: skip
        version = await conn.fetchval("SHOW server_version")
    finally:
        await conn.close()
    shown = ", ".join(f"{k} = {v}" for k, v in settings.items())
    return f"queue_wal: WAL per no-op job\nPostgreSQL {version}: {shown}\n{os.cpu_count()} cores"


async def run(options: Options, admin_url: str) -> None:
    print(await describe(admin_url), flush=True)
    checkpoints = (
        "a CHECKPOINT before every measured batch" if options.checkpoint else "no CHECKPOINT"
    )
    keyed = "keyed" if options.keyed else "without keys"
    print(
        f"{options.jobs} jobs a repeat; claims and successes of {options.batch}, creates of "
        f"{options.create_batch} ({keyed}); {checkpoints}; sides: {', '.join(options.sides)}",
        flush=True,
    )
    runs: dict[str, list[dict[str, Sample]]] = {side: [] for side in options.sides}
    for n in range(options.repeats):
        # In turns which side goes first: the machine's noise drifts over a run.
        order = options.sides if n % 2 == 0 else options.sides[::-1]
        for side in order:
            repeat = await one_repeat(admin_url, options, side)
            runs[side].append(repeat)
            total = per_job(repeat)["queue total"]
            print(f"repeat {n + 1}, {side}: queue {total.records:.2f} records,"
                  f" {total.bytes:.0f} bytes ({total.fpi_bytes:.0f} of them FPI),"
                  f" {total.cpu_us:.0f} µs of CPU a job", flush=True)  # fmt: skip
    for side, repeats in runs.items():
        print(f"\n{side}:\n" + table(repeats, options))
        by_records = sorted(repeats, key=lambda r: per_job(r)["queue total"].records)
        print(
            f"\nWhere {side}'s records go (the median repeat), a job:\n"
            + places(by_records[len(by_records) // 2])
        )
    if len(runs) == len(SIDES):
        print("\nSide by side, medians a job:\n" + side_by_side(runs))
    if options.explain:
        print("\n" + await explain(admin_url, options.batch))


def main(argv: list[str] | None = None) -> None:
    options = parse_args(argv)
    logs.configure("warning", json=False)
    with durable_postgres("queue-wal-") as admin_url:
        asyncio.run(run(options, admin_url))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        sys.exit(130)
