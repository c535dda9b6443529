"""The per-job event log: append (fenced, seq-allocating, notifying) and read."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobstream import queries
from jobstream.db import Conn, Queryable
from jobstream.errors import Fenced
from jobstream.types import EventType

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

    def to_json(self) -> dict[str, Any]:
        """The event as API.md shows it: `{seq, type, attempt, at, ...fields}`."""
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


async def read_after(
    conn: Queryable, job_id: uuid.UUID, after: int, limit: int = READ_LIMIT
) -> list[Event]:
    rows = await conn.fetch(queries.EVENTS_AFTER, job_id, after, limit)
    return [
        Event(
            seq=r["seq"], type=r["type"], attempt=r["attempt"], data=r["data"], at=r["created_at"]
        )
        for r in rows
    ]


async def attempt_text(conn: Queryable, job_id: uuid.UUID, attempt: int) -> str:
    text: str = await conn.fetchval(queries.ATTEMPT_TEXT, job_id, attempt)
    return text
