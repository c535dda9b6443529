"""Part 1 of bench_retention: what the metric counters add to the hot statements, measured
with EXPLAIN ANALYZE as written and with their `counted` CTE cut out."""

from __future__ import annotations

import re
import statistics
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from bench import queue_common as common
from bench.retention_seed import CLOCK, PROVIDER, SPEC
from jobstream import attempts, claims, creates, db, migrations, new_jobs
from jobstream.attempts import Success
from jobstream.claims import Claimed
from jobstream.new_jobs import NewJob
from jobstream.sql import queries
from jobstream.usage import Usage

COUNTERS_DATABASE = "retention_bench_counters"
REPS = 300  # EXPLAIN ANALYZE runs per statement and variant

_COUNTED = re.compile(r"\), counted AS \(.*?\n\)\n(SELECT)", re.S)


def uncounted(sql: str) -> str:
    """The statement without its `counted` CTE: what it cost before the counters."""
    stripped, n = _COUNTED.subn(r")\n\1", sql)
    assert n == 1, "no counted CTE found"
    return stripped


@dataclass
class Explained:
    with_counter: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)
    counting: list[float] = field(default_factory=list)  # the counting node's own time


def _counting_ms(plan: dict[str, Any]) -> float:
    """Inclusive time of the ModifyTable node that writes metric_totals."""
    if plan.get("Node Type") == "ModifyTable" and plan.get("Relation Name") == "metric_totals":
        return float(plan["Actual Total Time"]) * float(plan.get("Actual Loops", 1))
    return float(sum(_counting_ms(child) for child in plan.get("Plans", [])))


async def _explain(conn: db.Conn, sql: str, args: list[Any]) -> tuple[float, float]:
    """(execution ms, counting ms) of one run, rolled back."""
    tr = conn.transaction()
    await tr.start()
    try:
        # EXPLAIN's json, decoded by the pool's codec (jobstream.db.init_connection).
        explained = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
    finally:
        await tr.rollback()
    doc = explained[0]
    return float(doc["Execution Time"]), _counting_ms(doc["Plan"])


async def _measure_statement(
    conn: db.Conn, sql: str, args: Callable[[], Awaitable[list[Any]]]
) -> Explained:
    out = Explained()
    bare = uncounted(sql)
    for _ in range(REPS):
        given = await args()
        total, counting = await _explain(conn, sql, given)
        out.with_counter.append(total)
        out.counting.append(counting)
        out.without.append((await _explain(conn, bare, given))[0])
    return out


def _insert_args(n: int) -> Callable[[], Awaitable[list[Any]]]:
    async def args() -> list[Any]:
        items = [NewJob(SPEC, f"k-{uuid.uuid4()}") for _ in range(n)]
        ids = [str(uuid.uuid4()) for _ in items]
        return new_jobs.insert_args(ids, "default", items, None)

    return args


def _claim_args(n: int) -> Callable[[], Awaitable[list[Any]]]:
    async def args() -> list[Any]:
        return [[PROVIDER], "bench", 30.0, None, [], [], [], n, ["llm"], claims.DEFAULT_MAX_SHARE]

    return args


def _succeed_args(helds: list[Claimed]) -> Callable[[], Awaitable[list[Any]]]:
    usage = Usage(input_tokens=3, output_tokens=5, cost_usd=Decimal("0.00001"))

    async def args() -> list[Any]:
        return attempts.succeed_args(
            [Success(h, "0 1 2 3 4 ", usage, last_chunk="4 ") for h in helds], None
        )

    return args


async def counter_costs(admin_url: str) -> list[tuple[str, Explained]]:
    url = await common.recreate_database(admin_url, COUNTERS_DATABASE)
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
        results: list[tuple[str, Explained]] = []
        async with pool.acquire() as conn:
            for name, sql, args in (
                ("INSERT_JOBS, 1 job", queries.INSERT_JOBS, _insert_args(1)),
                ("INSERT_JOBS, 100 jobs", queries.INSERT_JOBS, _insert_args(100)),
                ("CLAIM_JOBS, 1 job", queries.CLAIM_JOBS, _claim_args(1)),
                ("CLAIM_JOBS, 16 jobs", queries.CLAIM_JOBS, _claim_args(16)),
                ("SUCCEED_ATTEMPTS, 1 job", queries.SUCCEED_ATTEMPTS, _succeed_args(running[:1])),
                ("SUCCEED_ATTEMPTS, 16 jobs", queries.SUCCEED_ATTEMPTS, _succeed_args(running)),
            ):
                results.append((name, await _measure_statement(conn, sql, args)))
        return results
    finally:
        await pool.close()
        await common.drop_database(admin_url, COUNTERS_DATABASE)


def print_counter_costs(results: list[tuple[str, Explained]]) -> None:
    print(f"\n1. The counters' cost in the hot statements (EXPLAIN ANALYZE, median of {REPS})")
    header = f"{'statement':<28}{'with (ms)':>11}{'without (ms)':>14}{'added':>16}"
    print(f"   {header}{'counting node':>15}")
    for name, e in results:
        w, wo = statistics.median(e.with_counter), statistics.median(e.without)
        node = statistics.median(e.counting)
        added = f"{w - wo:+.3f} ({(w - wo) / wo:+.0%})"
        print(f"   {name:<28}{w:>11.3f}{wo:>14.3f}{added:>16}{node:>12.3f} ms")
