"""Injected time. Production asks the database for the time; tests drive it by hand."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime | None:
        """The time to pass as `$now` to queries: None means the database's own clock."""


class DatabaseClock:
    """Leases and backoff are decided by PostgreSQL's clock, so hosts need not agree on time."""

    def now(self) -> datetime | None:
        return None
