"""Streaming figures: how many token events one worker process persists per second, and the delay
from a provider's delta to an SSE client.

    .venv/bin/python -m bench.bench_stream     (or `make bench` for every benchmark)

Uses DATABASE_URL when set (it must allow CREATE DATABASE), else an embedded PostgreSQL with
fsync on, as in production. Figures are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench import queue_common as common
from bench.postgres import durable_postgres
from bench.server_process import wait_healthy
from jobstream import creates, db, logs, migrations
from jobstream.follower import Follower
from jobstream.jobspec import JobSpec
from jobstream.ports import free_port
from jobstream.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
LATENCY_JOBS, LATENCY_TOKENS, LATENCY_RATE = 4, 300, 100.0


def main() -> None:
    logs.configure("warning", json=False)
    with durable_postgres("jobstream-bench-") as admin_url:
        asyncio.run(_run(admin_url))


async def _run(admin_url: str) -> None:
    print("bench_stream")
    async with _database(admin_url) as url:
        await throughput(url, jobs=8, tokens=20_000, rate=0, what="8 streams at full speed")
    async with _database(admin_url) as url:
        what = "100 streams at 50 tokens/s"
        await throughput(url, jobs=100, tokens=250, rate=50, what=what)
    async with _database(admin_url) as url:
        await latency(url)


# --- token events one worker process persists ---


async def throughput(url: str, *, jobs: int, tokens: int, rate: float, what: str) -> float:
    """Print the figures and return the deltas persisted per second."""
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        simulate = {"tokens": tokens, "pattern": "count", "tokens_per_second": rate,
                    "first_token_delay_s": 0}  # fmt: skip
        for _ in range(jobs):
            await _create(pool, "throughput", simulate, tokens)
        worker = _spawn("worker", url, JOBSTREAM_WORKER_CONCURRENCY=str(jobs))
        try:
            await _until_finished(pool, timeout_s=300)
        finally:
            _stop(worker)
        row = await pool.fetchrow(
            "SELECT count(*) AS events, sum(length(data->>'text')) AS chars,"
            " extract(epoch FROM max(created_at) - min(created_at)) AS seconds"
            " FROM job_events WHERE type = 'token'"
        )
        succeeded = await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'succeeded'")
    finally:
        await pool.close()
    assert row is not None
    seconds, deltas = float(row["seconds"]), jobs * tokens
    print(
        f"  one worker process, {what}: {deltas:,} deltas in {seconds:.2f} s"
        f" ({succeeded}/{jobs} jobs succeeded)\n"
        f"    {row['events'] / seconds:,.0f} token events/s persisted (coalesced flushes of"
        f" {deltas / row['events']:,.1f} deltas, {row['chars'] / row['events']:,.0f} chars),"
        f" {deltas / seconds:,.0f} deltas/s"
    )
    return deltas / seconds


# --- delay from a provider delta to an SSE client ---


async def latency(url: str) -> None:
    """Worker, server and this client each in a process of their own, as deployed."""
    arrived: list[tuple[str, str, float]] = []
    port = free_port()
    server = _spawn("server", url, JOBSTREAM_PORT=str(port))
    with tempfile.NamedTemporaryFile("r", suffix=".tsv") as sent_file:
        worker = _spawn("bench.timed_worker", url, BENCH_SENT_PATH=sent_file.name)
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
                await _until_up(client)
                simulate = {
                    "tokens": LATENCY_TOKENS,
                    "pattern": "count",
                    "tokens_per_second": LATENCY_RATE,
                    "first_token_delay_s": 0,
                }
                followers = []
                for n in range(LATENCY_JOBS):
                    prompt = f"latency {n}"
                    body = {"prompt": prompt, "max_tokens": LATENCY_TOKENS, "simulate": simulate}
                    job = (await client.post("/api/jobs", json=body)).json()
                    followers.append(_follow(client, job["id"], prompt, arrived))
                await asyncio.wait_for(asyncio.gather(*followers), 120)
        finally:
            _stop(worker)
            _stop(server)
        sent = {}
        for line in sent_file.read().splitlines():
            prompt, text, at = line.split("\t")
            sent[(prompt, text)] = float(at)
    delays = [at - sent[(prompt, text)] for prompt, text, at in arrived]
    cuts = statistics.quantiles(delays, n=100)
    flush_ms = Settings().flush_interval_s * 1000
    print(
        f"  provider delta -> SSE client, {len(delays):,} deltas ({LATENCY_JOBS} jobs at"
        f" {LATENCY_RATE:g} tokens/s, flush every {flush_ms:g} ms; worker, server and client"
        f" in separate processes):\n"
        f"    p50 {cuts[49] * 1000:.1f} ms, p95 {cuts[94] * 1000:.1f} ms,"
        f" max {max(delays) * 1000:.1f} ms"
    )


async def _follow(
    client: httpx.AsyncClient, job_id: str, prompt: str, arrived: list[tuple[str, str, float]]
) -> None:
    async for event in Follower(client, job_id).events():
        if event["type"] == "token":
            at = time.monotonic()
            # One token event carries every delta of one flush: "12 13 14 ".
            arrived += [(prompt, token + " ", at) for token in event["text"].split(" ")[:-1]]


# --- set-up ---


async def _create(pool: asyncpg.Pool, prompt: str, simulate: dict[str, Any], tokens: int) -> None:
    spec = JobSpec(prompt=prompt, provider="simulated", max_tokens=tokens, simulate=simulate)
    await creates.create(pool, "default", spec, None)


async def _until_finished(pool: asyncpg.Pool, *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while await pool.fetchval("SELECT count(*) FROM jobs WHERE finished_at IS NULL"):
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's jobs did not finish")
        await asyncio.sleep(0.1)


async def _until_up(client: httpx.AsyncClient) -> None:
    await wait_healthy(client, timeout_s=30, poll_s=0.05)


def _spawn(module: str, url: str, **env: str) -> subprocess.Popen[bytes]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSTREAM_")}
    # The creates a benchmark times are not held to the default per-tenant create rate.
    child_env |= {
        "DATABASE_URL": url, "JOBSTREAM_LOG_LEVEL": "warning",
        "JOBSTREAM_TENANT_CREATE_RATE": "0", **env,
    }  # fmt: skip
    module = {"server": "jobstream.server", "worker": "jobstream.worker"}.get(module, module)
    return subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=child_env)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@asynccontextmanager
async def _database(admin_url: str) -> AsyncIterator[str]:
    """A fresh database per measurement, so one's rows never weigh on the other."""
    name = f"bench_{uuid.uuid4().hex[:10]}"
    url = await common.recreate_database(admin_url, name)
    conn = await db.connect(url)
    try:
        await migrations.apply_schema(conn)
        # The default tenant may run 16 jobs at once: the figures are about streams, not that.
        await conn.execute("UPDATE tenants SET max_running = 10000")
    finally:
        await conn.close()
    try:
        yield url
    finally:
        await common.drop_database(admin_url, name)


if __name__ == "__main__":
    main()
