"""Open SSE streams on one server process: the memory each costs, and whether the process still
answers quickly meanwhile.

    .venv/bin/python -m bench.bench_sse_streams     (or `make bench` for every benchmark)

10,000 streams follow 100 queued jobs (100 followers each: live subscriptions that wait, with
heartbeats every 15 s as by default). The server's RSS is read from /proc before and after they
open; /healthz is asked on a connection of its own all the while. Figures are printed, never
asserted. BENCH_SSE_STREAMS changes the count.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import time
import uuid
from pathlib import Path

import httpx

from bench.bench_stream import _database, _spawn, _stop, _until_up
from bench.postgres import durable_postgres
from jobstream import creates, db, logs
from jobstream.jobspec import JobSpec
from jobstream.ports import free_port

STREAMS = int(os.environ.get("BENCH_SSE_STREAMS", "10000"))
JOBS = 100
OPENING = 200  # connections being opened at once
HOLD_S = 20.0  # how long every stream stays open while /healthz is measured


def main() -> None:
    logs.configure("warning", json=False)
    _raise_open_files(STREAMS + 1000)
    with durable_postgres("jobstream-bench-") as admin_url:
        asyncio.run(_run(admin_url))


async def _run(admin_url: str) -> None:
    print("bench_sse_streams")
    async with _database(admin_url) as url:
        await open_streams(url, STREAMS)


async def open_streams(url: str, count: int) -> None:
    pool = await db.create_pool(url, min_size=1, max_size=2)
    try:
        spec = JobSpec(prompt="idle", provider="simulated", max_tokens=1)
        job_ids = [(await creates.create(pool, "default", spec, None)).job.id for _ in range(JOBS)]
    finally:
        await pool.close()
    port = free_port()
    server = _spawn(
        os.environ.get("BENCH_SERVER_MODULE", "server"),
        url,
        JOBSTREAM_PORT=str(port),
        JOBSTREAM_MAX_CONNECTIONS=str(count + 100),
        # Every stream is the `default` tenant's: its cap would be a quarter of them.
        JOBSTREAM_TENANT_MAX_STREAMS=str(count),
    )
    opened: list[asyncio.StreamWriter] = []
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            await _until_up(client)
        # Warm up: every code path of a stream has run once before the baseline.
        warm = await _open_all(port, job_ids, 200)
        await _close_all(warm)
        await asyncio.sleep(1)
        before = _rss_kib(server.pid)
        started = time.monotonic()
        opened = await _open_all(port, job_ids, count)
        took = time.monotonic() - started
        await asyncio.sleep(1)
        after = _rss_kib(server.pid)
        per_stream = (after - before) / count
        health = await asyncio.open_connection("127.0.0.1", port)
        delays = await _healthz_delays(health, HOLD_S)
        cuts = statistics.quantiles(delays, n=100)
        print(
            f"  {count:,} open SSE streams on one server process ({JOBS} live jobs, opened in"
            f" {took:.1f} s):\n"
            f"    server RSS {before / 1024:,.1f} MiB -> {after / 1024:,.1f} MiB:"
            f" {per_stream:,.1f} KiB a stream (target <= 20 KiB)\n"
            f"    /healthz over {HOLD_S:g} s with them open: {len(delays)} requests,"
            f" p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms,"
            f" max {max(delays) * 1000:.1f} ms (target p99 <= 50 ms)\n"
            f"    loadavg {_loadavg()}"
        )
        health[1].close()
    finally:
        await _close_all(opened)
        _stop(server)


async def _open_all(port: int, job_ids: list[uuid.UUID], count: int) -> list[asyncio.StreamWriter]:
    """`count` streams, each open once its `retry:` field has arrived (it is subscribed)."""
    gate = asyncio.Semaphore(OPENING)

    async def one(n: int) -> asyncio.StreamWriter:
        async with gate:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            path = f"/api/jobs/{job_ids[n % len(job_ids)]}/events"
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"stream {n}: {head[:60]!r}")
            await reader.readuntil(b"retry:")
            return writer

    return list(await asyncio.gather(*(one(n) for n in range(count))))


async def _close_all(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.close()
    await asyncio.sleep(0.5)


async def _healthz_delays(
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter], seconds: float
) -> list[float]:
    reader, writer = connection
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    delays = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        delays.append(time.perf_counter() - started)
        await asyncio.sleep(0.02)
    return delays


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _raise_open_files(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(wanted, soft)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


if __name__ == "__main__":
    main()
