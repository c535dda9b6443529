"""Provider pauses: after a 429, no worker claims that provider's jobs until the pause ends."""

from __future__ import annotations

from datetime import datetime

from jobstream.clock import Clock
from jobstream.db import Queryable
from jobstream.sql import queries


async def pause(conn: Queryable, provider: str, seconds: float, clock: Clock) -> datetime:
    """Pause `provider` for `seconds` (never shortening a longer pause); returns its end."""
    until: datetime = await conn.fetchval(queries.PAUSE_PROVIDER, provider, seconds, clock.now())
    return until
