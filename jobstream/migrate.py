"""`jobstream migrate`: bring DATABASE_URL's database to this version's schema, then exit.

A server or worker migrates at start-up too; this is for a deploy that migrates first, as its
own step (docs/deployment.md), and for an installed jobstream with no repository around it.
"""

from __future__ import annotations

import asyncio
import sys

from jobstream import db, migrations
from jobstream.settings import Settings


async def _migrate(url: str, timeout_s: float) -> int:
    version = 0

    async def apply() -> None:
        nonlocal version
        conn = await db.connect(url)
        try:
            version = await migrations.apply_schema(conn)
        finally:
            await conn.close()

    await db.start_with_database(url, timeout_s, apply)
    return version


def main() -> int:
    settings = Settings.for_process("migrate")
    if settings is None or settings.database_url is None:
        return 2
    # Schema changes hold their lock and run many statements: the direct connection, if any.
    url = settings.session_database_url or settings.database_url
    version = asyncio.run(_migrate(url, settings.db_connect_timeout_s))
    print(f"jobstream migrate: the database is at schema version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
