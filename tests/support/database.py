"""A real PostgreSQL for the suite: started once per session, a fresh database per test.

With DATABASE_URL set the suite uses that server instead (it must allow CREATE DATABASE).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from jobstream import db, migrations
from jobstream.embedded_pg import EmbeddedPostgres

TEMPLATE = "jobstream_template"


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def postgres_server() -> Iterator[tuple[str, EmbeddedPostgres | None]]:
    """Yield (admin URL, embedded server or None when DATABASE_URL points elsewhere)."""
    external = os.environ.get("DATABASE_URL")
    if external:
        yield external, None
        return
    datadir = Path(tempfile.mkdtemp(prefix="jobstream-test-pg-"))
    server = EmbeddedPostgres(datadir / "data", durable=False)
    server.start()
    try:
        yield server.url, server
    finally:
        server.destroy()
        datadir.rmdir()


async def create_template(admin_url: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    finally:
        await conn.close()
    conn = await db.connect(with_database(admin_url, TEMPLATE))
    try:
        await migrations.apply_schema(conn)
    finally:
        await conn.close()


async def create_empty_database(admin_url: str) -> str:
    """A database with nothing of jobstream's in it (template0 has no schema)."""
    return await create_test_database(admin_url, template="template0")


async def create_test_database(admin_url: str, *, template: str = TEMPLATE) -> str:
    name = f"test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await conn.close()
    return with_database(admin_url, name)


async def drop_test_database(admin_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
