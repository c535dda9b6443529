"""What an attempt reacts to, delivered through one queue to its runner's single loop.

The provider stream, the lease renewals and the worker each post here; only the runner's loop
writes to the database, so token flushes never race each other or a status change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from worker.failure import Failure
from worker.providers.base import TextDelta


@dataclass(frozen=True)
class StreamEnded:
    """The provider finished its answer."""


@dataclass(frozen=True)
class StreamFailed:
    failure: Failure


@dataclass(frozen=True)
class CancelRequested:
    """The job row says `cancelling`: a client asked to stop it."""


@dataclass(frozen=True)
class LeaseLost:
    """Another attempt, a cancel or the reaper owns the job now: stop without writing."""

    reason: str


@dataclass(frozen=True)
class Interrupted:
    """The worker is shutting down: hand the job back to the queue."""


# How an attempt ends; the first of these to reach the runner wins.
Ending = StreamEnded | StreamFailed | CancelRequested | LeaseLost | Interrupted
Message = TextDelta | Ending
Inbox = asyncio.Queue[Message]
