"""CPU per created job: the server process and its PostgreSQL backends, beside the wall clock.

    .venv/bin/python -m bench.create_cost [--rounds 3] [--single 2000] [--batches 10]
    DATABASE_URL=postgresql://.../postgres .venv/bin/python -m bench.create_cost --statements

On a shared 2-core machine the rates of bench.queue_side_by_side swing with whatever else runs;
the CPU each job costs swings far less. Each round starts one `python -m server` on a fresh
database and times POST /api/jobs from 32 keep-alive connections, then POST /api/jobs/batch of
1,000 jobs from one, first without keys, then with a key on each item; each phase reports the
server's user + system time per job and that of its pool's backends (both from
/proc/<pid>/stat, so PostgreSQL must run on this machine), with the rate beside them.
`--profile DIR` runs py-spy on the server during each phase (raw folded stacks);
`--statements` prints each round's statements from pg_stat_statements, where loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from bench import http_load, jobstream_calls, jobstream_side
from bench import queue_common as common
from bench.postgres import durable_postgres
from jobstream import migrations

CALLERS = 32
BATCH = 1000
TICKS = os.sysconf("SC_CLK_TCK")
DATABASE = "create_cost_bench"
PY_SPY = Path(sys.executable).parent / "py-spy"

# Server µs/job, database µs/job, jobs/s.
Figure = tuple[float, float, float]


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_total(pids: list[int]) -> float:
    """cpu_s summed over processes; one that has gone counts nothing."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):  # a backend that has gone
            total += cpu_s(pid)
    return total


async def _backends(conn: asyncpg.Connection) -> list[int]:
    rows = await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        DATABASE,
    )
    return [r["pid"] for r in rows]


async def _phase(
    name: str,
    server_pid: int,
    conn: asyncpg.Connection,
    work: Callable[[], Awaitable[int]],
    profile: Path | None,
) -> Figure:
    pids = await _backends(conn)
    spy = None
    if profile is not None:
        out = profile / f"{name.replace(', ', '-').replace(' ', '-')}-{uuid.uuid4().hex[:6]}.raw"
        spy = await asyncio.create_subprocess_exec(
            str(PY_SPY), "record", "-r", "200", "-f", "raw", "-o", str(out),
            "--pid", str(server_pid),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await asyncio.sleep(1)  # py-spy attaches
    server_before, db_before = cpu_s(server_pid), cpu_total(pids)
    loop = asyncio.get_running_loop()
    started = loop.time()
    jobs = await work()
    wall = loop.time() - started
    server_s, db_s = cpu_s(server_pid) - server_before, cpu_total(pids) - db_before
    if spy is not None:
        spy.send_signal(2)
        await spy.wait()
    return 1e6 * server_s / jobs, 1e6 * db_s / jobs, jobs / wall


async def one_round(
    admin_url: str, single: int, batches: int, profile: Path | None, statements: bool
) -> dict[str, Figure]:
    url = await _prepare(admin_url)
    await common.settle(url)
    conn = await common.connect(url)
    figures: dict[str, Figure] = {}
    try:
        async with jobstream_side.server(url) as base:
            pid = await _server_pid(base)
            connections = [await http_load.Connection.open(base) for _ in range(CALLERS)]
            try:
                await jobstream_calls.post_each(connections, 4 * CALLERS)  # warm the pool

                async def singles() -> int:
                    await jobstream_calls.post_each(connections, single)
                    return single

                figures[f"POST x{CALLERS}"] = await _phase("single", pid, conn, singles, profile)
            finally:
                for connection in connections:
                    await connection.close()
            connection = await http_load.Connection.open(base)
            try:
                await _post_batch(connection, keyed=True)  # warm up
                for keyed in (False, True):

                    async def batch(keyed: bool = keyed) -> int:
                        for _ in range(batches):
                            await _post_batch(connection, keyed=keyed)
                        return BATCH * batches

                    name = f"batch {BATCH}{', keyed' if keyed else ''}"
                    figures[name] = await _phase(name, pid, conn, batch, profile)
            finally:
                await connection.close()
        if statements:
            await _print_statements(conn)
    finally:
        await conn.close()
    return figures


async def _prepare(admin_url: str) -> str:
    url = await common.recreate_database(admin_url, DATABASE)
    conn = await common.connect(url)
    try:
        await migrations.apply_schema(conn)
    finally:
        await conn.close()
    return url


async def _post_batch(connection: http_load.Connection, *, keyed: bool) -> None:
    items = [
        {**jobstream_side.BODY, "idempotency_key": f"bench-{uuid.uuid4()}"}
        if keyed
        else jobstream_side.BODY
        for _ in range(BATCH)
    ]
    status, answer = await connection.post_json(jobstream_side.BATCH_PATH, {"jobs": items})
    if status != 200 or b'"type"' in answer:  # an item refused has a problem's type
        raise RuntimeError(f"batch: {status} {answer[:300]!r}")


async def _server_pid(base: str) -> int:
    """The pid of the process listening on `base`'s port."""
    port = base.rsplit(":", 1)[1]
    ss = await asyncio.create_subprocess_exec(
        "ss", "-Htlnp", f"sport = :{port}", stdout=asyncio.subprocess.PIPE
    )
    out, _ = await ss.communicate()
    return int(out.decode().split("pid=")[1].split(",")[0])


async def _print_statements(conn: asyncpg.Connection) -> None:
    """The round's most frequent statements (pg_stat_statements, when the server loads it)."""
    await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    rows = await conn.fetch(
        "SELECT calls, total_exec_time, mean_exec_time, rows, left(regexp_replace(query,"
        " '\\s+', ' ', 'g'), 90) AS query FROM pg_stat_statements s JOIN pg_database d"
        " ON d.oid = s.dbid WHERE d.datname = $1 ORDER BY calls DESC LIMIT 8",
        DATABASE,
    )
    for r in rows:
        print(
            f"  {r['calls']:7} calls {r['total_exec_time']:9.1f} ms"
            f" {r['mean_exec_time']:8.3f} ms/call {r['rows']:8} rows  {r['query']}"
        )


def _line(name: str, figure: Figure) -> str:
    server, db, rate = figure
    return f"{name:10}  server {server:7.1f} µs/job  db {db:7.1f} µs/job  {rate:8,.0f} jobs/s"


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", type=int, default=2000, help="POST /api/jobs a round")
    parser.add_argument("--batches", type=int, default=10, help="batches of 1,000 a round")
    parser.add_argument("--profile", type=Path, help="py-spy's raw stacks go here")
    parser.add_argument("--statements", action="store_true", help="print pg_stat_statements")
    args = parser.parse_args()
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[Figure]] = {}
    with durable_postgres("create-cost-") as admin_url:
        try:
            for n in range(args.rounds):
                figures = await one_round(
                    admin_url, args.single, args.batches, args.profile, args.statements
                )
                for name, figure in figures.items():
                    results.setdefault(name, []).append(figure)
                    print(f"round {n + 1} {_line(name, figure)}", flush=True)
        finally:
            await common.drop_database(admin_url, DATABASE)
    print("\nmedian of rounds")
    for name, rounds in results.items():
        server, db, rate = (statistics.median(f[i] for f in rounds) for i in range(3))
        print(_line(name, (server, db, rate)))


if __name__ == "__main__":
    asyncio.run(main())
