"""A lease renewal rewrites nothing but the row (schema.sql, jobs_active_tenant_idx): the cost a
job pays every third of its lease while it waits for its model."""

from __future__ import annotations

import asyncpg

from jobstream import renewals
from jobstream.clock import DatabaseClock
from tests.integration.test_claims import claim, enqueue

CLOCK = DatabaseClock()

# The heap rows this backend updated and has not yet reported, and those of them that were HOT
# (wrote no index entry). Nothing is reported inside a transaction: read twice in one, the
# difference is what came between.
UPDATED = """
SELECT pg_stat_get_xact_tuples_updated('jobs'::regclass) AS updated,
       pg_stat_get_xact_tuples_hot_updated('jobs'::regclass) AS hot
"""


async def test_a_renewal_is_a_hot_update_of_each_running_job(pool: asyncpg.Pool) -> None:
    await enqueue(pool, "default", 8)
    held = await claim(pool, 8)
    before = await pool.fetch("SELECT id, lease_until FROM jobs ORDER BY id")
    async with pool.acquire() as conn, conn.transaction():
        # On one connection, in one transaction, so that its own counters tell what it wrote.
        start = await conn.fetchrow(UPDATED)
        renewal = await renewals.renew_many(conn, held, 60, CLOCK, worker_id="w")
        counts = await conn.fetchrow(UPDATED)
    assert set(renewal.renewed) == {h.run_token for h in held} and not renewal.busy
    after = await pool.fetch("SELECT id, lease_until FROM jobs ORDER BY id")
    assert all(a["lease_until"] > b["lease_until"] for a, b in zip(after, before, strict=True))
    # Every row fits on its page again (fillfactor 80, a claimed job's row is small): had an
    # index held lease_until, none of these would be HOT.
    assert start is not None and counts is not None
    assert counts["updated"] - start["updated"] == counts["hot"] - start["hot"] == 8
