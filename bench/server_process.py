"""A `python -m jobstream.server` process for a benchmark, and the wait until it answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx

from bench import queue_common as common
from jobstream.ports import free_port


async def wait_healthy(
    client: httpx.AsyncClient,
    *,
    timeout_s: float,
    poll_s: float,
    alive: Callable[[], None] = lambda: None,
) -> None:
    """Until GET /healthz answers 200; `alive` raises if the server process has died."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        try:
            if (await client.get("/healthz")).status_code == 200:
                return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(poll_s)


@asynccontextmanager
async def server_process(
    url: str, *, pool_max: int, pooled_url: str | None = None
) -> AsyncIterator[str]:
    """A server on `url`'s database with a pool of `pool_max` connections; yields its base URL
    once it answers. `pooled_url`: the same database through PgBouncer, for the pool, with
    `url` as JOBSTREAM_DIRECT_DATABASE_URL."""
    port = free_port()
    env = {
        **common.database_env(url, pooled_url),
        "JOBSTREAM_PORT": str(port),
        "JOBSTREAM_DB_POOL_MAX": str(pool_max),
        "JOBSTREAM_LOG_LEVEL": "warning",
    }
    process = await common.spawn("server", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            alive = common.check_alive([process])
            await wait_healthy(client, timeout_s=60, poll_s=common.POLL_S, alive=alive)
        yield base
    finally:
        await common.stop_all([process])
