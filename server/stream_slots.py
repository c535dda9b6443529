"""Each tenant's open streams in this server process, capped (JOBSTREAM_TENANT_MAX_STREAMS).

A stream holds a connection for as long as it is open, and a process serves at most its
connection cap (server/connections.py; one more is uvicorn's 503). Uncapped, one tenant's
streams took every connection and left every other tenant 503, and the holder of one job's
events_url token, who needs no key, could do it alone by opening that job's stream again and
again. So a tenant may hold a share of the connections, and its next stream is refused with a
429 the client can act on while other tenants are still served.

What counts: anything that holds a connection open waiting on a job (an SSE stream of
/api/jobs/{id}/events or /v1/responses, a create under /v1 that waits for its job's end, a
long-poll that waits), counted against the job's tenant however it was opened: a stream opened
with a token counts against the tenant that owns the job. A slot is taken once when a stream is
accepted and given back once when it ends, whichever way (the client gone, the job ended, the
server stopping): never per event. The count is this process's, as the connections it protects
are; behind N replicas a tenant may hold N times the cap in all.
"""

from __future__ import annotations

from types import TracebackType

from jobstream.server import connections
from jobstream.server.problems import Problem
from jobstream.settings.server import ServerSettings

# Unset, a tenant may hold a quarter of the process's connections: three tenants at their cap
# still leave a quarter to everyone else.
SHARE_OF_CONNECTIONS = 4
# A slot frees when one of the tenant's own streams ends, which nobody can foresee: a refused
# client waits a few seconds, not a tight loop of requests that cost a key lookup and a read.
RETRY_AFTER_S = 5


def tenant_limit(configured: int | None, max_connections: int) -> int:
    """JOBSTREAM_TENANT_MAX_STREAMS, or a quarter of the connection cap (at least 1)."""
    if configured is not None:
        return configured
    return max(1, max_connections // SHARE_OF_CONNECTIONS)


def process_limit(settings: ServerSettings) -> int:
    """The cap on each tenant's streams in this process: its connection cap as __main__ sets it
    (the open-file limit it reads is the one __main__ raised before the app was made)."""
    served = connections.connection_limit(settings.max_connections, connections.open_file_limit())
    return tenant_limit(settings.tenant_max_streams, served)


def too_many_streams(limit: int) -> Problem:
    return Problem(
        429, "too-many-streams", "Too many open streams",
        f"This job's tenant has {limit} streams open on this server, its most at once: "
        "close one, or try again after Retry-After.",
        # Closed after the answer: a refused stream's connection, kept alive, would hold one of
        # the connections the cap is there to keep for others (JOBSTREAM_KEEP_ALIVE_S of it).
        headers={"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )  # fmt: skip


class Slot:
    """One open stream's place in its tenant's count: released once, however often asked (the
    stream's own end and a handler's clean-up may both try)."""

    __slots__ = ("_slots", "tenant")

    def __init__(self, slots: StreamSlots, tenant: str) -> None:
        self._slots: StreamSlots | None = slots
        self.tenant = tenant

    def release(self) -> None:
        slots, self._slots = self._slots, None
        if slots is not None:
            slots._release(self.tenant)

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


class StreamSlots:
    """The open streams of each tenant in this process, at most `limit` each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.refused = 0  # streams refused since the process started (/metrics)
        # Only tenants with a stream open: one entry each, gone with their last stream.
        self._open: dict[str, int] = {}

    def take(self, tenant: str) -> Slot:
        """A slot for one more of `tenant`'s streams; raises the 429 when it holds `limit`."""
        held = self._open.get(tenant, 0)
        if held >= self.limit:
            self.refused += 1
            raise too_many_streams(self.limit)
        self._open[tenant] = held + 1
        return Slot(self, tenant)

    def held(self, tenant: str) -> int:
        """How many streams `tenant` holds open now."""
        return self._open.get(tenant, 0)

    def _release(self, tenant: str) -> None:
        left = self._open[tenant] - 1
        if left:
            self._open[tenant] = left
        else:
            del self._open[tenant]
