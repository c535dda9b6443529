from __future__ import annotations

import asyncpg

from jobstream import db


async def test_schema_applies_twice_and_records_its_version(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        first = await db.apply_schema(conn)
        second = await db.apply_schema(conn)
        recorded = await conn.fetchval("SELECT max(version) FROM schema_version")
    assert first == second == recorded == db.schema_version(db.load_schema())


async def test_the_default_tenant_exists(pool: asyncpg.Pool) -> None:
    assert await pool.fetchval("SELECT name FROM tenants WHERE id = 'default'") is not None
