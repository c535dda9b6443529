"""The per-job event log: append (fenced, seq-allocating, notifying) and read."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import orjson
import structlog

from jobstream.db import DISCONNECTS, Conn, Queryable
from jobstream.errors import Fenced
from jobstream.sql import queries
from jobstream.types import EventType

log = structlog.get_logger(__name__)

# A single read returns at most this many events; readers page on with the cursor.
READ_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class NewEvent:
    type: EventType
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    type: str
    attempt: int
    data: dict[str, Any]
    at: datetime

    # The event's SSE frame once built: the hub hands the same Event to every follower of its
    # job, so a wake-up's frames are encoded once, not once per follower.
    _frame: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Event:
        """An event as the events.sql reads return it (`created_at` is its `at`)."""
        return cls(row["seq"], row["type"], row["attempt"], row["data"], row["created_at"])

    def sse_frame(self) -> bytes:
        """The event as one SSE frame, `id` its seq, `data` its JSON (docs/design.md); built
        once."""
        frame = self._frame
        if frame is None:
            # The bytes sse.frame would build, at half its cost (a follower per stream of a
            # thousand, each sent a frame per token write): orjson writes `at` as isoformat
            # does, and escapes every CR and LF, so the JSON is one data line as it stands.
            data = orjson.dumps(
                {**self.data, "seq": self.seq, "type": self.type, "attempt": self.attempt,
                 "at": self.at}
            )  # fmt: skip
            frame = b"id: %d\nevent: %s\ndata: %s\n\n" % (self.seq, self.type.encode(), data)
            object.__setattr__(self, "_frame", frame)  # frozen: a cache, not a field change
        return frame

    def to_json(self) -> dict[str, Any]:
        """The event as docs/design.md shows it: `{seq, type, attempt, at, ...fields}`."""
        return {
            **self.data,
            "seq": self.seq,
            "type": self.type,
            "attempt": self.attempt,
            "at": self.at.isoformat(),
        }


async def append(
    conn: Conn,
    job_id: uuid.UUID,
    attempt: int,
    events: Sequence[NewEvent],
    *,
    run_token: uuid.UUID | None,
) -> int:
    """Append `events` to the job's log; returns the new last_seq.

    With a run_token the write is fenced: it raises Fenced when that attempt no longer holds the
    job. Callers that also change the job's status do both in one transaction.
    """
    if not events:
        raise ValueError("append needs at least one event")
    last_seq = await conn.fetchval(
        queries.APPEND_EVENTS,
        job_id,
        run_token,
        [e.type for e in events],
        attempt,
        [e.data for e in events],
    )
    if last_seq is None:
        raise Fenced(f"job {job_id}: run_token {run_token} no longer holds the job")
    return int(last_seq)


async def announce(conn: Queryable, grown: Sequence[tuple[uuid.UUID, int]]) -> None:
    """Tell the logs' followers, after the commit that grew them: (job id, its last seq) each.

    Never raises for a lost connection: what it announces is committed, and a follower whose
    NOTIFY is lost finds the events at its hub's next recheck (queries.NOTIFY_EVENTS).
    """
    if not grown:
        return
    try:
        await conn.execute(queries.NOTIFY_EVENTS, [j for j, _ in grown], [s for _, s in grown])
    except DISCONNECTS as exc:
        log.warning("notify_lost", jobs=len(grown), error=str(exc) or type(exc).__name__)


def expand(rows: Sequence[asyncpg.Record], after: int, limit: int) -> list[Event]:
    """The events of the log's rows (EVENTS_AFTER) after seq `after`, at most `limit`.

    A row of several events (schema.sql, job_events.earlier) holds its last at its seq and the
    ones before it in `earlier`. `limit` rows may hold more than `limit` events: the page is cut
    there, so that a full page still means "read on", and the next read, after the page's last
    seq, finds the rest of a cut row again (its last seq is past that cursor).
    """
    page: list[Event] = []
    for row in rows:
        earlier = row["earlier"]
        if earlier is not None:
            seq = row["seq"] - len(earlier)
            for kind, data in earlier:
                if seq > after:
                    page.append(Event(seq, kind, row["attempt"], data, row["created_at"]))
                seq += 1
        page.append(Event.from_row(row))
    return page[:limit] if len(page) > limit else page


async def read_after(
    conn: Queryable, job_id: uuid.UUID, after: int, limit: int = READ_LIMIT
) -> list[Event]:
    rows = await conn.fetch(queries.EVENTS_AFTER, job_id, after, limit)
    return expand(rows, after, limit)


async def read_after_many(
    conn: Queryable, after: dict[uuid.UUID, int], limit: int = READ_LIMIT
) -> dict[uuid.UUID, list[Event]]:
    """read_after for each job of `after` (job id -> seq read up to), in one statement."""
    rows = await conn.fetch(queries.EVENTS_AFTER_MANY, list(after), list(after.values()), limit)
    by_job: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for r in rows:
        by_job.setdefault(r["job_id"], []).append(r)
    return {job_id: expand(page, after[job_id], limit) for job_id, page in by_job.items()}


async def attempt_text(conn: Queryable, job_id: uuid.UUID, attempt: int) -> str:
    text: str = await conn.fetchval(queries.ATTEMPT_TEXT, job_id, attempt)
    return text
