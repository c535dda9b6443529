"""One reader's way along a job's log after its cursor: the table first, then the hub.

`Tail.open` subscribes before the first read, so an event committed in between arrives by one
path or both, and seq removes the duplicate. Whatever the hub hands over that does not follow
the cursor exactly is treated as a wake-up and read from the table: the stream is correct even
if a wake-up is lost or late, only slower.

A log is gap-free as written; the janitor's compaction of a finished job (jobstream/retention.py)
leaves gaps that the event after each one explains: a token event with `from_seq` stands for the
events from `from_seq` to its own seq. A cursor just before such a range reads the compacted
event like the events it replaced; a cursor inside one gets `resync` (the text before the
cursor can no longer be told apart from the rest), as does a cursor before any gap that nothing
explains (events pruned).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg

from jobstream import events
from jobstream.events import Event
from jobstream.server.flag import Stop
from jobstream.server.hub import Hub
from jobstream.server.subscription import Subscription


class Tail:
    def __init__(
        self,
        pool: asyncpg.Pool,
        job_id: uuid.UUID,
        cursor: int,
        *,
        subscription: Subscription | None,
        last_seq: int,
        page: int = events.READ_LIMIT,
    ) -> None:
        self._pool = pool
        self._job_id = job_id
        self._sub = subscription
        self._page = page
        self._last_seq = last_seq  # the job's last_seq before the first read
        self._first_read = True
        self.cursor = cursor
        # The table may hold events past the cursor that this reader has not read yet.
        self.more = True
        self._ended = False  # the last event handed out was `done`

    @classmethod
    async def open(
        cls,
        hub: Hub,
        pool: asyncpg.Pool,
        job_id: uuid.UUID,
        cursor: int,
        *,
        last_seq: int,
        follow: bool,
        closed: Stop | None = None,
    ) -> Tail:
        """A reader's tail, following the job's new events through `hub` if `follow` (the
        subscription made now, before the first read); `close` it when done. `closed`, if given,
        is set when the subscription ends."""
        sub = await hub.subscribe(job_id, closed=closed) if follow else None
        return cls(pool, job_id, cursor, subscription=sub, last_seq=last_seq)

    def close(self) -> None:
        """Stop following (nothing to do for a tail that never followed)."""
        if self._sub is not None:
            self._sub.close()

    async def next(self) -> list[Event]:
        """The next events after the cursor, in order, waiting for the hub when there are none.

        Returns [] when there is nothing more and no subscription to wait on; raises
        SubscriptionClosed when the subscription ends.
        """
        while True:
            if self.more:
                page = await events.read_after(self._pool, self._job_id, self.cursor, self._page)
                self.more = len(page) == self._page
                first_read, self._first_read = self._first_read, False
                if page:
                    return self._take(page)
                if first_read and self._last_seq > self.cursor:
                    return [self._resync(self._last_seq + 1, attempt=0, at=datetime.now(UTC))]
                if self._ended:
                    # The last page was full and ended with `done`; this read found nothing
                    # after it. Regression: the stream then waited on the hub for ever.
                    return []
            if self._sub is None:
                return []
            batch = self._sub.take()
            if not batch:
                await self._sub.arrival()
                continue
            fresh = [e for e in batch if e.seq > self.cursor]
            if not fresh:
                if batch[-1].type == "done":
                    return []  # the log ended short of a cursor past its end: nothing will come
                continue
            if fresh[0].seq == self.cursor + 1 and fresh[-1].seq - fresh[0].seq == len(fresh) - 1:
                return self._take(fresh)
            self.more = True  # a gap: the table has what the hub did not bring

    def finished(self, batch: list[Event]) -> bool:
        """`done` was the last event of the log: the stream ends here.

        A `done` is the last event of its log: an operator's retry is a new job with a log of its
        own. Logs written before schema version 3 may still hold such a retry after a dead job's
        `done`, so only the last one ends the stream.
        """
        return bool(batch) and batch[-1].type == "done" and not self.more

    def _take(self, page: list[Event]) -> list[Event]:
        first = page[0]
        # The first seq the event stands for: its own, or a compacted range's first.
        start = first.data.get("from_seq", first.seq) if first.type == "token" else first.seq
        if start <= self.cursor:
            # Inside a compacted range: this reader has part of the folded text. It goes on
            # after the range, once it has the snapshot.
            head = self._resync(first.seq + 1, attempt=first.attempt, at=first.at)
            rest = page[1:]
            return [head, *self._advance(rest)] if rest else [head]
        if start > self.cursor + 1:
            # Nothing explains the gap: the events at the cursor were pruned.
            head = self._resync(first.seq, attempt=first.attempt, at=first.at)
            return [head, *self._advance(page)]
        return self._advance(page)

    def _advance(self, page: list[Event]) -> list[Event]:
        self._ended = page[-1].type == "done"
        self.cursor = page[-1].seq
        return page

    def _resync(self, first_seq: int, *, attempt: int, at: datetime) -> Event:
        """The in-band answer to a cursor older than what is retained (`resync` in docs/design.md).

        Its id is `first_seq - 1`, so a client that reconnects after it does not resync again.
        """
        self.cursor = first_seq - 1
        return Event(first_seq - 1, "resync", attempt, {"first_seq": first_seq}, at)
