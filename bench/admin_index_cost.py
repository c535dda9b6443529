"""Part 1 of bench_admin: what the dashboard's index on ended attempts adds to the statement
that ends them (job_attempts_finished_idx: an entry at each attempt's end; jobs_failed_idx gets
one only when a job fails or dies, not measured here). SUCCEED_ATTEMPTS of 1 and of 16 jobs run
under EXPLAIN ANALYZE, rolled back, with the index and with it dropped in the same rolled-back
transaction, interleaved; medians of the execution time."""

from __future__ import annotations

import statistics
from decimal import Decimal
from typing import Any

from bench import queue_common as common
from bench.retention_seed import CLOCK, PROVIDER, SPEC
from jobstream import attempts, claims, creates, db, migrations
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.new_jobs import NewJob
from jobstream.sql import queries
from jobstream.usage import Usage

DATABASE = "admin_bench_index_cost"
REPS = 300
DROP = "DROP INDEX job_attempts_finished_idx"


async def _explain(conn: db.Conn, args: list[Any], *, without_index: bool) -> float:
    tr = conn.transaction()
    await tr.start()
    try:
        if without_index:
            await conn.execute(DROP)
        explained = await conn.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {queries.SUCCEED_ATTEMPTS}", *args
        )
    finally:
        await tr.rollback()
    return float(explained[0]["Execution Time"])


def _args(helds: list[Claimed]) -> list[Any]:
    usage = Usage(input_tokens=3, output_tokens=5, cost_usd=Decimal("0.00001"))
    return attempts.succeed_args(
        [Success(h, "0 1 2 3 4 ", usage, last_chunk="4 ") for h in helds], None
    )


async def index_costs(admin_url: str) -> None:
    url = await common.recreate_database(admin_url, DATABASE)
    pool = await db.create_pool(url, min_size=1, max_size=4)
    try:
        async with pool.acquire() as conn:
            await migrations.apply_schema(conn)
            await conn.execute("UPDATE tenants SET max_running = 100000")
        for _ in range(5):
            await creates.create_many(pool, "default", [NewJob(SPEC) for _ in range(1000)])
        running = await claims.claim_batch(
            pool, providers=[PROVIDER], worker_id="bench", lease_s=600, clock=CLOCK, max_jobs=16
        )
        await pool.execute("VACUUM ANALYZE")
        print(f"\n1. What job_attempts_finished_idx adds to SUCCEED_ATTEMPTS (EXPLAIN ANALYZE, "
              f"median of {REPS}, interleaved)")  # fmt: skip
        async with pool.acquire() as conn:
            for name, helds in (("1 job", running[:1]), ("16 jobs", running)):
                args = _args(helds)
                with_index: list[float] = []
                without: list[float] = []
                for _ in range(REPS):
                    with_index.append(await _explain(conn, args, without_index=False))
                    without.append(await _explain(conn, args, without_index=True))
                w, wo = statistics.median(with_index), statistics.median(without)
                print(
                    f"   SUCCEED_ATTEMPTS, {name:<8} with {w:.3f} ms, without {wo:.3f} ms, "
                    f"added {w - wo:+.3f} ms ({(w - wo) / wo * 100:+.1f} %)",
                    flush=True,
                )
    finally:
        await pool.close()
        await common.drop_database(admin_url, DATABASE)
