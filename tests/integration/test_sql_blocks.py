"""Every block of jobstream/sql parses against the migrated schema: PostgreSQL prepares it,
resolving every table, column, function and parameter type, without running it."""

from __future__ import annotations

from dataclasses import fields

import asyncpg

from jobstream import db
from jobstream.sql import Queries, queries


async def test_every_block_prepares_against_the_schema(database_url: str) -> None:
    conn = await db.connect(database_url)
    failed: dict[str, str] = {}
    try:
        for field in fields(Queries):
            try:
                await conn.prepare(getattr(queries, field.name))
            except asyncpg.PostgresError as error:
                failed[field.name] = f"{type(error).__name__}: {error}"
    finally:
        await conn.close()
    assert failed == {}
