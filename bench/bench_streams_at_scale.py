"""Issue 11's figures, each beside what this PostgreSQL allows, measured in the same run:

1. one worker process streaming at full speed, tokens/s, against a plain asyncpg loop inserting
   rows of a token event's size into the same PostgreSQL (one row per token, 1,000 rows a
   statement and a commit: the ceiling);
2. many concurrent streams at 50 tokens/s, one SSE follower each (worker, server, followers and
   PostgreSQL on this machine): every follower's text exact, delta -> SSE delay (split at the
   start of the statement that wrote the delta's token event: the worker's share, coalescing
   and waiting for its write, then the write, the NOTIFY, the server and the client), and the
   WAL commit records a second (pg_walinspect: writing commits only; read-only transactions write
   none), against what one connection committing in a loop does.

    .venv/bin/python -m bench.bench_streams_at_scale     (or `make bench` for every benchmark)

BENCH_SCALE_STREAMS (default 50,200,1000) lists the stream counts of (2), each run in turn;
BENCH_SCALE_WORKERS (default 1) the worker processes that share them; BENCH_SCALE_REPEATS
(default 1) how many times the whole is run over, with min / median / max at the end (this
machine's run-to-run spread is wide: p50 66-110 ms at 1,000 streams for one commit).
Figures are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import uvloop

from bench.bench_sse_streams import _loadavg, _raise_open_files
from bench.bench_stream import _database, _spawn, _stop, _until_up, throughput
from bench.create_cost import cpu_total
from bench.postgres import durable_postgres
from bench.sse_follower import SseFollower
from jobstream import creates, db, heap, logs
from jobstream.jobspec import JobSpec
from jobstream.ports import free_port

RATE = 50.0  # tokens/s of each stream in (2)
TOKENS = 300  # of each stream in (2): six seconds
CEILING_S = 5.0
CEILING_BATCH = 1000
TOKEN_TEXT = "1234 "  # a token of the count pattern, as the worker's rows hold them


def main() -> None:
    logs.configure("warning", json=False)
    counts = [int(n) for n in os.environ.get("BENCH_SCALE_STREAMS", "50,200,1000").split(",")]
    workers = int(os.environ.get("BENCH_SCALE_WORKERS", "1"))
    repeats = int(os.environ.get("BENCH_SCALE_REPEATS", "1"))
    _raise_open_files(max(counts) * 2 + 1000)
    # The followers' heap as the server's and worker's (jobstream/heap.py): a full collection
    # of this process would hold back the arrivals it notes, a delay of the benchmark's own.
    heap.freeze_startup_objects()
    heap.defer_young_collections(heap.YOUNG_THRESHOLD)
    with durable_postgres("jobstream-bench-") as admin_url:
        # uvloop, as the worker and server run: the followers' own cost is the machine's too.
        uvloop.run(_run(admin_url, counts, workers, repeats))


async def _run(admin_url: str, counts: list[int], workers: int, repeats: int) -> None:
    print("bench_streams_at_scale")
    figures: dict[str, list[float]] = {}
    for repeat in range(repeats):
        if repeats > 1:
            print(f" run {repeat + 1} of {repeats}")
        for name, value in (await _one_run(admin_url, counts, workers)).items():
            figures.setdefault(name, []).append(value)
    if repeats > 1:
        print(f"  min / median / max of {repeats} runs:")
        for name, values in figures.items():
            shown = [min(values), statistics.median(values), max(values)]
            digits = 2 if shown[-1] < 10 else 1  # a ratio to the ceiling, or ms, µs, counts
            print(f"    {name}: " + " / ".join(f"{v:,.{digits}f}" for v in shown))


async def _one_run(admin_url: str, counts: list[int], workers: int) -> dict[str, float]:
    """(1), then (2) for each count; the figures that the summary of repeated runs shows."""
    async with _database(admin_url) as url:
        ceiling = await insert_ceiling(url)
    async with _database(admin_url) as url:
        simulate_what = "8 streams at full speed"
        deltas = await throughput(url, jobs=8, tokens=20_000, rate=0, what=simulate_what)
    print(
        f"  (1) one worker process at full speed: {deltas:,.0f} tokens/s; plain asyncpg loop,"
        f" one row per token: {ceiling:,.0f} rows/s -> {deltas / ceiling:.2f} of the ceiling"
        f" (target >= 200,000 tokens/s or >= 0.30)\n      loadavg {_loadavg()}"
    )
    figures = {"(1) tokens/s": deltas, "(1) of the ceiling": deltas / ceiling}
    for count in counts:
        async with _database(admin_url) as url:
            commit_ceiling = await commit_loop_ceiling(url)
            figures |= await many_streams(url, count, commit_ceiling, workers)
    return figures


async def insert_ceiling(url: str) -> float:
    """Rows/s of a plain asyncpg loop writing token-sized rows to a job_events-shaped table."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE bench_ceiling (LIKE job_events INCLUDING DEFAULTS INCLUDING INDEXES)"
        )
        insert = (
            "INSERT INTO bench_ceiling (job_id, seq, attempt, type, data)"
            " SELECT $1, s, 1, 'token', jsonb_build_object('text', $3::text)"
            " FROM generate_series($2::bigint, $2::bigint + $4 - 1) AS s"
        )
        job_ids = [uuid.uuid4() for _ in range(8)]
        rows, seq = 0, 1
        started = time.perf_counter()
        while time.perf_counter() - started < CEILING_S:
            await conn.execute(insert, job_ids[seq % 8], seq, TOKEN_TEXT, CEILING_BATCH)
            rows += CEILING_BATCH
            seq += CEILING_BATCH
        return rows / (time.perf_counter() - started)
    finally:
        await conn.close()


async def commit_loop_ceiling(url: str) -> float:
    """Commits/s of one connection inserting one row a transaction, with a NOTIFY each."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TABLE bench_commits (n bigint)")
        commits = 0
        started = time.perf_counter()
        while time.perf_counter() - started < 2.0:
            await conn.execute(
                "WITH i AS (INSERT INTO bench_commits VALUES (1)) SELECT pg_notify('bench', '')"
            )
            commits += 1
        return commits / (time.perf_counter() - started)
    finally:
        await conn.close()


async def many_streams(
    url: str, count: int, commit_ceiling: float, workers: int = 1
) -> dict[str, float]:
    """`count` jobs at RATE tokens/s, each followed by one SSE client from its first event,
    run by `workers` worker processes (each takes at most its share). Prints its figures and
    returns the main ones."""
    pool = await db.create_pool(url, min_size=1, max_size=4)
    port = free_port()
    # Every follower is the `default` tenant's, whose cap is a quarter of the connections.
    server = _spawn(
        "server", url, JOBSTREAM_PORT=str(port), JOBSTREAM_TENANT_MAX_STREAMS=str(count)
    )
    running: list[subprocess.Popen[bytes]] = []
    arrived: dict[str, list[tuple[str, float, float, str]]] = {}
    try:
        await pool.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        simulate = {"tokens": TOKENS, "pattern": "count", "tokens_per_second": RATE,
                    "first_token_delay_s": 0}  # fmt: skip
        job_ids = []
        for n in range(count):
            spec = JobSpec(
                prompt=f"scale {n}", provider="simulated", max_tokens=TOKENS, simulate=simulate
            )
            job_ids.append(str((await creates.create(pool, "default", spec, None)).job.id))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await _until_up(client)
        first = asyncio.Event()  # a follower has read its first token
        followers = [SseFollower(port, job_id, first) for job_id in job_ids]
        gate = asyncio.Semaphore(100)
        await asyncio.gather(*(f.open(gate) for f in followers))
        reading = [asyncio.create_task(f.read()) for f in followers]
        with tempfile.TemporaryDirectory() as sent_dir:
            sent_paths = [Path(sent_dir) / f"sent-{n}.tsv" for n in range(workers)]
            lsn_before = await pool.fetchval("SELECT pg_current_wal_insert_lsn()")
            commits_before = await _xact_commits(pool)
            running = [
                _spawn(
                    "bench.timed_worker",
                    url,
                    BENCH_SENT_PATH=str(path),
                    JOBSTREAM_WORKER_CONCURRENCY=str(-(-count // workers)),
                )
                for path in sent_paths
            ]
            started = time.monotonic()
            done = asyncio.gather(*reading)
            # CPU from the first token on: the worker's start (its imports) is not the streams'.
            firsts = asyncio.ensure_future(first.wait())
            either: list[asyncio.Future[Any]] = [firsts, done]
            await asyncio.wait(either, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            firsts.cancel()
            cpu = _Cpu([w.pid for w in running], server.pid)
            await asyncio.wait_for(done, 120 + TOKENS / RATE * 4)
            spent = cpu.spent()
            seconds = time.monotonic() - started
            lsn_after = await pool.fetchval("SELECT pg_current_wal_insert_lsn()")
            commits_after = await _xact_commits(pool)
            wal_commits = await pool.fetchval(
                "SELECT count(*) FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)"
                " WHERE resource_manager = 'Transaction' AND record_type LIKE 'COMMIT%'",
                lsn_before,
                lsn_after,
            )
            while running:
                _stop(running.pop())
            sent = {}
            for path in sent_paths:
                for line in path.read_text().splitlines():
                    prompt, text, at = line.split("\t")
                    sent[(prompt, text)] = float(at)
    finally:
        for worker in running:
            _stop(worker)
        _stop(server)
        await pool.close()
    for n, follower in enumerate(followers):
        follower.parse()
        arrived[f"scale {n}"] = follower.arrivals
    exact = sum(f.exact for f in followers)
    # A token event's `at` is its write's statement start on PostgreSQL's clock, this host's
    # wall clock; the follower notes the wall clock too when the event arrives, so the write ->
    # SSE part is read on one clock. The deltas' times are CLOCK_MONOTONIC, and so is the whole.
    # (The wall clock is slewed here, 5 ms a second against CLOCK_MONOTONIC: mapped across a
    # run, one onto the other, the split moved by 25 ms between runs.)
    timed = [
        (at - sent[(prompt, text)], wall_at - datetime.fromisoformat(written).timestamp())
        for prompt, items in arrived.items()
        for text, at, wall_at, written in items
        if (prompt, text) in sent
    ]
    delays = [whole for whole, _ in timed]
    cuts = _percentiles(delays)
    to_write = _percentiles([whole - after for whole, after in timed])
    from_write = _percentiles([after for _, after in timed])
    # What the provider side managed: a worker process short of CPU falls behind the streams'
    # own pace, and every delay above is measured from when a delta was produced.
    produced_s = max(sent.values(), default=0.0) - min(sent.values(), default=0.0)
    produced = len(sent) / produced_s if produced_s > 0 else float("nan")
    print(
        f"  (2) {count:,} streams at {RATE:g} tokens/s ({TOKENS} tokens each), one SSE follower"
        f" each, {_processes(workers, 'worker')}, one server process:\n"
        f"      {exact:,}/{count:,} followers' text exact; {len(delays):,} deltas timed in"
        f" {seconds:.1f} s; the streams produced {produced:,.0f} deltas/s of the"
        f" {count * RATE:,.0f}/s asked\n"
        f"      delta -> SSE p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms,"
        f" max {max(delays, default=float('nan')) * 1000:.1f} ms (targets <= 60 / <= 150 ms)\n"
        f"        delta -> its write's start p50 {to_write[49] * 1000:.1f} ms, p99"
        f" {to_write[98] * 1000:.1f} ms; write's start -> SSE p50 {from_write[49] * 1000:.1f} ms,"
        f" p99 {from_write[98] * 1000:.1f} ms\n"
        f"      CPU a delta: {spent.per(len(delays))}\n"
        f"      WAL commit records {wal_commits / seconds / workers:,.0f}/s a worker process"
        f" (target < 100/s; xact_commit, read-only included,"
        f" {(commits_after - commits_before) / seconds:,.0f}/s); one connection committing"
        f" in a loop with a NOTIFY each: {commit_ceiling:,.0f} commits/s\n"
        f"      loadavg {_loadavg()}"
    )
    return {
        f"(2) {count:,} streams: followers exact": exact,
        f"(2) {count:,} streams: delta -> SSE p50 ms": cuts[49] * 1000,
        f"(2) {count:,} streams: delta -> SSE p99 ms": cuts[98] * 1000,
        f"(2) {count:,} streams: CPU a delta µs": spent.total_per(len(delays)),
        f"(2) {count:,} streams: WAL commits/s a worker": wal_commits / seconds / workers,
    }


class _Cpu:
    """CPU time of the processes of a run from now on: worker(s), server, PostgreSQL (every
    postgres process: the benchmark's cluster is the machine's only one), and the followers
    (this process)."""

    def __init__(self, workers: list[int], server: int) -> None:
        self._pids = {"worker": workers, "server": [server]}
        self._before = self._now()

    def spent(self) -> _Spent:
        after = self._now()
        return _Spent({name: after[name] - self._before[name] for name in after})

    def _now(self) -> dict[str, float]:
        postgres = [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "postgres"]
        return {
            **{name: cpu_total(pids) for name, pids in self._pids.items()},
            "PostgreSQL": cpu_total(postgres),
            "followers": time.process_time(),
        }


class _Spent:
    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds

    def per(self, deltas: int) -> str:
        parts = [f"{name} {s / deltas * 1e6:.1f} µs" for name, s in self.seconds.items()]
        return ", ".join(parts) + f" (all {self.total_per(deltas):.1f} µs)"

    def total_per(self, deltas: int) -> float:
        """µs of CPU a delta, every process together."""
        return sum(self.seconds.values()) / deltas * 1e6


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # gone meanwhile
        return ""


def _processes(n: int, what: str) -> str:
    return f"one {what} process" if n == 1 else f"{n} {what} processes"


def _percentiles(values: list[float]) -> list[float]:
    return statistics.quantiles(values, n=100) if len(values) > 1 else [float("nan")] * 99


async def _xact_commits(pool: asyncpg.Pool) -> int:
    value: int = await pool.fetchval(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    )
    return value


if __name__ == "__main__":
    main()
