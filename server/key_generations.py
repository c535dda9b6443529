"""The key generations of tenants named without a key, each read at most once a second.

A request with a key learns its generation from the key's own lookup (jobstream.tenants
key_holder), at no cost. A request without one is the `default` tenant's (keys off), which has
no lookup to ride on; its answers' events_url tokens still need the tenant's generation, and a
read per request would be a round trip on every create, list and get. So a server process
keeps it for a second: after `jobstream tenants revoke-key default`, tokens of the old
generation may be issued for up to that second, and are refused when used, as any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from jobstream.db import Queryable
from jobstream.sql import queries

MAX_AGE_S = 1.0


class KeyGenerations:
    def __init__(
        self, max_age_s: float = MAX_AGE_S, *, now: Callable[[], float] = time.monotonic
    ) -> None:
        self._max_age_s = max_age_s
        self._now = now
        self._known: dict[str, tuple[float, int]] = {}  # tenant -> (read at, generation)

    async def of(self, conn: Queryable, tenant_id: str) -> int:
        now = self._now()
        known = self._known.get(tenant_id)
        if known is not None and now - known[0] < self._max_age_s:
            return known[1]
        generation: int | None = await conn.fetchval(queries.TENANT_KEY_GENERATION, tenant_id)
        # No such tenant: nothing of its can be read or made (jobs reference tenants), so the
        # tokens it could be given name nothing; 1 is as good as any.
        value = generation if generation is not None else 1
        self._known[tenant_id] = (now, value)
        return value
