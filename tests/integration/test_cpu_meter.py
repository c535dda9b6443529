"""bench.cpu_meter: the CPU a drain costs, split between the cluster and the consumers. The
suite shares its cluster with other tests, so the database's figure is checked from below."""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg
import pytest

from bench.cpu_meter import CpuMeter

# A consumer that, once told to go, spends this much CPU, then says so and waits to be stopped
# (a process that has exited is no longer in /proc, so the meter reads consumers while they run).
BURN_S = 0.3
CONSUMER = f"""
import sys, time
sys.stdin.readline()
end = time.process_time() + {BURN_S}
while time.process_time() < end:
    pass
print("spent", flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads Linux's /proc")


async def test_the_consumers_cpu_is_theirs_and_the_clusters_includes_a_query(
    database_url: str,
) -> None:
    conn = await asyncpg.connect(database_url)
    consumer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CONSUMER,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        meter = await CpuMeter.of(conn, [consumer.pid])
        meter.start()
        started = time.monotonic()
        assert consumer.stdin is not None
        consumer.stdin.write(b"go\n")
        await consumer.stdin.drain()
        # A query that only computes: about a fifth of a second of its backend's CPU here.
        await conn.fetchval("SELECT count(*) FROM generate_series(1, 3000000)")
        assert consumer.stdout is not None
        assert await asyncio.wait_for(consumer.stdout.readline(), 30) == b"spent\n"
        split = meter.stop()
        elapsed = time.monotonic() - started
    finally:
        assert consumer.stdin is not None
        consumer.stdin.close()
        await consumer.wait()
        await conn.close()
    assert split is not None
    # Clock ticks are 10 ms: a little under what was spent may be counted.
    assert BURN_S - 0.05 <= split.consumers_s <= elapsed + 0.05
    assert split.database_s >= 0.05  # the query ran on one of the cluster's processes
    assert split.per_job_us(1000) == pytest.approx(
        (split.database_s * 1000, split.consumers_s * 1000)
    )


async def test_a_cluster_off_this_machine_gives_no_figures() -> None:
    meter = CpuMeter(None, [])
    meter.start()
    assert meter.stop() is None
