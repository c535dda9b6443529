"""bench.queue_side_by_side's scenarios: each runs both sides interleaved and adds its figures
to the table."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable

from bench import jobstream_calls, jobstream_workers, pgqueuer_side
from bench.queue_common import Drained, Enqueued, Latency, Steady
from bench.queue_options import Options
from bench.queue_table import JOBSTREAM, PGQUEUER, Table


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


async def drain(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    print(f"\n(a) drain: {options.drain_jobs:,} queued no-op jobs, first start -> last end")
    for processes in (1, 2):
        row = f"drain, {processes} process{'es' if processes > 1 else ''}"
        rows = [row, f"{row}: PostgreSQL CPU a job", f"{row}: consumers' CPU a job"]

        async def ours(processes: int = processes, rows: list[str] = rows) -> str:
            result = await jobstream_workers.drain(
                admin_url, count=options.drain_jobs, processes=processes,
                concurrency=options.drain_concurrency, batch_api=batch_api,
            )  # fmt: skip
            _record_drain(table, rows, JOBSTREAM, result)
            return f"{result}, {processes} x {options.drain_concurrency} slots"

        async def theirs(processes: int = processes, rows: list[str] = rows) -> str:
            result = await pgqueuer_side.drain(
                admin_url, count=options.drain_jobs, processes=processes, shape=options.pgq
            )
            _record_drain(table, rows, PGQUEUER, result)
            return f"{result}, {processes} x {options.pgq}"

        await _interleave(options, row, ours, theirs)
        table.print_rows(rows)


def _record_drain(table: Table, rows: list[str], side: str, result: Drained) -> None:
    """The rate, and what a job cost each kind of process (bench/cpu_meter.py): a drain that
    neither side runs at the cores' limit goes as fast as a job is cheap."""
    rate, database, consumers = rows
    table.add(rate, "jobs/s", side, result.rate)
    cpu = result.cpu_per_job_us()
    table.add(database, "µs", side, None if cpu is None else cpu[0])
    table.add(consumers, "µs", side, None if cpu is None else cpu[1])


async def steady(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    for backlog in options.steady_backlogs:
        await _steady(options, admin_url, table, batch_api, backlog)


async def _steady(
    options: Options, admin_url: str, table: Table, batch_api: bool, backlog: int
) -> None:
    how = f"paced to {options.steady_rate:,.0f} jobs/s" if options.steady_rate else "unpaced"
    held = f"held at {backlog:,} unfinished" if backlog else "never held"
    # Like for like by default: both sides' producers call their library, `producer_batch` jobs
    # a call. Through HTTP, jobstream's server process takes about half a core of the two.
    http = batch_api and options.steady_via == "http"
    via = "POST /api/jobs/batch" if http else "creates.create_many"
    consumers = f"{options.consumers} consumer process{'es' if options.consumers > 1 else ''}"
    print(
        f"\n(b) steady state, {options.steady_s:g} s: {options.producers} producers x"
        f" {options.producer_batch} jobs a call ({how}, {held}; jobstream via {via}),"
        f" {consumers}"
    )
    # Held at a backlog, the producers offer what the consumers take: a steady state. Never
    # held, they take CPU from the consumers and the queue grows without bound.
    name = f"steady <= {backlog:,}" if backlog else "steady, unbounded"
    rows = [f"{name}: done", f"{name}: offered", f"{name}: unfinished at end"]

    async def ours() -> str:
        result = await jobstream_workers.steady(
            admin_url, seconds=options.steady_s, warmup_s=1.0, producers=options.producers,
            batch=options.producer_batch, rate=options.steady_rate, backlog=backlog,
            concurrency=options.drain_concurrency, batch_api=http,
            processes=options.consumers,
        )  # fmt: skip
        for row, value in zip(rows, _steady_values(result), strict=True):
            table.add(row, "jobs" if "unfinished" in row else "jobs/s", JOBSTREAM, value)
        return str(result)

    async def theirs() -> str:
        result = await pgqueuer_side.steady(
            admin_url, seconds=options.steady_s, warmup_s=1.0, producers=options.producers,
            batch=options.producer_batch, rate=options.steady_rate, backlog=backlog,
            shape=options.pgq, processes=options.consumers,
        )  # fmt: skip
        for row, value in zip(rows, _steady_values(result), strict=True):
            table.add(row, "jobs" if "unfinished" in row else "jobs/s", PGQUEUER, value)
        return str(result)

    await _interleave(options, name, ours, theirs)
    table.print_rows(rows)


def _steady_values(result: Steady) -> list[float | None]:
    return [result.done_rate, result.offered_rate, float(result.backlog_end)]


async def enqueue(options: Options, admin_url: str, table: Table, batch_api: bool) -> None:
    k, requests = options.enqueue_callers, options.enqueue_requests
    print(
        f"\n(c) enqueue: {requests:,} single-job calls per caller count,"
        f" {options.batch_requests} calls of {options.batch_size:,} jobs"
    )
    http1, httpk = "enqueue, 1 caller (js: POST /api/jobs)", f"enqueue, {k} callers (js: POST)"
    lib1, libk = (
        "enqueue, 1 caller (js: creates.create)",
        f"enqueue, {k} callers (js: creates.create)",
    )
    p50, p99 = f"enqueue, {k} callers (js: POST): p50", f"enqueue, {k} callers (js: POST): p99"
    batch = f"enqueue, {options.batch_size:,} a call (js: POST batch)"
    keyed = f"enqueue, {options.batch_size:,} a call, keyed"
    rows = [http1, httpk, p50, p99, lib1, libk, batch, keyed]

    def record(side: str, figures: dict[str, float | None]) -> None:
        for row, value in figures.items():
            table.add(row, "ms" if row in (p50, p99) else "jobs/s", side, value)

    async def ours() -> str:
        web = await jobstream_calls.enqueue_http(
            admin_url, requests=requests, callers=k, batches=options.batch_requests,
            batch=options.batch_size, batch_api=batch_api,
        )  # fmt: skip
        direct = await jobstream_calls.enqueue_direct(admin_url, requests=requests, callers=k)
        many, batched, batched_keyed = web[f"http x{k}"], web["http batch"], web["http batch keyed"]
        assert many is not None
        record(JOBSTREAM, {
            http1: _rate(web["http x1"]), httpk: many.rate,
            p50: many.latency.p50 * 1000, p99: many.latency.p99 * 1000,
            lib1: direct["create x1"].rate, libk: direct[f"create x{k}"].rate,
            batch: _rate(batched), keyed: _rate(batched_keyed),
        })  # fmt: skip
        return (
            f"POST x1 {_rate(web['http x1']) or 0:,.0f}/s, POST x{k} {many.rate:,.0f}/s"
            f" ({many.latency}), batch {_fmt_rate(batched)}, keyed {_fmt_rate(batched_keyed)};"
            f" creates.create x1 {direct['create x1'].rate:,.0f}/s,"
            f" x{k} {direct[f'create x{k}'].rate:,.0f}/s"
        )

    async def theirs() -> str:
        got = await pgqueuer_side.enqueue(
            admin_url, requests=requests, callers=k, batches=options.batch_requests,
            batch=options.batch_size,
        )  # fmt: skip
        single, many = got["enqueue x1"], got[f"enqueue x{k}"]
        batched, batched_keyed = got["enqueue batch"], got["enqueue batch keyed"]
        record(PGQUEUER, {
            http1: single.rate, httpk: many.rate, p50: many.latency.p50 * 1000,
            p99: many.latency.p99 * 1000, lib1: single.rate, libk: many.rate,
            batch: batched.rate, keyed: batched_keyed.rate,
        })  # fmt: skip
        return (
            f"enqueue x1 {single.rate:,.0f}/s, x{k} {many.rate:,.0f}/s ({many.latency}),"
            f" batch {batched.rate:,.0f}/s, keyed {batched_keyed.rate:,.0f}/s"
        )

    await _interleave(options, "enqueue", ours, theirs)
    table.print_rows(rows)
    print("    (the pgqueuer column of the POST rows is its Queries.enqueue: it has no HTTP API)")
    print(
        "    (batch: no job has a key on either side; keyed: each jobstream item has an"
        " idempotency_key, each PgQueuer job a dedupe_key, on_conflict='skip')"
    )


def _rate(figure: Enqueued | None) -> float | None:
    return None if figure is None else figure.rate


def _fmt_rate(figure: Enqueued | None) -> str:
    return "n/a" if figure is None else f"{figure.rate:,.0f}/s"


async def claim(options: Options, admin_url: str, table: Table, _batch_api: bool) -> None:
    print(
        f"\n(d) claim latency: {options.claims} timed round trips per backlog and batch size"
        " (jobs taken are ended and replaced between calls)"
    )
    p50s: defaultdict[tuple[str, int, int], list[float]] = defaultdict(list)
    for max_jobs in (1, 32):
        for backlog in options.claim_backlogs:
            row = f"claim {max_jobs}, {backlog:,} queued"

            async def ours(backlog: int = backlog, max_jobs: int = max_jobs, row: str = row) -> str:
                label, latency = await jobstream_calls.claim_latency(
                    admin_url, backlog=backlog, max_jobs=max_jobs, claims=options.claims
                )
                _record(table, row, JOBSTREAM, latency, p50s[JOBSTREAM, max_jobs, backlog])
                return f"{label}: {latency}"

            async def theirs(
                backlog: int = backlog, max_jobs: int = max_jobs, row: str = row
            ) -> str:
                latency = await pgqueuer_side.dequeue_latency(
                    admin_url, backlog=backlog, batch_size=max_jobs, claims=options.claims
                )
                _record(table, row, PGQUEUER, latency, p50s[PGQUEUER, max_jobs, backlog])
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


def _record(table: Table, row: str, side: str, latency: Latency, p50s: list[float]) -> None:
    """A claim measurement's p50 and p99 rows, and its p50 kept for the backlog ratio."""
    table.add(f"{row}: p50", "ms", side, latency.p50 * 1000)
    table.add(f"{row}: p99", "ms", side, latency.p99 * 1000)
    p50s.append(latency.p50)


Section = Callable[[Options, str, Table, bool], Awaitable[None]]
# In the order they run; the keys are the names --only takes.
SECTIONS: dict[str, Section] = {
    "drain": drain,
    "steady": steady,
    "enqueue": enqueue,
    "claim": claim,
}
