"""What both sides of bench.queue_side_by_side share: child processes, databases, percentiles."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.cpu_meter import CpuSplit
from jobstream import db

ROOT = Path(__file__).resolve().parent.parent
# The benchmark's own connections carry this name, so that counting a database's other
# connections tells whether the workers under test have connected.
APPLICATION = "queue_bench"
POLL_S = 0.25
# A database's direct URL to the same database's through PgBouncer (bench/queue_via_pgbouncer.py).
Pooler = Callable[[str], str]


# --- child processes ---


async def spawn(
    module: str, *args: str, env: dict[str, str], pipes: bool = False
) -> asyncio.subprocess.Process:
    """`python -m module args` from the repository root; `pipes` gives it our stdin/stdout."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    # A benchmark measures how fast the server creates, not the default per-tenant create rate
    # that guards one tenant's neighbours (server/create_rate.py).
    child_env |= {"JOBSTREAM_TENANT_CREATE_RATE": "0", **env}
    pipe = asyncio.subprocess.PIPE if pipes else None
    module = {"server": "jobstream.server", "worker": "jobstream.worker"}.get(module, module)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, cwd=ROOT, env=child_env, stdin=pipe, stdout=pipe
    )


async def stop(process: asyncio.subprocess.Process, timeout_s: float = 15) -> None:
    if process.returncode is not None:
        return
    if process.stdin is not None:
        process.stdin.close()  # a runner still waiting for its start line sees EOF
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def stop_all(processes: Sequence[asyncio.subprocess.Process]) -> None:
    # Shielded: the finally blocks that call this must not leave children behind when the
    # benchmark itself is being cancelled (Ctrl-C).
    await asyncio.shield(asyncio.gather(*(stop(p) for p in processes)))


# --- databases ---


def database_url(admin_url: str, name: str) -> str:
    return urlunsplit(urlsplit(admin_url)._replace(path="/" + name))


async def _administer(admin_url: str, *statements: str) -> None:
    """Each statement in turn, on a connection of its own to the server's admin database."""
    admin = await asyncpg.connect(admin_url)
    try:
        for statement in statements:
            await admin.execute(statement)
    finally:
        await admin.close()


async def recreate_database(admin_url: str, name: str) -> str:
    """An empty database `name`, dropped first if it exists: every repeat starts alike."""
    await _administer(
        admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"'
    )
    return database_url(admin_url, name)


async def drop_database(admin_url: str, name: str) -> None:
    await _administer(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def autovacuum_off(conn: asyncpg.Connection) -> None:
    """No autovacuum on the database's tables: bench.queue_wal's meter reads every record
    written between a batch's two readings, and a vacuum's would land among them."""
    for table in await conn.fetch("SELECT relname FROM pg_stat_user_tables"):
        await conn.execute(f'ALTER TABLE "{table["relname"]}" SET (autovacuum_enabled = false)')


def database_env(url: str, pooled_url: str | None) -> dict[str, str]:
    """A jobstream process's database settings: `url` alone, or the pool through PgBouncer's
    `pooled_url` and the sessions direct on `url`."""
    if pooled_url is None:
        return {"DATABASE_URL": url}
    return {"DATABASE_URL": pooled_url, "JOBSTREAM_DIRECT_DATABASE_URL": url}


async def connect(url: str, *, json_codecs: bool = True) -> asyncpg.Connection:
    """A connection of the benchmark's own. `json_codecs`: jobstream's (orjson both ways);
    PgQueuer's connections need asyncpg's default (it sends its jsonb as text)."""
    conn = await asyncpg.connect(url, server_settings={"application_name": APPLICATION})
    if json_codecs:
        await db.init_connection(conn)
    return conn


async def create_pool(
    url: str, size: int, *, json_codecs: bool = True, pooler: bool = False
) -> asyncpg.Pool:
    """A pool of the benchmark's own. `json_codecs`: jobstream's side, which gets the pool
    jobstream's processes use (db.create_pool: no reset statements on release); else asyncpg's
    default, as PgQueuer's documentation makes it (RESET ALL and friends at every release).
    `pooler`: `url` is PgBouncer's (no statement cache, as the processes' pools through it)."""
    if json_codecs:
        return await db.create_pool(
            url, min_size=size, max_size=size, application_name=APPLICATION, pooler=pooler
        )
    pool = await asyncpg.create_pool(
        url, min_size=size, max_size=size, server_settings={"application_name": APPLICATION}
    )
    assert pool is not None
    return pool


async def settle(url: str) -> None:
    """Write out dirty pages now, so that no checkpoint lands in one side's measurement only."""
    conn = await connect(url)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def wait_for_clients(conn: asyncpg.Connection, count: int, timeout_s: float = 60) -> None:
    """Until `count` connections other than the benchmark's are open on this database."""
    deadline = time.monotonic() + timeout_s
    while True:
        open_now = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name <> $1",
            APPLICATION,
        )
        if open_now >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{open_now}/{count} client connections after {timeout_s} s")
        await asyncio.sleep(POLL_S)


async def poll_until_zero(
    count: Callable[[], Awaitable[int]], what: str, *, timeout_s: float, alive: Callable[[], None]
) -> None:
    """Poll `count` every POLL_S until it reads 0; `alive` raises if a child has died."""
    deadline = time.monotonic() + timeout_s
    while await count():
        alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done after {timeout_s:g} s")
        await asyncio.sleep(POLL_S)


def check_alive(processes: Sequence[asyncio.subprocess.Process]) -> Callable[[], None]:
    def alive() -> None:
        for process in processes:
            if process.returncode is not None:
                raise RuntimeError(f"child process exited early with {process.returncode}")

    return alive


# --- figures ---


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1), linear between the closest ranks."""
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=1000, method="inclusive")
    index = round(q * 1000) - 1
    return values[0] if index < 0 else cuts[min(index, len(cuts) - 1)]


@dataclass(frozen=True)
class Latency:
    """Seconds per call: p50, p99, max."""

    p50: float
    p99: float
    max: float
    count: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ordered = sorted(seconds)
        return cls(quantile(ordered, 0.5), quantile(ordered, 0.99), ordered[-1], len(ordered))

    def __str__(self) -> str:
        return (
            f"p50 {self.p50 * 1000:.2f} ms, p99 {self.p99 * 1000:.2f} ms,"
            f" max {self.max * 1000:.2f} ms ({self.count:,} calls)"
        )


@dataclass(frozen=True)
class Drained:
    jobs: int
    seconds: float  # first job started -> last job finished, by the database's clock
    wal_flushes: int | None  # WAL fsyncs in the cluster meanwhile; None before PostgreSQL 18
    cpu: CpuSplit | None = None  # from the consumers' start to the last job's end; None: no /proc

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def cpu_per_job_us(self) -> tuple[float, float] | None:
        """CPU a job in µs: PostgreSQL's processes, the consumers'."""
        return None if self.cpu is None else self.cpu.per_job_us(self.jobs)

    def __str__(self) -> str:
        text = f"{self.rate:8,.0f} jobs/s ({self.seconds:.2f} s"
        if self.wal_flushes is not None:
            text += f", {self.wal_flushes / self.jobs:.2f} WAL flushes a job"
        cpu = self.cpu_per_job_us()
        if cpu is not None:
            text += f"; CPU a job: PostgreSQL {cpu[0]:.0f} µs, consumers {cpu[1]:.0f} µs"
        return text + ")"


async def wal_flushes(conn: asyncpg.Connection) -> int | None:
    """WAL fsyncs so far, every process of the cluster: with fsync on, a commit's cost."""
    try:
        count = await conn.fetchval(
            "SELECT sum(fsyncs)::bigint FROM pg_stat_io WHERE object = 'wal'"
        )
    except asyncpg.PostgresError:  # pg_stat_io counts WAL from PostgreSQL 18 on
        return None
    return None if count is None else int(count)


def since(now: int | None, before: int | None) -> int | None:
    return None if now is None or before is None else now - before


@dataclass(frozen=True)
class Steady:
    seconds: float
    offered: int  # jobs enqueued inside the window
    done: int  # jobs finished inside the window
    backlog_start: int  # jobs not yet finished when the window opened
    backlog_end: int  # ... and when it closed

    @property
    def offered_rate(self) -> float:
        return self.offered / self.seconds

    @property
    def done_rate(self) -> float:
        return self.done / self.seconds

    def __str__(self) -> str:
        return (
            f"offered {self.offered_rate:,.0f} jobs/s, done {self.done_rate:,.0f} jobs/s,"
            f" unfinished {self.backlog_start:,} -> {self.backlog_end:,}"
        )


@dataclass(frozen=True)
class Enqueued:
    jobs: int
    seconds: float
    latency: Latency  # per call (one request, or one enqueue call)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


async def timed_calls(
    call: Callable[[int], Awaitable[int]], *, callers: int, calls: int
) -> Enqueued:
    """`calls` calls spread over `callers` concurrent loops; `call(caller)` returns the jobs it
    enqueued. The wall time covers every call, the latencies each one."""
    latencies: list[float] = []
    jobs = 0
    share = [calls // callers + (1 if n < calls % callers else 0) for n in range(callers)]

    async def loop(caller: int, n: int) -> None:
        nonlocal jobs
        for _ in range(n):
            started = time.perf_counter()
            got = await call(caller)  # not `jobs += await ...`: that reads `jobs` before awaiting
            latencies.append(time.perf_counter() - started)
            jobs += got

    started = time.perf_counter()
    await asyncio.gather(*(loop(caller, n) for caller, n in enumerate(share)))
    return Enqueued(jobs, time.perf_counter() - started, Latency.of(latencies))


Snapshot = tuple[datetime, int]  # the database's clock, jobs not finished yet


async def produce_during(
    produce: Callable[[int], Awaitable[int]],
    *,
    producers: int,
    rate: float,
    backlog: int,
    warmup_s: float,
    seconds: float,
    snapshot: Callable[[], Awaitable[Snapshot]],
    alive: Callable[[], None],
) -> tuple[Snapshot, Snapshot]:
    """Run `producers` loops of `produce(producer)` (returns the jobs it enqueued), paced to
    `rate` jobs/s in all (0: as fast as they can) and, if `backlog`, held while that many jobs
    are unfinished; snapshot the queue at the start and the end of a window of `seconds` that
    opens `warmup_s` after they start."""
    stopping = asyncio.Event()
    room = asyncio.Event()
    room.set()
    lock = asyncio.Lock()  # one snapshot at a time: they share a connection

    async def look() -> Snapshot:
        async with lock:
            return await snapshot()

    async def gate() -> None:
        # A steady state: the producers offer what the consumers take, the queue stays near
        # `backlog` (overshooting by at most a batch a producer between looks).
        while not stopping.is_set():
            _, left = await look()
            if left < backlog:
                room.set()
            else:
                room.clear()
            await asyncio.sleep(BACKLOG_POLL_S)

    async def producer(n: int) -> None:
        pacer = Pacer(rate / producers)
        while not stopping.is_set():
            await room.wait()
            await pacer.wait(await produce(n))

    tasks = [asyncio.create_task(producer(n)) for n in range(producers)]
    if backlog:
        tasks.append(asyncio.create_task(gate()))
    try:
        await _watch(tasks, warmup_s, alive)
        start = await look()
        await _watch(tasks, seconds, alive)
        end = await look()
    finally:
        stopping.set()
        room.set()
        await asyncio.shield(asyncio.gather(*tasks, return_exceptions=True))
    for task in tasks:
        if (error := task.exception()) is not None:
            raise error
    return start, end


# How often a bounded steady state counts the unfinished jobs (a count of at most a few
# thousand index entries, the same statement shape on both sides).
BACKLOG_POLL_S = 0.05


async def _watch(
    tasks: list[asyncio.Task[None]], seconds: float, alive: Callable[[], None]
) -> None:
    """Sleep `seconds`, but fail as soon as a producer or a child process has."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        done, _ = await asyncio.wait(tasks, timeout=min(left, 0.5))
        for task in done:
            task.result()  # raises the producer's error
        if done:
            raise RuntimeError("a producer stopped early")
        alive()


class Pacer:
    """Spaces one producer's batches to `rate` jobs/s; rate 0 means as fast as possible."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._due = time.monotonic()

    async def wait(self, jobs: int) -> None:
        if self._rate <= 0:
            return
        self._due += jobs / self._rate
        delay = self._due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
