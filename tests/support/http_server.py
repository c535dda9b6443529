"""A real uvicorn serving the app on a free loopback port, inside the test's event loop."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp

from jobstream.server.shutdown import DrainingServer

# One TLS context for the suite's clients: httpx makes one for each client otherwise, 45 ms of
# CPU loading the system's certificates, and these clients speak plain HTTP to loopback.
_TLS = ssl.create_default_context()


def http_client(base_url: str = "", **options: Any) -> httpx.AsyncClient:
    """An httpx client for the suite's servers on loopback."""
    return httpx.AsyncClient(base_url=base_url, verify=_TLS, **options)


class _PromptServer(DrainingServer):
    """Begins to stop as soon as `stop()` is called, not at uvicorn's next 0.1 s tick (about
    50 ms saved for each of the suite's few hundred servers); what it does then is unchanged."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self.should_exit = True
        self._stop.set()

    async def main_loop(self) -> None:
        # uvicorn's own loop, with its sleep made interruptible: a tick every 0.1 s.
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            try:
                async with asyncio.timeout(0.1):
                    await self._stop.wait()
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)


@asynccontextmanager
async def serve(
    app: ASGIApp, *, startup_timeout_s: float = 30, bind: str = "127.0.0.1", **options: Any
) -> AsyncIterator[str]:
    """Yield the base URL while uvicorn serves `app`; shut it down after. `options` are more
    uvicorn.Config arguments. `bind` "0.0.0.0" serves every address of the host too (the URL
    still names loopback), for a client that comes from elsewhere."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((bind, 0))
    port = sock.getsockname()[1]
    options.setdefault("timeout_graceful_shutdown", 2)
    options.setdefault("server_header", False)  # as server/__main__.py serves
    config = uvicorn.Config(app, log_config=None, lifespan="on", **options)
    # Tells an app from create_app that it is stopping, so its open streams end at once.
    server = _PromptServer(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="uvicorn")
    try:
        listening = asyncio.create_task(server.listening.wait())
        await asyncio.wait(
            {listening, task}, timeout=startup_timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if not server.listening.is_set():
            listening.cancel()
            if task.done():
                task.result()  # surfaces a start-up failure
                raise RuntimeError("uvicorn stopped before it started")
            raise TimeoutError(f"uvicorn did not listen within {startup_timeout_s} s")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        await asyncio.wait_for(task, timeout=15)
        sock.close()
