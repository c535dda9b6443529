"""A LISTEN connection: the worker's wake-ups (runnable jobs, cancels) and the server hub's
(new events). Shared, so both reconnect and probe the same way.

A dedicated connection (a pool connection is handed to other work and its LISTENs go with it),
reconnected whenever it is lost. LISTEN is only a hint: notifications sent while the connection
was down are gone, so every (re)connect calls `on_connect`, and the owner re-reads the tables.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg
import structlog

from jobstream import db
from jobstream.sql import queries

log = structlog.get_logger(__name__)

# A connection can die silently (a firewall dropping idle flows): probe it this often.
PROBE_INTERVAL_S = 10.0
PROBE_TIMEOUT_S = 5.0
RECONNECT_MAX_S = 5.0

Handler = Callable[[str], None]


class Listener:
    def __init__(
        self,
        url: str,
        handlers: Mapping[str, Handler],
        *,
        on_connect: Callable[[], None],
        name: str,
        probe_interval_s: float = PROBE_INTERVAL_S,
    ) -> None:
        self._url = url
        self._handlers = dict(handlers)
        self._on_connect = on_connect
        self._name = name
        self._probe_interval_s = probe_interval_s
        # Set while LISTEN is in effect; tests and readiness checks wait on it.
        self.connected = asyncio.Event()

    async def run(self) -> None:
        """Listen forever, reconnecting with backoff; ends only when cancelled."""
        delay = 0.1
        while True:
            try:
                conn = await db.connect(self._url, application_name=self._name)
            except Exception as exc:
                log.warning("listener_connect_failed", error=str(exc) or type(exc).__name__)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            try:
                await self._listen(conn)
                delay = 0.1
            except Exception as exc:
                if isinstance(exc, db.DISCONNECTS):
                    log.warning("listener_lost", error=str(exc) or type(exc).__name__)
                else:
                    log.exception("listener_failed")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
            finally:
                self.connected.clear()
                await _close(conn)

    async def _listen(self, conn: asyncpg.Connection) -> None:
        """LISTEN on `conn` until it is lost (raises) or closed by the server (returns)."""
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        for channel, handler in self._handlers.items():
            await conn.add_listener(channel, _adapt(handler))
        self.connected.set()
        log.info("listening", channels=sorted(self._handlers))
        self._on_connect()
        while not lost.is_set():
            try:
                async with asyncio.timeout(self._probe_interval_s):
                    await lost.wait()
            except TimeoutError:
                await conn.fetchval(queries.PING, timeout=PROBE_TIMEOUT_S)
        log.warning("listener_lost", error="connection closed")


def _adapt(handler: Handler) -> Any:
    def callback(_conn: object, _pid: int, _channel: str, payload: object) -> None:
        handler(str(payload))

    return callback


async def _close(conn: asyncpg.Connection) -> None:
    if conn.is_closed():
        return
    try:
        await conn.close(timeout=2)
    except Exception:
        conn.terminate()
