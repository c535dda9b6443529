"""jobstream's queue against PgQueuer 1.6.0, side by side on one PostgreSQL.

    make bench-queue                                   (installs the `bench` extra, then runs this)
    .venv/bin/python -m bench.queue_side_by_side [--quick] [--repeats N] [--out FILE]

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
    jobstream: `python -m worker` processes x JOBSTREAM_WORKER_CONCURRENCY=128 (a no-op job is
    over in milliseconds: 32 slots leave a worker waiting on round trips). PgQueuer: as many
    processes of bench/pgqueuer_runner.py, each shaped as its own tools/benchmark.py runs it: 5
    PgQueuer instances of one connection each, no max_concurrent_tasks, on uvloop as its `pgq
    run` does (jobstream's worker runs on asyncio's loop); batch_size 50, not its default 10, as
    its performance guide advises for short jobs (--pgq-consumers, --pgq-batch). On this 2-core
    machine 5 x 50 and 1 x 100 drained fastest of the shapes tried, about twice 5 x 10.
    Also printed: the cluster's WAL fsyncs meanwhile, per job (pg_stat_io, PostgreSQL 18).
(b) steady state: one consumer process of each as in (a); `--producers` tasks in this process
    enqueue `--producer-batch` jobs a call (jobstream: POST /api/jobs/batch when the server has it,
    else that many jobs.create calls in a row; PgQueuer: one Queries.enqueue of a list), as fast
    as they can or paced to --steady-rate. Over a window of --steady-s: jobs enqueued (offered)
    and finished (done) per second, and the jobs not finished at its start and end (growing:
    the consumer cannot keep up). Unpaced, producers and consumer share the machine's cores.
(c) enqueue rate: jobstream through a `python -m server` process: POST /api/jobs from 1 and from
    32 httpx clients (an Idempotency-Key each; 1,000 requests in all for each by default, to keep
    the whole run well under 20 minutes: --enqueue-requests), POST /api/jobs/batch of 1,000 jobs;
    and jobs.create called in this process (with a key), which is what PgQueuer's Queries.enqueue
    (1 and 32 callers, and 1,000 jobs a call; no dedupe key) compares with directly.
(d) claim latency: one round trip of the worker's claim with 1,000 and 100,000 jobs queued
    (claims.claim_batch when this checkout has it, else claims.claim, once or 32 times in a
    row) against PgQueuer's Queries.dequeue(batch_size 1 and 32). Between timed calls the jobs
    taken are ended and as many queued again, so every call sees the same queue.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import asyncpg

from bench import jobstream_side, pgqueuer_side
from bench.pgqueuer_side import Shape
from bench.postgres import durable_postgres
from bench.queue_common import Enqueued, Latency, Steady
from jobstream import claims, logs

JOBSTREAM, PGQUEUER = "jobstream", "pgqueuer"
SCENARIOS = ("drain", "steady", "enqueue", "claim")


@dataclass
class Row:
    """One figure measured on both sides, one value per repeat (None: not available)."""

    scenario: str
    unit: str
    higher_is_better: bool
    values: dict[str, list[float | None]] = field(
        default_factory=lambda: {JOBSTREAM: [], PGQUEUER: []}
    )

    def median(self, side: str) -> float | None:
        known = [v for v in self.values[side] if v is not None]
        return statistics.median(known) if known else None

    def spread(self, side: str) -> str:
        known = [v for v in self.values[side] if v is not None]
        if not known:
            return "n/a"
        return " / ".join(self._fmt(v) for v in (min(known), statistics.median(known), max(known)))

    def ratio(self) -> str:
        ours, theirs = self.median(JOBSTREAM), self.median(PGQUEUER)
        if ours is None or theirs is None or theirs == 0:
            return "n/a"
        return f"{ours / theirs:.2f}"

    def _fmt(self, value: float) -> str:
        if self.unit == "ms":
            return f"{value:.2f}"
        if self.unit == "x":
            return f"{value:.2f}"
        return f"{value:,.0f}"


@dataclass
class Table:
    rows: dict[str, Row] = field(default_factory=dict)

    def add(self, scenario: str, unit: str, side: str, value: float | None) -> None:
        higher = unit == "jobs/s"
        row = self.rows.setdefault(scenario, Row(scenario, unit, higher))
        row.values[side].append(value)

    def print_rows(self, scenarios: list[str]) -> None:
        for name in scenarios:
            row = self.rows[name]
            print(
                f"    = {name} [{row.unit}]: jobstream {row.spread(JOBSTREAM)};"
                f" pgqueuer {row.spread(PGQUEUER)}; ratio of medians {row.ratio()}"
            )

    def render(self) -> str:
        head = ("scenario", "unit", "jobstream min / median / max", "pgqueuer min / median / max",
                "js/pgq")  # fmt: skip
        lines = [
            (r.scenario, r.unit + (" ^" if r.higher_is_better else " v"), r.spread(JOBSTREAM),
             r.spread(PGQUEUER), r.ratio())
            for r in self.rows.values()
        ]  # fmt: skip
        widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
        out = []
        for n, line in enumerate([head, *lines]):
            cells = [line[0].ljust(widths[0]), line[1].ljust(widths[1])]
            cells += [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=True)]
            out.append("  ".join(cells))
            if n == 0:
                out.append("  ".join("-" * w for w in widths))
        out.append("(^ higher is better, v lower is better; js/pgq is the ratio of the medians)")
        return "\n".join(out)


@dataclass(frozen=True)
class Options:
    repeats: int
    drain_jobs: int
    drain_concurrency: int
    steady_s: float
    steady_rate: float
    producers: int
    producer_batch: int
    enqueue_requests: int
    enqueue_callers: int
    batch_requests: int
    batch_size: int
    claim_backlogs: tuple[int, ...]
    claims: int
    pgq: Shape
    scenarios: tuple[str, ...]
    out: Path | None


def parse_args(argv: list[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.queue_side_by_side",
        description="jobstream's queue against PgQueuer 1.6.0 on one PostgreSQL.",
    )
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 1 repeat, 2,000-job drain, 5 s steady state, fewer"
                        " requests and claims, 10,000 jobs as the large backlog")  # fmt: skip
    parser.add_argument("--repeats", type=int, help="default 3 (quick: 1)")
    parser.add_argument("--drain-jobs", type=int, help="default 20000 (quick: 2000)")
    parser.add_argument("--drain-concurrency", type=int, default=128,
                        help="jobstream attempts per worker process (default 32)")  # fmt: skip
    parser.add_argument("--steady-s", type=float, help="default 30 (quick: 5)")
    parser.add_argument("--steady-rate", type=float, default=0,
                        help="jobs/s the producers offer in all; 0 (default): as fast as they"
                        " can")  # fmt: skip
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--producer-batch", type=int, default=100)
    parser.add_argument("--enqueue-requests", type=int,
                        help="single-job calls per number of callers; default 1000"
                        " (quick: 300)")  # fmt: skip
    parser.add_argument("--enqueue-callers", type=int, default=32)
    parser.add_argument("--batch-requests", type=int, help="calls of --batch-size jobs;"
                        " default 10 (quick: 2)")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--claim-backlogs", help="default 1000,100000 (quick: 1000,10000)")
    parser.add_argument("--claims", type=int, help="timed claims each; default 200 (quick: 50)")
    parser.add_argument("--pgq-consumers", type=int, default=5,
                        help="PgQueuer instances per consumer process (default 5)")  # fmt: skip
    parser.add_argument("--pgq-batch", type=int, default=50,
                        help="PgQueuer's dequeue batch_size (default 50)")  # fmt: skip
    parser.add_argument("--only", default=",".join(SCENARIOS),
                        help=f"scenarios to run, of {','.join(SCENARIOS)}")  # fmt: skip
    parser.add_argument("--out", type=Path, help="also write the summary table to this file")
    args = parser.parse_args(argv)
    quick = args.quick

    def pick(value: int | float | None, full: int | float, smoke: int | float) -> float:
        return float(value if value is not None else smoke if quick else full)

    scenarios = tuple(s.strip() for s in args.only.split(",") if s.strip())
    if unknown := set(scenarios) - set(SCENARIOS):
        parser.error(f"--only: unknown scenario(s) {', '.join(sorted(unknown))}")
    backlogs = args.claim_backlogs or ("1000,10000" if quick else "1000,100000")
    return Options(
        repeats=int(pick(args.repeats, 3, 1)),
        drain_jobs=int(pick(args.drain_jobs, 20_000, 2_000)),
        drain_concurrency=args.drain_concurrency,
        steady_s=pick(args.steady_s, 30, 5),
        steady_rate=args.steady_rate,
        producers=args.producers,
        producer_batch=args.producer_batch,
        enqueue_requests=int(pick(args.enqueue_requests, 1000, 300)),
        enqueue_callers=args.enqueue_callers,
        batch_requests=int(pick(args.batch_requests, 10, 2)),
        batch_size=args.batch_size,
        claim_backlogs=tuple(int(b) for b in backlogs.split(",")),
        claims=int(pick(args.claims, 200, 50)),
        pgq=Shape(args.pgq_consumers, args.pgq_batch),
        scenarios=scenarios,
        out=args.out,
    )


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
    batch_note = "yes" if batch_api else "no (404: n/a, and jobs.create is used to fill queues)"
    claim_note = "yes" if hasattr(claims, "claim_batch") else "no (claims.claim is used)"
    notes = (f"jobstream POST /api/jobs/batch: {batch_note}\n"
             f"jobstream claims.claim_batch: {claim_note}")  # fmt: skip
    print(notes, flush=True)
    table = Table()
    sections = {"drain": _drain, "steady": _steady, "enqueue": _enqueue, "claim": _claim}
    try:
        for name, section in sections.items():
            if name in options.scenarios:
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
        version = await conn.fetchval("SELECT version()")
    finally:
        await conn.close()
    return (
        "queue_side_by_side: jobstream vs PgQueuer\n"
        f"PostgreSQL: {version}\n"
        f"  fsync = {fsync}, synchronous_commit = {sync_commit}\n"
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


async def _interleave(
    options: Options,
    label: str,
    ours: Callable[[], Awaitable[str]],
    theirs: Callable[[], Awaitable[str]],
) -> None:
    """Each side once per repeat, jobstream first; each call records its figures and returns
    the line to print."""
    for n in range(1, options.repeats + 1):
        for side, run in ((JOBSTREAM, ours), (PGQUEUER, theirs)):
            line = await run()
            print(f"  {label} #{n} {side:<9} {line}", flush=True)


async def _drain(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    print(f"\n(a) drain: {options.drain_jobs:,} queued no-op jobs, first start -> last end")
    for processes in (1, 2):
        row = f"drain, {processes} process{'es' if processes > 1 else ''}"

        async def ours(processes: int = processes, row: str = row) -> str:
            result = await jobstream_side.drain(
                admin_url, count=options.drain_jobs, processes=processes,
                concurrency=options.drain_concurrency, batch_api=batch_api,
            )  # fmt: skip
            table.add(row, "jobs/s", JOBSTREAM, result.rate)
            return f"{result}, {processes} x {options.drain_concurrency} slots"

        async def theirs(processes: int = processes, row: str = row) -> str:
            result = await pgqueuer_side.drain(
                admin_url, count=options.drain_jobs, processes=processes, shape=options.pgq
            )
            table.add(row, "jobs/s", PGQUEUER, result.rate)
            return f"{result}, {processes} x {options.pgq}"

        await _interleave(options, row, ours, theirs)
        table.print_rows([row])


async def _steady(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    how = f"paced to {options.steady_rate:,.0f} jobs/s" if options.steady_rate else "unpaced"
    via = "POST /api/jobs/batch" if batch_api else "jobs.create"
    print(
        f"\n(b) steady state, {options.steady_s:g} s: {options.producers} producers x"
        f" {options.producer_batch} jobs a call ({how}; jobstream via {via}), one consumer process"
    )
    rows = ["steady: done", "steady: offered", "steady: unfinished at end"]

    async def ours() -> str:
        result = await jobstream_side.steady(
            admin_url, seconds=options.steady_s, warmup_s=1.0, producers=options.producers,
            batch=options.producer_batch, rate=options.steady_rate,
            concurrency=options.drain_concurrency, batch_api=batch_api,
        )  # fmt: skip
        for row, value in zip(rows, _steady_values(result), strict=True):
            table.add(row, "jobs" if "unfinished" in row else "jobs/s", JOBSTREAM, value)
        return str(result)

    async def theirs() -> str:
        result = await pgqueuer_side.steady(
            admin_url, seconds=options.steady_s, warmup_s=1.0, producers=options.producers,
            batch=options.producer_batch, rate=options.steady_rate, shape=options.pgq,
        )  # fmt: skip
        for row, value in zip(rows, _steady_values(result), strict=True):
            table.add(row, "jobs" if "unfinished" in row else "jobs/s", PGQUEUER, value)
        return str(result)

    await _interleave(options, "steady", ours, theirs)
    table.print_rows(rows)


def _steady_values(result: Steady) -> list[float | None]:
    return [result.done_rate, result.offered_rate, float(result.backlog_end)]


async def _enqueue(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    k, requests = options.enqueue_callers, options.enqueue_requests
    print(
        f"\n(c) enqueue: {requests:,} single-job calls per caller count,"
        f" {options.batch_requests} calls of {options.batch_size:,} jobs"
    )
    http1, httpk = "enqueue, 1 caller (js: POST /api/jobs)", f"enqueue, {k} callers (js: POST)"
    lib1, libk = "enqueue, 1 caller (js: jobs.create)", f"enqueue, {k} callers (js: jobs.create)"
    p50, p99 = f"enqueue, {k} callers (js: POST): p50", f"enqueue, {k} callers (js: POST): p99"
    batch = f"enqueue, {options.batch_size:,} a call (js: POST batch)"
    rows = [http1, httpk, p50, p99, lib1, libk, batch]

    async def ours() -> str:
        web = await jobstream_side.enqueue_http(
            admin_url, requests=requests, callers=k, batches=options.batch_requests,
            batch=options.batch_size, batch_api=batch_api,
        )  # fmt: skip
        direct = await jobstream_side.enqueue_direct(admin_url, requests=requests, callers=k)
        many, batched = web[f"http x{k}"], web["http batch"]
        assert many is not None
        figures = {
            http1: _rate(web["http x1"]), httpk: many.rate,
            p50: many.latency.p50 * 1000, p99: many.latency.p99 * 1000,
            lib1: direct["create x1"].rate, libk: direct[f"create x{k}"].rate,
            batch: _rate(batched),
        }  # fmt: skip
        for row, value in figures.items():
            table.add(row, "ms" if row in (p50, p99) else "jobs/s", JOBSTREAM, value)
        return (
            f"POST x1 {_rate(web['http x1']) or 0:,.0f}/s, POST x{k} {many.rate:,.0f}/s"
            f" ({many.latency}), batch {_fmt_rate(batched)};"
            f" jobs.create x1 {direct['create x1'].rate:,.0f}/s,"
            f" x{k} {direct[f'create x{k}'].rate:,.0f}/s"
        )

    async def theirs() -> str:
        got = await pgqueuer_side.enqueue(
            admin_url, requests=requests, callers=k, batches=options.batch_requests,
            batch=options.batch_size,
        )  # fmt: skip
        single, many, batched = got["enqueue x1"], got[f"enqueue x{k}"], got["enqueue batch"]
        figures = {
            http1: single.rate, httpk: many.rate, p50: many.latency.p50 * 1000,
            p99: many.latency.p99 * 1000, lib1: single.rate, libk: many.rate,
            batch: batched.rate,
        }  # fmt: skip
        for row, value in figures.items():
            table.add(row, "ms" if row in (p50, p99) else "jobs/s", PGQUEUER, value)
        return (
            f"enqueue x1 {single.rate:,.0f}/s, x{k} {many.rate:,.0f}/s ({many.latency}),"
            f" batch {batched.rate:,.0f}/s"
        )

    await _interleave(options, "enqueue", ours, theirs)
    table.print_rows(rows)
    print("    (the pgqueuer column of the POST rows is its Queries.enqueue: it has no HTTP API)")


def _rate(figure: Enqueued | None) -> float | None:
    return None if figure is None else figure.rate


def _fmt_rate(figure: Enqueued | None) -> str:
    return "n/a" if figure is None else f"{figure.rate:,.0f}/s"


async def _claim(options: Options, admin_url: str, table: Table, _batch_api: bool) -> None:
    print(
        f"\n(d) claim latency: {options.claims} timed round trips per backlog and batch size"
        " (jobs taken are ended and replaced between calls)"
    )
    p50s: dict[tuple[str, int, int], list[float]] = {}
    for max_jobs in (1, 32):
        for backlog in options.claim_backlogs:
            row = f"claim {max_jobs}, {backlog:,} queued"

            async def ours(backlog: int = backlog, max_jobs: int = max_jobs, row: str = row) -> str:
                label, latency = await jobstream_side.claim_latency(
                    admin_url, backlog=backlog, max_jobs=max_jobs, claims=options.claims
                )
                _record(table, row, JOBSTREAM, latency)
                p50s.setdefault((JOBSTREAM, max_jobs, backlog), []).append(latency.p50)
                return f"{label}: {latency}"

            async def theirs(
                backlog: int = backlog, max_jobs: int = max_jobs, row: str = row
            ) -> str:
                latency = await pgqueuer_side.dequeue_latency(
                    admin_url, backlog=backlog, batch_size=max_jobs, claims=options.claims
                )
                _record(table, row, PGQUEUER, latency)
                p50s.setdefault((PGQUEUER, max_jobs, backlog), []).append(latency.p50)
                return f"dequeue(batch_size={max_jobs}): {latency}"

            await _interleave(options, row, ours, theirs)
            table.print_rows([f"{row}: p50", f"{row}: p99"])
        if len(options.claim_backlogs) >= 2:
            small, large = min(options.claim_backlogs), max(options.claim_backlogs)
            row = f"claim {max_jobs}: p50 at {large:,} / at {small:,} queued"
            for side in (JOBSTREAM, PGQUEUER):
                for big, little in zip(
                    p50s[(side, max_jobs, large)], p50s[(side, max_jobs, small)], strict=True
                ):
                    table.add(row, "x", side, big / little)
            table.print_rows([row])


def _record(table: Table, row: str, side: str, latency: Latency) -> None:
    table.add(f"{row}: p50", "ms", side, latency.p50 * 1000)
    table.add(f"{row}: p99", "ms", side, latency.p99 * 1000)


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
