"""The hub: one LISTEN connection per server process wakes the subscribers of each job.

LISTEN/NOTIFY is only a wake-up hint; the event table is the truth (docs/design.md,
"LISTEN/NOTIFY"). Per followed job there is one feed: where it has read up to, and its
subscribers. One reader task serves every
feed: on each wake-up it reads the new events of every job that has news in one statement
(a worker's token write notifies for all its streams in one commit, so a thousand followed jobs
were a thousand reads a tick) and fans each job's events out, the same Event objects, to every
subscriber's bounded buffer. Wake-ups come from NOTIFY (`job_id:last_seq`), from a
periodic re-check of every followed job's `last_seq` in one statement (a lost NOTIFY is late by
at most `recheck_s`), and from every (re)connect of the listener (notifications sent while it was
down are gone).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any

import asyncpg
import structlog

from jobstream import channels, db, events
from jobstream.listener import Listener
from jobstream.server.flag import Stop
from jobstream.server.lag import LagHistogram
from jobstream.server.subscription import CloseReason, Subscription
from jobstream.sql import queries

log = structlog.get_logger(__name__)

# Pause before a feed retries a failed read (the database is away or restarting).
READ_RETRY_S = 0.5
# The most jobs one read asks about; more are read in the next statement of the same wake-up.
READ_JOBS = 500


class _Feed:
    """The hub's reader of one job: where it has read up to, and who gets what it reads."""

    def __init__(self, job_id: uuid.UUID) -> None:
        self.job_id = job_id
        self.subscribers: set[Subscription] = set()
        self.position: int | None = None  # highest seq fanned out; None until the first read
        self.ready = asyncio.Event()  # position is known
        self.wanted = False  # the table may hold events past position
        self.task: asyncio.Task[None] | None = None  # finds the first position


class Hub:
    def __init__(
        self,
        *,
        database_url: str,
        pool: asyncpg.Pool,
        recheck_s: float,
        probe_s: float,
        buffer: int,
        application_name: str = "jobstream-hub",
    ) -> None:
        self._pool = pool
        self._recheck_s = recheck_s
        self._buffer = buffer
        # A page is at most half a buffer: a reader less than half a buffer behind is never cut
        # off by one read, even by the burst that follows a reconnect.
        self._page = min(events.READ_LIMIT, max(1, buffer // 2))
        self._feeds: dict[uuid.UUID, _Feed] = {}
        self._feeds_by_text: dict[str, _Feed] = {}  # the same feeds, by str(job id)
        self._due: dict[uuid.UUID, _Feed] = {}  # feeds whose table may hold unread events
        self._due_now = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._recheck_now = asyncio.Event()
        # Set when the server begins to stop; streams that follow nothing (replays) end on it.
        self.stopping = asyncio.Event()
        self.listener = Listener(
            database_url,
            {channels.CHANNEL_EVENTS: self._notified},
            on_connect=self._recheck_now.set,
            name=application_name,
            probe_interval_s=probe_s,
        )
        # Counters for /metrics and the tests: how much the fan-out saves, who was cut off.
        self.reads = 0
        self.cut_off = 0
        self.lag = LagHistogram()

    # --- life cycle ---

    async def start(self, *, connect_timeout_s: float = 10) -> None:
        self._spawn(self.listener.run(), "hub-listener")
        self._spawn(self._recheck_loop(), "hub-recheck")
        self._spawn(self._read_loop(), "hub-reader")
        # Ready means LISTEN is in effect; if it is not yet, the re-check still serves streams.
        try:
            async with asyncio.timeout(connect_timeout_s):
                await self.listener.connected.wait()
        except TimeoutError:
            log.warning("hub_listener_not_connected", waited_s=connect_timeout_s)

    def drain(self) -> None:
        """The server is stopping: end every subscription so their streams close now."""
        self.stopping.set()
        for feed in list(self._feeds.values()):
            for sub in list(feed.subscribers):
                sub.close("shutdown")

    async def stop(self) -> None:
        self.drain()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def subscribers(self) -> int:
        return sum(len(feed.subscribers) for feed in self._feeds.values())

    # --- subscribing ---

    async def subscribe(self, job_id: uuid.UUID, *, closed: Stop | None = None) -> Subscription:
        """Follow a job's new events. Returns once every event committed from now on will be
        delivered; the caller then reads its backlog from the table and drops seqs it has seen.
        `closed`, if given, is set when the subscription ends.
        """
        sub = Subscription(job_id, self._buffer, self._release, closed=closed)
        if self.stopping.is_set():
            sub.close("shutdown")
            return sub
        feed = self._feeds.get(job_id)
        if feed is None:
            feed = self._feeds[job_id] = self._feeds_by_text[str(job_id)] = _Feed(job_id)
            feed.task = self._spawn(self._feed_loop(feed), f"hub-feed-{job_id}")
        feed.subscribers.add(sub)
        try:
            await feed.ready.wait()
        except BaseException:
            sub.close()  # the caller never gets it: it must not stay in the feed
            raise
        return sub

    def _release(self, sub: Subscription) -> None:
        feed = self._feeds.get(sub.job_id)
        if feed is None or sub not in feed.subscribers:
            return  # its feed already ended (a later feed of the same job is not its business)
        feed.subscribers.discard(sub)
        if not feed.subscribers:
            del self._feeds[sub.job_id]
            del self._feeds_by_text[str(sub.job_id)]
            if self._due.get(sub.job_id) is feed:
                del self._due[sub.job_id]
            feed.ready.set()  # nobody may wait for a feed that will never start
            if feed.task is not None:
                feed.task.cancel()

    def _close_feed(self, feed: _Feed, reason: CloseReason) -> None:
        for sub in list(feed.subscribers):
            sub.close(reason)

    # --- wake-ups ---

    def _notified(self, payload: str) -> None:
        # Feeds are looked up by the id as the payload spells it (PostgreSQL's uuid::text, as
        # str(UUID)): parsing a UUID per item was a tenth of the hub's time with 1,000 streams,
        # nearly all of them for jobs this server does not follow. Only a followed job's seq is
        # read.
        feeds = self._feeds_by_text
        for item in payload.split(","):
            job, _, seq = item.partition(":")
            feed = feeds.get(job)
            if feed is None:
                continue
            try:
                last_seq = int(seq)
            except ValueError:
                log.warning("hub_bad_notification", payload=item[:100])
                continue
            self._wake(feed, last_seq)

    def _wake(self, feed: _Feed, last_seq: int | None = None) -> None:
        if last_seq is not None and feed.position is not None and last_seq <= feed.position:
            return
        feed.wanted = True
        if feed.position is not None:  # else its start adds it, once it has a position
            self._due[feed.job_id] = feed
            self._due_now.set()

    async def _recheck_loop(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self._recheck_s):
                    await self._recheck_now.wait()
            except TimeoutError:
                pass
            self._recheck_now.clear()
            asked = list(self._feeds)
            if not asked:
                continue
            try:
                rows = await self._pool.fetch(queries.JOBS_LAST_SEQ, asked)
            except (*db.DISCONNECTS, asyncpg.PostgresError) as exc:
                log.warning("hub_recheck_failed", error=str(exc) or type(exc).__name__)
                continue
            found = {row["id"]: row["last_seq"] for row in rows}
            # Only the jobs asked about: a feed started while the query ran has no row yet and
            # is not gone. A feed that ended meanwhile is no longer ours to wake or close.
            for job_id in asked:
                feed = self._feeds.get(job_id)
                if feed is None:
                    continue
                if job_id in found:
                    self._wake(feed, found[job_id])
                else:
                    self._close_feed(feed, "gone")

    # --- reading and fan-out ---

    async def _feed_loop(self, feed: _Feed) -> None:
        """Find the feed's first position; the reader task serves it from then on."""
        try:
            while True:
                try:
                    if await self._start_feed(feed) and feed.wanted:
                        self._due[feed.job_id] = feed
                        self._due_now.set()
                    return
                except (*db.DISCONNECTS, asyncpg.PostgresError) as exc:
                    log.warning("hub_read_failed", job_id=str(feed.job_id), error=str(exc))
                    await asyncio.sleep(READ_RETRY_S)
        except Exception:
            # A bug, not an outage: end these streams (their clients resume from their cursors)
            # rather than leave them waiting on a feed that never reads.
            log.exception("hub_feed_failed", job_id=str(feed.job_id))
            self._close_feed(feed, "error")

    async def _start_feed(self, feed: _Feed) -> bool:
        # Read after the first subscriber registered: every event past this position commits
        # later, and its NOTIFY (or the re-check) wakes this feed.
        last_seq = await self._pool.fetchval(queries.JOB_LAST_SEQ, feed.job_id)
        if last_seq is None:
            self._close_feed(feed, "gone")
            return False
        feed.position = last_seq
        feed.ready.set()
        return True

    async def _read_loop(self) -> None:
        while True:
            await self._due_now.wait()
            self._due_now.clear()
            due = list(self._due.values())
            self._due.clear()
            for start in range(0, len(due), READ_JOBS):
                await self._read(due[start : start + READ_JOBS])

    async def _read(self, due: list[_Feed]) -> None:
        feeds = [f for f in due if self._feeds.get(f.job_id) is f and f.position is not None]
        if not feeds:
            return
        for feed in feeds:
            feed.wanted = False
        after = {feed.job_id: feed.position for feed in feeds if feed.position is not None}
        try:
            pages = await events.read_after_many(self._pool, after, self._page)
        except (*db.DISCONNECTS, asyncpg.PostgresError) as exc:
            log.warning("hub_read_failed", jobs=len(feeds), error=str(exc))
            for feed in feeds:
                self._wake(feed)
            await asyncio.sleep(READ_RETRY_S)
            return
        except Exception:
            # A bug, not an outage: end these streams (their clients resume from their cursors)
            # rather than leave them waiting on feeds that no longer read.
            log.exception("hub_read_bug", jobs=len(feeds))
            for feed in feeds:
                self._close_feed(feed, "error")
            return
        self.reads += 1
        newest = None
        for feed in feeds:
            page = pages.get(feed.job_id)
            if not page or self._feeds.get(feed.job_id) is not feed:
                continue
            self._fan_out(feed, page)
            if newest is None or page[-1].at > newest:
                newest = page[-1].at
            if len(page) == self._page:
                self._wake(feed)  # a full page: there may be more
        if newest is not None:
            # The newest event of the read: how long after its commit this replica had it.
            self.lag.observe_since(newest)

    def _fan_out(self, feed: _Feed, page: list[events.Event]) -> None:
        assert feed.position is not None
        fresh = [event for event in page if event.seq > feed.position]
        if not fresh:
            return
        feed.position = fresh[-1].seq
        for sub in list(feed.subscribers):
            if not sub.offer(fresh):
                self.cut_off += 1
                log.warning("subscriber_cut_off", job_id=str(feed.job_id), buffer=self._buffer)
                sub.close("overflow")

    # --- tasks ---

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hub_task_failed", task=task.get_name(), exc_info=task.exception())
