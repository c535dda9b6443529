"""Connections to PostgreSQL: the pool, a dedicated connection, and the schema at start-up."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import orjson
import structlog
from asyncpg.pool import PoolConnectionProxy

from jobstream.errors import DatabaseUnavailable

log = structlog.get_logger(__name__)

T = TypeVar("T")

# A connection of our own or one borrowed from the pool: both run queries the same way.
Conn = asyncpg.Connection | PoolConnectionProxy
# Anything that can run a single statement (a pool borrows a connection for it).
Queryable = Conn | asyncpg.Pool

# Connection errors worth retrying at start-up: the server is starting, restarting or away.
RETRYABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.CannotConnectNowError,
    asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError,
)

# Errors that mean "the connection to PostgreSQL went away" (server restart, network loss, admin
# shutdown) as opposed to a bug in a statement: work in progress may retry these, and the
# listener reconnects on them. InterfaceError covers using a connection that has since closed.
DISCONNECTS = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InterfaceError,
)


# asyncpg's own default: a pool on a direct URL keeps what it always had.
ASYNCPG_STATEMENT_CACHE = 100


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


async def init_connection(conn: asyncpg.Connection) -> None:
    """Decode json/jsonb to Python values with orjson, both ways."""
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(
            typename, encoder=_dumps, decoder=orjson.loads, schema="pg_catalog"
        )


async def connect(
    url: str, *, timeout_s: float = 10, application_name: str | None = None
) -> asyncpg.Connection:
    """One connection of its own (LISTEN needs one that the pool never hands out).

    `application_name` shows in pg_stat_activity, so an operator can tell the listener apart.
    """
    server_settings = {"application_name": application_name} if application_name else None
    conn = await asyncpg.connect(url, timeout=timeout_s, server_settings=server_settings)
    await init_connection(conn)
    return conn


async def wait_for_database(url: str, timeout_s: float) -> None:
    """Retry until PostgreSQL answers, logging one line per try rather than a traceback."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    attempt = 0
    while True:
        attempt += 1
        try:
            conn = await asyncpg.connect(url, timeout=5)
        except RETRYABLE as exc:
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(
                    f"PostgreSQL unreachable after {attempt} tries: {exc}"
                ) from exc
            log.warning("database_unavailable", attempt=attempt, error=str(exc), retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        else:
            await conn.close()
            return


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A released connection keeps its session: asyncpg has already rolled back any open
    transaction, and nothing of ours leaves session state on a pool connection (LISTEN has its
    own connection; settings are transaction-scoped; the janitor unlocks its session advisory
    lock itself before it gives the connection back). The default reset sent
    `RESET ALL` and `pg_advisory_unlock_all()` on every release: a round trip per statement."""


async def start_with_database(
    url: str | None, timeout_s: float, step: Callable[[], Awaitable[T]]
) -> T:
    """Wait for PostgreSQL, then run a start-up `step` (a pool, the schema); if the database goes
    away again before the step is done (a restart just after it first answered), wait and run the
    step again, until `timeout_s` is spent. Then DatabaseUnavailable.

    The step must leave nothing open when it fails: it runs again from the start. `url` None: a
    step on a pool that is already open, tried again without a connection of our own to wait
    with (the pool makes its own).
    """
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        if url is not None:
            await wait_for_database(url, max(deadline - time.monotonic(), 0.0))
        try:
            return await step()
        except DISCONNECTS as exc:
            if time.monotonic() + delay > deadline:
                raise DatabaseUnavailable(f"PostgreSQL went away during start-up: {exc}") from exc
            log.warning(
                "database_lost_during_start",
                error=str(exc) or type(exc).__name__,
                retry_in_s=delay,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def create_pool(
    url: str,
    *,
    min_size: int,
    max_size: int,
    generic_plans: bool = False,
    application_name: str | None = None,
    pooler: bool = False,
) -> asyncpg.Pool:
    """A pool of connections ready for our statements. `generic_plans`: every prepared statement
    runs the plan the cache made once (plan_cache_mode = force_generic_plan), for a process that
    runs a few statements many times (the worker). Left to choose ("auto"), PostgreSQL planned
    the claim afresh at every call (0.6 ms of planning a claim) and the success statement too.
    `application_name` shows in pg_stat_activity. `pooler`: `url` is PgBouncer in transaction
    mode (JOBSTREAM_DIRECT_DATABASE_URL is set beside it)."""
    settings = {"plan_cache_mode": "force_generic_plan"} if generic_plans and not pooler else {}
    if application_name:
        settings["application_name"] = application_name
    # Through a transaction pooler each transaction may land on another server connection:
    # a statement prepared on one is unknown on the next, so asyncpg keeps none (it then
    # prepares each statement unnamed, per call). PgBouncer passes only a few startup
    # parameters on (application_name among them) and refuses a connection that sends
    # plan_cache_mode, so it is left out: unnamed statements are planned per call anyway.
    pool = await asyncpg.create_pool(
        url, min_size=min_size, max_size=max_size, init=init_connection, reset=_keep_session,
        server_settings=settings or None,
        statement_cache_size=0 if pooler else ASYNCPG_STATEMENT_CACHE,
    )  # fmt: skip
    assert pool is not None
    return pool
