"""A clock tests move by hand, injected where production passes `DatabaseClock`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    """A clock that moves only when a test moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now
