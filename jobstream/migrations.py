"""The schema over time: a fresh database gets schema.sql whole, an older one the migrations
after its recorded version and then schema.sql's routines, and a current one nothing at all.

Migrations change data definitions (tables, indexes, types) and move data; functions, aggregates
and views live in schema.sql alone, after its `-- routines:` line, each a CREATE OR REPLACE, and
are run again after every migration. A routine then has one text to read and change, where it
used to be copied whole into each migration that changed it (claim_jobs: 214 lines).

Every process applies this at start-up. A current database costs one read of schema_version and
takes no lock, so a restarting server never queues behind (or deadlocks with) running workers.
Changes run one version per transaction under an advisory lock (one process at a time), with a
lock timeout: a deadlock or a timeout rolls the version back and is tried again.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import structlog

from jobstream import db
from jobstream.db import Conn
from jobstream.errors import JobstreamError
from jobstream.sql import queries

log = structlog.get_logger(__name__)

# The repository's schema.sql and migrations/, shipped in the package (links in a checkout).
RESOURCES = Path(__file__).resolve().parent / "resources"
SCHEMA_PATH = RESOURCES / "schema.sql"
MIGRATIONS_DIR = RESOURCES / "migrations"
# Serialises schema changes when several processes start at once.
SCHEMA_LOCK_ID = 0x6A6F6273  # "jobs"
# How long a change may wait for a table lock before it rolls back and tries again: running
# claims and appends hold row locks for milliseconds, so a longer wait means a lock cycle.
LOCK_TIMEOUT_MS = 5000
TRIES = 5

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_ROUTINES = re.compile(r"^-- routines:", re.MULTILINE)


class SchemaTooNew(JobstreamError):
    """The database was migrated by a newer jobstream than this one."""


@dataclass(frozen=True)
class Migration:
    version: int
    path: Path


def schema_version(sql: str) -> int:
    for line in sql.splitlines():
        if line.startswith("-- schema-version:"):
            return int(line.split(":", 1)[1])
    raise ValueError("schema.sql has no '-- schema-version:' line")


def load_schema(path: Path = SCHEMA_PATH) -> str:
    return path.read_text()


def routines(sql: str) -> str:
    """schema.sql's routines: what follows its `-- routines:` line, safe to run again."""
    found = _ROUTINES.search(sql)
    if found is None:
        raise ValueError("schema.sql has no '-- routines:' line")
    return sql[found.start() :]


def has_statements(sql: str) -> bool:
    """Whether `sql` holds more than blank and `--` comment lines: a version that changed
    routines only (they run after the migrations) has nothing else to run, and asyncpg fails on
    an empty query. Line by line: a regular expression of comments and white space backtracked
    exponentially on comment lines ending in spaces (18 such lines before a statement: 263 s)."""
    return any(line.strip() and not line.lstrip().startswith("--") for line in sql.splitlines())


def migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration, by version: `NNNN_what_it_does.sql` moves a database to version NNNN."""
    found = []
    for path in directory.iterdir():
        match = _MIGRATION_NAME.match(path.name)
        if match:
            found.append(Migration(int(match.group(1)), path))
    return sorted(found, key=lambda m: m.version)


async def recorded_version(conn: Conn) -> int | None:
    """The database's schema version; None for a database jobstream never touched."""
    if not await conn.fetchval(queries.HAS_SCHEMA):
        return None
    version: int | None = await conn.fetchval(queries.SCHEMA_VERSION)
    return version


async def apply_schema(conn: Conn, sql: str | None = None) -> int:
    """Bring the database to this code's schema version; returns that version."""
    if sql is None:
        sql = load_schema()  # a few KB read once at start-up
    target = schema_version(sql)
    current = await recorded_version(conn)
    if current == target:
        return target
    if current is not None and current > target:
        raise SchemaTooNew(
            f"the database's schema is version {current}, newer than this jobstream's {target}:"
            " upgrade this process, do not downgrade the database"
        )
    for attempt in range(1, TRIES + 1):
        try:
            await _change(conn, sql, target)
            return target
        except (asyncpg.DeadlockDetectedError, asyncpg.LockNotAvailableError) as exc:
            if attempt == TRIES:
                raise
            log.warning("schema_change_retried", attempt=attempt, error=str(exc))
            await asyncio.sleep(0.2 * attempt)
    raise AssertionError("unreachable")


async def apply_schema_on(pool: asyncpg.Pool, direct_url: str | None) -> int:
    """apply_schema on a connection of the pool, or, when the pool is a transaction pooler's
    (`direct_url` set beside it), on a direct connection of its own: a schema change is many
    statements and a lock in one session, which the pooler does not promise."""
    if direct_url is None:
        async with pool.acquire() as pooled:
            return await apply_schema(pooled)
    direct = await db.connect(direct_url)
    try:
        return await apply_schema(direct)
    finally:
        await direct.close()


async def _change(conn: Conn, sql: str, target: int) -> None:
    async with conn.transaction():
        await conn.execute(queries.LOCK_SCHEMA, SCHEMA_LOCK_ID)
        await conn.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
        # Read again under the lock: another process may have changed it while we waited.
        current = await recorded_version(conn)
        if current == target:
            return
        if current is None:
            await conn.execute(sql)
            log.info("schema_created", version=target)
            return
        for migration in migrations():
            if current < migration.version <= target:
                text = migration.path.read_text()
                if has_statements(text):
                    await conn.execute(text)
                await conn.execute(queries.RECORD_SCHEMA_VERSION, migration.version)
                log.info("schema_migrated", version=migration.version)
        await conn.execute(routines(sql))
