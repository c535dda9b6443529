"""Tells the workers that jobs became runnable: NOTIFYs coalesced, outside the creates.

NOTIFY takes a cluster-wide lock from commit until the commit is durable, so one in every create
transaction serialised every create of every tenant (docs/design.md, "LISTEN/NOTIFY"). The server's
creates announce their providers here instead; one task sends a NOTIFY for whatever was announced
while its previous one was in flight. A notice is a wake-up hint: a lost one costs a worker at
most its poll interval, never a job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import asyncpg
import structlog

from jobstream import db
from jobstream.sql import queries

log = structlog.get_logger(__name__)


class RunnableNotices:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._pending: set[str] = set()
        self._announced = asyncio.Event()

    def announce(self, providers: Iterable[str]) -> None:
        """Jobs of these providers were committed: wake the workers soon. Never blocks."""
        self._pending.update(providers)
        if self._pending:
            self._announced.set()

    async def run(self) -> None:
        """Until cancelled: one NOTIFY statement at a time, for everything announced meanwhile."""
        while True:
            await self._announced.wait()
            self._announced.clear()
            providers, self._pending = sorted(self._pending), set()
            try:
                await self._pool.execute(queries.NOTIFY_RUNNABLE, providers)
            except (*db.DISCONNECTS, asyncpg.PostgresError) as exc:
                log.warning("runnable_notice_failed", providers=providers, error=str(exc))
