"""Injected time. Production asks the database for the time; tests drive it by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime | None:
        """The time to pass as `$now` to queries: None means the database's own clock."""


class DatabaseClock:
    """Leases and backoff are decided by PostgreSQL's clock, so hosts need not agree on time."""

    def now(self) -> datetime | None:
        return None


class ManualClock:
    """A clock that moves only when a test moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now
