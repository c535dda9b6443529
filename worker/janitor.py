"""The janitor: retention, compaction and the metric counters' upkeep, run by workers.

Every worker runs one (unless JOBSTREAM_JANITOR is off); a session advisory lock lets one at a
time do a round, and the others find it taken and wait for their next look. The lock goes with
its connection, so a janitor that dies mid-round frees it for the next one.

A round works in batches (jobstream/retention.py), each its own short transaction on finished
jobs only, alternating between settling (compacting) and deleting until neither finds a full
batch; then it prunes old tombstones, folds the counter rows of backends that are gone, and
writes the dashboard's per-minute series (jobstream/series.py). Its progress is in /metrics
(jobs and rows compacted and deleted, and how far it is behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import structlog

from jobstream import db, retention, series
from jobstream.clock import Clock, DatabaseClock
from jobstream.db import Conn
from jobstream.settings import Settings
from jobstream.sql import queries

log = structlog.get_logger(__name__)

LOCK_ID = 0x6A616E69  # "jani"


@dataclass
class Round:
    """What one round did."""

    settled: int = 0
    compacted_rows: int = 0
    deleted: int = 0
    deleted_rows: int = 0
    tombstones_pruned: int = 0
    workers_pruned: int = 0
    counters_folded: int = 0

    @property
    def worked(self) -> bool:
        return any(vars(self).values())


class Janitor:
    def __init__(self, pool: asyncpg.Pool, settings: Settings, *, clock: Clock | None = None):
        self._pool = pool
        self._settings = settings
        self._clock: Clock = clock or DatabaseClock()
        # The minute of this janitor's last fold of attempt_minutes: once a minute is enough.
        self._series_minute: datetime | None = None

    async def run(self) -> None:
        """Rounds until cancelled; a failed round is logged and the next one tries again."""
        if not self._settings.janitor:
            return
        while True:
            # A look only after the first interval: a worker starting up has other work first.
            await asyncio.sleep(self._settings.janitor_interval_s)
            try:
                done = await self.run_round()
            except db.DISCONNECTS as exc:
                log.warning("database_unreachable", error=str(exc) or type(exc).__name__)
                continue
            except Exception:
                log.exception("janitor_round_failed")
                continue
            if done is not None and done.worked:
                log.info("janitor_round", **vars(done))

    async def run_round(self) -> Round | None:
        """One round of work, or None when another janitor holds the lock."""
        async with self._session() as conn:
            if not await conn.fetchval(queries.TRY_LOCK, LOCK_ID):
                return None
            try:
                return await self._work(conn)
            finally:
                # The lock is the session's, and the pool keeps a connection's session when it
                # gets it back (db._keep_session): unlock here. A broken connection has freed
                # the lock with its session.
                with contextlib.suppress(*db.DISCONNECTS):
                    await conn.execute(queries.UNLOCK, LOCK_ID)

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Conn]:
        """A connection whose session lasts the round, for the session lock: one of the pool's,
        or, when the pool is a transaction pooler's (JOBSTREAM_DIRECT_DATABASE_URL set), a
        direct one for the round, since the pooler hands each transaction to any server
        connection and the lock would stay on one that other clients then use."""
        direct = self._settings.direct_database_url
        if direct is None:
            async with self._pool.acquire() as conn:
                yield conn
            return
        own = await db.connect(direct, application_name="jobstream-janitor")
        try:
            yield own
        finally:
            await own.close()

    async def _work(self, conn: Conn) -> Round:
        s = self._settings
        done = Round()
        settling = deleting = True
        # Alternate, so that a backlog of either never starves the other.
        while settling or deleting:
            if settling:
                started = time.monotonic()
                async with unhurried(conn):
                    batch = await retention.settle(
                        conn,
                        self._clock,
                        compact_after_s=s.compact_after_s,
                        retention_s=s.retention_s,
                        limit=s.janitor_batch,
                    )
                done.settled += batch.jobs
                done.compacted_rows += batch.rows
                settling = batch.jobs == s.janitor_batch
                await pace(time.monotonic() - started, s.janitor_duty)
            if deleting:
                started = time.monotonic()
                async with unhurried(conn):
                    batch = await retention.delete_expired(
                        conn, self._clock, limit=s.janitor_batch, tombstones=s.tombstone_s > 0
                    )
                done.deleted += batch.jobs
                done.deleted_rows += batch.rows
                deleting = batch.jobs == s.janitor_batch
                await pace(time.monotonic() - started, s.janitor_duty)
        while True:
            async with unhurried(conn):
                pruned = await retention.prune_tombstones(
                    conn, self._clock, keep_s=s.tombstone_s, limit=s.janitor_batch
                )
            done.tombstones_pruned += pruned
            if pruned < s.janitor_batch:
                break
        async with unhurried(conn):
            done.workers_pruned = await retention.prune_workers(conn, self._clock)
        async with unhurried(conn):
            done.counters_folded = await retention.fold_counters(conn)
        async with unhurried(conn):
            folded = await series.fold(
                conn, self._clock, keep_s=s.admin_series_keep_s, last_minute=self._series_minute
            )
        self._series_minute = folded.minute
        return done


@contextlib.asynccontextmanager
async def unhurried(conn: Conn) -> AsyncIterator[None]:
    """One batch's transaction, whose commit does not wait for the WAL flush
    (queries.JANITOR_TRANSACTION): the setting ends with it, never reaching the hot path's
    commits on this pooled connection."""
    async with conn.transaction():
        await conn.execute(queries.JANITOR_TRANSACTION)
        yield


async def pace(worked_s: float, duty: float) -> None:
    """After a batch that took `worked_s`, rest so that work is `duty` of the time: a backlog
    (after an upgrade, a long outage) is worked off beside the hot path, not ahead of it."""
    if duty < 1:
        await asyncio.sleep(worked_s * (1 - duty) / duty)


def watch(task: asyncio.Task[None]) -> None:
    """The worker's done-callback for its janitor task: a janitor that stops on its own is a bug
    to see in the logs; jobs still run without it, so the worker goes on."""
    if not task.cancelled() and task.exception() is not None:
        log.error("janitor_died", exc_info=task.exception())
