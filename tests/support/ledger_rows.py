"""Pools whose one connection books on a chosen tenant_ledger row: every booking goes to the
writing connection's row, pg_backend_pid() % 16 (jobstream/sql/ledger.sql), so tests that are
about two writers meeting on a row, or missing each other, pick their connections by it."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg

from jobstream import db


async def ledger_row(conn: asyncpg.Pool | asyncpg.Connection) -> int:
    row: int = await conn.fetchval("SELECT pg_backend_pid() % 16")
    return row


async def one_connection_pool(database_url: str, *, row: Callable[[int], bool]) -> asyncpg.Pool:
    """A pool of one connection whose ledger row satisfies `row` (a new backend each try)."""
    while True:
        single = await db.create_pool(database_url, min_size=1, max_size=1)
        if row(await ledger_row(single)):
            return single
        await single.close()
