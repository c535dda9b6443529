"""Lease renewals: every attempt of a worker renewed in one statement, fenced per attempt; the
same statement is the worker's heartbeat (jobstream/workers.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobstream.claims import Claimed
from jobstream.clock import Clock
from jobstream.db import Queryable
from jobstream.sql import queries


@dataclass(frozen=True)
class LeaseState:
    status: str
    cancel_requested_at: datetime | None


@dataclass(frozen=True)
class Renewal:
    """What one renewal of many leases found, by run token. An attempt in neither is fenced out."""

    renewed: dict[uuid.UUID, LeaseState]
    # Still held, but its row was locked by another write at that instant: try again soon.
    busy: set[uuid.UUID]


async def renew_many(
    pool: Queryable, helds: Sequence[Claimed], lease_s: float, clock: Clock, *, worker_id: str
) -> Renewal:
    """Renew every lease in `helds` in one statement, fenced per attempt (RENEW_LEASES), and
    refresh the heartbeat of worker `worker_id`, which holds them."""
    rows = await pool.fetch(
        queries.RENEW_LEASES,
        [held.job_id for held in helds],
        [held.run_token for held in helds],
        lease_s,
        clock.now(),
        worker_id,
    )
    renewed: dict[uuid.UUID, LeaseState] = {}
    busy: set[uuid.UUID] = set()
    for row in rows:
        if row["status"] is None:
            busy.add(row["run_token"])
        else:
            renewed[row["run_token"]] = LeaseState(row["status"], row["cancel_requested_at"])
    return Renewal(renewed, busy)
