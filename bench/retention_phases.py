"""What part 2 of bench_retention measures on the history: /metrics scrapes, the worker's hot
path (claim and token appends), and the janitor's batches."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from decimal import Decimal

import asyncpg
import httpx

from bench.queue_common import Latency
from bench.retention_seed import CLOCK, PROVIDER
from bench.server_process import server_process
from jobstream import attempts, claims, retention, token_appends
from jobstream.attempts import Success
from jobstream.settings import Settings
from jobstream.usage import Usage
from jobstream.worker import janitor as janitors

SCRAPES = 300


@asynccontextmanager
async def server(url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A server process on the history's database, and a client of it."""
    async with (
        server_process(url, pool_max=4) as base,
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        yield client


async def scrapes(client: httpx.AsyncClient, n: int = SCRAPES) -> Latency:
    await client.get("/metrics")  # the server's pool and plans warm
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        response = await client.get("/metrics")
        times.append(time.perf_counter() - t0)
        assert response.status_code == 200
    return Latency.of(times)


@dataclass
class JanitorStats:
    """The janitor's batches that found work: (seconds, jobs, rows) each."""

    settles: list[tuple[float, int, int]] = field(default_factory=list)
    deletes: list[tuple[float, int, int]] = field(default_factory=list)


async def janitor_loop(pool: asyncpg.Pool, settings: Settings, stats: JanitorStats) -> None:
    """worker/janitor.py's round, batch by batch, timed; until cancelled."""
    async with pool.acquire() as conn:
        while True:
            t0 = time.monotonic()
            async with janitors.unhurried(conn):
                batch = await retention.settle(
                    conn, CLOCK, compact_after_s=settings.compact_after_s,
                    retention_s=settings.retention_s, limit=settings.janitor_batch,
                )  # fmt: skip
            if batch.jobs:
                stats.settles.append((time.monotonic() - t0, batch.jobs, batch.rows))
            await janitors.pace(time.monotonic() - t0, settings.janitor_duty)
            t0 = time.monotonic()
            async with janitors.unhurried(conn):
                gone = await retention.delete_expired(
                    conn, CLOCK, limit=settings.janitor_batch, tombstones=True
                )
            if gone.jobs:
                stats.deletes.append((time.monotonic() - t0, gone.jobs, gone.rows))
            await janitors.pace(time.monotonic() - t0, settings.janitor_duty)
            if batch.jobs == 0 and gone.jobs == 0:
                await asyncio.sleep(settings.janitor_interval_s)


@dataclass
class Phase:
    claims: list[float] = field(default_factory=list)
    appends: list[float] = field(default_factory=list)


async def hot_path(pool: asyncpg.Pool, phase: Phase, calls: int) -> None:
    """Claim one job, append three token chunks, accept it: the claim and appends timed."""
    usage = Usage(input_tokens=3, output_tokens=3, cost_usd=Decimal("0.00001"))
    for _ in range(calls):
        t0 = time.perf_counter()
        held = await claims.claim(
            pool, providers=[PROVIDER], worker_id="bench", lease_s=60, clock=CLOCK
        )
        phase.claims.append(time.perf_counter() - t0)
        assert held is not None, "the queue ran dry"
        at = 0
        for chunk in ("0 ", "1 ", "2 "):
            t0 = time.perf_counter()
            await token_appends.append_tokens(pool, held, [chunk], at=at)
            phase.appends.append(time.perf_counter() - t0)
            at += len(chunk)
        await attempts.accept(pool, Success(held, "0 1 2 ", usage), CLOCK)


def print_janitor(what: str, s: JanitorStats, duty: float) -> None:
    """Rates over the time its batches took (pauses and idle waits left out)."""
    print(f"   {what}:")
    for name, batches, unit in (
        ("settle", s.settles, "events folded"), ("delete", s.deletes, "rows deleted"),
    ):  # fmt: skip
        if not batches:
            print(f"     {name}: no batch found work")
            continue
        seconds = sum(b[0] for b in batches)
        durations = sorted(b[0] for b in batches)
        print(
            f"     {name}: {sum(b[1] for b in batches) / seconds:,.0f} jobs/s,"
            f" {sum(b[2] for b in batches) / seconds:,.0f} {unit}/s; a batch (one transaction)"
            f" p50 {statistics.median(durations) * 1000:.0f} ms,"
            f" max {durations[-1] * 1000:.0f} ms ({len(batches)} batches)"
        )
    if s.settles and s.deletes:
        per_job = sum(b[0] for b in s.settles) / sum(b[1] for b in s.settles) + sum(
            b[0] for b in s.deletes
        ) / sum(b[1] for b in s.deletes)
        print(
            f"     sustained, settling and deleting each job, at duty {duty}:"
            f" {duty / per_job:,.0f} jobs/s"
        )
